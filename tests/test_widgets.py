"""Widget logic without a browser: widgets are created in the test process, values are set as a
person would set them, and the tests assert on what the widgets then show (HTML, images,
error lines). Errors must appear in the widget, in red — never escape a callback.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from workbench.widgets import CompareView, Explorer, LoadPathProfiler
from workbench.widgets._common import PagedTable, find_artifacts

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
ARTIFACTS = [p for _, p in find_artifacts(SAMPLES)]


def _option(dropdown, suffix: str) -> str:
    return next(v for _, v in dropdown.options if str(v).endswith(suffix))


def test_import_workbench_stays_light() -> None:
    """``import workbench`` (and ``workbench.widgets``) import neither ipywidgets nor matplotlib."""
    code = ("import sys, workbench, workbench.widgets; "
            "bad = [m for m in ('ipywidgets', 'matplotlib', 'torch') if m in sys.modules]; "
            "sys.exit(f'imported {bad}' if bad else 0)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_picker_finds_artifacts_by_magic(tmp_path: pathlib.Path) -> None:
    shutil.copy(SAMPLES / "mlp_portable.pte", tmp_path / "renamed.weights")
    shutil.copy(SAMPLES / "mlp.pt2", tmp_path / "archive.zip")
    (tmp_path / "notes.pte").write_text("not a program")
    (tmp_path / "README.md").write_text("# hello")
    found = [os.path.basename(p) for _, p in find_artifacts(tmp_path)]
    assert found == ["archive.zip", "renamed.weights"]
    names = {os.path.basename(p) for p in ARTIFACTS}
    assert "README.md" not in names and "make_samples.py" not in names
    assert {"mlp_portable.pte", "mlp_external.ptd", "mlp.bpte", "mlp.pt2"} <= names


@pytest.mark.parametrize("path", ARTIFACTS, ids=[os.path.basename(p) for p in ARTIFACTS])
def test_explorer_draws_every_tab_of_every_sample(path: str) -> None:
    ex = Explorer(path)
    ex.render_all()
    assert ex.art is not None and not ex.status.has_error, ex.status.value
    assert ex.layout_view.image.value, ex.layout_view.message.value
    for view in (ex.layout_view, ex.treemap_view, ex.tensor_hist, ex.memory_view,
                 ex.timeline_view, ex.operators_view):
        assert not view.message.has_error, view.message.value
    assert not ex.time_status.has_error, ex.time_status.value
    assert ex.summary_html.value and ex.art.format in ex.summary_html.value


def test_explorer_follows_the_dropdown() -> None:
    ex = Explorer(SAMPLES / "mlp_portable.pte")
    ex.tabs.selected_index = ex.TABS.index("Layout")
    image, segments = ex.layout_view.image.value, ex.segment_select.options
    ex.picker.dropdown.value = _option(ex.picker.dropdown, "kv_cache.pte")
    assert ex.art.path.endswith("kv_cache.pte")
    assert ex.layout_view.image.value != image and ex.segment_select.options != segments
    # choosing a segment shows its row and the tensors stored in it
    constant = next(v for label, v in ex.segment_select.options if " constant " in label)
    ex.segment_select.value = constant
    assert "constant_segment" in ex.segment_html.value
    assert "forward/0" in ex.segment_tensors.html.value
    # tabs not shown yet are drawn when shown
    assert ex.tensor_table.frame is None
    ex.tabs.selected_index = ex.TABS.index("Tensors")
    assert ex.tensor_table.frame is not None and len(ex.tensor_table.frame) == len(ex.art.tensors)


def test_tensor_filters_and_sort() -> None:
    ex = Explorer(SAMPLES / "kv_cache.pte")
    ex.tabs.selected_index = ex.TABS.index("Tensors")
    total = len(ex.art.tensors)
    assert f"{total} tensors" in ex.tensor_count.value
    ex.storage_filter.value = "mutable"
    assert set(ex.tensor_table.frame["name"]) == {"k_cache", "v_cache"}
    ex.storage_filter.value = "(all)"
    ex.dtype_filter.value = "int64"
    assert set(ex.tensor_table.frame["dtype"].astype(str)) == {"int64"}
    ex.dtype_filter.value = "(all)"
    ex.name_filter.value = "CACHE"  # case-insensitive substring
    assert set(ex.tensor_table.frame["name"]) == {"k_cache", "v_cache"}
    ex.name_filter.value = ""
    ex.sort_by.value = "size ↑"
    sizes = ex.tensor_table.frame["nbytes"].tolist()
    assert sizes == sorted(sizes)
    ex.method_filter.value = "forward"
    assert len(ex.tensor_table.frame) == total


def test_paged_table_never_dumps_everything() -> None:
    import pandas as pd

    df = pd.DataFrame({"name": [f"t{i}" for i in range(10_000)], "nbytes": range(10_000)})
    table = PagedTable(page_size=25)
    table.set_frame(df)
    assert table.html.value.count("<tr>") == 26  # header + one page
    assert table.info.value == "rows 1–25 of 10,000" and table.prev.disabled
    table.next.click()
    assert ">t25<" in table.html.value and ">t24<" not in table.html.value
    table.go(10**9)
    assert table.info.value == "rows 9,976–10,000 of 10,000" and table.next.disabled
    table.page_size.value = 100
    assert table.page == 0 and table.html.value.count("<tr>") == 101
    table.set_frame(df.head(0))
    assert "no rows" in table.html.value


def test_table_cells_are_escaped() -> None:
    import pandas as pd

    table = PagedTable()
    table.set_frame(pd.DataFrame({"name": ["<script>alert(1)</script>"], "file": ["/a/b/c.pte"]}))
    assert "<script>" not in table.html.value and "&lt;script&gt;" in table.html.value
    assert ">c.pte<" in table.html.value


def test_tensor_tab_bf16_planned_and_missing() -> None:
    pytest.importorskip("torch")
    ex = Explorer(SAMPLES / "mlp_bf16.pte")
    ex.tabs.selected_index = ex.TABS.index("Tensor")
    assert "bfloat16" in ex.tensor_facts.value
    assert "torch.bfloat16" in ex.tensor_values.value and ex.tensor_hist.image.value
    planned = next(v for label, v in ex.tensor_pick.options if "planned" in label)
    ex.tensor_pick.value = planned
    assert "no stored bytes" in ex.tensor_hist.message.value and not ex.tensor_hist.message.has_error

    alone = Explorer(SAMPLES / "mlp_external.pte", data=[])
    alone.tabs.selected_index = alone.TABS.index("Tensor")
    alone.tensor_filter.value = "fc1.weight"
    assert alone.tensor_hist.message.has_error
    assert "MissingDataError" in alone.tensor_hist.message.value


def test_errors_are_shown_in_the_widget(tmp_path: pathlib.Path) -> None:
    data = (SAMPLES / "mlp_portable.pte").read_bytes()
    (tmp_path / "truncated.pte").write_bytes(data[: len(data) // 2])
    ex = Explorer(tmp_path / "truncated.pte")
    assert ex.art is None and ex.status.has_error
    assert "Error" in ex.status.value and "truncated.pte" in ex.status.value
    ex.render_all()  # every tab copes with no artifact
    ex.picker.text.value = str(tmp_path / "does-not-exist.pte")
    assert ex.picker.status.has_error and "no such file" in ex.picker.status.value
    ex.picker.text.value = str(SAMPLES / "mlp_portable.pte")
    assert ex.art is not None and not ex.status.has_error


def test_plot_failures_stay_in_the_widget(monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.widgets import _common

    def broken() -> None:
        raise ImportError("workbench.plots is not available (test); charts are disabled")

    monkeypatch.setattr(_common, "plots_module", broken)  # the explorer's tabs call it there
    ex = Explorer(SAMPLES / "mlp_portable.pte")
    ex.tabs.selected_index = ex.TABS.index("Layout")
    assert ex.layout_view.message.has_error and "charts are disabled" in ex.layout_view.message.value
    assert ex.segment_select.options  # the rest of the tab still works
    assert not ex.status.has_error


def test_compare_view() -> None:
    view = CompareView(SAMPLES / "tied_portable.pte", SAMPLES / "tied_xnnpack.pte")
    assert not view.status.has_error, view.status.value
    assert view.duplicate_table.frame is not None and len(view.duplicate_table.frame) == 1
    assert "4,096" in view.duplicate_table.html.value
    assert view.layout_view.image.value
    before = view.layout_view.image.value
    view.picker_a.dropdown.value = _option(view.picker_a.dropdown, "mlp_portable.pte")
    view.picker_b.dropdown.value = _option(view.picker_b.dropdown, "mlp_external.pte")
    assert "segment → external" in view.tensor_table.html.value
    assert view.layout_view.image.value != before
    view.show.value = "only in b"
    assert "no tensor matches" in view.tensor_table.html.value
    view.log_scale.value = True
    assert view.layout_view.image.value and not view.layout_view.message.has_error


def test_compare_view_shows_errors(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bad.pte").write_bytes(b"\x00\x00\x00\x00ET12" + b"\xff" * 8)
    view = CompareView(SAMPLES / "mlp_portable.pte", tmp_path / "bad.pte")
    assert view.cmp is None and view.status.has_error and "bad.pte" in view.status.value


def test_load_path_profiler() -> None:
    from workbench.loadpaths import PATHS
    from workbench.loadpaths.cuda import cuda_unavailable

    prof = LoadPathProfiler(SAMPLES / "mlp_portable.pte", paths=["read", "mmap_touch"])
    assert prof.selected == ["read", "mmap_touch"]
    assert prof.checks["pt2_views"].disabled and "pt2" in prof.reasons["pt2_views"]
    if cuda_unavailable():
        cuda = [n for n, lp in PATHS.items() if lp.device == "cuda"]
        assert cuda and all(prof.checks[n].disabled and prof.reasons[n] for n in cuda)
    prof.repeat.value = 1
    prof.run_button.click()
    assert not prof.status.has_error, prof.status.value
    summary = prof.result.summary
    assert summary["path"].tolist() == ["read", "mmap_touch"] and (summary["status"] == "ok").all()
    assert "mmap_touch" in prof.table.html.value and prof.chart.image.value
    assert "memcpy" in prof.rooflines.value
    for box in prof.checks.values():
        box.value = False
    prof.run()
    assert "tick at least one" in prof.status.value


def test_tensor_sample_strides_big_tensors_and_reads_torch_dtypes() -> None:
    import numpy as np

    from workbench.widgets._explorer_tensors import MAX_SAMPLE, tensor_sample

    big = np.arange(3 * MAX_SAMPLE, dtype=np.int8).reshape(3, -1)
    values, sampled = tensor_sample(big)
    assert sampled and values.dtype == np.float64 and values.size <= MAX_SAMPLE
    small, sampled = tensor_sample(np.ones((4, 4), dtype=np.float16))
    assert not sampled and small.tolist() == [1.0] * 16
    torch = pytest.importorskip("torch")
    bf16, _ = tensor_sample(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert bf16.tolist() == [1.5, -2.0]


# -- Time and Delegates tabs --------------------------------------------------------------------


class FakeRunner:
    """Stands in for ``wb.run``: records its calls and returns the sample trace's timeline."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.fail = fail

    def __call__(self, program, **kwargs):
        import workbench as wb

        self.calls.append((str(program), kwargs))
        if self.fail is not None:
            raise self.fail
        return wb.timeline(program, SAMPLES / "mlp_portable.etdp")


def test_time_tab_joins_the_trace_beside_the_program() -> None:
    import pandas as pd

    import workbench as wb

    runner = FakeRunner()
    ex = Explorer(SAMPLES / "mlp_portable.pte", runner=runner)
    assert ex.time_trace.value.endswith("mlp_portable.etdp")
    assert ex.time_record.value.endswith("mlp_portable.etrecord")
    assert ex.timeline is None  # nothing read before the tab is shown
    ex.tabs.selected_index = ex.TABS.index("Time")
    want = wb.timeline(SAMPLES / "mlp_portable.pte", SAMPLES / "mlp_portable.etdp",
                       SAMPLES / "mlp_portable.etrecord")
    pd.testing.assert_frame_equal(ex.timeline, want)
    assert not runner.calls  # showing the tab never runs the program
    last = int(want.loc[want["block"].astype(str) == "Execute", "run"].max())
    assert ex.time_run.value == last and ex.timeline_view.image.value
    assert ex.operators_view.image.value and not ex.time_status.has_error
    rows = want[want["run"] == last]
    assert len(ex.time_table.frame) == len(rows)
    assert {"duration", "read_bytes", "write_bytes", "storages"} <= set(ex.time_table.frame)
    kernel = rows[rows["kind"].astype(str) == "kernel"].iloc[0]
    assert f"{int(kernel['read_bytes']):,}" in ex.time_table.html.value
    # another run: the figure and the table follow
    image = ex.timeline_view.image.value
    ex.time_run.value = last - 1
    assert ex.time_table.frame["run"].eq(last - 1).all()
    assert ex.timeline_view.image.value != image
    # without the ETRecord: the nodes are gone, the times stay
    ex.time_record.value = "(none)"
    assert ex.timeline["nodes"].isna().all() and len(ex.timeline) == len(want)


def test_time_tab_run_button_calls_the_runner() -> None:
    runner = FakeRunner()
    ex = Explorer(SAMPLES / "kv_cache.pte", runner=runner)
    ex.render_all()
    assert not runner.calls and ex.timeline is None  # no trace beside kv_cache.pte
    assert "Run with ETDump" in ex.time_status.value
    ex.tabs.selected_index = ex.TABS.index("Time")
    ex.run_iterations.value = 3
    ex.run_button.click()
    assert len(runner.calls) == 1
    path, kwargs = runner.calls[0]
    assert path.endswith("kv_cache.pte")
    assert kwargs == {"iterations": 3, "method": "forward", "etrecord": None, "data": None}
    assert ex.time_trace.value != "(none)" and "recorded" in ex.time_trace.label
    assert ex.timeline is not None and ex.timeline_view.image.value
    assert "recorded 3 runs of forward" in ex.time_status.value
    assert not ex.run_button.disabled


def test_time_tab_shows_failures_in_red(tmp_path: pathlib.Path) -> None:
    runner = FakeRunner(fail=RuntimeError("kv_cache.pte: the ExecuTorch runtime failed (exit -6)"))
    ex = Explorer(SAMPLES / "kv_cache.pte", runner=runner)
    ex.tabs.selected_index = ex.TABS.index("Time")
    ex.run_button.click()
    assert ex.time_status.has_error and "runtime failed" in ex.time_status.value
    assert not ex.run_button.disabled and ex.timeline is None and not ex.status.has_error
    # a file that is not a trace, typed in: the reason in red
    ex.time_path.value = str(SAMPLES / "mlp_portable.pte")
    assert ex.time_status.has_error and "trace" in ex.time_status.value
    ex.time_path.value = str(tmp_path / "missing.etdp")
    assert ex.time_status.has_error and "no such file" in ex.time_status.value
    # a trace of another program: joined, its events unattributed rather than wrong
    ex.time_path.value = str(SAMPLES / "mlp_portable.etdp")
    assert not ex.time_status.has_error and ex.timeline is not None
    assert (ex.timeline["attribution"].astype(str) != "exact").any()


def test_time_tab_is_for_programs() -> None:
    ex = Explorer(SAMPLES / "mlp.pt2", runner=FakeRunner())
    ex.tabs.selected_index = ex.TABS.index("Time")
    assert "joins an ETDump to a program" in ex.time_status.value
    assert ex.run_button.disabled and ex.time_trace.options == (("(none)", "(none)"),)
    bundled = Explorer(SAMPLES / "mlp.bpte", runner=FakeRunner(),
                       etdump=SAMPLES / "mlp_portable.etdp")
    bundled.tabs.selected_index = bundled.TABS.index("Time")
    assert bundled.run_button.disabled  # the runtime runs a .pte
    assert bundled.timeline is not None and bundled.timeline_view.image.value


def test_time_tab_runs_the_program_for_real() -> None:
    """The Run button with the real runner: wb.run in a child process, then the timeline."""
    pytest.importorskip("executorch.extension.pybindings.portable_lib")
    ex = Explorer(SAMPLES / "mlp_portable.pte", etrecord=SAMPLES / "mlp_portable.etrecord")
    ex.tabs.selected_index = ex.TABS.index("Time")
    ex.run_iterations.value = 2
    t = ex.run_program()
    assert t is not None and not ex.time_status.has_error, ex.time_status.value
    assert (t["block"].astype(str) == "Execute").sum() > 0 and t["run"].nunique() == 3
    assert t.loc[t["kind"].astype(str) == "kernel", "op"].notna().all()
    assert ex.timeline_view.image.value and ex.operators_view.image.value


def test_delegates_tab() -> None:
    import workbench as wb

    ex = Explorer(SAMPLES / "mlp_xnnpack.pte")
    ex.tabs.selected_index = ex.TABS.index("Delegates")
    art = wb.open(SAMPLES / "mlp_xnnpack.pte")
    assert len(ex.delegate_tables["delegates"].frame) == len(art.frames["delegates"]) == 1
    assert "XnnpackBackend" in ex.delegate_tables["delegates"].html.value
    for name in ("delegate_tensors", "delegate_nodes"):
        table = ex.delegate_tables[name]
        if name in art.frames:  # the blob parsers' frames, where the program has them
            assert len(table.frame) == len(art.frames[name]) > 0
        else:
            assert table.frame is None and f"no {name} frame" in table.html.value
    if "delegate_tensors" in art.frames:
        assert "named_data" in ex.delegate_tables["delegate_tensors"].html.value
        assert f"{len(art.frames['delegate_tensors'])} tensors" in ex.delegates_note.value
    # one delegate chosen: the rows of that delegate
    ex.delegate_pick.value = ex.delegate_pick.options[1][1]
    assert len(ex.delegate_tables["delegates"].frame) == 1
    portable = Explorer(SAMPLES / "mlp_portable.pte")
    portable.tabs.selected_index = portable.TABS.index("Delegates")
    assert "no delegates" in portable.delegates_note.value
    assert portable.delegate_tables["delegates"].frame is not None
    assert not portable.status.has_error
    pt2 = Explorer(SAMPLES / "mlp.pt2")
    pt2.tabs.selected_index = pt2.TABS.index("Delegates")
    assert "no delegates frame" in pt2.delegates_note.value


def test_widgets_say_what_they_are_where_they_cannot_be_drawn(tmp_path: pathlib.Path) -> None:
    """The text/plain form of each widget (what GitHub, a static page or a closed kernel shows)
    names the widget and its files, never a folder, within ipywidgets' 110 characters."""
    from workbench.widgets import CompareView, Explorer, LoadPathProfiler

    deep = tmp_path / ("x" * 40) / "y"
    deep.mkdir(parents=True)
    (deep / "mlp_portable.pte").write_bytes((SAMPLES / "mlp_portable.pte").read_bytes())
    shown = {
        "Explorer": Explorer(deep / "mlp_portable.pte"),
        "CompareView": CompareView(deep / "mlp_portable.pte", SAMPLES / "mlp_xnnpack.pte"),
        "LoadPathProfiler": LoadPathProfiler(deep / "mlp_portable.pte"),
    }
    for kind, w in shown.items():
        text = w._repr_mimebundle_()["text/plain"]
        assert text == repr(w) and len(text) <= 110, text
        assert text.startswith(f"{kind} widget (mlp_portable.pte") and "running Jupyter kernel" in text
        assert str(tmp_path) not in text and "/" not in text
    assert "mlp_xnnpack.pte" in repr(shown["CompareView"])
