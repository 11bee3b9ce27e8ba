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
    for view in (ex.layout_view, ex.treemap_view, ex.tensor_hist, ex.memory_view):
        assert not view.message.has_error, view.message.value
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

    monkeypatch.setattr(_common, "plots_module", broken)
    monkeypatch.setattr("workbench.widgets._explorer.plots_module", broken)
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

    from workbench.widgets._explorer import MAX_SAMPLE, tensor_sample

    big = np.arange(3 * MAX_SAMPLE, dtype=np.int8).reshape(3, -1)
    values, sampled = tensor_sample(big)
    assert sampled and values.dtype == np.float64 and values.size <= MAX_SAMPLE
    small, sampled = tensor_sample(np.ones((4, 4), dtype=np.float16))
    assert not sampled and small.tolist() == [1.0] * 16
    torch = pytest.importorskip("torch")
    bf16, _ = tensor_sample(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert bf16.tolist() == [1.5, -2.0]
