"""The operator-schema table (``workbench/data/operators.json``, ``workbench.operators``) and
the reads / writes of kernel calls that it gives.

Oracles, computed in the tests: torch's own registry (``torch.ops.<ns>.<op>.<overload>._schema``
after importing ExecuTorch's kernel libraries), ExecuTorch's deserializer (the kernel calls'
arguments, list members and tensor sizes) and the ExecuTorch runtime (``wb.run``: the
timeline's bytes per instruction).
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest

import workbench as wb
from workbench import operators

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"
#: programs made by the real exporter whose kernels write several tensors at once
MULTI_OUTPUT = ("aten::native_layer_norm.out", "aten::split_with_sizes_copy.out",
                "aten::topk.values", "aten::max.dim_max")


def programs() -> list[Path]:
    return sorted(SAMPLES.glob("*.pte"))


def deserialized(path: Path):
    ser = pytest.importorskip("executorch.exir._serialize._program")
    p = ser.deserialize_pte_binary(path.read_bytes())
    return getattr(p, "program", p)


@pytest.fixture(scope="module")
def torch_registry():
    """torch with every kernel library's Python registrations imported; the runtime's
    registered operator names."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("executorch")
    importlib.import_module("executorch.exir.passes.executorch_prim_ops_registry")
    for module in operators.library_modules().values():
        importlib.import_module(module)
    from executorch.extension.pybindings import portable_lib

    return torch, set(portable_lib._get_operator_names())


def torch_schema(torch, op: str):
    ns, rest = op.split("::", 1)
    name, _, overload = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), name), overload or "default")._schema
    except (AttributeError, RuntimeError):
        return None


def op_name(o) -> str:
    return f"{o.name}.{o.overload}" if o.overload else o.name


# ---------------------------------------------------------------------------- the table


@pytest.mark.oracle
def test_table_equals_torch_for_every_operator_of_every_sample(torch_registry):
    torch, registered = torch_registry
    ops = {op_name(o) for p in programs() for plan in deserialized(p).execution_plan
           for o in plan.operators}
    assert set(MULTI_OUTPUT) <= ops  # the samples cover the multi-output kernels
    checked = 0
    for op in sorted(ops):
        entry = operators.table()["operators"].get(op) or \
            operators.table()["operators"].get(op + ".default")
        if entry is None:  # only operators that no installed kernel library registers
            assert op not in registered and op + ".default" not in registered, op
            assert operators.schema(op) is None and operators.library(op) is None
            continue
        if entry["source"] == "torch":
            assert entry["schema"] == str(torch_schema(torch, op)), op
            checked += 1
    assert checked >= 15


@pytest.mark.oracle
@pytest.mark.slow
def test_table_is_what_the_generator_writes_now():
    """scripts/make_operator_table.py on the installed torch / ExecuTorch writes the committed
    table (a kernel library that registers more operators makes this fail: re-run it). In a
    fresh process: which library registers an operator is told by importing them in order."""
    import subprocess
    import sys

    pytest.importorskip("executorch")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_operator_table.py"),
                           "--check"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_every_schema_in_the_table_parses():
    table = operators.table()["operators"]
    assert len(table) > 200
    for op, entry in table.items():
        s = operators.parse(entry["schema"])
        assert op.startswith(s.name) and entry["library"] in operators.library_modules()
    lib = operators.library
    assert (lib("aten::add.out"), lib("quantized_decomposed::embedding_byte.out"),
            lib("llama::custom_sdpa.out"), lib("nope::nothing.out")) == (
        "portable", "quantized", "llm_custom_ops", None)


@pytest.mark.parametrize("text,mask,returns", [
    ("aten::native_layer_norm.out(Tensor input, SymInt[] normalized_shape, Tensor? weight, "
     "Tensor? bias, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> "
     "(Tensor(a!), Tensor(b!), Tensor(c!))", (0, 0, 0, 0, 0, 1, 1, 1), 3),
    ("aten::split_with_sizes_copy.out(Tensor self, SymInt[] split_sizes, int dim=0, *, "
     "Tensor(a!)[] out) -> ()", (0, 0, 0, 1), 0),
    ("aten::convolution.out(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, "
     "SymInt[] padding=[0, 0], int groups=1, str mode=\"a,b\", *, Tensor(a!) out) -> Tensor(a!)",
     (0, 0, 0, 0, 0, 0, 0, 1), 1),
    ("ns::f(Tensor(a) self) -> Tensor(a)", (0,), 1),
    ("ns::g() -> ()", (), 0),
])
def test_parse(text, mask, returns):
    s = operators.parse(text)
    assert s.written_mask == tuple(map(bool, mask)) and len(s.returns) == returns
    lists = [a.name for a in s.arguments if a.tensor_list]
    assert lists == (["out"] if "[] out" in text else [])


@pytest.mark.parametrize("text", ["", "aten::x", "aten::x(Tensor a", "aten::x(Tensor a) Tensor",
                                  "aten::x(Tensor) -> Tensor", "aten::x(Tensor a]) -> ()",
                                  "aten::x(str a=\"oops) -> ()"])
def test_parse_refuses_what_is_not_a_schema(text):
    with pytest.raises(ValueError):
        operators.parse(text)


# ----------------------------------------------------- reads and writes of kernel calls


def oracle_split(plan, args, schema) -> tuple[set[int], set[int]]:
    """(reads, writes) of a kernel call: argument i written when torch's schema argument i
    is, the trailing return values written; tensor lists expanded to their members."""
    n = len(schema.arguments)
    written = [i >= n or bool(schema.arguments[i].alias_info
                              and schema.arguments[i].alias_info.is_write)
               for i in range(len(args))]

    def expand(v: int) -> list[int]:
        val = plan.values[v].val
        if type(val).__name__ in ("TensorList", "OptionalTensorList"):
            return [x for x in val.items if 0 <= x < len(plan.values)]
        return [v]

    writes = {x for a, w in zip(args, written) if w for x in expand(a)}
    reads = {x for a, w in zip(args, written) if not w for x in expand(a)}
    return reads, writes


@pytest.mark.oracle
@pytest.mark.parametrize("path", programs(), ids=lambda p: p.name)
def test_kernel_reads_and_writes_follow_torchs_schema(path, torch_registry):
    torch, _ = torch_registry
    prog = deserialized(path)
    ins = wb.open(path).frames["instructions"]
    kernels = ins[ins["kind"] == "kernel"]
    for plan in prog.execution_plan:
        rows = kernels[kernels["method"].astype(str) == plan.name]
        for r in rows.itertuples(index=False):
            schema = torch_schema(torch, r.op)
            if schema is None:  # emitter-made prim ops, custom ops nobody registers
                assert r.alias_source != "schema" or operators.schema(r.op) is not None
                continue
            assert r.alias_source == "schema", r.op
            reads, writes = oracle_split(plan, r.args, schema)
            assert (set(r.reads), set(r.writes)) == (reads, writes), (path.name, r.op)


def tensor_nbytes(plan, v: int) -> int:
    import torch

    from workbench.dtypes import SCALAR_TYPES

    t = plan.values[v].val
    dt = getattr(torch, SCALAR_TYPES[int(t.scalar_type)].name)
    return math.prod(t.sizes) * torch.empty((), dtype=dt).element_size()


@pytest.mark.oracle
@pytest.mark.slow
def test_timeline_bytes_of_multi_output_kernels(torch_registry, tmp_path):
    """On a program made by the real exporter with the four multi-output kernels, run on the
    runtime: every kernel row's read and write bytes equal the schema-derived truth (each
    output once, none counted as read), by event and by instruction."""
    torch, _ = torch_registry
    path = SAMPLES / "multi_output.pte"
    plan = deserialized(path).execution_plan[0]
    trace = tmp_path / "trace.etdp"
    t = wb.run(path, iterations=2, etdump=str(trace))
    k = t[t["kind"] == "kernel"]
    assert set(MULTI_OUTPUT) <= set(k["op"])
    assert (k.groupby(["instruction", "name"]).size() == 2).all()  # both iterations attributed
    for r in k.itertuples(index=False):
        args = plan.chains[r.chain].instructions[r.instruction].instr_args.args
        reads, writes = oracle_split(plan, args, torch_schema(torch, r.op))
        tensor = {v for v in reads | writes if type(plan.values[v].val).__name__ == "Tensor"}
        assert r.write_bytes == sum(tensor_nbytes(plan, v) for v in writes & tensor), r.op
        assert r.read_bytes == sum(tensor_nbytes(plan, v) for v in reads & tensor), r.op
        assert r.write_bytes > 0 and r.alias_source == "schema"
        assert set(r.write_names).isdisjoint(r.read_names)
    stats = wb.timeline(path, trace, by="instruction")
    stats = stats[stats["kind"] == "kernel"]
    for col in ("read_bytes", "write_bytes"):
        assert stats.groupby("instruction")[col].agg(set).to_dict() == \
            k.groupby("instruction")[col].agg(set).to_dict()


def test_an_unknown_operator_is_guessed_and_says_so(monkeypatch):
    """Without the table (an operator it does not know), the writes are a guess and each
    row says which rule made it: never a silent guess."""
    path = SAMPLES / "mlp_portable.pte"
    known = wb.open(path).frames["instructions"]
    assert set(known["alias_source"]) == {"schema"}
    monkeypatch.setattr(operators, "schema", lambda op: None)
    guessed = wb.open(path).frames["instructions"]
    assert set(guessed["alias_source"]) == {"guessed: returned values"}
    # for these single-output out variants the guess and the schema agree
    assert guessed["writes"].tolist() == known["writes"].tolist()
