"""Shared fixtures: the sample artifacts, a parametrization over every sample .pte (and, in
modules that set ``PTE_VARIANTS = True``, over the layout variants of ``variants.py`` too), and
the ExecuTorch oracle (ExecuTorch's own deserializer, imported once per session; skipped when
executorch is not installed)."""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from dataclasses import dataclass
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"

#: Opt-in cache of the built layout variants, shared by processes (``bench/mutation.py`` sets
#: it: every mutant runs its tests in a fresh process that would rebuild them). Entries are
#: keyed by the hash of ``variants.py``, the samples they come from and the executorch
#: version, so a stale variant is never read. Unset (the normal suite): built per session.
VARIANT_CACHE = os.environ.get("WORKBENCH_TEST_VARIANT_CACHE") or None

if os.environ.get("MUTANT_UNDER_TEST") is not None and os.environ.get("WORKBENCH_TEST_PRELOAD"):
    # A mutmut fork server imports this while collecting: the mutant processes it forks then
    # start with ExecuTorch's serializer imported (~4 s each otherwise). Imports only: no
    # torch operator has run, so the forks are safe.
    try:
        import executorch.exir._serialize._program  # noqa: F401
        from executorch.exir import schema  # noqa: F401
    except ImportError:  # pragma: no cover - the oracle tests skip then
        pass


def pte_samples() -> list[pathlib.Path]:
    """Every sample .pte, globbed at collection time (the set changes as samples are regenerated)."""
    return sorted(SAMPLES.glob("*.pte"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``pte_path``: every sample .pte, then (where the module sets ``PTE_VARIANTS = True``, in
    tests not marked slow) every variant of ``variants.py``, built once per session (their ids:
    ``variant-<name>``)."""
    if "pte_path" in metafunc.fixturenames:
        params: list[Any] = pte_samples()
        ids = [p.name for p in params]
        if (getattr(metafunc.module, "PTE_VARIANTS", False)
                and metafunc.definition.get_closest_marker("slow") is None):
            from variants import VARIANTS

            params += [f"variant:{n}" for n in VARIANTS]
            ids += [f"variant-{n}" for n in VARIANTS]
        metafunc.parametrize("pte_path", params, ids=ids, indirect=True)


@pytest.fixture
def pte_path(request) -> pathlib.Path:
    """A sample .pte, or a layout variant (built on first use; needs executorch)."""
    p = request.param
    if isinstance(p, str) and p.startswith("variant:"):
        return request.getfixturevalue("pte_variant")(p.split(":", 1)[1])
    return p


@pytest.fixture(scope="session", autouse=True)
def kernel_registry(tmp_path_factory):
    """The installed runtime's registered operators, asked once per session into a cache of
    the session's own (``validate()`` checks every program's kernels against them): never the
    user's ~/.cache, and no test times the first (seconds-long) question."""
    os.environ["WORKBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("workbench-cache"))
    from workbench import runtime

    try:
        runtime.registered_operators()
    except runtime.RuntimeFailure:
        pass  # the tests that need the runtime say why they fail


@pytest.fixture(autouse=True)
def vectorised_small_methods(request, monkeypatch):
    """Tests read even small methods on the vectorised instruction paths (production reads
    methods of fewer than ``readpath.SCALAR_INSTRUCTIONS`` instructions table by table, which
    the tests that set ``readpath.TIER`` to ``TABLES`` cover): a test that compares the two paths on the small
    samples would compare the scalar path with itself. Tests marked ``production_thresholds``
    (the golden outcomes, the threshold's own tests) keep the shipped value."""
    if request.node.get_closest_marker("production_thresholds") is None:
        from workbench import readpath

        monkeypatch.setattr(readpath, "SCALAR_INSTRUCTIONS", 0)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:  # tests that use the oracle carry the `oracle` marker (-m oracle)
        if "oracle" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.oracle)


@pytest.fixture(scope="session")
def samples_dir() -> pathlib.Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"no sample_models/ directory at {SAMPLES}")
    return SAMPLES


@pytest.fixture(scope="session")
def sample(samples_dir):
    """``sample("mlp_bf16.pte")`` -> its path, or skip the test when that sample is missing."""

    def get(name: str) -> pathlib.Path:
        p = samples_dir / name
        if not p.is_file():
            pytest.skip(f"sample {name} is not there (yet)")
        return p

    return get


@pytest.fixture(scope="session")
def pte_variant(tmp_path_factory, samples_dir):
    """``pte_variant("constant_not_first")`` -> the path of that layout variant's .pte (see
    ``variants.py``), written with ExecuTorch's serializer once per session and checked to
    really have its property; a .ptd that belongs to it lies next to it."""
    pytest.importorskip("executorch.exir._serialize._program",
                        reason="executorch (which writes the variants) is not installed")
    import variants

    out = tmp_path_factory.mktemp("variants")
    built: dict[str, pathlib.Path] = {}

    def get(name: str) -> pathlib.Path:
        if name not in built:
            needed = variants.source_sample(name)
            if not (samples_dir / needed).is_file():
                pytest.skip(f"sample {needed} (source of variant {name}) is not there")
            built[name] = (_cached_variant(name, samples_dir) if VARIANT_CACHE
                           else variants.build(name, samples_dir, out))
        return built[name]

    return get


def _cached_variant(name: str, samples_dir: pathlib.Path) -> pathlib.Path:
    """Variant ``name`` from :data:`VARIANT_CACHE` (built there once, atomically)."""
    import importlib.metadata
    import shutil
    import tempfile

    import variants

    h = hashlib.sha256(pathlib.Path(variants.__file__).read_bytes())
    h.update(importlib.metadata.version("executorch").encode())
    for p in sorted(samples_dir.iterdir()):
        if p.is_file() and p.name.startswith(pathlib.Path(variants.source_sample(name)).stem):
            h.update(p.name.encode() + p.read_bytes())
    folder = pathlib.Path(VARIANT_CACHE) / f"{name}-{h.hexdigest()[:16]}"
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(dir=folder.parent, prefix=".build-"))
        variants.build(name, samples_dir, tmp)
        try:
            (tmp / name).rename(folder)
        except OSError:  # another process was faster: use its copy
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    return next(p for p in folder.iterdir() if p.stem == name and p.suffix in (".pte", ".bpte"))


@pytest.fixture(scope="session")
def opened():
    """``opened(path)`` -> a cached :class:`workbench.Artifact` (frames are built once per session)."""
    import workbench as wb

    cache: dict[str, Any] = {}

    def get(path) -> Any:
        key = str(path)
        if key not in cache:
            cache[key] = wb.open(path)
        return cache[key]

    yield get
    for art in cache.values():
        art.close()


# --------------------------------------------------------------------------------------------
# The oracle: ExecuTorch's own reading of a .pte, computed here, never pasted.
# --------------------------------------------------------------------------------------------

# ScalarType members that executorch.exir.tensor's table does not map (name -> torch dtype name).
_EXTRA_DTYPE_NAMES = {
    "QUINT2x4": "quint2x4", "BITS16": "bits16", "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "FLOAT8E4M3FNUZ": "float8_e4m3fnuz", "UINT64": "uint64",
}


@dataclass
class OracleProgram:
    """ExecuTorch's view of one .pte: extended header, Program dataclass and raw bytes."""

    path: pathlib.Path
    data: bytes
    eh: Any  # _ExtendedHeader | None
    program: Any  # executorch.exir.schema.Program
    program_size: int
    segment_base_offset: int
    ns: Any  # the Oracle (for schema classes and helpers)

    def segment_abs(self, i: int) -> tuple[int, int]:
        s = self.program.segments[i]
        return self.segment_base_offset + s.offset, s.size

    def tensors(self):
        """Yield ``(method name, value index, schema.Tensor)`` for every tensor value."""
        for plan in self.program.execution_plan:
            for v, ev in enumerate(plan.values):
                if isinstance(ev.val, self.ns.schema.Tensor):
                    yield plan.name, v, ev.val

    def nbytes(self, t) -> int:
        n = 1
        for s in t.sizes:
            n *= s
        return n * self.ns.itemsize(t.scalar_type)

    def is_external(self, t) -> bool:
        e = t.extra_tensor_info
        return e is not None and int(e.location) == int(self.ns.schema.TensorDataLocation.EXTERNAL)

    def constant_location(self, t) -> int | None:
        """Absolute offset of a constant tensor's bytes in the constant segment (None if not one)."""
        cs = self.program.constant_segment
        if (self.is_external(t) or t.allocation_info is not None or not t.data_buffer_idx
                or cs is None or not cs.offsets):
            return None
        seg_off, _ = self.segment_abs(cs.segment_index)
        return seg_off + cs.offsets[t.data_buffer_idx]

    def mutable_location(self, t) -> int | None:
        """Absolute offset of a mutable tensor's initial bytes (None if it has none)."""
        ms = self.program.mutable_data_segments
        if t.allocation_info is None or not t.data_buffer_idx or not ms:
            return None
        e = t.extra_tensor_info
        idx = e.mutable_data_segments_idx if e is not None else 0
        sub = ms[idx]
        seg_off, _ = self.segment_abs(sub.segment_index)
        return seg_off + sub.offsets[t.data_buffer_idx]

    @functools.cached_property
    def restored(self):
        """``deserialize_pte_binary`` (restores constants into constant_buffer): a second path."""
        return self.ns.deserialize_pte_binary(self.data)

    def segment_bytes(self, i: int) -> bytes:
        off, size = self.segment_abs(i)
        return self.data[off : off + size]

    def _split(self, sub) -> list[bytes]:
        """ExecuTorch's own split of a constant/mutable segment into per-index buffers."""
        return [b.storage for b in self.ns._program._restore_constant_segment(
            sub, self.segment_bytes(sub.segment_index))]

    def restored_constant(self, data_buffer_idx: int) -> bytes:
        """A constant's buffer (with any padding after it) as ExecuTorch restores it:
        ``deserialize_pte_binary``'s constant_buffer; for a program that function refuses
        (more than one mutable segment), its segment splitter on the constant segment."""
        if len(self.program.mutable_data_segments or []) > 1:
            return self._split(self.program.constant_segment)[data_buffer_idx]
        return bytes(self.restored.program.constant_buffer[data_buffer_idx].storage)

    def restored_mutable(self, t) -> bytes:
        """A mutable tensor's initial bytes (with padding) as ExecuTorch restores them."""
        ms = self.program.mutable_data_segments
        if len(ms) > 1:
            e = t.extra_tensor_info
            return self._split(ms[e.mutable_data_segments_idx if e else 0])[t.data_buffer_idx]
        return bytes(self.restored.mutable_data[t.data_buffer_idx].storage)


def sha256(b) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


class Oracle:
    def __init__(self) -> None:
        from executorch.exir import schema
        from executorch.exir._serialize import _program
        from executorch.exir.tensor import enum_to_scalar_map

        self.schema = schema
        self._program = _program
        self.get_extended_header = _program._get_extended_header
        self.flatbuffer_to_program = _program._flatbuffer_to_program
        self.deserialize_pte_binary = _program.deserialize_pte_binary
        self._enum_to_dtype = enum_to_scalar_map
        self._cache: dict[Any, Any] = {}

    def read(self, path) -> OracleProgram:
        key = str(path)
        if key not in self._cache:
            self._cache[key] = self.read_bytes(pathlib.Path(path).read_bytes(), path)
        return self._cache[key]

    def read_bytes(self, data: bytes, path=None) -> OracleProgram:
        """ExecuTorch's reading of a program held in ``data`` (e.g. one embedded in a .bpte)."""
        eh = self.get_extended_header(data)
        program_size = eh.program_size if eh else len(data)
        base = eh.segment_base_offset if eh else 0
        program = self.flatbuffer_to_program(data[:program_size])
        return OracleProgram(pathlib.Path(path or "<bytes>"), data, eh, program, program_size,
                             base, self)

    def ptd_named_bytes(self, path) -> dict[str, bytes]:
        """key -> bytes of a .ptd's named data, from ExecuTorch's FlatTensorSerializer."""
        key = ("ptd", str(path))
        if key not in self._cache:
            from executorch.exir._serialize._cord import Cord
            from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # importlib.resources
                payload = FlatTensorSerializer().deserialize(Cord(pathlib.Path(path).read_bytes()))
            self._cache[key] = {k: bytes(payload.buffers[e.buffer_index])
                                for k, e in payload.named_data.items()}
        return self._cache[key]

    def torch_dtype(self, scalar_type):
        import torch

        dt = self._enum_to_dtype.get(scalar_type)
        if dt is None:
            dt = getattr(torch, _EXTRA_DTYPE_NAMES[scalar_type.name])
        return dt

    def dtype_name(self, scalar_type) -> str:
        return str(self.torch_dtype(scalar_type)).removeprefix("torch.")

    def itemsize(self, scalar_type) -> int:
        import torch

        return torch.empty(0, dtype=self.torch_dtype(scalar_type)).element_size()


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    pytest.importorskip("executorch.exir._serialize._program",
                        reason="executorch (the oracle) is not installed")
    return Oracle()


@pytest.fixture(scope="session")
def model_explorer_server(tmp_path_factory):
    """Model Explorer's server with our extension (``model-explorer
    --extensions=workbench.model_explorer``) on a free local port, shared by the session: its
    base URL. Skipped when the graph extra or its command is missing; fails with the server's
    log when it exits or does not answer within two minutes."""
    pytest.importorskip("model_explorer", reason="the graph extra (ai-edge-model-explorer) is "
                        "not installed")
    exe = pathlib.Path(sys.executable).with_name("model-explorer")
    if not exe.exists():
        pytest.skip("no model-explorer command in this environment")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("me") / "server.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [str(exe), "--extensions=workbench.model_explorer", "--no_open_in_browser",
             f"--port={port}", "--host=127.0.0.1", "--skip_health_check"], cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(base + "/check_health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"model-explorer exited: {log.read_text()[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("model-explorer did not start")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
