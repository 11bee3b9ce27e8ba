"""``Explorer``: pick an artifact, then browse its summary, byte layout, tensors, one
tensor's values, methods/operators/delegates, memory plan, every frame, where time goes (an
ETDump joined to the program, or a run recorded on demand) and what is inside its delegates
— in tabs that are drawn when first shown.

This module owns the explorer itself: the tabs in order, opening (and reopening) an
artifact, and drawing each tab when it is first shown. Each tab is a mixin in a module of
its own — ``_explorer_bytes`` (Summary, Layout), ``_explorer_tensors`` (Tensors, Tensor),
``_explorer_program`` (Methods, Memory plan, Frames, Delegates), ``_explorer_time`` (Time) —
over the shared state of ``_explorer_base``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import ipywidgets as widgets

from ._common import ArtifactPicker, ReloadBar, StatusLine, guarded, widget_repr
from ._explorer_bytes import LayoutTab, SummaryTab
from ._explorer_program import DelegatesTab, FramesTab, MemoryPlanTab, MethodsTab
from ._explorer_tensors import TensorsTab, TensorTab, tensor_sample
from ._explorer_time import TimeTab

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact

__all__ = ["Explorer", "tensor_sample"]


class Explorer(SummaryTab, LayoutTab, TensorsTab, TensorTab, MethodsTab, MemoryPlanTab,
               FramesTab, TimeTab, DelegatesTab, widgets.VBox):
    """Browse one artifact at a time from a folder (or a path you type).

    Tabs: **Summary** (facts and a treemap), **Layout** (the byte map; pick a segment to see
    its row and the tensors inside it), **Tensors** (filter by name, storage, dtype, method;
    sort; paged), **Tensor** (dtype, shape, statistics, histogram, first values),
    **Methods** (methods, operators, delegates), **Memory plan**, **Frames** (any frame),
    **Time** (a program's ETDump joined to its instructions by :func:`workbench.timeline`:
    one run as a timeline, time per operator, and each event with the bytes its instruction
    reads and writes; pick a trace found beside the program, or press **Run with ETDump**
    to record one with :func:`workbench.run` in a child process — never on its own),
    **Delegates** (the ``delegates`` frame and, where the program has them, the tensors and
    nodes inside each delegate blob: ``delegate_tensors``, ``delegate_nodes``).

    Args:
        path_or_folder: a folder to list (by magic bytes) or one artifact file.
        data: passed to :func:`workbench.open` (``.ptd`` files for a ``.pte``).
        etdump, etrecord: a trace (and its ETRecord) for the Time tab; by default the
            ``.etdp`` / ``.etrecord`` beside the program with the same name, if any.
        runner: what the Run button calls, ``runner(program, iterations=, method=,
            etrecord=, data=)`` returning a timeline frame (default :func:`workbench.run`).

    Attributes:
        art: the open :class:`~workbench.Artifact` (``None`` when opening failed).
        reload_bar: hidden until the file changes on disk; then says so and offers **Reload**
            (:meth:`reload`) instead of reading a changed map.
        picker, status, tabs: the controls; each tab's widgets are attributes too
            (``layout_view``, ``segment_select``, ``tensor_table``, ``tensor_pick``,
            ``time_trace``, ``run_button``, ``timeline_view``, ``delegate_tables``, ...).
        timeline: the timeline frame the Time tab shows (``None`` before one is read or run).

    Example:
        >>> from workbench.widgets import Explorer     # doctest: +SKIP
        >>> ex = Explorer("sample_models/")               # doctest: +SKIP
        >>> ex.tabs.selected_index = 1                    # show the layout
    """

    TABS = ("Summary", "Layout", "Tensors", "Tensor", "Methods", "Memory plan", "Frames",
            "Time", "Delegates")

    def __init__(self, path_or_folder: str | os.PathLike[str] = "sample_models/", *,
                 data: list[str] | None = None, etdump: str | os.PathLike[str] | None = None,
                 etrecord: str | os.PathLike[str] | None = None,
                 runner: Callable[..., pd.DataFrame] | None = None) -> None:
        self.art: Artifact | None = None
        self.data = data
        self.etdump = os.fspath(etdump) if etdump is not None else None
        self.etrecord = os.fspath(etrecord) if etrecord is not None else None
        self.runner = runner
        self.timeline: pd.DataFrame | None = None
        self.picker = ArtifactPicker(path_or_folder)
        self.status = StatusLine()
        self.reload_bar = ReloadBar(self.reload)
        self._build_summary()
        self._build_layout()
        self._build_tensors()
        self._build_tensor()
        self._build_methods()
        self._build_memory()
        self._build_frames()
        self._build_time()
        self._build_delegates()
        self.tabs = widgets.Tab(children=[
            self.summary_panel, self.layout_panel, self.tensors_panel, self.tensor_panel,
            self.methods_panel, self.memory_panel, self.frames_panel, self.time_panel,
            self.delegates_panel], titles=self.TABS)
        self._stale: set[int] = set()
        super().__init__([self.picker, self.reload_bar, self.status, self.tabs],
                         layout=widgets.Layout(width="100%"))
        self.add_class("wb-explorer")
        self.tabs.observe(self._on_tab, names="selected_index")
        self.picker.observe(lambda ch: self.load(ch["new"]), names="path")
        self.load(self.picker.path)

    def __repr__(self) -> str:
        """What the widget says where it cannot be drawn: a notebook on GitHub, a static page
        (file names only, never a folder)."""
        return widget_repr("Explorer", getattr(self, "picker", None))

    # -- opening ------------------------------------------------------------------------------
    def load(self, path: str) -> None:
        """Open ``path`` and redraw the visible tab (errors are shown in red)."""
        from .._open import open as wb_open

        old, self.art = self.art, None
        if old is not None:
            old.close()
        self.status.clear()
        self.reload_bar.hide()
        self._stale = set(range(len(self.TABS)))
        if path:
            try:
                self.art = wb_open(path, data=self.data)
            except Exception as exc:  # shown in the widget
                self.status.show_error(exc)
        self._reset_controls()
        self._render(self.tabs.selected_index or 0)

    def reload(self) -> None:
        """Open the shown artifact again (same path, same ``data``) and redraw: the action of
        the Reload button that appears when the file changed on disk.

        Example:
            >>> ex.reload()          # doctest: +SKIP
        """
        self.load(self.art.path if self.art is not None else self.picker.path)

    @guarded
    def _reset_controls(self) -> None:
        """Fill the filter dropdowns from the new artifact's frames."""
        art = self.art
        ten = self._frame("tensors")
        self._set_options(self.storage_filter, ten, "storage")
        self._set_options(self.dtype_filter, ten, "dtype")
        self._set_options(self.method_filter, ten, "method")
        self._set_options(self.segment_kind, self._frame("segments"), "kind")
        self._set_options(self.memory_method, self._frame("memory_plan"), "method")
        self.frame_pick.options = list(art.frames) if art is not None else []
        self.tensor_filter.value = ""
        self._reset_time()
        self._reset_delegates()

    # -- lazy drawing ---------------------------------------------------------------------------
    def _on_tab(self, change: dict) -> None:
        if change["new"] is not None:
            self._render(change["new"])

    def _render(self, index: int) -> None:
        if index not in self._stale:
            return
        if self.art is not None and self.art.is_stale():  # one stat per file, per tab drawn
            reason = next((c for c in (s.changes() for s in self.art.sources.values()) if c),
                          "changed")
            self.reload_bar.offer(f"{os.path.basename(self.art.path)}: {reason}")
        self._stale.discard(index)
        draw: list[Callable[[], None]] = [
            self._draw_summary, self._draw_layout, self._draw_tensors, self._draw_tensor,
            self._draw_methods, self._draw_memory, self._draw_frame, self._draw_time,
            self._draw_delegates]
        guarded(lambda _self: draw[index]())(self)

    def render_all(self) -> None:
        """Draw every tab now (normally each is drawn when first shown)."""
        for i in sorted(self._stale):
            self._render(i)
