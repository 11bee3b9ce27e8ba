"""Golden outcomes: what every entry point answers on ~1,000 inputs, pinned.

The oracle tests compare frames with ExecuTorch, torch and ``zipfile`` wherever those have
an answer. For what they have no answer to, this module pins today's answers, so that any
change of behaviour shows up as a failure naming the input and the entry point:

* which error a damaged file gets, and its structure, offset and text;
* the findings of ``validate()``;
* the frames, ``info`` and ``summary()`` of a damaged file that still opens;
* the bytes that ``tensor()`` hands out (also ``dequantize=True`` for delegate constants);
* ``compare(original, damaged, hashes=True)``: its tensors, segments, summary, duplicates
  and ``delta()``;
* a trace joined to its program (``wb.timeline``).

Inputs (``INPUTS``): every sample, the way ``bench/fuzz.py`` sees it (a ``.ptd`` also
through its program, a trace's debug buffer through the trace), ``MUTANTS`` seeded mutants of
each (``bench/fuzz.py``'s mutator, the same bytes on every machine), and every case of
``tests/attacks/``.

What is recorded per entry point is short: an error as its class and full message, a frame
as ``rows x columns`` and a digest of its column names, dtypes and values (paths of the
work folder replaced by ``<tmp>``). The golden files are ``tests/data/outcomes/*.json``, one
per sample target.

After an intended change of behaviour, rewrite them and read the diff::

    WORKBENCH_UPDATE_OUTCOMES=1 .venv/bin/python -m pytest tests/test_outcomes.py
    git diff --stat tests/data/outcomes/

A changed digest names the input (``mutant-007`` is ``bench/fuzz.py``'s
``mutant(target, SEED, 7)``) and the entry point; :func:`record` on that input shows the
whole outcome.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from attacks import test_attacks
from test_fuzz_all_formats import fuzz

import workbench as wb

#: the shipped readers, size thresholds included (see conftest.vectorised_small_methods)
pytestmark = pytest.mark.production_thresholds

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
GOLDEN = ROOT / "tests" / "data" / "outcomes"
UPDATE = os.environ.get("WORKBENCH_UPDATE_OUTCOMES") == "1"
#: seeded mutants per sample target, and their seed (not the one of test_fuzz_all_formats)
MUTANTS = 40
SEED = 19
#: stored tensors read per tensor frame
MAX_TENSORS = 8
#: formats that ``wb.compare`` takes
COMPARABLE = ("pte", "ptd", "bpte", "pt2")
#: stop comparing one target after this many differences (a broken reader differs everywhere)
MAX_DIFFS = 20


# -- recording ------------------------------------------------------------------------------

def _error(e: BaseException, tmp: str) -> str:
    """An exception as ``!Class: message`` (work-folder paths replaced)."""
    return f"!{type(e).__name__}: {str(e).replace(tmp, '<tmp>')}"


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "backslashreplace")).hexdigest()[:12]


def _frame(df: Any, tmp: str, index: bool = False) -> str:
    """``rows x columns digest`` of a DataFrame: its column names, dtypes and values."""
    head = repr([(str(c), str(t)) for c, t in df.dtypes.items()])
    body = df.to_csv(index=index, lineterminator="\n")
    return f"{df.shape[0]}x{df.shape[1]} {_digest((head + body).replace(tmp, '<tmp>'))}"


def _plain(x: Any, tmp: str) -> str:
    """A digest of plain data (dicts, lists, numbers, strings) in a stable order."""
    text = json.dumps(x, sort_keys=True, default=repr)
    return _digest(text.replace(tmp, "<tmp>"))


def _tensor(x: Any) -> str:
    """``dtype shape digest`` of the bytes a tensor view covers (huge views: both ends)."""
    if hasattr(x, "numpy") and not hasattr(x, "__array_interface__"):  # torch
        import torch

        dtype, shape = str(x.dtype).removeprefix("torch."), tuple(x.shape)
        if x.is_quantized:
            x = x.int_repr()
        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        x = x.view(ints[x.element_size()]) if x.element_size() in ints else x
        if x.numel() * x.element_size() > fuzz.TOUCH_LIMIT:
            raw = repr((x[(0,) * x.dim()].item(), x[(-1,) * x.dim()].item())).encode()
        else:
            raw = x.contiguous().numpy().tobytes()
    else:
        dtype, shape = str(x.dtype), tuple(x.shape)
        if x.size and x.nbytes > fuzz.TOUCH_LIMIT:
            raw = repr((x[(0,) * x.ndim].tobytes(), x[(-1,) * x.ndim].tobytes())).encode()
        else:
            raw = np.ascontiguousarray(x).tobytes()
    return f"{dtype} {shape} {hashlib.sha1(raw).hexdigest()[:12]}"


def _try(out: dict[str, str], key: str, tmp: str, fn: Callable[[], str]) -> bool:
    """``out[key] = fn()``, or the error it raised; whether it worked."""
    try:
        out[key] = fn()
        return True
    except Exception as e:  # every exception is an outcome to pin (bugs too)
        out[key] = _error(e, tmp)
        return False


def _artifact(art: wb.Artifact, out: dict[str, str], tmp: str, prefix: str = "") -> None:
    """Every frame, ``info``, ``summary()``, ``validate()`` and a few tensor reads."""
    _try(out, prefix + "info", tmp, lambda: _plain(art.info, tmp))
    for name in list(art.frames):
        _try(out, f"{prefix}frame:{name}", tmp, lambda n=name: _frame(art.frames[n], tmp))
    _try(out, prefix + "summary", tmp, lambda: _plain(art.summary(), tmp))
    _try(out, prefix + "validate", tmp, lambda: _frame(art.validate(), tmp))
    for frame in ("tensors", "test_cases", "delegate_tensors"):
        if frame not in art.frames or not out[f"{prefix}frame:{frame}"][0].isdigit():
            continue
        df = art.frames[frame]
        rows = df[df["offset"].notna()].head(MAX_TENSORS)
        for k, row in enumerate(rows.itertuples(index=False)):
            key = fuzz._key(row) if frame == "tensors" else str(row.name)
            label = f"{prefix}tensor:{frame}:{key}"
            _try(out, label, tmp, lambda key=key: _tensor(art.tensor(key)))
            if k == 0 and frame == "tensors":
                _try(out, label + ":copy", tmp, lambda key=key: _tensor(art.tensor(key, copy=True)))
            if frame == "delegate_tensors" and str(row.quant) != "none":
                _try(out, label + ":dequantize", tmp,
                     lambda key=key: _tensor(art.tensor(key, dequantize=True)))


def _timeline(path: Path, art: wb.Artifact, out: dict[str, str], tmp: str) -> None:
    """A trace joined to its program (by event and by instruction, with its ETRecord too),
    or an ETRecord joined to the program and trace beside it."""
    partners = {q.name[len(fuzz._base(path)):]: q for q in fuzz._partners(path)}
    if ".pte" not in partners or art.format not in ("etdump", "etrecord"):
        return
    others = [".etrecord"] if art.format == "etdump" else [".etdp"]
    opened: dict[str, wb.Artifact] = {}
    try:
        for suffix in (".pte", *others):
            if suffix in partners:
                opened[suffix] = wb.open(partners[suffix])
        if art.format == "etdump":
            joins = [("event", art, None), ("instruction", art, None)]
            if ".etrecord" in opened:
                joins.append(("event", art, opened[".etrecord"]))
        elif ".etdp" in opened:
            joins = [("event", opened[".etdp"], art)]
        else:
            joins = []
        for k, (by, trace, rec) in enumerate(joins):
            _try(out, f"timeline:{k}:{by}", tmp,
                 lambda by=by, trace=trace, rec=rec:
                 _frame(wb.timeline(opened[".pte"], trace, rec, by=by), tmp))
    finally:
        for a in opened.values():
            a.close()


def _compare(original: Path, path: Path, out: dict[str, str], tmp: str) -> None:
    """``compare(original, path, hashes=True)``: every frame it offers."""
    try:
        cmp = wb.compare(original, path, hashes=True)
    except Exception as e:
        out["compare"] = _error(e, tmp)
        return
    try:
        for name in ("tensors", "segments", "summary", "duplicates"):
            _try(out, f"compare:{name}", tmp,
                 lambda n=name: _frame(getattr(cmp, n), tmp, index=True))
        _try(out, "compare:delta", tmp, lambda: _frame(cmp.delta(), tmp, index=True))
    finally:
        cmp.close()


def record(path: Path, data: list[Path] | None = None, original: Path | None = None,
           root: Path | None = None) -> dict[str, str]:
    """Everything a user can ask of ``path`` (with ``data`` attached), as ``entry -> outcome``;
    with ``original``, also its comparison with that file. Paths inside ``root`` (default:
    the folder of ``path``) are written ``<tmp>/...``."""
    tmp = str(root or path.parent)
    out: dict[str, str] = {}
    try:
        art = wb.open(path) if data is None else wb.open(path, data=data)
    except Exception as e:
        out["open"] = _error(e, tmp)
        return out
    out["open"] = art.format
    try:
        _artifact(art, out, tmp)
        if art.format == "bpte":
            _try(out, "program", tmp, lambda: art.program.format)
            if out["program"] == "pte":
                _artifact(art.program, out, tmp, prefix="program.")
        _timeline(path, art, out, tmp)
    finally:
        art.close()
    if original is not None and art.format in COMPARABLE:
        _compare(original, path, out, tmp)
    return out


# -- inputs ---------------------------------------------------------------------------------

def _targets() -> dict[str, Any]:
    files = sorted(p for ext in ("pte", "ptd", "bpte", "pt2", "etdp", "etrecord")
                   for p in SAMPLES.glob(f"*.{ext}"))
    return {t.key: t for p in files for t in fuzz.analyse(p)}


TARGETS = _targets()


def _place(t: Any, folder: Path, data: bytes) -> Path:
    """``folder`` with the target's intact siblings and ``data`` as its file; the path to open."""
    folder.mkdir()
    for s in t.siblings:
        shutil.copyfile(s, folder / s.name)
    (folder / t.name).write_bytes(data)
    return folder / t.open_name


def target_outcomes(key: str, tmp: Path) -> dict[str, dict[str, str]]:
    """``input -> outcome`` of a sample target: the original and its ``MUTANTS`` mutants, each
    compared with the original."""
    t = TARGETS[key]
    original = _place(t, tmp / "original", t.data)
    outs = {"original": record(original, root=tmp)}
    for i in range(MUTANTS):
        _, data = fuzz.mutant(t, SEED, i)
        outs[f"mutant-{i:03d}"] = record(_place(t, tmp / f"m{i}", data), original=original,
                                         root=tmp)
    return outs


def attack_outcomes(case: Any, tmp: Path) -> dict[str, str]:
    """The outcome of one ``tests/attacks`` case."""
    path = case.build(tmp)
    data = None if case.data is None else [path.parent / d for d in case.data]
    return record(path, data)


# -- golden files -----------------------------------------------------------------------------

def _golden(name: str) -> Path:
    return GOLDEN / f"{name}.json"


def _check(name: str, got: dict[str, dict[str, str]]) -> None:
    """Compare ``got`` with the golden file ``name`` (or write it, when updating)."""
    path = _golden(name)
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path.relative_to(ROOT)}: run with WORKBENCH_UPDATE_OUTCOMES=1")
    want = json.loads(path.read_text())
    diffs = []
    for inp in sorted(set(want) | set(got)):
        w, g = want.get(inp, {}), got.get(inp, {})
        for entry in sorted(set(w) | set(g)):
            if w.get(entry) != g.get(entry):
                diffs.append(f"{inp} {entry}:\n    was {w.get(entry)}\n    now {g.get(entry)}")
                if len(diffs) >= MAX_DIFFS:
                    break
        if len(diffs) >= MAX_DIFFS:
            break
    assert not diffs, f"{name}: outcomes changed (first {len(diffs)}):\n" + "\n".join(diffs)


@pytest.mark.parametrize("key", sorted(TARGETS))
def test_sample_and_mutants(key: str, tmp_path: Path) -> None:
    _check(key, target_outcomes(key, tmp_path))


def test_attack_cases(tmp_path: Path) -> None:
    got = {}
    for case in test_attacks.CASES:
        folder = tmp_path / case.id
        folder.mkdir()
        got[case.id] = attack_outcomes(case, folder)
    _check("attacks", got)


def test_golden_files_match_the_inputs() -> None:
    """No golden file is left over from a sample that is gone (or was renamed)."""
    names = {p.stem for p in GOLDEN.glob("*.json")}
    assert names == {*TARGETS, "attacks"}


def test_recording_is_deterministic(tmp_path: Path) -> None:
    """Two work folders give the same outcomes (paths never leak into a digest); and the
    recording can fail: one edited byte changes it."""
    key = "mlp_xnnpack.pte"
    t = TARGETS[key]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ra = record(_place(t, tmp_path / "a" / "x", t.data))
    rb = record(_place(t, tmp_path / "b" / "long_folder_name", t.data))
    assert ra == rb and ra["open"] == "pte" and len(ra) > 20
    # the weights' bytes are in the digests: flip one byte of the first stored tensor
    with wb.open(SAMPLES / key) as art:
        row = art.tensors[art.tensors["offset"].notna()].iloc[0]
        at = int(row["offset"])
    data = bytearray(t.data)
    data[at] ^= 0xFF
    rc = record(_place(t, tmp_path / "c", bytes(data)))
    changed = {k for k in ra if ra[k] != rc.get(k)}
    assert changed and all(k.startswith("tensor:") for k in changed), changed
