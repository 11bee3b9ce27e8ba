"""Export and describe the compat samples with ONE old ExecuTorch / PyTorch release.

``make_compat.py`` copies this file into a throw-away virtual environment that holds
the release under test and runs it there; it is not imported by anything else. It
must therefore run on every release in the matrix (torch 2.3 ... 2.15, executorch
0.2 ... 1.4), so it probes for APIs instead of assuming them, uses nothing but the
standard library, torch and executorch, and records every failure as text instead of
raising.

    python probe.py --out DIR [--no-executorch]   # export, read back, write DIR/facts.json
    python probe.py --run FILE.pte [--ptd FILE.ptd]  # (internal) run forward once, print JSON

Everything it says about a file comes from the release's OWN readers:
``executorch.exir._serialize._program`` (the ``.pte`` flatbuffer and extended header),
``executorch.extension.flat_tensor.serialize`` (``.ptd``), ``torch.export.load`` and
``zipfile`` (``.pt2``), and the release's runtime (``executorch.runtime`` or the
``portable_lib`` pybindings) for one execution of ``forward``.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import hashlib
import importlib.metadata
import inspect
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

import torch
from torch import nn

#: Tag of the XNNPACK weights that go to the ``.ptd`` (the exporter names the file after it).
XNNPACK_EXTERNAL_TAG = "mlp_xnnpack_external"


class MLP(nn.Module):
    """Linear(16, 32) -> ReLU -> Linear(32, 8), the same module as ``make_samples.MLP``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the outputs, shape ``[batch, 8]``."""
        return self.fc2(self.relu(self.fc1(x)))


def seeded_mlp() -> MLP:
    """The MLP built right after ``torch.manual_seed(0)``, in eval mode."""
    torch.manual_seed(0)
    return MLP().eval()


def mlp_inputs() -> tuple[torch.Tensor]:
    """Fixed example input (the same as ``make_samples.mlp_inputs``)."""
    return (torch.linspace(-1.0, 1.0, 32).reshape(2, 16),)


def error_text(exc: BaseException) -> str:
    """``Type: message`` of an exception, first 2,000 characters."""
    return f"{type(exc).__name__}: {exc}"[:2000]


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def plain(obj, depth: int = 0):
    """Turn a reader's object (dataclasses, enums, bytes, lists) into JSON values.

    Byte strings become ``{"nbytes": n, "sha256": ...}`` so that delegate blobs and
    inline constants do not bloat the facts.
    """
    if depth > 40:
        return repr(obj)
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        return {"nbytes": len(data), "sha256": sha256(data)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {"_type": type(obj).__name__}
        for field in dataclasses.fields(obj):
            out[field.name] = plain(getattr(obj, field.name), depth + 1)
        return out
    if isinstance(obj, dict):
        return {str(k): plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if obj and all(isinstance(v, int) and not isinstance(v, bool) for v in obj) and len(obj) > 64:
            data = struct.pack(f"<{len(obj)}B", *(v & 0xFF for v in obj))
            return {"nbytes": len(obj), "sha256_of_low_bytes": sha256(data)}
        return [plain(v, depth + 1) for v in obj]
    return repr(obj)


def versions() -> dict:
    """Versions of the interpreter and the packages that made the files."""
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("executorch", "torchao", "numpy", "flatbuffers", "pandas"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def use_own_flatc() -> str | None:
    """Point ``FLATC_EXECUTABLE`` at the ``flatc`` shipped in this release's wheel.

    Releases up to 0.3 ship ``executorch/data/bin/flatc`` but run ``$FLATC_EXECUTABLE``
    or ``flatc`` from ``PATH``; later ones find their own. Returns ``flatc --version``.
    """
    try:
        import executorch
    except ImportError:
        return None
    path = Path(next(iter(executorch.__path__))) / "data" / "bin" / "flatc"
    if not path.exists():
        return None
    os.environ.setdefault("FLATC_EXECUTABLE", str(path))
    proc = subprocess.run([str(path), "--version"], capture_output=True, text=True)
    return f"{proc.stdout.strip()} ({os.environ['FLATC_EXECUTABLE']})"


# --------------------------------------------------------------------------- export


def export(model: nn.Module, args: tuple):
    """``torch.export.export``, non-strict where the release has the keyword."""
    if "strict" in inspect.signature(torch.export.export).parameters:
        return torch.export.export(model, args, strict=False)
    return torch.export.export(model, args)


def write_ptd_files(program, out: Path, stem: str) -> list[str]:
    """Write the program's external-data files; return their new names in ``out``.

    ``write_tensor_data_to_file`` names each file after its tag; a single file is
    renamed to ``<stem>.ptd``, several keep ``<stem>.<tag>.ptd``.
    """
    if not hasattr(program, "write_tensor_data_to_file"):
        raise RuntimeError("ExecutorchProgramManager has no write_tensor_data_to_file (no .ptd writer)")
    scratch = Path(tempfile.mkdtemp(dir=out))
    try:
        program.write_tensor_data_to_file(str(scratch))
        written = sorted(scratch.glob("*.ptd"))
        if not written:
            raise RuntimeError("write_tensor_data_to_file wrote no .ptd file")
        names = []
        for path in written:
            name = f"{stem}.ptd" if len(written) == 1 else f"{stem}.{path.stem}.ptd"
            os.replace(path, out / name)
            names.append(name)
        return names
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def export_executorch(out: Path, facts: dict) -> None:
    """Write the ``.pte`` (and ``.ptd``) files this release can make; record how."""
    from executorch import exir

    to_edge = exir.to_edge
    config_cls = exir.ExecutorchBackendConfig
    transform_and_lower = getattr(exir, "to_edge_transform_and_lower", None)
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    except Exception as exc:
        XnnpackPartitioner = None
        facts["errors"]["import XnnpackPartitioner"] = error_text(exc)

    def lower_xnnpack(ep):
        if transform_and_lower is not None:
            edge = transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
            return edge, "to_edge_transform_and_lower(partitioner=[XnnpackPartitioner()])"
        return to_edge(ep).to_backend(XnnpackPartitioner()), "to_edge(ep).to_backend(XnnpackPartitioner())"

    made = facts["made"]

    def attempt(name: str, build) -> None:
        start = time.monotonic()
        try:
            how, files = build()
        except Exception as exc:
            facts["errors"][name] = error_text(exc)
            facts["tracebacks"][name] = traceback.format_exc()[-4000:]
            for leftover in out.glob(f"{name}.*"):
                leftover.unlink()
            return
        made[name] = {"how": how, "files": files, "seconds": round(time.monotonic() - start, 2)}

    def build_portable():
        program = to_edge(export(seeded_mlp(), mlp_inputs())).to_executorch(config_cls())
        (out / "mlp_portable.pte").write_bytes(program.buffer)
        return "to_edge(export(MLP)).to_executorch(ExecutorchBackendConfig())", ["mlp_portable.pte"]

    def build_xnnpack():
        if XnnpackPartitioner is None:
            raise RuntimeError("XnnpackPartitioner could not be imported")
        edge, how = lower_xnnpack(export(seeded_mlp(), mlp_inputs()))
        program = edge.to_executorch(config_cls())
        (out / "mlp_xnnpack.pte").write_bytes(program.buffer)
        return f"{how}.to_executorch()", ["mlp_xnnpack.pte"]

    def build_external():
        fields = {f.name for f in dataclasses.fields(config_cls)}
        if "external_constants" not in fields:
            raise RuntimeError("ExecutorchBackendConfig has no external_constants field")
        program = to_edge(export(seeded_mlp(), mlp_inputs())).to_executorch(
            config_cls(external_constants=True)
        )
        (out / "mlp_external.pte").write_bytes(program.buffer)
        how = "ExecutorchBackendConfig(external_constants=True)"
        if not hasattr(program, "write_tensor_data_to_file"):
            # The .pte names its weights as external, but the release cannot write them.
            return f"{how}; no .ptd writer in this release, the weights are written nowhere", [
                "mlp_external.pte"
            ]
        ptds = write_ptd_files(program, out, "mlp_external")
        return f"{how}; write_tensor_data_to_file", ["mlp_external.pte", *ptds]

    def build_xnnpack_external():
        if XnnpackPartitioner is None:
            raise RuntimeError("XnnpackPartitioner could not be imported")
        try:
            from executorch.exir.passes import external_constants_pass as ecp
        except ImportError as exc:
            raise RuntimeError(f"no executorch.exir.passes.external_constants_pass: {exc}") from None
        args = mlp_inputs()
        if hasattr(ecp, "delegate_external_constants_pass_unlifted"):
            tagged = export(seeded_mlp(), args).module()
            ecp.delegate_external_constants_pass_unlifted(
                module=tagged, gen_tag_fn=lambda node: XNNPACK_EXTERNAL_TAG
            )
            edge, how = lower_xnnpack(export(tagged, args))
            how = f"delegate_external_constants_pass_unlifted(module, gen_tag_fn); re-export; {how}"
        elif hasattr(ecp, "delegate_external_constants_pass") and transform_and_lower is not None:
            # 0.7: the pass tags the parameter placeholders of the edge program; it must run
            # after decomposition and before partitioning, i.e. as a transform pass. The
            # edge verifier would reject the aten.linear kept for XNNPACK at that point, and
            # tagging between to_edge and to_backend loses the tags (the partitioner's
            # constant folding makes new placeholders), hence _check_ir_validity=False.
            ep = export(seeded_mlp(), args)

            def tag(gm):
                return ecp.delegate_external_constants_pass(
                    gm, ep, gen_tag_fn=lambda node: XNNPACK_EXTERNAL_TAG
                )

            edge = transform_and_lower(
                ep,
                transform_passes=[tag],
                partitioner=[XnnpackPartitioner()],
                compile_config=exir.EdgeCompileConfig(_check_ir_validity=False),
            )
            how = (
                "to_edge_transform_and_lower(ep, transform_passes=[delegate_external_constants_pass"
                "(gm, ep, gen_tag_fn)], partitioner=[XnnpackPartitioner()], "
                "compile_config=EdgeCompileConfig(_check_ir_validity=False))"
            )
        else:
            raise RuntimeError(
                "no delegate_external_constants_pass[_unlifted] in "
                "executorch.exir.passes.external_constants_pass"
            )
        program = edge.to_executorch(config_cls())
        (out / "mlp_xnnpack_external.pte").write_bytes(program.buffer)
        ptds = write_ptd_files(program, out, "mlp_xnnpack_external")
        return how, ["mlp_xnnpack_external.pte", *ptds]

    attempt("mlp_portable", build_portable)
    attempt("mlp_xnnpack", build_xnnpack)
    attempt("mlp_external", build_external)
    attempt("mlp_xnnpack_external", build_xnnpack_external)


def export_pt2(out: Path, facts: dict) -> None:
    """``torch.export.save`` of the MLP (stack traces dropped, as in make_samples)."""
    start = time.monotonic()
    try:
        ep = export(seeded_mlp(), mlp_inputs())
        for node in ep.graph.nodes:
            node.meta.pop("stack_trace", None)
        torch.export.save(ep, str(out / "mlp.pt2"))
    except Exception as exc:
        facts["errors"]["mlp_pt2"] = error_text(exc)
        facts["tracebacks"]["mlp_pt2"] = traceback.format_exc()[-4000:]
        return
    facts["made"]["mlp_pt2"] = {
        "how": "torch.export.save(torch.export.export(MLP), 'mlp.pt2')",
        "files": ["mlp.pt2"],
        "seconds": round(time.monotonic() - start, 2),
    }


# --------------------------------------------------------------------------- readers


def raw_program(data: bytes, program_size: int):
    """The Program flatbuffer as the release parses it, WITHOUT moving segment data back in."""
    from executorch.exir._serialize import _program as p

    if hasattr(p, "_flatbuffer_to_program"):
        return p._flatbuffer_to_program(data[:program_size]), "_flatbuffer_to_program"
    return p._json_to_program(
        p._program_flatbuffer_to_json(data[:program_size])
    ), "_json_to_program(_program_flatbuffer_to_json)"


def describe_value(index: int, value) -> dict:
    """One EValue: its type and, for tensors, every field the reader gives."""
    val = getattr(value, "val", value)
    row = {"index": index, "type": type(val).__name__}
    if type(val).__name__ == "Tensor":
        alloc = getattr(val, "allocation_info", None)
        extra = getattr(val, "extra_tensor_info", None)
        row.update(
            {
                "scalar_type": plain(val.scalar_type),
                "sizes": list(val.sizes),
                "dim_order": plain(getattr(val, "dim_order", None)),
                "storage_offset": getattr(val, "storage_offset", None),
                # Called constant_buffer_idx in the 0.2 / 0.3 schema (same flatbuffer slot).
                "data_buffer_idx": getattr(val, "data_buffer_idx", getattr(val, "constant_buffer_idx", None)),
                "buffer_idx_field": "data_buffer_idx"
                if hasattr(val, "data_buffer_idx")
                else "constant_buffer_idx",
                "shape_dynamism": plain(getattr(val, "shape_dynamism", None)),
                "allocation_info": None
                if alloc is None
                else {
                    "memory_id": alloc.memory_id,
                    "memory_offset": getattr(alloc, "memory_offset", None),
                    "memory_offset_low": getattr(alloc, "memory_offset_low", None),
                    "memory_offset_high": getattr(alloc, "memory_offset_high", None),
                },
                "extra_tensor_info": None
                if extra is None
                else {
                    "fully_qualified_name": getattr(extra, "fully_qualified_name", None),
                    "location": plain(getattr(extra, "location", None)),
                    "mutable_data_segments_idx": getattr(extra, "mutable_data_segments_idx", None),
                },
            }
        )
    else:
        row["value"] = plain(val)
    return row


def describe_plan(plan) -> dict:
    """Instructions, operators, delegates and values of one execution plan."""
    instructions = [ins for chain in plan.chains for ins in chain.instructions]
    kinds: dict[str, int] = {}
    for ins in instructions:
        name = type(getattr(ins, "instr_args", ins)).__name__
        kinds[name] = kinds.get(name, 0) + 1
    return {
        "name": plan.name,
        "chains": len(plan.chains),
        "instructions": len(instructions),
        "instruction_kinds": kinds,
        "operators": [{"name": op.name, "overload": op.overload} for op in plan.operators],
        "delegates": [
            {
                "id": d.id,
                "processed_location": plain(d.processed.location),
                "processed_index": d.processed.index,
                "compile_specs": [cs.key for cs in d.compile_specs],
            }
            for d in plan.delegates
        ],
        "inputs": list(plan.inputs),
        "outputs": list(plan.outputs),
        "non_const_buffer_sizes": list(plan.non_const_buffer_sizes),
        "value_count": len(plan.values),
        "values": [describe_value(i, v) for i, v in enumerate(plan.values)],
    }


def describe_pte(path: Path) -> dict:
    """What the release's own ``_program`` reader says about a ``.pte``."""
    from executorch.exir._serialize import _program as p

    data = path.read_bytes()
    facts: dict = {
        "file_size": len(data),
        "sha256": sha256(data),
        "root_offset": struct.unpack_from("<I", data, 0)[0],
        "file_identifier": data[4:8].decode("latin-1"),
    }
    header = p._ExtendedHeader.from_bytes(data[8:])
    facts["extended_header"] = {
        "valid": bool(header.is_valid()),
        "magic": header.magic.decode("latin-1"),
        "length": header.length,
        "program_size": header.program_size,
        "segment_base_offset": header.segment_base_offset,
        "segment_data_size": getattr(header, "segment_data_size", "not in this release's header class"),
    }
    program_size = header.program_size if header.is_valid() else len(data)
    program, parser = raw_program(data, program_size)
    facts["parser"] = f"executorch.exir._serialize._program.{parser}"
    constant_segment = getattr(program, "constant_segment", None)
    facts["program"] = {
        "version": program.version,
        "segments": [{"offset": s.offset, "size": s.size} for s in program.segments],
        "constant_segment": None
        if constant_segment is None
        else {"segment_index": constant_segment.segment_index, "offsets": list(constant_segment.offsets)},
        "constant_buffer": [len(b.storage) for b in program.constant_buffer],
        "backend_delegate_data": [len(d.data) for d in program.backend_delegate_data],
        "mutable_data_segments": plain(
            getattr(program, "mutable_data_segments", "not in this release's schema")
        ),
        "named_data": plain(getattr(program, "named_data", "not in this release's schema")),
        "execution_plan_count": len(program.execution_plan),
        "execution_plan": [describe_plan(plan) for plan in program.execution_plan],
    }
    # The public entry point (moves segment data back into the Program): record what it gives.
    try:
        result = p.deserialize_pte_binary(data)
        restored = getattr(result, "program", result)
        public = {
            "returns": type(result).__name__,
            "segments": [{"offset": s.offset, "size": s.size} for s in restored.segments],
            "constant_buffer_sizes": [len(b.storage) for b in restored.constant_buffer],
            "backend_delegate_data_sizes": [len(d.data) for d in restored.backend_delegate_data],
        }
        named = getattr(result, "named_data", None)
        if named is not None:
            public["named_data_keys"] = sorted(getattr(named, "pte_data", {}) or {})
        facts["deserialize_pte_binary"] = public
    except Exception as exc:
        facts["deserialize_pte_binary"] = {"error": error_text(exc)}
    return facts


def describe_ptd(path: Path) -> dict:
    """What the release's own FlatTensor reader says about a ``.ptd``."""
    from executorch.extension.flat_tensor.serialize import serialize as s

    data = path.read_bytes()
    facts: dict = {
        "file_size": len(data),
        "sha256": sha256(data),
        "root_offset": struct.unpack_from("<I", data, 0)[0],
        "file_identifier": data[4:8].decode("latin-1"),
    }
    header = s.FlatTensorHeader.from_bytes(data[8:])
    facts["header"] = {
        "valid": bool(header.is_valid()),
        "magic": header.magic.decode("latin-1"),
        "length": header.length,
        "flatbuffer_offset": header.flatbuffer_offset,
        "flatbuffer_size": header.flatbuffer_size,
        "segment_base_offset": header.segment_base_offset,
        "segment_data_size": header.segment_data_size,
    }
    flat = None
    tried = []
    for label, blob in (("whole file", data), ("flatbuffer_size bytes", data[: header.flatbuffer_size])):
        try:
            flat = s._deserialize_to_flat_tensor(blob)
            facts["parser"] = (
                f"extension.flat_tensor.serialize.serialize._deserialize_to_flat_tensor({label})"
            )
            break
        except Exception as exc:
            tried.append(f"{label}: {error_text(exc)}")
    if flat is None:
        facts["parser_errors"] = tried
        return facts
    segments = [{"offset": seg.offset, "size": seg.size} for seg in flat.segments]
    facts["flat_tensor"] = {
        "version": flat.version,
        "segments": segments,
        "tensor_alignment": getattr(flat, "tensor_alignment", "not in this release's schema"),
        "tensors": plain(getattr(flat, "tensors", "not in this release's schema")),
        "named_data": [],
    }
    for entry in flat.named_data:
        row = {"key": entry.key, "segment_index": entry.segment_index}
        if 0 <= entry.segment_index < len(segments):
            seg = segments[entry.segment_index]
            row["segment_offset"] = seg["offset"]
            row["segment_size"] = seg["size"]
            row["file_offset"] = header.segment_base_offset + seg["offset"]
        if getattr(entry, "tensor_layout", None) is not None:
            row["tensor_layout"] = plain(entry.tensor_layout)
        facts["flat_tensor"]["named_data"].append(row)
    return facts


def describe_pt2(path: Path) -> dict:
    """``zipfile`` members and what ``torch.export.load`` gives for a ``.pt2``."""
    data = path.read_bytes()
    facts: dict = {"file_size": len(data), "sha256": sha256(data), "members": []}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
            row = {
                "name": info.filename,
                "header_offset": info.header_offset,
                "data_offset": info.header_offset + 30 + name_len + extra_len,
                "compress_size": info.compress_size,
                "file_size": info.file_size,
                "compress_type": info.compress_type,
            }
            base = info.filename.rsplit("/", 1)[-1]
            if base in ("version", "archive_format", "archive_version", "byteorder", ".format_version"):
                row["text"] = zf.read(info).decode("utf-8", "replace")[:200]
            facts["members"].append(row)
    try:
        from torch._export.serde import schema as serde_schema

        facts["serializer_schema_version"] = list(getattr(serde_schema, "SCHEMA_VERSION", ()))
    except Exception as exc:
        facts["serializer_schema_version"] = error_text(exc)
    try:
        ep = torch.export.load(str(path))
        facts["export_load"] = {
            "state_dict": [
                {"name": k, "dtype": str(v.dtype), "shape": list(v.shape)} for k, v in ep.state_dict.items()
            ],
            "constants": [
                {"name": k, "dtype": str(getattr(v, "dtype", "")), "shape": list(getattr(v, "shape", []))}
                for k, v in getattr(ep, "constants", {}).items()
            ],
            "input_specs": [
                {"kind": spec.kind.name, "target": spec.target} for spec in ep.graph_signature.input_specs
            ],
            "nodes": sum(1 for _ in ep.graph.nodes),
        }
        with torch.no_grad():
            out = ep.module()(*mlp_inputs())
            want = seeded_mlp()(*mlp_inputs())
        facts["export_load"]["output"] = output_facts([out], want)
    except Exception as exc:
        facts["export_load"] = {"error": error_text(exc)}
    return facts


# --------------------------------------------------------------------------- runtime


def output_facts(outputs, want: torch.Tensor) -> dict:
    """Checksum and values of a run's outputs, compared with eager PyTorch."""
    got = outputs[0]
    if not isinstance(got, torch.Tensor):
        return {"error": f"output 0 is {type(got).__name__}, not a tensor"}
    got = got.detach().contiguous().float()
    return {
        "count": len(outputs),
        "shape": list(got.shape),
        # Little-endian float32 bytes, packed without numpy (torch-only venvs have none).
        "sha256_float32": sha256(struct.pack(f"<{got.numel()}f", *got.flatten().tolist())),
        "values": [round(v, 6) for v in got.flatten().tolist()],
        "max_abs_diff_vs_eager": float((got - want.float()).abs().max()),
    }


def run_pte(pte: Path, ptd: Path | None) -> dict:
    """Execute ``forward`` once on this release's runtime (called in a child process)."""
    inputs = list(mlp_inputs())
    with torch.no_grad():
        want = seeded_mlp()(*inputs)
    errors = []
    try:
        from executorch.runtime import Runtime

        params = inspect.signature(Runtime.load_program).parameters
        if ptd is not None and "data_path" not in params:
            raise RuntimeError("executorch.runtime.Runtime.load_program has no data_path parameter")
        kwargs = {"data_path": str(ptd)} if ptd is not None else {}
        program = Runtime.get().load_program(str(pte), **kwargs)
        outputs = program.load_method("forward").execute(inputs)
        return {"api": "executorch.runtime.Runtime", **output_facts(list(outputs), want)}
    except Exception as exc:
        errors.append(f"executorch.runtime: {error_text(exc)}")
    try:
        from executorch.extension.pybindings import portable_lib

        doc = portable_lib._load_for_executorch.__doc__ or ""
        if ptd is not None:
            if "data_path" not in doc:
                raise RuntimeError("portable_lib._load_for_executorch takes no data_path")
            module = portable_lib._load_for_executorch(str(pte), data_path=str(ptd))
        else:
            module = portable_lib._load_for_executorch(str(pte))
        if hasattr(module, "run_method"):
            outputs = module.run_method("forward", tuple(inputs))
        else:
            outputs = module.forward(tuple(inputs))
        return {
            "api": "portable_lib._load_for_executorch",
            **output_facts(list(outputs), want),
            "notes": errors,
        }
    except Exception as exc:
        errors.append(f"portable_lib: {error_text(exc)}")
    return {"error": errors}


def run_in_child(pte: Path, ptd: Path | None) -> dict:
    """Run ``run_pte`` in a fresh interpreter so that a crash cannot take the probe down."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run", str(pte)]
    if ptd is not None:
        cmd += ["--ptd", str(ptd)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"error": ["timed out after 300 s"]}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": [f"exit status {proc.returncode}", proc.stderr[-1500:]]}
    return json.loads(lines[-1])


# --------------------------------------------------------------------------- main


def main() -> int:
    """Export, read back and run; write ``facts.json``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-executorch", action="store_true")
    parser.add_argument("--run", type=Path)
    parser.add_argument("--ptd", type=Path)
    args = parser.parse_args()
    if args.run is not None:
        print(json.dumps(run_pte(args.run, args.ptd)))
        return 0

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    facts: dict = {"versions": versions(), "made": {}, "errors": {}, "tracebacks": {}, "files": {}}
    flatc = use_own_flatc()
    if flatc:
        facts["versions"]["flatc"] = flatc
    if not args.no_executorch:
        try:
            export_executorch(out, facts)
        except Exception as exc:
            facts["errors"]["executorch"] = error_text(exc)
            facts["tracebacks"]["executorch"] = traceback.format_exc()[-4000:]
    export_pt2(out, facts)

    readers = {".pte": describe_pte, ".ptd": describe_ptd, ".pt2": describe_pt2}
    for path in sorted(out.iterdir()):
        reader = readers.get(path.suffix)
        if reader is None:
            continue
        try:
            facts["files"][path.name] = reader(path)
        except Exception as exc:
            facts["files"][path.name] = {"file_size": path.stat().st_size, "reader_error": error_text(exc)}
            facts["tracebacks"][f"read {path.name}"] = traceback.format_exc()[-4000:]
        if path.suffix == ".pte":
            ptd = path.with_suffix(".ptd")
            facts["files"][path.name]["run"] = run_in_child(path, ptd if ptd.exists() else None)
    if not facts["tracebacks"]:
        del facts["tracebacks"]
    (out / "facts.json").write_text(json.dumps(facts, indent=1, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
