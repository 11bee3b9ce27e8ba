"""Every attack case: the expected ArtifactError (subclass and message) or a correct result,
within a time and memory bound."""

from __future__ import annotations

import time
import tracemalloc

import pytest
from helpers import TIME_SCALE

import workbench as wb

from . import (
    etdump_attacks,
    etrecord_attacks,
    flatbuffer_attacks,
    found_attacks,
    json_attacks,
    pte_attacks,
    zip_attacks,
)
from ._common import SAMPLES, Case, exercise

CASES: list[Case] = [*json_attacks.CASES, *zip_attacks.CASES, *flatbuffer_attacks.CASES,
                     *pte_attacks.CASES, *etdump_attacks.CASES, *etrecord_attacks.CASES,
                     *found_attacks.CASES]
#: Seconds one case may take (every entry point; a hang guard, scaled for runs of mutated
#: code by WORKBENCH_TEST_TIME_SCALE), and bytes of Python/numpy memory beyond twice the
#: file's size.
TIME_LIMIT = 2.0 * TIME_SCALE
MEMORY_SLACK = 64 << 20


def test_enough_cases():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Import everything once (pandas frames, compare) so no case pays for the imports."""
    for name in ("mlp.pt2", "mlp_portable.pte", "mlp_external.ptd", "mlp.bpte",
                 "mlp_portable.etdp", "mlp_portable.etrecord"):
        exercise(SAMPLES / name)


def _run(case: Case, path) -> None:
    """Every entry point over ``path``, with the case's expectation."""
    if case.expect is None:
        art = exercise(path, case.data)
        if case.check is not None:
            case.check(art)
        return
    with pytest.raises(case.expect) as info:
        exercise(path, case.data)
    if case.match is not None:
        assert case.match in str(info.value)
    # the message names the bad file: the artifact, or a data file attached to it
    assert str(info.value).startswith(tuple(f"{n}:" for n in (path.name, *(case.data or ()))))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_attack(case: Case, tmp_path):
    path = case.build(tmp_path)
    size = path.stat().st_size
    t0 = time.perf_counter()
    _run(case, path)
    elapsed = time.perf_counter() - t0
    assert elapsed < TIME_LIMIT, f"{case.id}: {elapsed:.2f} s"
    tracemalloc.start()
    try:
        _run(case, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * size + MEMORY_SLACK, f"{case.id}: {peak / 2**20:.0f} MiB"


def test_coreml_index_depth(tmp_path):
    """A Core ML directory index nested 3,000 deep: a CorruptError naming the depth limit
    (the delegate parser, called directly until the delegate frames are wired in)."""
    from workbench.formats.delegates import inspect_blob

    from .pte_attacks import _coreml_deep_index

    data = _coreml_deep_index(tmp_path).read_bytes()
    with pytest.raises(wb.CorruptError, match="JSON_MAX_DEPTH"):
        inspect_blob(memoryview(data)[1024:], file="x.pte", offset=1024,
                     backend_id="CoreMLBackend")
