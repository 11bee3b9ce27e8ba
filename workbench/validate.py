"""``Artifact.validate()``: everything noticeably wrong or unusual about an artifact, at once.

``open`` raises only for what makes reading impossible; ``validate`` lists every finding —
problems the reader noted while parsing plus checks over the frames — as a frame with
``severity`` (``error`` | ``warning`` | ``info``), ``structure``, ``offset`` and ``message``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .errors import Finding

if TYPE_CHECKING:
    import pandas as pd

    from .artifact import Artifact
    from .formats.parsed import Extra

__all__ = ["validate"]

#: ExecuTorch aligns constant tensor data to this many bytes (schema: @executorch-tensor-alignment).
TENSOR_ALIGNMENT = 16


def validate(art: Artifact, extra: Extra | None = None) -> pd.DataFrame:
    """Run every check on ``art``; returns the findings frame (empty when all is well).

    Args:
        art: the opened artifact.
        extra: the reader's format-specific facts (``Parsed.extra``: the byte span of an
            embedded program, how ``.ptd`` siblings were chosen); ``Artifact.validate`` passes them.

    Example:
        >>> wb.open("sample_models/mlp_external.pte", data=[]).validate()  # doctest: +SKIP
          severity        structure  offset  message
        0  warning  tensor 'fc1.weight'  <NA>  external tensor not found in any data file
    """
    import pandas as pd

    from . import frames as _frames
    from .formats.parsed import Extra

    frames = art.frames
    for name in frames:  # builders may add findings while they run
        frames[name]
    extra = extra or Extra()
    sources = art.sources
    found: list[Finding] = list(art.findings)
    seg = frames["segments"]
    for file, group in seg.groupby("file", sort=False):
        size = sources[file].size if file in sources else None
        found.extend(_coverage(art, file, size, group, extra))
        for r in group.itertuples():
            if r.kind == "unused" and r.size:
                found.append(_f("warning", r.name, r.offset,
                                f"{r.size} bytes in a segment that nothing refers to"))
            elif r.kind == "trailing" and r.size:
                found.append(_f("info", r.name, r.offset,
                                f"{r.size} bytes after the last declared structure"))
        pad = int(group.loc[group["kind"] == "padding", "size"].sum())
        if size and pad > 0.25 * size and size > 1 << 20:
            found.append(_f("warning", f"layout of {file}", None,
                            f"{pad} bytes ({100 * pad / size:.0f}%) of the file are padding"))
    ten = frames["tensors"]
    stored = ten[ten["offset"].notna()]
    for r in stored.itertuples():
        src = sources.get(r.file)
        reach = int(r.nbytes)
        strides = r.strides if "strides" in ten.columns else None
        if isinstance(strides, tuple) and reach:  # a view: from its first to its last element
            numel = math.prod(r.shape)
            reach = (1 + sum((d - 1) * st for d, st in zip(r.shape, strides))) * (reach // numel)
        if src is not None and int(r.offset) + reach > src.size:
            found.append(_f("error", f"tensor {r.name!r}", int(r.offset),
                            f"{reach} bytes run past the end of {r.file}"))
        if r.storage in ("segment", "mutable", "inline") and int(r.offset) % TENSOR_ALIGNMENT:
            found.append(_f("warning", f"tensor {r.name!r}", int(r.offset),
                            f"data is not {TENSOR_ALIGNMENT}-byte aligned"))
    if "dim_order" in ten.columns:  # Artifact.tensor reads a bad dim_order as row-major
        names, orders, shapes, offsets = (ten[c].tolist() for c in ("name", "dim_order", "shape",
                                                                      "offset"))
        for name, order, shape, off in zip(names, orders, shapes, offsets):
            if order and shape is not None and sorted(order) != list(range(len(shape))):
                found.append(_f("warning", f"tensor {name!r}", None if off is pd.NA else off,
                                f"dim_order {list(order)} is not a permutation of the "
                                f"{len(shape)} dimensions of shape {list(shape)}: its data "
                                "is read in row-major order"))
    if "missing" in ten.columns:
        for r in ten[ten["missing"].fillna(False).astype(bool)].itertuples():
            found.append(_f("warning", f"tensor {r.name!r}", None,
                            "external tensor not found in any data file"))
    if "memory_plan" in frames:
        plan = frames["memory_plan"]
        for r in plan[~plan["fits"]].itertuples():
            found.append(_f("error", f"{r.method} value {r.value}", None,
                            f"planned at [{r.offset}, {r.end}) outside arena {r.mem_id} "
                            f"of {r.buffer_size} bytes"))
    if "instructions" in frames and "methods" in frames:
        found.extend(_arg_indices(frames["methods"], frames["instructions"]))
    if "delegate_tensors" in frames:
        found.extend(_scale_findings(art, frames["delegate_tensors"]))
    if art.format in ("pte", "bpte") and "operators" in frames:
        found.extend(_kernel_findings(art))
    found.extend(_data_choice(art, extra))
    return _frames.build("findings", {
        "severity": [x.severity for x in found],
        "structure": [x.structure for x in found],
        "offset": [x.offset for x in found],
        "message": [x.message for x in found],
    })


def _coverage(art: Artifact, file: str, size: int | None, group: pd.DataFrame,
              extra: Extra) -> list[Finding]:
    """The rows of one file must tile it: sorted, each starting where the one before ends,
    from 0 to the file size (for a program embedded in a ``.bpte``: its own byte range)."""
    if size is None:
        return []
    lo, hi = (extra.span or (0, size)) if file == art.path else (0, size)
    off = group["offset"].to_numpy("int64")
    end = off + group["size"].to_numpy("int64")
    breaks = (off[1:] != end[:-1]).nonzero()[0]
    if len(breaks):
        k = int(breaks[0])
        return [_f("error", f"segments of {file}", int(off[k + 1]),
                   f"a row ends at {int(end[k])} but the next starts at {int(off[k + 1])}")]
    first, last = (int(off[0]), int(end[-1])) if len(off) else (lo, lo)
    if (first, last) != (lo, hi):
        return [_f("error", f"segments of {file}", None,
                   f"rows cover [{first}, {last}), not [{lo}, {hi}) of the {size}-byte file")]
    return []


def _data_choice(art: Artifact, extra: Extra) -> list[Finding]:
    """``info`` findings saying which ``.ptd`` files next to a program were attached and why,
    and which other ``.ptd`` files there would also have fitted (they are parsed here, not at
    open: candidates are tried named-like-the-program first and only until every key is
    resolved)."""
    import os

    from .errors import ArtifactError
    from .formats import ptd
    from .formats.pte import sibling_data_files
    from .source import Source

    choice = extra.data_choice
    auto = [path for path, (how, _) in choice.items() if how == "sibling"]
    if not auto:
        return []
    assert extra.wanted_keys is not None and extra.resolves is not None  # (a program's)
    wanted = extra.wanted_keys()
    stem = os.path.splitext(os.path.basename(art.path))[0]
    out = []
    named = [p for p in auto if os.path.splitext(os.path.basename(p))[0] == stem]
    for path in auto:
        why = "named like it" if path in named else "holds keys it needs"
        out.append(_f("info", f"data file {os.path.basename(path)!r}", None,
                      f"attached automatically (next to the program, {why}): resolves "
                      f"{choice[path][1]} of the {wanted} keys the program needs"))
    firsts = ", ".join(repr(os.path.basename(p)) for p in auto)
    order = "named like the program" if named else "name order"
    for path in sibling_data_files(art.path):
        if path in choice:
            continue
        try:
            src = Source(path)
        except OSError:
            continue
        try:
            hits = extra.resolves(ptd.read(src)) if ptd.detect(src.head(8)) else set()
        except ArtifactError:
            hits = set()
        finally:
            src.close()
        if hits:
            out.append(_f("info", f"data file {os.path.basename(path)!r}", None,
                          f"also fits ({len(hits)} of the {wanted} keys the program needs) "
                          f"but is not attached: {firsts} was tried first "
                          f"({order}); pass data=[...] to choose"))
    return out


def _kernel_findings(art: Artifact) -> list[Finding]:
    """A ``warning`` per operator that the program's kernel calls use and the installed
    ExecuTorch runtime does not register (even with every kernel library imported); an
    ``info`` saying the check could not be made when ExecuTorch is not installed."""
    from .runtime._registry import RuntimeFailure, missing_of

    try:
        missing = missing_of(art)
    except RuntimeFailure as e:
        return [_f("info", "operator table", None, f"could not check the kernels: {e}")]
    if missing is None:
        return [_f("info", "operator table", None, "could not check whether the runtime has "
                   "the kernels this program calls: executorch is not installed")]
    out = []
    for op, lib in missing.items():
        where = (f"the {lib!r} kernel library provides it, but not in this installation"
                 if lib else "no known kernel library provides it")
        out.append(_f("warning", f"operator {op!r}", None,
                      f"the installed ExecuTorch runtime registers no kernel for it ({where}): "
                      "load_method would fail with OperatorMissing (0x14)"))
    return out


#: Most bytes of quantization scales that validate() reads to check that they are finite.
MAX_SCALE_BYTES = 256 << 20


def _prefetch_scales(sources: Any, grouped: pd.DataFrame, budget: int) -> None:
    """Fetch the scales :func:`_scale_findings` reads with concurrent requests (a remote
    artifact; a no-op for mapped files)."""
    wanted: dict[str, list[tuple[int, int]]] = {}
    for f, off, n in zip(grouped["scale_file"], grouped["scale_offset"],
                         grouped["scale_nbytes"]):
        src = sources.get(f)
        if src is None or not src.remote or _na(n) or not int(n):
            continue
        if int(n) > budget:
            break
        budget -= int(n)
        wanted.setdefault(f, []).append((int(off), int(n)))
    for f, ranges in wanted.items():
        sources[f].prefetch_many(ranges)


def _scale_findings(art: Artifact, dt: pd.DataFrame) -> list[Finding]:
    """``warning`` findings for quantized delegate tensors whose scales are not finite (NaN
    or infinite): their dequantized values are NaN or infinite where those scales apply."""
    import numpy as np

    from .formats.delegates.quant import scale_values

    out = []
    if "quant" not in dt.columns or not len(dt):
        return out
    q = dt["quant"].astype(object)
    per_tensor = dt[(q == "per_tensor") & dt["scale"].notna()]
    for r in per_tensor.itertuples():
        if not math.isfinite(float(r.scale)):
            out.append(_f("warning", f"delegate tensor {r.name!r}", _int(r.offset),
                          f"its per-tensor scale is {float(r.scale)}: every dequantized "
                          "value is NaN or infinite"))
    grouped = dt[q.isin(["per_channel", "per_channel_group"]) & dt["scale_offset"].notna()]
    budget = MAX_SCALE_BYTES
    sources = art.sources
    _prefetch_scales(sources, grouped, budget)
    for r in grouped.itertuples():
        src = sources.get(r.scale_file)
        n = int(r.scale_nbytes) if not _na(r.scale_nbytes) else 0
        if src is None or not n or int(r.scale_offset) + n > src.size:
            continue  # missing or out of bounds: reported elsewhere
        if n > budget:
            out.append(_f("info", f"delegate tensor {r.name!r}", _int(r.offset),
                          f"scales not checked for NaN/inf: more than {MAX_SCALE_BYTES} bytes "
                          "of scales in this artifact"))
            break
        budget -= n
        raw = src.readinto(int(r.scale_offset), np.empty(n, np.uint8),
                           f"scales of delegate tensor {r.name!r}")
        values = scale_values(raw, str(r.scale_dtype) if not _na(r.scale_dtype) else "float32")
        if values is None:
            continue
        bad = ~np.isfinite(values)
        if bad.any():
            kinds = sorted({"NaN" if np.isnan(v) else "inf" for v in values[bad].tolist()})
            out.append(_f("warning", f"delegate tensor {r.name!r}", int(r.scale_offset),
                          f"{int(bad.sum())} of {len(values)} scales are {'/'.join(kinds)}: the "
                          "values they scale dequantize to NaN or infinity"))
    return out


def _na(v: Any) -> bool:
    import pandas as pd

    return v is None or bool(pd.isna(v))


def _int(v: Any) -> int | None:
    return None if _na(v) else int(v)


def _arg_indices(methods: pd.DataFrame, ins: pd.DataFrame) -> list[Finding]:
    """Instruction arguments that index no value of their method (the runtime refuses to
    load such a method)."""
    import pandas as pd

    n_values = dict(zip(methods["method"].tolist(), methods["values"].tolist()))
    out = []
    for method, chain, k, args, at in zip(*(ins[c].tolist() for c in (
            "method", "chain", "instruction", "args", "table_offset"))):
        n = n_values.get(method)
        if n is None or not isinstance(args, tuple):
            continue
        bad = [a for a in args if a < 0 or a >= n]
        if bad:
            out.append(_f("error", f"{method} chain {chain} instruction {k}",
                          None if at is pd.NA else at,
                          f"argument(s) {bad[:4]} index past the {n} values of the method"))
    return out


def _f(severity: str, structure: str, offset: int | None, message: str) -> Finding:
    return Finding(severity, structure, None if offset is None else int(offset), message)
