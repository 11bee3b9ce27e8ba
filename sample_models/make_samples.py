"""Build the small, real deployment artifacts that ship in ``sample_models/``.

Every file is produced through the public ExecuTorch / PyTorch Python APIs
(``torch.export`` -> ``executorch.exir`` -> ``.to_executorch()``), from tiny models
seeded with ``torch.manual_seed(0)``, so a rerun writes the same bytes (except the
AOTInductor packages, whose compiled ``.so`` is not byte-reproducible).

Usage::

    .venv/bin/python sample_models/make_samples.py                  # build + verify all
    .venv/bin/python sample_models/make_samples.py --only kv_cache mlp.bpte
    .venv/bin/python sample_models/make_samples.py --no-aoti --no-verify
    .venv/bin/python sample_models/make_samples.py --list

``--only`` takes sample names (see ``--list``) or file names. Verification loads each
``.pte`` with ``executorch.runtime`` (passing the ``.ptd`` for external weights), runs
its methods once and compares against eager PyTorch; it runs ``.bpte`` test cases with
the bundled-program runtime API and reloads ``.pt2`` files with ``torch.export.load`` /
``torch._inductor.aoti_load_package``.

The LLM programs (``llm_tiny*.pte``) are made by ``make_llm.py`` with ExecuTorch's own LLM
exporter.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
from executorch.devtools.bundled_program.core import BundledProgram
from executorch.devtools.bundled_program.serialize import (
    serialize_from_bundled_program_to_flatbuffer,
)
from executorch.exir import (
    ExecutorchBackendConfig,
    ExecutorchProgramManager,
    to_edge,
    to_edge_transform_and_lower,
)
from executorch.exir.passes.external_constants_pass import (
    delegate_external_constants_pass_unlifted,
)
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
from executorch.runtime import Runtime
from torch import nn
from torch.export import ExportedProgram

HERE = Path(__file__).resolve().parent

#: Values stored by ``multi_method.pte`` as constant methods (plans with no instructions).
CONSTANT_METHODS = {
    "get_version": 3,
    "get_dims": [16, 8],
    "get_scale": 0.5,
    "use_bias": True,
}

#: Tag given to weights that go to a ``.ptd``; the exporter names the file after it.
XNNPACK_EXTERNAL_TAG = "mlp_xnnpack_external"

#: Tag of the 8da4w model's delegate constants that go to a ``.ptd``.
WIDE_EXTERNAL_TAG = "wide_xnnpack_8da4w_external"

#: Inductor configs for both AOTI packages: no line tables (``-g1`` alone makes the
#: ``.so`` about 1.5 MB instead of 0.4 MB); no precompiled headers (inductor would
#: cache ~140 MB ``.gch`` files per build under the system temp folder); no
#: ``-march=native`` and no SIMD, so the ``.so`` loads on any x86-64 CPU.
AOTI_CONFIGS = {
    "aot_inductor.enable_line_tables": False,
    "aot_inductor.precompile_headers": False,
    "cpp.march": "",
    "cpp.simdlen": 0,
}


# --------------------------------------------------------------------------- models


class MLP(nn.Module):
    """Linear(16, 32) -> ReLU -> Linear(32, 8); ``encode`` is the first half only."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(32, 8)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Return the hidden activations, shape ``[batch, 32]``."""
        return self.relu(self.fc1(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the outputs, shape ``[batch, 8]``."""
        return self.fc2(self.encode(x))


class EncodeMethod(nn.Module):
    """Expose ``MLP.encode`` as ``forward`` so that it can be exported on its own."""

    def __init__(self, mlp: MLP) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Call the wrapped model's ``encode``."""
        return self.mlp.encode(x)


class KVCacheAttention(nn.Module):
    """One attention head over a fixed-size KV cache that ``forward`` updates in place.

    ``k_cache`` / ``v_cache`` are buffers of shape ``[1, max_len, dim]`` with non-zero
    initial values; each call writes the new key/value at ``input_pos`` with
    ``index_copy_`` and attends over the whole cache.
    """

    def __init__(self, dim: int = 16, max_len: int = 8) -> None:
        super().__init__()
        self.dim = dim
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.register_buffer("k_cache", torch.randn(1, max_len, dim) * 0.1)
        self.register_buffer("v_cache", torch.randn(1, max_len, dim) * 0.1)

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Attend from ``x`` (``[1, 1, dim]``) after caching it at ``input_pos`` (``[1]``)."""
        q = self.wq(x)
        self.k_cache.index_copy_(1, input_pos, self.wk(x))
        self.v_cache.index_copy_(1, input_pos, self.wv(x))
        scores = q @ self.k_cache.transpose(1, 2) / math.sqrt(self.dim)
        return torch.softmax(scores, dim=-1) @ self.v_cache


class TiedLM(nn.Module):
    """Embedding(64, 16) whose weight is also the output projection (tied weights)."""

    def __init__(self, vocab: int = 64, dim: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.emb.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Return logits ``[batch, seq, vocab]`` for int64 ``tokens`` ``[batch, seq]``."""
        return self.lm_head(self.emb(tokens))


class NoWeights(nn.Module):
    """A model with no parameters and no constants: ``relu(x) + x``.

    Scalar literals would not do: in ``x * 2 + 1`` export lifts ``2`` and ``1`` into
    constant tensors, and the ``.pte`` gains a constant segment and an extended header.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``relu(x) + x``."""
        return torch.relu(x) + x


class WideMLP(nn.Module):
    """Linear(64, 32) -> ReLU -> Linear(32, 8, bias=False): rows long enough for groups of 32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(32, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the outputs, shape ``[batch, 8]``."""
        return self.fc2(self.relu(self.fc1(x)))


class MultiOutput(nn.Module):
    """LayerNorm(16), then ``split`` into 6 + 10 columns, ``topk(3)`` of the right part and
    ``max(dim=1)`` of the left part: once lowered, every non-delegated kernel that does the
    work writes several outputs (``native_layer_norm.out``: out, mean, rstd;
    ``split_with_sizes_copy.out``: a tensor list; ``topk.values`` and ``max.dim_max``: values
    and indices)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        with torch.no_grad():  # a non-trivial affine part
            self.norm.weight.copy_(torch.linspace(0.5, 1.5, 16))
            self.norm.bias.copy_(torch.linspace(-0.25, 0.25, 16))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return ``(top3 values, top3 indices, row max, row argmax)`` for ``x`` ``[batch, 16]``."""
        left, right = torch.split(self.norm(x), [6, 10], dim=1)
        top_values, top_indices = torch.topk(right, 3, dim=1)
        best, best_index = torch.max(left, dim=1)
        return top_values, top_indices, best, best_index


#: Namespace of the demo custom operator that no ExecuTorch kernel library provides.
CUSTOM_OP_NAMESPACE = "workbench_demo"

#: The ``torch.library`` registration of ``workbench_demo::scale`` (kept alive for the process).
_CUSTOM_OP_LIBRARY: torch.library.Library | None = None


def define_custom_op() -> None:
    """Define ``workbench_demo::scale(Tensor x, float factor) -> Tensor`` and its out variant
    ``scale.out(..., *, Tensor(a!) out)`` with ``torch.library`` (CPU and Meta kernels), so that
    ``to_executorch`` can swap the functional op for ``workbench_demo::scale.out``. Idempotent."""
    global _CUSTOM_OP_LIBRARY
    if _CUSTOM_OP_LIBRARY is not None:
        return
    lib = torch.library.Library(CUSTOM_OP_NAMESPACE, "DEF")
    lib.define("scale(Tensor x, float factor) -> Tensor")
    lib.define("scale.out(Tensor x, float factor, *, Tensor(a!) out) -> Tensor(a!)")

    def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
        return x * factor

    def scale_out(x: torch.Tensor, factor: float, *, out: torch.Tensor) -> torch.Tensor:
        out.copy_(x * factor)
        return out

    def scale_meta(x: torch.Tensor, factor: float) -> torch.Tensor:
        return torch.empty_like(x)

    def scale_out_meta(x: torch.Tensor, factor: float, *, out: torch.Tensor) -> torch.Tensor:
        return out

    lib.impl("scale", scale, "CPU")
    lib.impl("scale.out", scale_out, "CPU")
    lib.impl("scale", scale_meta, "Meta")
    lib.impl("scale.out", scale_out_meta, "Meta")
    _CUSTOM_OP_LIBRARY = lib


class CustomOpModel(nn.Module):
    """``relu(workbench_demo::scale(Linear(16, 8)(x), 2.0))``: a custom operator between two
    portable kernels."""

    def __init__(self) -> None:
        super().__init__()
        define_custom_op()
        self.fc = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``relu(2 * fc(x))``, the scaling done by the custom operator."""
        return torch.relu(torch.ops.workbench_demo.scale(self.fc(x), 2.0))


def seeded(factory: Callable[[], nn.Module]) -> nn.Module:
    """Build a model right after ``torch.manual_seed(0)`` and put it in eval mode."""
    torch.manual_seed(0)
    return factory().eval()


def mlp_inputs() -> tuple[torch.Tensor]:
    """Fixed example input for the MLP models."""
    return (torch.linspace(-1.0, 1.0, 32).reshape(2, 16),)


def kv_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed example inputs for ``KVCacheAttention``: one token at position 2."""
    return (torch.linspace(-1.0, 1.0, 16).reshape(1, 1, 16), torch.tensor([2]))


def wide_inputs() -> tuple[torch.Tensor]:
    """Fixed example input for ``WideMLP``."""
    return (torch.linspace(-1.0, 1.0, 128).reshape(2, 64),)


def multi_output_inputs() -> tuple[torch.Tensor]:
    """Fixed example input for ``MultiOutput``: distinct values in every row (no ties)."""
    return (torch.sin(torch.arange(32, dtype=torch.float32) * 1.7).reshape(2, 16),)


def tied_inputs() -> tuple[torch.Tensor]:
    """Fixed example token ids for ``TiedLM``."""
    return (torch.tensor([[1, 5, 9, 63]]),)


# --------------------------------------------------------------------------- helpers


def export(model: nn.Module, args: tuple) -> ExportedProgram:
    """``torch.export.export`` in non-strict mode."""
    return torch.export.export(model, args, strict=False)


def export_for_pt2(model: nn.Module, args: tuple) -> ExportedProgram:
    """Export for a ``.pt2`` file, without the stack traces that ``.pt2`` would record.

    ``torch.export.save`` writes each node's ``stack_trace`` (this script's absolute path
    and line numbers) into ``model.json``; dropping them keeps the file independent of
    where and from which revision of this script it was built.
    """
    ep = export(model, args)
    for node in ep.graph.nodes:
        node.meta.pop("stack_trace", None)
    return ep


def lower_portable(
    ep: ExportedProgram | dict[str, ExportedProgram],
    config: ExecutorchBackendConfig | None = None,
    **edge_kwargs,
) -> ExecutorchProgramManager:
    """Edge-lower without any delegate and emit an ExecuTorch program."""
    return to_edge(ep, **edge_kwargs).to_executorch(config or ExecutorchBackendConfig())


def lower_xnnpack(
    ep: ExportedProgram | dict[str, ExportedProgram],
    config: ExecutorchBackendConfig | None = None,
) -> ExecutorchProgramManager:
    """Lower with ``XnnpackPartitioner`` and emit an ExecuTorch program (one method per
    entry when ``ep`` is a dict)."""
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch(config or ExecutorchBackendConfig())


def write_pte(program: ExecutorchProgramManager, path: Path) -> None:
    """Write the serialized program bytes to ``path``."""
    path.write_bytes(program.buffer)


def write_ptd(program: ExecutorchProgramManager, path: Path) -> str:
    """Write the program's single external-data file as ``path``.

    ``write_tensor_data_to_file`` names the file after the constant tag (for example
    ``_default_external_constant.ptd``); it is written to a scratch folder and moved.
    Returns the file name the exporter chose.
    """
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        program.write_tensor_data_to_file(scratch)
        written = sorted(Path(scratch).glob("*.ptd"))
        if len(written) != 1:
            raise RuntimeError(f"expected one .ptd, got {[p.name for p in written]}")
        os.replace(written[0], path)
        return written[0].name


# --------------------------------------------------------------------------- builders


def build_mlp_portable(out: Path) -> None:
    """Portable MLP: no delegate, weights in the constant segment."""
    write_pte(lower_portable(export(seeded(MLP), mlp_inputs())), out / "mlp_portable.pte")


def build_mlp_xnnpack(out: Path) -> None:
    """MLP lowered to XNNPACK: delegate blob segment plus named-data weights."""
    write_pte(lower_xnnpack(export(seeded(MLP), mlp_inputs())), out / "mlp_xnnpack.pte")


def build_mlp_external(out: Path) -> None:
    """Portable MLP whose weights live in ``mlp_external.ptd``."""
    config = ExecutorchBackendConfig(external_constants=True)
    program = lower_portable(export(seeded(MLP), mlp_inputs()), config)
    write_pte(program, out / "mlp_external.pte")
    original = write_ptd(program, out / "mlp_external.ptd")
    print(f"  (write_tensor_data_to_file wrote {original!r})")


def build_mlp_xnnpack_external(out: Path) -> None:
    """XNNPACK MLP whose delegate weights live in ``mlp_xnnpack_external.ptd``.

    The unlifted module is tagged with ``delegate_external_constants_pass_unlifted``
    and re-exported, so the XNNPACK delegate stores its weights as named data in the
    ``.ptd`` rather than in the ``.pte``.
    """
    args = mlp_inputs()
    tagged = export(seeded(MLP), args).module()
    delegate_external_constants_pass_unlifted(module=tagged, gen_tag_fn=lambda node: XNNPACK_EXTERNAL_TAG)
    program = lower_xnnpack(export(tagged, args))
    write_pte(program, out / "mlp_xnnpack_external.pte")
    original = write_ptd(program, out / "mlp_xnnpack_external.ptd")
    print(f"  (write_tensor_data_to_file wrote {original!r})")


def build_kv_cache(out: Path) -> None:
    """Attention block with initialized, named mutable KV-cache buffers."""
    config = ExecutorchBackendConfig(
        passes=[InitializedMutableBufferPass(["k_cache", "v_cache"])],
        emit_mutable_buffer_names=True,
    )
    with torch.no_grad(), warnings.catch_warnings():
        # The emitter warns about mutated buffers even when the pass above keeps their values.
        warnings.filterwarnings("ignore", message="Mutation on a buffer")
        program = lower_portable(export(seeded(KVCacheAttention), kv_inputs()), config)
    write_pte(program, out / "kv_cache.pte")


def forward_and_encode() -> dict[str, ExportedProgram]:
    """``forward`` (the whole MLP) and ``encode`` (its first half), exported from ONE model:
    the two methods share its weights."""
    mlp = seeded(MLP)
    args = mlp_inputs()
    return {"forward": export(mlp, args), "encode": export(EncodeMethod(mlp), args)}


def build_multi_method(out: Path) -> None:
    """``forward`` and ``encode`` sharing weights, plus constant methods."""
    program = lower_portable(forward_and_encode(), constant_methods=CONSTANT_METHODS)
    write_pte(program, out / "multi_method.pte")


def build_multi_method_xnnpack(out: Path) -> None:
    """``forward`` and ``encode`` of one MLP, each lowered to XNNPACK: two delegate blobs
    whose shared ``fc1`` weights are one named-data entry."""
    write_pte(lower_xnnpack(forward_and_encode()), out / "multi_method_xnnpack.pte")


def build_tied_portable(out: Path) -> None:
    """Tied embedding / lm_head, portable: the shared weight is stored once."""
    write_pte(lower_portable(export(seeded(TiedLM), tied_inputs())), out / "tied_portable.pte")


def build_tied_xnnpack(out: Path) -> None:
    """Tied embedding / lm_head lowered to XNNPACK: the tie may be split in two copies."""
    write_pte(lower_xnnpack(export(seeded(TiedLM), tied_inputs())), out / "tied_xnnpack.pte")


@contextmanager
def xnnpack_constants_in_blob() -> Iterator[None]:
    """Make XNNPACK lowering keep constants inside the delegate blob (the pre-0.5 layout).

    ExecuTorch 1.5.1 has no option for it: every XNNPACK constant becomes named data
    (``ConstantDataOffset(offset=2**64-1, named_key=sha256)``). Inside this context the
    preprocess step's ``NamedDataStore`` keeps the bytes to itself, and its
    ``serialize_xnnpack_binary`` call (ExecuTorch's own serializer) gets them as the blob's
    constant data, each entry 16-aligned, with ``offset`` set and no ``named_key`` field;
    identical bytes are stored once. The runtime reads such blobs as before.
    """
    import executorch.backends.xnnpack.xnnpack_preprocess as preprocess
    from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import (
        CONSTANT_TENSOR_ALIGNMENT,
    )
    from executorch.exir._serialize._named_data_store import NamedDataStore

    stores: list[dict[str, bytes]] = []

    class BlobStore(NamedDataStore):
        def __init__(self) -> None:
            super().__init__()
            self.kept: dict[str, bytes] = {}
            stores.append(self.kept)

        def add_named_data(self, key, data, alignment=1, external_tag=None):
            self.kept[key] = bytes(data)

    serialize = preprocess.serialize_xnnpack_binary

    def serialize_in_blob(graph, constant_data: bytearray) -> bytes:
        kept = stores[-1]
        placed: dict[str, int] = {}
        for entry in graph.constant_data:
            if entry.named_key:
                if entry.named_key not in placed:
                    constant_data.extend(b"\0" * (-len(constant_data) % CONSTANT_TENSOR_ALIGNMENT))
                    placed[entry.named_key] = len(constant_data)
                    constant_data.extend(kept[entry.named_key])
                entry.offset = placed[entry.named_key]
                # absent, not "": the runtime takes a present (even empty) key as named data
                entry.named_key = None
        return serialize(graph, constant_data)

    saved = preprocess.NamedDataStore
    preprocess.NamedDataStore = BlobStore
    preprocess.serialize_xnnpack_binary = serialize_in_blob
    try:
        yield
    finally:
        preprocess.NamedDataStore = saved
        preprocess.serialize_xnnpack_binary = serialize


def build_mlp_xnnpack_inline(out: Path) -> None:
    """XNNPACK MLP whose weights sit inside the delegate blob (see ``xnnpack_constants_in_blob``)."""
    with xnnpack_constants_in_blob():
        program = lower_xnnpack(export(seeded(MLP), mlp_inputs()))
    write_pte(program, out / "mlp_xnnpack_inline.pte")


def qc8_mlp() -> nn.Module:
    """The seeded MLP after PT2E dynamic int8 quantization with per-channel weight scales
    (``XNNPACKQuantizer`` + ``get_symmetric_quantization_config(is_per_channel=True,
    is_dynamic=True)``, ``prepare_pt2e`` / one calibration call / ``convert_pt2e``)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    prepared = prepare_pt2e(export(seeded(MLP), mlp_inputs()).module(), quantizer)
    prepared(*mlp_inputs())
    return convert_pt2e(prepared)


def build_mlp_xnnpack_qc8(out: Path) -> None:
    """XNNPACK MLP, dynamically quantized: int8 per-channel weights (``qcint8``) with float32
    scales in named data, ``qdint8`` activations."""
    write_pte(lower_xnnpack(export(qc8_mlp(), mlp_inputs())), out / "mlp_xnnpack_qc8.pte")


def int4_wide_mlp() -> nn.Module:
    """The seeded ``WideMLP`` after torchao ``quantize_`` with 8-bit dynamic activations and
    4-bit groupwise weights (``Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
    weight_granularity=PerGroup(32))``, "8da4w")."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    model = seeded(WideMLP)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
                                                           weight_granularity=PerGroup(32)))
    return model


def build_wide_xnnpack_8da4w(out: Path) -> None:
    """XNNPACK ``WideMLP`` with groupwise int4 weights (``qbint4``, group 32, bfloat16 scales)."""
    write_pte(lower_xnnpack(export(int4_wide_mlp(), wide_inputs())), out / "wide_xnnpack_8da4w.pte")


def build_wide_xnnpack_8da4w_external(out: Path) -> None:
    """The 8da4w ``WideMLP`` with its delegate constants (weights, biases and scales) in
    ``wide_xnnpack_8da4w_external.ptd`` (tagged as in ``build_mlp_xnnpack_external``)."""
    args = wide_inputs()
    tagged = export(int4_wide_mlp(), args).module()
    delegate_external_constants_pass_unlifted(module=tagged, gen_tag_fn=lambda node: WIDE_EXTERNAL_TAG)
    program = lower_xnnpack(export(tagged, args))
    write_pte(program, out / "wide_xnnpack_8da4w_external.pte")
    original = write_ptd(program, out / "wide_xnnpack_8da4w_external.ptd")
    print(f"  (write_tensor_data_to_file wrote {original!r})")


def build_mlp_vulkan(out: Path) -> None:
    """MLP lowered with ``VulkanPartitioner``: a ``VH00`` blob holding a ``VkGraph``, weights
    as named data (lowering needs no GPU)."""
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

    edge = to_edge_transform_and_lower(export(seeded(MLP), mlp_inputs()),
                                       partitioner=[VulkanPartitioner()])
    write_pte(edge.to_executorch(ExecutorchBackendConfig()), out / "mlp_vulkan.pte")


def verify_vulkan(out: Path) -> None:
    """No Vulkan runtime here: decode the blob's graph with ExecuTorch's own deserializer
    (``flatbuffer_to_vk_graph``) and check it has the two linear layers."""
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import (
        extract_vk_flatbuffer,
        flatbuffer_to_vk_graph,
    )
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary((out / "mlp_vulkan.pte").read_bytes()).program
    (delegate,) = program.execution_plan[0].delegates
    blob = program.backend_delegate_data[delegate.processed.index].data
    graph = flatbuffer_to_vk_graph(extract_vk_flatbuffer(blob))
    ops = [call.name for call in graph.chain]
    if ops.count("aten.linear.default") != 2:
        raise AssertionError(f"mlp_vulkan.pte: unexpected operator chain {ops}")


def build_mlp_coreml(out: Path) -> None:
    """MLP lowered with ``CoreMLPartitioner`` (coremltools converts on Linux; the blob is the
    flattened ``.mlpackage`` folder). Not byte-reproducible: ``metadata.json`` holds a
    fresh ``executorch_<uuid4>`` identifier."""
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    edge = to_edge_transform_and_lower(export(seeded(MLP), mlp_inputs()),
                                       partitioner=[CoreMLPartitioner()])
    write_pte(edge.to_executorch(ExecutorchBackendConfig()), out / "mlp_coreml.pte")


def verify_coreml(out: Path) -> None:
    """No Core ML runtime here: unflatten the blob with ExecuTorch's own
    ``executorchcoreml.unflatten_directory_contents`` and check the model files are there."""
    from executorch.backends.apple.coreml import executorchcoreml
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary((out / "mlp_coreml.pte").read_bytes()).program
    (delegate,) = program.execution_plan[0].delegates
    blob = program.backend_delegate_data[delegate.processed.index].data
    with tempfile.TemporaryDirectory() as folder:
        if not executorchcoreml.unflatten_directory_contents(blob, folder):
            raise AssertionError("mlp_coreml.pte: the blob does not unflatten")
        names = {p.name for p in Path(folder).rglob("*")}
    if not {"metadata.json", "model.mlpackage", "weight.bin"} <= names:
        raise AssertionError(f"mlp_coreml.pte: unexpected files {sorted(names)}")


def mlp_test_cases() -> list[MethodTestCase]:
    """Two bundled ``forward`` test cases with eager-model expected outputs."""
    model = seeded(MLP)
    cases = []
    for inputs in (mlp_inputs(), (torch.ones(2, 16),)):
        with torch.no_grad():
            expected = model(*inputs)
        cases.append(MethodTestCase(inputs=list(inputs), expected_outputs=[expected]))
    return cases


def build_mlp_bpte(out: Path) -> None:
    """Bundled program: the portable MLP plus two ``forward`` test cases."""
    program = lower_portable(export(seeded(MLP), mlp_inputs()))
    suite = MethodTestSuite(method_name="forward", test_cases=mlp_test_cases())
    bundled = BundledProgram(program, [suite])
    (out / "mlp.bpte").write_bytes(serialize_from_bundled_program_to_flatbuffer(bundled))


def bf16_mlp() -> nn.Module:
    """The seeded MLP converted to bfloat16."""
    return seeded(MLP).to(torch.bfloat16)


def build_mlp_bf16(out: Path) -> None:
    """Portable MLP with bfloat16 weights and activations."""
    args = tuple(t.to(torch.bfloat16) for t in mlp_inputs())
    write_pte(lower_portable(export(bf16_mlp(), args)), out / "mlp_bf16.pte")


def build_no_weights(out: Path) -> None:
    """Parameter-free program: no segment data, hence no extended header."""
    write_pte(lower_portable(export(NoWeights(), mlp_inputs())), out / "no_weights.pte")


def build_mlp_pt2(out: Path) -> None:
    """``torch.export.save`` of the MLP's ExportedProgram."""
    torch.export.save(export_for_pt2(seeded(MLP), mlp_inputs()), out / "mlp.pt2")


def build_tied_pt2(out: Path) -> None:
    """``torch.export.save`` of the tied-weight model's ExportedProgram."""
    torch.export.save(export_for_pt2(seeded(TiedLM), tied_inputs()), out / "tied.pt2")


def build_mlp_aoti(out: Path) -> None:
    """AOTInductor package of the MLP, constants compiled into the ``.so``."""
    ep = export_for_pt2(seeded(MLP), mlp_inputs())
    torch._inductor.aoti_compile_and_package(
        ep, package_path=str(out / "mlp_aoti.pt2"), inductor_configs=AOTI_CONFIGS
    )


def build_mlp_aoti_blob(out: Path) -> None:
    """AOTInductor package of the MLP, constants as a separate binary-blob member."""
    ep = export_for_pt2(seeded(MLP), mlp_inputs())
    torch._inductor.aoti_compile_and_package(
        ep,
        package_path=str(out / "mlp_aoti_blob.pt2"),
        inductor_configs={
            **AOTI_CONFIGS,
            "aot_inductor.package_constants_in_so": False,
            "aot_inductor.package_constants_on_disk_format": "binary_blob",
        },
    )


def build_multi_output(out: Path) -> None:
    """Portable ``MultiOutput``: non-delegated multi-output kernels (layer norm, split, topk, max)."""
    write_pte(lower_portable(export(seeded(MultiOutput), multi_output_inputs())), out / "multi_output.pte")


def build_mlp_xnnpack_delegate_inline(out: Path) -> None:
    """XNNPACK MLP written with ``extract_delegate_segments=False``: the delegate blob is stored
    inside the program flatbuffer (``BackendDelegateInlineData``), not in a segment."""
    config = ExecutorchBackendConfig(extract_delegate_segments=False)
    program = lower_xnnpack(export(seeded(MLP), mlp_inputs()), config)
    write_pte(program, out / "mlp_xnnpack_delegate_inline.pte")


def build_custom_op(out: Path) -> None:
    """Portable program that calls ``workbench_demo::scale.out``, which no kernel library has."""
    write_pte(lower_portable(export(seeded(CustomOpModel), mlp_inputs())), out / "custom_op.pte")


# --------------------------------------------------------------------------- verification


def assert_close(name: str, got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5) -> None:
    """Raise ``AssertionError`` unless ``got`` matches ``want`` within ``atol``."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{name}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}")
    if not torch.allclose(got.float(), want.float(), atol=atol, rtol=atol):
        diff = (got.float() - want.float()).abs().max().item()
        raise AssertionError(f"{name}: max abs diff {diff:g} > {atol:g}")


def run_pte(path: Path, method: str, inputs: Sequence, data_path: Path | None = None):
    """Load ``path`` with the ExecuTorch runtime and execute ``method`` once."""
    program = Runtime.get().load_program(path, data_path=data_path)
    return program.load_method(method).execute(list(inputs))


def check_pte(
    path: Path,
    model: nn.Module,
    inputs: Sequence[torch.Tensor],
    *,
    method: str = "forward",
    data_path: Path | None = None,
    atol: float = 1e-5,
) -> None:
    """Run ``method`` of ``path`` and compare its one output with eager ``model``."""
    with torch.no_grad():
        want = model(*inputs)
    (got,) = run_pte(path, method, inputs, data_path)
    assert_close(f"{path.name}:{method}", got, want, atol)


def check_forward_and_encode(path: Path, constant_methods: Iterable[str] = ()) -> Any:
    """Check that ``path`` (made from :func:`forward_and_encode`) has exactly those two
    methods plus ``constant_methods``, and run both against eager; returns the loaded program."""
    program = Runtime.get().load_program(path)
    expected_names = {"forward", "encode", *constant_methods}
    if set(program.method_names) != expected_names:
        raise AssertionError(f"methods {sorted(program.method_names)} != {sorted(expected_names)}")
    mlp = seeded(MLP)
    check_pte(path, mlp, mlp_inputs())
    check_pte(path, EncodeMethod(mlp), mlp_inputs(), method="encode")
    return program


def verify_multi_method(out: Path) -> None:
    """Check both compute methods and every constant method of ``multi_method.pte``."""
    path = out / "multi_method.pte"
    program = check_forward_and_encode(path, constant_methods=CONSTANT_METHODS)
    for name, value in CONSTANT_METHODS.items():
        got = list(program.load_method(name).execute([]))
        want = value if isinstance(value, list) else [value]
        if got != want:
            raise AssertionError(f"{path.name}:{name} returned {got}, want {want}")


def verify_multi_method_xnnpack(out: Path) -> None:
    """Run both methods of ``multi_method_xnnpack.pte``; each is one XNNPACK delegate call."""
    check_forward_and_encode(out / "multi_method_xnnpack.pte")


def verify_bpte(out: Path) -> None:
    """Run the bundled test cases of ``mlp.bpte`` through the bundled-program runtime.

    ``BundledModule.verify_result_with_bundled_expected_output`` loads the stored inputs,
    executes the method and compares with the stored outputs (raising on mismatch).
    """
    from executorch.extension.pybindings import portable_lib

    bundle = portable_lib._load_bundled_program_from_buffer((out / "mlp.bpte").read_bytes())
    for index in range(len(mlp_test_cases())):
        bundle.verify_result_with_bundled_expected_output("forward", index, rtol=1e-5, atol=1e-5)


def check_pt2(path: Path, model: nn.Module, inputs: Sequence[torch.Tensor]) -> None:
    """Reload an ``ExportedProgram`` and compare its module with eager ``model``."""
    loaded = torch.export.load(path).module()
    with torch.no_grad():
        assert_close(path.name, loaded(*inputs), model(*inputs))


def check_aoti(path: Path) -> None:
    """Load an AOTInductor package and compare it with the eager MLP."""
    runner = torch._inductor.aoti_load_package(str(path))
    with torch.no_grad():
        assert_close(path.name, runner(*mlp_inputs()), seeded(MLP)(*mlp_inputs()))


def raw_program(path: Path) -> Any:
    """The ``Program`` of a ``.pte`` as stored: ExecuTorch's ``_flatbuffer_to_program`` on the
    flatbuffer part only (``deserialize_pte_binary`` would move segment data back inline)."""
    from executorch.exir._serialize._program import _flatbuffer_to_program, _get_extended_header

    data = path.read_bytes()
    header = _get_extended_header(data)
    size = header.program_size if header is not None and header.is_valid() else len(data)
    return _flatbuffer_to_program(data[:size])


def kernel_calls(path: Path, method: str = "forward") -> list[str]:
    """``ns::op.overload`` of every ``KernelCall`` instruction of ``method``, in order."""
    (plan,) = [p for p in raw_program(path).execution_plan if p.name == method]
    names = [f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators]
    return [names[i.instr_args.op_index] for chain in plan.chains for i in chain.instructions
            if type(i.instr_args).__name__ == "KernelCall"]


#: The multi-output kernels that ``multi_output.pte`` must call.
MULTI_OUTPUT_KERNELS = (
    "aten::native_layer_norm.out",
    "aten::split_with_sizes_copy.out",
    "aten::topk.values",
    "aten::max.dim_max",
)


def verify_multi_output(out: Path) -> None:
    """Check the four multi-output kernels are called (operator table + instructions) and that
    every output matches eager."""
    path = out / "multi_output.pte"
    calls = kernel_calls(path)
    lacking = [name for name in MULTI_OUTPUT_KERNELS if name not in calls]
    if lacking:
        raise AssertionError(f"{path.name}: kernels {lacking} not called; calls: {calls}")
    print(f"  {path.name}: non-delegated kernels {calls}")
    model = seeded(MultiOutput)
    inputs = multi_output_inputs()
    with torch.no_grad():
        want = model(*inputs)
    got = run_pte(path, "forward", inputs)
    if len(got) != len(want):
        raise AssertionError(f"{path.name}: {len(got)} outputs, want {len(want)}")
    for index, (g, w) in enumerate(zip(got, want)):
        assert_close(f"{path.name}:forward[{index}]", g, w)


def verify_mlp_xnnpack_delegate_inline(out: Path) -> None:
    """Check the blob is stored INLINE in ``backend_delegate_data`` (an ``XH00`` XNNPACK blob)
    and that the program runs like eager."""
    path = out / "mlp_xnnpack_delegate_inline.pte"
    program = raw_program(path)
    (delegate,) = program.execution_plan[0].delegates
    location = delegate.processed.location.name
    if location != "INLINE":
        raise AssertionError(f"{path.name}: delegate data location {location}, want INLINE")
    blob = bytes(program.backend_delegate_data[delegate.processed.index].data)
    if blob[4:8] != b"XH00":
        raise AssertionError(f"{path.name}: inline blob does not start with an XNNPACK header")
    print(f"  {path.name}: {delegate.id} blob INLINE, backend_delegate_data[{delegate.processed.index}] "
          f"{len(blob):,} bytes; {len(program.segments)} segments, "
          f"{len(program.named_data or [])} named data")
    check_pte(path, seeded(MLP), mlp_inputs())


#: Run in a fresh interpreter: load ``forward`` of the ``.pte`` given as argv[1] and print the error.
LOAD_FORWARD = """
import sys
from executorch.runtime import Runtime
program = Runtime.get().load_program(sys.argv[1])
try:
    program.load_method("forward")
except RuntimeError as exc:
    print("LOAD-ERROR", exc)
else:
    print("LOADED")
"""


def verify_custom_op(out: Path) -> None:
    """Check the program calls ``workbench_demo::scale.out`` and that, in a fresh process (no
    custom kernel registered), loading ``forward`` fails with OperatorMissing (0x14) naming it."""
    import re
    import subprocess

    path = out / "custom_op.pte"
    calls = kernel_calls(path)
    op = f"{CUSTOM_OP_NAMESPACE}::scale.out"
    if op not in calls:
        raise AssertionError(f"{path.name}: {op} not called; calls: {calls}")
    done = subprocess.run([sys.executable, "-c", LOAD_FORWARD, str(path)], capture_output=True,
                          text=True, timeout=300)
    error = next((line for line in done.stdout.splitlines() if line.startswith("LOAD-ERROR")), "")
    named = [line.strip() for line in done.stderr.splitlines() if "Missing operator" in line]
    if not re.search(r"0x:?14\b", error) or not any(op in line for line in named):
        raise AssertionError(f"{path.name}: expected OperatorMissing (0x14) for {op}; got "
                             f"{done.stdout.strip()!r} / {named}")
    print(f"  {path.name}: kernels {calls}; load_method('forward') in a fresh process: "
          f"{error.removeprefix('LOAD-ERROR ')!r}; runtime log: {named[0]!r} (expected)")


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Sample:
    """One sample: the files it writes, how to build them and how to check them."""

    name: str
    files: tuple[str, ...]
    build: Callable[[Path], None]
    verify: Callable[[Path], None]
    aoti: bool = False


SAMPLES: tuple[Sample, ...] = (
    Sample(
        "mlp_portable",
        ("mlp_portable.pte",),
        build_mlp_portable,
        lambda out: check_pte(out / "mlp_portable.pte", seeded(MLP), mlp_inputs()),
    ),
    Sample(
        "mlp_xnnpack",
        ("mlp_xnnpack.pte",),
        build_mlp_xnnpack,
        lambda out: check_pte(out / "mlp_xnnpack.pte", seeded(MLP), mlp_inputs()),
    ),
    Sample(
        "mlp_external",
        ("mlp_external.pte", "mlp_external.ptd"),
        build_mlp_external,
        lambda out: check_pte(
            out / "mlp_external.pte",
            seeded(MLP),
            mlp_inputs(),
            data_path=out / "mlp_external.ptd",
        ),
    ),
    Sample(
        "mlp_xnnpack_external",
        ("mlp_xnnpack_external.pte", "mlp_xnnpack_external.ptd"),
        build_mlp_xnnpack_external,
        # Always pass the .ptd: without it the XNNPACK delegate crashes the process.
        lambda out: check_pte(
            out / "mlp_xnnpack_external.pte",
            seeded(MLP),
            mlp_inputs(),
            data_path=out / "mlp_xnnpack_external.ptd",
        ),
    ),
    Sample(
        "kv_cache",
        ("kv_cache.pte",),
        build_kv_cache,
        lambda out: check_pte(out / "kv_cache.pte", seeded(KVCacheAttention), kv_inputs()),
    ),
    Sample("multi_method", ("multi_method.pte",), build_multi_method, verify_multi_method),
    Sample("multi_method_xnnpack", ("multi_method_xnnpack.pte",), build_multi_method_xnnpack,
           verify_multi_method_xnnpack),
    Sample(
        "tied_portable",
        ("tied_portable.pte",),
        build_tied_portable,
        lambda out: check_pte(out / "tied_portable.pte", seeded(TiedLM), tied_inputs()),
    ),
    Sample(
        "tied_xnnpack",
        ("tied_xnnpack.pte",),
        build_tied_xnnpack,
        lambda out: check_pte(out / "tied_xnnpack.pte", seeded(TiedLM), tied_inputs()),
    ),
    Sample(
        "mlp_xnnpack_inline",
        ("mlp_xnnpack_inline.pte",),
        build_mlp_xnnpack_inline,
        lambda out: check_pte(out / "mlp_xnnpack_inline.pte", seeded(MLP), mlp_inputs()),
    ),
    Sample(
        "mlp_xnnpack_qc8",
        ("mlp_xnnpack_qc8.pte",),
        build_mlp_xnnpack_qc8,
        lambda out: check_pte(out / "mlp_xnnpack_qc8.pte", qc8_mlp(), mlp_inputs(), atol=2e-2),
    ),
    Sample(
        "wide_xnnpack_8da4w",
        ("wide_xnnpack_8da4w.pte",),
        build_wide_xnnpack_8da4w,
        lambda out: check_pte(out / "wide_xnnpack_8da4w.pte", int4_wide_mlp(), wide_inputs(),
                              atol=2e-2),
    ),
    Sample(
        "wide_xnnpack_8da4w_external",
        ("wide_xnnpack_8da4w_external.pte", "wide_xnnpack_8da4w_external.ptd"),
        build_wide_xnnpack_8da4w_external,
        # Always pass the .ptd: without it the XNNPACK delegate crashes the process.
        lambda out: check_pte(
            out / "wide_xnnpack_8da4w_external.pte",
            int4_wide_mlp(),
            wide_inputs(),
            data_path=out / "wide_xnnpack_8da4w_external.ptd",
            atol=2e-2,
        ),
    ),
    Sample("mlp_vulkan", ("mlp_vulkan.pte",), build_mlp_vulkan, verify_vulkan),
    Sample("mlp_coreml", ("mlp_coreml.pte",), build_mlp_coreml, verify_coreml),
    Sample("mlp_bpte", ("mlp.bpte",), build_mlp_bpte, verify_bpte),
    Sample(
        "mlp_bf16",
        ("mlp_bf16.pte",),
        build_mlp_bf16,
        lambda out: check_pte(
            out / "mlp_bf16.pte",
            bf16_mlp(),
            tuple(t.to(torch.bfloat16) for t in mlp_inputs()),
            atol=2e-2,
        ),
    ),
    Sample(
        "no_weights",
        ("no_weights.pte",),
        build_no_weights,
        lambda out: check_pte(out / "no_weights.pte", NoWeights(), mlp_inputs()),
    ),
    Sample("multi_output", ("multi_output.pte",), build_multi_output, verify_multi_output),
    Sample("mlp_xnnpack_delegate_inline", ("mlp_xnnpack_delegate_inline.pte",),
           build_mlp_xnnpack_delegate_inline, verify_mlp_xnnpack_delegate_inline),
    Sample("custom_op", ("custom_op.pte",), build_custom_op, verify_custom_op),
    Sample(
        "mlp_pt2",
        ("mlp.pt2",),
        build_mlp_pt2,
        lambda out: check_pt2(out / "mlp.pt2", seeded(MLP), mlp_inputs()),
    ),
    Sample(
        "tied_pt2",
        ("tied.pt2",),
        build_tied_pt2,
        lambda out: check_pt2(out / "tied.pt2", seeded(TiedLM), tied_inputs()),
    ),
    Sample(
        "mlp_aoti",
        ("mlp_aoti.pt2",),
        build_mlp_aoti,
        lambda out: check_aoti(out / "mlp_aoti.pt2"),
        aoti=True,
    ),
    Sample(
        "mlp_aoti_blob",
        ("mlp_aoti_blob.pt2",),
        build_mlp_aoti_blob,
        lambda out: check_aoti(out / "mlp_aoti_blob.pt2"),
        aoti=True,
    ),
)


# --------------------------------------------------------------------------- driver


def select(only: Sequence[str] | None, aoti: bool) -> list[Sample]:
    """Pick the samples named (by sample name or file name) in ``only``, or all."""
    chosen = list(SAMPLES)
    if only:
        wanted = set(only)
        known = {s.name for s in SAMPLES} | {f for s in SAMPLES for f in s.files}
        unknown = sorted(wanted - known)
        if unknown:
            raise SystemExit(f"unknown sample(s): {', '.join(unknown)} (see --list)")
        chosen = [s for s in chosen if s.name in wanted or wanted.intersection(s.files)]
    if not aoti:
        for sample in chosen:
            if sample.aoti:
                print(f"skip {sample.name}: --no-aoti")
        chosen = [s for s in chosen if not s.aoti]
    return chosen


def build_one(sample: Sample, out: Path) -> bool:
    """Build one sample and print its files; on failure print why and remove partial files."""
    print(f"build {sample.name} ...", flush=True)
    start = time.monotonic()
    try:
        sample.build(out)
    except Exception as exc:  # a sample that does not build is skipped, not fatal
        print(f"  SKIPPED {sample.name}: {type(exc).__name__}: {exc}".rstrip())
        for name in sample.files:
            (out / name).unlink(missing_ok=True)
        return False
    for name in sample.files:
        print(f"  wrote {out / name}  {(out / name).stat().st_size:,} bytes")
    print(f"  ({time.monotonic() - start:.1f}s)")
    return True


def verify_one(sample: Sample, out: Path) -> bool:
    """Run one sample's check; print OK or the failure."""
    try:
        sample.verify(out)
    except Exception as exc:
        print(f"  verify {sample.name}: FAILED {type(exc).__name__}: {exc}")
        return False
    print(f"  verify {sample.name}: OK")
    return True


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: %(default)s)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build only these samples or files")
    parser.add_argument(
        "--aoti",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="build the AOTInductor packages (slow; needs a C++ compiler)",
    )
    parser.add_argument(
        "--verify",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="load and run every artifact after building it",
    )
    parser.add_argument("--list", action="store_true", help="list the samples and exit")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Build (and by default verify) the selected samples; return the exit status."""
    args = parse_args(argv)
    if args.list:
        width = max(len(sample.name) for sample in SAMPLES)
        for sample in SAMPLES:
            print(f"{sample.name:{width}} {' '.join(sample.files)}")
        return 0
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    samples = select(args.only, args.aoti)

    # Inductor and the exporters write caches and scratch files under $TMPDIR; keep
    # them in one throw-away folder.
    scratch = tempfile.mkdtemp(prefix="make_samples_")
    os.environ["TMPDIR"] = scratch
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor")
    tempfile.tempdir = scratch
    skipped: list[str] = []
    failed: list[str] = []
    try:
        for sample in samples:
            if not build_one(sample, out):
                skipped.append(sample.name)
            elif args.verify and not verify_one(sample, out):
                failed.append(sample.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    total = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"{out}: {total:,} bytes in all files")
    if skipped:
        print(f"skipped (did not build): {', '.join(skipped)}")
    if failed:
        print(f"FAILED verification: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
