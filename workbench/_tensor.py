"""One row of a tensor frame -> its bytes as an array: the steps behind
:meth:`workbench.Artifact.tensor`.

This module owns how a tensor's stored bytes become a numpy array or a torch tensor, in
named steps that each do one thing:

1. :func:`no_bytes_error` — a row without stored bytes: the error that says why (planned,
   external and not attached, a pickle, a compressed zip member).
2. :func:`place` — where the bytes are and how they are laid out (:class:`Placement`:
   dtype, logical and physical shape, strides, the span of elements touched), every field
   checked against the file before anything is read.
3. :func:`read` — a read-only view of the map (after one freshness check of the file), or
   a private copy read through the file descriptor (a truncated file is a short read, never
   a ``SIGBUS``); numpy for the dtypes numpy has, torch for the rest (``bfloat16``, float8).

It knows tensor frames' columns and :class:`~workbench.source.Source`; it never parses a
format.

Example:
    >>> import workbench as wb
    >>> from workbench import _tensor
    >>> art = wb.open("sample_models/mlp_portable.pte")                 # doctest: +SKIP
    >>> cols = art.columns("tensors")                                    # doctest: +SKIP
    >>> p = _tensor.place(cols, 0, art.sources[cols["file"][0]])         # doctest: +SKIP
    >>> _tensor.read(p, art.sources[p.file], copy=False).shape           # doctest: +SKIP
    (32, 16)
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

from .dtypes import BY_NAME
from .errors import (
    ArtifactError,
    CorruptError,
    MissingDataError,
    OutOfBoundsError,
    UnsafeContentError,
)

if TYPE_CHECKING:
    from .dtypes import DType
    from .source import Source

__all__ = ["Placement", "no_bytes_error", "place", "read"]


class Placement(NamedTuple):
    """Where one tensor's bytes are and how to look at them (checked by :func:`place`).

    Example:
        >>> from workbench.dtypes import BY_NAME
        >>> p = Placement("w", "m.pte", 64, BY_NAME["float32"], (2, 3), (2, 3), (0, 1), None, 6)
        >>> p.span * p.dt.itemsize
        24
    """

    name: str
    file: str
    offset: int
    dt: DType
    #: the logical shape (packed 4-bit data: the shape of its bytes)
    shape: tuple[int, ...]
    #: the shape in memory order (``dim_order`` applied)
    physical: tuple[int, ...]
    #: the permutation from the physical back to the logical order
    inverse: tuple[int, ...]
    #: element strides, when the row has them (``.pt2``), else ``None``
    strides: tuple[int, ...] | None
    #: elements from the first to the last one the view touches
    span: int


def no_bytes_error(path: str, data_files: list[str], cols: dict[str, list], i: int
                   ) -> ArtifactError:
    """The error for row ``i`` of a tensor frame that has no stored bytes (no ``file`` or no
    ``offset``): why not, in the words of its storage.

    Example:
        >>> cols = {"name": ["x"], "storage": ["planned"], "file": [None], "offset": [None]}
        >>> no_bytes_error("m.pte", [], cols, 0).args[0]
        "m.pte: tensor 'x': tensor 'x' has no stored bytes (storage: planned)"
    """
    name = cols["name"][i]
    storage = cols["storage"][i] if "storage" in cols else "unknown"
    if "pickled" in cols and cols["pickled"][i]:
        return UnsafeContentError(
            f"tensor {name!r} is stored as a pickle; the workbench never unpickles "
            "(torch.export.load would run code from the file)",
            file=path, structure=f"tensor {name!r}")
    if storage == "external":
        where = (f"in the data files {data_files}" if data_files
                 else "(no .ptd data file attached)")
        detail = f"external tensor {name!r} was not found {where}; pass data=[...] to open()"
    elif storage == "compressed":
        detail = (f"tensor {name!r} lives in a compressed zip member: no zero-copy view "
                  "exists, and the workbench never inflates members")
    else:
        detail = f"tensor {name!r} has no stored bytes (storage: {storage})"
    return MissingDataError(detail, file=path, structure=f"tensor {name!r}")


def _dtype_and_shape(cols: dict[str, list], i: int
                     ) -> tuple[DType | None, tuple[int, ...], tuple[int, ...]]:
    """(dtype, shape, dim_order) of row ``i`` as stored: packed 4-bit data is read as the
    ``uint8`` bytes it is, two values per byte along the last dimension."""
    shape = tuple(cols["shape"][i])
    dim_order = tuple(cols["dim_order"][i]) if "dim_order" in cols else tuple(range(len(shape)))
    dt = BY_NAME.get(cols["dtype"][i])
    if cols["dtype"][i] == "int4" and shape:  # packed: the stored bytes, as they are
        dt = BY_NAME["uint8"]
        shape = (*shape[:-1], (shape[-1] + 1) // 2)
        dim_order = tuple(range(len(shape)))
    return dt, shape, dim_order


def place(cols: dict[str, list], i: int, src: Source) -> Placement:
    """Where row ``i``'s bytes are in ``src`` and how they are laid out, checked: a known
    dtype, a non-negative offset, strides that fit the shape, and every byte the view
    touches inside the file. A ``dim_order`` that is not a permutation is ignored.

    Raises:
        OutOfBoundsError: a negative offset, or bytes past the end of the file.
        ArtifactError: strides that do not fit the shape.

    Example:
        >>> cols = art.columns("tensors")                              # doctest: +SKIP
        >>> place(cols, 0, art.sources[cols["file"][0]]).physical      # doctest: +SKIP
        (32, 16)
    """
    name, offset, file = cols["name"][i], cols["offset"][i], cols["file"][i]
    nbytes = cols["nbytes"][i]
    dt, shape, dim_order = _dtype_and_shape(cols, i)
    if dt is None:  # pragma: no cover - readers only emit known dtypes
        raise ArtifactError(f"dtype {cols['dtype'][i]!r} is unknown", file=file)
    if offset < 0:
        raise OutOfBoundsError(f"tensor {name!r} has a negative offset", file=file,
                               structure=f"tensor {name!r}", offset=offset)
    if len(dim_order) != len(shape) or sorted(dim_order) != list(range(len(shape))):
        dim_order = tuple(range(len(shape)))
    strides = cols["strides"][i] if "strides" in cols else None
    if strides is not None:
        strides = tuple(strides)
        if len(strides) != len(shape) or any(st < 0 for st in strides):
            raise ArtifactError(f"strides {list(strides)} do not fit shape {list(shape)}",
                                file=file, structure=f"tensor {name!r}", offset=offset)
        # elements the strided view touches, from its first to its last
        span = 0 if 0 in shape else 1 + sum((d - 1) * st for d, st in zip(shape, strides))
    else:
        span = nbytes // dt.itemsize if dt.itemsize else 0
    if offset + span * dt.itemsize > src.size:
        raise OutOfBoundsError(
            f"{span * dt.itemsize} bytes of tensor {name!r} run past the end of the file "
            f"(size 0x{src.size:x})", file=file, structure=f"tensor {name!r}", offset=offset)
    physical = tuple(shape[d] for d in dim_order)
    inverse = tuple(dim_order.index(k) for k in range(len(shape)))
    return Placement(name, file, offset, dt, shape, physical, inverse, strides, span)


def read(p: Placement, src: Source, copy: bool) -> Any:
    """The tensor at ``p``: a read-only view of ``src``'s map (the file's identity checked
    first), or with ``copy`` a private, writable copy read through the file descriptor.

    Example:
        >>> read(place(cols, 0, src), src, copy=True).flags.writeable   # doctest: +SKIP
        True
    """
    if p.span == 0:
        return empty(p.shape, p.dt, copy, p.file, p.name, p.offset)
    what = f"tensor {p.name!r}"
    raw = None
    if copy:  # through the descriptor: a truncation is a short read, not a fault
        import numpy as np

        raw = src.readinto(p.offset, np.empty(p.span * p.dt.itemsize, np.uint8), what)
    else:
        src.ensure_fresh(what)
    plain = p.strides is None and p.inverse == tuple(range(len(p.shape)))
    if p.dt.numpy is not None:
        return _as_numpy(p, src, raw, plain, copy)
    return _as_torch(p, src, raw, plain, copy)


def _as_numpy(p: Placement, src: Source, raw: Any, plain: bool, copy: bool) -> Any:
    """A numpy array over ``raw`` (a private copy) or over the map."""
    import numpy as np

    if raw is not None:
        base = raw.view(p.dt.numpy)
        if plain:
            return base.reshape(p.shape)  # already private and writable
    else:
        base = np.frombuffer(src.buf, dtype=p.dt.numpy, count=p.span, offset=p.offset)
    if p.strides is not None:
        arr = np.lib.stride_tricks.as_strided(
            base, p.shape, tuple(st * p.dt.itemsize for st in p.strides), writeable=False)
    else:
        arr = base.reshape(p.physical).transpose(p.inverse)
    return arr.copy() if copy else arr


def _as_torch(p: Placement, src: Source, raw: Any, plain: bool, copy: bool) -> Any:
    """A torch tensor (dtypes numpy lacks) over ``raw`` (a private copy) or over the map."""
    import torch

    tdtype = getattr(torch, p.dt.name, None)
    if tdtype is None:
        raise ArtifactError(f"dtype {p.dt.name} cannot be viewed with this torch",
                            file=p.file, structure=f"tensor {p.name!r}", offset=p.offset)
    if raw is not None:
        base = torch.from_numpy(raw).view(tdtype)
        if plain:
            return base.reshape(p.shape)  # already private and writable
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not writable.*")
            base = torch.frombuffer(src.buf, dtype=torch.uint8, count=p.span * p.dt.itemsize,
                                    offset=p.offset).view(tdtype)
    if p.strides is not None:
        t = base.as_strided(p.shape, p.strides)
    else:
        t = base.reshape(p.physical).permute(p.inverse)
    return t.clone() if copy else t


def empty(shape: tuple, dt: DType, copy: bool, file: str, name: str, offset: int) -> Any:
    """A zero-element tensor of ``shape`` (other dimensions may still be huge).

    Example:
        >>> from workbench.dtypes import BY_NAME
        >>> empty((0, 4), BY_NAME["float32"], False, "m.pte", "x", 0).shape
        (0, 4)
    """
    try:
        if dt.numpy is not None:
            import numpy as np

            arr = np.empty(shape, dtype=dt.numpy)
            arr.flags.writeable = copy
            return arr
        import torch

        return torch.empty(shape, dtype=getattr(torch, dt.name))
    except (ValueError, RuntimeError, OverflowError, AttributeError) as e:
        raise CorruptError(f"shape {list(shape)} cannot be represented ({e})", file=file,
                           structure=f"tensor {name!r}", offset=offset) from None
