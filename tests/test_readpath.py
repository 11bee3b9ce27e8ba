"""The read-path switch (workbench.readpath): which tier a reader tries, and what it falls
back to."""

from __future__ import annotations

import pytest

from workbench import readpath
from workbench._vecfb import SlowPath
from workbench.readpath import ReadPath, Tier


def _fast_that(raises: BaseException | None, calls: list[str]):
    def fast():
        calls.append("fast")
        if raises is not None:
            raise raises
        return "fast"
    return fast


def _tables(calls: list[str]):
    def tables():
        calls.append("tables")
        return "tables"
    return tables


@pytest.mark.parametrize("tier", list(Tier))
def test_read_tries_the_fast_tier_only_where_allowed(tier):
    for needs in Tier:
        calls: list[str] = []
        got = ReadPath(tier).read(_fast_that(None, calls), _tables(calls), needs)
        allowed = tier >= needs
        assert got == ("fast" if allowed else "tables")
        assert calls == (["fast"] if allowed else ["tables"])
        assert ReadPath(tier).allows(needs) is allowed


def test_read_falls_back_on_slowpath_only():
    calls: list[str] = []
    assert ReadPath(Tier.BATCHED).read(_fast_that(SlowPath("doubt"), calls),
                                       _tables(calls)) == "tables"
    assert calls == ["fast", "tables"]
    with pytest.raises(ValueError):  # any other error is the reader's to report
        ReadPath(Tier.BATCHED).read(_fast_that(ValueError("bad"), []), _tables([]))


def test_columns_for_uses_the_size_rule(monkeypatch):
    monkeypatch.setattr(readpath, "SCALAR_INSTRUCTIONS", 10)
    assert [ReadPath(Tier.COLUMNS).columns_for(n) for n in (9, 10, 11)] == [False, True, True]
    assert not ReadPath(Tier.TABLES).columns_for(1000)
    assert ReadPath(Tier.COLUMNS).columns and not ReadPath(Tier.TABLES).columns


def test_chosen_follows_the_switch_and_using_restores_it(monkeypatch):
    monkeypatch.setattr(readpath, "TIER", Tier.COLUMNS)
    assert readpath.chosen() == ReadPath(Tier.COLUMNS)
    with readpath.using("TABLES"):
        assert readpath.chosen().tier is Tier.TABLES
        with readpath.using(Tier.BATCHED):
            assert readpath.chosen().tier is Tier.BATCHED
        assert readpath.chosen().tier is Tier.TABLES
    assert readpath.TIER is Tier.COLUMNS
    with pytest.raises(RuntimeError), readpath.using(Tier.TABLES):
        raise RuntimeError
    assert readpath.TIER is Tier.COLUMNS
    with pytest.raises(KeyError):
        with readpath.using("FAST"):
            pass
    assert readpath.TIER is Tier.COLUMNS


@pytest.mark.production_thresholds
def test_the_shipped_switch_allows_every_tier():
    assert readpath.TIER is Tier.BATCHED and readpath.SCALAR_INSTRUCTIONS > 0
