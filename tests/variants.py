"""Valid ``.pte`` / ``.ptd`` layout variants, made with ExecuTorch's own serializer.

Every sample in ``sample_models/`` comes from one toolchain (ExecuTorch 1.5.1) and so shares one
layout: the constant segment first at segment offset 0, at most one mutable-data segment, no
legacy inline constants, no inline delegate data, nothing after the last segment. A reader that
silently depends on any of that passes every sample test. The variants below take the real
sample programs apart with ExecuTorch's deserializer (``_flatbuffer_to_program``,
``deserialize_pte_binary``) and write them again with ExecuTorch's serializer
(``serialize_pte_binary``, or its pieces ``_program_to_flatbuffer``, ``_ExtendedHeader`` and
``_insert_flatbuffer_header`` where the layout must differ from what ``serialize_pte_binary``
chooses), so each is a file ExecuTorch itself reads back.

:func:`build` writes one variant (its main file; some variants are a folder with a ``.ptd``
next to the program) and :func:`check` asserts, from ExecuTorch's reading of the written bytes,
that the variant really has the property it is named for, so a variant cannot quietly turn
into another copy of a sample.

What ExecuTorch 1.5.1's runtime (``Runtime.load_program`` + ``load_method``) says of each,
checked by hand: see :data:`RUNTIME`.
"""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Callable

#: Names of the .pte variants (each also the stem of its file).
VARIANTS = (
    "constant_not_first",
    "inline_constant_buffer",
    "inline_delegate",
    "two_mutable",
    "trailing",
    "align4096",
    "no_extended_header",
    "ptd_trailing",
)

#: Bundled-program variants (``.bpte``): a sample's test cases around a variant's program.
BPTE_VARIANTS = ("bundled_constant_not_first",)

#: What ExecuTorch 1.5.1's runtime does with each variant (load_program + load_method of every
#: method, the .ptd passed as data_path where there is one), observed on this machine.
RUNTIME = {
    "constant_not_first": "loads",
    "inline_constant_buffer": "rejected (InvalidProgram: legacy constant_buffer)",
    "inline_delegate": "loads",
    "two_mutable": "loads, but reads every mutable tensor's initial value from "
                   "mutable_data_segments[0] (ignores mutable_data_segments_idx: v_cache starts "
                   "with k_cache's bytes); deserialize_pte_binary refuses it",
    "trailing": "loads",
    "align4096": "loads",
    "no_extended_header": "loads (with its .ptd as data_path)",
    "ptd_trailing": "loads (with its .ptd as data_path)",
    "bundled_constant_not_first": "its bundled test cases pass (bundled-program API)",
}

#: Bytes appended by the trailing variants (odd length, not zero: visible in any dump).
TRAILING = b"trailing bytes after the last segment!" * 3 + b"\x01"


def _et():
    """ExecuTorch's serializer pieces (imported on first use: ~4 s)."""
    from executorch.exir import schema
    from executorch.exir._serialize import _program
    from executorch.exir._serialize._flatbuffer_program import _program_to_flatbuffer
    from executorch.exir._serialize.padding import aligned_size, pad_to

    return schema, _program, _program_to_flatbuffer, aligned_size, pad_to


def split(data: bytes):
    """``(Program with its segments as stored, [bytes of each segment])`` (ExecuTorch's reading)."""
    _, P, *_ = _et()
    eh = P._get_extended_header(data)
    program = P._flatbuffer_to_program(data[: eh.program_size] if eh else data)
    base = eh.segment_base_offset if eh else 0
    blobs = [data[base + s.offset : base + s.offset + s.size] for s in program.segments]
    return program, blobs


def assemble(program, blobs: list[bytes], alignment: int = 128) -> bytes:
    """Write ``program`` with ``blobs`` as its segments, in that order (``program.segments`` is
    set here), each aligned to ``alignment``: the layout of ``serialize_pte_binary`` but with the
    segment order chosen by the caller, made of ExecuTorch's own header and flatbuffer writers."""
    schema, P, to_flatbuffer, aligned_size, pad_to = _et()
    program.segments = []
    data = bytearray()
    for b in blobs:
        at = aligned_size(len(data), alignment)
        data += bytes(at - len(data))
        program.segments.append(schema.DataSegment(offset=at, size=len(b)))
        data += b
    fb = to_flatbuffer(program)
    if not data:
        return fb.data
    header_length = aligned_size(P._ExtendedHeader.EXPECTED_LENGTH, fb.max_alignment)
    program_size = header_length + len(fb.data)
    base = aligned_size(program_size, alignment)
    header = P._ExtendedHeader(program_size=program_size, segment_base_offset=base,
                               segment_data_size=len(data)).to_bytes()
    out = P._insert_flatbuffer_header(fb.data, r"ET[0-9a-zA-Z][0-9a-zA-Z]",
                                      pad_to(header, header_length))
    return out + bytes(base - len(out)) + bytes(data)


def _renumber(program, shift: Callable[[int], int]) -> None:
    """Apply ``shift`` to every segment index the program holds."""
    schema = _et()[0]
    if program.constant_segment is not None:
        program.constant_segment.segment_index = shift(program.constant_segment.segment_index)
    for m in program.mutable_data_segments or []:
        m.segment_index = shift(m.segment_index)
    for n in program.named_data or []:
        n.segment_index = shift(n.segment_index)
    for plan in program.execution_plan:
        for d in plan.delegates:
            if d.processed.location == schema.DataLocation.SEGMENT:
                d.processed.index = shift(d.processed.index)


def _serialize(pte_file, **options) -> bytes:
    _, P, *_ = _et()
    return bytes(P.serialize_pte_binary(pte_file, **options))


# -- the variants ---------------------------------------------------------------------------------
def _constant_not_first(samples: pathlib.Path, out: pathlib.Path) -> None:
    """mlp_portable with a 200-byte named-data segment first: the constant segment is
    segment 1 at segment offset 256, so constant offsets are relative to 256, not to 0."""
    schema = _et()[0]
    program, blobs = split((samples / "mlp_portable.pte").read_bytes())
    _renumber(program, lambda i: i + 1)
    program.named_data = [schema.NamedData(key="filler", segment_index=0),
                          *(program.named_data or [])]
    filler = bytes(range(200))
    out.write_bytes(assemble(program, [filler, *blobs]))


def _inline_constant_buffer(samples: pathlib.Path, out: pathlib.Path) -> None:
    """mlp_portable with its constants in the legacy ``Program.constant_buffer`` (inline in the
    flatbuffer): ExecuTorch's ``deserialize_pte_binary`` puts them there; written as is, no
    segments, no extended header."""
    _, P, to_flatbuffer, *_ = _et()
    restored = P.deserialize_pte_binary((samples / "mlp_portable.pte").read_bytes())
    out.write_bytes(to_flatbuffer(restored.program).data)


def _inline_delegate(samples: pathlib.Path, out: pathlib.Path) -> None:
    """mlp_xnnpack with its XNNPACK blob in ``Program.backend_delegate_data`` (inline in the
    flatbuffer) instead of a segment; its named data stays in segments."""
    _, P, *_ = _et()
    restored = P.deserialize_pte_binary((samples / "mlp_xnnpack.pte").read_bytes())
    out.write_bytes(_serialize(restored, extract_delegate_segments=False))


def _two_mutable(samples: pathlib.Path, out: pathlib.Path) -> None:
    """kv_cache with k_cache's initial value in one mutable-data segment and v_cache's in a
    second (``mutable_data_segments_idx`` 1, at sub-offset 48); segments in the order
    [mutable 1, constant, mutable 0], so neither the constant nor a mutable segment is at 0.
    The initial values are the sample's own bytes."""
    schema = _et()[0]
    program, blobs = split((samples / "kv_cache.pte").read_bytes())
    (mut,) = program.mutable_data_segments
    const_blob = blobs[program.constant_segment.segment_index]
    by_name = {}
    for plan in program.execution_plan:
        for ev in plan.values:
            t = ev.val
            if (isinstance(t, schema.Tensor) and t.allocation_info is not None
                    and t.data_buffer_idx and t.extra_tensor_info is not None):
                by_name[t.extra_tensor_info.fully_qualified_name] = t
    k, v = by_name["k_cache"], by_name["v_cache"]
    old = blobs[mut.segment_index]
    ends = [*mut.offsets[1:], len(old)]
    k_bytes = old[mut.offsets[k.data_buffer_idx] : ends[k.data_buffer_idx]]
    v_bytes = old[mut.offsets[v.data_buffer_idx] : ends[v.data_buffer_idx]]
    assert len(k_bytes) == len(v_bytes) == 512 and k_bytes != v_bytes
    mut0 = k_bytes
    mut1 = bytes(range(48)) + v_bytes
    # new segment order: [mut1, constant, mut0]
    program.constant_segment.segment_index = 1
    program.mutable_data_segments = [
        schema.SubsegmentOffsets(segment_index=2, offsets=[0, 0]),
        schema.SubsegmentOffsets(segment_index=0, offsets=[0, 48]),
    ]
    k.data_buffer_idx = 1
    v.data_buffer_idx = 1
    v.extra_tensor_info.mutable_data_segments_idx = 1
    out.write_bytes(assemble(program, [mut1, const_blob, mut0]))


def _trailing(samples: pathlib.Path, out: pathlib.Path) -> None:
    """mlp_portable with :data:`TRAILING` bytes after its last segment (the header's
    segment_data_size is unchanged)."""
    out.write_bytes((samples / "mlp_portable.pte").read_bytes() + TRAILING)


def _align4096(samples: pathlib.Path, out: pathlib.Path) -> None:
    """tied_xnnpack written with ``segment_alignment=4096`` (and constants 64-aligned inside
    the constant segment): big padding between program and segments and between segments."""
    _, P, *_ = _et()
    restored = P.deserialize_pte_binary((samples / "tied_xnnpack.pte").read_bytes())
    out.write_bytes(_serialize(restored, extract_delegate_segments=True, segment_alignment=4096,
                               constant_tensor_alignment=64))


def _no_extended_header(samples: pathlib.Path, out: pathlib.Path) -> None:
    """mlp_xnnpack_external with its XNNPACK blob inline: nothing is left for segments, so no
    extended header; the weights stay in the .ptd next to it (copied alongside)."""
    _, P, *_ = _et()
    restored = P.deserialize_pte_binary((samples / "mlp_xnnpack_external.pte").read_bytes())
    out.write_bytes(_serialize(restored, extract_delegate_segments=False))
    shutil.copy(samples / "mlp_xnnpack_external.ptd", out.with_suffix(".ptd"))


def _ptd_trailing(samples: pathlib.Path, out: pathlib.Path) -> None:
    """mlp_external.pte next to its .ptd with :data:`TRAILING` bytes appended to the .ptd."""
    shutil.copy(samples / "mlp_external.pte", out)
    out.with_suffix(".ptd").write_bytes((samples / "mlp_external.ptd").read_bytes() + TRAILING)


def _bundled_constant_not_first(samples: pathlib.Path, out: pathlib.Path) -> None:
    """mlp.bpte (whose program is mlp_portable.pte) with the constant_not_first program in
    its place: the same test cases, the embedded program's constant segment is segment 1."""
    from executorch.devtools.bundled_program.serialize import (
        _bundled_program_schema_to_flatbuffer,
        deserialize_from_flatbuffer_to_bundled_program,
    )

    bundled = deserialize_from_flatbuffer_to_bundled_program((samples / "mlp.bpte").read_bytes())
    assert bytes(bundled.program) == (samples / "mlp_portable.pte").read_bytes()
    inner = out.with_name("program.pte")
    _constant_not_first(samples, inner)
    bundled.program = inner.read_bytes()
    out.write_bytes(_bundled_program_schema_to_flatbuffer(bundled))


_BUILDERS = {
    "constant_not_first": _constant_not_first,
    "inline_constant_buffer": _inline_constant_buffer,
    "inline_delegate": _inline_delegate,
    "two_mutable": _two_mutable,
    "trailing": _trailing,
    "align4096": _align4096,
    "no_extended_header": _no_extended_header,
    "ptd_trailing": _ptd_trailing,
    "bundled_constant_not_first": _bundled_constant_not_first,
}
assert tuple(_BUILDERS) == VARIANTS + BPTE_VARIANTS


def build(name: str, samples: pathlib.Path, out_dir: pathlib.Path) -> pathlib.Path:
    """Write variant ``name`` into ``out_dir/name/name.pte`` (``.bpte`` for a bundled one; plus
    any .ptd next to it), check it (:func:`check`) and return its path."""
    folder = out_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.{'bpte' if name in BPTE_VARIANTS else 'pte'}"
    _BUILDERS[name](samples, path)
    check(name, path)
    return path


# -- what each variant must really be ----------------------------------------------------------------
class Reading:
    """ExecuTorch's reading of one written .pte: header, Program as stored, segment bytes."""

    def __init__(self, path: pathlib.Path) -> None:
        schema, P, *_ = _et()
        self.schema = schema
        self.data = path.read_bytes()
        self.eh = P._get_extended_header(self.data)
        self.program_size = self.eh.program_size if self.eh else len(self.data)
        self.base = self.eh.segment_base_offset if self.eh else 0
        self.program = P._flatbuffer_to_program(self.data[: self.program_size])

    def tensors(self):
        for plan in self.program.execution_plan:
            for ev in plan.values:
                if isinstance(ev.val, self.schema.Tensor):
                    yield ev.val

    def constants(self):
        """Tensors with stored constant bytes (not planned, not external)."""
        ext = self.schema.TensorDataLocation.EXTERNAL
        return [t for t in self.tensors() if t.allocation_info is None and t.data_buffer_idx
                and not (t.extra_tensor_info is not None and t.extra_tensor_info.location == ext)]

    def delegates(self):
        return [d for plan in self.program.execution_plan for d in plan.delegates]

    def data_end(self) -> int:
        """Where the declared content ends: segment data end, else the program's end."""
        if self.eh is None:
            return self.program_size
        return self.base + self.eh.segment_data_size


def _ptd_header(path: pathlib.Path):
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorHeader

    return FlatTensorHeader.from_bytes(path.read_bytes()[8:])


def check(name: str, path: pathlib.Path) -> None:
    """Assert that variant ``name`` at ``path`` has its property, from ExecuTorch's reading
    (raises AssertionError naming what is wrong)."""
    _, P, *_ = _et()
    if name in BPTE_VARIANTS:
        from executorch.devtools.bundled_program.serialize import (
            deserialize_from_flatbuffer_to_bundled_program,
        )

        bundled = deserialize_from_flatbuffer_to_bundled_program(path.read_bytes())
        assert bundled.method_test_suites, "no test cases"
        inner = path.with_name("program.pte")
        assert bytes(bundled.program) == inner.read_bytes()
        check(name.removeprefix("bundled_"), inner)
        return
    r = Reading(path)
    prog = r.program
    cs = prog.constant_segment
    ms = prog.mutable_data_segments or []
    if name != "two_mutable":  # ExecuTorch's full reader takes every other variant back
        P.deserialize_pte_binary(r.data)
    if name == "constant_not_first":
        assert cs.segment_index != 0, "constant segment is segment 0"
        seg = prog.segments[cs.segment_index]
        assert seg.offset != 0 and seg.size, f"constant segment at segment offset {seg.offset}"
        assert any(cs.offsets[t.data_buffer_idx] for t in r.constants()), "no constant past 0"
        assert len(prog.segments) >= 2 and prog.segments[0].size
    elif name == "inline_constant_buffer":
        assert r.eh is None and not prog.segments, "has segments"
        assert cs is None or not cs.offsets, "uses the constant segment"
        consts = r.constants()
        assert consts, "no constants"
        assert all(len(prog.constant_buffer[t.data_buffer_idx].storage) for t in consts)
    elif name == "inline_delegate":
        inline = [d for d in r.delegates()
                  if d.processed.location == r.schema.DataLocation.INLINE]
        assert inline, "no inline delegate"
        assert all(len(prog.backend_delegate_data[d.processed.index].data) for d in inline)
        assert r.eh is not None and prog.named_data, "expected named data in segments"
    elif name == "two_mutable":
        assert len(ms) == 2, f"{len(ms)} mutable-data segments"
        assert len({m.segment_index for m in ms}) == 2
        used = {t.extra_tensor_info.mutable_data_segments_idx for t in r.tensors()
                if t.allocation_info is not None and t.data_buffer_idx and t.extra_tensor_info}
        assert used == {0, 1}, f"mutable segments used: {used}"
        assert all(prog.segments[m.segment_index].offset for m in ms[:1])
        assert cs.segment_index != 0 and prog.segments[cs.segment_index].offset
        assert any(o for o in ms[1].offsets), "second mutable segment has no sub-offset past 0"
    elif name == "trailing":
        assert r.eh is not None and len(r.data) == r.data_end() + len(TRAILING)
        assert r.data.endswith(TRAILING)
    elif name == "align4096":
        assert r.base % 4096 == 0 and r.base - r.program_size >= 128, "no 4096 padding"
        assert len([s for s in prog.segments if s.size]) >= 3
        assert all(s.offset % 4096 == 0 for s in prog.segments)
        assert any(s.offset and s.offset != prog.segments[k - 1].offset + prog.segments[k - 1].size
                   for k, s in enumerate(prog.segments) if k), "no padding between segments"
    elif name == "no_extended_header":
        assert r.eh is None and r.data[8:12] != b"eh00"
        assert all(s.size == 0 for s in prog.segments)
        assert any(d.processed.location == r.schema.DataLocation.INLINE for d in r.delegates())
        assert path.with_suffix(".ptd").is_file()
    elif name == "ptd_trailing":
        ptd = path.with_suffix(".ptd")
        h = _ptd_header(ptd)
        assert h.is_valid()
        size = ptd.stat().st_size
        assert size == h.segment_base_offset + h.segment_data_size + len(TRAILING)
        assert ptd.read_bytes().endswith(TRAILING)
    else:  # pragma: no cover
        raise KeyError(name)


def source_sample(name: str) -> str:
    """The sample a variant was made from (its tensors hold the same bytes, except two_mutable's
    mutable initial values)."""
    return {"constant_not_first": "mlp_portable.pte", "inline_constant_buffer": "mlp_portable.pte",
            "inline_delegate": "mlp_xnnpack.pte", "two_mutable": "kv_cache.pte",
            "trailing": "mlp_portable.pte", "align4096": "tied_xnnpack.pte",
            "no_extended_header": "mlp_xnnpack_external.pte",
            "ptd_trailing": "mlp_external.pte", "bundled_constant_not_first": "mlp.bpte"}[name]

