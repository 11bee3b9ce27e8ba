"""Quantized delegate tensors back to float32 (per-channel int8/int4, groupwise int4, ...).

:func:`dequantize` takes the stored bytes of one tensor, its ``delegate_tensors`` row (or
any mapping with the same keys) and the bytes of its scales, and returns float32 values in
the tensor's logical shape. It reads what XNNPACK stores:

* ``per_tensor`` (``qint8``, ``quint8``, ``qint32``): ``(q - zero_point) * scale``;
* ``per_channel`` (``qcint8``, ``qcint32``, ``qcint4``): ``q * scale[c]`` along
  ``channel_dim``, float32 scales;
* ``per_channel_group`` (``qbint4``): ``q * scale[row, col // group_size]``, bfloat16
  scales (``num_scales = rows x ceil(cols / group_size)``);
* 4-bit values are packed two per byte along the last dimension, low nibble first, each
  stored as ``q + 8`` (odd rows are padded with one nibble);
* unquantized ``float32`` / ``float16`` / ``bfloat16`` tensors are converted as they are.

Anything else (dynamically quantized activations, which have no stored bytes; an unknown
type; scales that do not fit the shape) raises :class:`UnsupportedQuantizationError` or
:class:`~workbench.errors.CorruptError`, naming the tensor. Nothing larger than the
result is allocated, and the result's size is checked against the bytes given first.

Example:
    >>> import numpy as np
    >>> row = {"backend_dtype": "qcint8", "dtype": "int8", "shape": (2, 2),
    ...        "quant": "per_channel", "channel_dim": 0, "scale_dtype": "float32"}
    >>> q = np.array([[1, -2], [3, 4]], np.int8)
    >>> dequantize(q.tobytes(), row, np.array([0.5, 2.0], np.float32).tobytes()).tolist()
    [[0.5, -1.0], [6.0, 8.0]]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import ArtifactError, CorruptError
from .xnnpack.schema import INT4_ZERO_POINT as _INT4_ZERO_POINT

__all__ = ["NonFiniteScalesWarning", "UnsupportedQuantizationError", "dequantize",
           "scale_values", "unpack_int4"]

#: element numpy dtype of the stored values, by backend dtype name (XNNPACK names) or
#: torch dtype name.
_STORED = {
    "fp32": "<f4", "pfp32": "<f4", "float32": "<f4", "fp16": "<f2", "float16": "<f2",
    "bf16": "bf16", "bfloat16": "bf16", "qint8": "|i1", "qcint8": "|i1", "int8": "|i1",
    "quint8": "|u1", "uint8": "|u1", "qint32": "<i4", "qcint32": "<i4", "int32": "<i4",
    "qcint4": "int4", "qbint4": "int4", "int4": "int4",
}


class UnsupportedQuantizationError(ArtifactError):
    """The tensor's quantization (or lack of stored bytes) cannot be turned into floats."""


class NonFiniteScalesWarning(UserWarning):
    """Some quantization scales of a dequantized tensor are NaN or infinite: the values they
    scale are NaN or infinite (``validate()`` reports the same as a finding)."""


def _check_finite(s: np.ndarray, where: dict) -> None:
    """Warn, naming the tensor, when scales ``s`` are not all finite."""
    bad = ~np.isfinite(s)
    if bad.any():
        import warnings

        at = f" at 0x{where['offset']:x}" if where.get("offset") is not None else ""
        file = f"{where['file']}: " if where.get("file") else ""
        warnings.warn(f"{file}{where['structure']}{at}: {int(bad.sum())} of {s.size} scales are "
                      "NaN or infinite; the values they scale dequantize to NaN or infinity",
                      NonFiniteScalesWarning, stacklevel=3)


def _get(row: Mapping[str, Any] | Any, key: str, default: Any = None) -> Any:
    try:
        v = row[key]
    except (KeyError, IndexError, TypeError):
        return default
    if v is None or (isinstance(v, float) and math.isnan(v)) or type(v).__name__ == "NAType":
        return default
    return v


def _bf16(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32)


def unpack_int4(data: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Signed 4-bit values (int8 array of ``shape``) from XNNPACK's packed bytes: rows of
    ``ceil(shape[-1] / 2)`` bytes, low nibble first, each nibble ``q + 8``.

    Example:
        >>> unpack_int4(bytes([0x9F, 0x08]), (1, 3)).tolist()
        [[7, 1, 0]]
    """
    cols = shape[-1] if shape else 1
    rows = math.prod(shape[:-1]) if shape else 1
    per_row = (cols + 1) // 2
    raw = np.frombuffer(data, np.uint8, rows * per_row).reshape(rows, per_row)
    out = np.empty((rows, per_row * 2), np.int8)
    out[:, 0::2] = (raw & 0x0F).astype(np.int8) - _INT4_ZERO_POINT
    out[:, 1::2] = (raw >> 4).astype(np.int8) - _INT4_ZERO_POINT
    return out[:, :cols].reshape(shape)


def dequantize(data: Any, row: Mapping[str, Any] | Any, scales: Any = None) -> np.ndarray:
    """Float32 values of one stored delegate tensor.

    Args:
        data: the tensor's stored bytes (buffer: ``bytes``, ``memoryview``, numpy array),
            at least ``row["nbytes"]`` long (4-bit: packed).
        row: its ``delegate_tensors`` row (a pandas Series or mapping) with ``shape``,
            ``backend_dtype`` (or ``dtype``), ``quant``, ``channel_dim``, ``group_size``,
            ``scale``/``zero_point`` (per tensor), ``scale_dtype`` and, for messages,
            ``name``/``file``/``offset``.
        scales: the bytes of the scales (``scale_file``/``scale_offset``/``scale_nbytes``)
            for per-channel and groupwise quantization.

    Returns:
        A new float32 array of the tensor's logical shape.

    Raises:
        UnsupportedQuantizationError: no stored values or a quantization not handled here.
        CorruptError: the bytes or scales are too short or do not fit the shape.

    Example:
        >>> row = {"backend_dtype": "qbint4", "shape": (1, 4), "quant": "per_channel_group",
        ...        "channel_dim": 0, "group_size": 2, "scale_dtype": "bfloat16"}
        >>> s = np.array([0x3F80, 0x4000], np.uint16).tobytes()   # bf16 1.0, 2.0
        >>> dequantize(bytes([0x79, 0x8A]), row, s).tolist()      # 1, -1, 4, 0
        [[1.0, -1.0, 4.0, 0.0]]
    """
    name = _get(row, "name", "tensor")
    where = {"file": _get(row, "file"), "structure": f"delegate tensor {name}",
             "offset": _get(row, "offset")}
    if where["offset"] is not None:
        where["offset"] = int(where["offset"])
    shape = tuple(int(d) for d in (_get(row, "shape") or ()))
    kind = str(_get(row, "backend_dtype") or _get(row, "dtype") or "")
    quant = str(_get(row, "quant") or "none")
    stored = _STORED.get(kind)
    if stored is None or quant == "per_token_dynamic" or kind in ("qdint8", "qpint8"):
        raise UnsupportedQuantizationError(
            f"cannot dequantize {kind or 'an untyped'} tensor with {quant} quantization"
            + (" (dynamically quantized: no stored values)" if quant == "per_token_dynamic"
               else ""), **where)
    numel = math.prod(shape)
    buf = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else \
        memoryview(np.ascontiguousarray(data).view(np.uint8).reshape(-1))
    if stored == "int4":
        per_row = ((shape[-1] if shape else 1) + 1) // 2
        need = (numel // max(shape[-1], 1) if shape else 1) * per_row
    else:
        need = numel * (2 if stored == "bf16" else np.dtype(stored).itemsize)
    if len(buf) < need:
        raise CorruptError(f"{len(buf)} bytes given, the {kind} tensor of shape {list(shape)} "
                           f"needs {need}", **where)
    if stored == "int4":
        q = unpack_int4(buf[:need], shape).astype(np.float32)
    elif stored == "bf16":
        q = _bf16(np.frombuffer(buf, np.uint16, numel)).reshape(shape)
    else:
        q = np.frombuffer(buf, np.dtype(stored), numel).reshape(shape).astype(np.float32)
    if quant == "none":
        if kind in ("fp32", "pfp32", "float32", "fp16", "float16", "bf16", "bfloat16"):
            return np.array(q, np.float32)
        raise UnsupportedQuantizationError(f"{kind} tensor has no quantization parameters",
                                           **where)
    if quant == "per_tensor":
        scale = _get(row, "scale")
        if scale is None:
            raise CorruptError("per-tensor quantization without a scale", **where)
        _check_finite(np.array([scale], np.float64), where)
        with np.errstate(invalid="ignore", over="ignore"):
            return ((q - float(_get(row, "zero_point", 0))) * np.float32(scale)).astype(
                np.float32)
    if quant not in ("per_channel", "per_channel_group"):
        raise UnsupportedQuantizationError(f"quantization {quant!r} is not handled", **where)
    s = _scales(scales, _get(row, "scale_dtype") or "float32", where)
    _check_finite(s, where)
    cd = int(_get(row, "channel_dim", 0))
    if not shape or not 0 <= cd < len(shape):
        raise CorruptError(f"channel_dim {cd} is not a dimension of shape {list(shape)}", **where)
    if quant == "per_channel":
        if len(s) != shape[cd]:
            raise CorruptError(f"{len(s)} scales for {shape[cd]} channels (dim {cd} of "
                               f"{list(shape)})", **where)
        bshape = [1] * len(shape)
        bshape[cd] = shape[cd]
        with np.errstate(invalid="ignore", over="ignore"):
            return (q * s.reshape(bshape)).astype(np.float32)
    gs = int(_get(row, "group_size", 0))
    if len(shape) != 2 or cd != 0 or gs <= 0:
        raise UnsupportedQuantizationError(
            f"groupwise quantization of shape {list(shape)} with channel_dim {cd} and group "
            f"size {gs} is not handled (expected 2-D weights, channel_dim 0)", **where)
    rows, cols = shape
    groups = -(-cols // gs)
    if len(s) != rows * groups:
        raise CorruptError(f"{len(s)} scales for {rows} rows x {groups} groups of {gs}",
                           **where)
    per_col = np.repeat(s.reshape(rows, groups), gs, axis=1)[:, :cols]
    with np.errstate(invalid="ignore", over="ignore"):
        return (q * per_col).astype(np.float32)


def scale_values(raw: Any, dtype: str) -> np.ndarray | None:
    """The scales in the bytes ``raw`` as float32 (``None``: a scale dtype not handled).

    Example:
        >>> scale_values(np.array([0x3F80, 0x7FC0], np.uint16).tobytes(), "bfloat16").tolist()
        [1.0, nan]
    """
    buf = memoryview(raw).cast("B") if not isinstance(raw, np.ndarray) else \
        memoryview(np.ascontiguousarray(raw).view(np.uint8).reshape(-1))
    if dtype == "bfloat16":
        return _bf16(np.frombuffer(buf, np.uint16, len(buf) // 2))
    if dtype == "float32":
        return np.frombuffer(buf, np.float32, len(buf) // 4)
    return None


def _scales(scales: Any, dtype: str, where: dict) -> np.ndarray:
    if scales is None:
        raise UnsupportedQuantizationError("per-channel quantization needs the scale bytes "
                                           "(scale_file / scale_offset)", **where)
    values = scale_values(scales, dtype)
    if values is None:
        raise UnsupportedQuantizationError(f"scale dtype {dtype!r} is not handled", **where)
    return values
