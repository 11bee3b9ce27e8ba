"""The explorer's **Summary** tab (facts and a treemap) and **Layout** tab (the byte map;
pick a segment to see its row and the tensors stored inside it): the tabs about the file's
bytes.

This module owns those two tabs' widgets and drawing; it reads frames only.
"""

from __future__ import annotations

import html
import os

import ipywidgets as widgets

from .._fmt import human_bytes
from ..vocab import SCAN_KINDS
from . import _common
from ._common import (
    FigureView,
    PagedTable,
    guarded,
    note_html,
    table_html,
)
from ._explorer_base import ALL, MAX_OPTIONS, ExplorerTab, tensor_columns

__all__ = ["SummaryTab", "LayoutTab"]


class SummaryTab(ExplorerTab):
    """The Summary tab: the artifact's facts as a table, and its treemap.

    Example:
        >>> ex.summary_html.value[:6]     # doctest: +SKIP
        '<table'
    """

    def _build_summary(self) -> None:
        self.summary_html = widgets.HTML()
        self.treemap_view = FigureView()
        self.treemap_view.image.layout.max_width = "min(100%, 760px)"
        self.summary_panel = widgets.VBox([self.summary_html, self.treemap_view])

    def _draw_summary(self) -> None:
        art = self.art
        if art is None:
            self.summary_html.value = note_html("no artifact open")
            self.treemap_view.show_note("")
            return
        s = art.summary()
        rows = [("format", s["format"])]
        rows += [(f"file {i}" if i else "file", f"{os.path.basename(f)} — {human_bytes(n)} ({n:,} bytes)")
                 for i, (f, n) in enumerate(s["files"].items())]
        rows.append(("tensors", f"{s['tensors']:,} — "
                     + ", ".join(f"{k} {v:,}" for k, v in s["tensors_by_storage"].items())))
        rows.append(("stored tensor bytes", f"{human_bytes(s['stored_tensor_bytes'])} "
                     f"({s['stored_tensor_bytes']:,} bytes)"))
        rows.append(("bytes by kind", ", ".join(f"{k} {human_bytes(v)}"
                                               for k, v in s["bytes_by_kind"].items())))
        shown = {"format", "path", "artifact", "files", "tensors", "stored_tensor_bytes", "size",
                 "bytes_by_kind", "tensors_by_storage", "other_bytes", "padding_pct",
                 *(f"{k}_bytes" for k in SCAN_KINDS)}  # the byte counts are in "bytes by kind"
        rows += [(k, f"{v:,}" if isinstance(v, int) else str(v)) for k, v in s.items()
                 if k not in shown and isinstance(v, (int, str)) and not isinstance(v, bool)]
        rows.append(("frames", ", ".join(f"{name} ({len(art.frames[name]):,})" for name in art.frames)))
        body = "".join(f'<tr><th style="text-align:left;padding:2px 12px 2px 0;vertical-align:top">'
                       f"{html.escape(k)}</th><td style=\"overflow-wrap:anywhere\">{html.escape(v)}</td></tr>"
                       for k, v in rows)
        self.summary_html.value = f'<table style="font-size:13px;line-height:1.5">{body}</table>'
        self.treemap_view.show(lambda: _common.plots_module().treemap(art))


class LayoutTab(ExplorerTab):
    """The Layout tab: the byte map, a segment chooser (by kind), the chosen segment's row
    and the tensors stored in it.

    Example:
        >>> ex.segment_kind.value = "constant"          # doctest: +SKIP
        >>> ex.segment_tensors.frame["name"].tolist()   # doctest: +SKIP
    """

    def _build_layout(self) -> None:
        self.layout_log = widgets.Checkbox(value=False, description="log scale", indent=False)
        self.layout_view = FigureView()
        self.segment_kind = widgets.Dropdown(description="kind", options=[ALL],
                                             layout=widgets.Layout(width="220px"))
        self.segment_select = widgets.Select(options=[], rows=8, layout=widgets.Layout(width="100%"))
        self.segment_html = widgets.HTML()
        self.segment_tensors = PagedTable(page_size=10, empty="no tensor starts in this byte range")
        self.layout_log.observe(lambda _: guarded(LayoutTab._draw_layout_figure)(self), names="value")
        self.segment_kind.observe(lambda _: guarded(LayoutTab._fill_segments)(self), names="value")
        self.segment_select.observe(lambda _: guarded(LayoutTab._show_segment)(self), names="value")
        self.layout_panel = widgets.VBox([
            self.layout_log, self.layout_view,
            widgets.HTML("<b>Segments</b> — pick one to see its row and the tensors stored in it"),
            self.segment_kind, self.segment_select, self.segment_html, self.segment_tensors])

    def _draw_layout(self) -> None:
        self._draw_layout_figure()
        self._fill_segments()

    def _draw_layout_figure(self) -> None:
        art = self.art
        if art is None:
            self.layout_view.show_note("no artifact open")
            return
        self.layout_view.show(lambda: _common.plots_module().layout(art, log=self.layout_log.value))

    def _fill_segments(self) -> None:
        seg = self._frame("segments")
        if seg is None:
            self.segment_select.options = []
            self.segment_html.value = ""
            self.segment_tensors.set_frame(None)
            return
        if self.segment_kind.value not in (ALL, None):
            seg = seg[seg["kind"].astype(str) == self.segment_kind.value]
        many_files = seg["file"].nunique() > 1
        options = []
        for i, row in zip(seg.index[:MAX_OPTIONS], seg.head(MAX_OPTIONS).itertuples(index=False)):
            where = f"{os.path.basename(row.file)} " if many_files else ""
            name = row.name if len(row.name) <= 48 else row.name[:47] + "…"
            options.append((f"{where}@0x{row.offset:x}  {row.kind}  {human_bytes(row.size)}  {name}", i))
        self.segment_select.options = options
        if len(seg) > MAX_OPTIONS:
            self.segment_html.value = note_html(f"showing the first {MAX_OPTIONS} of {len(seg):,} "
                                                "segments; choose a kind to narrow")
        self.segment_select.value = options[0][1] if options else None
        self._show_segment()

    def _show_segment(self) -> None:
        seg = self._frame("segments")
        i = self.segment_select.value
        if seg is None or i is None:
            self.segment_html.value = ""
            self.segment_tensors.set_frame(None)
            return
        row = seg.loc[[i]]
        self.segment_html.value = table_html(row, max_chars=80)
        ten = self._frame("tensors")
        if ten is None:
            self.segment_tensors.set_frame(None)
            return
        r = row.iloc[0]
        off = ten["offset"]
        inside = ten[(ten["file"] == r["file"]) & off.notna() & (off >= r["offset"])
                     & (off < r["offset"] + max(int(r["size"]), 1))]
        self.segment_tensors.set_frame(tensor_columns(inside.sort_values("offset", kind="stable")))
