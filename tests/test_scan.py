"""``workbench.scan``: a corpus (the samples plus corrupt files) gives the same frames in this
process, on a process pool and on a Dask cluster; bad files become ``errors`` rows; every row
matches what ``workbench.open`` says about its file."""

from __future__ import annotations

import os
import pathlib
import shutil

import pandas as pd
import pytest

import workbench as wb
from workbench.corpus import discover, write
from workbench.frames import SCAN_KINDS, SCHEMAS

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"


def _readable(paths) -> list[str]:
    out = []
    for p in paths:
        try:
            wb.open(p).close()
        except wb.ArtifactError:
            continue
        out.append(os.path.abspath(p))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[pathlib.Path, dict[str, str]]:
    """tmp/bad/...: corrupt files, each named with what must go wrong; tmp/notes.txt: not an
    artifact. Returns (folder, {file name: expected error class or '' for any ArtifactError})."""
    base = tmp_path_factory.mktemp("corpus")
    bad = base / "bad" / "deeper"
    bad.mkdir(parents=True)
    pte = (SAMPLES / "mlp_portable.pte").read_bytes()
    ptd = (SAMPLES / "mlp_external.ptd").read_bytes()
    (bad / "truncated.pte").write_bytes(pte[:100])
    (bad / "truncated.ptd").write_bytes(ptd[: len(ptd) // 2])
    (bad / "empty.pte").write_bytes(b"")
    (bad / "tiny.bpte").write_bytes(b"\0\0")
    (bad / "garbage_with_magic.bin").write_bytes(pte[:8] + bytes(range(256)) * 8)
    (bad / "garbage_zip").write_bytes(b"PK\x03\x04" + b"\x01" * 300)
    (base / "notes.txt").write_text("not an artifact\n")
    expected = {"truncated.pte": "", "truncated.ptd": "", "empty.pte": "UnknownFormatError",
                "tiny.bpte": "UnknownFormatError", "garbage_with_magic.bin": "",
                "garbage_zip": ""}
    return base, expected


@pytest.fixture(scope="module")
def in_process(corpus):
    return wb.scan([SAMPLES, corpus[0]], jobs=1)


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        yield client


def test_corpus_errors_and_skips(corpus, in_process):
    expected = corpus[1]
    res = in_process
    assert list(res) == ["artifacts", "segments", "tensors", "errors"]
    errors = res["errors"]
    # the corpus's broken files, plus any sample that does not open (e.g. an old format)
    broken_samples = set()
    for f in errors["artifact"]:
        if pathlib.Path(f).is_relative_to(SAMPLES):
            broken_samples.add(os.path.basename(f))
    assert {os.path.basename(p) for p in errors["artifact"]} == set(expected) | broken_samples
    for r in errors.itertuples():
        want = expected.get(os.path.basename(r.artifact), "")
        if want:
            assert r.error == want
        # the row is exactly what opening the file raises
        with pytest.raises(wb.ArtifactError) as ei:
            wb.open(r.artifact)
        e = ei.value
        assert (r.error, r.message, r.structure) == (type(e).__name__, str(e), e.structure)
        assert (None if pd.isna(r.offset) else int(r.offset)) == e.offset
        assert r.message.startswith(os.path.basename(r.artifact) + ":")
    skipped = {os.path.basename(p) for p in res.skipped}
    assert "notes.txt" in skipped and "README.md" in skipped
    samples = sorted(str(p) for p in SAMPLES.rglob("*") if p.is_file())  # scan recurses
    assert sorted(res["artifacts"]["artifact"]) == _readable(
        [p for p in samples if os.path.abspath(p) not in set(res.skipped)])
    assert res.files == len(samples) + len(expected) + 1


def test_rows_sorted_and_typed(in_process):
    res = in_process
    for name, df in res.items():
        assert list(df["artifact"]) == sorted(df["artifact"]), name
        assert str(df["artifact"].dtype) == "string"
    arts = res["artifacts"]
    assert [c.name for c in SCHEMAS["artifacts"]] == list(arts.columns)
    for c in SCHEMAS["artifacts"]:
        assert str(arts[c.name].dtype) == c.dtype, c.name
    for name in ("segments", "tensors"):
        assert list(res[name].columns) == ["artifact", *(c.name for c in SCHEMAS[name])]


def test_rows_match_open(in_process):
    """Every artifact's scan rows are its frames; the artifacts row adds up."""
    res = in_process
    seg_all, ten_all = res["segments"], res["tensors"]
    for row in res["artifacts"].itertuples(index=False):
        with wb.open(row.artifact) as art:
            for name, frame in (("segments", seg_all), ("tensors", ten_all)):
                mine = frame[frame["artifact"] == row.artifact]
                theirs = art.frames[name]
                assert len(mine) == len(theirs), (row.artifact, name)
                for c in theirs.columns:
                    a = mine[c].astype(object).tolist()
                    b = theirs[c].astype(object).tolist()
                    assert [None if _na(x) else x for x in a] == \
                        [None if _na(x) else x for x in b], (row.artifact, name, c)
            assert row.format == art.format
            assert row.size == os.path.getsize(row.artifact)
            assert row.tensors == len(art.tensors)
            assert row.data_files == len(art.files) - 1
            stored = art.tensors[art.tensors["offset"].notna()]
            assert row.stored_tensor_bytes == int(stored["nbytes"].sum())
            assert row.external == int((art.tensors["storage"] == "external").sum())
        kinds = sum(getattr(row, f"{k}_bytes") for k in SCAN_KINDS) + row.other_bytes
        assert kinds == row.size
        assert row.padding_pct == pytest.approx(100 * row.padding_bytes / row.size)


def _na(x) -> bool:
    import pandas as pd

    return x is None or (not isinstance(x, (tuple, list)) and pd.isna(x))


def test_ptd_is_its_own_artifact_and_attached(in_process, sample):
    ptd = os.path.abspath(sample("mlp_external.ptd"))
    pte = os.path.abspath(sample("mlp_external.pte"))
    arts = in_process["artifacts"].set_index("artifact")
    assert arts.loc[ptd, "format"] == "ptd"
    assert arts.loc[pte, "data_files"] == 1 and arts.loc[pte, "missing"] == 0
    seg = in_process["segments"]
    from_pte = seg[seg["artifact"] == pte]
    assert set(from_pte["file"].map(os.path.abspath)) == {pte, ptd}


def test_missing_data_counted(tmp_path, sample):
    shutil.copy(sample("mlp_external.pte"), tmp_path)  # without its .ptd
    res = wb.scan(tmp_path, jobs=1)
    row = res["artifacts"].iloc[0]
    assert row["external"] == 4 and row["missing"] == 4 and row["data_files"] == 0
    assert res["tensors"]["missing"].sum() == 4


def test_process_pool_same_frames(corpus, in_process):
    import pandas as pd

    res = wb.scan([SAMPLES, corpus[0]], jobs=2, chunksize=3)
    assert res.backend.startswith("process pool")
    assert list(res) == list(in_process)
    for name in res:
        pd.testing.assert_frame_equal(res[name], in_process[name])
    assert sorted(res.skipped) == sorted(in_process.skipped)


@pytest.mark.slow  # a fuzz loop / runtime run: seconds (the mutation runs skip it)
def test_dask_same_frames(corpus, in_process, dask_client):
    import pandas as pd

    res = wb.scan([SAMPLES, corpus[0]], scheduler=dask_client, chunksize=4)
    assert res.backend.startswith("dask")
    for name in res:
        pd.testing.assert_frame_equal(res[name], in_process[name])
    assert sorted(res.skipped) == sorted(in_process.skipped)

    # left on the cluster as Dask DataFrames: the same rows once computed
    lazy = wb.scan([SAMPLES, corpus[0]], scheduler=dask_client, as_dask=True, chunksize=4)
    for name in in_process:
        got = lazy[name].compute().reset_index(drop=True)
        want = in_process[name]
        assert list(got.columns) == list(want.columns)
        for c in want.columns:
            assert [None if _na(x) else x for x in got[c].astype(object)] == \
                [None if _na(x) else x for x in want[c].astype(object)], (name, c)


def test_dask_by_address(dask_client, sample):
    res = wb.scan([sample("mlp_portable.pte")], scheduler=dask_client.scheduler.address)
    assert len(res["artifacts"]) == 1 and len(res["errors"]) == 0


def test_discover_globs_and_explicit(tmp_path, sample):
    here = sorted(p.name for p in SAMPLES.glob("*.ptd"))
    assert {"mlp_external.ptd", "mlp_xnnpack_external.ptd"} <= set(here)
    assert [os.path.basename(p) for p, _ in discover(str(SAMPLES / "*.ptd"))] == here
    res = wb.scan([str(SAMPLES / "**" / "*.ptd")], jobs=1)
    found = list(res["artifacts"]["artifact"]) + list(res["errors"]["artifact"])
    assert sorted(found) == sorted(str(p) for p in SAMPLES.rglob("*.ptd"))
    assert set(res["artifacts"]["format"].astype(str)) == {"ptd"}
    for f in res["errors"]["artifact"]:  # errors only for files that do not open
        with pytest.raises(wb.ArtifactError):
            wb.open(f)
    # named explicitly: a non-artifact is an error, not a skip; a missing path too
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    res = wb.scan([notes, tmp_path / "missing.pte"], jobs=1)
    assert list(res["errors"]["error"].astype(str)) == ["FileNotFoundError", "UnknownFormatError"]
    assert res.skipped == []


def test_other_frames(sample):
    res = wb.scan([sample("multi_method.pte"), sample("mlp_external.ptd")], jobs=1,
                  frames=("operators", "methods"))
    assert list(res) == ["artifacts", "operators", "methods", "errors"]
    with wb.open(sample("multi_method.pte")) as art:
        assert len(res["operators"]) == len(art.frames["operators"])
        assert res["methods"]["instructions"].dtype == "Int64"  # nullable in scan frames
    with pytest.raises(ValueError):
        wb.scan([sample("multi_method.pte")], frames=("nope",))
    with pytest.raises(ValueError):
        wb.scan([sample("multi_method.pte")], jobs=0)


def test_empty_corpus(tmp_path):
    res = wb.scan(tmp_path)
    assert all(len(df) == 0 for df in res.values())
    assert res["tensors"].columns[0] == "artifact"


def test_write_layouts(tmp_path, in_process):
    import pandas as pd

    written = write(in_process, tmp_path / "corpus.parquet")
    assert [os.path.basename(p) for p in written] == [
        f"corpus.{n}.parquet" for n in ("artifacts", "segments", "tensors", "errors")]
    for p, (name, df) in zip(written, in_process.items()):
        back = pd.read_parquet(p)
        assert list(back.columns) == list(df.columns) and len(back) == len(df)
        for c in df.columns:
            if df[c].dtype != object:
                # (string columns: parquet reads them back with pandas' default storage)
                assert str(back[c].dtype) == str(df[c].dtype), (name, c)
    written = write(in_process, str(tmp_path / "out") + os.sep)
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        f"{n}.parquet" for n in in_process)
    with pytest.raises(ValueError):
        write(in_process, tmp_path / "corpus.txt")


def test_scan_is_the_function():
    """``workbench.scan`` stays the function after its module (``workbench.corpus``) is imported."""
    import importlib

    importlib.import_module("workbench.corpus")
    assert callable(wb.scan) and wb.scan.__module__ == "workbench.corpus"
