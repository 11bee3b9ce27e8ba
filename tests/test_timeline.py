"""Where time goes: the instructions / lifetimes / memory_efficiency frames of a program and
``wb.timeline`` / ``wb.run`` / ``workbench timeline``.

Oracles, computed in the tests: ExecuTorch's own deserializer (``deserialize_pte_binary``: the
instructions and their arguments), the Inspector (event names and raw durations; with the
ETRecord its ``op_types`` per instruction) on the samples made by
``sample_models/make_traces.py``, and the ExecuTorch runtime (``wb.run``).
"""

from __future__ import annotations

import io
import json
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from helpers import read_tier

import workbench as wb
from workbench import cli, memory_plan, readpath
from workbench.formats.pte import instructions as pte_instructions
from workbench.frames import SCHEMAS

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"
TRACES = ("mlp_portable", "mlp_xnnpack")
PROGRAM_FRAMES = ("instructions", "lifetimes", "memory_efficiency")


def sample(name: str) -> Path:
    path = SAMPLES / name
    if not path.is_file():
        pytest.skip(f"{name} missing: run sample_models/make_samples.py / make_traces.py")
    return path


def programs() -> list[Path]:
    return sorted(SAMPLES.glob("*.pte"))


def deserialized(path: Path):
    ser = pytest.importorskip("executorch.exir._serialize._program")
    p = ser.deserialize_pte_binary(path.read_bytes())
    return getattr(p, "program", p)


def inspector(etdp: Path, etrecord: Path | None = None):
    devtools = pytest.importorskip("executorch.devtools")
    from executorch.devtools.inspector import TimeScale

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return devtools.Inspector(etdump_path=str(etdp),
                                  etrecord=str(etrecord) if etrecord else None,
                                  source_time_scale=TimeScale.NS, target_time_scale=TimeScale.NS)


# ----------------------------------------------------------------------- program frames


@pytest.mark.parametrize("path", programs(), ids=lambda p: p.name)
def test_instructions_equal_the_deserializer(path):
    """Every instruction: kind, operator / delegate index, arguments as ExecuTorch reads them."""
    prog = deserialized(path)
    ins = wb.open(path).frames["instructions"]
    want = []
    for plan in prog.execution_plan:
        for c, chain in enumerate(plan.chains):
            for i, x in enumerate(chain.instructions):
                a = x.instr_args
                kind = type(a).__name__
                if kind == "KernelCall":
                    op = plan.operators[a.op_index]
                    row = ("kernel", a.op_index, f"{op.name}.{op.overload}" if op.overload
                           else op.name, None, tuple(a.args))
                elif kind == "DelegateCall":
                    row = ("delegate", None, None, plan.delegates[a.delegate_index].id,
                           tuple(a.args))
                elif kind == "MoveCall":
                    row = ("move", None, None, None, (a.move_from, a.move_to))
                elif kind == "JumpFalseCall":
                    row = ("jump_false", None, None, None, (a.cond_value_index,))
                else:
                    row = ("free", None, None, None, (a.value_index,))
                want.append((plan.name, c, i, *row))
    ours = [(str(r.method), r.chain, r.instruction, str(r.kind),
             None if pd.isna(r.op_index) else int(r.op_index),
             None if pd.isna(r.op) else r.op, None if pd.isna(r.delegate) else r.delegate,
             r.args) for r in ins.itertuples(index=False)]
    assert ours == want
    # reads and writes split the arguments (duplicates once), tensor lists expanded to their
    # members as ExecuTorch's deserializer reads them
    values = {plan.name: plan.values for plan in prog.execution_plan}
    for r in ins.itertuples(index=False):
        vals = values[str(r.method)]
        expanded = set()
        for v in r.args:
            val = vals[v].val if 0 <= v < len(vals) else None
            if type(val).__name__ in ("TensorList", "OptionalTensorList"):
                expanded |= {x for x in val.items if 0 <= x < len(vals)}
            else:
                expanded.add(v)
        assert set(r.reads) | set(r.writes) == expanded


@pytest.mark.parametrize("path", programs(), ids=lambda p: p.name)
def test_frames_follow_the_schemas_and_fast_equals_slow(path, monkeypatch):
    frames = {}
    for fast in (True, False):
        monkeypatch.setattr(readpath, "TIER", read_tier(fast))
        art = wb.open(path)
        frames[fast] = {n: art.frames[n] for n in PROGRAM_FRAMES}
    for name in PROGRAM_FRAMES:
        df = frames[True][name]
        assert list(df.columns) == [c.name for c in SCHEMAS[name] if c.name in df.columns]
        pd.testing.assert_frame_equal(df, frames[False][name])


def test_writes_of_kernels_and_delegates():
    ins = wb.open(sample("mlp_portable.pte")).frames["instructions"]
    # out variants: the out argument (passed again as the return value) is written
    assert [w for w in ins["writes"]] == [(a[-1],) for a in ins["args"]]
    x = wb.open(sample("mlp_xnnpack.pte")).frames["instructions"]
    assert x["reads"].tolist() == [(0,)] and x["writes"].tolist() == [(1,)]
    kv = wb.open(sample("kv_cache.pte")).frames["instructions"]
    copies = kv[kv["op"] == "aten::copy_"]
    assert len(copies) == 2  # in place: copy_(self, src, non_blocking) returns self
    for r in copies.itertuples():
        assert r.writes == (r.args[0],)


def test_lifetimes_of_kv_cache_against_the_deserialized_uses():
    """first / last use of every planned value: recomputed from ExecuTorch's deserialized
    instructions (TensorList members count as used)."""
    path = sample("kv_cache.pte")
    plan = deserialized(path).execution_plan[0]
    uses: dict[int, list[int]] = {}
    for p, x in enumerate(plan.chains[0].instructions):
        for v in x.instr_args.args:
            val = plan.values[v].val
            members = list(val.items) if type(val).__name__ in ("TensorList",
                                                                 "OptionalTensorList") else [v]
            for m in members:
                uses.setdefault(m, []).append(p)
    planned = {v: x.val.allocation_info for v, x in enumerate(plan.values)
               if type(x.val).__name__ == "Tensor" and x.val.allocation_info is not None}
    lt = wb.open(path).frames["lifetimes"].set_index("value")
    assert set(lt.index) == set(planned)
    for v, info in planned.items():
        row = lt.loc[v]
        assert (row["mem_id"], row["offset"]) == (info.memory_id, info.memory_offset_low)
        if v in uses:
            assert (row["first"], row["last"]) == (min(uses[v]), max(uses[v])), v
        else:
            assert pd.isna(row["first"])
    n = len(plan.chains[0].instructions)
    # the caches are state kept between calls: live throughout
    assert lt.loc[lt["storage"] == "mutable", ["live_from", "live_to"]].values.tolist() == \
        [[0, n - 1]] * 2
    # views: value 14 (k reshaped, no instruction writes it) shares value 13's bytes, so the mm
    # output 13 stays live until 14 is read at instruction 8; the input x (6) is read only
    # through its views (12, 19, 29), the last at instruction 6
    assert (lt.loc[14, "offset"], lt.loc[14, "nbytes"]) == (lt.loc[13, "offset"],
                                                            lt.loc[13, "nbytes"])
    assert lt.loc[13, "last"] == 1 and lt.loc[13, "live_to"] == 8
    assert lt.loc[6, "live_to"] == 6 and pd.isna(lt.loc[6, "first"])


def test_memory_efficiency():
    eff = wb.open(sample("kv_cache.pte")).frames["memory_efficiency"]
    plan = deserialized(sample("kv_cache.pte")).execution_plan[0]
    assert eff["arena_bytes"].tolist() == list(plan.non_const_buffer_sizes[1:])
    assert (eff["peak_live_bytes"] <= eff["high_water"]).all()
    assert (eff["high_water"] <= eff["arena_bytes"]).all()
    assert eff["peak_exact"].all()
    # a hand count on mlp_portable: at addmm (instruction 1) x (128 B), the permuted weight
    # (2048 B) and the output (256 B) are live: 2432 bytes, the whole arena
    e = wb.open(sample("mlp_portable.pte")).frames["memory_efficiency"].iloc[0]
    assert (e["arena_bytes"], e["peak_live_bytes"], e["peak_at"], e["efficiency"]) == \
        (2432, 2432, 1, 1.0)


def test_peak_counts_aliased_ranges_once_and_falls_back_to_a_sum(monkeypatch):
    import numpy as np

    lo, hi = np.array([0, 0, 1]), np.array([2, 2, 1])
    off, nb = np.array([0, 0, 100]), np.array([64, 64, 8])
    assert memory_plan.peak(lo, hi, off, nb) == (72, 1, True)
    monkeypatch.setattr(memory_plan, "MAX_UNION_WORK", 0)
    assert memory_plan.peak(lo, hi, off, nb) == (136, 1, False)


# ----------------------------------------------------------------------------- the join


@pytest.mark.parametrize("which", TRACES)
def test_timeline_events_equal_the_inspector(which):
    """Event counts, names and raw durations per event equal the Inspector's."""
    etdp = sample(f"{which}.etdp")
    t = wb.timeline(sample(f"{which}.pte"), etdp)
    ev = wb.open(etdp).frames["events"]
    assert len(t) == len(ev)
    ins = inspector(etdp)
    theirs = Counter()
    for block in ins.event_blocks:
        for e in block.events:
            if e.perf_data is not None:
                theirs.update((e.name, int(x)) for x in e.perf_data.raw)
    ours = Counter((str(n), int(d)) for n, d in zip(t["name"], t["duration"]))
    assert ours == theirs
    assert set(t["attribution"]) <= {"exact", "framework"}
    assert set(t.loc[t["kind"] != "framework", "method"]) == {"forward"}


@pytest.mark.parametrize("which", TRACES)
def test_instructions_map_to_the_inspectors_operators(which):
    """With the ETRecord, each (chain, instruction) names the ops the Inspector gives it."""
    etdp, rec = sample(f"{which}.etdp"), sample(f"{which}.etrecord")
    t = wb.timeline(sample(f"{which}.pte"), etdp, rec)
    ins = inspector(etdp, rec)
    checked = 0
    for block in ins.event_blocks:
        for e in block.events:
            if not e.op_types or e._instruction_id is None:
                continue
            rows = t[(t["instruction"] == e._instruction_id) & (t["name"] == e.name)
                     & (t["chain"] >= 0)]
            assert len(rows), e.name
            assert set(rows["ops"]) == {"; ".join(e.op_types)}
            checked += 1
    assert checked
    # kernel events name the operator the program calls
    k = t[t["event"] == "kernel"]
    assert all(str(op).split("::")[-1] == str(n)[len("native_call_"):]
               for op, n in zip(k["op"], k["name"]))
    assert t.loc[t["kind"] != "framework", "module"].notna().all()
    if which == "mlp_xnnpack":
        assert set(t.loc[t["kind"] == "delegate", "backend"]) == {"XnnpackBackend"}


@pytest.mark.parametrize("which", TRACES)
def test_tensor_bytes_equal_the_tensors_frame(which):
    prog = wb.open(sample(f"{which}.pte"))
    tensors = prog.frames["tensors"].dropna(subset=["value"]).set_index("value")
    t = wb.timeline(prog, sample(f"{which}.etdp"))
    for r in t[t["kind"] != "framework"].itertuples():
        for side in ("read", "write"):
            vals = [v for v in getattr(r, side + "s") if v in tensors.index]  # no scalars
            assert getattr(r, side + "_bytes") == int(tensors.loc[list(vals), "nbytes"].sum())
            assert getattr(r, side + "_names") == tuple(tensors.loc[list(vals), "name"])
    storages = set(", ".join(t["storages"].dropna()).split(", "))
    assert storages <= {"constant", "planned", "external", "mutable", "named_data",
                        "unallocated"}
    assert "planned" in storages


def test_timeline_by_instruction_and_bpte():
    pte, etdp = sample("mlp_portable.pte"), sample("mlp_portable.etdp")
    s = wb.timeline(pte, etdp, by="instruction")
    runs = wb.open(etdp).frames["runs"]
    n_exec = int((runs["block"] == "Execute").sum())
    k = s[s["kind"] == "kernel"]
    assert len(k) == 2 * 5 and set(k["count"]) == {n_exec}
    t = wb.timeline(pte, etdp)
    one = t[(t["instruction"] == 1) & (t["name"] == "native_call_addmm.out")]["duration"]
    row = k[(k["instruction"] == 1) & (k["name"] == "native_call_addmm.out")].iloc[0]
    assert (row["total"], row["min"], row["max"]) == (one.sum(), one.min(), one.max())
    assert row["median"] == one.median()
    assert abs(k["share"].sum() - 1) < 1e-9  # shares of one kind add up to 1
    # the program inside a .bpte joins the same way
    b = wb.timeline(sample("mlp.bpte"), etdp)
    assert b["op"].equals(t["op"])
    with pytest.raises(wb.ArtifactError):
        wb.timeline(etdp, etdp)
    with pytest.raises(ValueError):
        wb.timeline(pte, etdp, by="op")


def test_ambiguous_attribution():
    """Two methods with the same first instructions: a block that fits both is ambiguous."""
    prog = sample("multi_method.pte")
    ev = wb.open(sample("mlp_portable.etdp")).frames["events"]
    t = wb.timeline(prog, sample("mlp_portable.etdp"))
    assert set(t.loc[t["kind"] == "kernel", "attribution"]) == {"exact"}  # 5 instructions
    short = SimpleNamespace(format="etdump", frames={"events": ev[ev["instruction"] < 3]})
    t = wb.timeline(prog, short)
    k = t[t["kind"] == "kernel"]
    assert set(k["attribution"]) == {"ambiguous"}
    assert set(k["candidates"]) == {"encode; forward"}


# ------------------------------------------------------------------------- wb.run and CLI


@pytest.mark.slow  # a fuzz loop / runtime run: seconds (the mutation runs skip it)
def test_run_records_the_kernel_events():
    pytest.importorskip("executorch.extension.pybindings.portable_lib")
    t = wb.run(sample("mlp_portable.pte"), iterations=2)
    k = t[t["event"] == "kernel"]
    assert Counter(k["op"]) == {"aten::permute_copy.out": 4, "aten::addmm.out": 4,
                                "aten::relu.out": 2}
    assert (k["attribution"] == "exact").all()
    assert set(t.loc[t["kind"] == "framework", "name"]) == {
        "Method::init", "Program::load_method", "Method::execute"}
    assert (t["duration"].dropna() >= 0).all()


@pytest.mark.slow  # a fuzz loop / runtime run: seconds (the mutation runs skip it)
def test_run_reports_a_runtime_failure(tmp_path):
    """A crash or refusal in the runtime (here: XNNPACK weights looked up in the wrong .ptd)
    happens in the child: an error here, the interpreter lives on."""
    pytest.importorskip("executorch.extension.pybindings.portable_lib")
    with pytest.raises(RuntimeError, match="runtime failed"):
        wb.run(sample("mlp_xnnpack_external.pte"), iterations=1,
               data=sample("mlp_external.ptd"))
    bad = tmp_path / "bad.pte"
    bad.write_bytes(sample("mlp_portable.pte").read_bytes()[:200])
    with pytest.raises(wb.ArtifactError):
        wb.run(bad, iterations=1)


def test_cli_timeline(tmp_path, capsys):
    pte, etdp, rec = (sample(f"mlp_xnnpack.{x}") for x in ("pte", "etdp", "etrecord"))
    out = tmp_path / "t.csv"
    assert cli.main(["timeline", str(pte), str(etdp), "--etrecord", str(rec), "--format", "csv",
                     "--out", str(out)]) == 0
    df = pd.read_csv(out)
    assert len(df) == len(wb.open(etdp).frames["events"])
    assert "Fully Connected (NC, F32) GEMM #1" in set(df["name"])
    assert cli.main(["timeline", str(pte), str(etdp), "--by", "instruction", "--format",
                     "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["kind"] for r in rows} == {"delegate", "framework"}
    assert cli.main(["timeline", str(pte), str(etdp)]) == 0
    assert "XnnpackBackend" in capsys.readouterr().out
    assert cli.main(["timeline", str(etdp), str(etdp)]) == 1
    assert cli.main(["inspect", str(etdp)]) == 0
    assert "etdump" in capsys.readouterr().out
    assert cli.main(["inspect", str(etdp), "--frame", "events", "--format", "csv"]) == 0
    assert len(pd.read_csv(io.StringIO(capsys.readouterr().out))) == len(
        wb.open(etdp).frames["events"])


# ------------------------------------------------------------------------------------ plots


def test_plots_of_time_and_memory_over_time():
    from workbench import plots

    t = wb.timeline(sample("mlp_portable.pte"), sample("mlp_portable.etdp"))
    fig = plots.timeline(t)
    last = int(t.loc[t["block"] == "Execute", "run"].max())
    marks = [p for p in fig.axes[0].patches if p.get_gid() == "event"]
    assert len(marks) == (t["run"] == last).sum()
    assert {p.get_label() for p in marks} == {"kernel", "framework"}
    fig = plots.operators(t)
    bars = [p for p in fig.axes[0].patches if p.get_gid() == "operator"]
    assert len(bars) == 3  # permute_copy, addmm, relu
    art = wb.open(sample("kv_cache.pte"))
    fig = plots.lifetimes(art)
    lt = art.frames["lifetimes"]
    marks = [p for p in fig.axes[0].patches if p.get_gid() == "tensor"]
    assert len(marks) == lt["live_from"].notna().sum()
    assert sorted((p.get_x(), p.get_y()) for p in marks) == sorted(
        zip(lt["live_from"].astype(int), lt["offset"]))
    with pytest.raises(KeyError):
        plots.lifetimes(art, method="nope")
    x = wb.timeline(sample("mlp_xnnpack.pte"), sample("mlp_xnnpack.etdp"))
    assert {p.get_label() for p in plots.timeline(x).axes[0].patches
            if p.get_gid() == "event"} == {"delegate", "framework"}


# ----------------------------------------------------------------------- the vectorised walk


def _random_plan(rng, rows: int, arenas: int, slots: int, instructions: int):
    """A random memory plan: rows placed in a few reused byte ranges (as planners do), some
    written by an instruction, some inputs, some of no bytes."""
    import numpy as np

    mem = rng.integers(0, arenas, rows)
    lo = rng.integers(0, slots, rows) * 16
    hi = lo + rng.choice([0, 16, 32, 64], rows, p=[0.05, 0.45, 0.3, 0.2])
    w = np.where(rng.random(rows) < 0.5, rng.integers(0, instructions, rows), -1)
    inputs = (w < 0) & (rng.random(rows) < 0.1)
    start = rng.integers(0, instructions + 1, rows)
    views = np.flatnonzero((w < 0) & ~inputs)
    return views, mem, lo, hi, w, start, inputs


@pytest.mark.parametrize("seed", range(40))
def test_last_writers_fast_equals_the_sweep(seed):
    """The vectorised search for the tensor a view reads against the sweep, on random plans:
    aliasing writes, views and writes of no bytes, ties and inputs included (each of them
    takes one of the two ways)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    views, mem, lo, hi, w, start, inputs = _random_plan(
        rng, rows=int(rng.integers(1, 400)), arenas=int(rng.integers(1, 4)),
        slots=int(rng.integers(1, 12)), instructions=int(rng.integers(1, 60)))
    if seed % 2:  # no view and no write of zero bytes, no aliasing: the vectorised way
        hi = np.maximum(hi, lo + 16)
        _, first = np.unique(np.stack([mem, w]), axis=1, return_index=True)
        w = np.where(np.isin(np.arange(len(w)), first) | (w < 0), w, -1)
        views = np.flatnonzero((w < 0) & ~inputs)
    want = pte_instructions._last_writers(views, mem, lo, hi, w, start, inputs)
    k, base = pte_instructions._last_writers_fast(views, mem, lo, hi, w, start, inputs)
    assert dict(zip(k.tolist(), base.tolist())) == want


def test_returned_and_tuples_vectorised():
    import numpy as np

    rng = np.random.default_rng(5)
    count = rng.integers(0, 140, 300)  # beyond _VECTOR_RETURNS too
    flat = rng.integers(0, 4, int(count.sum()))  # small values: many repeats
    start = np.cumsum(count) - count
    args = [tuple(flat[s:s + c].tolist()) for s, c in zip(start, count)]
    got = pte_instructions._returned_many(flat, start, count, np.arange(len(count)))
    assert got.tolist() == [pte_instructions._returned(a) for a in args]
    assert list(pte_instructions._tuples(flat, count)) == args
    group = np.repeat(np.arange(len(count)), count)
    keep = pte_instructions._first_of_each(group, flat)
    kept = [tuple(flat[keep & (group == i)].tolist()) for i in range(len(count))]
    assert kept == [tuple(dict.fromkeys(a)) for a in args]


def test_last_writers_fast_ties_take_the_lowest_range():
    """One instruction writes two disjoint rows that a view overlaps: the sweep keeps the one
    lowest in the arena (its pieces come first), and so must the vectorised search."""
    import numpy as np

    for order in ((0, 1), (1, 0)):
        lo = np.array([[0, 16][order[0]], [0, 16][order[1]], 0, 64])
        hi = lo + np.array([16, 16, 32, 16])
        mem = np.zeros(4, np.int64)
        w = np.array([3, 3, -1, -1])
        start = np.array([0, 0, 5, 5])
        inputs = np.array([False, False, False, True])
        views = np.array([2])
        want = pte_instructions._last_writers(views, mem, lo, hi, w, start, inputs)
        k, base = pte_instructions._last_writers_fast(views, mem, lo, hi, w, start, inputs)
        assert dict(zip(k.tolist(), base.tolist())) == want == {2: int(np.argmin(lo[:2]))}


@pytest.mark.parametrize("op", [None, ("aten::topk", "values"), ("aten::relu", "out")])
@pytest.mark.parametrize("args", [(3, 3), (-1, 5, 5), (0,), (), tuple(range(-2, 8))])
def test_walk_of_a_method_without_values(args, op):
    """Arguments naming values a method does not have (a hostile program), with an operator
    the schema table knows or not: the vectorised walk splits them as the per-instruction
    walk does, and nothing is indexed out of range."""
    import numpy as np

    z = np.zeros(0, np.int64)
    m = SimpleNamespace(name="forward", vtypes=z, vpos=z, inputs=(), outputs=(),
                        tensors=SimpleNamespace(value=z, storage=z),
                        operators=[op] if op else [])
    flat = np.array(args, np.int64)
    rec = pte_instructions.MethodInstructions(
        np.zeros(1, np.int64), np.zeros(1, np.int64), np.array([1]), np.zeros(1, np.int64),
        flat, np.array([len(args)]), np.full(1, -1), np.zeros(1, np.int64))
    cols = pte_instructions.InstructionColumns.__new__(pte_instructions.InstructionColumns)
    cols._lists, cols._masks = {}, {}
    *want, alias = cols._rw_method(m, rec)
    walk = pte_instructions._Walk(None, m, rec, z, cols._written_masks(m))
    got = walk.reads_writes()
    assert [list(x) for x in got] == [list(x) for x in want]
    assert walk.alias_source().tolist() == alias.tolist()
    names = pte_instructions.ALIAS_SOURCES
    if op == ("aten::topk", "values"):  # 7 schema arguments, then the returns
        assert names[alias[0]] == ("schema" if len(args) >= 7 else
                                   "guessed: arguments differ from the schema")
    elif op is None:
        assert names[alias[0]].startswith("guessed: ")
    assert walk.first_write().tolist() == [] and len(walk.use_val) == 0


def test_node_and_module_lists_name_each_once():
    """An instruction's ETRecord nodes are listed once each, in first-seen order, though its
    rows repeat them per debug handle, and the model's top level (empty module path) is not
    named as a module."""
    import pandas as pd

    from workbench.timing import _handles

    class Rec:
        def __init__(self) -> None:
            self.frames = {
                "nodes": pd.DataFrame({"stage": ["edge"] * 3, "method": ["forward"] * 3,
                                       "name": ["a", "b", "c"], "module": ["", "blk.0", "blk.1"]}),
                "debug_handles": pd.DataFrame({
                    "method": ["forward"] * 5, "instruction": [0] * 5,
                    "debug_handle": [1, 1, 2, 2, 3], "node": ["a", "b", "a", "b", "c"],
                    "op": ["add", "mul", "add", "mul", "relu"]}),
                "delegate_map": pd.DataFrame({"method": [], "instruction": [],
                                              "delegate_debug_id": [], "debug_handle": [],
                                              "node": [], "op": []}),
            }

    (hs, nodes, ops, mods), = _handles(Rec()).values()
    assert hs == (1, 2, 3) and nodes == "a; b; c" and ops == "add; mul; relu"
    assert mods == "blk.0; blk.1"


@pytest.mark.parametrize("seed", range(5))
def test_peak_grid_equals_the_loop_over_positions(seed, monkeypatch):
    """memory_plan.peak's (position x byte piece) grid gives exactly what the loop over positions gives:
    the same peak, the same (first) position, aliases counted once, rows live nowhere
    (hi < lo) and empty tensors ignored."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(1, 40))
        lo = rng.integers(0, 25, n)
        hi = lo + rng.integers(-3, 20, n)
        off = rng.integers(0, 60, n) * rng.choice([1, 16])
        nb = rng.integers(0, 48, n)
        fast = memory_plan.peak(lo, hi, off, nb)
        monkeypatch.setattr(memory_plan, "MAX_PEAK_GRID", 0)
        loop = memory_plan.peak(lo, hi, off, nb)
        monkeypatch.undo()
        assert fast == loop
