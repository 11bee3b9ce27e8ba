"""Write ``workbench/data/operators.json``: the schema of every operator that ExecuTorch's
kernel libraries register, as torch's own registry states it, and the library that provides it.

The program does not carry operator schemas and the readers must not need torch, so the
workbench reads which arguments of a kernel call are written (``Tensor(a!)``,
``Tensor(a!)[]``, several ``out`` arguments) from this table. It is data generated from the
installed packages, not code:

    .venv/bin/python scripts/make_operator_table.py            # rewrite the table
    .venv/bin/python scripts/make_operator_table.py --check    # exit 1 when it is stale

The libraries, in the order they are imported (each import registers more kernels in the
Python runtime, ``_get_operator_names()`` tells which):

* ``portable``: ``executorch.extension.pybindings.portable_lib`` (the portable and optimized
  kernels and the prim ops linked into the Python runtime);
* ``quantized``: ``executorch.kernels.quantized`` (``quantized_decomposed::*``);
* ``llm_custom_ops``: ``executorch.extension.llm.custom_ops.custom_ops`` (``llama::*``).

tests/test_operator_table.py checks the table against ``torch.ops.<ns>.<op>.<overload>._schema``
for every operator that a sample program calls.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent.parent / "workbench" / "data" / "operators.json"

#: (library name, module whose import registers its kernels), in import order
LIBRARIES = (
    ("portable", "executorch.extension.pybindings.portable_lib"),
    ("quantized", "executorch.kernels.quantized"),
    ("llm_custom_ops", "executorch.extension.llm.custom_ops.custom_ops"),
)


#: Operators the runtime registers that torch has no schema for: the emitter writes their
#: kernel calls itself (``exir/emit/_emitter.py``); their argument layouts as the emitter
#: passes them, in schema syntax (a written argument is annotated ``(a!)``).
EMITTER = {
    "executorch_prim::et_view.default": "executorch_prim::et_view(Tensor self, int[] size) -> Tensor",
    "executorch_prim::et_copy_index.tensor":
        "executorch_prim::et_copy_index.tensor(Tensor(a!) copy_to, Tensor copy_from, int index) -> ()",
    "executorch_prim::floordiv.int": "executorch_prim::floordiv.int(int a, int b) -> int",
    "executorch_prim::mod.int": "executorch_prim::mod.int(int a, int b) -> int",
}


def torch_schema(name: str) -> str | None:
    """torch's schema of ``ns::op.overload`` (``ns::op`` for the default overload)."""
    import torch

    ns, rest = name.split("::", 1)
    op, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), op)
        return str(getattr(packet, overload or "default")._schema)
    except (AttributeError, RuntimeError):
        return None


def build() -> dict:
    import importlib

    import executorch

    # the prim ops' Python registrations (executorch_prim::*) give them torch schemas
    import executorch.exir.passes.executorch_prim_ops_registry
    import torch
    from executorch.extension.pybindings import portable_lib

    seen: set[str] = set()
    ops: dict[str, dict] = {}
    for lib, module in LIBRARIES:
        importlib.import_module(module)
        names = set(portable_lib._get_operator_names())
        for name in sorted(names - seen):
            schema, source = torch_schema(name), "torch"
            if schema is None and name in EMITTER:
                schema, source = EMITTER[name], "emitter"
            ops[name] = {"library": lib, "schema": schema, "source": source if schema else None}
        seen |= names
    version = getattr(executorch, "__version__", "?")
    return {
        "about": "Operator schemas of ExecuTorch's kernel libraries, from torch's registry "
                 "(scripts/make_operator_table.py). 'schema' is null where torch has none.",
        "torch": torch.__version__.split("+")[0],
        "executorch": version.split("+")[0],
        "libraries": {lib: module for lib, module in LIBRARIES},
        "operators": dict(sorted(ops.items())),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the table is stale")
    args = ap.parse_args(argv)
    text = json.dumps(build(), indent=1, sort_keys=False) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'current' if same else 'STALE'}")
        return 0 if same else 1
    OUT.write_text(text)
    table = json.loads(text)["operators"]
    missing = sorted(k for k, v in table.items() if v["schema"] is None)
    print(f"wrote {OUT}: {len(table)} operators, {len(missing)} without a torch schema")
    for k in missing:
        print("  no schema:", k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
