"""Default inputs for a method, from its ``MethodMeta`` (runs in the child, needs torch)."""

from __future__ import annotations

from typing import Any


def default_inputs(meta: Any, int_limit: int | None = None, seed: int = 0) -> list[Any]:
    """Inputs with the sizes and dtypes the method declares: seeded normal floats, booleans
    ``False``, integers zero, or, with ``int_limit``, integers ``0, 1, 2, ...`` in row-major
    order wrapped at ``int_limit``.

    ``int_limit`` is for LLM programs (see :func:`workbench.runtime.int_limit`: the smallest
    of their ``get_max_seq_len`` / ``get_vocab_size`` constant methods): the integers are then
    valid token ids inside the vocabulary and positions ``0..n-1`` within the cache.

    Example:
        >>> m = _load_for_executorch("sample_models/mlp_portable.pte")   # doctest: +SKIP
        >>> [tuple(t.shape) for t in default_inputs(m.method_meta("forward"))]   # doctest: +SKIP
        [(1, 16)]
    """
    import torch

    from ..dtypes import SCALAR_TYPES

    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(meta.num_inputs()):
        t = meta.input_tensor_meta(i)
        dt = getattr(torch, SCALAR_TYPES[int(t.dtype())].name)
        shape = tuple(int(d) for d in t.sizes())
        if dt.is_floating_point:
            out.append(torch.randn(shape, generator=gen).to(dt))
        elif dt == torch.bool:
            out.append(torch.zeros(shape, dtype=dt))
        elif not int_limit:
            out.append(torch.zeros(shape, dtype=dt))
        else:
            n = 1
            for d in shape:
                n *= d
            values = torch.arange(n, dtype=torch.int64) % int(int_limit)
            out.append(values.reshape(shape).to(dt))
    return out
