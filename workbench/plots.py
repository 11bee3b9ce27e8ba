"""Pictures of artifacts: byte layouts, tensor sizes, module treemaps, memory plans, comparisons.

Plots know frames only (``art.segments``, ``art.tensors``, ``art.frames["memory_plan"]``, a
:class:`~workbench.comparison.Comparison`'s frames); they never parse. matplotlib (and squarify
for the treemap) is imported inside the functions, and every function builds a
``matplotlib.figure.Figure`` with the object API — no pyplot state — so it works headless,
in scripts, threads and notebooks. Every function returns the Figure: show it in a notebook
cell, or ``fig.savefig("x.png")``.

Colours come from the vocabulary (:mod:`workbench.vocab`, where every kind and storage is
defined with its colour): :data:`KIND_COLORS` (segment kinds), :data:`STORAGE_COLORS` (tensor
storages), :data:`CLASS_COLORS` (the byte classes of a comparison summary), :data:`TIME_COLORS`
(timeline kinds) and :data:`LINK_COLORS` (compare links); they are re-exported here.
Padding is drawn hatched. Text is placed only where it fits inside its span (measured, not
guessed), so labels never overlap; the legend names every colour used.

Artists carry a ``gid`` that says what they stand for, so tests and tools can count them.
Many-item marks are collections — one ``PolyCollection`` per kind / storage / link type,
labelled with it, one path per item — so a 20,000-segment archive draws in about a second:
``segment`` (layout spans), ``tensor`` (memory-plan tensors), ``link`` (compare ribbons).
Few-item marks are patches: ``tensor`` (tensor_sizes bars), ``module`` (treemap), ``arena``,
``class`` (compare totals).

>>> from workbench import plots
>>> fig = plots.layout(wb.open("sample_models/mlp_external.pte"))     # doctest: +SKIP
>>> len(fig.axes[0].get_yticks())      # one band per file              # doctest: +SKIP
2
>>> sum(len(c.get_paths()) for c in fig.axes[0].collections
...     if c.get_gid() == "segment")   # one span per segment           # doctest: +SKIP
11
"""

from __future__ import annotations

import bisect
import math
import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Union

from ._fmt import escape, human_bytes
from .vocab import (
    CLASS_COLORS,
    CLASSES,
    KIND_COLORS,
    LINK_COLORS,
    OTHER_COLOR,
    STORAGE_COLORS,
    TIME_COLORS,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .artifact import Artifact
    from .comparison import Comparison

__all__ = ["layout", "anatomy", "tensor_sizes", "treemap", "memory_plan", "compare", "load_paths",
           "timeline", "operators", "lifetimes", "memory",
           "KIND_COLORS", "STORAGE_COLORS", "CLASS_COLORS", "TIME_COLORS"]

_HATCH = "////"
_EDGE = "#555555"
_BAND_H = 0.62
_FONT = 8

PlotSource = Union["Artifact", "Comparison"]


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------

def _text(s: object, limit: int | None = None) -> str:
    """Safe text for matplotlib: control characters escaped, ``$`` not mathtext, shortened."""
    t = escape(s)
    if limit is not None and len(t) > limit:
        keep = limit - 1
        t = t[: (keep + 1) // 2] + "…" + t[len(t) - keep // 2:]
    return t.replace("$", r"\$")


def _figure(width: float, height: float) -> Figure:
    """A new Figure (object API, Agg canvas, constrained layout) that notebooks display."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained", dpi=100)
    FigureCanvasAgg(fig)
    _register_notebook_display()
    return fig


def _register_notebook_display() -> None:
    """In IPython, show a bare ``Figure`` as PNG even when pyplot was never imported."""
    ipy = sys.modules.get("IPython")
    if ipy is None:
        return
    try:
        shell = ipy.get_ipython()
        if shell is None:
            return
        from matplotlib.figure import Figure

        fmt = shell.display_formatter.formatters["image/png"]
        try:
            fmt.lookup_by_type(Figure)
        except KeyError:
            from IPython.core.pylabtools import print_figure

            fmt.for_type(Figure, lambda fig: print_figure(fig, "png", bbox_inches="tight"))
    except Exception:  # display sugar must never break a plot
        return


def _luminance(color: str) -> float:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return 0.299 * r + 0.587 * g + 0.114 * b


def _ink(color: str) -> str:
    """Black or white text, whichever reads better on ``color``."""
    return "black" if _luminance(color) > 0.5 else "white"


def _kind_color(kind: str) -> str:
    return KIND_COLORS.get(kind, OTHER_COLOR)


def _bytes_axis(axis: Any, span: float) -> None:
    """Byte ticks at power-of-two steps (1 KiB, 64 MiB, ...), about 4-8 of them."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    step = 2.0 ** max(0, math.ceil(math.log2(max(span, 1.0) / 6)))
    axis.set_major_locator(MultipleLocator(step))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: human_bytes(x) if x >= 0 else ""))


class _Label:
    """A text to place inside a rectangle (data coords); the first candidate that fits wins."""

    __slots__ = ("ax", "x0", "x1", "y0", "y1", "candidates", "color", "artist")

    def __init__(self, ax: Axes, x0: float, x1: float, y0: float, y1: float,
                 candidates: Sequence[str], color: str) -> None:
        self.ax, self.x0, self.x1, self.y0, self.y1 = ax, x0, x1, y0, y1
        self.candidates = [c for c in candidates if c]
        self.color = color
        self.artist: Any = None


def _place_labels(fig: Figure, labels: Iterable[_Label], limit: int = 300) -> int:
    """Put each label's first fitting candidate in its box; drop those that fit nowhere.

    Text extents are measured with the figure's renderer after layout, so nothing spills
    out of its box and no two labels overlap. Boxes too small for the shortest candidate
    (estimated) are skipped unmeasured; at most ``limit`` boxes, the widest first, are tried.
    Returns the number of labels placed.
    """
    import numpy as np

    labels = [lb for lb in labels if lb.candidates]
    if not labels:
        return 0
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    char_px = 0.45 * _FONT * fig.dpi / 72  # a lenient lower bound of a character's width
    boxes: list[tuple[float, float, _Label]] = []
    by_ax: dict[int, list[_Label]] = {}
    for lb in labels:
        by_ax.setdefault(id(lb.ax), []).append(lb)
    for group in by_ax.values():
        corners = np.array([[(lb.x0, lb.y0), (lb.x1, lb.y1)] for lb in group], dtype=float)
        px = group[0].ax.transData.transform(corners.reshape(-1, 2)).reshape(-1, 2, 2)
        widths = np.abs(px[:, 1, 0] - px[:, 0, 0]) - 4
        heights = np.abs(px[:, 1, 1] - px[:, 0, 1]) - 2
        for lb, w, h in zip(group, widths.tolist(), heights.tolist()):
            shortest = min(max(len(line) for line in c.split("\n")) for c in lb.candidates)
            if w >= shortest * char_px and h >= 8:
                boxes.append((w, h, lb))
    boxes.sort(key=lambda b: -b[0])
    placed: list[Any] = []
    for box_w, box_h, lb in boxes[:limit]:
        t = lb.ax.text((lb.x0 + lb.x1) / 2, (lb.y0 + lb.y1) / 2, "", ha="center", va="center",
                       fontsize=_FONT, color=_ink(lb.color), zorder=5, clip_on=True)
        for cand in lb.candidates:
            t.set_text(cand)
            bb = t.get_window_extent(renderer)
            if bb.width <= box_w and bb.height <= box_h and not any(
                    bb.overlaps(o) for o in placed):
                placed.append(bb)
                lb.artist = t
                break
        else:
            t.remove()
    return len(placed)


def _spans(ax: Axes, by: str, items: Iterable[tuple[str, float, float, float, float, float]],
           colors: dict[str, str], zorder: float = 2, alpha: float | None = None) -> None:
    """Rectangles ``(key, x, y, width, height, linewidth)`` as one collection per key.

    A collection (not one patch per rectangle) keeps 20,000-segment files fast. Each has
    ``gid`` = ``by`` and ``label`` = the key; padding is hatched.
    """
    from matplotlib.collections import PolyCollection

    groups: dict[str, tuple[list, list]] = {}
    for key, x, y, w, h, lw in items:
        verts, lws = groups.setdefault(key, ([], []))
        verts.append([(x, y), (x, y + h), (x + w, y + h), (x + w, y)])
        lws.append(lw)
    for key, (verts, lws) in groups.items():
        padding = key == "padding"
        ax.add_collection(PolyCollection(
            verts, facecolors=colors.get(key, OTHER_COLOR),
            edgecolors=_EDGE if padding else "white", linewidths=lws,
            hatch=_HATCH if padding else None, zorder=zorder, gid=by, label=key, alpha=alpha),
            autolim=False)


class _Scale:
    """Byte offset -> x of one file: linear, or each segment as wide as log2(1 + size/16).

    Piecewise linear inside a segment, so any byte range (a tensor inside a segment) maps.
    """

    def __init__(self, offsets: Sequence[int], sizes: Sequence[int], log: bool) -> None:
        self.log = log
        self.starts = list(offsets)
        self.sizes = list(sizes)
        self.x0: list[float] = []
        x = 0.0
        for off, size in zip(self.starts, self.sizes):
            if not log:
                x = float(off)
            self.x0.append(x)
            x += self.width(size)
        self.end = x if log else float(self.starts[-1] + self.sizes[-1]) if self.starts else 0.0

    def width(self, size: int) -> float:
        return math.log2(1 + size / 16) if self.log else float(size)

    def x(self, offset: int) -> float:
        if not self.log:
            return float(offset)
        i = max(bisect.bisect_right(self.starts, offset) - 1, 0)
        while i > 0 and self.sizes[i] == 0:
            i -= 1
        if not self.starts:
            return 0.0
        size = self.sizes[i]
        frac = min(max((offset - self.starts[i]) / size, 0.0), 1.0) if size else 0.0
        return self.x0[i] + frac * self.width(size)


def _bands_of(obj: PlotSource) -> list[tuple[str, str, str, pd.DataFrame]]:
    """(label prefix, side, file, segments of the file) for every file, in display order."""
    from .comparison import Comparison

    sides = ([("a: ", "a", obj.a), ("b: ", "b", obj.b)] if isinstance(obj, Comparison)
             else [("", "", obj)])
    out = []
    for prefix, side, art in sides:
        seg = art.segments
        for f in dict.fromkeys([*art.files, *(str(x) for x in seg["file"])]):
            rows = seg[seg["file"] == f]
            if len(rows):
                out.append((prefix, side, f, rows))
    return out


def _draw_band(ax: Axes, seg: pd.DataFrame, y: float, scale: _Scale, labels: list[_Label]
               ) -> list[str]:
    """Draw one file's segments as spans centred on ``y``; returns the kinds drawn.

    The sub-segments of a delegate blob (rows named ``"<used_by>: <part>"``) are labelled by
    their part, and a bracket above the band spans the whole blob, labelled with the
    delegate (``gid`` ``delegate_blob``)."""
    kinds = []
    items = []
    full = scale.end or 1.0
    used = seg["used_by"].tolist() if "used_by" in seg.columns else [None] * len(seg)
    blobs: dict[str, list[float]] = {}
    for i, (name, kind, size) in enumerate(zip(seg["name"], seg["kind"], seg["size"])):
        kind = str(kind)
        x0 = scale.x0[i]
        w = scale.width(int(size))
        # edges only where a span is wide enough for them not to paint the band white
        items.append((kind, x0, y - _BAND_H / 2, w, _BAND_H, 0.6 if w / full > 0.004 else 0.0))
        kinds.append(kind)
        owner = used[i]
        if isinstance(owner, str) and owner and str(name).startswith(owner + ": "):
            name = str(name)[len(owner) + 2:]
            span = blobs.setdefault(owner, [x0, x0 + w])
            span[0], span[1] = min(span[0], x0), max(span[1], x0 + w)
        if size and kind != "padding":
            labels.append(_Label(ax, x0, x0 + w, y - _BAND_H / 2, y + _BAND_H / 2,
                                 [f"{_text(name, 28)}\n{human_bytes(int(size))}",
                                  f"{_text(name, 16)}\n{human_bytes(int(size))}",
                                  human_bytes(int(size))], _kind_color(kind)))
    _spans(ax, "segment", items, KIND_COLORS)
    top = y + _BAND_H / 2
    for owner, (x0, x1) in blobs.items():
        ax.plot([x0, x0, x1, x1], [top + 0.02, top + 0.08, top + 0.08, top + 0.02],
                color=KIND_COLORS["delegate"], linewidth=1.2, gid="delegate_blob",
                solid_capstyle="butt", clip_on=False, zorder=4)
        # placed like the span labels: only where it fits, never over another label
        short = owner.replace(" delegate ", " d").split(" (")[0]
        labels.append(_Label(ax, x0, x1, top + 0.09, top + 0.3,
                             [_text(owner, 60), _text(owner, 30), short], "#ffffff"))
    return kinds


def _kind_legend(kinds: Iterable[str]) -> list[Any]:
    from matplotlib.patches import Patch

    seen = list(dict.fromkeys(kinds))
    return [Patch(facecolor=_kind_color(k), edgecolor=_EDGE if k == "padding" else "none",
                  hatch=_HATCH if k == "padding" else None, label=k) for k in seen]


def _band_axes(ax: Axes, ys: list[float], ticks: list[str], xmax: float, log: bool) -> None:
    ax.set_yticks(ys, ticks, fontsize=_FONT + 1)
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.set_xlim(0, xmax * 1.13 if xmax else 1)
    for s in ("top", "right", "left"):
        ax.spines[s].set_visible(False)
    if log:
        ax.set_xticks([])
        ax.set_xlabel("segments in file order; widths ∝ log2(1 + size/16) — labels give "
                      "the true sizes", fontsize=_FONT)
    else:
        _bytes_axis(ax.xaxis, xmax)
        ax.tick_params(axis="x", labelsize=_FONT)
        ax.set_xlabel("byte offset", fontsize=_FONT)


# ------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------

def layout(obj: PlotSource, log: bool = False) -> Figure:
    """Byte map: one horizontal band per file, every segment a span coloured by its kind.

    Padding is hatched; big spans are labelled with name and size; the legend names every
    kind drawn. Pass a :class:`~workbench.comparison.Comparison` to stack both sides' files.
    With ``log=True`` each span is as wide as log2(1 + size/16) (file order kept), so a
    16 KiB flatbuffer stays visible next to 400 MiB of weights (10 vs 24.6 units).

    Args:
        obj: an :class:`~workbench.Artifact` or a :class:`~workbench.comparison.Comparison`.
        log: log-scaled widths instead of byte offsets.

    Returns:
        The Figure: one Axes; one y tick per file; ``segment`` collections (one per file and
        kind) with a path per row of ``segments`` (zero-size rows included, without width).

    Example:
        >>> fig = layout(wb.open("sample_models/mlp_xnnpack.pte", data=[]), log=True)  # doctest: +SKIP
        >>> fig.savefig("mlp_xnnpack_layout.png")                                     # doctest: +SKIP
    """
    bands = _bands_of(obj)
    fig = _figure(11, 1.3 + 0.75 * len(bands))
    ax = fig.add_subplot()
    labels: list[_Label] = []
    kinds: list[str] = []
    ys, ticks = [], []
    xmax = 0.0
    for i, (prefix, _side, f, seg) in enumerate(bands):
        y = -float(i)
        scale = _Scale([int(o) for o in seg["offset"]], [int(s) for s in seg["size"]], log)
        kinds += _draw_band(ax, seg, y, scale, labels)
        total = int(seg["size"].sum())
        ax.text(scale.end, y, f"  {human_bytes(total)}", va="center", ha="left",
                fontsize=_FONT, color="#333333")
        xmax = max(xmax, scale.end)
        ys.append(y)
        ticks.append(f"{prefix}{_text(os.path.basename(f), 30)}")
    _band_axes(ax, ys, ticks, xmax, log)
    ax.set_title(_layout_title(obj, log), fontsize=_FONT + 2, loc="left")
    fig.legend(handles=_kind_legend(kinds), loc="outside lower center",
               ncols=min(len(set(kinds)), 8), frameon=False, fontsize=_FONT)
    _place_labels(fig, labels)
    return fig


def _layout_title(obj: PlotSource, log: bool) -> str:
    from .comparison import Comparison

    if isinstance(obj, Comparison):
        what = (f"{_text(os.path.basename(obj.a.path))} vs "
                f"{_text(os.path.basename(obj.b.path))}")
    else:
        what = f"{_text(os.path.basename(obj.path))} [{obj.format}]"
    return f"byte layout of {what}" + (" (log widths)" if log else "")


#: What a region holds, by ``(kind, name)`` (a delegate part by its part name): the words of
#: the .pte / .ptd / delegate formats, used by :func:`anatomy`.
_ROLES: dict[tuple[str, str], str] = {
    ("header", "flatbuffer root"): "u32 offset of the root table, then the file identifier",
    ("header", "extended header"): "eh00 header: program size, segment base offset, segment data size",
    ("header", "FlatTensor header"): "FH01 header: flatbuffer offset and size, segment base, data size",
    ("flatbuffer", "program"): "the Program flatbuffer: methods, values, instructions, tensor metadata",
    ("flatbuffer", "FlatTensor"): "the FlatTensor flatbuffer: keys, tensor layouts, segment table",
    ("flatbuffer", "BundledProgram"): "the BundledProgram flatbuffer: test suites around the program",
    ("header", "header (XH00)"): "XNNPACK blob header: where its graph and its constant data are",
    ("flatbuffer", "XNNGraph flatbuffer (XN01)"): "XNNPACK's compiled graph: values, nodes, constants",
}

#: What a region of a kind holds, where :data:`_ROLES` has no entry for its name.
_KIND_ROLES: dict[str, str] = {
    "constant": "constant segment: the weights the program stores itself",
    "mutable_data": "initial values of mutable buffers, copied into the arena at load",
    "named_data": "named data: bytes a backend or the runtime looks up by key",
    "delegate": "a delegate blob: the backend's compiled payload, in the parts below",
    "test_data": "a bundled test input or expected output",
}

_ANATOMY_ROW_IN = 0.42  # inches per row


def _role(kind: str, name: str, used_by: object, size: int, next_offset: int | None) -> str:
    """One line that says what a region of a file holds (from its segments row only)."""
    if kind == "padding":
        return (f"padding: the next region starts at offset {next_offset:,}"
                if next_offset is not None else "padding to the end of the file")
    if kind == "constant" and size == 0:
        return "constant segment: empty (this program keeps no weights in it)"
    base = name.rsplit(": ", 1)[-1]  # "program: padding" inside a .bpte
    role = _ROLES.get((kind, base)) or _KIND_ROLES.get(kind) or kind
    if base == "flatbuffer root" and isinstance(used_by, str) and "+ " in used_by:
        role += " " + used_by.rsplit("+ ", 1)[1]
    return role


def _anatomy_rows(seg: pd.DataFrame) -> list[tuple[str, str, str, int, int, str, int]]:
    """``(what, kind, name, offset, size, role, depth)`` per row to draw for one file: every
    segment (``what == "segment"``), and before the parts of a delegate blob (rows named
    ``"<used_by>: <part>"``, drawn at depth 1 by their part name) a row for the whole blob."""
    used = seg["used_by"].tolist() if "used_by" in seg.columns else [None] * len(seg)
    names = seg["name"].astype(str).tolist()
    kinds = seg["kind"].astype(str).tolist()
    offsets = [int(o) for o in seg["offset"]]
    sizes = [int(s) for s in seg["size"]]
    part = [isinstance(u, str) and bool(u) and n.startswith(u + ": ") for n, u in zip(names, used)]
    rows: list[tuple[str, str, str, int, int, str, int]] = []
    seen: set[str] = set()
    for i in range(len(seg)):
        name, depth = names[i], 0
        if part[i]:
            owner = str(used[i])
            name, depth = name[len(owner) + 2:], 1
            if owner not in seen:
                seen.add(owner)
                blob = sum(s for s, u, p in zip(sizes, used, part) if p and u == owner)
                rows.append(("blob", "delegate", owner, offsets[i], blob,
                             _KIND_ROLES["delegate"], 0))
        nxt = offsets[i + 1] if i + 1 < len(offsets) else None
        rows.append(("segment", kinds[i], name, offsets[i], sizes[i],
                     _role(kinds[i], name, used[i], sizes[i], nxt), depth))
    return rows


def anatomy(art: Artifact, max_rows: int = 48) -> Figure:
    """The anatomy of an artifact: every region of each file (a row of ``art.segments``) in
    file order, labelled with its name, offset, size and what it holds.

    Not to scale — every region gets a row, so an 8-byte header is as legible as megabytes
    of weights; the bar in each row, as long as log2(1 + size/16), hints at the size. The
    parts of a delegate blob are indented under a row for the whole blob (outlined). One
    column per file: a ``.pte`` and its ``.ptd`` side by side. :func:`layout` draws the same
    rows to scale.

    Args:
        art: any :class:`~workbench.Artifact` (only its segments frame is read).
        max_rows: at most this many rows per file; a last line says how many were left out.

    Returns:
        The Figure: one Axes per file; a ``segment`` patch per region (``label`` = its kind),
        a ``delegate_blob`` patch per delegate blob (``label`` = the delegate), and for each a
        ``region_label`` text with its name, offset and size in bytes.

    Example:
        >>> art = wb.open("sample_models/mlp_xnnpack_external.pte")       # doctest: +SKIP
        >>> plots.anatomy(art).savefig("anatomy.png")                      # doctest: +SKIP
    """
    from matplotlib.patches import Rectangle

    seg_all = art.segments
    files = [f for f in dict.fromkeys([*art.files, *(str(x) for x in seg_all["file"])])
             if (seg_all["file"] == f).any()]
    plans = [(f, _anatomy_rows(seg_all[seg_all["file"] == f]),
              int(seg_all.loc[seg_all["file"] == f, "size"].sum())) for f in files]
    shown = max((min(len(rows), max_rows + 1) for _f, rows, _t in plans), default=1)
    fig = _figure(6.4 * max(len(plans), 1), 0.7 + _ANATOMY_ROW_IN * shown)
    axes = fig.subplots(1, max(len(plans), 1), squeeze=False)[0]
    biggest = max((math.log2(1 + r[4] / 16) for _f, rows, _t in plans for r in rows), default=1.0)
    for ax, (f, rows, total) in zip(axes, plans):
        ax.set_axis_off()
        ax.set_xlim(0, 10)
        ax.set_ylim(shown - 0.5, -0.6)
        n_seg = sum(r[0] == "segment" for r in rows)
        ax.set_title(_text(f"{os.path.basename(f)}: {total:,} bytes in {n_seg} regions "
                           "(in file order, not to scale)"), fontsize=_FONT + 1, loc="left")
        for y, (what, kind, name, off, size, role, depth) in enumerate(rows[:max_rows]):
            x0 = 0.3 * depth
            color = _kind_color(kind)
            if what == "blob":
                ax.add_patch(Rectangle((0, y - 0.4), 2.1, 0.8, gid="delegate_blob", label=name,
                                       facecolor="none", edgecolor=color, linewidth=1.5))
                last = y + 1
                while last < min(len(rows), max_rows) and rows[last][6] == 1:
                    last += 1
                ax.plot([0.12, 0.12], [y + 0.4, last - 1], color=color, linewidth=1.5,
                        gid="delegate_blob_parts")
            else:
                w = 0.2 + 1.6 * math.log2(1 + size / 16) / max(biggest, 1e-9)
                padding = kind == "padding"
                ax.add_patch(Rectangle((x0 + 0.2 * depth, y - 0.3), w, 0.6, gid="segment",
                                       label=kind, facecolor=color, linewidth=0.6,
                                       edgecolor=_EDGE if padding else "none",
                                       hatch=_HATCH if padding else None))
            tx = 2.3 + 0.3 * depth
            ax.text(tx, y - 0.12, f"{_text(name, 46 - 3 * depth)}  ·  offset {off:,}  ·  {size:,} B",
                    fontsize=_FONT, va="center", ha="left", gid="region_label")
            ax.text(tx, y + 0.2, _text(role, 76), fontsize=_FONT - 1, va="center", ha="left",
                    color="#555555")
        if len(rows) > max_rows:
            ax.text(0, max_rows, f"… and {len(rows) - max_rows} more rows (art.segments has "
                    "them all)", fontsize=_FONT, va="center", ha="left", color="#555555")
    return fig


def tensor_sizes(art: Artifact, top: int = 20) -> Figure:
    """The ``top`` largest tensors by bytes, one bar each, coloured by storage.

    Bars are labelled with size, dtype and shape; names are shortened in the middle.

    Args:
        art: an opened artifact.
        top: how many tensors to show.

    Returns:
        The Figure: one Axes with one ``tensor`` bar per tensor shown.

    Example:
        >>> fig = tensor_sizes(wb.open("sample_models/kv_cache.pte"), top=10)   # doctest: +SKIP
        >>> len([p for p in fig.axes[0].patches if p.get_gid() == "tensor"])     # doctest: +SKIP
        10
    """
    from matplotlib.patches import Patch

    ten = art.tensors.sort_values("nbytes", ascending=False, kind="stable").head(top)
    n = len(ten)
    fig = _figure(10, 1.4 + 0.3 * max(n, 1))
    ax = fig.add_subplot()
    if not n:
        ax.text(0.5, 0.5, "no tensors", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    storages = [str(s) for s in ten["storage"]]
    colors = [STORAGE_COLORS.get(s, OTHER_COLOR) for s in storages]
    ys = list(range(n))
    bars = ax.barh(ys, ten["nbytes"].astype("int64"), color=colors, edgecolor="white",
                   height=0.75)
    for b in bars:
        b.set_gid("tensor")
    ax.set_yticks(ys, [_text(x, 40) for x in ten["name"]], fontsize=_FONT)
    ax.invert_yaxis()
    ax.bar_label(bars, labels=[f"{human_bytes(int(nb))} · {dt}{list(sh)}" for nb, dt, sh in
                               zip(ten["nbytes"], ten["dtype"], ten["shape"])],
                 padding=3, fontsize=_FONT - 1)
    ax.set_xlim(0, float(ten["nbytes"].max()) * 1.45 or 1)
    _bytes_axis(ax.xaxis, float(ten["nbytes"].max()))
    ax.tick_params(axis="x", labelsize=_FONT)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    total = len(art.tensors)
    ax.set_title(f"largest tensors of {_text(os.path.basename(art.path))} "
                 f"({n} of {total})", fontsize=_FONT + 2, loc="left")
    ax.legend(handles=[Patch(color=STORAGE_COLORS.get(s, OTHER_COLOR), label=s)
                       for s in dict.fromkeys(storages)],
              title="storage", fontsize=_FONT, title_fontsize=_FONT, loc="lower right",
              frameon=False)
    return fig


def _module_of(name: str, fqn: str | None, method: str | None, storage: str) -> str:
    """Module prefix of a tensor: its FQN up to the last dot (see :func:`treemap`); a
    delegate graph's constant (``forward/delegate0/2``) groups under its delegate.

    Example:
        >>> _module_of("forward/delegate0/2", None, None, "blob"), _module_of("x", "a.b.w", "f", "segment")
        ('forward delegate 0', 'a.b')
    """
    parts = name.split("/")
    if not fqn and len(parts) == 3 and parts[1].startswith("delegate") and parts[1][8:].isdigit():
        return f"{parts[0]} delegate {parts[1][8:]}"
    key = fqn if fqn else name
    if fqn or method is None:
        if storage == "named_data" and "." not in key:
            return "(named data)"
        return key.rsplit(".", 1)[0] if "." in key else "(top level)"
    return f"{method} (unnamed)"


def treemap(art: Artifact) -> Figure:
    """Stored tensor bytes by module prefix (FQN up to the last dot), as a squarified treemap.

    Bytes shared by several names (a tie kept, two methods using one constant) count once.
    Tensors without a fully qualified name are grouped by method (``forward (unnamed)``) or
    as ``(named data)``. Needs ``squarify``.

    Returns:
        The Figure: one Axes with one ``module`` rectangle per prefix.

    Example:
        >>> fig = treemap(wb.open("sample_models/mlp_external.pte"))     # doctest: +SKIP
        >>> [t.get_text().split("\\n")[0] for t in fig.axes[0].texts]    # doctest: +SKIP
        ['fc1', 'fc2']
    """
    import squarify
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    from .comparison import stored_tensors

    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    seen: set[Any] = set()
    ten = art.tensors
    fqns = ten["fqn"].tolist() if "fqn" in ten.columns else [None] * len(ten)
    methods = ten["method"].tolist() if "method" in ten.columns else [None] * len(ten)
    for r in stored_tensors(art):
        loc = r.key if r.key is not None else ("row", r.i)
        if loc in seen or r.nbytes <= 0:
            continue
        seen.add(loc)
        inside = r.i < len(fqns)  # rows past the frame are delegate constants (stored_tensors)
        fqn = fqns[r.i] if inside and isinstance(fqns[r.i], str) else None
        method = methods[r.i] if inside and isinstance(methods[r.i], str) else None
        mod = _module_of(r.name, fqn, method, r.storage)
        sizes[mod] = sizes.get(mod, 0) + r.nbytes
        counts[mod] = counts.get(mod, 0) + 1
    fig = _figure(10, 6)
    ax = fig.add_subplot()
    ax.set_axis_off()
    title = f"stored tensor bytes of {_text(os.path.basename(art.path))} by module"
    if not sizes:
        ax.text(0.5, 0.5, "no stored tensors", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=_FONT + 2, loc="left")
        return fig
    items = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))
    w, h = 100.0, 60.0
    rects = squarify.squarify(squarify.normalize_sizes([v for _, v in items], w, h), 0, 0, w, h)
    cmap = colormaps["tab20"]
    labels = []
    for k, ((mod, nbytes), r) in enumerate(zip(items, rects)):
        color = cmap(k % 20)
        ax.add_patch(Rectangle((r["x"], r["y"]), r["dx"], r["dy"], facecolor=color,
                               edgecolor="white", linewidth=1.5, gid="module", label=mod))
        from matplotlib.colors import to_hex

        hexc = to_hex(color)
        labels.append(_Label(ax, r["x"], r["x"] + r["dx"], r["y"], r["y"] + r["dy"],
                             [f"{_text(mod, 40)}\n{human_bytes(nbytes)} · {counts[mod]} tensors",
                              f"{_text(mod, 24)}\n{human_bytes(nbytes)}", _text(mod, 14)], hexc))
    ax.set_xlim(0, w)
    ax.set_ylim(0, h)
    total = sum(sizes.values())
    ax.set_title(f"{title} ({human_bytes(total)}, {len(items)} groups)", fontsize=_FONT + 2,
                 loc="left")
    _place_labels(fig, labels)
    return fig


def _lanes(spans: Sequence[tuple[int, int]]) -> list[int]:
    """Lane of each ``(offset, end)`` so that spans in one lane never overlap: interval
    partitioning by start (the fewest lanes possible), O(n log n).

    Example:
        >>> _lanes([(0, 10), (5, 8), (10, 12)])
        [0, 1, 0]
    """
    import heapq

    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], -spans[i][1]))
    busy: list[tuple[int, int]] = []  # (end, lane)
    free: list[int] = []
    lane = [0] * len(spans)
    n_lanes = 0
    for i in order:
        start, end = spans[i]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            k = heapq.heappop(free)
        else:
            k = n_lanes
            n_lanes += 1
        lane[i] = k
        heapq.heappush(busy, (end, k))
    return lane



def _planned_rows(art: Artifact, frame: str, method: str | None, missing: str) -> Any:
    """Rows of ``frame`` (memory_plan or lifetimes) for ``method`` (all when ``None``), or
    ``None`` when there are none; ``KeyError`` for a method the frame does not have."""
    rows = art.frames[frame] if frame in art.frames else None
    if rows is not None and method is not None:
        if method not in set(rows["method"].astype(str)):
            raise KeyError(f"{art.path}: no method {method!r} {missing}")
        rows = rows[rows["method"].astype(str) == method]
    return None if rows is None or rows.empty else rows


def _no_planned_tensors(art: Artifact) -> Figure:
    """A small figure that says the artifact has no memory-planned tensors."""
    fig = _figure(8, 1.5)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, f"{_text(os.path.basename(art.path))}: no memory-planned tensors",
            ha="center", va="center", transform=ax.transAxes)
    return fig


def memory_plan(art: Artifact, method: str | None = None) -> Figure:
    """Each memory-planned arena as a band, tensors placed at their offset with their size.

    Tensors whose address ranges overlap (the planner reusing memory for values that are
    not alive at the same time) are stacked in lanes, so reuse shows as height; the arena's
    size is the outline. Colours are by storage (``planned``, ``mutable``).

    Args:
        art: an artifact with a ``memory_plan`` frame (.pte / .bpte).
        method: only this method (default: every method).

    Returns:
        The Figure: one Axes per (method, arena), each with an ``arena`` outline patch and
        ``tensor`` collections (one per storage) with a path per planned tensor.

    Example:
        >>> fig = memory_plan(wb.open("sample_models/kv_cache.pte"))     # doctest: +SKIP
    """
    from matplotlib.patches import Patch, Rectangle

    plan = _planned_rows(art, "memory_plan", method, "in the memory plan")
    if plan is None:
        return _no_planned_tensors(art)
    arenas = list(plan.groupby(["method", "mem_id"], observed=True, sort=True))
    lanes_of = []
    for _key, g in arenas:
        spans = [(int(o), int(o) + max(int(n), 1)) for o, n in zip(g["offset"], g["nbytes"])]
        lanes_of.append(_lanes(spans))
    heights = [max(lanes) + 1 for lanes in lanes_of]
    inches = [min(0.3 * h, 5.0) + 0.6 for h in heights]  # many lanes get thin, not tall
    fig = _figure(11, min(1.2 + sum(inches), 30.0))
    axes = fig.subplots(len(arenas), 1, squeeze=False,
                        gridspec_kw={"height_ratios": inches})[:, 0]
    labels: list[_Label] = []
    storages: list[str] = []
    for ax, ((meth, mem_id), g), lanes, nl in zip(axes, arenas, lanes_of, heights):
        size_col = g["buffer_size"].dropna()
        arena = int(size_col.iloc[0]) if len(size_col) else int(g["end"].max())
        ax.add_patch(Rectangle((0, -0.1), arena, nl + 0.2, facecolor="#f4f4f4",
                               edgecolor=_EDGE, linewidth=0.8, zorder=0, gid="arena"))
        items = []
        for name, off, nb, st, lane in zip(g["name"], g["offset"], g["nbytes"], g["storage"],
                                           lanes):
            st = str(st)
            storages.append(st)
            y0 = nl - 1 - lane + 0.08
            items.append((st, int(off), y0, int(nb), 0.84, 0.5 if nl <= 40 else 0.0))
            labels.append(_Label(ax, int(off), int(off) + int(nb), y0, y0 + 0.84,
                                 [_text(name, 20)], STORAGE_COLORS.get(st, OTHER_COLOR)))
        _spans(ax, "tensor", items, STORAGE_COLORS)
        end = max(arena, int(g["end"].max()))
        ax.set_xlim(0, end * 1.02)
        ax.set_ylim(-0.2, nl + 0.2)
        ax.set_yticks([])
        _bytes_axis(ax.xaxis, end)
        ax.tick_params(axis="x", labelsize=_FONT)
        for s in ("top", "right", "left"):
            ax.spines[s].set_visible(False)
        fits = bool(g["fits"].all()) if "fits" in g.columns else True
        ax.set_title(f"{_text(meth)} · arena {int(mem_id)}: {human_bytes(arena)}, {len(g)} "
                     f"tensors, up to {nl} sharing an address"
                     + ("" if fits else " — SOME TENSORS RUN PAST THE ARENA"),
                     fontsize=_FONT + 1, loc="left")
    axes[-1].set_xlabel("offset in arena", fontsize=_FONT)
    fig.suptitle(f"memory plan of {_text(os.path.basename(art.path))}", fontsize=_FONT + 2,
                 x=0.01, ha="left")
    fig.legend(handles=[Patch(color=STORAGE_COLORS.get(s, OTHER_COLOR), label=s)
                        for s in dict.fromkeys(storages)],
               loc="outside lower center", ncols=4, frameon=False, fontsize=_FONT)
    _place_labels(fig, labels)
    return fig


def compare(cmp: Comparison, log: bool = False) -> Figure:
    """Two layouts aligned, matched tensors linked, totals by byte class.

    Top: side a's files above side b's, on one byte axis (or log widths); a ribbon joins
    each matched tensor's bytes on side a to its bytes on side b — red when it moved
    (storage or file kind changed), blue when it stayed, purple for an extra copy
    (``content_copy``). Each band ends with its file size. Bottom: both sides' totals as
    stacked bars by byte class (weights, delegate, flatbuffer, header, metadata, padding,
    other) with the change.

    Args:
        cmp: a :class:`~workbench.comparison.Comparison` (``wb.compare(a, b)``).
        log: log-scaled widths in the layouts.

    Returns:
        The Figure: Axes 0 the layouts (``segment`` collections, ``link`` collections with
        a ribbon path per linked tensor, one y tick per file), Axes 1 the totals (``class``
        bar patches).

    Example:
        >>> cmp = wb.compare("sample_models/mlp_portable.pte",
        ...                  "sample_models/mlp_external.pte", hashes=True)   # doctest: +SKIP
        >>> compare(cmp).savefig("portable_vs_external.png")               # doctest: +SKIP
    """
    import pandas as pd
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch, Rectangle


    bands = _bands_of(cmp)
    n_a = sum(1 for b in bands if b[1] == "a")
    fig = _figure(11, 2.6 + 0.8 * len(bands))
    ax, ax2 = fig.subplots(2, 1, gridspec_kw={"height_ratios": [0.8 * len(bands) + 0.6, 1.3]})
    labels: list[_Label] = []
    kinds: list[str] = []
    ys, ticks = [], []
    scales: dict[tuple[str, str], tuple[_Scale, float]] = {}
    xmax = 0.0
    for i, (prefix, side, f, seg) in enumerate(bands):
        y = -float(i) - (0.6 if i >= n_a else 0.0)  # a gap between the sides
        scale = _Scale([int(o) for o in seg["offset"]], [int(s) for s in seg["size"]], log)
        scales[(side, f)] = (scale, y)
        kinds += _draw_band(ax, seg, y, scale, labels)
        ax.text(scale.end, y, f"  {human_bytes(int(seg['size'].sum()))}", va="center",
                ha="left", fontsize=_FONT, color="#333333")
        xmax = max(xmax, scale.end)
        ys.append(y)
        ticks.append(f"{prefix}{_text(os.path.basename(f), 30)}")
    t = cmp.tensors
    both = t[(t["side"] == "both") & t["offset_a"].notna() & t["offset_b"].notna()]
    used_links: list[str] = []
    ribbons: dict[str, list] = {}
    for fa, fb, oa, ob, na, nb, moved, rule in zip(
            both["file_a"], both["file_b"], both["offset_a"], both["offset_b"], both["nbytes"],
            both["nbytes_b"], both["moved"], both["match"]):
        sa, sb = scales.get(("a", str(fa))), scales.get(("b", str(fb)))
        if sa is None or sb is None:
            continue
        (scale_a, ya), (scale_b, yb) = sa, sb
        size_b = int(na) if pd.isna(nb) else int(nb)
        xa0, xa1 = scale_a.x(int(oa)), scale_a.x(int(oa) + int(na))
        xb0, xb1 = scale_b.x(int(ob)), scale_b.x(int(ob) + size_b)
        what = "copy" if rule == "content_copy" else "moved" if moved else "kept"
        used_links.append(what)
        top, bottom = ya - _BAND_H / 2, yb + _BAND_H / 2
        ribbons.setdefault(what, []).append([(xa0, top), (xa1, top), (xb1, bottom),
                                             (xb0, bottom)])
    for what, verts in ribbons.items():
        ax.add_collection(PolyCollection(
            verts, facecolors=LINK_COLORS[what], edgecolors=LINK_COLORS[what], alpha=0.35,
            linewidths=0.6 if len(verts) < 200 else 0.0, zorder=1, gid="link", label=what),
            autolim=False)
    _band_axes(ax, ys, ticks, xmax, log)
    handles = _kind_legend(kinds) + [
        Patch(facecolor=LINK_COLORS[w], alpha=0.35, label={"moved": "tensor moved",
                                                           "kept": "tensor kept",
                                                           "copy": "extra copy"}[w])
        for w in dict.fromkeys(used_links)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False,
              fontsize=_FONT)
    ax.set_title(_layout_title(cmp, log), fontsize=_FONT + 2, loc="left")

    # totals by byte class
    s = cmp.summary
    whole = s[s["file"].isna()]
    by = {(str(sd), str(m)): int(v) for sd, m, v in zip(whole["side"], whole["metric"],
                                                         whole["bytes"])}
    totals = {sd: by.get((sd, "size"), 0) for sd in ("a", "b")}
    for row, sd in enumerate(("a", "b")):
        left = 0
        for cl in CLASSES:
            v = by.get((sd, cl), 0)
            if not v:
                continue
            color = CLASS_COLORS.get(cl, OTHER_COLOR)
            ax2.add_patch(Rectangle((left, row - 0.35), v, 0.7, facecolor=color,
                                    edgecolor=_EDGE if cl == "padding" else "white",
                                    hatch=_HATCH if cl == "padding" else None, linewidth=0.6,
                                    gid="class", label=f"{sd}: {cl}"))
            labels.append(_Label(ax2, left, left + v, row - 0.35, row + 0.35,
                                 [f"{cl} {human_bytes(v)}", cl], color))
            left += v
        change = ""
        if sd == "b":
            d = totals["b"] - totals["a"]
            change = f" ({'+' if d >= 0 else '−'}{human_bytes(abs(d))})"
        ax2.text(totals[sd], row, f"  {human_bytes(totals[sd])}{change}", va="center",
                 ha="left", fontsize=_FONT)
    biggest = max(totals.values()) or 1
    ax2.set_xlim(0, biggest * 1.25)
    ax2.set_ylim(1.6, -0.6)
    ax2.set_yticks([0, 1], ["a (all files)", "b (all files)"], fontsize=_FONT + 1)
    ax2.tick_params(axis="y", length=0)
    _bytes_axis(ax2.xaxis, biggest)
    ax2.tick_params(axis="x", labelsize=_FONT)
    for sp in ("top", "right", "left"):
        ax2.spines[sp].set_visible(False)
    ax2.legend(handles=[Patch(facecolor=CLASS_COLORS[c], edgecolor=_EDGE if c == "padding"
                              else "none", hatch=_HATCH if c == "padding" else None, label=c)
                        for c in CLASSES if by.get(("a", c)) or by.get(("b", c))],
               loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=_FONT)
    ax2.set_title("bytes by class", fontsize=_FONT + 1, loc="left")
    _place_labels(fig, labels)
    return fig


def load_paths(profile: Any) -> Figure:
    """Bars of GB/s per load path with the rooflines as lines, and held memory below.

    The same figure as :meth:`workbench.profiling.Profile.plot`, here so that every picture
    the workbench draws is in this module.

    Example:
        >>> prof = wb.profile("sample_models/mlp_portable.pte", repeat=1)   # doctest: +SKIP
        >>> plots.load_paths(prof).savefig("paths.png")                       # doctest: +SKIP
    """
    return profile.plot()


# ------------------------------------------------------------------------------------------
# Where time goes (wb.timeline) and memory over time (the lifetimes frame)
# ------------------------------------------------------------------------------------------

#: Units of a time axis: (nanoseconds per unit, name), largest first.
_TIME_UNITS: tuple[tuple[float, str], ...] = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))


def _time_unit(span_ns: float) -> tuple[float, str]:
    """The unit that shows times up to ``span_ns`` with 1 to 3 digits before the point.

    Example:
        >>> _time_unit(6_800), _time_unit(12_500_000), _time_unit(450)
        ((1000.0, 'µs'), (1000000.0, 'ms'), (1.0, 'ns'))
    """
    for per, unit in _TIME_UNITS:
        if span_ns >= per:
            return per, unit
    return 1.0, "ns"


def _time_axis(axis: Any, span_ns: float) -> str:
    """Label the ticks of ``axis`` (data in nanoseconds) in the unit :func:`_time_unit` picks
    for ``span_ns``; returns the unit's name, for the axis label. The data stay in ns."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    per, unit = _time_unit(span_ns)
    # nice steps in the shown unit are nice in ns too (the units are powers of 1000)
    axis.set_major_locator(MaxNLocator(nbins=8, steps=[1, 2, 2.5, 5, 10]))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x / per:g}"))
    return unit


def _event_label(row: Any) -> str:
    for col in ("op", "delegate_debug_id", "backend", "name"):
        v = getattr(row, col, None)
        if isinstance(v, str) and v:
            return v.split("::")[-1]
    return "?"


def timeline(t: pd.DataFrame, run: int | None = None) -> Figure:
    """One execution as bars on a time axis: a lane per instruction (and per backend event),
    coloured by kind (kernel / delegate / framework).

    Args:
        t: a frame from :func:`workbench.timeline` (one row per event).
        run: the ETDump run (RunData block) to draw (default: the last ``Execute`` block,
            i.e. a warm one).

    Returns:
        The Figure; its Axes holds one ``event`` patch per drawn event (``gid="event"``,
        the event's kind as ``label``).

    Example:
        >>> t = wb.timeline("sample_models/mlp_portable.pte", "sample_models/mlp_portable.etdp")
        >>> plots.timeline(t).savefig("timeline.png")                  # doctest: +SKIP
    """
    from matplotlib.patches import Patch, Rectangle

    execs = t[t["block"].astype(str) == "Execute"]["run"]
    if run is None:
        run = int(execs.max()) if len(execs) else int(t["run"].max()) if len(t) else 0
    e = t[t["run"] == run]
    e = e[e["duration"].notna()]
    fig = _figure(11, min(1.2 + 0.28 * max(len(e), 1), 20.0))
    ax = fig.add_subplot()
    if e.empty:
        ax.set_axis_off()
        ax.text(0.5, 0.5, f"no events in run {run}", ha="center", va="center",
                transform=ax.transAxes)
        return fig
    t0 = int(e["start"].min())
    lanes: dict[tuple, int] = {}
    names: list[str] = []
    for row in e.sort_values(["start", "index"]).itertuples(index=False):
        key = (str(row.kind), int(row.chain), int(row.instruction),
               row.delegate_debug_id if isinstance(row.delegate_debug_id, str) else None,
               str(row.name) if row.kind == "framework" else None)
        if key not in lanes:
            lanes[key] = len(lanes)
            where = f"{row.chain}:{row.instruction}" if row.chain >= 0 else ""
            names.append(_text(f"{where} {_event_label(row)}".strip(), 48))
        y = lanes[key]
        x = int(row.start) - t0
        w = max(int(row.duration), 0)
        ax.add_patch(Rectangle((x, y - 0.4), w, 0.8, gid="event", label=str(row.kind),
                               facecolor=TIME_COLORS.get(str(row.kind), OTHER_COLOR),
                               edgecolor="none"))
    fig.set_size_inches(11, min(1.2 + 0.28 * max(len(lanes), 1), 20.0))  # one row per lane
    span = max(int(e["end"].max()) - t0, 1)
    ax.set_xlim(0, span * 1.02)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_yticks(range(len(names)), names, fontsize=_FONT)
    unit = _time_axis(ax.xaxis, span)
    ax.set_xlabel(f"time since the first event ({unit}; the runtime's ticks taken as ns, "
                  "its default clock)", fontsize=_FONT)
    ax.tick_params(axis="x", labelsize=_FONT)
    block = e["block"].iloc[0]
    it = e["iteration"].iloc[0]
    ax.set_title(_text(f"run {run} ({block} #{it}): {len(e)} events"), fontsize=_FONT + 1,
                 loc="left")
    kinds = [k for k in TIME_COLORS if k in set(e["kind"].astype(str))]
    ax.legend(handles=[Patch(facecolor=TIME_COLORS[k], label=k) for k in kinds],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=_FONT)
    for sp in ("top", "right"):
        ax.spines[sp].set_visible(False)
    return fig


def operators(t: pd.DataFrame, top: int = 20) -> Figure:
    """Time per operator (kernel events) and per delegate event: median over the iterations
    of the time per execution, as horizontal bars, largest first.

    Only the innermost events count (``native_call_*`` kernels, backend-internal events and
    delegate calls), so nested events are not added twice.

    Args:
        t: a frame from :func:`workbench.timeline`.
        top: at most this many bars.

    Returns:
        The Figure; one ``operator`` patch per bar (``gid="operator"``).

    Example:
        >>> t = wb.timeline("sample_models/mlp_portable.pte", "sample_models/mlp_portable.etdp")
        >>> plots.operators(t).savefig("operators.png")                # doctest: +SKIP
    """
    from matplotlib.patches import Patch

    e = t[t["event"].astype(str).isin(("kernel", "delegate_op", "delegate_call"))
          & t["duration"].notna()].copy()
    e["label"] = [_event_label(r) for r in e.itertuples(index=False)]
    per_run = e.groupby(["label", "kind", "run"], observed=True)["duration"].sum()
    med = per_run.groupby(level=["label", "kind"], observed=True).median()
    med = med.sort_values(ascending=False).head(top)
    fig = _figure(9, min(1.0 + 0.3 * max(len(med), 1), 12.0))
    ax = fig.add_subplot()
    if med.empty:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no kernel or delegate events", ha="center", va="center",
                transform=ax.transAxes)
        return fig
    labels = [_text(lbl, 48) for lbl, _k in med.index]
    colors = [TIME_COLORS.get(k, OTHER_COLOR) for _l, k in med.index]
    bars = ax.barh(range(len(med)), med.to_numpy(dtype=float), color=colors)
    for b in bars:
        b.set_gid("operator")
    ax.set_yticks(range(len(med)), labels, fontsize=_FONT)
    ax.invert_yaxis()
    unit = _time_axis(ax.xaxis, float(med.max()))
    ax.set_xlabel(f"median time per execution ({unit}; the runtime's ticks taken as ns)",
                  fontsize=_FONT)
    ax.tick_params(axis="x", labelsize=_FONT)
    ax.legend(handles=[Patch(facecolor=TIME_COLORS[k], label=k)
                       for k in dict.fromkeys(k for _l, k in med.index)],
              loc="lower right", frameon=False, fontsize=_FONT)
    for sp in ("top", "right"):
        ax.spines[sp].set_visible(False)
    return fig


def lifetimes(art: Artifact, method: str | None = None) -> Figure:
    """The memory plan over time: for each arena, arena offset against instruction, every
    planned tensor a rectangle from the first to the last instruction that needs its bytes
    (``live_from`` .. ``live_to`` of the ``lifetimes`` frame), coloured by storage.

    Args:
        art: a .pte / .bpte program.
        method: only this method (default: every method).

    Returns:
        The Figure: one Axes per (method, arena) with a ``tensor`` patch per live tensor and
        the peak live bytes against the arena size in the title.

    Example:
        >>> plots.lifetimes(wb.open("sample_models/kv_cache.pte")).savefig("m.png")  # doctest: +SKIP
    """
    from matplotlib.patches import Patch, Rectangle

    if art.format == "bpte":
        art = art.program
    lt = _planned_rows(art, "lifetimes", method, "with planned tensors")
    if lt is None:
        return _no_planned_tensors(art)
    eff = art.frames["memory_efficiency"]
    arenas = list(lt.groupby(["method", "mem_id"], observed=True, sort=True))
    fig = _figure(10, min(0.8 + 3.2 * len(arenas), 24.0))
    axes = fig.subplots(len(arenas), 1, squeeze=False)[:, 0]
    for ax, ((m, mem_id), g) in zip(axes, arenas):
        e = eff[(eff["method"].astype(str) == str(m)) & (eff["mem_id"] == mem_id)]
        arena = int(e["arena_bytes"].iloc[0]) if len(e) and e["arena_bytes"].notna().all() \
            else int(g["end_offset"].max())
        g = g[g["live_from"].notna()]
        last = int(g["live_to"].max()) if len(g) else 0
        for row in g.itertuples(index=False):
            x0, x1 = int(row.live_from), int(row.live_to) + 1
            ax.add_patch(Rectangle((x0, int(row.offset)), x1 - x0, max(int(row.nbytes), 1),
                                   gid="tensor", label=str(row.storage),
                                   facecolor=STORAGE_COLORS.get(str(row.storage), OTHER_COLOR),
                                   edgecolor="white", linewidth=0.5))
        ax.axhline(arena, color=_EDGE, linewidth=1, linestyle="--", gid="arena")
        ax.set_xlim(0, last + 1)
        ax.set_ylim(0, max(arena, int(g["end_offset"].max()) if len(g) else 1) * 1.05)
        ax.set_xlabel("instruction (position in the method)", fontsize=_FONT)
        ax.set_ylabel("arena offset", fontsize=_FONT)
        _bytes_axis(ax.yaxis, arena)
        ax.tick_params(labelsize=_FONT)
        title = f"{m} arena {mem_id}: {human_bytes(arena)}"
        if len(e):
            title += (f", peak live {human_bytes(int(e['peak_live_bytes'].iloc[0]))}"
                      f" ({float(e['efficiency'].iloc[0]):.0%})")
        ax.set_title(_text(title), fontsize=_FONT + 1, loc="left")
        storages = list(dict.fromkeys(g["storage"].astype(str)))
        ax.legend(handles=[Patch(facecolor=STORAGE_COLORS.get(s, OTHER_COLOR), label=s)
                           for s in storages], loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  frameon=False, fontsize=_FONT)
    return fig


def memory(frame: pd.DataFrame) -> Figure:
    """Stacked bars of :func:`workbench.memory`: per phase, the components held at its end
    (anonymous memory solid, file pages hatched), transient bytes as an outlined box on top,
    the predicted peak as a line and, when measured, the measured bytes as black markers.

    Example:
        >>> m = wb.memory("sample_models/llm_tiny.pte")    # doctest: +SKIP
        >>> plots.memory(m).savefig("fit.png")              # doctest: +SKIP
    """
    phases = ("load_program", "load_method", "execute")
    fig = _figure(8.0, 4.0)
    ax = fig.add_subplot()
    rows = frame[frame["counted"]]
    palette = [c for c in STORAGE_COLORS.values()] + list(KIND_COLORS.values())
    bottoms = [0.0] * len(phases)
    for k, r in enumerate(rows.itertuples()):
        start = phases.index(r.phase)
        end = phases.index(r.released) if isinstance(r.released, str) else len(phases)
        heights = [float(r.bytes) if start <= i < end else 0.0 for i in range(len(phases))]
        if not any(heights):
            continue
        ax.bar(range(len(phases)), heights, bottom=bottoms, color=palette[k % len(palette)],
               hatch=_HATCH if r.storage == "file" else None, edgecolor=_EDGE, linewidth=0.4,
               label=_text(f"{r.component} ({r.storage})", 48))
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    transient = frame.attrs.get("transient", {})
    for i, ph in enumerate(phases):
        if transient.get(ph):
            ax.bar([i], [float(transient[ph])], bottom=[bottoms[i]], fill=False,
                   edgecolor=_EDGE, linestyle="--", label="transient (released in the phase)")
    peak = float(frame.attrs.get("peak", 0))
    ax.axhline(peak, color="#e15759", linewidth=1, label=f"predicted peak {human_bytes(peak)}")
    measured = frame.attrs.get("measured")
    if measured:
        ax.plot(range(len(phases)), [measured["by_phase"][p] for p in phases], "kD",
                label="measured")
        ax.axhline(measured["peak"], color="black", linestyle=":", linewidth=1,
                   label=f"measured peak {human_bytes(measured['peak'])}")
    ax.set_xticks(range(len(phases)), list(phases))
    _bytes_axis(ax.yaxis, max(peak, max(bottoms, default=0.0)))
    ax.set_title(_text(f"{os.path.basename(str(frame.attrs.get('program', '')))}: memory by "
                       f"phase ({frame.attrs.get('loader', '')})", 90), fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
