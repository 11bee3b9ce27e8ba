"""``Explorer``: pick an artifact, then browse its summary, byte layout, tensors, one
tensor's values, methods/operators/delegates, memory plan, every frame, where time goes (an
ETDump joined to the program, or a run recorded on demand) and what is inside its delegates
— in tabs that are drawn when first shown."""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from .._fmt import human_bytes
from ..vocab import SCAN_KINDS
from ._common import (
    ArtifactPicker,
    FigureView,
    PagedTable,
    ReloadBar,
    StatusLine,
    find_by_format,
    guarded,
    note_html,
    offer_reload,
    plots_module,
    table_html,
    widget_repr,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from matplotlib.figure import Figure

    from ..artifact import Artifact

__all__ = ["Explorer", "tensor_sample"]

#: Columns of the Tensors table (those the artifact has, in this order).
TENSOR_COLUMNS = ("name", "dtype", "shape", "nbytes", "storage", "file", "offset", "align",
                  "method", "value", "missing", "used_by")
#: Options of the Tensors tab's sort dropdown: label -> (column, ascending).
SORTS: dict[str, tuple[str | None, bool]] = {
    "size ↓": ("nbytes", False), "size ↑": ("nbytes", True), "offset": ("offset", True),
    "name": ("name", True), "as stored": (None, True)}
ALL = "(all)"
#: Why a tensor has no stored bytes, by storage.
NO_BYTES = {"planned": "memory-planned, placed in an arena at runtime",
            "unallocated": "provided at runtime (an input or output)",
            "external": "its bytes are in a data file that is not attached"}
#: Most options in a segment or tensor chooser; narrow with the filters beyond this.
MAX_OPTIONS = 500
#: Most values used for statistics and the histogram (a strided sample beyond this).
MAX_SAMPLE = 1_000_000
#: Tensors up to this size are copied for statistics (``tensor(copy=True)``: read through the
#: file descriptor, so a file truncated meanwhile is an error, never a SIGBUS); larger ones
#: are sampled from the checked view.
COPY_FOR_STATS = 64 << 20
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
#: Columns of the Delegates tab's tables (those the frames have, in this order).
DELEGATE_COLUMNS = {
    "delegates": ("method", "index", "id", "backend", "location", "size", "calls", "file",
                  "offset", "compile_specs"),
    "delegate_tensors": ("method", "index", "name", "value", "dtype", "backend_dtype", "shape",
                         "nbytes", "role", "quant", "group_size", "storage", "named_key", "file",
                         "offset", "missing"),
    "delegate_nodes": ("method", "index", "node", "op", "inputs", "outputs", "debug_handle"),
}


def tensor_sample(x: Any) -> tuple[np.ndarray, bool]:
    """Flat float64 values of a tensor (numpy or torch, any float/int dtype) for statistics,
    and whether they are a strided sample (tensors over :data:`MAX_SAMPLE` elements)."""
    import numpy as np

    n = int(np.prod(tuple(x.shape))) if len(x.shape) else 1
    step = max(1, -(-n // MAX_SAMPLE))
    flat = x.reshape(-1)[::step]
    if not isinstance(flat, np.ndarray):  # torch: bfloat16, float8, ...
        flat = flat.float().numpy()
    if flat.dtype.kind not in "biuf":
        raise TypeError(f"no statistics for dtype {flat.dtype}")
    return flat.astype(np.float64), step > 1


class Explorer(widgets.VBox):
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

    @staticmethod
    def _set_options(dd: widgets.Dropdown, df: pd.DataFrame | None, col: str) -> None:
        values = [] if df is None or col not in df else sorted(str(v) for v in df[col].dropna().unique())
        dd.options = [ALL, *values]
        dd.value = ALL

    def _frame(self, name: str) -> pd.DataFrame | None:
        """``art.frames[name]``, or ``None`` when there is no artifact or no such frame."""
        if self.art is None or name not in self.art.frames:
            return None
        return self.art.frames[name]

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

    # -- Summary --------------------------------------------------------------------------------
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
        self.treemap_view.show(lambda: plots_module().treemap(art))

    # -- Layout ---------------------------------------------------------------------------------
    def _build_layout(self) -> None:
        self.layout_log = widgets.Checkbox(value=False, description="log scale", indent=False)
        self.layout_view = FigureView()
        self.segment_kind = widgets.Dropdown(description="kind", options=[ALL],
                                             layout=widgets.Layout(width="220px"))
        self.segment_select = widgets.Select(options=[], rows=8, layout=widgets.Layout(width="100%"))
        self.segment_html = widgets.HTML()
        self.segment_tensors = PagedTable(page_size=10, empty="no tensor starts in this byte range")
        self.layout_log.observe(lambda _: guarded(Explorer._draw_layout_figure)(self), names="value")
        self.segment_kind.observe(lambda _: guarded(Explorer._fill_segments)(self), names="value")
        self.segment_select.observe(lambda _: guarded(Explorer._show_segment)(self), names="value")
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
        self.layout_view.show(lambda: plots_module().layout(art, log=self.layout_log.value))

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
        self.segment_tensors.set_frame(self._tensor_columns(inside.sort_values("offset", kind="stable")))

    # -- Tensors --------------------------------------------------------------------------------
    def _build_tensors(self) -> None:
        narrow = widgets.Layout(width="200px")
        self.name_filter = widgets.Text(placeholder="name contains…", description="name",
                                        layout=widgets.Layout(width="260px"))
        self.storage_filter = widgets.Dropdown(description="storage", options=[ALL], layout=narrow)
        self.dtype_filter = widgets.Dropdown(description="dtype", options=[ALL], layout=narrow)
        self.method_filter = widgets.Dropdown(description="method", options=[ALL], layout=narrow)
        self.sort_by = widgets.Dropdown(description="sort", options=list(SORTS), layout=narrow)
        self.tensor_count = widgets.HTML()
        self.tensor_table = PagedTable(page_size=25, empty="no tensor matches the filters")
        for w in (self.name_filter, self.storage_filter, self.dtype_filter, self.method_filter,
                  self.sort_by):
            w.observe(lambda _: guarded(Explorer._draw_tensors)(self), names="value")
        controls = widgets.HBox([self.name_filter, self.storage_filter, self.dtype_filter,
                                 self.method_filter, self.sort_by],
                                layout=widgets.Layout(flex_flow="row wrap"))
        self.tensors_panel = widgets.VBox([controls, self.tensor_count, self.tensor_table])

    def filtered_tensors(self) -> pd.DataFrame | None:
        """The tensors frame with the Tensors tab's filters and sort applied."""
        ten = self._frame("tensors")
        if ten is None:
            return None
        keep = ten["name"].str.contains(self.name_filter.value, case=False, regex=False).fillna(False)
        for dd, col in ((self.storage_filter, "storage"), (self.dtype_filter, "dtype"),
                        (self.method_filter, "method")):
            if dd.value not in (ALL, None) and col in ten:
                keep &= ten[col].astype(str) == dd.value
        out = ten[keep.to_numpy(dtype=bool)]
        col, asc = SORTS[self.sort_by.value]
        if col is not None and col in out:
            out = out.sort_values(col, ascending=asc, kind="stable", na_position="last")
        return out

    def _tensor_columns(self, df: pd.DataFrame) -> pd.DataFrame:
        return df[[c for c in TENSOR_COLUMNS if c in df]]

    def _draw_tensors(self) -> None:
        if 2 in self._stale:  # not drawn yet: the tab will draw itself when shown
            return
        out = self.filtered_tensors()
        if out is None:
            self.tensor_count.value = note_html("no tensors frame")
            self.tensor_table.set_frame(None)
            return
        stored = int(out.loc[out["offset"].notna(), "nbytes"].sum())
        self.tensor_count.value = note_html(f"{len(out):,} tensors, {human_bytes(stored)} stored")
        self.tensor_table.set_frame(self._tensor_columns(out))

    # -- Tensor ---------------------------------------------------------------------------------
    def _build_tensor(self) -> None:
        self.tensor_filter = widgets.Text(placeholder="name contains…", description="find",
                                          continuous_update=True, layout=widgets.Layout(width="260px"))
        self.tensor_pick = widgets.Dropdown(description="tensor", options=[],
                                            layout=widgets.Layout(width="520px"))
        self.tensor_note = widgets.HTML()
        self.tensor_facts = widgets.HTML()
        self.tensor_hist = FigureView()
        self.tensor_values = widgets.HTML()
        self.tensor_filter.observe(lambda _: guarded(Explorer._fill_tensor_pick)(self), names="value")
        self.tensor_pick.observe(lambda _: guarded(Explorer._show_tensor)(self), names="value")
        self.tensor_panel = widgets.VBox([
            widgets.HBox([self.tensor_filter, self.tensor_pick], layout=widgets.Layout(flex_flow="row wrap")),
            self.tensor_note, self.tensor_facts, self.tensor_hist, self.tensor_values])

    def _draw_tensor(self) -> None:
        self._fill_tensor_pick()

    def _fill_tensor_pick(self) -> None:
        if 3 in self._stale:
            return
        ten = self._frame("tensors")
        if ten is None:
            self.tensor_pick.options = []
            self._show_tensor()
            return
        sub = ten[ten["name"].str.contains(self.tensor_filter.value, case=False, regex=False)
                  .fillna(False).to_numpy(dtype=bool)]
        # stored tensors first, largest first: the interesting ones
        order = sub.assign(_stored=sub["offset"].notna()).sort_values(
            ["_stored", "nbytes"], ascending=[False, False], kind="stable")
        options = []
        for i, row in zip(order.index[:MAX_OPTIONS], order.head(MAX_OPTIONS).itertuples(index=False)):
            where = f" · {os.path.basename(row.file)}" if isinstance(row.file, str) else ""
            shape = "×".join(map(str, row.shape)) or "scalar"
            options.append((f"{row.name} · {row.dtype}[{shape}] · {row.storage}{where}", i))
        self.tensor_pick.options = options
        self.tensor_pick.value = options[0][1] if options else None
        self.tensor_note.value = (note_html(f"the chooser lists the first {MAX_OPTIONS} of {len(order):,} "
                                            "matches (stored and largest first): type to narrow")
                                  if len(order) > MAX_OPTIONS else "")
        self._show_tensor()

    def _key(self, row: pd.Series) -> Any:
        """The key ``art.tensor`` takes for a row: ``(method, value)`` where there is one."""
        import pandas as pd

        if "method" in row and "value" in row and not pd.isna(row["method"]) and not pd.isna(row["value"]):
            return (str(row["method"]), int(row["value"]))
        return row["name"]

    def _show_tensor(self) -> None:
        import numpy as np
        import pandas as pd

        ten = self._frame("tensors")
        i = self.tensor_pick.value
        if ten is None or i is None:
            self.tensor_facts.value = note_html("no tensor")
            self.tensor_hist.show_note("")
            self.tensor_values.value = ""
            return
        row = ten.loc[i]
        facts = [(k, row[k]) for k in TENSOR_COLUMNS if k in row and not
                 (not isinstance(row[k], tuple) and pd.isna(row[k]))]
        if "dim_order" in row and isinstance(row["dim_order"], tuple):
            facts.append(("dim_order", row["dim_order"]))
        body = "".join(f'<tr><th style="text-align:left;padding:1px 12px 1px 0">{html.escape(k)}</th>'
                       f'<td style="overflow-wrap:anywhere">{html.escape(_fmt(v))}</td></tr>'
                       for k, v in facts)
        self.tensor_facts.value = f'<table style="font-size:13px;line-height:1.5">{body}</table>'
        self.tensor_values.value = ""
        if pd.isna(row["offset"]):
            missing = row.get("missing")
            if missing is not None and not pd.isna(missing) and bool(missing):
                self.tensor_hist.show_error(self._read_error(row))  # external bytes not found: why
            else:
                storage = str(row["storage"])
                why = NO_BYTES.get(storage, "nothing is stored in the file")
                self.tensor_hist.show_note(f"no stored bytes (storage: {storage}): {why}")
            return
        assert self.art is not None
        try:
            # a copy (read through the descriptor: never faults) unless it is big; the view
            # is checked against the file's identity when it is handed out
            x = self.art.tensor(self._key(row), copy=bool(row["nbytes"] <= COPY_FOR_STATS))
            values, sampled = tensor_sample(x)
        except Exception as exc:  # shown in the widget
            self.tensor_hist.show_error(exc)
            offer_reload(self, exc)
            return
        finite = values[np.isfinite(values)]
        stats = {"min": finite.min() if finite.size else np.nan,
                 "max": finite.max() if finite.size else np.nan,
                 "mean": finite.mean() if finite.size else np.nan,
                 "std": finite.std() if finite.size else np.nan,
                 "zeros": f"{(values == 0).mean():.1%}" if values.size else "-",
                 "non-finite": int(values.size - finite.size)}
        kind = str(x.dtype) if str(x.dtype).startswith("torch.") else f"numpy.{x.dtype}"
        first, _ = tensor_sample(x.reshape(-1)[:16])  # the tensor's own first values, not the sample's
        head = ", ".join(f"{v:.6g}" for v in first)
        more = ", …" if int(np.prod(tuple(x.shape))) > 16 else ""
        stat_text = " · ".join(f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in stats.items())
        self.tensor_values.value = (
            '<div style="font-size:13px;line-height:1.6"><b>statistics</b> '
            f'({"strided sample, " if sampled else ""}'
            f"{values.size:,} values; viewed as {html.escape(kind)}): "
            f"{html.escape(stat_text)}<br><b>first values</b>: "
            f"<code>[{html.escape(head)}{more}]</code></div>")
        self.tensor_hist.show(lambda: _histogram(values, str(row["name"]), str(row["dtype"])))

    def _read_error(self, row: pd.Series) -> Exception:
        assert self.art is not None
        try:
            self.art.tensor(self._key(row))
        except Exception as exc:  # the reason, shown in red
            return exc
        return RuntimeError("expected the read to fail")  # pragma: no cover

    # -- Methods --------------------------------------------------------------------------------
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

    # -- Memory plan ----------------------------------------------------------------------------
    def _build_memory(self) -> None:
        self.memory_method = widgets.Dropdown(description="method", options=[ALL],
                                              layout=widgets.Layout(width="260px"))
        self.memory_view = FigureView()
        self.memory_table = PagedTable(page_size=10, empty="no memory-planned tensors")
        self.memory_method.observe(lambda _: guarded(Explorer._draw_memory)(self), names="value")
        self.memory_panel = widgets.VBox([self.memory_method, self.memory_view, self.memory_table])

    def _draw_memory(self) -> None:
        if 5 in self._stale:
            return
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
            self.memory_view.show(lambda: plots_module().memory_plan(art, method=method))
        if method is not None:
            plan = plan[plan["method"].astype(str) == method]
        self.memory_table.set_frame(plan)

    # -- Frames ---------------------------------------------------------------------------------
    def _build_frames(self) -> None:
        self.frame_pick = widgets.Dropdown(description="frame", options=[],
                                           layout=widgets.Layout(width="260px"))
        self.frame_table = PagedTable(page_size=25)
        self.frame_pick.observe(lambda _: guarded(Explorer._draw_frame)(self), names="value")
        self.frames_panel = widgets.VBox([self.frame_pick, self.frame_table])

    def _draw_frame(self) -> None:
        if 6 in self._stale:
            return
        name = self.frame_pick.value
        self.frame_table.set_frame(self._frame(name) if name else None)


    # -- Time -----------------------------------------------------------------------------------
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
        self.time_trace.observe(lambda _: guarded(Explorer._on_trace)(self), names="value")
        self.time_record.observe(lambda _: guarded(Explorer._on_trace)(self), names="value")
        self.time_path.observe(lambda ch: guarded(Explorer._on_trace_path)(self, ch["new"]),
                               names="value")
        self.time_run.observe(lambda _: guarded(Explorer._show_run)(self), names="value")
        self.run_button.on_click(lambda _b: guarded(Explorer.run_program)(self))
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
        plots = plots_module()
        self.operators_view.show(lambda: plots.operators(t))
        self._show_run()

    def _show_run(self) -> None:
        t, run = self.timeline, self.time_run.value
        if getattr(self, "_time_quiet", False) or t is None or run is None:
            return
        plots = plots_module()
        self.timeline_view.show(lambda: plots.timeline(t, run=run))
        rows = t[t["run"] == run]
        self.time_table.set_frame(rows[[c for c in TIME_COLUMNS if c in rows]])

    # -- Delegates ------------------------------------------------------------------------------
    def _build_delegates(self) -> None:
        self.delegate_pick = widgets.Dropdown(description="delegate", options=[ALL],
                                              layout=widgets.Layout(width="420px"))
        self.delegates_note = widgets.HTML()
        self.delegate_tables = {name: PagedTable(page_size=10, empty=f"no {name} rows")
                                for name in DELEGATE_COLUMNS}
        self.delegate_pick.observe(lambda _: guarded(Explorer._draw_delegates)(self),
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
        if self.TABS.index("Delegates") in self._stale:
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


def _fmt(v: Any) -> str:
    """A fact for the Tensor tab: ints with separators, tuples as tuples."""
    import numbers

    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return f"{int(v):,}"
    return str(v)


def _histogram(values: np.ndarray, name: str, dtype: str) -> Figure:
    """A histogram of a tensor's finite values (a plain Figure, not pyplot's)."""
    import numpy as np
    from matplotlib.figure import Figure

    finite = values[np.isfinite(values)]
    fig = Figure(figsize=(7, 2.6), layout="constrained")
    ax = fig.add_subplot()
    if finite.size:
        bins = int(min(60, max(1, np.unique(finite[:10000]).size)))
        ax.hist(finite, bins=bins, color="#4c72b0")
    title = name if len(name) <= 60 else name[:59] + "…"
    ax.set_title(f"{title} ({dtype}): {finite.size:,} finite values", fontsize=10)
    ax.set_xlabel("value")
    ax.set_ylabel("count")
    return fig
