"""Load paths through the real loaders: the ExecuTorch runtime and ``.pt2`` archives.

* ``executorch_runtime`` — ``Runtime.get().load_program(path, data_path=...)`` and
  ``load_method`` for every method. The bindings map the file (mmap + mlock, mlock errors
  ignored): zero-copy, the pages show as file-backed and locked (``locked`` column).
  Python cannot reach the runtime's weights, so the read phase of every runtime path is the
  **first execution** of ``forward`` (inputs built from its ``method_meta``: seeded normal
  floats, zero integers): ``wall_s`` is the time to the first inference, and ``steady_s``
  a second execution (the difference is the first-run penalty).
* ``executorch_buffer`` — the same from an in-memory ``bytes`` copy of the ``.pte`` (read
  included in the time); the bytes stay referenced while the program lives.
* ``*_no_ptd`` — both without the ``.ptd`` data file. An XNNPACK program with external
  weights **crashes** (SIGSEGV) when loaded this way: it runs in a worker process, so the
  crash is an ``error`` row with a negative ``rc``.
* ``pt2_export_load`` — ``torch.export.load`` (it unpickles: only with ``trusted=True``) vs
  ``pt2_views`` — workbench's zero-copy views of every tensor of the archive.
* ``executorch_cuda`` / ``aoti`` (CUDA) — the ExecuTorch CUDA backend and AOTInductor
  packages, where installed and where the artifact was built for them.

Example:
    >>> prof = wb.profile("sample_models/mlp_xnnpack_external.pte",
    ...                   paths=["executorch_runtime", "executorch_runtime_no_ptd"])  # doctest: +SKIP
    >>> prof.frame[["path", "status", "load_s", "read_s", "steady_s"]]             # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

from ..errors import ArtifactError
from ._base import Plan, RunContext, Skip, checksum, register
from .cpu import _VIEWS_PRELOAD, needs_tensors, needs_torch, views_setup, workbench_views

#: Modules a fork server imports once for the runtime's paths (~15 s on a busy 2-core machine).
_ET_PRELOAD = ("executorch.runtime",)

# -- applicability -----------------------------------------------------------------------------


def _executorch(plan: Plan) -> str | None:
    if importlib.util.find_spec("executorch") is None:
        return "executorch is not installed"
    return None


def _program(plan: Plan) -> str | None:
    if plan.format == "pte":
        return _executorch(plan)
    return {
        "bpte": "Runtime.load_program rejects a .bpte (bundled programs load through the "
                "bundled-program API)",
        "ptd": "a .ptd holds data only: profile the .pte that uses it",
    }.get(plan.format, f"not an ExecuTorch program ({plan.format})")


def _with_data(plan: Plan) -> str | None:
    reason = _program(plan)
    if reason is None and len(plan.data_files) > 1:
        reason = (f"{len(plan.data_files)} .ptd files are attached; the Python runtime takes "
                  "one data_path (profile(..., data=[the .ptd]) picks one)")
    return reason


def _without_data(plan: Plan) -> str | None:
    reason = _program(plan)
    if reason is None and not plan.data_files:
        reason = "the program has no .ptd data file to leave out"
    return reason


def _pt2_export(plan: Plan) -> str | None:
    if plan.format != "pt2":
        return "not a .pt2 archive"
    if plan.pt2_kind != "export":
        return "not a torch.export archive (no models/*.json)"
    if not plan.trusted:
        return "torch.export.load unpickles (can execute code): pass trusted=True for files you trust"
    return needs_torch(plan)


def _pt2_views(plan: Plan) -> str | None:
    if plan.format != "pt2":
        return "not a .pt2 archive (see wb_views)"
    return needs_tensors(plan)


def _cuda_program(plan: Plan) -> str | None:
    reason = _with_data(plan)
    if reason is None and "CudaBackend" not in plan.delegates:
        reason = "the program has no CudaBackend delegate (it was not exported for CUDA)"
    return reason


def _aoti(plan: Plan) -> str | None:
    if plan.format != "pt2" or plan.pt2_kind != "aoti":
        return "not an AOTInductor package"
    if not plan.trusted:
        return "loading an AOTInductor package dlopens its shared object: pass trusted=True"
    return needs_torch(plan)


# -- ExecuTorch runtime ------------------------------------------------------------------------

def _et_setup(ctx: RunContext) -> None:
    try:
        from executorch.runtime import Runtime
    except ImportError as e:
        raise Skip(f"executorch.runtime cannot be imported: {e}") from e
    import importlib

    import torch

    from .. import runtime

    # the kernel libraries the program needs (quantized ops, LLM custom ops): imported before
    # anything is timed; a kernel the installed runtime lacks is named, not an error 0x14
    try:
        libraries = runtime.check_kernels(ctx.plan.path)
    except ArtifactError as e:
        raise Skip(str(e)) from e
    for module in libraries.values():
        importlib.import_module(module)
    ctx.state["int_limit"] = runtime.int_limit(ctx.plan.path)
    if libraries:
        ctx.note("kernel libraries: " + ", ".join(libraries))
    torch.randn(1, generator=torch.Generator().manual_seed(0))  # first-call costs, untimed
    ctx.state["rt"] = Runtime.get()


def _load_methods(ctx: RunContext, prog: Any) -> None:
    names = sorted(prog.method_names)
    methods = ctx.state["methods"] = {}
    for name in names:
        methods[name] = ctx.keep(prog.load_method(name))
    ctx.note(f"{len(names)} method(s) loaded")


def method_inputs(meta: Any, seed: int = 0, int_limit: int | None = None) -> list[Any]:
    """Inputs for a method from its ``MethodMeta``: seeded normal floats, zero integers and
    booleans (with ``int_limit``, an LLM program's: integers ``0..n-1`` wrapped there), with
    the sizes and dtypes the method declares (``wb.run`` builds the same:
    :func:`workbench.runtime._inputs.default_inputs`).

    Example:
        >>> from executorch.runtime import Runtime                              # doctest: +SKIP
        >>> prog = Runtime.get().load_program("sample_models/mlp_portable.pte")  # doctest: +SKIP
        >>> m = prog.load_method("forward")                                     # doctest: +SKIP
        >>> [tuple(t.shape) for t in method_inputs(m.metadata)]                 # doctest: +SKIP
        [(1, 16)]
    """
    from ..runtime._inputs import default_inputs

    return default_inputs(meta, int_limit, seed)


def consume_forward(ctx: RunContext) -> None:
    """The read phase of the runtime's paths: the first execution of ``forward`` (else the
    program's first method), which reads the weights it uses. The checksum is the outputs'
    (the same for every loader of one program); a second execution is left in ``ctx.again``.

    Example:
        >>> LoadPath("my_loader", run=my_load, consume=consume_forward)   # doctest: +SKIP
    """
    import torch

    methods = ctx.state.get("methods") or {}
    if not methods:
        raise RuntimeError("the program has no method to execute")
    name = "forward" if "forward" in methods else sorted(methods)[0]
    method = methods[name]
    inputs = method_inputs(method.metadata, int_limit=ctx.state.get("int_limit"))
    outputs = ctx.keep(method.execute(inputs))
    total = 0
    for o in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
        if hasattr(o, "numel") and o.numel():
            t = o.detach().cpu().contiguous()
            total += checksum(t.reshape(-1).view(torch.uint8).numpy())
    ctx.consumed(sum(n for _, _, n in ctx.extents()), total, "forward")
    ctx.checksum_comparable = False
    ctx.again = lambda: method.execute(inputs)
    ctx.note(f"read = first {name}() (inputs from method_meta)")


def _load(ctx: RunContext, data: str | None, from_bytes: bool) -> None:
    rt = ctx.state["rt"]
    size = sum(ctx.size(f) for f in ctx.files)
    if from_bytes:
        with open(ctx.plan.path, "rb") as fh:
            blob = ctx.keep(fh.read())  # referenced for the program's whole life
        prog = ctx.keep(rt.load_program(blob, data_path=data))
        copied = len(blob)
    else:
        prog = ctx.keep(rt.load_program(ctx.plan.path, data_path=data))
        copied = 0
    _load_methods(ctx, prog)
    ctx.moved(size, copied=copied)


@register("executorch_runtime", files="program+data", copies=False, applies=_with_data,
          setup=_et_setup, consume=consume_forward, preload=_ET_PRELOAD,
          doc="Runtime.load_program(path, data_path=.ptd) + load_method (mmap+mlock)")
def executorch_runtime(ctx: RunContext) -> None:
    """The ExecuTorch runtime's own file loader (with the ``.ptd`` when there is one)."""
    _load(ctx, ctx.plan.data_files[0] if ctx.plan.data_files else None, from_bytes=False)


@register("executorch_runtime_no_ptd", files="program", copies=False, applies=_without_data,
          setup=_et_setup, consume=consume_forward, preload=_ET_PRELOAD,
          doc="as executorch_runtime without the .ptd (may crash: XNNPACK)")
def executorch_runtime_no_ptd(ctx: RunContext) -> None:
    """The runtime's file loader without the program's ``.ptd``."""
    _load(ctx, None, from_bytes=False)


@register("executorch_buffer", files="program+data", applies=_with_data, setup=_et_setup,
          consume=consume_forward, preload=_ET_PRELOAD,
          doc="read the .pte into bytes, Runtime.load_program(bytes, data_path=.ptd) + load_method")
def executorch_buffer(ctx: RunContext) -> None:
    """The runtime's buffer loader over a ``bytes`` copy of the ``.pte`` (kept alive)."""
    _load(ctx, ctx.plan.data_files[0] if ctx.plan.data_files else None, from_bytes=True)


@register("executorch_buffer_no_ptd", files="program", applies=_without_data, setup=_et_setup,
          consume=consume_forward, preload=_ET_PRELOAD,
          doc="as executorch_buffer without the .ptd (may crash: XNNPACK)")
def executorch_buffer_no_ptd(ctx: RunContext) -> None:
    """The runtime's buffer loader without the program's ``.ptd``."""
    _load(ctx, None, from_bytes=True)


# -- .pt2 ------------------------------------------------------------------------------------------

def _export_load_setup(ctx: RunContext) -> None:
    try:
        import torch
    except ImportError as e:
        raise Skip("torch is not installed") from e
    # torch.export.load imports its deserializer on first use (~4 s): not part of the load
    import importlib

    for mod in ("torch._export.serde.serialize", "torch.export.pt2_archive._package"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    ctx.state["torch"] = torch


def _unique_tensor_bytes(torch: Any, tensors: Any) -> int:
    seen: set[int] = set()
    n = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            n += st.nbytes()
    return n


def _unique_storages(torch: Any, tensors: Any) -> list[Any]:
    seen: set[int] = set()
    out = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        st = t.untyped_storage()
        if st.data_ptr() not in seen and st.nbytes():
            seen.add(st.data_ptr())
            out.append(torch.empty(0, dtype=torch.uint8).set_(st))
    return out


@register("pt2_export_load", files="program", applies=_pt2_export, setup=_export_load_setup,
          preload=("torch", "torch._export.serde.serialize"),
          doc="torch.export.load (unpickles: trusted files only)")
def pt2_export_load(ctx: RunContext) -> None:
    """``torch.export.load``: every weight is read into a new tensor."""
    torch = ctx.state["torch"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = ctx.keep(torch.export.load(ctx.plan.path))
    tensors = [*ep.state_dict.values(), *ep.constants.values()]
    n = _unique_tensor_bytes(torch, tensors)
    # the read phase sums torch's own storages: the same bytes, but cut and deduplicated
    # by torch, so the checksum is not compared with the file's
    ctx.weight_buffers = _unique_storages(torch, tensors)
    ctx.checksum_comparable = False
    ctx.moved(n, copied=n)


@register("pt2_views", files="program", copies=False, applies=_pt2_views, setup=views_setup,
          preload=_VIEWS_PRELOAD,
          doc="workbench.open + art.tensor(name) for every tensor of the archive, then touch")
def pt2_views(ctx: RunContext) -> None:
    """Our zero-copy views of a ``.pt2`` (the same function as ``wb_views``)."""
    workbench_views(ctx)


# -- CUDA loaders --------------------------------------------------------------------------------

def _cuda_et_setup(ctx: RunContext) -> None:
    from .cuda import cuda_setup

    cuda_setup(ctx)
    _et_setup(ctx)
    if not ctx.state["rt"].backend_registry.is_available("CudaBackend"):
        raise Skip("this executorch build has no CudaBackend")


@register("executorch_cuda", device="cuda", roofline="h2d_pinned", files="program+data",
          applies=_cuda_program, setup=_cuda_et_setup,
          consume=consume_forward,
          doc="ExecuTorch CUDA backend: load_program(+.ptd) + load_method")
def executorch_cuda(ctx: RunContext) -> None:
    """A program lowered to the ExecuTorch CUDA backend, loaded by the runtime."""
    _load(ctx, ctx.plan.data_files[0] if ctx.plan.data_files else None, from_bytes=False)


def _aoti_setup(ctx: RunContext) -> None:
    from .cuda import cuda_setup

    cuda_setup(ctx)


@register("aoti", device="cuda", roofline="h2d_pinned", files="program", applies=_aoti,
          setup=_aoti_setup, doc="torch._inductor.aoti_load_package (dlopen: trusted only)")
def aoti(ctx: RunContext) -> None:
    """An AOTInductor package loaded onto the GPU (constants uploaded by the package)."""
    torch = ctx.state["torch"]
    ctx.keep(torch._inductor.aoti_load_package(ctx.plan.path))
    n = ctx.size(ctx.plan.path)
    ctx.moved(n, copied=n)
    ctx.note("bytes = archive size")
