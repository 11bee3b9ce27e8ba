"""``.pt2`` safety cases that ``test_pt2.py`` does not cover yet.

Already there (not repeated): a live pickle that would create a file is listed but never
unpickled by ``open``/frames/tensors; ``../``, absolute, drive, backslash and control-character
member names are flagged; a member and a config claiming 2**40 bytes; a deflate bomb in a
config and a ~1000:1 compressed weight; a central directory larger than what lies before the
end record; offsets past the end in central records; duplicate names.

Added here:

* the central directory (or the ZIP64 end record) placed outside the file: classic and ZIP64
  offsets past the end, 2**40, 2**63, 2**64-1; sizes and entry counts that large — an
  ArtifactError naming the file and an offset, fast, without allocating;
* more name hazards (``..``, ``./../x``, UNC paths, NUL, ``D:/``) flagged;
* the hostile pickle through every *other* entry point (``scan``, ``compare``, the CLI,
  ``profile`` without ``trusted``), and an audit hook proving that nothing is unpickled
  (no ``pickle.find_class``), nothing ``dlopen``ed (AOTInductor ``.so``), no process started
  and nothing written while archives are opened and read.
"""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest
from _audit import watching
from test_pt2 import build_zip, exercise, pt2_members, tensor_meta, write

import workbench as wb
from workbench.errors import CorruptError, OutOfBoundsError

PT2_SAMPLES = ("mlp.pt2", "tied.pt2", "mlp_aoti.pt2", "mlp_aoti_blob.pt2")


@pytest.fixture
def members() -> list[dict]:
    w = np.arange(6, dtype=np.float32)
    return pt2_members(weights={"w": {"path_name": "weight_0", "is_param": True, "use_pickle": False,
                                      "tensor_meta": tensor_meta(7, [2, 3])}},
                       files={"data/weights/weight_0": w.tobytes()})


def refused(path, cls=wb.ArtifactError) -> wb.ArtifactError:
    """``exercise(path)`` raises ``cls`` within 1 s and 8 MiB; the message names file and offset."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(cls) as ei:
            exercise(path).close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 1.0
    assert peak < 8 << 20, f"{peak} bytes allocated"
    e = ei.value
    assert str(e).startswith(path.name + ":"), str(e)
    assert 0 <= e.offset <= path.stat().st_size and f" at 0x{e.offset:x}: " in str(e), str(e)
    return e


# --------------------------------------------------------------------------------------------
# the central directory outside the file
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["eof", "eof+1000", 0xFFFFFFFE], ids=str)
def test_classic_central_directory_offset_outside(tmp_path, members, value):
    data, where = build_zip(members)
    v = {"eof": len(data), "eof+1000": len(data) + 1000}.get(value, value)
    d = bytearray(data)
    struct.pack_into("<I", d, where["eocd"] + 16, v)
    e = refused(write(tmp_path, bytes(d)), OutOfBoundsError)
    assert e.offset == where["eocd"]


def test_classic_central_directory_size_past_the_end(tmp_path, members):
    data, where = build_zip(members)
    d = bytearray(data)
    struct.pack_into("<I", d, where["eocd"] + 12, 0xFFFFFFF0)
    refused(write(tmp_path, bytes(d)), OutOfBoundsError)


def _zip64(members):
    data, where = build_zip(members, zip64=True)
    loc = where["eocd"] - 20
    assert data[loc:loc + 4] == b"PK\x06\x07"
    (z64,) = struct.unpack_from("<Q", data, loc + 8)
    assert data[z64:z64 + 4] == b"PK\x06\x06"
    return data, loc, z64


@pytest.mark.parametrize("value", ["eof", 2**63, 2**64 - 1], ids=str)
def test_zip64_locator_points_outside(tmp_path, members, value):
    data, loc, _ = _zip64(members)
    d = bytearray(data)
    struct.pack_into("<Q", d, loc + 8, len(data) if value == "eof" else value)
    refused(write(tmp_path, bytes(d)), OutOfBoundsError)


@pytest.mark.parametrize("field,value,cls", [
    ("offset", 2**40, OutOfBoundsError), ("offset", 2**63, OutOfBoundsError),
    ("offset", 2**64 - 1, OutOfBoundsError), ("offset", "eof", OutOfBoundsError),
    ("size", 2**40, OutOfBoundsError), ("size", 2**64 - 1, OutOfBoundsError),
    ("count", 2**40, CorruptError), ("count", 2**64 - 1, CorruptError),
], ids=lambda v: v if isinstance(v, str) else hex(v) if isinstance(v, int) else None)
def test_zip64_central_directory_outside(tmp_path, members, field, value, cls):
    data, _, z64 = _zip64(members)
    d = bytearray(data)
    v = len(data) if value == "eof" else value
    if field == "count":
        struct.pack_into("<QQ", d, z64 + 24, v, v)
    else:
        struct.pack_into("<Q", d, z64 + {"size": 40, "offset": 48}[field], v)
    refused(write(tmp_path, bytes(d)), cls)


# --------------------------------------------------------------------------------------------
# names
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["..", "./../x", "a/b/../../../c", "arc/../../etc/passwd",
                                  "//server/share", "\\\\server\\share", "nul\x00name", "D:/x"])
def test_more_unsafe_names_are_flagged(tmp_path, name):
    data, _ = build_zip([*pt2_members(), {"name": name, "data": b"x"}])
    with wb.open(write(tmp_path, data)) as art:
        m = art.frames["members"]
        assert list(m.loc[m["unsafe_name"], "name"]) == [name]
        f = art.validate()
        msgs = f.loc[f["message"].str.contains("unsafe member name"), "structure"]
        assert len(msgs) == 1 and "\x00" not in msgs.iloc[0]


# --------------------------------------------------------------------------------------------
# nothing is unpickled, loaded, started or written — by any entry point
# --------------------------------------------------------------------------------------------

class _CreatesFile:
    """Unpickling an instance creates ``path`` (``builtins.open(path, "w")``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def hostile(tmp_path):
    """An archive whose weight, custom object, sample inputs and a stray member are live
    pickles; returns ``(path, marker)``: the marker file appears if any is unpickled."""
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_CreatesFile(str(marker)), protocol=2)
    inner, _ = build_zip([{"name": "archive/data.pkl", "data": payload},
                          {"name": "archive/version", "data": b"3\n"}], align=0)
    meta = tensor_meta(7, [2, 2])
    ms = pt2_members(
        weights={"evil": {"path_name": "weight_0", "is_param": True, "use_pickle": True,
                          "tensor_meta": meta},
                 "good": {"path_name": "weight_1", "is_param": True, "use_pickle": False,
                          "tensor_meta": meta}},
        constants={"obj": {"path_name": "custom_obj_0", "is_param": False, "use_pickle": True,
                           "tensor_meta": None}},
        files={"data/weights/weight_0": payload,
               "data/weights/weight_1": np.ones(4, np.float32).tobytes(),
               "data/constants/custom_obj_0": payload,
               "data/sample_inputs/model.pt": inner,
               "extra/blob.pkl": payload})
    data, _ = build_zip(ms)
    folder = tmp_path / "in"
    folder.mkdir()
    return write(folder, data, "hostile.pt2"), marker


def test_the_payload_is_live(tmp_path):
    """Guard for the tests below: unpickling the payload does create the marker."""
    probe = tmp_path / "probe"
    with watching() as seen:
        pickle.loads(pickle.dumps(_CreatesFile(str(probe)), protocol=2)).close()
    assert probe.exists()
    assert any(ev == "pickle.find_class" for ev, _ in seen.executions)


def test_in_process_entry_points_never_unpickle(hostile, sample):
    path, marker = hostile
    with watching(path.parent) as seen:
        art = exercise(path)
        with art:
            assert art.tensors.set_index("name").loc["evil", "storage"] == "pickle"
            art._repr_html_()
        s = wb.scan(path.parent, jobs=1)
        assert len(s["artifacts"]) == 1 and len(s["errors"]) == 0
        with wb.compare(path, sample("mlp.pt2"), hashes=True, progress=False) as cmp:
            t = cmp.tensors  # nothing in common: no names shared, no equal bytes
            assert sorted(zip(t["side"], t["name_a"].fillna(""), t["name_b"].fillna(""))) == [
                ("a_only", "evil", ""), ("a_only", "good", ""), ("b_only", "", "fc1.bias"),
                ("b_only", "", "fc1.weight"), ("b_only", "", "fc2.bias"),
                ("b_only", "", "fc2.weight")]
            assert t["same_bytes"].isna().all() and cmp.duplicates.empty
    assert not marker.exists()
    assert not seen.executions, seen.executions
    assert not seen.writes, seen.writes
    assert seen.maps and all(a == 1 for _, a in seen.maps)  # mmap.ACCESS_READ


def test_cli_and_untrusted_profile_never_unpickle(hostile):
    path, marker = hostile
    r = subprocess.run([sys.executable, "-m", "workbench", "inspect", str(path), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)
    prof = wb.profile(path, paths=["pt2_export_load", "pt2_views"], repeat=1, progress=False)
    status = prof.summary.set_index("path")["status"]
    assert status["pt2_export_load"] == "skipped"  # it unpickles: only with trusted=True
    assert not marker.exists()
    assert sorted(p.name for p in path.parent.iterdir()) == ["hostile.pt2"]


@pytest.mark.parametrize("name", PT2_SAMPLES)
def test_samples_are_read_without_loading_or_writing_anything(sample, name):
    """Opening and reading a real archive (an AOTInductor ``.so`` included) runs no
    ``pickle.find_class``, no ``ctypes.dlopen``, no process, and opens nothing for writing."""
    try:  # torch's own import dlopens its libraries: do that before watching
        import torch  # noqa: F401
    except ImportError:
        pass
    p = sample(name)
    with watching() as seen:
        exercise(p).close()
    assert not seen.executions, seen.executions
    assert not seen.writes, seen.writes
