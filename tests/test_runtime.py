"""Running programs for real (``workbench.runtime``): the kernel libraries a program needs,
missing kernels named before anything runs, default inputs of LLM programs, the child-process
runner, and ExecuTorch's selective-build ``selected_operators.yaml``.

Oracles, computed in the tests: ExecuTorch's runtime itself (``_get_operator_names()`` after
importing each library; running the programs), its deserializer (constant methods' values,
kernel calls), its selective-build binding (``_get_io_metadata_for_program_operators``) and
torchgen's ``SelectiveBuilder``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import workbench as wb
from workbench import cli, llm, operators, runtime
from workbench.runtime import _registry

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_models"
LLM = ("llm_tiny.pte", "llm_tiny_external.pte")

pytestmark = pytest.mark.oracle


def sample(name: str) -> Path:
    path = SAMPLES / name
    if not path.is_file():
        pytest.fail(f"{name} missing: run sample_models/make_samples.py / make_llm.py")
    return path


def deserialized(path: Path):
    ser = pytest.importorskip("executorch.exir._serialize._program")
    p = ser.deserialize_pte_binary(path.read_bytes())
    return getattr(p, "program", p)


def registered_in_fresh_process(modules: list[str]) -> set[str]:
    """The runtime's registered operators after importing ``modules``, asked in a process of
    the test's own (not through workbench)."""
    code = ("import importlib, json, sys\n"
            "from executorch.extension.pybindings import portable_lib as p\n"
            "for m in json.loads(sys.argv[1]): importlib.import_module(m)\n"
            "print(json.dumps(sorted(p._get_operator_names())))\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(modules)], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


# ------------------------------------------------------------------------- the registry


def test_registry_equals_what_the_runtime_registers():
    reg = runtime.registered_operators()
    base = registered_in_fresh_process([])
    assert reg.base == base
    mods = operators.library_modules()
    every = registered_in_fresh_process([mods["quantized"], mods["llm_custom_ops"]])
    union = set(reg.base).union(*reg.by_library.values())
    assert union == every
    assert "llama::custom_sdpa.out" in reg.by_library["llm_custom_ops"]
    assert "quantized_decomposed::embedding_4bit.dtype_out" in reg.by_library["quantized"]
    assert reg.provider("aten::add.out") == "portable"


def test_registry_is_cached_on_disk(monkeypatch):
    """A second process (here: the in-memory cache cleared) reads the answer from the cache
    instead of starting the runtime again."""
    runtime.registered_operators()
    monkeypatch.setattr(_registry, "_REGISTRY", {})

    def no_child(*a, **k):
        raise AssertionError("the runtime was asked again")

    monkeypatch.setattr(_registry, "run_child", no_child)
    assert "aten::add.out" in runtime.registered_operators().base


# ------------------------------------------------------------------- kernels a program needs


@pytest.mark.parametrize("name", LLM)
def test_llm_program_needs_the_quantized_and_llm_libraries(name):
    libs = runtime.libraries_for(sample(name))
    assert set(libs) == {"quantized", "llm_custom_ops"}
    k = runtime.kernels(sample(name))
    assert k["registered"].all()
    prog = deserialized(sample(name))
    calls = {}
    for plan in prog.execution_plan:
        for chain in plan.chains:
            for ins in chain.instructions:
                if type(ins.instr_args).__name__ == "KernelCall":
                    o = plan.operators[ins.instr_args.op_index]
                    op = f"{o.name}.{o.overload}" if o.overload else o.name
                    calls[op] = calls.get(op, 0) + 1
    assert dict(zip(k["op"], k["uses"])) == calls
    assert set(k.loc[k["library"] == "llm_custom_ops", "op"]) >= {
        "llama::update_cache.out", "llama::custom_sdpa.out"}


def test_missing_kernel_is_named_before_anything_runs(capsys):
    """custom_op.pte (made by the real exporter) calls an operator no kernel library provides:
    wb.run refuses with MissingKernelError naming it, validate() warns, `workbench kernels`
    exits 1."""
    path = sample("custom_op.pte")
    k = runtime.kernels(path)
    missing = k.loc[~k["registered"].astype(bool), "op"].tolist()
    assert len(missing) == 1 and missing[0].startswith("workbench_demo::")
    assert runtime.missing_kernels(path) == {missing[0]: None}
    # the oracle: the runtime really lacks it, even with every library imported
    every = registered_in_fresh_process(list(operators.library_modules().values())[1:])
    assert missing[0] not in every
    with pytest.raises(wb.MissingKernelError) as e:
        wb.run(path, iterations=1)
    assert isinstance(e.value, wb.ArtifactError)
    assert e.value.missing == {missing[0]: None}
    assert missing[0] in str(e.value) and "custom_op.pte" in str(e.value)
    found = wb.open(path).validate()
    hit = found[found["structure"] == f"operator {missing[0]!r}"]
    assert hit["severity"].tolist() == ["warning"] and "0x14" in hit["message"].iloc[0]
    assert cli.main(["kernels", str(path)]) == 1
    assert missing[0] in capsys.readouterr().err


def test_missing_kernel_names_the_library_that_would_provide_it(monkeypatch):
    """When a known library's import fails here, the error says which library provides the
    operator and why it is not there."""
    reg = runtime.registered_operators()
    broken = runtime.Registry(base=reg.base, by_library={"quantized": frozenset(),
                                                         "llm_custom_ops": frozenset()},
                              errors={"llm_custom_ops": "ImportError: no .so"},
                              modules=reg.modules)
    monkeypatch.setattr(_registry, "registered_operators", lambda refresh=False: broken)
    with pytest.raises(wb.MissingKernelError) as e:
        runtime.check_kernels(sample("llm_tiny.pte"))
    assert "llama::custom_sdpa.out" in e.value.missing
    assert e.value.missing["llama::custom_sdpa.out"] == "llm_custom_ops"
    assert "import failed here: ImportError: no .so" in str(e.value)


def test_no_runtime_installed_says_the_kernels_could_not_be_checked(monkeypatch):
    monkeypatch.setattr(_registry, "_executorch_files", lambda: None)
    monkeypatch.setattr(_registry, "_REGISTRY", {})
    found = wb.open(sample("mlp_portable.pte")).validate()
    hit = found[found["structure"] == "operator table"]
    assert hit["severity"].tolist() == ["info"]
    assert "executorch is not installed" in hit["message"].iloc[0]
    assert runtime.kernels(sample("mlp_portable.pte"))["registered"].isna().all()


# ------------------------------------------------------------------------- running them


@pytest.mark.slow
@pytest.mark.parametrize("name", LLM)
def test_run_an_llm_program(name):
    """Both LLM programs run on the runtime: 2 iterations, the llama:: kernels and the XNNPACK
    delegates in the timeline, inputs valid for the program (positions 0..n-1)."""
    t = wb.run(sample(name), iterations=2)
    assert set(t.attrs["kernel_libraries"]) == {"quantized", "llm_custom_ops"}
    k = t[t["kind"] == "kernel"]
    ops = set(k["op"].dropna())
    assert {"llama::update_cache.out", "llama::custom_sdpa.out"} <= ops
    assert (k.groupby(["instruction", "name"]).size() == 2).all()
    d = t[(t["kind"] == "delegate") & (t["backend"] == "XnnpackBackend")]
    n_delegates = int((wb.open(sample(name)).frames["instructions"]["kind"] == "delegate").sum())
    assert d["instruction"].nunique() == n_delegates
    assert t.attrs["outputs"][0]["finite"] is True
    (tokens, positions) = t.attrs["inputs"]
    assert tokens["dtype"] == positions["dtype"] == "int64"


@pytest.mark.slow
def test_run_takes_the_users_inputs():
    import torch

    t = wb.run(sample("mlp_portable.pte"), iterations=1, inputs=[torch.ones(2, 16)])
    assert t.attrs["inputs"] == [{"shape": [2, 16], "dtype": "float32", "finite": True}]
    with pytest.raises(runtime.RuntimeFailure, match="phase 'execute'"):
        wb.run(sample("mlp_portable.pte"), iterations=1, inputs=[torch.ones(3, 5)])


@pytest.mark.slow
@pytest.mark.parametrize("name", LLM)
def test_profile_runtime_paths_run_llm_programs(name):
    paths = ["executorch_runtime", "executorch_buffer"]
    prof = wb.profile(sample(name), paths=paths, repeat=1, isolation="spawn")
    rows = prof.frame.set_index("path")
    assert (rows.loc[paths, "status"] == "ok").all(), rows.loc[paths, ["status", "error"]]


def test_int_limit_and_default_inputs_of_an_llm_program():
    prog = deserialized(sample("llm_tiny.pte"))
    plans = {p.name: p for p in prog.execution_plan}

    def const(name):
        p = plans[name]
        return p.values[p.outputs[0]].val

    want = min(const("get_max_seq_len").int_val, const("get_vocab_size").int_val)
    assert runtime.int_limit(sample("llm_tiny.pte")) == want
    assert runtime.int_limit(sample("mlp_portable.pte")) is None
    m = wb.open(sample("llm_tiny.pte")).frames["methods"].set_index("method")
    for name in ("get_max_seq_len", "get_vocab_size", "get_n_layers", "get_max_context_len"):
        assert m.loc[name, "constant_value"] == const(name).int_val
    for name in ("use_kv_cache", "use_sdpa_with_kv_cache", "enable_dynamic_shape"):
        assert m.loc[name, "constant_value"] is const(name).bool_val
    assert m.loc["forward", "constant_value"] is None


def test_constant_values_of_multi_method():
    m = wb.open(sample("multi_method.pte")).frames["methods"].set_index("method")
    assert m.loc["get_version", "constant_value"] == 3
    assert m.loc["get_dims", "constant_value"] == (16, 8)
    assert m.loc["get_scale", "constant_value"] == 0.5
    assert m.loc["use_bias", "constant_value"] is True


# ------------------------------------------------------------------------- selective build


@pytest.mark.parametrize("name", ["mlp_portable.pte", "kv_cache.pte", "multi_output.pte", *LLM])
def test_selected_operators_yaml_round_trips_through_torchgen(tmp_path, name):
    yaml = pytest.importorskip("yaml")
    selector_mod = pytest.importorskip("torchgen.selective_build.selector")
    sb = pytest.importorskip("executorch.codegen.tools.selective_build")
    path = sample(name)
    out = tmp_path / "selected_operators.yaml"
    assert cli.main(["kernels", str(path), "-o", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    selector = selector_mod.SelectiveBuilder.from_yaml_dict(data)
    program = sb._get_program_from_buffer(path.read_bytes())
    want = set(sb._get_program_operators(program))
    assert set(selector.operators) == want
    for op in want:
        assert selector.is_operator_selected(op)
    assert not selector.is_operator_selected("aten::definitely_not_used.out")
    # et_kernel_metadata: what ExecuTorch's own selective-build binding derives
    io = sb._get_io_metadata_for_program_operators(program)
    for op, specs in io.items():
        keys = {"v1/" + "|".join(f"{m.dtype};{','.join(map(str, m.dim_order))}"
                                 for m in spec if m.kernel_type in (5, 10, 11)) for spec in specs}
        assert set(data["et_kernel_metadata"][op]) == keys, op
        assert selector.et_get_selected_kernels(op, sorted(keys)) != []


# ------------------------------------------------------------------------- LLM structure


@pytest.mark.parametrize("name", LLM)
def test_llm_parts(name):
    path = sample(name)
    m = wb.open(path).frames["methods"].set_index("method")
    n_layers = m.loc["get_n_layers", "constant_value"]
    parts = llm.parts(path)
    assert parts["part"].tolist() == ["embedding", *[f"layer {i}" for i in range(n_layers)],
                                      "lm_head"]
    per = llm.instruction_parts(path)
    for i in range(n_layers):  # one attention call per layer
        rows = per[per["part"] == f"layer {i}"]
        assert rows["op"].astype(object).isin(list(llm.ATTENTION)).sum() == 1
    # the layers hold the same weights: equal bytes (layer 0 also reads the RoPE tables)
    body = parts.set_index("part")["bytes"]
    assert body[f"layer {n_layers - 1}"] > 0
    assert parts["bytes"].sum() == per["bytes"].sum()
    assert abs(parts["share"].sum() - 1) < 1e-9


def test_8da4w_weights_are_int4_groupwise_and_dequantize_like_the_reference(tmp_path):
    """The LM head of llm_tiny.pte (an 8da4w XNNPACK constant): int4, groups of 32, bf16
    scales; our dequantized view equals the reference op (quantized_decomposed::
    dequantize_per_channel_group on the stored ints and scales) and stays close to the float
    weights the exporter was given (regenerated from make_llm.py's seed)."""
    import importlib.util

    import numpy as np
    import torch

    pytest.importorskip("torchao")
    from workbench.formats.delegates.quant import scale_values, unpack_int4

    spec = importlib.util.spec_from_file_location("make_llm", SAMPLES / "make_llm.py")
    make_llm = importlib.util.module_from_spec(spec)
    sys.modules["make_llm"] = make_llm  # (its dataclasses look their module up)
    spec.loader.exec_module(make_llm)
    shape = make_llm.SHAPES["tiny"]
    vocab, dim, gs = shape.params["vocab_size"], shape.params["dim"], shape.group_size
    art = wb.open(sample("llm_tiny.pte"))
    dt = art.frames["delegate_tensors"]
    row = dt[dt["shape"] == (vocab, dim)].iloc[0]
    assert (row["dtype"], row["quant"], row["group_size"], row["scale_dtype"]) == (
        "int4", "per_channel_group", gs, "bfloat16")
    assert row["num_scales"] == vocab * dim // gs
    ours = art.tensor(row["name"], dequantize=True)
    q = unpack_int4(np.asarray(art.tensor(row["name"])).tobytes(), (vocab, dim))
    raw = art.sources[row["scale_file"]].readinto(int(row["scale_offset"]),
                                                  np.empty(int(row["scale_nbytes"]), np.uint8),
                                                  "scales")
    scales = torch.from_numpy(scale_values(raw, "bfloat16").reshape(vocab, dim // gs).copy())
    import executorch.exir.passes  # noqa: F401 - registers quantized_decomposed ops

    ref = torch.ops.quantized_decomposed.dequantize_per_channel_group(
        torch.from_numpy(q.astype(np.int8)), scales, None, -8, 7, torch.int8, gs, torch.float32)
    assert np.array_equal(ref.numpy(), ours)
    make_llm.write_random_checkpoint(shape, tmp_path / "w.pth", 0)
    w = torch.load(tmp_path / "w.pth", weights_only=True)["output.weight"].float().numpy()
    step = np.repeat(scales.numpy(), gs, axis=1)
    assert np.abs(ours - w).max() <= 2 * step.max()  # within the quantization step
    assert np.linalg.norm(ours - w) / np.linalg.norm(w) < 0.15
