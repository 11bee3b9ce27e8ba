"""Remote artifacts (#37): ranged reads over a real HTTP server on loopback (our own
:class:`rangeserver.RangeServer`: counts requests and bytes, injects latency and faults) and
over moto's S3 server with a real s3fs. No mocks of fsspec."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import workbench as wb
from workbench import _open, remote

sys.path.insert(0, str(Path(__file__).parent))
from rangeserver import RangeServer

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
CORPUS = Path("/work/shared/corpus")
EXTS = ("pte", "ptd", "bpte", "pt2", "etdp", "etrecord")
SAMPLE_FILES = sorted(p.name for ext in EXTS for p in SAMPLES.glob(f"*.{ext}"))
CORPUS_FILES = sorted(p.name for p in CORPUS.glob("*") if p.is_file()
                      and p.name != "PROVENANCE.tsv") if CORPUS.is_dir() else []
SECRET = "hunter2-not-for-logs"


@pytest.fixture(scope="module")
def http():
    with RangeServer(SAMPLES) as srv:
        yield srv


@pytest.fixture(scope="module")
def corpus_http():
    if not CORPUS_FILES:
        pytest.skip("no corpus in /work/shared/corpus")
    with RangeServer(CORPUS) as srv:
        yield srv


@pytest.fixture
def fresh(http, monkeypatch):
    """The sample server with counts and faults reset; quick retries; hints exercised (no
    whole-file fetch of small files)."""
    http.reset()
    monkeypatch.setattr(remote, "BACKOFF", 0.01)
    monkeypatch.setattr(_open, "EAGER_BYTES", 0)
    return http


# -- frames over a URL == frames of the same file opened locally --------------------------------

def _norm(v: Any, remote_prefix: str, local_prefix: str) -> Any:
    if isinstance(v, str):
        return v.replace(remote_prefix, local_prefix)
    if isinstance(v, (list, tuple)):
        return type(v)(_norm(x, remote_prefix, local_prefix) for x in v)
    return v


def _paths_replaced(df: pd.DataFrame, remote_prefix: str, local_prefix: str) -> pd.DataFrame:
    df = df.copy()
    for c in df.columns:
        if df[c].dtype == object or pd.api.types.is_string_dtype(df[c].dtype):
            df[c] = df[c].map(lambda v: _norm(v, remote_prefix, local_prefix)).astype(
                df[c].dtype)
    return df


def _frames(art: wb.Artifact, remote_prefix: str = "", local_prefix: str = "") -> dict:
    out = {name: _paths_replaced(art.frames[name], remote_prefix, local_prefix)
           for name in art.frames}
    out["validate()"] = _paths_replaced(art.validate(), remote_prefix, local_prefix)
    return out


def _same_as_local(srv: RangeServer, folder: Path, name: str) -> wb.Artifact | None:
    try:
        local = wb.open(str(folder / name))
    except wb.ArtifactError as e:
        with pytest.raises(type(e)):
            wb.open(srv.url(name))
        return None
    art = wb.open(srv.url(name))
    want = _frames(local)
    got = _frames(art, srv.url(""), str(folder) + "/")
    assert list(got) == list(want)
    for frame, df in want.items():
        pd.testing.assert_frame_equal(got[frame], df, obj=f"{name}: {frame}")
    assert art.format == local.format
    return art


@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_sample_frames_over_http_equal_local(fresh, name):
    art = _same_as_local(fresh, SAMPLES, name)
    if art is not None:  # every request made for the main file is counted on its source
        main = art.sources[art.path]
        assert main.transfer["requests"] == fresh.requests["/" + name] + fresh.requests["/"]
        assert main.transfer["bytes"] == fresh.sent["/" + name]
        assert all(s.remote for s in art.sources.values())


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_corpus_frames_over_http_equal_local(corpus_http, monkeypatch, name):
    monkeypatch.setattr(_open, "EAGER_BYTES", 0)
    _same_as_local(corpus_http, CORPUS, name)


# -- what is fetched ---------------------------------------------------------------------------

def test_open_is_one_request_and_tensor_fetches_only_its_bytes(fresh, monkeypatch):
    monkeypatch.setattr(remote, "HEAD_BYTES", 1024)
    monkeypatch.setattr(remote, "BLOCK", 1)
    art = wb.open(fresh.url("llm_tiny.pte"))
    src = art.sources[art.path]
    assert src.size == os.path.getsize(SAMPLES / "llm_tiny.pte")
    art.tensors  # noqa: B018 - builds the frame: metadata only
    before = dict(src.transfer)
    assert before["bytes"] < 200_000 < src.size  # the weights were not fetched
    t = art.tensors.sort_values("nbytes").iloc[-1]
    arr = art.tensor(t["name"])
    assert src.transfer["requests"] == before["requests"] + 1
    assert src.transfer["bytes"] - before["bytes"] == t["nbytes"]
    local = wb.open(str(SAMPLES / "llm_tiny.pte")).tensor(t["name"])
    assert (pd.Series(arr.ravel()) .equals(pd.Series(local.ravel())))
    art.tensor(t["name"])  # cached: no new request
    assert src.transfer["requests"] == before["requests"] + 1


def test_several_tensors_are_fetched_concurrently(fresh, monkeypatch):
    monkeypatch.setattr(remote, "BLOCK", 1)
    fresh.latency = 0.05
    try:
        art = wb.open(fresh.url("llm_tiny.pte"))
        names = art.tensors.query("nbytes > 0").sort_values("offset")["name"].tolist()[::2][:8]
        fresh.reset()
        got = art.read_tensors(names)
    finally:
        fresh.latency = 0.0
    assert list(got) == names
    assert fresh.max_inflight > 1  # answered at the same time, not one after the other
    local = wb.open(str(SAMPLES / "llm_tiny.pte"))
    for n in names:
        assert bytes(got[n].tobytes()) == bytes(local.tensor(n).tobytes())


def test_sibling_ptd_found_at_the_same_prefix(fresh):
    art = wb.open(fresh.url("mlp_external.pte"))
    assert art.files == [fresh.url("mlp_external.pte"), fresh.url("mlp_external.ptd")]
    assert set(art.tensors["file"].dropna()) == {fresh.url("mlp_external.ptd")}
    assert art.tensor("fc1.weight").shape == (32, 16)
    none = wb.open(fresh.url("mlp_external.pte"), data=[])
    assert none.tensors["missing"].all()


def test_sibling_without_a_listing_tries_the_programs_own_name(fresh, tmp_path):
    # a server without folder indexes: the listing fails, <stem>.ptd is still found
    fresh.faults["/"] = ["404"]
    art = wb.open(fresh.url("mlp_external.pte"))
    assert fresh.url("mlp_external.ptd") in art.files


# -- faults --------------------------------------------------------------------------------------

def test_404_and_403(fresh):
    with pytest.raises(wb.RemoteNotFoundError, match=r"nope\.pte.*404"):
        wb.open(fresh.url("nope.pte"))
    fresh.faults["/mlp_portable.pte"] = ["403"]
    with pytest.raises(wb.RemoteAccessError, match="403") as e:
        wb.open(fresh.url("mlp_portable.pte"))
    assert e.value.file == fresh.url("mlp_portable.pte")  # the whole URL, not a base name
    assert isinstance(e.value, wb.ArtifactError) and e.value.__cause__ is None


@pytest.mark.parametrize("fault", ["500", "503", "416", "drop"])
def test_transient_faults_are_retried_then_reported(fresh, fault):
    path = "/mlp_portable.pte"
    fresh.faults[path] = [fault, "ok"]  # once: the retry succeeds
    art = wb.open(fresh.url("mlp_portable.pte"))
    assert fresh.requests[path] == 2  # (aiohttp itself resends once on a dropped keep-alive)
    assert art.sources[art.path].transfer["requests"] == (1 if fault == "drop" else 2)
    fresh.reset()
    fresh.faults[path] = [fault]  # always: bounded retries, then our error
    with pytest.raises(wb.RemoteUnavailableError, match="tries with backoff") as e:
        wb.open(fresh.url("mlp_portable.pte"))
    assert remote.RETRIES + 1 <= fresh.requests[path] <= 2 * (remote.RETRIES + 1)
    assert "aiohttp" not in type(e.value).__module__


def test_timeout(fresh, monkeypatch):
    monkeypatch.setattr(remote, "RETRIES", 0)
    fresh.faults["/mlp_portable.pte"] = ["hang"]
    with pytest.raises(wb.RemoteUnavailableError, match="Timeout"):
        wb.open(fresh.url("mlp_portable.pte"), timeout=0.3)


def test_server_ignoring_range_is_refused_unless_allowed(fresh, monkeypatch):
    monkeypatch.setattr(remote, "HEAD_BYTES", 1024)
    fresh.faults["/llm_tiny.pte"] = ["norange"]
    fresh.bandwidth = 4e6
    try:
        with pytest.raises(wb.RangeNotSupportedError, match=r"ignored Range.*allow_full_dow"):
            wb.open(fresh.url("llm_tiny.pte"))
    finally:
        fresh.bandwidth = None
    assert fresh.sent["/llm_tiny.pte"] < 1 << 20  # it did not download the body
    fresh.reset()
    fresh.faults["/llm_tiny.pte"] = ["norange"]
    art = wb.open(fresh.url("llm_tiny.pte"), allow_full_download=True)
    art.tensors  # noqa: B018
    assert fresh.requests["/llm_tiny.pte"] == 1
    assert art.sources[art.path].cached == os.path.getsize(SAMPLES / "llm_tiny.pte")


def test_etag_change_is_a_stale_file(fresh, monkeypatch):
    monkeypatch.setattr(remote, "BLOCK", 1)
    art = wb.open(fresh.url("llm_tiny.pte"))
    name = art.tensors.sort_values("nbytes")["name"].iloc[-1]
    fresh.faults["/llm_tiny.pte"] = ["etag"]
    with pytest.raises(wb.StaleFileError, match="changed since it was opened: ETag"):
        art.tensor(name)
    with pytest.raises(wb.StaleFileError):
        art.ensure_fresh()
    assert art.is_stale()
    again = art.reload()
    assert again.tensor(name).shape == art.tensors.set_index("name").loc[name, "shape"]


def test_credentials_never_shown(fresh):
    fresh.require = ("me", SECRET)
    try:
        art = wb.open(fresh.url("mlp_external.pte", auth=f"me:{SECRET}"))
        shown = [repr(art), repr(dict(art.sources)), str(art.files), art.validate().to_string(),
                 *(art.frames[f].to_string() for f in art.frames)]
        assert not any(SECRET in s for s in shown)
        assert "me:***@" in art.path
        with pytest.raises(wb.RemoteAccessError) as e:
            wb.open(fresh.url("mlp_portable.pte", auth="me:wrong-password"))
        assert "wrong-password" not in str(e.value) and "me:***@" in str(e.value)
        opts = {"headers": {"Authorization": "Basic bWU6aHVudGVyMi1ub3QtZm9yLWxvZ3M="}}
        ok = wb.open(fresh.url("mlp_portable.pte"), storage_options=opts)
        assert "bWU6" not in repr(ok.sources)
    finally:
        fresh.require = None


def test_mask_url():
    from workbench.errors import mask_url

    assert mask_url("s3://b/k.pte") == "s3://b/k.pte"
    assert mask_url("https://u:p@h/x?X-Amz-Signature=s&X-Amz-Credential=c&a=1") == \
        "https://u:***@h/x?X-Amz-Signature=***&X-Amz-Credential=***&a=1"


def test_bad_content_over_a_url_names_the_url(fresh, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    data = bytearray((SAMPLES / "mlp_portable.pte").read_bytes())
    data[4:8] = b"ZZ12"
    (bad / "x.pte").write_bytes(bytes(data))
    with RangeServer(bad) as srv, pytest.raises(wb.UnknownFormatError) as e:
        wb.open(srv.url("x.pte"))
    assert e.value.file == srv.url("x.pte")


# -- S3 (moto's server, real s3fs) ---------------------------------------------------------------

@pytest.fixture(scope="module")
def s3():
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    import s3fs

    opts = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
    fs = s3fs.S3FileSystem(**opts)
    fs.mkdir("models")
    for n in ("mlp_external.pte", "mlp_external.ptd", "mlp_xnnpack.pte", "llm_tiny.pte",
              "mlp.pt2", "mlp_portable.etdp"):
        fs.put(str(SAMPLES / n), f"models/m/{n}")
    fs.put(str(SAMPLES / "mlp_portable.pte"), "models/m/sub/mlp_portable.pte")
    try:
        yield fs, opts
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize("name", ["mlp_external.pte", "mlp_xnnpack.pte", "llm_tiny.pte",
                                  "mlp.pt2", "mlp_portable.etdp"])
def test_s3_frames_equal_local(s3, monkeypatch, name):
    _, opts = s3
    monkeypatch.setattr(_open, "EAGER_BYTES", 0)
    local = wb.open(str(SAMPLES / name))
    art = wb.open(f"s3://models/m/{name}", storage_options=opts)
    art.segments, art.tensors  # noqa: B018 - the request budget: open + segments + tensors
    assert art.sources[art.path].transfer["requests"] <= 4
    want = _frames(local)
    got = _frames(art, "s3://models/m/", str(SAMPLES) + "/")
    for frame, df in want.items():
        pd.testing.assert_frame_equal(got[frame], df, obj=f"{name}: {frame}")
    assert not any(SECRET in repr(s) for s in art.sources.values())


def test_s3_sibling_tensor_and_faults(s3, monkeypatch):
    _, opts = s3
    monkeypatch.setattr(remote, "BACKOFF", 0.01)
    art = wb.open("s3://models/m/mlp_external.pte", storage_options=opts)
    assert art.files[1] == "s3://models/m/mlp_external.ptd"
    assert art.tensor("fc1.weight").shape == (32, 16)
    with pytest.raises(wb.RemoteNotFoundError, match=r"s3://models/m/nope\.pte"):
        wb.open("s3://models/m/nope.pte", storage_options=opts)
    with pytest.raises(wb.RemoteNotFoundError):
        wb.open("s3://no-such-bucket/m.pte", storage_options=opts)


def test_s3_object_replaced_is_stale(s3, monkeypatch, tmp_path):
    fs, opts = s3
    monkeypatch.setattr(remote, "BLOCK", 1)
    monkeypatch.setattr(remote, "HEAD_BYTES", 4096)
    fs.put(str(SAMPLES / "llm_tiny.pte"), "models/tmp/llm.pte")
    art = wb.open("s3://models/tmp/llm.pte", storage_options=opts)
    name = art.tensors.sort_values("nbytes")["name"].iloc[-1]
    changed = tmp_path / "llm.pte"
    shutil.copyfile(SAMPLES / "llm_tiny.pte", changed)
    with open(changed, "r+b") as f:
        f.seek(os.path.getsize(changed) - 1)
        f.write(b"\x01")
    fs.put(str(changed), "models/tmp/llm.pte")
    with pytest.raises(wb.StaleFileError, match="changed since it was opened"):
        art.tensor(name)


def test_scan_of_an_s3_prefix_equals_the_local_scan(s3, tmp_path):
    fs, opts = s3
    folder = tmp_path / "m"
    fs.get("models/m/", str(folder), recursive=True)
    assert (folder / "sub" / "mlp_portable.pte").is_file()
    (folder / "notes.txt").write_text("not an artifact")
    fs.put(str(folder / "notes.txt"), "models/m/notes.txt")
    local = wb.scan(str(folder), jobs=1)
    got = wb.scan("s3://models/m/", jobs=1, storage_options=opts)
    assert got.files == local.files and len(got.skipped) == len(local.skipped) == 1
    for name in ("artifacts", "segments", "tensors", "errors"):
        want = _paths_replaced(local[name], str(folder) + "/", "")
        have = _paths_replaced(got[name], "s3://models/m/", "")
        pd.testing.assert_frame_equal(have, want, obj=name)
    assert len(got["artifacts"]) == 7
    pooled = wb.scan("s3://models/m/", jobs=2, chunksize=2, storage_options=opts)
    assert pooled.backend.startswith("process pool")
    pd.testing.assert_frame_equal(pooled["segments"], got["segments"])


def test_any_fsspec_url(monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.setattr(_open, "EAGER_BYTES", 0)
    mem = fsspec.filesystem("memory")
    for n in ("mlp_xnnpack.pte", "mlp_external.pte", "mlp_external.ptd"):
        mem.pipe(f"/wbtest/{n}", (SAMPLES / n).read_bytes())
    try:
        for n in ("mlp_xnnpack.pte", "mlp_external.pte"):
            art = wb.open(f"memory://wbtest/{n}")
            got = _frames(art, "memory://wbtest/", str(SAMPLES) + "/")
            for frame, df in _frames(wb.open(str(SAMPLES / n))).items():
                pd.testing.assert_frame_equal(got[frame], df, obj=f"{n}: {frame}")
        with pytest.raises(wb.RemoteNotFoundError):
            wb.open("memory://wbtest/nope.pte")
    finally:
        mem.rm("/wbtest", recursive=True)


# -- the command line takes URLs ------------------------------------------------------------------

def test_cli_takes_urls(fresh, capsys, tmp_path):
    from workbench.cli import main

    assert main(["inspect", fresh.url("mlp_external.pte"), "--frame", "tensors",
                 "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "fc1.weight" in out and fresh.url("mlp_external.ptd") in out
    assert main(["inspect", fresh.url("")]) in (0, 1)  # a folder URL: every artifact under it
    listed = capsys.readouterr().out
    assert "mlp_portable.pte" in listed and "llm_tiny.pte" in listed
    assert main(["compare", fresh.url("mlp_portable.pte"),
                 str(SAMPLES / "mlp_portable.pte")]) == 0
    capsys.readouterr()
    assert main(["inspect", fresh.url("nope.pte", auth=f"u:{SECRET}")]) == 1
    err = capsys.readouterr().err
    assert "RemoteNotFoundError" in err or "not found" in err
    assert SECRET not in err
