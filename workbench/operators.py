"""The operators that ExecuTorch's kernel libraries provide: their schemas and libraries.

A ``.pte`` names each operator a kernel call runs (``aten::topk`` overload ``values``) but not
its schema, so the program alone does not say which arguments a call writes. ExecuTorch's
emitter passes a kernel call one argument per schema argument, in schema order (defaults
included), then the call's return value: the ``out`` argument itself for a single-output out
variant, one ``TensorList`` of them for several (or a ``Tensor(a!)[]`` out), nothing for a
call that returns nothing. The schema marks every written argument (``Tensor(a!)``,
``Tensor(a!)[]``), so argument *i* of a call is written when schema argument *i* is, and the
trailing return values are written too.

The table (``workbench/data/operators.json``) is data generated from torch's own registry by
``scripts/make_operator_table.py`` for every operator the installed kernel libraries register
(portable, quantized, LLM custom ops), with the library that provides it. Reading it needs
neither torch nor ExecuTorch. :func:`parse` reads one schema string.

Example:
    >>> from workbench import operators
    >>> s = operators.schema("aten::topk.values")
    >>> [a.name for a in s.arguments if a.written]
    ['values', 'indices']
    >>> operators.library("llama::update_cache.out")
    'llm_custom_ops'
"""

from __future__ import annotations

import functools
import json
import pathlib
from dataclasses import dataclass
from typing import Any

__all__ = ["Argument", "Schema", "parse", "schema", "library", "table", "library_modules"]

_TABLE = pathlib.Path(__file__).resolve().parent / "data" / "operators.json"


@dataclass(frozen=True)
class Argument:
    """One argument of an operator schema.

    Attributes:
        name: the argument's name.
        type: its type as written, alias annotation included (``Tensor(a!)[]``).
        written: the schema marks it as written (``!`` in its alias annotation).
        tensor_list: a list of tensors (``Tensor[]``, ``Tensor?[]``): a kernel call passes
            one list value whose members are the tensors.
        kwarg_only: after ``*`` (out arguments are).
        default: the default as written (``None`` when there is none).
    """

    name: str
    type: str
    written: bool
    tensor_list: bool
    kwarg_only: bool
    default: str | None = None


@dataclass(frozen=True)
class Schema:
    """An operator schema: ``ns::name.overload(arguments) -> returns``.

    Example:
        >>> s = parse("aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, "
        ...           "Tensor(a!) max, Tensor(b!) max_values) -> (Tensor(a!) values, "
        ...           "Tensor(b!) indices)")
        >>> s.written_mask, len(s.returns)
        ((False, False, False, True, True), 2)
    """

    name: str
    overload: str
    arguments: tuple[Argument, ...]
    returns: tuple[str, ...]
    text: str

    @property
    def written_mask(self) -> tuple[bool, ...]:
        """Per argument: whether it is written."""
        return tuple(a.written for a in self.arguments)


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, parentheses and quotes."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced brackets in {text!r}")
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if depth or quote:
        raise ValueError(f"unbalanced brackets or quotes in {text!r}")
    tail = "".join(cur).strip()
    if tail or parts:
        parts.append(tail)
    return parts


def _closing(text: str, at: int) -> int:
    """Index of the parenthesis closing the one at ``at``."""
    depth = 0
    for i in range(at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"no closing parenthesis in {text!r}")


def _argument(text: str, kwarg_only: bool) -> Argument:
    decl, eq, default = text.partition("=")
    decl = decl.strip()
    typ, sep, name = decl.rpartition(" ")
    if not sep or not typ or not name:
        raise ValueError(f"not an argument: {text!r}")
    typ = typ.strip()
    bare = typ.replace(" ", "")
    # the alias annotation: Tensor(a!) / Tensor(a!)[] ; '!' marks a write
    ann = bare[bare.index("(") + 1:bare.index(")")] if "(" in bare else ""
    base = bare.split("(")[0] + (bare[bare.index(")") + 1:] if "(" in bare else "")
    tensor_list = base.startswith("Tensor") and base.endswith("[]")
    return Argument(name=name, type=typ, written="!" in ann, tensor_list=tensor_list,
                    kwarg_only=kwarg_only, default=default.strip() if eq else None)


def parse(text: str) -> Schema:
    """Parse one schema string as torch writes it (``str(op._schema)``).

    Raises:
        ValueError: ``text`` is not a schema.

    Example:
        >>> parse("llama::update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, "
        ...       "*, Tensor(b!) out) -> Tensor(b!)").written_mask
        (False, True, False, True)
    """
    open_at = text.find("(")
    if open_at <= 0 or "->" not in text:
        raise ValueError(f"not an operator schema: {text!r}")
    close = _closing(text, open_at)
    full = text[:open_at].strip()
    name, _, overload = full.partition(".")
    args: list[Argument] = []
    kwarg_only = False
    for part in _split_top(text[open_at + 1:close]):
        if part == "*":
            kwarg_only = True
            continue
        args.append(_argument(part, kwarg_only))
    rest = text[close + 1:].strip()
    if not rest.startswith("->"):
        raise ValueError(f"no '->' after the arguments: {text!r}")
    ret = rest[2:].strip()
    if ret.startswith("(") and _closing(ret, 0) == len(ret) - 1:
        returns = tuple(_split_top(ret[1:-1]))
    else:
        returns = (ret,) if ret else ()
    return Schema(name=name, overload=overload, arguments=tuple(args), returns=returns,
                  text=text)


@functools.lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The whole table as stored: ``torch``, ``executorch`` versions, ``libraries``
    (library -> module whose import registers its kernels), ``operators`` (name ->
    ``{"library", "schema", "source"}``).

    Example:
        >>> sorted(table()["libraries"])
        ['llm_custom_ops', 'portable', 'quantized']
    """
    with open(_TABLE, encoding="utf-8") as f:
        return json.load(f)


def _entry(op: str) -> dict[str, Any] | None:
    ops = table()["operators"]
    hit = ops.get(op)
    if hit is None and "." not in op.partition("::")[2]:
        hit = ops.get(op + ".default")
    return hit


@functools.lru_cache(maxsize=4096)
def schema(op: str) -> Schema | None:
    """The schema of ``op`` (``ns::name.overload``, or ``ns::name`` for the default overload)
    from the table; ``None`` when the table has none.

    Example:
        >>> schema("aten::native_layer_norm.out").written_mask[-3:]
        (True, True, True)
    """
    hit = _entry(op)
    if hit is None or not hit.get("schema"):
        return None
    return parse(hit["schema"])


def library(op: str) -> str | None:
    """The kernel library that registers ``op`` (a key of :data:`LIBRARY_MODULES`), or
    ``None`` when no library known to the table provides it.

    Example:
        >>> library("quantized_decomposed::embedding_byte.out")
        'quantized'
    """
    hit = _entry(op)
    return None if hit is None else hit.get("library")


def library_modules() -> dict[str, str]:
    """library -> the Python module whose import registers its kernels in ExecuTorch's
    Python runtime.

    Example:
        >>> library_modules()["quantized"]
        'executorch.kernels.quantized'
    """
    return dict(table()["libraries"])
