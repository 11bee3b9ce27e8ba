"""workbench.profile and workbench.loadpaths: rows per path, the two timed phases (load, then
every weight byte read once, checked by checksum), memory accounting, rooflines, cold reporting
and its explanation, skips with reasons, crashes and timeouts in workers, the fork server, and
the GPU script's CPU-side logic.

Every profile runs real worker processes; the fast tests use small files, a few paths and
``repeat=1``. No test asserts a timing.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pathlib
import sys

import pandas as pd
import pytest

import workbench as wb
from workbench import frames
from workbench.loadpaths import (
    PATHS,
    LoadPath,
    checksum,
    memory_snapshot,
    resident_fraction,
)
from workbench.profiling import Profile, make_plan

ROOT = pathlib.Path(__file__).resolve().parents[1]
MiB = 1 << 20


def words_sum(data: bytes) -> int:
    """The checksum's definition, written out in plain Python (the oracle for the numpy one)."""
    data = data + b"\0" * (-len(data) % 8)
    return sum(int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8)) % (1 << 64)


def file_weights_checksum(path: pathlib.Path) -> str:
    """The checksum of an artifact's unique stored tensor ranges, from wb.open's tensor table."""
    with wb.open(path) as art:
        t = art.tensors
        t = t[t["offset"].notna() & (t["nbytes"] > 0)]
        ranges = {(str(f), int(o), int(n)) for f, o, n in zip(t["file"], t["offset"], t["nbytes"])}
    total = 0
    for f, o, n in ranges:
        with open(f, "rb") as fh:
            fh.seek(o)
            total += words_sum(fh.read(n))
    return f"{total % (1 << 64):016x}"


def has(mod: str) -> bool:
    return importlib.util.find_spec(mod) is not None


def _write(path: pathlib.Path, nbytes: int) -> pathlib.Path:
    block = bytes(range(256)) * (MiB // 256)
    with open(path, "wb") as f:
        for _ in range(nbytes // MiB):
            f.write(block)
    return path


@pytest.fixture(scope="module")
def big_raw(tmp_path_factory) -> pathlib.Path:
    """A generated ~64 MB file (not an artifact: profiled as ``raw``)."""
    return _write(tmp_path_factory.mktemp("profile") / "weights.bin", 64 * MiB)


@pytest.fixture(scope="module")
def raw_profile(big_raw) -> Profile:
    return wb.profile(big_raw, paths=["read", "readinto", "mmap_touch", "mmap_populate",
                                      "per_tensor_copy"], repeat=1, progress=False)


@pytest.fixture(scope="module")
def small_profile(samples_dir) -> Profile:
    return wb.profile(samples_dir / "mlp_portable.pte",
                      paths=["read", "readinto", "mmap_touch", "per_tensor_copy", "wb_views",
                             "pt2_views"], repeat=1, progress=False)


def _row(prof: Profile, path: str):
    rows = prof.frame[prof.frame["path"] == path]
    assert len(rows) >= 1, f"no row for {path}"
    return rows.iloc[0]


# -- the frame ------------------------------------------------------------------------------------

def test_one_row_per_path_and_schema(small_profile):
    f = small_profile.frame
    assert list(f.columns) == [c.name for c in frames.SCHEMAS["profile"]]
    for c in frames.SCHEMAS["profile"]:
        assert str(f[c.name].dtype) == c.dtype, c.name
    assert f["path"].tolist() == ["read", "readinto", "mmap_touch", "per_tensor_copy",
                                  "wb_views", "pt2_views"]
    ok = f[f["status"] == "ok"]
    assert set(ok["path"]) == {"read", "readinto", "mmap_touch", "per_tensor_copy", "wb_views"}
    assert (ok["rc"] == 0).all()
    assert (ok["wall_s"] > 0).all() and (ok["gbps"] > 0).all()
    # two timed phases: the load, then every weight byte read once (the same bytes for all)
    assert (ok["load_s"] > 0).all() and (ok["read_s"] > 0).all()
    assert ((ok["load_s"] + ok["read_s"]) == ok["wall_s"]).all()
    assert set(ok["consume"]) == {"checksum"} and set(ok["read_bytes"]) == {3232}
    size = (ROOT / "sample_models" / "mlp_portable.pte").stat().st_size
    assert _row(small_profile, "read")["bytes"] == size
    assert _row(small_profile, "read")["bytes_copied"] == size
    # the four MLP weights, 3,232 bytes, counted from the tensor table
    assert _row(small_profile, "per_tensor_copy")["bytes"] == 3232
    assert _row(small_profile, "wb_views")["bytes"] == 3232
    assert _row(small_profile, "wb_views")["bytes_copied"] == 0
    skipped = _row(small_profile, "pt2_views")
    assert skipped["status"] == "skipped" and "pt2" in skipped["error"]


def test_summary_and_rooflines(small_profile):
    s = small_profile.summary
    assert list(s.columns) == [c.name for c in frames.SCHEMAS["profile_summary"]]
    assert s["path"].tolist() == small_profile.frame["path"].tolist()
    rl = small_profile.rooflines.set_index("name")["gbps"]
    assert list(rl.index) == ["ram_read", "memcpy", "page_cache_read"]
    assert rl["memcpy"] > 0.1 and rl["page_cache_read"] > 0.01 and rl["ram_read"] > 0.1
    read = s.set_index("path").loc["read"]
    # every CPU path is compared with the same limit: reading the weights once from RAM
    assert set(s.loc[s["device"] == "cpu", "roofline"]) == {"ram_read"}
    assert read["frac_roofline"] == pytest.approx(read["gbps"] / rl["ram_read"])
    assert read["frac_memcpy"] == pytest.approx(read["gbps"] / rl["memcpy"])
    assert read["consume"] == "checksum" and read["read_bytes"] == 3232
    assert s.set_index("path").loc["pt2_views", "runs"] == 0


def test_outputs(small_profile, tmp_path):
    text = small_profile.to_csv()
    assert text.splitlines()[0].startswith("path,run,device,status,wall_s")
    small_profile.to_csv(tmp_path / "p.csv")
    small_profile.to_csv(tmp_path / "s.csv", summary=True)
    assert (tmp_path / "s.csv").read_text().startswith("path,device,status,runs")
    html = small_profile._repr_html_()
    assert "workbench.Profile" in html and "per_tensor_copy" in html and "memcpy" in html
    table = small_profile.table()
    assert "rooflines: ram_read" in table and "memcpy" in table and "wb_views" in table
    assert "Profile" in repr(small_profile)
    pytest.importorskip("matplotlib")
    fig = small_profile.plot()
    assert len(fig.axes) == 2
    fig.savefig(tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


# -- memory accounting and plausibility on a 64 MB file -------------------------------------------

def test_private_vs_file_backed(raw_profile, big_raw):
    size = big_raw.stat().st_size
    read = _row(raw_profile, "read")
    mm = _row(raw_profile, "mmap_touch")
    assert read["status"] == "ok" and mm["status"] == "ok"
    if pd_missing(read["rss_anon_growth"]):
        pytest.skip("this OS does not split anonymous and file-backed RSS")
    # read: a private copy; nothing stays mapped
    assert read["rss_anon_growth"] >= 0.9 * size
    assert read["rss_file_growth"] < 0.1 * size
    assert read["peak_rss_growth"] >= 0.9 * size
    # mmap: the file's pages, mapped, not copied
    assert mm["rss_file_growth"] >= 0.9 * size
    assert mm["rss_anon_growth"] < 0.1 * size
    assert mm["bytes_copied"] == 0
    # readinto copies into a buffer faulted in before timing: no growth during the load
    assert _row(raw_profile, "readinto")["rss_anon_growth"] < 0.1 * size


def pd_missing(v) -> bool:
    import pandas as pd

    return v is None or bool(pd.isna(v))


def test_rates_compare_the_same_work(raw_profile, big_raw):
    # No timing assertion (a loaded machine makes any bound flaky): the report's own
    # arithmetic must hold, and every path must have read the same bytes.
    f = raw_profile.frame
    ok = f[f["status"] == "ok"]
    assert set(ok["path"]) == {"read", "readinto", "mmap_touch", "mmap_populate"}
    size = big_raw.stat().st_size
    want = f"{words_sum(big_raw.read_bytes()):016x}"
    for r in ok.itertuples():
        assert r.read_bytes == size and r.checksum == want, r.path
        assert r.gbps == pytest.approx(r.read_bytes / r.wall_s / 1e9, rel=1e-9), r.path
        assert r.load_gbps == pytest.approx(r.bytes / r.load_s / 1e9, rel=1e-9), r.path
        assert r.roofline == "ram_read"
        assert r.roofline_gbps == raw_profile.roofline("ram_read"), r.path
        assert r.frac_roofline == pytest.approx(r.gbps / r.roofline_gbps, rel=1e-9), r.path
    # zero-copy loads: their pages were really brought in (they are not just mapped)
    for r in ok[ok["bytes_copied"] == 0].itertuples():
        assert r.rss_file_growth >= 0.9 * r.bytes, r.path
    assert raw_profile.info["checksums"] == {"weights.bin": want}


def test_raw_file_has_no_tensor_paths(raw_profile):
    assert raw_profile.info["format"] == "raw"
    row = _row(raw_profile, "per_tensor_copy")
    assert row["status"] == "skipped" and "tensor table" in row["error"]


# -- the consuming pass: checksums ---------------------------------------------------------------

def test_checksum_matches_its_definition_and_splits_at_words():
    import numpy as np

    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 10_003, dtype=np.uint8).tobytes()
    assert checksum(data) == words_sum(data)
    assert checksum(data, 5, 1000) == words_sum(data[5:1005])  # unaligned start, no tail
    assert checksum(data, 3, 13) == words_sum(data[3:16])      # a 5-byte tail, zero-padded
    assert checksum(b"") == 0 and checksum(b"\xff" * 8) == (1 << 64) - 1
    # pieces cut at multiples of 8 add up to the whole (what chunked and device reads rely on)
    cuts = [0, 8, 800, 4096, 10_000, len(data)]
    parts = sum(checksum(data, a, b - a) for a, b in itertools.pairwise(cuts)) % (1 << 64)
    assert parts == checksum(data)
    # a typed array is summed over its bytes, whatever its dtype and layout
    arr = np.frombuffer(data[:8000], dtype=np.float32).reshape(40, 50)
    assert checksum(arr) == words_sum(data[:8000])
    assert checksum(np.asfortranarray(arr)) == words_sum(np.asfortranarray(arr).tobytes("A"))


def test_device_checksum_on_cpu_tensors():
    """The CUDA read phase's arithmetic (int32 halves, sign corrections, tails), replayed on CPU
    tensors: it must equal the numpy checksum for any cut, offset and content."""
    torch = pytest.importorskip("torch")
    import numpy as np

    from workbench.loadpaths.cuda import device_checksum

    rng = np.random.default_rng(2)
    raw = rng.integers(0, 256, 50_000, dtype=np.uint8)
    raw[:64] = 0xFF  # negative int32 halves on purpose
    buf = torch.from_numpy(raw.copy())
    pieces = [(0, 64), (64, 7), (71, 1000), (1071, 33_333), (40_000, 9_999)]
    tensors = [buf[o:o + n] for o, n in pieces]  # odd storage offsets: the clone path
    want = sum(checksum(raw.tobytes(), o, n) for o, n in pieces) % (1 << 64)
    assert device_checksum(torch, tensors) == want
    assert device_checksum(torch, []) == 0


def _bad_paths_module(tmp_path: pathlib.Path, monkeypatch) -> object:
    (tmp_path / "odd_paths.py").write_text(
        "import time\n"
        "from workbench.loadpaths import consume_none\n\n"
        "def wrong_bytes(ctx):\n"
        "    ctx.weight_buffers = [bytes(n) for _, _, n in ctx.extents()]\n"
        "    ctx.moved(sum(n for _, _, n in ctx.extents()), copied=0)\n\n"
        "def nothing(ctx):\n"
        "    ctx.moved(0)\n\n"
        "def sleeps(ctx):\n"
        "    time.sleep(60)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import odd_paths

    return odd_paths


def test_a_path_that_reads_the_wrong_bytes_is_an_error(samples_dir, tmp_path, monkeypatch):
    odd = _bad_paths_module(tmp_path, monkeypatch)
    from workbench.loadpaths import consume_none

    paths = [LoadPath("zeros", odd.wrong_bytes), LoadPath("unread", odd.nothing),
             LoadPath("no_read", odd.nothing, consume=consume_none), "read"]
    prof = wb.profile(samples_dir / "mlp_portable.pte", paths=paths, repeat=1, progress=False)
    zeros = _row(prof, "zeros")
    assert zeros["status"] == "error" and "checksum" in zeros["error"]
    assert zeros["checksum"] == f"{0:016x}" and zeros["read_bytes"] == 3232
    unread = _row(prof, "unread")  # offered nothing to read: a clear error, not a fast bar
    assert unread["status"] == "error" and "nothing to read" in unread["error"]
    no_read = _row(prof, "no_read")
    assert no_read["status"] == "ok" and no_read["consume"] == "none"
    assert pd_missing(no_read["gbps"])  # no headline rate for a path that read nothing
    read = _row(prof, "read")
    assert read["status"] == "ok" and read["checksum"] == file_weights_checksum(
        samples_dir / "mlp_portable.pte")


def test_every_path_reads_the_files_weights(small_profile, samples_dir):
    want = file_weights_checksum(samples_dir / "mlp_portable.pte")
    ok = small_profile.frame[small_profile.frame["status"] == "ok"]
    assert len(ok) == 5 and set(ok["checksum"]) == {want}
    assert small_profile.info["checksums"] == {"mlp_portable.pte": want}


def test_spread_and_repeats(tmp_path):
    f = _write(tmp_path / "s.bin", 2 * MiB)
    prof = wb.profile(f, paths=["read", "mmap_touch"], repeat=3, progress=False)
    sp = prof.spread("wall_s")
    assert list(sp.index) == ["read", "mmap_touch"] and (sp["runs"] == 3).all()
    assert ((sp["min"] <= sp["median"]) & (sp["median"] <= sp["max"])).all()
    for path, row in sp.iterrows():
        walls = prof.frame.loc[prof.frame["path"] == path, "wall_s"]
        assert row["min"] == walls.min() and row["max"] == walls.max()
    assert "min-max ms" in prof.table()
    pytest.importorskip("matplotlib")
    fig = prof.plot()
    assert any(type(c).__name__ == "ErrorbarContainer" for c in fig.axes[0].containers)


def test_fork_and_spawn_measure_the_same_thing(tmp_path):
    from workbench import profiling
    from workbench.profiling import _workers

    f = _write(tmp_path / "i.bin", 2 * MiB)
    forked = wb.profile(f, paths=["read", "mmap_touch"], repeat=1, progress=False)
    server = _workers._SERVER
    assert forked.info["isolation"] == "fork" and server is not None and server.alive()
    again = wb.profile(f, paths=["read"], repeat=1, progress=False)
    assert _workers._SERVER is server and again.info["isolation"] == "fork"  # reused
    spawned = wb.profile(f, paths=["read", "mmap_touch"], repeat=1, progress=False,
                         isolation="spawn")
    assert spawned.info["isolation"] == "spawn"
    for col in ("status", "bytes", "bytes_copied", "read_bytes", "checksum", "consume"):
        assert forked.frame[col].tolist() == spawned.frame[col].tolist(), col
    profiling.close_workers()
    assert _workers._SERVER is None and server.proc.poll() is not None
    with pytest.raises(ValueError, match="isolation"):
        wb.profile(f, paths=["read"], isolation="thread", progress=False)


def test_a_run_past_its_timeout_is_killed(samples_dir, tmp_path, monkeypatch):
    odd = _bad_paths_module(tmp_path, monkeypatch)
    paths = [LoadPath("sleeps", odd.sleeps), "read"]
    prof = wb.profile(samples_dir / "mlp_portable.pte", paths=paths, repeat=1, progress=False,
                      timeout=3)
    slow = _row(prof, "sleeps")
    assert slow["status"] == "error" and "timed out" in slow["error"]
    assert _row(prof, "read")["status"] == "ok"  # the server carried on


# -- cold, skips, crashes ------------------------------------------------------------------------

def test_cold_reporting(tmp_path):
    f = _write(tmp_path / "cold.bin", 4 * MiB)
    prof = wb.profile(f, paths=["read"], cold=True, repeat=1, progress=False)
    r = _row(prof, "read")
    assert r["cold_requested"] is True or r["cold_requested"] == True  # noqa: E712
    assert not pd_missing(r["cold_achieved"])
    assert 0.0 <= r["resident_before"] <= 1.0
    # cold_achieved is exactly "at most 2% of the pages stayed resident"
    assert bool(r["cold_achieved"]) == (r["resident_before"] <= 0.02)
    assert prof.summary["cold_achieved"].notna().all()
    assert pd_missing(r["cold_note"]) == bool(r["cold_achieved"])
    warm = wb.profile(f, paths=["read"], repeat=1, progress=False)
    w = _row(warm, "read")
    assert w["cold_requested"] == False and pd_missing(w["cold_achieved"])  # noqa: E712
    assert w["resident_before"] > 0.9  # the parent warmed the file
    assert pd_missing(w["cold_note"]) and warm.cold_notes == []


def test_failed_eviction_is_explained(tmp_path):
    """Pages the caller maps cannot be evicted: the run is reported as not cold, and why."""
    import mmap

    import numpy as np

    f = _write(tmp_path / "held.bin", 4 * MiB)
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = np.frombuffer(mm, dtype=np.uint8)
        int(view[::4096].sum())  # every page mapped and resident in this process
        prof = wb.profile(f, paths=["read"], cold=True, repeat=1, progress=False)
        del view
    r = _row(prof, "read")
    assert r["status"] == "ok" and r["cold_achieved"] == False  # noqa: E712
    assert r["resident_before"] > 0.9
    assert "not cold" in r["cold_note"] and "held.bin" in r["cold_note"]
    assert prof.summary.set_index("path").loc["read", "cold_note"] == r["cold_note"]
    assert prof.cold_notes == [r["cold_note"]] and "not cold" in prof.table()


def test_residency_helpers(tmp_path):
    f = _write(tmp_path / "r.bin", 2 * MiB)
    frac = resident_fraction([str(f)])
    assert frac is None or 0.0 <= frac <= 1.0
    snap = memory_snapshot()
    assert snap["rss"] is None or snap["rss"] > 0


def test_cuda_paths_skipped_with_reason(samples_dir):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: CUDA paths run (bench/gpu_load_paths.py)")
    prof = wb.profile(samples_dir / "mlp_portable.pte", device="cuda", repeat=1, progress=False)
    cuda_names = [n for n, lp in PATHS.items() if lp.device == "cuda"]
    assert set(cuda_names) >= {"pageable_h2d", "pinned_h2d", "registered_h2d", "gds",
                               "executorch_cuda", "aoti"}
    f = prof.frame
    assert f["path"].tolist() == cuda_names
    assert (f["status"] == "skipped").all()
    assert f["error"].str.contains("cuda.is_available").all()
    assert (f["device"] == "cuda").all()
    assert "h2d_pinned" not in set(prof.rooflines["name"])


def test_skips_name_their_reason(samples_dir):
    prof = wb.profile(samples_dir / "mlp.pt2",
                      paths=["pt2_export_load", "executorch_runtime", "wb_views"],
                      repeat=1, progress=False)
    r = _row(prof, "pt2_export_load")
    assert r["status"] == "skipped" and "trusted" in r["error"]
    assert "not an ExecuTorch program" in _row(prof, "executorch_runtime")["error"]
    assert "pt2_views" in _row(prof, "wb_views")["error"]
    bpte = wb.profile(samples_dir / "mlp.bpte", paths=["executorch_runtime"], repeat=1,
                      progress=False)
    assert "rejects a .bpte" in _row(bpte, "executorch_runtime")["error"]


def test_worker_crash_becomes_error_row(samples_dir, tmp_path, monkeypatch):
    (tmp_path / "crashing_path.py").write_text(
        "import os\n\ndef run(ctx):\n    os.abort()\n\ndef fails(ctx):\n"
        "    raise RuntimeError('no luck')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import crashing_path

    paths = [LoadPath("abort", crashing_path.run), LoadPath("raises", crashing_path.fails), "read"]
    prof = wb.profile(samples_dir / "mlp_portable.pte", paths=paths, repeat=1, progress=False)
    crash = _row(prof, "abort")
    assert crash["status"] == "error"
    assert crash["rc"] == -6 and "SIGABRT" in crash["error"]
    raised = _row(prof, "raises")
    assert raised["status"] == "error" and raised["rc"] == 0
    assert "RuntimeError: no luck" in raised["error"]
    assert _row(prof, "read")["status"] == "ok"  # the parent carried on
    assert prof.summary.set_index("path").loc["abort", "status"] == "error"


def test_arguments(samples_dir):
    p = samples_dir / "mlp_portable.pte"
    with pytest.raises(ValueError, match="unknown load path"):
        wb.profile(p, paths=["nope"], progress=False)
    with pytest.raises(ValueError, match="repeat"):
        wb.profile(p, repeat=0, progress=False)
    with pytest.raises(ValueError, match="device"):
        wb.profile(p, device="tpu", progress=False)
    with pytest.raises(ValueError, match="module-level"):
        LoadPath("x", lambda ctx: None).spec()


def test_plan_dedups_tied_weights(samples_dir):
    plan = make_plan(samples_dir / "tied_portable.pte")
    assert plan.format == "pte" and len(plan.tensors) == 1  # stored once, used twice
    assert plan.tensor_bytes == 4096
    ext = make_plan(samples_dir / "mlp_external.pte")
    assert [os.path.basename(f) for f in ext.files] == ["mlp_external.pte", "mlp_external.ptd"]
    assert ext.data_files == [ext.files[1]] and ext.tensor_bytes == 3232
    with wb.open(samples_dir / "mlp_portable.pte") as art:
        assert make_plan(art).tensor_bytes == 3232
        with pytest.raises(TypeError):
            make_plan(art, data=[])



# -- the runtime's own load phase, from an ETDump (Profile.with_etdump) ----------------------------

LOAD_EVENTS = {"Program::load_method", "Method::init"}


def _load_events(etdp: pathlib.Path):
    """The oracle: the trace's load-phase events, straight from its events frame."""
    with wb.open(etdp) as art:
        ev = art.frames["events"]
    return ev[(ev["block"] == "Default") & (ev["kind"] == "framework")]


def _own(prof: Profile):
    return prof.frame[prof.frame["path"].str.startswith("etdump:")]


@pytest.mark.parametrize("name", ["mlp_portable", "mlp_xnnpack"])
def test_etdump_rows_are_the_traces_load_events(small_profile, samples_dir, name):
    etdp = samples_dir / f"{name}.etdp"
    want = _load_events(etdp)
    assert set(want["name"].astype(str)) == LOAD_EVENTS
    prof = small_profile.with_etdump(etdp)
    # the workbench's rows are kept as they were, the runtime's follow (one per event)
    n = len(small_profile.frame)
    pd.testing.assert_frame_equal(prof.frame.iloc[:n].astype(object),
                                  small_profile.frame.astype(object))
    assert len(_own(small_profile)) == 0 and len(prof.frame) == n + len(want)
    for c in frames.SCHEMAS["profile"]:
        assert str(prof.frame[c.name].dtype) == c.dtype, c.name
    own = _own(prof)
    # the outer event first: Program::load_method spans Method::init
    assert own["path"].tolist() == ["etdump:Program::load_method", "etdump:Method::init"]
    for row in own.itertuples(index=False):
        event = want[want["name"] == row.path.removeprefix("etdump:")].iloc[0]
        # durations equal, in seconds: the events frame's raw ticks are nanoseconds
        assert row.load_s == int(event["duration"]) * 1e-9
        assert row.status == "ok" and row.run == 0 and row.consume == "none"
        assert pd.isna(row.wall_s) and pd.isna(row.read_s) and pd.isna(row.read_bytes)
        assert "measured by the runtime itself" in row.note and f"{name}.etdp" in row.note
        assert f"{int(event['duration'])} ticks" in row.note
    lm = want[want["name"] == "Program::load_method"].iloc[0]
    init = want[want["name"] == "Method::init"].iloc[0]
    nested = int(lm["start"]) <= int(init["start"]) and int(init["end"]) <= int(lm["end"])
    assert nested and "contains Method::init" in own["note"].iloc[0]
    assert "contains" not in own["note"].iloc[1]
    s = prof.summary.set_index("path")
    assert s.loc["etdump:Method::init", "load_s"] == int(init["duration"]) * 1e-9
    assert s.loc["etdump:Method::init", "runs"] == 1
    assert prof.info["etdump"] == [f"{name}.etdp"]
    # another clock: ticks of a microsecond
    micro = _own(small_profile.with_etdump(etdp, tick_s=1e-6))
    assert micro["load_s"].tolist() == pytest.approx([v * 1000 for v in own["load_s"]], rel=1e-12)


def test_etdump_rows_from_frames_and_twice(small_profile, samples_dir):
    etdp = samples_dir / "mlp_portable.etdp"
    from_file = _own(small_profile.with_etdump(etdp))
    with wb.open(etdp) as art:
        from_art = _own(small_profile.with_etdump(art))
        from_events = _own(small_profile.with_etdump(art.frames["events"]))
    timeline = wb.timeline(samples_dir / "mlp_portable.pte", etdp)   # what wb.run returns
    from_timeline = _own(small_profile.with_etdump(timeline))
    for other in (from_art, from_events, from_timeline):
        assert other["path"].tolist() == from_file["path"].tolist()
        assert other["load_s"].tolist() == from_file["load_s"].tolist()
    assert "the ETDump frame given" in from_events["note"].iloc[0]
    # two traces: the second one's rows are run 1
    both = small_profile.with_etdump(etdp).with_etdump(samples_dir / "mlp_xnnpack.etdp")
    own = _own(both)
    assert own.groupby("path")["run"].apply(sorted).tolist() == [[0, 1], [0, 1]]
    assert both.summary.set_index("path").loc["etdump:Program::load_method", "runs"] == 2
    assert both.info["etdump"] == ["mlp_portable.etdp", "mlp_xnnpack.etdp"]


def test_etdump_rows_in_table_and_plot(small_profile, samples_dir):
    prof = small_profile.with_etdump(samples_dir / "mlp_portable.etdp")
    text = prof.table()
    line = next(ln for ln in text.splitlines() if ln.startswith("etdump:Program::load_method"))
    assert "nan" not in line and "measured by the runtime itself" in line
    fig = prof.plot()
    ax = fig.axes[0]
    legend = [t.get_text() for lg in [*ax.artists, ax.get_legend()] if hasattr(lg, "get_texts")
              for t in lg.get_texts()]
    assert "load: the runtime's own account (ETDump)" in legend
    from matplotlib.colors import to_rgba

    names = prof.summary["path"].tolist()
    bars = [p for p in ax.patches if p.get_height() > 0 and p.get_y() == 0]
    own = {round(b.get_x() + b.get_width() / 2) for b in bars if b.get_facecolor() == to_rgba("dimgray")}
    assert own == {i for i, n in enumerate(names) if n.startswith("etdump:")}


def _trace(tmp_path: pathlib.Path, blocks: list[tuple[str, list[tuple[str, int, int]]]]) -> pathlib.Path:
    """A size-prefixed ETDump of framework events: [(block name, [(event, start, end)])]."""
    fb = pytest.importorskip("flatbuffers")
    from workbench.formats.etdump import schema as S

    b = fb.Builder(256)

    def table(fields):  # [(slot, prepend method name, value)]
        b.StartObject(max(slot for slot, _, _ in fields) + 1)
        for slot, how, v in fields:
            getattr(b, how)(slot, v, 0 if how == "PrependUOffsetTRelativeSlot" else None)
        return b.EndObject()

    def vector(offsets):
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    runs = []
    for block, events in blocks:
        evs = []
        for name, start, end in events:
            n = b.CreateString(name)
            pe = table([(S.ProfileEvent.name, "PrependUOffsetTRelativeSlot", n),
                        (S.ProfileEvent.chain_index, "PrependInt32Slot", -1),
                        (S.ProfileEvent.instruction_id, "PrependInt32Slot", 0),
                        (S.ProfileEvent.start_time, "PrependUint64Slot", start),
                        (S.ProfileEvent.end_time, "PrependUint64Slot", end)])
            evs.append(table([(S.Event.profile_event, "PrependUOffsetTRelativeSlot", pe)]))
        events_vec = vector(evs)
        name = b.CreateString(block)
        runs.append(table([(S.RunData.name, "PrependUOffsetTRelativeSlot", name),
                           (S.RunData.events, "PrependUOffsetTRelativeSlot", events_vec)]))
    run_vec = vector(runs)
    root = table([(S.ETDump.version, "PrependUint32Slot", 0),
                  (S.ETDump.run_data, "PrependUOffsetTRelativeSlot", run_vec)])
    b.FinishSizePrefixed(root, S.FILE_IDENTIFIER)
    path = tmp_path / "trace.etdp"
    path.write_bytes(bytes(b.Output()))
    return path


def test_etdump_rows_of_a_trace_built_here(small_profile, tmp_path):
    etdp = _trace(tmp_path, [("Default", [("Method::init", 1_500, 5_000),
                                          ("Program::load_method", 1_000, 6_000)]),
                             ("Execute", [("Method::execute", 7_000, 9_000)])])
    own = _own(small_profile.with_etdump(etdp))
    assert own["path"].tolist() == ["etdump:Program::load_method", "etdump:Method::init"]
    assert own["load_s"].tolist() == [5_000 * 1e-9, 3_500 * 1e-9]   # Method::execute: not a load
    assert own["run"].tolist() == [0, 0]
    # a trace recorded after the load: no load-phase event is an error, not an empty table
    late = _trace(tmp_path, [("Execute", [("Method::execute", 7_000, 9_000)])])
    with pytest.raises(wb.MissingDataError, match="no load-phase events"):
        small_profile.with_etdump(late)


def test_etdump_arguments(small_profile, samples_dir):
    with pytest.raises(wb.UnknownFormatError, match="ETDump"):
        small_profile.with_etdump(samples_dir / "mlp_portable.pte")
    with pytest.raises(ValueError, match="tick_s"):
        small_profile.with_etdump(samples_dir / "mlp_portable.etdp", tick_s=0)
    with pytest.raises(ValueError, match="duration"):
        small_profile.with_etdump(pd.DataFrame({"run": [0], "block": ["Default"], "name": ["x"],
                                                "kind": ["framework"], "start": [0], "end": [1]}))


def test_profile_with_etdump_argument(samples_dir):
    etdp = samples_dir / "mlp_portable.etdp"
    prof = wb.profile(samples_dir / "mlp_portable.pte", paths=["read"], repeat=1,
                      progress=False, etdump=etdp)
    assert prof.frame["path"].tolist() == ["read", "etdump:Program::load_method",
                                           "etdump:Method::init"]
    want = _load_events(etdp).set_index("name")["duration"]
    got = _own(prof).set_index("path")["load_s"]
    assert got["etdump:Method::init"] == int(want["Method::init"]) * 1e-9


# -- the real loaders (slow: each worker imports executorch / torch) ----------------------------

@pytest.mark.slow
@pytest.mark.oracle
def test_executorch_runtime_with_and_without_ptd(samples_dir):
    if not has("executorch"):
        pytest.skip("executorch is not installed")
    paths = ["executorch_runtime", "executorch_runtime_no_ptd"]
    xnn = wb.profile(samples_dir / "mlp_xnnpack_external.pte", paths=paths, repeat=1,
                     progress=False)
    assert _row(xnn, "executorch_runtime")["status"] == "ok"
    crash = _row(xnn, "executorch_runtime_no_ptd")
    # the documented SIGSEGV of XNNPACK without its weights: a row, not a dead parent
    assert crash["status"] == "error" and crash["rc"] < 0 and "SIG" in crash["error"]
    port = wb.profile(samples_dir / "mlp_external.pte", paths=[*paths, "executorch_buffer"],
                      repeat=1, progress=False)
    ok = _row(port, "executorch_runtime")
    assert ok["status"] == "ok" and ok["bytes"] == 2224 + 3744 and ok["bytes_copied"] == 0
    clean = _row(port, "executorch_runtime_no_ptd")
    assert clean["status"] == "error" and clean["rc"] == 0  # a clean load error
    buf = _row(port, "executorch_buffer")
    assert buf["status"] == "ok" and buf["bytes_copied"] == 2224


@pytest.mark.slow
@pytest.mark.oracle
def test_runtime_paths_read_by_running_forward(samples_dir):
    """The runtime's paths end with the first forward: both loaders give the outputs the
    runtime gives here, in this process, for the same method_meta inputs."""
    if not has("executorch"):
        pytest.skip("executorch is not installed")
    import torch
    from executorch.runtime import Runtime

    from workbench.loadpaths.runtime import method_inputs

    pte = samples_dir / "mlp_portable.pte"
    prof = wb.profile(pte, paths=["executorch_runtime", "executorch_buffer"], repeat=2,
                      progress=False)
    f = prof.frame
    assert (f["status"] == "ok").all(), f["error"].tolist()
    assert set(f["consume"]) == {"forward"} and f["steady_s"].notna().all()
    method = Runtime.get().load_program(str(pte)).load_method("forward")
    out = method.execute(method_inputs(method.metadata))
    want = sum(checksum(o.contiguous().reshape(-1).view(torch.uint8).numpy())
               for o in out) % (1 << 64)
    assert set(f["checksum"]) == {f"{want:016x}"}
    assert set(f["read_bytes"]) == {3232}  # the weights forward reads
    s = prof.summary.set_index("path")
    assert s.loc["executorch_runtime", "locked"] > 0 and s.loc["executorch_buffer", "bytes_copied"] > 0


@pytest.mark.slow
def test_pt2_export_load_trusted(samples_dir):
    pytest.importorskip("torch")
    prof = wb.profile(samples_dir / "mlp.pt2", paths=["pt2_export_load", "pt2_views"],
                      repeat=1, progress=False, trusted=True)
    r = _row(prof, "pt2_export_load")
    assert r["status"] == "ok", r["error"]
    assert r["bytes"] == 3232 and r["bytes_copied"] == 3232
    views = _row(prof, "pt2_views")
    if views["status"] == "ok":
        assert views["bytes"] == 3232
    else:  # the .pt2 reader is not there yet: the reason says so
        assert views["status"] == "skipped" and views["error"]


def test_pinned_staging_plan_reassembles_the_payload():
    """The double-buffered schedule of pinned_h2d, replayed with numpy instead of CUDA."""
    import numpy as np

    from workbench.loadpaths.cuda import staging_plan

    rng = np.random.default_rng(0)
    files = {"a": rng.integers(0, 256, 10_000, dtype=np.uint8),
             "b": rng.integers(0, 256, 7_000, dtype=np.uint8)}
    layout, pos = [], 0
    for f, off, n in [("a", 0, 1000), ("a", 1100, 4000), ("b", 16, 1), ("b", 32, 6000),
                      ("a", 9000, 1000)]:
        layout.append((f, off, n, pos))
        pos += n
    expected = np.concatenate([files[f][o:o + n] for f, o, n, _ in layout])
    for chunk in (1, 7, 1024, 4096, pos, pos * 2):
        plan = staging_plan(layout, chunk)
        stage = [np.zeros(chunk, np.uint8), np.zeros(chunk, np.uint8)]
        dst = np.zeros(pos, np.uint8)
        assert [slot for slot, *_ in plan] == [i % 2 for i in range(len(plan))]
        for slot, at, fill, pieces in plan:
            assert 0 < fill <= chunk and sum(p[3] for p in pieces) == fill
            for f, off, soff, n in pieces:
                stage[slot][soff:soff + n] = files[f][off:off + n]
            dst[at:at + fill] = stage[slot][:fill]
        assert np.array_equal(dst, expected), chunk


# -- bench/gpu_load_paths.py: the CPU-side logic --------------------------------------------------

@pytest.fixture(scope="module")
def gpu_script():
    spec = importlib.util.spec_from_file_location("gpu_load_paths",
                                                  ROOT / "bench" / "gpu_load_paths.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_load_paths"] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("gpu_load_paths", None)


def test_gpu_script_arguments(gpu_script, tmp_path):
    a = gpu_script.parse_args(["--out", str(tmp_path)])
    assert a.out == tmp_path and a.size_gb == 2.0 and a.repeat >= 1 and a.budget_s == 300
    a = gpu_script.parse_args(["--out", str(tmp_path), "--size-gb", "0.01", "--no-pte",
                               "--repeat", "1", "--cpu"])
    assert a.size_gb == 0.01 and a.pte is False and a.cpu is True
    with pytest.raises(SystemExit):
        gpu_script.parse_args([])  # --out is required


def test_gpu_script_generates_file(gpu_script, tmp_path):
    p = gpu_script.make_raw(tmp_path / "w.bin", 3 * MiB + 5, tensors=4)
    assert p.stat().st_size == 3 * MiB + 5
    head = p.read_bytes()[:4096]
    assert len(set(head)) > 16  # not zeros: a real, incompressible payload
    plan = make_plan(p)
    assert plan.format == "raw" and plan.payload_bytes() == 3 * MiB + 5


def test_gpu_script_fails_clearly_without_gpu(gpu_script, tmp_path, capsys):
    if gpu_script.cuda_unavailable() is None:
        pytest.skip("a GPU is here")
    rc = gpu_script.main(["--out", str(tmp_path / "out"), "--size-gb", "0.01"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "no usable CUDA device" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_gpu_script_reports_checked_reads(gpu_script, raw_profile):
    line = gpu_script.checked(raw_profile)
    want = raw_profile.info["checksums"]["weights.bin"]
    assert line == (f"checksums: 4 ok run(s) read the file's bytes ({want}); "
                    "0 run(s) failed the check")
