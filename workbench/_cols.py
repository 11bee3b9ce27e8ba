"""Columnar helpers: pandas arrays made straight from numpy arrays (private).

Readers of files with tens of thousands of rows keep their records as numpy arrays and hand
:func:`workbench.frames.build` ready pandas arrays made here, instead of Python lists of
per-row objects. Conventions: a missing integer is a ``-1`` in a non-negative column (or an
explicit mask), a missing string is ``None`` in an object array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["align", "booleans", "categorical", "factorized", "filled", "ints", "isin_few", "objects",
           "plain", "strings"]

#: Up to this many items, :func:`isin_few` compares with each (``np.isin`` costs ~25 us a
#: call, a comparison ~1 us on a method's few values).
FEW_ITEMS = 16


def objects(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """A 1-D object array holding ``values`` as they are (tuples stay tuples).

    Example:
        >>> objects([(1, 2), (3,)]).shape
        (2,)
    """
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1:
        return values
    return np.fromiter(values, dtype=object, count=len(values))


def isin_few(values: np.ndarray, items: Sequence[int]) -> np.ndarray:
    """``np.isin(values, items)`` for integer ``values``: up to :data:`FEW_ITEMS` items (a
    method's inputs, outputs, storage codes) are compared one by one.

    Example:
        >>> isin_few(np.array([3, 1, 2]), (1, 3)).tolist()
        [True, True, False]
    """
    if len(items) > FEW_ITEMS:
        return np.isin(values, np.asarray(items, np.int64))
    out = np.zeros(len(values), bool)
    for x in items:
        out |= values == int(x)
    return out


def filled(n: int, value: Any) -> np.ndarray:
    """An object array of ``n`` references to ONE ``value`` (``np.full`` would make a new
    Python string per element).

    Example:
        >>> a = filled(3, "x"); a[0] is a[2]
        True
    """
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def strings(values: np.ndarray | Sequence[str | None]) -> Any:
    """A pandas ``string`` array; ``None`` becomes ``<NA>``.

    Example:
        >>> strings(["a", None]).isna().tolist()
        [False, True]
    """

    # a private copy: StringArray keeps the array and turns None into <NA> in place
    arr = np.array(values, dtype=object)
    return string_array(arr)


def string_array(arr: np.ndarray) -> Any:
    """``pd.arrays.StringArray(arr)`` (an object array of ``str`` / ``None``, taken over) with a
    dtype that says what it is: python storage. (pandas 3 gives a bare ``StringArray`` the
    default ``pyarrow`` dtype; ``Series.isin`` on it then fails with a bare AssertionError.)

    Example:
        >>> import pandas as pd
        >>> pd.Series(string_array(np.array(["a", None], dtype=object))).isin(["a"]).tolist()
        [True, False]
    """
    import pandas as pd

    try:
        return pd.arrays.StringArray(arr, dtype=pd.StringDtype("python"))
    except TypeError:  # pandas < 3: no dtype argument; python storage is what it builds
        return pd.arrays.StringArray(arr)


def ints(values: np.ndarray, missing: np.ndarray | None = None) -> Any:
    """A pandas ``Int64`` array from int64 ``values`` and a boolean ``missing`` mask.

    Example:
        >>> ints(np.array([4, -1]), np.array([False, True])).tolist()
        [4, <NA>]
    """
    import pandas as pd

    values = np.asarray(values, dtype=np.int64)
    if missing is None:
        missing = np.zeros(len(values), bool)
    return pd.arrays.IntegerArray(np.where(missing, 0, values), np.asarray(missing, bool))


def booleans(values: np.ndarray, missing: np.ndarray | None = None) -> Any:
    """A pandas ``boolean`` array from ``values`` and a ``missing`` mask.

    Example:
        >>> booleans(np.array([True, True]), np.array([False, True])).tolist()
        [True, <NA>]
    """
    import pandas as pd

    values = np.asarray(values, dtype=bool)
    if missing is None:
        missing = np.zeros(len(values), bool)
    return pd.arrays.BooleanArray(values & ~missing, np.asarray(missing, bool))


def align(offsets: np.ndarray, missing: np.ndarray | None = None) -> Any:
    """``Int64`` column: the largest power of two dividing each offset (``<NA>`` for 0 or
    missing offsets).

    Example:
        >>> align(np.array([0x1f00, 48, 0])).tolist()
        [256, 16, <NA>]
    """
    off = np.asarray(offsets, dtype=np.int64)
    bad = off <= 0
    if missing is not None:
        bad |= missing
    return ints(off & -off, bad)


def categorical(codes: np.ndarray, names: Sequence[str]) -> Any:
    """A ``category`` column from integer ``codes`` into ``names`` (``-1``: missing).

    The categories are the names that occur, in order of first appearance (as
    ``pandas.factorize`` would give them).

    Example:
        >>> categorical(np.array([2, 0, 2, -1]), ["a", "b", "c"]).categories.tolist()
        ['c', 'a']
    """
    import pandas as pd

    codes = np.asarray(codes, dtype=np.int64)
    n = len(codes)
    lo = int(codes.min()) if n else -1
    valid = codes >= 0 if lo < 0 else None
    hi = int(codes.max()) if n else -1
    if hi < 0:
        return pd.Categorical.from_codes(np.full(n, -1, np.int8), dtype=_dtype(()),
                                         validate=False)
    if hi < 4096:  # small codes: which occur, and where each occurs first
        present = np.flatnonzero(np.bincount(codes[valid] if valid is not None else codes))
        if len(present) > 1:
            firsts = [int(np.argmax(codes == c)) for c in present.tolist()]
            present = present[np.argsort(firsts, kind="stable")]
        uniq = present
    else:
        uniq = pd.unique(codes[valid] if valid is not None else codes)
    lut = np.full(int(uniq.max()) + 1, -1, dtype=np.int64)
    index: dict[str, int] = {}  # codes with the same name share one category
    for u in uniq.tolist():
        lut[u] = index.setdefault(names[u], len(index))
    new = lut[codes] if valid is None else np.where(valid, lut[np.maximum(codes, 0)], -1)
    return pd.Categorical.from_codes(new.astype(np.int32), dtype=_dtype(tuple(index)),
                                     validate=False)


_DTYPES: dict[tuple[str, ...], Any] = {}


def _dtype(categories: tuple[str, ...]) -> Any:
    """A (cached) unordered CategoricalDtype: building its categories index is not free."""
    dt = _DTYPES.get(categories)
    if dt is None:
        import pandas as pd

        if len(_DTYPES) >= 64:  # bounded: fuzzed names must not pile up dtypes
            _DTYPES.clear()
        dt = _DTYPES[categories] = pd.CategoricalDtype(list(categories))
    return dt


def factorized(values: np.ndarray | Sequence[str | None]) -> Any:
    """A ``category`` column from strings (``None``: missing), categories in order of
    appearance.

    Example:
        >>> factorized(np.array(["b", "a", "b"], dtype=object)).categories.tolist()
        ['b', 'a']
    """
    import pandas as pd

    codes, uniques = pd.factorize(np.asarray(values, dtype=object))  # None: missing (-1)
    return pd.Categorical.from_codes(codes, dtype=_dtype(tuple(uniques.tolist())), validate=False)


def plain(column: Any) -> list:
    """A column as a Python list with ``None`` for missing values (lists pass through).

    Example:
        >>> plain(ints(np.array([1, 2]), np.array([False, True])))
        [1, None]
    """
    if isinstance(column, list):
        return column
    if isinstance(column, np.ndarray):
        return column.tolist()
    return column.to_numpy(dtype=object, na_value=None).tolist()


def missing(v: Any) -> bool:
    """A missing cell: None, NaN or pandas' NA (whose truth value raises).

    Example:
        >>> missing(None), missing(float("nan")), missing("a")
        (True, True, False)
    """
    if v is None:
        return True
    try:
        return bool(v != v)
    except TypeError:  # pandas.NA
        return True
