"""The explorer's tabs about the program: **Methods** (methods, operators, delegates),
**Memory plan** (the arena figure and the planned tensors), **Frames** (any frame, paged)
and **Delegates** (the ``delegates`` frame and the tensors and nodes inside each blob).

This module owns those tabs' widgets and drawing; they show frames as they are.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from .._fmt import human_bytes
from . import _common
from ._common import FigureView, PagedTable, guarded, note_html
from ._explorer_base import ALL, ExplorerTab

__all__ = ["MethodsTab", "MemoryPlanTab", "FramesTab", "DelegatesTab", "DELEGATE_COLUMNS"]

#: Columns of the Delegates tab's tables (those the frames have, in this order).
DELEGATE_COLUMNS = {
    "delegates": ("method", "index", "id", "backend", "location", "size", "calls", "file",
                  "offset", "compile_specs"),
    "delegate_tensors": ("method", "index", "name", "value", "dtype", "backend_dtype", "shape",
                         "nbytes", "role", "quant", "group_size", "storage", "named_key", "file",
                         "offset", "missing"),
    "delegate_nodes": ("method", "index", "node", "op", "inputs", "outputs", "debug_handle"),
}


class MethodsTab(ExplorerTab):
    """The Methods tab: the ``methods``, ``operators`` and ``delegates`` frames.

    Example:
        >>> ex.method_tables["operators"].frame          # doctest: +SKIP
    """

    def _build_methods(self) -> None:
        self.method_tables = {name: PagedTable(page_size=10, empty=f"no {name}")
                              for name in ("methods", "operators", "delegates")}
        parts: list[widgets.Widget] = []
        for name, table in self.method_tables.items():
            parts += [widgets.HTML(f"<b>{name.capitalize()}</b>"), table]
        self.methods_panel = widgets.VBox(parts)

    def _draw_methods(self) -> None:
        for name, table in self.method_tables.items():
            df = self._frame(name)
            table.empty = f"this {self.art.format if self.art else ''} artifact has no {name}"
            table.set_frame(df)


class MemoryPlanTab(ExplorerTab):
    """The Memory plan tab: the arenas of one method (or all) and the planned tensors.

    Example:
        >>> ex.memory_method.value = "forward"          # doctest: +SKIP
    """

    def _build_memory(self) -> None:
        self.memory_method = widgets.Dropdown(description="method", options=[ALL],
                                              layout=widgets.Layout(width="260px"))
        self.memory_view = FigureView()
        self.memory_table = PagedTable(page_size=10, empty="no memory-planned tensors")
        self.memory_method.observe(lambda _: guarded(MemoryPlanTab._draw_memory)(self), names="value")
        from ._memory_panel import MemoryFitPanel  # will it fit (wb.memory)

        self.memory_fit = MemoryFitPanel()
        self.memory_panel = widgets.VBox([self.memory_method, self.memory_view, self.memory_table,
                                          self.memory_fit])

    def _draw_memory(self) -> None:
        if not self._drawn("Memory plan"):
            return
        self.memory_fit.show(self.art)
        plan = self._frame("memory_plan")
        if plan is None:
            self.memory_view.show_note(f"{self.art.format if self.art else 'no artifact'}: no memory plan")
            self.memory_table.set_frame(None)
            return
        method = None if self.memory_method.value in (ALL, None) else self.memory_method.value
        art = self.art
        if plan.empty:
            self.memory_view.show_note("nothing is memory-planned in this artifact")
        else:
            self.memory_view.show(lambda: _common.plots_module().memory_plan(art, method=method))
        if method is not None:
            plan = plan[plan["method"].astype(str) == method]
        self.memory_table.set_frame(plan)


class FramesTab(ExplorerTab):
    """The Frames tab: any frame of the artifact, paged.

    Example:
        >>> ex.frame_pick.value = "segments"            # doctest: +SKIP
    """

    def _build_frames(self) -> None:
        self.frame_pick = widgets.Dropdown(description="frame", options=[],
                                           layout=widgets.Layout(width="260px"))
        self.frame_table = PagedTable(page_size=25)
        self.frame_pick.observe(lambda _: guarded(FramesTab._draw_frame)(self), names="value")
        self.frames_panel = widgets.VBox([self.frame_pick, self.frame_table])

    def _draw_frame(self) -> None:
        if not self._drawn("Frames"):
            return
        name = self.frame_pick.value
        self.frame_table.set_frame(self._frame(name) if name else None)


class DelegatesTab(ExplorerTab):
    """The Delegates tab: each delegate call target, the tensors inside the blobs and the
    nodes of the backend graphs, for one delegate or all.

    Example:
        >>> ex.delegate_tables["delegate_tensors"].frame   # doctest: +SKIP
    """

    def _build_delegates(self) -> None:
        self.delegate_pick = widgets.Dropdown(description="delegate", options=[ALL],
                                              layout=widgets.Layout(width="420px"))
        self.delegates_note = widgets.HTML()
        self.delegate_tables = {name: PagedTable(page_size=10, empty=f"no {name} rows")
                                for name in DELEGATE_COLUMNS}
        self.delegate_pick.observe(lambda _: guarded(DelegatesTab._draw_delegates)(self),
                                   names="value")
        titles = {"delegates": "<b>Delegates</b> — one row per delegate call target",
                  "delegate_tensors": "<b>Tensors inside the blobs</b> (delegate_tensors)",
                  "delegate_nodes": "<b>Nodes of the backend graphs</b> (delegate_nodes)"}
        parts: list[widgets.Widget] = [self.delegate_pick, self.delegates_note]
        for name, table in self.delegate_tables.items():
            parts += [widgets.HTML(titles[name]), table]
        self.delegates_panel = widgets.VBox(parts)

    def _reset_delegates(self) -> None:
        dl = self._frame("delegates")
        options: list[Any] = [(ALL, ALL)]
        if dl is not None:
            for r in dl.itertuples(index=False):
                options.append((f"{r.method} #{r.index} {r.id} ({human_bytes(int(r.size))})",
                                f"{r.method}\0{r.index}"))
        self.delegate_pick.options = options
        self.delegate_pick.value = ALL

    def _draw_delegates(self) -> None:
        if not self._drawn("Delegates"):
            return
        dl = self._frame("delegates")
        fmt = self.art.format if self.art is not None else "no artifact"
        if dl is None:
            self.delegates_note.value = note_html(f"{fmt}: no delegates frame")
        elif dl.empty:
            self.delegates_note.value = note_html(
                "no delegates: every instruction calls a kernel of the runtime")
        else:
            blobs = int(dl["size"].sum())
            inside = [f"{len(self.art.frames[n]):,} {n.split('_')[1]}" for n in
                      ("delegate_tensors", "delegate_nodes") if n in self.art.frames]
            self.delegates_note.value = note_html(
                f"{len(dl):,} delegates, {human_bytes(blobs)} of blobs"
                + (f"; inside them: {', '.join(inside)}" if inside else
                   "; this program's frames do not describe the blobs' insides"))
        pick = self.delegate_pick.value
        for name, table in self.delegate_tables.items():
            df = self._frame(name)
            if df is None:
                table.empty = f"{fmt}: no {name} frame"
                table.set_frame(None)
                continue
            if pick not in (ALL, None) and {"method", "index"} <= set(df.columns):
                method, index = pick.split("\0")
                df = df[(df["method"].astype(str) == method) & (df["index"] == int(index))]
            table.empty = f"no {name} rows"
            table.set_frame(df[[c for c in DELEGATE_COLUMNS[name] if c in df]])
