"""The explorer's **Tensors** tab (filter by name, storage, dtype, method; sort; paged) and
**Tensor** tab (one tensor's facts, statistics, histogram and first values), and
:func:`tensor_sample`, the values they compute statistics over.

This module owns those two tabs and how a tensor is read for display: a private copy
through the file descriptor up to :data:`COPY_FOR_STATS` bytes (never a fault), a strided
sample beyond :data:`MAX_SAMPLE` values.
"""

from __future__ import annotations

import html
import os
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from .._fmt import human_bytes
from ._common import FigureView, PagedTable, guarded, note_html, offer_reload
from ._explorer_base import ALL, MAX_OPTIONS, TENSOR_COLUMNS, ExplorerTab, tensor_columns

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["TensorsTab", "TensorTab", "tensor_sample", "SORTS", "WHY_NO_BYTES", "MAX_SAMPLE",
           "COPY_FOR_STATS"]

#: Options of the Tensors tab's sort dropdown: label -> (column, ascending).
SORTS: dict[str, tuple[str | None, bool]] = {
    "size ↓": ("nbytes", False), "size ↑": ("nbytes", True), "offset": ("offset", True),
    "name": ("name", True), "as stored": (None, True)}
#: Why a tensor has no stored bytes, by storage (shown in the Tensor tab; which storages hold
#: no bytes is :data:`workbench.vocab.NO_BYTES`).
WHY_NO_BYTES = {"planned": "memory-planned, placed in an arena at runtime",
                "unallocated": "provided at runtime (an input or output)",
                "external": "its bytes are in a data file that is not attached"}
#: Most values used for statistics and the histogram (a strided sample beyond this).
MAX_SAMPLE = 1_000_000
#: Tensors up to this size are copied for statistics (``tensor(copy=True)``: read through the
#: file descriptor, so a file truncated meanwhile is an error, never a SIGBUS); larger ones
#: are sampled from the checked view.
COPY_FOR_STATS = 64 << 20


def tensor_sample(x: Any) -> tuple[np.ndarray, bool]:
    """Flat float64 values of a tensor (numpy or torch, any float/int dtype) for statistics,
    and whether they are a strided sample (tensors over :data:`MAX_SAMPLE` elements).

    Example:
        >>> import numpy as np
        >>> values, sampled = tensor_sample(np.arange(6, dtype=np.int8).reshape(2, 3))
        >>> values.tolist(), sampled
        ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], False)
    """
    import numpy as np

    n = int(np.prod(tuple(x.shape))) if len(x.shape) else 1
    step = max(1, -(-n // MAX_SAMPLE))
    flat = x.reshape(-1)[::step]
    if not isinstance(flat, np.ndarray):  # torch: bfloat16, float8, ...
        flat = flat.float().numpy()
    if flat.dtype.kind not in "biuf":
        raise TypeError(f"no statistics for dtype {flat.dtype}")
    return flat.astype(np.float64), step > 1


class TensorsTab(ExplorerTab):
    """The Tensors tab: the tensors frame, filtered and sorted (:meth:`filtered_tensors`).

    Example:
        >>> ex.storage_filter.value = "external"           # doctest: +SKIP
        >>> len(ex.filtered_tensors())                     # doctest: +SKIP
    """

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
            w.observe(lambda _: guarded(TensorsTab._draw_tensors)(self), names="value")
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

    def _draw_tensors(self) -> None:
        if not self._drawn("Tensors"):  # the tab will draw itself when shown
            return
        out = self.filtered_tensors()
        if out is None:
            self.tensor_count.value = note_html("no tensors frame")
            self.tensor_table.set_frame(None)
            return
        stored = int(out.loc[out["offset"].notna(), "nbytes"].sum())
        self.tensor_count.value = note_html(f"{len(out):,} tensors, {human_bytes(stored)} stored")
        self.tensor_table.set_frame(tensor_columns(out))


class TensorTab(ExplorerTab):
    """The Tensor tab: pick one tensor; see its facts, statistics, histogram, first values.

    Example:
        >>> ex.tensor_filter.value = "fc1"                 # doctest: +SKIP
        >>> ex.tensor_values.value                         # doctest: +SKIP
    """

    def _build_tensor(self) -> None:
        self.tensor_filter = widgets.Text(placeholder="name contains…", description="find",
                                          continuous_update=True, layout=widgets.Layout(width="260px"))
        self.tensor_pick = widgets.Dropdown(description="tensor", options=[],
                                            layout=widgets.Layout(width="520px"))
        self.tensor_note = widgets.HTML()
        self.tensor_facts = widgets.HTML()
        self.tensor_hist = FigureView()
        self.tensor_values = widgets.HTML()
        self.tensor_filter.observe(lambda _: guarded(TensorTab._fill_tensor_pick)(self), names="value")
        self.tensor_pick.observe(lambda _: guarded(TensorTab._show_tensor)(self), names="value")
        self.tensor_panel = widgets.VBox([
            widgets.HBox([self.tensor_filter, self.tensor_pick], layout=widgets.Layout(flex_flow="row wrap")),
            self.tensor_note, self.tensor_facts, self.tensor_hist, self.tensor_values])

    def _draw_tensor(self) -> None:
        self._fill_tensor_pick()

    def _fill_tensor_pick(self) -> None:
        if not self._drawn("Tensor"):
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
                why = WHY_NO_BYTES.get(storage, "nothing is stored in the file")
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
