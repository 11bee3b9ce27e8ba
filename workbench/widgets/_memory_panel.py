"""The explorer's "will it fit" section (under the Memory plan tab): :func:`workbench.memory`
of the open program for a chosen loader: a stacked bar by phase, the component table, the
peak, findings and what could be saved. Prediction only (nothing runs)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from .._fmt import human_bytes
from ._common import FigureView, PagedTable, error_html, guarded, note_html

if TYPE_CHECKING:
    from ..artifact import Artifact


class MemoryFitPanel(widgets.VBox):
    """Will it fit: predicted memory per component and phase of an opened program.

    Example:
        >>> panel = MemoryFitPanel()                                   # doctest: +SKIP
        >>> panel.show(wb.open("sample_models/llm_tiny.pte"))          # doctest: +SKIP
        >>> panel.frame.attrs["peak"]                                  # doctest: +SKIP
    """

    def __init__(self, **kwargs: Any) -> None:
        from ..fit import LOADERS

        self.loader = widgets.Dropdown(description="loader", options=list(LOADERS),
                                       value="mmap", layout=widgets.Layout(width="260px"))
        self.summary = widgets.HTML()
        self.view = FigureView()
        self.table = PagedTable(page_size=25, empty="no components")
        self.frame: Any = None
        self._art: Artifact | None = None
        self.loader.observe(lambda _: guarded(MemoryFitPanel._draw)(self), names="value")
        super().__init__([widgets.HTML("<b>Will it fit</b> (predicted; "
                                       "<code>wb.memory(..., measure=True)</code> measures)"),
                          self.loader, self.summary, self.view, self.table], **kwargs)

    def show(self, art: Artifact | None) -> None:
        """Predict for ``art`` (a ``.pte``; other formats show a note)."""
        self._art = art
        self._draw()

    def _draw(self) -> None:
        art = self._art
        if art is None or art.format not in ("pte", "bpte"):
            self.frame = None
            self.summary.value = note_html("will it fit: an ExecuTorch program (.pte) is needed")
            self.view.show_note("")
            self.table.set_frame(None)
            return
        from ..fit import memory

        try:
            self.frame = memory(art, loader=self.loader.value)
        except Exception as e:  # shown, never raised into the notebook
            self.frame = None
            self.summary.value = error_html(e)
            self.table.set_frame(None)
            return
        a = self.frame.attrs
        parts = [f"{html.escape(k)}: {human_bytes(v)}" for k, v in a["by_phase"].items()]
        lines = [" · ".join(parts) + f" · <b>peak {human_bytes(a['peak'])}</b>"]
        lines += [f"finding: {html.escape(f)}" for f in a["findings"]]
        lines += [f"could save {human_bytes(s['bytes'])}: {html.escape(s['what'])}"
                  for s in a["savings"]]
        self.summary.value = "<br>".join(lines)
        frame = self.frame
        from .. import plots

        self.view.show(lambda: plots.memory(frame))
        self.table.set_frame(frame.drop(columns=["file"]))
