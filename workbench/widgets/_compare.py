"""``CompareView``: two artifacts side by side — byte accounting, matched (moved) tensors,
duplicated bytes, and both layouts in one chart. Built on :func:`workbench.compare`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import ipywidgets as widgets

from ._common import (
    ArtifactPicker,
    FigureView,
    PagedTable,
    ReloadBar,
    StatusLine,
    note_html,
    offer_reload,
    plots_module,
    table_html,
    widget_repr,
)

if TYPE_CHECKING:
    import pandas as pd

    from ..comparison import Comparison

__all__ = ["CompareView"]

#: Columns of the matched-tensors table (those present, in this order).
TENSOR_COLUMNS = ("side", "match", "name_a", "name_b", "dtype", "shape", "nbytes", "storage_a",
                  "storage_b", "file_a", "file_b", "offset_a", "offset_b", "moved", "same_bytes")
#: The tensor table's "show" choices: label -> row filter.
SHOW = {
    "moved": lambda t: t["moved"].fillna("").astype(str) != "",
    "all": lambda t: t["side"].notna(),
    "only in a": lambda t: t["side"].astype(str) == "a_only",
    "only in b": lambda t: t["side"].astype(str) == "b_only",
    "bytes differ": lambda t: t["same_bytes"].fillna(True).eq(False),
}


class CompareView(widgets.VBox):
    """Compare two artifacts: what moved, what is duplicated, how the bytes add up.

    Args:
        a, b: artifact paths (``.pte`` siblings ``.ptd`` are attached as by
            :func:`workbench.open`); each picker lists the artifacts of its file's folder.
        hashes: hash every stored tensor (content matching and ``same_bytes``); costs a read
            of every weight byte, cheap for small artifacts.

    Attributes:
        cmp: the current :class:`~workbench.comparison.Comparison` (``None`` on error).
        picker_a, picker_b, status: the controls.
        reload_bar: hidden until a file changes on disk; then offers **Reload** (``refresh``).
        summary_html: whole-side bytes per metric (``cmp.delta()``) and file sizes.
        tensor_table, duplicate_table: paged tables; ``show`` filters the tensor rows.
        layout_view: both layouts side by side, moved tensors linked, and bytes by class
            (:func:`workbench.plots.compare`).

    Example:
        >>> CompareView("sample_models/mlp_portable.pte",
        ...             "sample_models/mlp_external.pte")      # doctest: +SKIP
    """

    def __init__(self, a: str | os.PathLike[str], b: str | os.PathLike[str], *,
                 hashes: bool = True) -> None:
        self.cmp: Comparison | None = None
        self.picker_a = ArtifactPicker(a, description="a")
        self.picker_b = ArtifactPicker(b, description="b")
        self.hashes = widgets.Checkbox(value=hashes, description="hash contents", indent=False,
                                       tooltip="match tensors by SHA-256 and fill same_bytes")
        self.status = StatusLine()
        self.reload_bar = ReloadBar(self.refresh)  # shown when a file changed on disk
        self.summary_html = widgets.HTML()
        self.show = widgets.ToggleButtons(options=list(SHOW), value="moved",
                                          style={"button_width": "auto"})
        self.tensor_count = widgets.HTML()
        self.tensor_table = PagedTable(page_size=10, empty="no tensor matches")
        self.duplicate_table = PagedTable(page_size=10, empty="no bytes are stored twice on either side")
        self.log_scale = widgets.Checkbox(value=False, description="log scale", indent=False)
        self.layout_view = FigureView()
        self.tabs = widgets.Tab(children=[
            self.summary_html,
            widgets.VBox([self.show, self.tensor_count, self.tensor_table]),
            self.duplicate_table,
            widgets.VBox([self.log_scale, self.layout_view]),
        ], titles=("Summary", "Tensors", "Duplicates", "Layouts"))
        super().__init__([self.picker_a, self.picker_b, self.hashes, self.reload_bar, self.status,
                          self.tabs],
                         layout=widgets.Layout(width="100%"))
        self.add_class("wb-compare")
        for w, name in ((self.picker_a, "path"), (self.picker_b, "path"), (self.hashes, "value")):
            w.observe(lambda _: self.refresh(), names=name)
        self.show.observe(lambda _: self._draw_tensors(), names="value")
        self.log_scale.observe(lambda _: self._draw_layout(), names="value")
        self.refresh()

    def __repr__(self) -> str:
        """What the widget says where it cannot be drawn: a notebook on GitHub, a static page
        (file names only, never a folder)."""
        return widget_repr("CompareView", getattr(self, "picker_a", None), getattr(self, "picker_b", None))

    def refresh(self) -> None:
        """Compare the two picked artifacts again and redraw everything."""
        if self.cmp is not None:
            self.cmp.close()
            self.cmp = None
        self.status.clear()
        self.reload_bar.hide()
        try:
            from ..comparison import compare

            if self.picker_a.path and self.picker_b.path:
                self.cmp = compare(self.picker_a.path, self.picker_b.path, hashes=self.hashes.value)
        except Exception as exc:  # shown in the widget
            self.status.show_error(exc)
            offer_reload(self, exc)
        for draw in (self._draw_summary, self._draw_tensors, self._draw_duplicates, self._draw_layout):
            try:
                draw()
            except Exception as exc:  # shown in the widget
                self.status.show_error(exc)
                offer_reload(self, exc)

    def _draw_summary(self) -> None:
        cmp = self.cmp
        if cmp is None:
            self.summary_html.value = note_html("nothing to compare")
            return
        delta = cmp.delta().reset_index()
        s = cmp.summary
        files = s[(s["metric"].astype(str) == "size") & s["file"].notna()][["side", "file", "bytes"]]
        moved = int((cmp.tensors["moved"].fillna("").astype(str) != "").sum())
        dup = cmp.duplicates
        facts = (f"<p><b>a</b> {cmp.a.format} <code>{os.path.basename(cmp.a.path)}</code> · "
                 f"<b>b</b> {cmp.b.format} <code>{os.path.basename(cmp.b.path)}</code> — "
                 f"{len(cmp.tensors):,} stored tensors matched or unmatched, {moved:,} moved, "
                 f"{len(dup):,} duplicated byte ranges ({int(dup['wasted'].sum()):,} bytes wasted)</p>")
        self.summary_html.value = (facts + '<div style="display:flex;gap:32px;flex-wrap:wrap">'
                                   f"<div><b>bytes by metric</b>{table_html(delta)}</div>"
                                   f"<div><b>files</b>{table_html(files)}</div></div>")

    def filtered_tensors(self) -> pd.DataFrame | None:
        """The matched-tensors frame with the ``show`` filter applied."""
        if self.cmp is None:
            return None
        t = self.cmp.tensors
        t = t[SHOW[self.show.value](t).to_numpy(dtype=bool)]
        return t[[c for c in TENSOR_COLUMNS if c in t]]

    def _draw_tensors(self) -> None:
        t = self.filtered_tensors()
        self.tensor_count.value = "" if t is None else note_html(f"{len(t):,} rows ({self.show.value})")
        self.tensor_table.set_frame(t)

    def _draw_duplicates(self) -> None:
        self.duplicate_table.set_frame(None if self.cmp is None else self.cmp.duplicates)

    def _draw_layout(self) -> None:
        cmp = self.cmp
        if cmp is None:
            self.layout_view.show_note("")
            return
        log = self.log_scale.value
        self.layout_view.show(lambda: plots_module().compare(cmp, log=log))

