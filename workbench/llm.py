"""An LLM program's bytes by part: embedding, each decoder layer, LM head (a view over frames).

ExecuTorch's LLM exporter (``export_llm``) writes a ``forward`` whose instructions run the
token embedding, then one decoder layer after the other, then the final norm and the LM head.
The program names none of this (its weights are XNNPACK constants keyed by content hashes),
so the parts are found from the graph:

* the **embedding** is the first kernel call whose operator is an embedding
  (``aten::embedding``, ``quantized_decomposed::embedding_*``), and everything before it;
* every call of the attention kernel (``llama::custom_sdpa``, ``llama::sdpa_with_kv_cache``,
  ``llama::custom_quantized_sdpa``) is one **layer**. A layer starts at its attention norm:
  the last normalization kernel (``aten::mean``: RMSNorm; layer norms) before the layer's
  first cache update (``llama::update_cache``); layer 0 starts right after the embedding;
* the **LM head** starts at the final norm: the last normalization after the last layer's
  attention, when the last layer has its FFN norm before it.

Each instruction's bytes are the constant tensors it reads: a kernel call's constant
arguments (constant segment, named data, ``.ptd``), a delegate call's constants (its
``delegate_tensors`` rows with stored bytes, quantization scales included).

Example:
    >>> import workbench as wb
    >>> from workbench import llm
    >>> llm.parts("sample_models/llm_tiny.pte")[["part", "instructions", "bytes"]]  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from .artifact import Artifact

__all__ = ["ATTENTION", "instruction_parts", "parts"]

#: Operators that compute one layer's attention (one call per layer).
ATTENTION = ("llama::custom_sdpa.out", "llama::sdpa_with_kv_cache.out",
             "llama::custom_quantized_sdpa.out")
#: Operators that update a layer's KV cache.
CACHE_UPDATE = ("llama::update_cache.out", "llama::update_cache_with_indices.out")
#: Normalization kernels (RMSNorm is exported as a mean of squares; layer norms).
NORMS = ("aten::mean.out", "aten::mean.dim_out", "aten::native_layer_norm.out",
         "aten::rms_norm.out", "aten::_fused_rms_norm.out")


def _open(program: Any) -> tuple[Artifact, bool]:
    from ._open import open as wb_open

    if isinstance(program, (str, os.PathLike)):
        return wb_open(program), True
    return program, False


def instruction_parts(program: Any, method: str = "forward") -> pd.DataFrame:
    """One row per instruction of ``method``: its ``part`` (``embedding``, ``layer N``,
    ``lm_head``; ``model`` when the method has no attention calls to anchor layers on),
    ``layer`` (the number, or missing) and the constant ``bytes`` it reads.

    Example:
        >>> p = instruction_parts("sample_models/llm_tiny.pte")        # doctest: +SKIP
        >>> p.groupby("part", sort=False)["bytes"].sum()               # doctest: +SKIP
    """
    import pandas as pd

    art, opened = _open(program)
    try:
        ins = art.frames["instructions"]
        ins = ins[ins["method"].astype(str) == method].reset_index(drop=True)
        if not len(ins):
            raise ValueError(f"{art.path}: no method {method!r} with instructions")
        consts = _constant_bytes(art, method, ins)
    finally:
        if opened:
            art.close()
    ops = [o if isinstance(o, str) else "" for o in ins["op"].astype(object)]
    n = len(ops)
    attention = [p for p, o in enumerate(ops) if o in ATTENTION]
    embed = next((p for p, o in enumerate(ops) if "embedding" in o.split("::")[-1]), -1)
    part = ["model"] * n
    layer: list[int | None] = [None] * n
    if attention:
        norms = [p for p, o in enumerate(ops) if o in NORMS]
        starts = [embed + 1]
        for i in range(1, len(attention)):
            prev, at = attention[i - 1], attention[i]
            update = next((p for p in range(prev + 1, at) if ops[p] in CACHE_UPDATE), at)
            norm = [p for p in norms if prev < p < update]
            starts.append(norm[-1] if norm else prev + 1)
        after = [p for p in norms if p > attention[-1]]
        head = after[-1] if len(after) >= 2 else n
        for p in range(n):
            if p <= embed:
                part[p] = "embedding"
            elif p >= head:
                part[p] = "lm_head"
            else:
                k = max(i for i, s in enumerate(starts) if s <= p) if p >= starts[0] else 0
                part[p], layer[p] = f"layer {k}", k
    return pd.DataFrame({"instruction": ins["instruction"], "kind": ins["kind"],
                         "op": ins["op"], "delegate_index": ins["delegate_index"],
                         "part": part, "layer": pd.array(layer, "Int64"), "bytes": consts})


def _constant_bytes(art: Artifact, method: str, ins: pd.DataFrame) -> list[int]:
    """Per instruction: the bytes of the constant tensors it reads."""
    import pandas as pd

    t = art.tensors
    t = t[(t["method"].astype(str) == method) & t["value"].notna() & t["offset"].notna()
          & ~t["storage"].isin(["planned", "mutable"])]
    stored = dict(zip(t["value"].astype(int), t["nbytes"].astype(int)))
    by_delegate: dict[int, int] = {}
    if "delegate_tensors" in art.frames:
        d = art.frames["delegate_tensors"]
        d = d[(d["method"].astype(str) == method) & d["offset"].notna()]
        scale = pd.to_numeric(d["scale_nbytes"], errors="coerce").fillna(0).astype(int) \
            if "scale_nbytes" in d.columns else 0
        total = (d["nbytes"].astype(int) + scale).groupby(d["index"].astype(int)).sum()
        by_delegate = {int(k): int(v) for k, v in total.items()}
    out = []
    for kind, reads, di in zip(ins["kind"].astype(str), ins["reads"], ins["delegate_index"]):
        if kind == "delegate" and not pd.isna(di):
            out.append(by_delegate.get(int(di), 0))
        else:
            out.append(sum(stored.get(v, 0) for v in reads))
    return out


def parts(program: Any, method: str = "forward") -> pd.DataFrame:
    """The constant bytes of an LLM program by part: one row per part (``embedding``,
    ``layer 0`` ... ``layer N-1``, ``lm_head``) with its ``instructions``, ``kernel_calls``,
    ``delegate_calls``, ``bytes`` and ``share`` of all constant bytes the method reads.

    Example:
        >>> parts("sample_models/llm_tiny.pte")                 # doctest: +SKIP
               part  instructions  kernel_calls  delegate_calls   bytes  share
        0  embedding             2             2               0  ...
    """
    import pandas as pd

    p = instruction_parts(program, method)
    g = p.groupby("part", sort=False)
    out = pd.DataFrame({
        "instructions": g.size(),
        "kernel_calls": g["kind"].apply(lambda k: int((k.astype(str) == "kernel").sum())),
        "delegate_calls": g["kind"].apply(lambda k: int((k.astype(str) == "delegate").sum())),
        "bytes": g["bytes"].sum().astype("int64"),
    }).reset_index()
    total = int(out["bytes"].sum())
    out["share"] = out["bytes"] / total if total else 0.0
    return out
