"""wb.memory: the predicted memory of a program per component and phase, against the runtime's
own measurement (a child process reading /proc) on a few small samples, and hostile plans."""

from __future__ import annotations

import os
import shutil
import struct

import pytest

import workbench as wb
from workbench import fit
from workbench.cli import main
from workbench.runtime import RuntimeFailure

MB = 1 << 20


def _close(pred: int, meas: int) -> bool:
    """The benchmark's accuracy rule: within 10% or 0.5 MB."""
    return abs(pred - meas) <= max(0.1 * meas, 0.5 * MB)


def _with_planned(src, dst, new: int):
    """A copy of ``src`` whose one-method plan ``non_const_buffer_sizes`` [0, n] says [0, new]
    (the vector found by its bytes: length 2, then int64 0 and n; it must be unique)."""
    with wb.open(src) as art:
        old = int(art.frames["methods"]["planned_bytes"].iloc[0])
    blob = bytearray(src.read_bytes())
    pat = struct.pack("<Iqq", 2, 0, old)
    at = blob.find(pat)
    assert at >= 0 and blob.find(pat, at + 1) < 0
    blob[at:at + len(pat)] = struct.pack("<Iqq", 2, 0, new)
    dst.write_bytes(bytes(blob))
    return dst


def test_frame_rows_and_attrs(sample):
    m = wb.memory(sample("llm_tiny.pte"))
    assert list(m.columns) == fit.COLUMNS
    assert set(m["phase"]) <= set(fit.PHASES) and set(m["storage"]) <= {"anon", "file"}
    assert set(m.attrs["by_phase"]) == set(fit.PHASES)
    comps = set(m["component"])
    for want in ("program flatbuffer (pages)", "constant segment (mapped, locked)",
                 "planned arena mem_id 1", "mutable buffers / KV cache",
                 "Xnnpack packed weights", "Xnnpack original weights (in the .pte)",
                 "method allocator metadata", "inputs and outputs"):
        assert want in comps, want
    with wb.open(sample("llm_tiny.pte")) as art:
        planned = int(art.frames["methods"].set_index("method")["planned_bytes"]["forward"])
        consts = art.frames["delegate_tensors"]
        consts = consts[consts["role"] == "constant"]
        weights = int(consts["data_size"].sum() + consts["scale_nbytes"].sum())
    row = m.set_index("component").loc
    assert row["planned arena mem_id 1", "bytes"] == planned
    assert row["Xnnpack packed weights", "bytes"] == weights
    # the original weights are released after packing: not resident at the end, in the peak
    assert row["Xnnpack original weights (in the .pte)", "released"] == "load_method"
    bp = m.attrs["by_phase"]
    assert bp["load_program"] < bp["load_method"] <= bp["execute"] <= m.attrs["peak"]
    assert m.attrs["peak"] > bp["load_method"]  # the transient copy counts in the peak
    # the KV cache is inside the arena: shown, not added twice
    kv = m[m["component"] == "mutable buffers / KV cache"].iloc[0]
    assert not kv["counted"] and kv["bytes"] == 4 * 64 * 2 * 64 * 4
    counted = m[m["counted"]]
    assert bp["execute"] == int(counted.loc[counted["released"].isna(), "bytes"].sum())
    assert (m.loc[m["note"].str.contains("estimated"), "component"]
            .isin(["method allocator metadata", "inputs and outputs", "backend workspace",
                   "Xnnpack packed weights"]).all())


def test_loaders_differ_where_they_should(sample):
    p = sample("llm_tiny.pte")
    size = os.path.getsize(p)
    by = {ld: wb.memory(p, loader=ld) for ld in fit.LOADERS}
    # a whole-file buffer holds every byte of the file from load_program on
    buf = by["buffer"].set_index("component")
    assert buf.loc["program buffer (whole file)", "bytes"] == size
    assert by["buffer"].attrs["by_phase"]["load_program"] >= size
    # ...and so keeps the delegate's original weights next to the packed copy
    assert any("held twice" in s["what"] for s in by["buffer"].attrs["savings"])
    assert not any("held twice" in s["what"] for s in by["mmap"].attrs["savings"])
    # without mlock, the constants are resident only once read (execute), not at load_program
    assert by["mmap_nolock"].attrs["by_phase"]["load_program"] < \
        by["mmap"].attrs["by_phase"]["load_program"]
    assert by["file"].set_index("component").loc["constant segment (copied)", "storage"] == "anon"
    assert by["mmap"].attrs["loaders"]["buffer"]["peak"] == by["buffer"].attrs["peak"]
    with pytest.raises(ValueError, match="unknown loader"):
        wb.memory(p, loader="zip")


def test_absurd_arena_is_predicted_not_allocated(sample, tmp_path):
    p = _with_planned(sample("mlp_portable.pte"), tmp_path / "huge.pte", 1 << 40)
    m = wb.memory(p)
    row = m.set_index("component").loc["planned arena mem_id 1"]
    assert row["bytes"] == 1 << 40 and "ABSURD" in row["note"]
    assert m.attrs["peak"] >= 1 << 40
    assert any("mem_id 1 claims 1099511627776 bytes" in f for f in m.attrs["findings"])
    # measuring would exceed the machine: refused before any child runs
    with pytest.raises(MemoryError, match="exceeds the available memory"):
        wb.memory(p, measure=True)


def test_planned_arena_grows_what_the_runtime_allocates(sample, tmp_path):
    """An arena made 8 MiB larger in the plan grows the measured anon memory at load_program by
    8 MiB, as predicted (the Python runtime allocates planned memory there)."""
    p = _with_planned(sample("mlp_portable.pte"), tmp_path / "big.pte", 8 * MB)
    m = wb.memory(p, measure=True)
    got = m.attrs["measured"]
    assert m.attrs["by_phase"]["load_program"] >= 8 * MB
    assert got["anon"]["load_program"] >= 8 * MB - 64 * 1024
    arena = m.set_index("component").loc["planned arena mem_id 1"]
    assert arena["measured"] == got["anon"]["load_program"]
    assert abs(arena["measured"] - arena["bytes"]) < 64 * 1024
    for ph in fit.PHASES:
        assert _close(m.attrs["by_phase"][ph], got["by_phase"][ph]), ph


@pytest.mark.parametrize("name", ["llm_tiny_external.pte"])
def test_prediction_matches_measurement(sample, name):
    m = wb.memory(sample(name), measure=True)
    got = m.attrs["measured"]
    assert set(got["by_phase"]) == set(fit.PHASES) and got["peak_reset"]
    for ph in fit.PHASES:
        assert _close(m.attrs["by_phase"][ph], got["by_phase"][ph]), (ph, m.attrs, got)
    assert _close(m.attrs["peak"], got["peak"])
    if name == "llm_tiny_external.pte":  # the .ptd's pages arrive with load_method
        files = got["files"]
        assert files["load_program"]["data"] < files["load_method"]["data"]
        assert files["load_method"]["data"] >= 600 * 1024
        row = m.set_index("component").loc[".ptd pages of kernel constants"]
        assert abs(row["measured"] - row["bytes"]) <= 0.05 * row["bytes"]


def test_unmeasurable_loader_says_so(sample):
    with pytest.raises(ValueError, match="cannot be measured"):
        wb.memory(sample("mlp_portable.pte"), loader="file", measure=True)


def test_child_crash_names_the_phase(sample, tmp_path):
    """An XNNPACK program whose weights are in a .ptd that is not there crashes the runtime in
    load_method: a clear error naming the phase, the caller lives on."""
    p = tmp_path / "alone.pte"
    shutil.copy(sample("mlp_xnnpack_external.pte"), p)
    with pytest.raises(RuntimeFailure, match="load_method") as e:
        wb.memory(p, measure=True)
    assert e.value.phase == "load_method"


def test_parse_bytes():
    assert fit.parse_bytes("512MB") == 512 * MB
    assert fit.parse_bytes("1.5GiB") == 3 * (1 << 29)
    assert fit.parse_bytes("800k") == 800 * 1024 and fit.parse_bytes(7) == 7
    with pytest.raises(ValueError, match="not a size"):
        fit.parse_bytes("lots")


def test_cli_budget_gates(sample, capsys):
    p = str(sample("llm_tiny.pte"))
    peak = wb.memory(p).attrs["peak"]
    assert main(["memory", p, "--budget", str(peak + 1)]) == 0
    out = capsys.readouterr().out
    assert "planned arena mem_id 1" in out and "peak:" in out
    assert main(["memory", p, "--budget", str(peak - 1)]) == 1
    assert "exceeds the budget" in capsys.readouterr().err
    assert main(["memory", p, "--budget", "lots"]) == 2
    assert main(["memory", p, "--loader", "buffer", "--format", "csv"]) == 0
    assert "program buffer (whole file)" in capsys.readouterr().out


def test_plot_stacks_what_is_held(sample):
    from workbench import plots

    m = wb.memory(sample("llm_tiny.pte"))
    fig = plots.memory(m)
    ax = fig.axes[0]
    tops = {}
    for patch in ax.patches:
        if patch.get_fill():
            x = round(patch.get_x() + patch.get_width() / 2)
            tops[x] = max(tops.get(x, 0), patch.get_y() + patch.get_height())
    for i, ph in enumerate(fit.PHASES):
        assert tops[i] == pytest.approx(m.attrs["by_phase"][ph])
    assert max(line.get_ydata()[0] for line in ax.get_lines()) == m.attrs["peak"]


def test_explorer_panel(sample):
    pytest.importorskip("ipywidgets")
    from workbench.widgets._memory_panel import MemoryFitPanel

    panel = MemoryFitPanel()
    with wb.open(sample("llm_tiny.pte")) as art:
        panel.show(art)
        assert panel.frame.attrs["peak"] == wb.memory(art).attrs["peak"]
        assert "peak" in panel.summary.value
        panel.loader.value = "buffer"
        assert "held twice" in panel.summary.value
    with wb.open(sample("mlp.pt2")) as art:
        panel.show(art)
        assert panel.frame is None and ".pte" in panel.summary.value
