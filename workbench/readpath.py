"""The read path: the one switch that chooses how the readers read a flatbuffer.

Every flatbuffer reader (``.pte`` programs, ``.ptd`` data, ETDump traces, XNNPACK blobs) has
up to three tiers, fastest first. A faster tier reads the same bytes into the same records;
at the first doubt it raises :class:`~workbench._vecfb.SlowPath` and the next tier down reads
again, so an error is always named by the table-by-table tier. The frames, errors and
findings are the same whichever tier read them.

==============  =========================================================================
tier            what it does
==============  =========================================================================
``BATCHED``     numpy over the tables of many methods (a program's value tables) or of many
                blobs (XNNPACK graphs of one buffer) in one pass
``COLUMNS``     numpy over one vector of tables at a time (a method, a blob, a file)
``TABLES``      table by table with the verifying reader: exact errors and findings
==============  =========================================================================

:data:`TIER` is the switch (the highest tier the readers may use; tests and benchmarks lower it
to compare the tiers), and :data:`SCALAR_INSTRUCTIONS` the one size rule: a method with
fewer instructions is read table by table even when :data:`TIER` allows columns. A reader
takes the choice once, when it starts (:func:`chosen`), and keeps it for its lazy frames.

Example:
    >>> from workbench import readpath
    >>> path = readpath.ReadPath(readpath.Tier.TABLES)
    >>> path.read(lambda: "columns", lambda: "tables")
    'tables'
    >>> readpath.ReadPath(readpath.Tier.BATCHED).read(lambda: "columns", lambda: "tables")
    'columns'
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from ._vecfb import SlowPath

__all__ = ["SCALAR_INSTRUCTIONS", "TIER", "ReadPath", "Tier", "chosen", "using"]

T = TypeVar("T")


class Tier(enum.IntEnum):
    """The read tiers, ordered: a tier allows every tier below it as its fallback.

    Example:
        >>> Tier.BATCHED > Tier.COLUMNS > Tier.TABLES
        True
    """

    #: table by table with the verifying reader (exact errors, findings)
    TABLES = 0
    #: numpy over one vector of tables (one method, one blob, one file)
    COLUMNS = 1
    #: numpy over the tables of many methods or many blobs in one pass
    BATCHED = 2


#: The switch: the highest tier the readers may use (lower it to compare the tiers).
TIER: Tier = Tier.BATCHED
#: A method with fewer instructions than this has them read (and walked) table by table even
#: when :data:`TIER` allows columns: the columnar reader's fixed set-up (~0.3 ms a method)
#: costs more than reading a few tables one by one (break-even measured at 40-80
#: instructions). Tests set it to 0 to read small samples with columns.
SCALAR_INSTRUCTIONS = 64


@dataclass(frozen=True)
class ReadPath:
    """One reader's choice of tier (taken once, by :func:`chosen`, when the reader starts).

    Example:
        >>> ReadPath(Tier.COLUMNS).allows(Tier.BATCHED)
        False
        >>> ReadPath(Tier.COLUMNS).columns_for(10), ReadPath(Tier.COLUMNS).columns_for(100)
        (False, True)
    """

    tier: Tier

    def allows(self, tier: Tier) -> bool:
        """Whether ``tier`` may be tried."""
        return self.tier >= tier

    @property
    def columns(self) -> bool:
        """Whether the columnar tier may be tried (the common question)."""
        return self.tier >= Tier.COLUMNS

    def columns_for(self, instructions: int) -> bool:
        """Whether a method of ``instructions`` instructions is read with columns (see
        :data:`SCALAR_INSTRUCTIONS`)."""
        return self.tier >= Tier.COLUMNS and instructions >= SCALAR_INSTRUCTIONS

    def read(self, fast: Callable[[], T], tables: Callable[[], T],
             tier: Tier = Tier.COLUMNS) -> T:
        """``fast()`` when this path allows ``tier`` and ``fast`` does not raise
        :class:`SlowPath`; else ``tables()`` (the tier below, which names any error)."""
        if self.tier >= tier:
            try:
                return fast()
            except SlowPath:
                pass
        return tables()


def chosen() -> ReadPath:
    """The read path the switch chooses now (a reader calls it once, when it starts).

    Example:
        >>> chosen().tier is TIER
        True
    """
    return ReadPath(TIER)


@contextlib.contextmanager
def using(tier: Tier | str) -> Iterator[None]:
    """Readers started inside the block use at most ``tier`` (a :class:`Tier` or its name).

    Example:
        >>> with using("TABLES"):
        ...     chosen().tier.name
        'TABLES'
        >>> chosen().tier.name
        'BATCHED'
    """
    global TIER
    before = TIER
    TIER = tier if isinstance(tier, Tier) else Tier[tier]
    try:
        yield
    finally:
        TIER = before
