"""``LoadPathProfiler``: choose load paths, run :func:`workbench.profile` with a progress bar,
and see the results as a table and a chart (GB/s against the rooflines, memory held)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ._common import ArtifactPicker, FigureView, PagedTable, StatusLine, guarded, note_html, widget_repr

if TYPE_CHECKING:
    from ..profiling import Profile

__all__ = ["LoadPathProfiler", "DEFAULT_PATHS"]

#: Paths ticked by default: quick ones (their workers import neither torch nor ExecuTorch).
DEFAULT_PATHS = ("read", "readinto", "per_tensor_copy", "mmap_touch", "mmap_populate", "wb_views",
                 "pt2_views")
#: Columns of the results table (those present, in this order).
SUMMARY_COLUMNS = ("path", "device", "status", "runs", "load_s", "read_s", "wall_s", "consume",
                   "read_bytes", "gbps", "frac_roofline", "roofline", "peak_rss_growth",
                   "rss_anon_growth", "rss_file_growth", "locked", "cold_achieved", "error", "note")


class LoadPathProfiler(widgets.VBox):
    """Profile how an artifact's bytes get into memory, path by path.

    One checkbox per registered load path (:data:`workbench.loadpaths.PATHS`); paths that do
    not apply here — CUDA paths without a GPU, ``.pt2`` paths for a ``.pte``, … — are
    disabled, with the reason next to them. *Run* profiles the ticked paths one after the
    other (each run in a new process, see :func:`workbench.profile`), with its progress bar.
    The table shows each path's load and read phases (the read reads every weight byte once,
    so totals compare like with like); the chart stacks them, with the spread of the runs.
    When a cold run could not evict the files, the status line says so and why.

    Args:
        path: the artifact (its folder's artifacts are offered in the picker).
        paths: paths to tick (default: the quick CPU paths in :data:`DEFAULT_PATHS`).
        data: ``.ptd`` files for a ``.pte`` (as in :func:`workbench.open`).
        trusted: allow paths that execute content from the file (unpickling, ``dlopen``).

    Attributes:
        result: the last :class:`~workbench.profiling.Profile` (``None`` before a run).
        checks: path name -> its checkbox; ``cold``, ``repeat``, ``run_button``, ``progress``,
            ``table``, ``chart``, ``status``: the other controls.

    Example:
        >>> prof = LoadPathProfiler("sample_models/mlp_portable.pte")   # doctest: +SKIP
        >>> prof.run()      # the same as clicking Run                  # doctest: +SKIP
        >>> prof.result.summary                                          # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str], *, paths: Sequence[str] | None = None,
                 data: Sequence[str] | None = None, trusted: bool = False) -> None:
        self.result: Profile | None = None
        self.data = list(data) if data is not None else None
        self.trusted = trusted
        self.wanted = tuple(paths) if paths is not None else DEFAULT_PATHS
        self.picker = ArtifactPicker(path)
        self.status = StatusLine()
        self.checks: dict[str, widgets.Checkbox] = {}
        self.reasons: dict[str, str | None] = {}
        self.path_box = widgets.VBox()
        self.cold = widgets.ToggleButton(value=False, description="cold page cache", icon="snowflake-o",
                                         tooltip="evict the files from the page cache before each run")
        self.repeat = widgets.BoundedIntText(value=3, min=1, max=20, description="repeats",
                                             layout=widgets.Layout(width="160px"))
        self.run_button = widgets.Button(description="Run", button_style="primary", icon="play")
        # workbench.profile draws its tqdm progress bar (a widget in Jupyter) in here
        self.progress = widgets.Output(layout=widgets.Layout(min_width="320px"))
        self.progress_label = widgets.Label()
        self.rooflines = widgets.HTML()
        self.table = PagedTable(page_size=25, empty="no results yet: tick paths and press Run")
        self.chart = FigureView()
        self.run_button.on_click(lambda _: self.run())
        self.picker.observe(lambda _: self._fill_paths(), names="path")
        controls = widgets.HBox([self.cold, self.repeat, self.run_button, self.progress,
                                 self.progress_label], layout=widgets.Layout(align_items="center",
                                                                             flex_flow="row wrap"))
        super().__init__([self.picker, widgets.HTML("<b>Load paths</b>"), self.path_box, controls,
                          self.status, self.rooflines, self.table, self.chart],
                         layout=widgets.Layout(width="100%"))
        self.add_class("wb-profiler")
        self._fill_paths()

    @guarded

    def __repr__(self) -> str:
        """What the widget says where it cannot be drawn: a notebook on GitHub, a static page
        (file names only, never a folder)."""
        return widget_repr("LoadPathProfiler", getattr(self, "picker", None))

    def _fill_paths(self) -> None:
        """One checkbox per registered path; disabled (with the reason) where it cannot run."""
        from ..loadpaths import PATHS
        from ..loadpaths.cuda import cuda_unavailable
        from ..profiling import make_plan

        self.status.clear()
        self.checks, self.reasons, rows = {}, {}, []
        self.path_box.children = ()
        if not self.picker.path:
            return
        plan = make_plan(self.picker.path, data=self.data, trusted=self.trusted)
        no_cuda = cuda_unavailable() if any(lp.device == "cuda" for lp in PATHS.values()) else None
        for name, lp in PATHS.items():
            reason = no_cuda if lp.device == "cuda" and no_cuda else lp.applies(plan)
            self.reasons[name] = reason
            box = widgets.Checkbox(value=reason is None and name in self.wanted, disabled=reason is not None,
                                   description=name, indent=False, tooltip=lp.doc,
                                   layout=widgets.Layout(width="210px"))
            self.checks[name] = box
            why = (f'<span style="color:#888">{lp.device} · cannot run: {_escape(reason)}</span>'
                   if reason else f'<span style="color:#555">{lp.device} · {_escape(lp.doc)}</span>')
            rows.append(widgets.HBox([box, widgets.HTML(why)], layout=widgets.Layout(align_items="center")))
        self.path_box.children = tuple(rows)

    @property
    def selected(self) -> list[str]:
        """The ticked (and enabled) paths, in registry order."""
        return [n for n, c in self.checks.items() if c.value and not c.disabled]

    @guarded
    def run(self) -> Profile | None:
        """Profile the ticked paths (what the Run button does); returns the :class:`Profile`."""
        from ..profiling import profile

        names = self.selected
        if not names:
            self.status.note("tick at least one load path")
            return None
        self.status.clear()
        self.run_button.disabled = True
        self.progress_label.value = f"running {len(names)} paths × {self.repeat.value}…"
        try:
            with self.progress:  # the progress bar of workbench.profile appears here
                self.result = profile(self.picker.path, paths=names, cold=self.cold.value,
                                         repeat=self.repeat.value, data=self.data, progress=True,
                                         trusted=self.trusted)
        finally:
            self.run_button.disabled = False
        self.progress.clear_output()
        self.progress_label.value = f"done: {len(names)} paths × {self.repeat.value} runs"
        self._show()
        return self.result

    def _show(self) -> None:
        prof = self.result
        if prof is None:
            return
        rl = prof.rooflines
        parts = [f"{n} {g:,.2f} GB/s" for n, g in zip(rl["name"], rl["gbps"]) if g == g]
        self.rooflines.value = note_html("rooflines measured in this run: " + (", ".join(parts) or "none"))
        if prof.cold_notes:  # a "cold" run that was not: never let it pass for one
            self.status.note(prof.cold_notes[0])
        s = prof.summary
        self.table.set_frame(s[[c for c in SUMMARY_COLUMNS if c in s]])
        self.chart.show(prof.plot)


def _escape(text: Any) -> str:
    import html

    return html.escape(str(text))
