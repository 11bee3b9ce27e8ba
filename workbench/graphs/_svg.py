"""A static SVG of one method's graph (the twin of the live viewer, for GitHub readers).

Layered layout: each node sits one layer below its deepest producer (edges marked as defects
do not count, so a cycle cannot loop the layout); nodes of a delegate group are framed with
the group's name; defects are red. Plain SVG text, no dependency.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._model import Graph

__all__ = ["svg"]

W, H, GAP_X, GAP_Y, PAD = 150, 34, 18, 30, 20
FILL = {"kernel": "#dbe9f6", "delegate": "#fde2c4", "delegate_node": "#fff3e0",
        "delegate_constant": "#eeeeee", "constant": "#eeeeee", "input": "#d9f2d9",
        "output": "#d9f2d9", "delegate_input": "#f1f8e9", "delegate_output": "#f1f8e9",
        "call": "#dbe9f6", "state": "#ede7f6", "missing": "#ffcdd2", "compiled": "#fde2c4"}


def svg(g: Graph, *, max_nodes: int = 400) -> str:
    """The SVG text of ``g`` (one method), at most ``max_nodes`` nodes (the rest summarised).

    Example:
        >>> import workbench as wb
        >>> svg(wb.graph("sample_models/mlp_portable.pte"))[:4]     # doctest: +SKIP
        '<svg'
    """
    nodes = g.nodes.head(max_nodes)
    ids = nodes["id"].tolist()
    keep = set(ids)
    e = g.edges[g.edges["source"].isin(keep) & g.edges["target"].isin(keep)]
    preds: dict[str, list[str]] = {i: [] for i in ids}
    for s, t, d in zip(e["source"], e["target"], e["defect"].isna()):
        if d and s != t:
            preds[t].append(s)
    layer: dict[str, int] = {}
    for start in ids:  # iterative longest path from the sources
        stack = [start]
        while stack:
            n = stack[-1]
            if n in layer:
                stack.pop()
                continue
            todo = [p for p in preds[n] if p not in layer and p not in stack]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            layer[n] = 1 + max((layer.get(p, -1) for p in preds[n]), default=-1)
    rows: dict[int, list[str]] = {}
    for i in ids:
        rows.setdefault(layer[i], []).append(i)
    pos = {}
    for y, members in rows.items():
        for x, i in enumerate(members):
            pos[i] = (PAD + x * (W + GAP_X), PAD + 16 + y * (H + GAP_Y))
    width = PAD * 2 + max((len(r) for r in rows.values()), default=1) * (W + GAP_X)
    height = PAD * 2 + 16 + max(rows, default=0) * (H + GAP_Y) + H + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           f'<text x="{PAD}" y="{PAD}" font-size="12">{escape(g.source)} '
           f'{escape(", ".join(g.methods))}: {len(g.nodes)} nodes, {len(g.edges)} edges'
           f'{" (first " + str(max_nodes) + " drawn)" if len(g.nodes) > max_nodes else ""}</text>']
    # delegate groups: a frame around their nodes
    for ns, grp in nodes[nodes["namespace"].fillna("") != ""].groupby("namespace"):
        xs = [pos[i][0] for i in grp["id"]]
        ys = [pos[i][1] for i in grp["id"]]
        x0, y0, x1, y1 = min(xs) - 6, min(ys) - 14, max(xs) + W + 6, max(ys) + H + 6
        out.append(f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="none" '
                   f'stroke="#e65100" stroke-dasharray="4 2"/><text x="{x0 + 4}" y="{y0 + 10}" '
                   f'fill="#e65100">{escape(str(ns))}</text>')
    for s, t, d in zip(e["source"], e["target"], e["defect"]):
        (x0, y0), (x1, y1) = pos[s], pos[t]
        color = "#c62828" if isinstance(d, str) else "#607d8b"
        out.append(f'<line x1="{x0 + W / 2}" y1="{y0 + H}" x2="{x1 + W / 2}" y2="{y1}" '
                   f'stroke="{color}" stroke-width="1"/>')
    for i, kind, label, defect in zip(ids, nodes["kind"], nodes["label"], nodes["defect"]):
        x, y = pos[i]
        bad = isinstance(defect, str)
        text = escape(str(label)[:26])
        out.append(f'<g><title>{escape(i)}: {escape(str(defect) if bad else str(kind))}</title>'
                   f'<rect x="{x}" y="{y}" width="{W}" height="{H}" rx="4" '
                   f'fill="{FILL.get(str(kind), "#ffffff")}" '
                   f'stroke="{"#c62828" if bad else "#455a64"}"/>'
                   f'<text x="{x + 5}" y="{y + 14}">{text}</text>'
                   f'<text x="{x + 5}" y="{y + 27}" fill="#546e7a">{escape(str(kind))}</text></g>')
    out.append("</svg>")
    return "\n".join(out)
