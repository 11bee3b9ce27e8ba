"""Everything that runs ExecuTorch, in one place: which kernel libraries a program needs,
the kernels the installed runtime lacks, default inputs, and ONE child-process runner
(``wb.run``, bundled test cases and memory measurement go through :func:`run_child`).

ExecuTorch's Python runtime registers only the kernels of the libraries that have been
imported: the portable kernels come with ``executorch.extension.pybindings.portable_lib``,
the ``quantized_decomposed::*`` kernels with ``executorch.kernels.quantized`` and the LLM
custom ops (``llama::update_cache``, ``llama::custom_sdpa``, ...) with
``executorch.extension.llm.custom_ops.custom_ops``. A program that calls a kernel nobody
imported fails at ``load_method`` with error ``0x14`` (OperatorMissing), naming nothing. The
workbench reads the program's operator table, imports the libraries it needs in the child,
and names every missing kernel before anything runs (:class:`~workbench.errors.MissingKernelError`).

Which library provides an operator comes from :mod:`workbench.operators` (generated from the
installed packages); which operators the installed runtime registers is asked of the runtime
itself, once, in a child process (:func:`registered_operators`; the answer is cached in
memory and on disk, keyed by the installed files).

Example:
    >>> from workbench import runtime
    >>> runtime.kernels("sample_models/mlp_portable.pte")[["op", "library", "registered"]]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import operators
from ..errors import MissingKernelError
from ._registry import (
    BASE,
    Registry,
    RuntimeFailure,
    check_of,
    kernel_ops,
    libraries_of,
    missing_of,
    registered_operators,
    run_child,
)

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact

__all__ = ["Registry", "RuntimeFailure", "check_kernels", "int_limit", "kernels",
           "libraries_for", "missing_kernels", "registered_operators", "run_child",
           "selected_operators", "selected_operators_yaml", "MissingKernelError"]

# -- what a program needs ----------------------------------------------------------------------------

def _artifact(program: Any) -> tuple[Artifact, bool]:
    """(the opened program, whether we opened it)."""
    from .. import _open

    if isinstance(program, (str, os.PathLike)):
        return _open.open(program), True
    return program, False


class _Opened:
    """``with _Opened(program) as art``: ``program`` opened (a path) or as given."""

    def __init__(self, program: Any) -> None:
        self.art, self.opened = _artifact(program)

    def __enter__(self) -> Artifact:
        return self.art

    def __exit__(self, *exc: Any) -> None:
        if self.opened:
            self.art.close()


def libraries_for(program: Any) -> dict[str, str]:
    """The kernel libraries (name -> module to import) that the operators of ``program``'s
    kernel calls come from, besides the portable kernels every runtime has.

    Example:
        >>> libraries_for("sample_models/llm_tiny.pte")     # doctest: +SKIP
        {'llm_custom_ops': 'executorch.extension.llm.custom_ops.custom_ops', 'quantized': ...}
    """
    with _Opened(program) as art:
        return libraries_of(art)


def missing_kernels(program: Any) -> dict[str, str | None] | None:
    """op -> the library that would provide it (``None``: no known library does) for every
    operator of ``program``'s kernel calls that the installed runtime does not register, even
    with every kernel library imported; ``None`` when ExecuTorch is not installed.

    Example:
        >>> missing_kernels("sample_models/custom_op.pte")   # doctest: +SKIP
        {'workbench_demo::scale.out': None}
    """
    with _Opened(program) as art:
        return missing_of(art)


def check_kernels(program: Any) -> dict[str, str]:
    """The libraries to import for ``program`` (as :func:`libraries_for`), after checking that
    the installed runtime registers every kernel it calls.

    Raises:
        MissingKernelError: naming every missing ``ns::op.overload`` and the library that
            would provide it, where one is known.

    Example:
        >>> check_kernels("sample_models/custom_op.pte")      # doctest: +SKIP
        Traceback (most recent call last):
        MissingKernelError: custom_op.pte: operator table: the installed ExecuTorch runtime ...
    """
    with _Opened(program) as art:
        return check_of(art)


def kernels(program: Any) -> pd.DataFrame:
    """The ``kernels`` frame: one row per operator that ``program``'s kernel (non-delegated)
    calls use: the library that provides it, whether the installed runtime registers it, the
    calls and methods using it, and its kernel keys (``workbench.frames.SCHEMAS["kernels"]``).

    Example:
        >>> k = kernels("sample_models/mlp_portable.pte")            # doctest: +SKIP
        >>> k[["op", "library", "registered", "uses"]].values.tolist()  # doctest: +SKIP
        [['aten::addmm.out', 'portable', True, 2], ...]
    """
    from ..frames import build

    with _Opened(program) as art:
        ops = kernel_ops(art)
    reg = registered_operators()
    modules = operators.library_modules()
    cols: dict[str, list] = {c: [] for c in ("op", "library", "module", "registered", "uses",
                                             "methods", "kernel_keys", "schema")}
    for op in sorted(ops):
        e = ops[op]
        lib = (reg.provider(op) if reg is not None else None) or operators.library(op)
        cols["op"].append(op)
        cols["library"].append(lib)
        cols["module"].append(None if lib in (None, BASE) else modules.get(lib))
        cols["registered"].append(None if reg is None else reg.registered(op))
        cols["uses"].append(e["uses"])
        cols["methods"].append(", ".join(e["methods"]))
        cols["kernel_keys"].append(tuple(e["kernel_keys"]))
        cols["schema"].append("schema" if operators.schema(op) is not None else None)
    return build("kernels", cols)


def int_limit(program: Any) -> int | None:
    """For an LLM program: the smallest of its ``get_max_seq_len`` and ``get_vocab_size``
    constant methods (default integer inputs count up to it); ``None`` for other programs.

    Example:
        >>> int_limit("sample_models/llm_tiny.pte")     # doctest: +SKIP
        64
    """
    with _Opened(program) as art:
        m = art.frames["methods"]
        if "constant_value" not in m.columns:
            return None
        values = dict(zip(m["method"].astype(str), m["constant_value"]))
    found = [v for k in ("get_max_seq_len", "get_vocab_size")
             if isinstance(v := values.get(k), int) and not isinstance(v, bool) and v > 0]
    return min(found) if found else None


# -- selective build -------------------------------------------------------------------------------

def selected_operators(program: Any) -> dict[str, Any]:
    """The ``selected_operators.yaml`` content for ``program`` (as a dict): the operators its
    kernel calls need, in the format ExecuTorch's selective build reads (torchgen's
    ``SelectiveBuilder``), with ``et_kernel_metadata`` (dtype and dim order of every tensor
    argument) where the program lets them be derived (else ``default``).

    Example:
        >>> sorted(selected_operators("sample_models/mlp_portable.pte")["operators"])   # doctest: +SKIP
        ['aten::addmm.out', 'aten::permute_copy.out', 'aten::relu.out']
    """
    with _Opened(program) as art:
        name = os.path.basename(art.path)
        ops = kernel_ops(art)
    operators_ = {op: {"debug_info": [name], "include_all_overloads": False,
                       "is_root_operator": True, "is_used_for_training": True}
                  for op in sorted(ops)}
    metadata = {op: list(ops[op]["kernel_keys"]) or ["default"] for op in sorted(ops)}
    return {"build_features": [], "custom_classes": [], "debug_info": [name],
            "et_kernel_metadata": metadata, "include_all_non_op_selectives": False,
            "include_all_operators": False, "kernel_metadata": {}, "operators": operators_}


def selected_operators_yaml(program: Any) -> str:
    """:func:`selected_operators` as YAML text (block style, every string double-quoted).

    Example:
        >>> print(selected_operators_yaml("sample_models/mlp_portable.pte")[:40])   # doctest: +SKIP
    """
    return _yaml(selected_operators(program))


def _yaml(data: Any, indent: int = 0) -> str:
    pad = " " * indent
    lines: list[str] = []
    for key, value in data.items():
        k = json.dumps(str(key))
        if isinstance(value, Mapping):
            lines.append(f"{pad}{k}:" + (" {}" if not value else ""))
            if value:
                lines.append(_yaml(value, indent + 2).rstrip("\n"))
        elif isinstance(value, (list, tuple)):
            lines.append(f"{pad}{k}:" + (" []" if not value else ""))
            lines += [f"{pad}- {json.dumps(v)}" for v in value]
        else:
            lines.append(f"{pad}{k}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"
