"""The .pte reader's vectorised fast path and its scalar verifying path agree: same frames on
every sample, and on seeded mutants the same verdict (error or not) and the same frames."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import pandas as pd
import pytest
from helpers import deadline, mutate, program_size, read_tier

import workbench as wb
from workbench import readpath

SAMPLES = Path(__file__).resolve().parents[1] / "sample_models"
PTE_VARIANTS = True  # pte_path: the samples and the layout variants (not in slow tests)


def outcome(path, fast: bool, monkeypatch) -> tuple[str, dict | str]:
    """``("ok", frames)`` or ``("error", class name)``; other exceptions propagate."""
    monkeypatch.setattr(readpath, "TIER", read_tier(fast))
    try:
        with deadline(10):
            art = wb.open(path, data=[])
            try:
                frames = {name: art.frames[name] for name in art.frames}
            finally:
                art.close()
    except wb.ArtifactError as e:
        return "error", type(e).__name__
    return "ok", frames


def assert_same_frames(a: dict, b: dict, what: str) -> None:
    assert list(a) == list(b), what
    for name in a:
        try:
            pd.testing.assert_frame_equal(a[name], b[name], check_exact=True)
        except AssertionError as e:
            raise AssertionError(f"{what}: frame {name!r} differs between paths: {e}") from None


def test_fast_and_scalar_paths_agree_on_samples(pte_path, monkeypatch):
    fast = outcome(pte_path, True, monkeypatch)
    slow = outcome(pte_path, False, monkeypatch)
    assert fast[0] == slow[0] == "ok", (fast[0], slow[0])
    assert_same_frames(fast[1], slow[1], pte_path.name)


MUTANTS = 60


@pytest.mark.slow
def test_fast_and_scalar_paths_agree_on_mutants(pte_path, tmp_path, monkeypatch):
    data = pte_path.read_bytes()
    rng = random.Random(zlib.crc32(b"paths:" + pte_path.name.encode()))
    target = tmp_path / "mutant.pte"
    problems = []
    for i in range(MUTANTS):
        desc, mutant = mutate(data, rng, program_size(data))
        target.write_bytes(mutant)
        fast = outcome(target, True, monkeypatch)
        slow = outcome(target, False, monkeypatch)
        if fast[0] != slow[0]:
            problems.append(f"mutant {i} ({desc}): fast path {fast[0]} {'' if fast[0] == 'ok' else fast[1]}"
                            f", scalar path {slow[0]} {'' if slow[0] == 'ok' else slow[1]}")
        elif fast[0] == "ok":
            try:
                assert_same_frames(fast[1], slow[1], f"mutant {i} ({desc})")
            except AssertionError as e:
                problems.append(str(e)[:300])
    assert not problems, "\n".join(problems[:10])


# -- the instruction walk: vectorised (formats/pte/instructions._Walk) and per instruction ------

INSTRUCTION_FRAMES = ("instructions", "lifetimes", "memory_efficiency")


def instruction_frames(path, vectorised: bool, monkeypatch) -> dict:
    """The instruction frames with the vectorised walk on or off (the reading is the same)."""
    from workbench.formats.pte import instructions

    with monkeypatch.context() as m:
        if not vectorised:
            m.setattr(instructions.InstructionColumns, "_walk", lambda self, mi: None)
        art = wb.open(path, data=[])
        try:
            frames = {name: art.frames[name] for name in INSTRUCTION_FRAMES}
            cols = art._parsed.builders["instructions"].__self__
            walked = [cols._walk(k) is not None for k in range(len(cols.r.methods))]
        finally:
            art.close()
    return {"frames": frames, "walked": walked}


def test_instruction_walk_vectorised_equals_per_instruction(pte_path, monkeypatch):
    """Every sample and layout variant: the vectorised walk is taken and gives the frames of
    the per-instruction walk, exactly."""
    fast = instruction_frames(pte_path, True, monkeypatch)
    slow = instruction_frames(pte_path, False, monkeypatch)
    assert all(fast["walked"]), f"{pte_path.name}: a method fell back to the scalar walk"
    assert not any(slow["walked"])
    assert_same_frames(fast["frames"], slow["frames"], pte_path.name)


@pytest.mark.production_thresholds
def test_methods_below_the_threshold_take_the_scalar_instruction_readers(monkeypatch):
    """``readpath.SCALAR_INSTRUCTIONS``: a method with fewer instructions is read and walked by
    the scalar readers (cheaper for a few rows), one with as many by the vectorised ones; the
    frames are the same either way."""
    from workbench.formats.pte import instructions, program

    path = SAMPLES / "kv_cache.pte"
    with wb.open(path, data=[]) as art:
        count = int(art.frames["methods"]["instructions"].max())
    assert 0 < count < readpath.SCALAR_INSTRUCTIONS  # the shipped value takes the scalar path

    def read(threshold):
        calls = []

        def spy(name, f):
            def wrapper(*a, **k):
                calls.append(name)
                return f(*a, **k)
            return wrapper

        with monkeypatch.context() as m:
            m.setattr(readpath, "SCALAR_INSTRUCTIONS", threshold)
            m.setattr(program.ProgramReader, "_instructions_slow",
                      spy("open", program.ProgramReader._instructions_slow))
            m.setattr(instructions, "_slow", spy("records", instructions._slow))
            m.setattr(instructions.InstructionColumns, "_rw_method",
                      spy("walk", instructions.InstructionColumns._rw_method))
            with wb.open(path, data=[]) as art:
                frames = {n: art.frames[n] for n in ("methods", *INSTRUCTION_FRAMES)}
        return sorted(set(calls)), frames

    shipped, frames = read(readpath.SCALAR_INSTRUCTIONS)
    assert shipped == ["open", "records", "walk"]
    at, frames_at = read(count)  # as many instructions as the threshold: vectorised
    assert at == []
    above, frames_above = read(count + 1)
    assert above == ["open", "records", "walk"]
    assert_same_frames(frames, frames_at, "threshold at the count")
    assert_same_frames(frames, frames_above, "threshold above the count")

