"""The explorer's **Time** tab: a program's ETDump joined to its instructions by
:func:`workbench.timeline` — one run as a timeline, time per operator, and each event with the
bytes its instruction reads and writes. Traces come from beside the program, a typed path,
or the **Run with ETDump** button (:func:`workbench.run` in a child process, never on its own).

This module owns the Time tab: choosing a trace, reading or recording it, drawing it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from . import _common
from ._common import FigureView, PagedTable, StatusLine, find_by_format, guarded, offer_reload
from ._explorer_base import ExplorerTab

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TimeTab", "TIME_COLUMNS", "PROGRAMS", "NO_TRACE", "RECORDED"]

#: Columns of the Time tab's table (those the timeline frame has, in this order): the event,
#: the instruction it ran, its duration and the bytes that instruction reads and writes.
TIME_COLUMNS = ("run", "block", "iteration", "name", "kind", "method", "chain", "instruction",
                "op", "backend", "duration", "read_bytes", "write_bytes", "storages",
                "read_names", "write_names", "nodes", "module")
#: Formats the Time tab joins a trace to (and runs: .pte only).
PROGRAMS = ("pte", "bpte")
NO_TRACE = "(none)"
#: The Time tab's trace chooser value for the trace recorded by the Run button.
RECORDED = "\0recorded"


class TimeTab(ExplorerTab):
    """The Time tab (see the module docstring); :meth:`run_program` is the Run button.

    Attributes:
        timeline: the timeline frame the tab shows (``None`` before one is read or run).

    Example:
        >>> ex.tabs.selected_index = ex.TABS.index("Time")      # doctest: +SKIP
        >>> ex.timeline[["name", "duration"]].head()            # doctest: +SKIP
    """

    etdump: str | None
    etrecord: str | None
    runner: Callable[..., pd.DataFrame] | None
    timeline: pd.DataFrame | None

    def _build_time(self) -> None:
        wide = widgets.Layout(width="360px")
        self.time_trace = widgets.Dropdown(description="ETDump", options=[NO_TRACE],
                                           layout=wide)
        self.time_record = widgets.Dropdown(description="ETRecord", options=[NO_TRACE],
                                            layout=wide)
        self.time_path = widgets.Text(placeholder="or type an .etdp path and press Enter",
                                      continuous_update=False,
                                      layout=widgets.Layout(width="320px"))
        self.run_method = widgets.Dropdown(description="method", options=[],
                                           layout=widgets.Layout(width="220px"))
        self.run_iterations = widgets.BoundedIntText(value=10, min=1, max=100_000,
                                                     description="iterations",
                                                     layout=widgets.Layout(width="180px"))
        self.run_button = widgets.Button(
            description="Run with ETDump", icon="play",
            tooltip="run the method on the ExecuTorch runtime in a child process, with "
                    "ETDump on, and show where its time goes")
        self.time_status = StatusLine()
        self.time_run = widgets.Dropdown(description="run", options=[],
                                         layout=widgets.Layout(width="320px"))
        self.timeline_view = FigureView()
        self.operators_view = FigureView()
        self.time_table = PagedTable(page_size=25, empty="no events in this run")
        self._time_quiet = False
        self.time_trace.observe(lambda _: guarded(TimeTab._on_trace)(self), names="value")
        self.time_record.observe(lambda _: guarded(TimeTab._on_trace)(self), names="value")
        self.time_path.observe(lambda ch: guarded(TimeTab._on_trace_path)(self, ch["new"]),
                               names="value")
        self.time_run.observe(lambda _: guarded(TimeTab._show_run)(self), names="value")
        self.run_button.on_click(lambda _b: guarded(TimeTab.run_program)(self))
        row = widgets.Layout(flex_flow="row wrap", align_items="center")
        self.time_panel = widgets.VBox([
            widgets.HBox([self.time_trace, self.time_record, self.time_path], layout=row),
            widgets.HBox([self.run_method, self.run_iterations, self.run_button], layout=row),
            self.time_status, self.time_run, self.timeline_view,
            widgets.HTML("<b>Time per operator</b> (median over the runs)"), self.operators_view,
            widgets.HTML("<b>Events of this run</b> — each with the bytes its instruction reads "
                         "and writes"), self.time_table])

    def _reset_time(self) -> None:
        """Trace choices for the new artifact: the ``.etdp`` / ``.etrecord`` files beside it
        (the ones with the program's name first chosen), or those passed in."""
        self.timeline = None
        art = self.art
        program = art is not None and art.format in PROGRAMS
        traces: list[str] = []
        records: list[str] = []
        if program:
            folder = os.path.dirname(art.path) or "."
            found = find_by_format(folder, ("etdump", "etrecord"))
            traces, records = found["etdump"], found["etrecord"]
        for extra, into in ((self.etdump, traces), (self.etrecord, records)):
            if extra and program and os.path.abspath(extra) not in map(os.path.abspath, into):
                into.insert(0, extra)
        stem = os.path.basename(art.path).split(".", 1)[0] if art is not None else ""

        def choose(paths: list[str], given: str | None, ext: str) -> str:
            if given and program:
                return given
            same = [p for p in paths if os.path.basename(p) == stem + ext]
            return same[0] if same else NO_TRACE

        with self._quiet_time():
            self.time_trace.options = [(NO_TRACE, NO_TRACE)] + [(os.path.basename(p), p)
                                                                for p in traces]
            self.time_trace.value = choose(traces, self.etdump, ".etdp")
            self.time_record.options = [(NO_TRACE, NO_TRACE)] + [(os.path.basename(p), p)
                                                                 for p in records]
            self.time_record.value = choose(records, self.etrecord, ".etrecord")
            self.time_path.value = ""
            methods = self._frame("methods")
            names = [] if methods is None or not program else [str(m) for m in methods["method"]]
            self.run_method.options = names
            self.run_method.value = "forward" if "forward" in names else (names[0] if names
                                                                          else None)
        self.run_button.disabled = art is None or art.format != "pte"
        self.time_status.clear()

    def _quiet_time(self) -> Any:
        explorer = self

        class Quiet:
            def __enter__(self) -> None:
                explorer._time_quiet = True

            def __exit__(self, *exc: object) -> None:
                explorer._time_quiet = False

        return Quiet()

    def _time_shown(self) -> bool:
        return (self.TABS.index("Time") not in getattr(self, "_stale", ())
                and not getattr(self, "_time_quiet", False))

    def _on_trace(self) -> None:
        """A trace or ETRecord was chosen: read it again when the tab is shown."""
        if getattr(self, "_time_quiet", False):
            return
        if self.time_trace.value != RECORDED:
            self.timeline = None
        if self._time_shown():
            self._draw_time()

    def _on_trace_path(self, path: str) -> None:
        path = os.path.expanduser(path.strip())
        if not path:
            return
        if not os.path.isfile(path):
            self.time_status.show_error(FileNotFoundError(f"no such file: {path}"))
            return
        options = list(self.time_trace.options)
        if path not in [v for _, v in options]:
            self.time_trace.options = [*options, (os.path.basename(path), path)]
        self.time_trace.value = path

    def _draw_time(self) -> None:
        art = self.art
        if art is None or art.format not in PROGRAMS:
            what = art.format if art is not None else "no artifact"
            self.time_status.note(f"{what}: the Time tab joins an ETDump to a program "
                                  "(.pte / .bpte)")
            self._show_timeline()
            return
        trace = self.time_trace.value
        if self.timeline is None and trace not in (NO_TRACE, RECORDED, None):
            self.timeline = self._read_timeline(trace)
        if self.timeline is None and trace in (NO_TRACE, None):
            self.time_status.note(
                "no ETDump: pick one above, type its path, or press Run with ETDump to record "
                f"one ({self.run_iterations.value} runs of {self.run_method.value or 'forward'} "
                "in a child process)" if art.format == "pte" else "no ETDump: pick one above")
        self._show_timeline()

    def _read_timeline(self, trace: str) -> pd.DataFrame | None:
        """``wb.timeline(program, trace, record)`` (errors shown in the tab)."""
        from .._open import open as wb_open
        from ..timing import timeline

        record = self.time_record.value
        opened = []
        try:
            opened.append(wb_open(trace))
            if record not in (NO_TRACE, None):
                opened.append(wb_open(record))
            t = timeline(self.art, *opened)
        except Exception as exc:  # shown in the tab
            self.time_status.show_error(exc)
            offer_reload(self, exc)
            return None
        finally:
            for a in opened:
                a.close()
        self.time_status.note(f"{os.path.basename(trace)}: {len(t):,} events in "
                              f"{t['run'].nunique():,} runs")
        return t

    def run_program(self) -> pd.DataFrame | None:
        """Run the shown program with ETDump on (the Run button): ``iterations`` runs of the
        chosen method in a child process, then show where the time went.

        Example:
            >>> ex.tabs.selected_index = ex.TABS.index("Time")      # doctest: +SKIP
            >>> ex.run_program()["duration"].sum()                  # doctest: +SKIP
        """
        art = self.art
        if art is None or art.format != "pte":
            self.time_status.note("Run works on a .pte program")
            return None
        runner = self.runner
        if runner is None:
            from ..timing import run as runner
        record = self.time_record.value
        data = next((d for d in self.data or () if str(d).endswith(".ptd")), None)
        method = self.run_method.value or "forward"
        n = int(self.run_iterations.value)
        self.run_button.disabled = True
        self.time_status.note(f"running {method} {n} times with ETDump on…")
        try:
            t = runner(art.path, iterations=n, method=method,
                       etrecord=None if record in (NO_TRACE, None) else record, data=data)
        except Exception as exc:  # the runtime failed: shown in the tab
            self.time_status.show_error(exc)
            return None
        finally:
            self.run_button.disabled = False
        self.timeline = t
        with self._quiet_time():
            options = [o for o in self.time_trace.options if o[1] != RECORDED]
            self.time_trace.options = [*options, (f"(recorded: {n} runs of {method})", RECORDED)]
            self.time_trace.value = RECORDED
        self.time_status.note(f"recorded {n} runs of {method}: {len(t):,} events")
        self._show_timeline()
        return t

    def _show_timeline(self) -> None:
        """Draw :attr:`timeline`: the run chooser, both figures and the run's events."""
        t = self.timeline
        if t is None or t.empty:
            with self._quiet_time():
                self.time_run.options = []
            self.timeline_view.show_note("" if t is None else "the trace has no events")
            self.operators_view.show_note("")
            self.time_table.set_frame(None)
            return
        runs = t.drop_duplicates("run")[["run", "block", "iteration"]]
        options = [(f"run {r.run} ({r.block}, iteration {r.iteration})", int(r.run))
                   for r in runs.itertuples(index=False)]
        execs = [v for (label, v) in options if "(Execute" in label]
        with self._quiet_time():
            self.time_run.options = options
            self.time_run.value = execs[-1] if execs else options[-1][1]
        plots = _common.plots_module()
        self.operators_view.show(lambda: plots.operators(t))
        self._show_run()

    def _show_run(self) -> None:
        t, run = self.timeline, self.time_run.value
        if getattr(self, "_time_quiet", False) or t is None or run is None:
            return
        plots = _common.plots_module()
        self.timeline_view.show(lambda: plots.timeline(t, run=run))
        rows = t[t["run"] == run]
        self.time_table.set_frame(rows[[c for c in TIME_COLUMNS if c in rows]])
