"""Build LLM programs with ExecuTorch's own LLM exporter (``export_llm``), offline.

The programs are what people ship to phones: the llama3 architecture with a KV cache,
ExecuTorch's custom SDPA and cache-update kernels (``llama::custom_sdpa.out``,
``llama::update_cache.out``), the linear layers in XNNPACK delegates with 8-bit dynamic
activations and 4-bit groupwise weights ("8da4w"), and, in the ``_external`` variant, the
delegates' weights in a ``.ptd`` file (``export.foundation_weights_file``).

Usage::

    .venv/bin/python sample_models/make_llm.py                    # llm_tiny*.pte/.ptd here, verified
    .venv/bin/python sample_models/make_llm.py --no-verify --out /tmp/llm
    .venv/bin/python sample_models/make_llm.py --verify-only      # facts of the existing files
    .venv/bin/python sample_models/make_llm.py --size 1b          # ~/.cache/workbench-bench/llm_1b/llm_1b.pte
    .venv/bin/python sample_models/make_llm.py --size 1b --variants inline external

The exporter runs in a subprocess (``python -m executorch.extension.llm.export.export_llm``
with ``base.params=params.json`` and ``base.checkpoint=random_weights.pth``, both written by
this script into a scratch folder). Nothing is downloaded: the Hugging Face libraries are set
offline and, where ``unshare -rn`` works, the exporter runs in a network namespace with no
network at all.

Why a checkpoint: without one, export_llm builds the model on the meta device and calls
``to_empty()`` then ``reset_parameters()``, which leaves the tensors of modules without a
``reset_parameters`` (the RMSNorm weights) and the rotary tables (``rope.freqs_cos/sin``) as
*uninitialized* memory. Such a program stores whatever bytes malloc returned (seen here: heap
values like 1.02e14 in the norm weights, rotary tables 99.9% zeros, logits nearly constant with
std 7e-7 whatever the tokens) and is not reproducible. Here the weights come from
``torch.Generator().manual_seed(seed)`` (embedding N(0, 1), linear layers N(0, 1/fan_in),
norm weights 1 + N(0, 0.05**2); the exporter computes the rotary tables itself), so the same
seed gives the same bytes.

``--verify`` (on by default) checks each program in fresh subprocesses with
``executorch.runtime``: without the kernel libraries, ``load_method("forward")`` must fail with
OperatorMissing (0x14); after ``from executorch.extension.llm.custom_ops import custom_ops`` and
``from executorch.kernels import quantized`` it must run a prefill and one decode step and give
finite logits of shape ``[1, vocab]``; the inline and external variants must give identical
logits. It ends with a table of facts (sizes, delegates, non-delegated operators, constant
methods, what the runtime lacks without the imports).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: The exporter, run as ``python -m EXPORTER``.
EXPORTER = "executorch.extension.llm.export.export_llm"

#: The kernel libraries an export_llm program needs on the Python runtime, in import order:
#: (module to import, name to import from it, short name used in the facts).
KERNEL_LIBRARIES = (
    ("executorch.extension.llm.custom_ops", "custom_ops", "custom_ops"),
    ("executorch.kernels", "quantized", "quantized"),
)

#: Environment for the exporter: no Hugging Face network access.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "PYTHONHASHSEED": "0",
}


@dataclass(frozen=True)
class Shape:
    """One model shape and how export_llm is asked to export it."""

    stem: str
    model_class: str
    params: dict[str, Any]
    max_seq_length: int
    max_context_length: int
    group_size: int
    embedding_quantize: str | None
    default_out: Path
    default_variants: tuple[str, ...]
    minutes: str
    extra: tuple[str, ...] = field(default=())

    def file_names(self, variant: str) -> tuple[str, ...]:
        """The files one variant writes: ``("x.pte",)`` or ``("x_external.pte", "x_external.ptd")``."""
        if variant == "inline":
            return (f"{self.stem}.pte",)
        return (f"{self.stem}_external.pte", f"{self.stem}_external.ptd")


SHAPES: dict[str, Shape] = {
    # dim 256, 2 layers, 4 heads / 2 KV heads (GQA), vocab 4096. The embedding is quantized
    # too (4-bit, groups of 32): in fp32 it alone would be 4 MB.
    "tiny": Shape(
        stem="llm_tiny",
        model_class="llama3",
        params={
            "dim": 256,
            "n_layers": 2,
            "n_heads": 4,
            "n_kv_heads": 2,
            "vocab_size": 4096,
            "multiple_of": 256,
            "ffn_dim_multiplier": None,
            "norm_eps": 1e-05,
            "rope_theta": 500000.0,
            "use_scaled_rope": False,
        },
        max_seq_length=64,
        max_context_length=64,
        group_size=32,
        embedding_quantize="4,32",
        default_out=HERE,
        default_variants=("inline", "external"),
        minutes="about 2 min per program on 2 cores",
    ),
    # The llama3.2-1B shape (about 1.7 GB; never committed). fp32 embedding, as the
    # exporter's default; group size 128.
    "1b": Shape(
        stem="llm_1b",
        model_class="llama3_2",
        params={
            "dim": 2048,
            "n_layers": 16,
            "n_heads": 32,
            "n_kv_heads": 8,
            "vocab_size": 128256,
            "multiple_of": 256,
            "ffn_dim_multiplier": 1.5,
            "norm_eps": 1e-05,
            "rope_theta": 500000.0,
            "use_scaled_rope": True,
        },
        max_seq_length=128,
        max_context_length=128,
        group_size=128,
        embedding_quantize=None,
        default_out=Path.home() / ".cache" / "workbench-bench" / "llm_1b",
        default_variants=("inline",),
        minutes="about 20 min on 2 idle cores, 53 min measured on 2 busy ones",
    ),
}


# --------------------------------------------------------------------------- weights


def transformer_state_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the parameters of export_llm's own ``Transformer`` for ``shape``.

    Built on the meta device from the exporter's ``ModelArgs`` (nothing is allocated), so the
    checkpoint has exactly the keys the exporter expects.
    """
    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    args = ModelArgs(
        max_seq_len=shape.max_seq_length,
        max_context_len=shape.max_context_length,
        max_batch_size=1,
        use_kv_cache=True,
        **{k: v for k, v in shape.params.items() if v is not None},
    )
    with torch.device("meta"):
        model = construct_transformer(args)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def write_random_checkpoint(shape: Shape, path: Path, seed: int) -> int:
    """Write seeded random weights for ``shape`` to ``path`` (``torch.save`` of a state dict).

    Embedding N(0, 1); every other matrix N(0, 1/fan_in); vectors (the RMSNorm weights)
    1 + N(0, 0.05**2), so that no two layers share bytes (the emitter stores identical constants
    once). Tensors are drawn in sorted name order from one ``torch.Generator`` seeded with ``seed``.
    Returns the number of parameters.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    state: dict[str, torch.Tensor] = {}
    for name, dims in sorted(transformer_state_shapes(shape).items()):
        if len(dims) == 1:
            state[name] = 1.0 + 0.05 * torch.randn(dims, generator=generator)
        elif name.startswith("tok_embeddings."):
            state[name] = torch.randn(dims, generator=generator)
        else:
            state[name] = torch.randn(dims, generator=generator) / math.sqrt(dims[-1])
    torch.save(state, path)
    return sum(t.numel() for t in state.values())


# --------------------------------------------------------------------------- export


def can_isolate_network() -> bool:
    """Whether ``unshare -rn`` (a user + network namespace: no network) works here."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def exporter_overrides(shape: Shape, variant: str, params: Path, checkpoint: Path, out: Path) -> list[str]:
    """The export_llm (Hydra) command-line overrides for one variant."""
    pte_name = shape.file_names(variant)[0]
    overrides = [
        f"base.model_class={shape.model_class}",
        f"base.params={params}",
        f"base.checkpoint={checkpoint}",
        "model.use_kv_cache=True",
        "model.use_sdpa_with_kv_cache=True",
        "backend.xnnpack.enabled=True",
        "backend.xnnpack.extended_ops=True",
        "quantization.qmode=8da4w",
        f"quantization.group_size={shape.group_size}",
        f"export.max_seq_length={shape.max_seq_length}",
        f"export.max_context_length={shape.max_context_length}",
        f"export.output_dir={out}",
        f"export.output_name={pte_name}",
    ]
    if shape.embedding_quantize:
        # Hydra would read "4,32" as a list: quote it.
        overrides.append(f"quantization.embedding_quantize='{shape.embedding_quantize}'")
    if variant == "external":
        overrides.append(f"export.foundation_weights_file={shape.file_names(variant)[1]}")
    return overrides + list(shape.extra)


def run_exporter(command: list[str], cwd: Path, log: Path, env: dict[str, str], label: str) -> None:
    """Run the exporter, its output to ``log``; print a heartbeat with its latest log line."""
    start = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
        last = ""
        while True:
            try:
                process.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                line = latest_info_line(log)
                if line and line != last:
                    last = line
                    print(f"    {time.monotonic() - start:5.0f}s  {line}", flush=True)
    if process.returncode != 0:
        kept = Path(tempfile.gettempdir()) / f"export_llm_{label}.log"
        shutil.copy(log, kept)  # the scratch folder (and its log) is removed afterwards
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise RuntimeError(f"{label}: export_llm exited with {process.returncode}; log {kept}:\n"
                           + "\n".join(tail))
    print(f"    {label}: exported in {time.monotonic() - start:.0f}s", flush=True)


def latest_info_line(log: Path) -> str:
    """The last ``[INFO] - ...`` message of an export log (for the heartbeat)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 8192))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if "[INFO] - " in line:
            return line.split("[INFO] - ", 1)[1][:100]
    return ""


def build(shape: Shape, variants: Sequence[str], out: Path, seed: int, isolate: bool,
          keep: Path | None) -> None:
    """Export every variant of ``shape`` into ``out`` (files are moved there when complete)."""
    scratch = Path(tempfile.mkdtemp(prefix="make_llm_"))
    try:
        params = scratch / "params.json"
        params.write_text(json.dumps({k: v for k, v in shape.params.items() if v is not None}, indent=1))
        checkpoint = scratch / "random_weights.pth"
        count = write_random_checkpoint(shape, checkpoint, seed)
        print(f"  random weights: {count:,} parameters (seed {seed}), {checkpoint.stat().st_size:,} bytes")
        env = {**os.environ, **OFFLINE_ENV, "TMPDIR": str(scratch)}
        prefix = ["unshare", "-rn"] if isolate else []
        for variant in variants:
            work = scratch / variant
            work.mkdir()
            command = [*prefix, sys.executable, "-m", EXPORTER,
                       *exporter_overrides(shape, variant, params, checkpoint, work)]
            names = shape.file_names(variant)
            print(f"  export {' + '.join(names)} ({shape.minutes}"
                  f"{'; no network: unshare -rn' if isolate else ''}) ...", flush=True)
            log = work / "export_llm.log"
            run_exporter(command, work, log, env, names[0])
            for name in names:
                if not (work / name).is_file():
                    raise RuntimeError(f"export_llm did not write {name} (log {log})")
            for name in names:
                os.replace(work / name, out / name)
                print(f"  wrote {out / name}  {(out / name).stat().st_size:,} bytes")
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(log, keep / f"{names[0]}.log")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --------------------------------------------------------------------------- facts (ExecuTorch's reader)


def op_name(operator: Any) -> str:
    """``ns::name.overload`` as the runtime's registry spells it (no dot for an empty overload)."""
    return f"{operator.name}.{operator.overload}" if operator.overload else operator.name


def program_facts(pte: Path) -> dict[str, Any]:
    """What ExecuTorch's own deserializer says about ``pte``: delegates, operators, constants, layout.

    Parses only the program flatbuffer (``_flatbuffer_to_program`` on the bytes before the
    segments, as ``deserialize_pte_binary`` does before it moves segment data back into the
    program), so that where each piece is stored (inline or in a segment) stays visible.
    """
    from executorch.exir._serialize._program import _flatbuffer_to_program, _get_extended_header

    with pte.open("rb") as f:
        header = _get_extended_header(f.read(64))
        f.seek(0)
        data = f.read(header.program_size if header is not None and header.is_valid() else -1)
    program = _flatbuffer_to_program(data)
    facts: dict[str, Any] = {"constant_methods": {}, "plans": []}
    external = 0
    for plan in program.execution_plan:
        instructions = [i for chain in plan.chains for i in chain.instructions]
        facts["plans"].append(plan.name)
        if not instructions:
            facts["constant_methods"][plan.name] = [getattr(plan.values[i].val, f)
                                                    for i in plan.outputs
                                                    for f in ("int_val", "bool_val", "double_val")
                                                    if hasattr(plan.values[i].val, f)]
            continue
        names = [op_name(op) for op in plan.operators]
        calls = collections.Counter(names[i.instr_args.op_index] for i in instructions
                                    if type(i.instr_args).__name__ == "KernelCall")
        for value in plan.values:
            info = getattr(value.val, "extra_tensor_info", None)
            if info is not None and info.location.name == "EXTERNAL":
                external += 1
        facts.update(
            method=plan.name,
            instructions=len(instructions),
            delegate_calls=sum(type(i.instr_args).__name__ == "DelegateCall" for i in instructions),
            delegates=dict(collections.Counter(d.id for d in plan.delegates)),
            delegate_locations=dict(collections.Counter(d.processed.location.name for d in plan.delegates)),
            kernel_calls=dict(sorted(calls.items())),
        )
    constant = program.constant_segment
    facts.update(
        segments=len(program.segments),
        segment_bytes=sum(s.size for s in program.segments),
        constant_segment_tensors=max(0, len(constant.offsets) - 1),
        constant_segment_bytes=program.segments[constant.segment_index].size if program.segments else 0,
        named_data_in_pte=len(program.named_data or []),
        external_tensors=external,
        program_flatbuffer_bytes=len(data),
    )
    return facts


def ptd_keys(ptd: Path) -> int:
    """Number of named entries in a ``.ptd`` (reads only its header and flatbuffer)."""
    from executorch.extension.flat_tensor.serialize.serialize import (
        FlatTensorHeader,
        _deserialize_to_flat_tensor,
    )

    with ptd.open("rb") as f:
        head = f.read(64)
        header = FlatTensorHeader.from_bytes(head[8:])
        if not header.is_valid():
            raise RuntimeError(f"{ptd}: not a FlatTensor file")
        f.seek(0)
        flatbuffer = f.read(header.flatbuffer_offset + header.flatbuffer_size)
    return len(_deserialize_to_flat_tensor(flatbuffer).named_data)


# --------------------------------------------------------------------------- runtime probes (subprocess)


def probe(mode: str, pte: str, ptd: str | None, tokens: int) -> dict[str, Any]:
    """Run in a fresh process: what the runtime registers and what ``forward`` does.

    ``mode == "bare"``: no kernel library imported; report the registered operator names and
    how ``load_method("forward")`` fails. ``mode == "libs"``: import the kernel libraries one
    by one (recording the names each adds), then load and run a prefill of ``tokens`` tokens
    and one decode step, and every constant method.
    """
    import importlib

    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime

    report: dict[str, Any] = {"registered": sorted(portable_lib._get_operator_names())}
    if mode == "libs":
        added: dict[str, list[str]] = {}
        before = set(report["registered"])
        for module, name, short in KERNEL_LIBRARIES:
            importlib.import_module(f"{module}.{name}")
            now = set(portable_lib._get_operator_names())
            added[short] = sorted(now - before)
            before = now
        report["added_by"] = added
    program = Runtime.get().load_program(Path(pte), data_path=Path(ptd) if ptd else None)
    meta = program.metadata("forward")
    report["inputs"] = [[list(meta.input_tensor_meta(i).sizes()), str(meta.input_tensor_meta(i).dtype())]
                        for i in range(meta.num_inputs())]
    report["outputs"] = [[list(meta.output_tensor_meta(i).sizes()), str(meta.output_tensor_meta(i).dtype())]
                         for i in range(meta.num_outputs())]
    start = time.perf_counter()
    try:
        method = program.load_method("forward")
    except RuntimeError as exc:
        report["load_error"] = str(exc)
        return report
    report["load_method_s"] = time.perf_counter() - start
    if mode == "bare":
        return report

    import torch

    constants = {name: list(program.load_method(name).execute([]))
                 for name in sorted(program.method_names) if name != "forward"}
    report["constant_methods"] = {k: [v.item() if hasattr(v, "item") else v for v in vals]
                                  for k, vals in constants.items()}
    vocab = int(report["constant_methods"]["get_vocab_size"][0])
    max_tokens = report["inputs"][0][0][1]
    n = min(tokens, max_tokens)
    ids = (torch.arange(n, dtype=torch.int64) * 37 + 1) % vocab
    pos_len = report["inputs"][1][0][0]
    pos = torch.tensor([0], dtype=torch.int64) if pos_len == 1 else torch.arange(n, dtype=torch.int64)
    steps = []
    for step_ids, step_pos in ((ids.reshape(1, n), pos), (None, None)):
        if step_ids is None:  # decode: the prefill's most likely next token at position n
            step_ids = torch.tensor([[int(steps[-1]["argmax"])]], dtype=torch.int64)
            step_pos = torch.tensor([n], dtype=torch.int64)
        start = time.perf_counter()
        (logits,) = method.execute([step_ids, step_pos])
        elapsed = time.perf_counter() - start
        steps.append({
            "tokens": list(step_ids.shape),
            "input_pos": step_pos.tolist(),
            "logits": list(logits.shape),
            "dtype": str(logits.dtype),
            "finite": bool(torch.isfinite(logits).all()),
            "std": float(logits.float().std()),
            "argmax": int(logits.argmax()),
            "sha256": hashlib.sha256(logits.contiguous().numpy().tobytes()).hexdigest(),
            "seconds": elapsed,
        })
    report["steps"] = steps
    report["vocab"] = vocab
    return report


def run_probe(mode: str, pte: Path, ptd: Path | None, tokens: int) -> dict[str, Any]:
    """Run :func:`probe` in a fresh interpreter and return its JSON report (plus the runtime's
    ``Missing operator`` log lines)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--probe", mode, str(pte),
               "--tokens", str(tokens)]
    if ptd is not None:
        command += ["--probe-data", str(ptd)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    marker = "PROBE-JSON "
    lines = [line for line in done.stdout.splitlines() if line.startswith(marker)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"probe {mode} {pte.name} exited with {done.returncode}:\n"
                           + "\n".join((done.stdout + done.stderr).splitlines()[-20:]))
    report = json.loads(lines[-1][len(marker):])
    report["runtime_log_missing"] = sorted({
        line.split("Missing operator:", 1)[1].split("]", 1)[-1].strip()
        for line in done.stderr.splitlines() if "Missing operator:" in line})
    return report


# --------------------------------------------------------------------------- verify


def verify(shape: Shape, variants: Sequence[str], out: Path, tokens: int) -> bool:
    """Check each program on the runtime (bare and with its libraries) and print the facts."""
    ok = True
    rows: list[dict[str, Any]] = []
    for variant in variants:
        names = shape.file_names(variant)
        pte = out / names[0]
        ptd = out / names[1] if len(names) > 1 else None
        print(f"verify {' + '.join(names)} ...", flush=True)
        facts = program_facts(pte)
        used = set(facts["kernel_calls"])
        bare = run_probe("bare", pte, ptd, tokens)
        libs = run_probe("libs", pte, ptd, tokens)
        missing = sorted(used - set(bare["registered"]))
        library_of = {op: short for short, ops in libs["added_by"].items() for op in ops}
        with_libs = set(libs["registered"]).union(*libs["added_by"].values())
        still_missing = sorted(used - with_libs)
        problems = []
        if not missing:
            problems.append("expected operators the bare runtime lacks, found none")
        if not re.search(r"0x:?14\b", bare.get("load_error", "")):
            problems.append(f"bare load_method did not fail with 0x14: {bare.get('load_error')!r}")
        if still_missing:
            problems.append(f"missing even with the libraries: {still_missing}")
        if "load_error" in libs:
            problems.append(f"load_method failed with the libraries: {libs['load_error']}")
        else:
            vocab = facts["constant_methods"]["get_vocab_size"][0]
            for step in libs["steps"]:
                if step["logits"] != [1, vocab] or not step["finite"] or not step["std"] > 0:
                    problems.append(f"bad logits {step}")
            if libs["constant_methods"] != facts["constant_methods"]:
                problems.append(f"constant methods differ: runtime {libs['constant_methods']} vs "
                                f"program {facts['constant_methods']}")
        for problem in problems:
            print(f"  FAILED {pte.name}: {problem}")
        ok &= not problems
        rows.append({"variant": variant, "names": names, "facts": facts, "bare": bare, "libs": libs,
                     "missing": missing, "library_of": library_of,
                     "sizes": {n: (out / n).stat().st_size for n in names},
                     "ptd_keys": ptd_keys(ptd) if ptd else None})
    if len(rows) == 2 and all("steps" in r["libs"] for r in rows):
        pairs = zip(rows[0]["libs"]["steps"], rows[1]["libs"]["steps"])
        same = [a["sha256"] == b["sha256"] for a, b in pairs]
        print(f"  inline and external give identical logits (prefill, decode): {same}")
        ok &= all(same)
    print_facts(rows)
    return ok


def print_facts(rows: list[dict[str, Any]]) -> None:
    """Print the facts of each verified program."""
    for row in rows:
        f, bare, libs = row["facts"], row["bare"], row["libs"]
        print(f"\n== {' + '.join(row['names'])}")
        for name, size in row["sizes"].items():
            print(f"  {name:32} {size:>14,} bytes")
        print(f"  plans: {', '.join(f['plans'])}")
        print(f"  forward: {f['instructions']} instructions, {f['delegate_calls']} delegate calls; "
              f"delegates {f['delegates']} stored {f['delegate_locations']}")
        print(f"  program flatbuffer {f['program_flatbuffer_bytes']:,} bytes; {f['segments']} segments "
              f"({f['segment_bytes']:,} bytes); constant segment: {f['constant_segment_tensors']} tensors "
              f"({f['constant_segment_bytes']:,} bytes); named data in .pte: {f['named_data_in_pte']}; "
              f"external tensors: {f['external_tensors']}"
              + (f"; named entries in .ptd: {row['ptd_keys']}" if row["ptd_keys"] is not None else ""))
        print("  non-delegated operators (instructions):")
        for op, count in f["kernel_calls"].items():
            lib = row["library_of"].get(op, "")
            flag = f"  <- not registered without {lib}" if op in row["missing"] else ""
            print(f"    {op:50} {count:3}{flag}")
        print(f"  constant methods: {f['constant_methods']}")
        print(f"  forward inputs (method_meta): {bare['inputs']}; outputs {bare['outputs']}")
        print(f"  runtime without imports: {len(bare['registered'])} operators registered; "
              f"load_method -> {bare.get('load_error', 'no error')!r}")
        print(f"    missing: {row['missing']}; runtime log names: {bare['runtime_log_missing']}")
        print(f"  runtime with {' + '.join(s for _, _, s in KERNEL_LIBRARIES)}: "
              f"{len(libs['registered']) + sum(len(v) for v in libs['added_by'].values())} operators; "
              f"load_method {libs.get('load_method_s', float('nan')) * 1000:.0f} ms")
        for step in libs.get("steps", []):
            print(f"    tokens {step['tokens']} input_pos {step['input_pos'][:4]} -> logits {step['logits']} "
                  f"{step['dtype']} finite={step['finite']} std={step['std']:.3f} argmax={step['argmax']} "
                  f"({step['seconds'] * 1000:.1f} ms)")


# --------------------------------------------------------------------------- driver


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SHAPES), default="tiny",
                        help="model shape (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="output folder (default: sample_models/ for tiny, "
                        "~/.cache/workbench-bench/llm_1b/ for 1b)")
    parser.add_argument("--variants", nargs="+", choices=("inline", "external"),
                        help="inline weights and/or foundation weights in a .ptd "
                        "(default: both for tiny, inline for 1b)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: 0)")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="run each program on executorch.runtime and print its facts")
    parser.add_argument("--verify-only", action="store_true", help="do not build; verify the existing files")
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                        help="run the exporter with no network (unshare -rn; default: when available)")
    parser.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy the exporter logs here")
    parser.add_argument("--tokens", type=int, default=8, help="prefill length for --verify (default: 8)")
    parser.add_argument("--probe", choices=("bare", "libs"), help=argparse.SUPPRESS)
    parser.add_argument("--probe-data", help=argparse.SUPPRESS)
    parser.add_argument("probe_pte", nargs="?", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Build and/or verify; return the exit status."""
    args = parse_args(argv)
    if args.probe:
        report = probe(args.probe, args.probe_pte, args.probe_data, args.tokens)
        print("PROBE-JSON " + json.dumps(report), flush=True)
        return 0
    shape = SHAPES[args.size]
    out = (args.out or shape.default_out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    variants = tuple(dict.fromkeys(args.variants or shape.default_variants))
    if not args.verify_only:
        isolate = can_isolate_network() if args.isolate is None else args.isolate
        if args.isolate is None and not isolate:
            print("  (unshare -rn is not available: the exporter runs with the offline settings only)")
        print(f"build {shape.stem} ({', '.join(variants)}) into {out}", flush=True)
        build(shape, variants, out, args.seed, isolate, args.keep_logs)
    if args.verify or args.verify_only:
        if not verify(shape, variants, out, args.tokens):
            print("FAILED verification")
            return 1
        print("\nverify: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
