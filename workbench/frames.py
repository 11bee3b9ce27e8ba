"""The frame schemas — every column of every frame, its dtype and meaning — in ONE place.

Readers produce columns (``dict[str, values]``: Python lists, or for big frames numpy/pandas
arrays made with :mod:`workbench._cols`); :func:`build` turns them into pandas DataFrames with
the dtypes declared here, in the order declared here. Columns a format does
not have are simply absent; the *required* columns of ``segments`` and ``tensors`` (the
public contract) are always present.

Vocabularies:

* ``segments.kind``: ``header`` (fixed file/format headers), ``flatbuffer`` (the program or
  data-file flatbuffer), ``padding`` (gaps, alignment), ``trailing`` (bytes after the last
  declared structure), ``constant`` (a .pte constant segment), ``mutable_data`` (initial
  values of mutable buffers), ``delegate`` (a backend's processed blob), ``named_data``
  (data looked up by key, e.g. XNNPACK weights), ``unused`` (a segment nothing refers to).
  A delegate blob that the workbench takes apart (see ``workbench.formats.delegates``) is
  shown as its sub-segments instead of one ``delegate`` row: they share the segment's
  ``index``, are named ``"<method> delegate <i> (<backend id>): <part>"``, have that label as
  ``used_by`` and the kinds ``header``, ``flatbuffer`` (the backend graph), ``constant``
  (weights inside the blob), ``padding`` or ``delegate`` (payload not taken apart).
* ``tensors.storage``: ``segment`` (the .pte constant segment), ``inline`` (legacy
  ``Program.constant_buffer`` inside the flatbuffer), ``external`` (bytes in a .ptd file),
  ``named_data`` (a keyed blob, raw bytes), ``mutable`` (a memory-planned buffer whose
  initial value is stored in a mutable-data segment), ``planned`` (memory-planned by the
  compiler; no stored bytes, placed in an arena at runtime), ``unallocated`` (neither stored
  nor planned: provided at runtime, e.g. unplanned inputs/outputs).
* ``segments.kind`` in a ``.bpte`` also has ``test_data`` (bytes of a bundled test tensor);
  the embedded program's rows are named ``program: ...``.
* ``.pt2`` (zip) archives: ``segments.kind`` is ``header`` (a member's local header),
  ``data_descriptor``, ``central_directory``, ``end_record`` (end of central directory and
  its ZIP64 record/locator), ``padding`` (alignment, torch pads member data to 64 bytes), or
  the member's role: ``weights``, ``constants``, ``graph`` (``models/<model>.json``),
  ``config`` (weights/constants configs), ``sample_inputs``, ``so`` (AOTInductor shared
  object), ``blob`` (AOTInductor constants: a ``*.blob`` member or the constants region of
  the ``.so``), ``source`` (generated C++), ``metadata``, ``pickle`` (pickled content,
  never unpickled), ``other``. ``tensors.storage`` adds ``zip`` (raw bytes of a member),
  ``so`` / ``blob`` (AOTInductor constants), ``pickle`` (a pickled payload: no offset),
  ``compressed`` (a compressed member: not zero-copy, no offset) and ``folded`` (an
  AOTInductor constant computed at load time). ``tensors.kind``: ``parameter`` | ``buffer``
  | ``constant``.
* ETDump traces (``.etdp``): ``segments.kind`` is ``header`` (size prefix, root offset and
  ``ED00``), ``flatbuffer``, ``trailing``; in the attached debug buffer ``debug_value``
  (bytes of logged values; overlapping ones merged), ``padding`` and ``trailing`` (the
  unfilled rest). ``tensors.storage`` is ``debug_buffer``.
* ETRecord archives: ``segments.kind`` as for ``.pt2`` zips (``header``, ``data_descriptor``,
  ``central_directory``, ``end_record``, ``padding``) with member bytes as ``graph``
  (serialized exported programs), ``metadata`` (the marker and JSON maps), ``pickle``
  (``torch.save`` members, never loaded) or ``other``, and ``damaged`` for the bytes of
  members whose local header cannot be located (a stale zip directory: the archive opens,
  as with Python's zipfile, and ``members.damaged`` flags them). ``tensors`` is empty.

Example:
    >>> from workbench.frames import SCHEMAS
    >>> [c.name for c in SCHEMAS["segments"] if c.required]
    ['file', 'name', 'kind', 'offset', 'size']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .vocab import SCAN_KINDS  # the segment kinds with a column in the scan `artifacts` frame

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Column", "SCHEMAS", "build", "describe"]


class Column(NamedTuple):
    """One column: ``name``, pandas ``dtype``, ``doc``, and whether every format has it."""

    name: str
    dtype: str
    doc: str
    required: bool = False


def _c(name: str, dtype: str, doc: str, required: bool = False) -> Column:
    return Column(name, dtype, doc, required)


SCHEMAS: dict[str, list[Column]] = {
    "segments": [
        _c("file", "string", "path of the file this byte range belongs to", True),
        _c("name", "string", "what the range holds (e.g. 'constant_segment', a named-data key)", True),
        _c("kind", "category", "header | flatbuffer | padding | trailing | constant | "
           "mutable_data | delegate | named_data | unused (.pt2: see the module doc)", True),
        _c("offset", "int64", "absolute offset in `file`", True),
        _c("size", "int64", "length in bytes (rows of one file sum to its size)", True),
        _c("align", "Int64", "largest power of two dividing `offset` (missing for offset 0)"),
        _c("index", "Int64", "the format's own index of the segment (e.g. Program.segments[i]; "
           ".pt2: the zip member's index in the central directory)"),
        _c("used_by", "string", "what refers to this range"),
    ],
    "tensors": [
        _c("name", "string", "fully qualified name, else a stable synthetic name "
           "('<method>/<value index>' in a .pte)", True),
        _c("dtype", "category", "torch dtype name: float32, bfloat16, int8, ...", True),
        _c("shape", "object", "tuple of int", True),
        _c("nbytes", "int64", "numel x element size (from the shape, not from offsets)", True),
        _c("storage", "category", "where the bytes are: segment | inline | external | "
           "named_data | mutable | planned | unallocated | zip | so | blob | pickle | "
           "compressed | folded", True),
        _c("file", "string", "file holding the bytes (missing when none are stored)", True),
        _c("offset", "Int64", "absolute offset of the bytes in `file` (missing when none)", True),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("method", "category", "execution plan (.pte/.bpte) the value belongs to"),
        _c("value", "Int64", "index in the method's value table (.pte/.bpte)"),
        _c("fqn", "string", "fully qualified name stored in the artifact, if any"),
        _c("dim_order", "object", "tuple: memory order of the dimensions"),
        _c("segment", "Int64", "index of the segment holding the bytes"),
        _c("data_buffer_idx", "Int64", "Tensor.data_buffer_idx (0 = no constant data)"),
        _c("mem_id", "Int64", "memory-planned arena (AllocationDetails.memory_id)"),
        _c("mem_offset", "Int64", "offset inside the arena"),
        _c("shape_dynamism", "category", "static | dynamic_bound | dynamic_unbound"),
        _c("requires_grad", "boolean", "Tensor.requires_grad"),
        _c("has_layout", "boolean", "named data: a dtype/shape is stored (else raw uint8 bytes)"),
        _c("missing", "boolean", "external bytes were not found in any data file"),
        _c("used_by", "string", "delegates whose blobs refer to this named-data key"),
        _c("model", "category", "model in a .pt2 archive (models/<model>.json, "
           "data/aotinductor/<model>/)"),
        _c("kind", "category", "parameter | buffer | constant (.pt2)"),
        _c("strides", "object", "tuple of int: element strides of the view (.pt2)"),
        _c("storage_offset", "Int64", "offset of the view in its storage, in elements (.pt2); "
           "`offset` already includes it"),
        _c("contiguous", "boolean", "the strides are the row-major strides of the shape"),
        _c("member", "string", "zip member holding the bytes (.pt2)"),
        _c("storage_id", "Int64", "storage number: rows with the same id share bytes (tied "
           "weights, views)"),
        _c("shared", "boolean", "the storage is used by more than one name"),
        _c("pickled", "boolean", "the payload is a pickle (listed, never unpickled)"),
    ],
    "members": [
        _c("index", "int64", "position in the zip central directory"),
        _c("name", "string", "member path inside the archive"),
        _c("kind", "category", "role: weights | constants | graph | config | sample_inputs | so | "
           "blob | source | metadata | pickle | other"),
        _c("model", "category", "model the member belongs to, if any"),
        _c("file", "string", "path of the archive"),
        _c("header_offset", "int64", "absolute offset of the local header"),
        _c("offset", "int64", "absolute offset of the stored bytes"),
        _c("size", "int64", "stored (compressed) size in bytes"),
        _c("file_size", "int64", "declared uncompressed size (never used to allocate)"),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("method", "int64", "compression method (0 = stored)"),
        _c("compressed", "bool", "compressed or encrypted: bytes are not zero-copy"),
        _c("crc32", "int64", "CRC-32 from the central directory (not verified)"),
        _c("pickled", "bool", "pickled content (torch.save zip, pickle protocol 2-5 or a "
           "use_pickle entry); never unpickled"),
        _c("unsafe_name", "bool", "absolute path, '..' component, backslash or control "
           "character in the name"),
        _c("damaged", "bool", "ETRecord: the member's local header or bytes cannot be located "
           "(as Python's zipfile cannot read it): `offset` is -1, frames built from it are "
           "empty and validate() has an error naming it"),
        _c("used_by", "string", "tensor names whose bytes are in the member"),
    ],
    "models": [
        _c("name", "string", "model name (models/<name>.json or data/aotinductor/<name>/)"),
        _c("kind", "category", "exported_program | aoti"),
        _c("member", "string", "graph JSON member, or the AOTInductor shared object"),
        _c("nodes", "Int64", "graph nodes, nested subgraphs included (exported programs)"),
        _c("ops", "Int64", "distinct node targets"),
        _c("inputs", "Int64", "user inputs"),
        _c("outputs", "Int64", "user outputs"),
        _c("parameters", "Int64", "parameters"),
        _c("buffers", "Int64", "buffers"),
        _c("constants", "Int64", "tensor constants, custom objects and other constants"),
        _c("schema_version", "string", "torch.export serialization schema version"),
        _c("torch_version", "string", "torch version that wrote the graph"),
        _c("device", "string", "AOTInductor target device"),
    ],
    "graph": [
        _c("model", "category", "model name"),
        _c("target", "string", "node target, e.g. torch.ops.aten.linear.default"),
        _c("count", "int64", "nodes calling it (nested subgraphs included)"),
    ],
    "graph_nodes": [
        _c("model", "category", "model name"),
        _c("graph", "string", "'' for the program's graph, else the nested graph's path"),
        _c("index", "int64", "position in its graph's node (or input / output) list"),
        _c("kind", "category", "call (a node) | a graph input's signature kind (user_input, "
           "parameter, buffer, tensor_constant, ...) | a graph output's (user_output, "
           "buffer_mutation, ...)"),
        _c("name", "string", "node or value name (outputs: 'output:<value>')"),
        _c("target", "string", "call target; 'placeholder' / 'output' for graph inputs/outputs"),
        _c("inputs", "object", "names of the values read, in argument order (tuple)"),
        _c("outputs", "object", "names of the values written (tuple)"),
        _c("dtypes", "object", "dtype of each written value (tuple, None where unknown)"),
        _c("shapes", "object", "shape of each written value (tuple; -1: symbolic size)"),
        _c("fqn", "string", "parameter / buffer / constant name of a graph input or output"),
    ],
    "methods": [
        _c("method", "string", "execution plan name"),
        _c("index", "int64", "position in Program.execution_plan"),
        _c("values", "int64", "number of values (EValues)"),
        _c("tensors", "int64", "number of tensor values"),
        _c("inputs", "int64", "number of inputs"),
        _c("outputs", "int64", "number of outputs"),
        _c("chains", "int64", "number of chains"),
        _c("instructions", "int64", "instructions in all chains"),
        _c("kernel_calls", "int64", "KernelCall instructions"),
        _c("delegate_calls", "int64", "DelegateCall instructions"),
        _c("operators", "int64", "entries in the operator table"),
        _c("delegates", "int64", "backend delegates"),
        _c("planned_buffers", "int64", "memory-planned arenas (non_const_buffer_sizes[1:])"),
        _c("planned_bytes", "int64", "sum of the planned arena sizes"),
        _c("constant_bytes", "int64", "bytes of constant tensors (segment, inline, external)"),
        _c("constant_method", "bool", "no instructions: a constant method (returns stored values)"),
        _c("constant_value", "object", "what a constant method (no instructions) returns: its "
           "output value (int, float, bool, str, tuple for a list; a tuple of them for several "
           "outputs), e.g. get_max_seq_len -> 128; missing for other methods"),
    ],
    "values": [
        _c("method", "category", "execution plan name"),
        _c("value", "int64", "index in the value table"),
        _c("type", "category", "Null | Int | Bool | Double | Tensor | String | IntList | ..."),
        _c("summary", "string", "a short rendering of the value"),
        _c("is_input", "bool", "listed in the method's inputs"),
        _c("is_output", "bool", "listed in the method's outputs"),
    ],
    "operators": [
        _c("method", "category", "execution plan name"),
        _c("index", "int64", "position in the method's operator table"),
        _c("name", "string", "operator name, e.g. aten::addmm"),
        _c("overload", "string", "overload name, e.g. out"),
        _c("op", "string", "name.overload"),
        _c("uses", "int64", "KernelCall instructions that call it"),
        _c("kernel_keys", "object", "tuple: the distinct kernel keys of its calls as ExecuTorch's "
           "selective build writes them ('v1/<dtype>;<dim order>|...' over the tensor arguments; "
           "'default' where a call's key cannot be derived)"),
    ],
    "delegates": [
        _c("method", "category", "execution plan name"),
        _c("index", "int64", "position in the method's delegate table"),
        _c("id", "string", "backend id, e.g. XnnpackBackend"),
        _c("backend", "category", "backend the blob's bytes were recognised as (xnnpack, "
           "vulkan, coreml, mps, qnn, ethos-u, vgf, openvino, aoti, mlx, unknown); missing "
           "when the blob could not be taken apart (see validate())"),
        _c("layout", "string", "what the blob's bytes are, e.g. 'XH00 header + XN01 "
           "flatbuffer + constant data'"),
        _c("location", "category", "inline (in the flatbuffer) | segment"),
        _c("data_index", "int64", "index into backend_delegate_data or Program.segments"),
        _c("file", "string", "file holding the processed blob"),
        _c("offset", "int64", "absolute offset of the processed blob"),
        _c("size", "int64", "size of the processed blob"),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("compile_specs", "string", "compile spec keys, comma separated"),
        _c("calls", "int64", "DelegateCall instructions that call it"),
    ],
    "named_data": [
        _c("key", "string", "lookup key (XNNPACK uses the sha256 of the bytes)"),
        _c("segment", "int64", "segment index"),
        _c("file", "string", "file holding the bytes"),
        _c("offset", "int64", "absolute offset"),
        _c("size", "int64", "size in bytes"),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("has_layout", "boolean", "a tensor layout (dtype, sizes, dim order) is stored"),
        _c("role", "category", "tensor | blob | so_blob | weights_blob (AOTI delegate convention)"),
        _c("used_by", "string", "delegates whose blobs refer to this key"),
        _c("tensor", "string", "the delegate_tensors row stored under this key (the first, "
           "when several graph values share the bytes); '<name> (scales)' for the scales of "
           "a quantized tensor"),
        _c("dtype", "category", "that graph tensor's dtype (int4: packed two per byte; scales: "
           "their dtype)"),
        _c("shape", "object", "that graph tensor's logical shape (tuple of int)"),
        _c("quant", "category", "that graph tensor's quantization (delegate_tensors.quant)"),
        _c("group_size", "Int64", "elements per scale (groupwise quantization)"),
    ],
    "memory_plan": [
        _c("method", "category", "execution plan name"),
        _c("mem_id", "int64", "arena index (non_const_buffer_sizes index)"),
        _c("buffer_size", "Int64", "arena size in bytes (missing if mem_id is out of range)"),
        _c("value", "int64", "value index of the tensor"),
        _c("name", "string", "tensor name (fqn or synthetic)"),
        _c("dtype", "category", "torch dtype name"),
        _c("shape", "object", "tuple of int"),
        _c("offset", "int64", "offset inside the arena"),
        _c("nbytes", "int64", "tensor size (upper bound for dynamic shapes)"),
        _c("end", "int64", "offset + nbytes"),
        _c("storage", "category", "planned | mutable"),
        _c("fits", "bool", "the tensor lies inside its arena"),
    ],
    "test_cases": [
        _c("name", "string", "method/case/io/index, accepted by Artifact.tensor"),
        _c("method", "category", "method the test suite exercises"),
        _c("case", "int64", "test case index within the suite"),
        _c("io", "category", "input | expected_output"),
        _c("index", "int64", "position among the case's inputs or expected outputs"),
        _c("kind", "category", "Tensor | Int | Bool | Double"),
        _c("dtype", "category", "torch dtype name (tensors)"),
        _c("shape", "object", "tuple of int (tensors)"),
        _c("nbytes", "Int64", "tensor bytes"),
        _c("file", "string", "file holding the tensor bytes"),
        _c("offset", "Int64", "absolute offset of the tensor bytes"),
        _c("align", "Int64", "largest power of two dividing `offset`"),
        _c("value", "string", "scalar value (Int/Bool/Double)"),
        _c("dim_order", "object", "tuple: memory order of the dimensions"),
    ],
    "findings": [
        _c("severity", "category", "info | warning | error"),
        _c("structure", "string", "structure path"),
        _c("offset", "Int64", "absolute offset"),
        _c("message", "string", "what was found"),
    ],
    # -- workbench.scan(): a corpus of files. The format frames it collects (segments, tensors,
    # ...) keep every column of their schema (not-required int64/bool become Int64/boolean)
    # after a first column `artifact` (string): the scanned file the row came from.
    "artifacts": [
        _c("artifact", "string", "path of the scanned file (absolute); the key of every scan frame",
           True),
        _c("format", "category", "pte | ptd | bpte | pt2", True),
        _c("size", "int64", "bytes of the file", True),
        _c("data_files", "int64", "data files opened with it (.ptd next to a .pte)"),
        _c("data_bytes", "int64", "bytes of those data files"),
        _c("segments", "int64", "segments rows of the file itself"),
        _c("tensors", "int64", "tensors rows"),
        _c("stored_tensors", "int64", "tensors with stored bytes (an offset)"),
        _c("stored_tensor_bytes", "int64", "nbytes of those, summed (shared storage counted per tensor)"),
        _c("external", "int64", "tensors whose bytes live in a data file (storage 'external')"),
        _c("missing", "int64", "external tensors whose bytes were not found"),
        _c("methods", "Int64", "methods (.pte/.bpte)"),
        _c("operators", "Int64", "distinct operators (.pte/.bpte operator tables, .pt2 graph targets)"),
        _c("delegates", "Int64", "backend delegates (.pte/.bpte)"),
        _c("version", "Int64", "format version the reader reports, where there is one"),
        _c("findings", "int64", "non-fatal observations the reader made while parsing"),
        *(_c(f"{k}_bytes", "int64", f"bytes of `{k}` segments of the file") for k in SCAN_KINDS),
        _c("other_bytes", "int64", "bytes of segments of every other kind; all *_bytes sum to size"),
        _c("padding_pct", "float64", "padding_bytes as a percentage of size"),
    ],
    "errors": [
        _c("artifact", "string", "path of the file that could not be read", True),
        _c("error", "category", "exception class: UnknownFormatError, TruncatedError, ..., an "
           "OSError subclass for unreadable files, other names for reader bugs", True),
        _c("message", "string", "the message (names the file, structure and byte offset)", True),
        _c("structure", "string", "structure being read (ArtifactError)"),
        _c("offset", "Int64", "byte offset of the problem (ArtifactError)"),
    ],
}

# -- workbench.compare(): the frames of a Comparison (two artifacts, sides "a" and "b"). ---------
SCHEMAS["compare_tensors"] = [
    _c("side", "category", "both | a_only | b_only", True),
    _c("match", "category", "rule that matched the row: name (fqn / key) | method_value | content "
       "(sha256) | content_copy (extra copy of bytes already matched) | dequantized (a quantized "
       "delegate constant that is the float weight up to rounding); missing for one side", True),
    _c("name_a", "string", "tensor name on side a (missing for b_only)", True),
    _c("name_b", "string", "tensor name on side b (missing for a_only)", True),
    _c("dtype", "category", "dtype (of a; of b for b_only)", True),
    _c("shape", "object", "shape (of a; of b for b_only)", True),
    _c("nbytes", "int64", "bytes (of a; of b for b_only)", True),
    _c("dtype_b", "category", "b's dtype when dtype or shape differ (e.g. raw uint8 named data)"),
    _c("shape_b", "object", "b's shape when dtype or shape differ"),
    _c("nbytes_b", "Int64", "b's nbytes when it differs"),
    _c("storage_a", "category", "tensors.storage on side a", True),
    _c("storage_b", "category", "tensors.storage on side b", True),
    _c("file_a", "string", "file holding the bytes on side a", True),
    _c("file_b", "string", "file holding the bytes on side b", True),
    _c("offset_a", "Int64", "absolute offset in file_a", True),
    _c("offset_b", "Int64", "absolute offset in file_b", True),
    _c("align_a", "Int64", "largest power of two dividing offset_a"),
    _c("align_b", "Int64", "largest power of two dividing offset_b"),
    _c("moved", "string", "'storage_a → storage_b' (e.g. 'segment → external'; with the file "
       "extension when only the file kind changes); '' when the bytes stay put", True),
    _c("same_bytes", "boolean", "sha256_a == sha256_b; missing until hashed (Comparison.hash)",
       True),
    _c("sha256_a", "string", "SHA-256 of the stored bytes on side a (missing until hashed)"),
    _c("sha256_b", "string", "SHA-256 of the stored bytes on side b (missing until hashed)"),
]
SCHEMAS["compare_summary"] = [
    _c("side", "category", "a | b", True),
    _c("file", "string", "a file of that side; missing: the whole side", True),
    _c("metric", "category", "size (count: files) | weights | delegate | flatbuffer | header | "
       "metadata | padding | other (byte classes of the segments, they sum to size; count: "
       "segments) | tensors (all rows; bytes: nbytes summed) | stored_tensors (bytes: distinct "
       "stored ranges) | duplicates (count: groups; bytes: wasted by extra copies). Only size and "
       "the classes have per-file rows", True),
    _c("bytes", "Int64", "bytes of the metric", True),
    _c("count", "Int64", "files, segments, tensors or duplicate groups (see metric)", True),
    _c("share", "float64", "bytes / size of the side (or of the file for per-file rows)", True),
]
SCHEMAS["compare_segments"] = [
    _c("side", "category", "a | b: the artifact the segment belongs to", True),
    *SCHEMAS["segments"],
]
SCHEMAS["compare_duplicates"] = [
    _c("side", "category", "a | b: copies are searched within one side (all its files)", True),
    _c("sha256", "string", "SHA-256 of the bytes", True),
    _c("nbytes", "int64", "size of one copy", True),
    _c("copies", "int64", "distinct byte ranges holding these bytes", True),
    _c("wasted", "int64", "nbytes x (copies - 1)", True),
    _c("files", "int64", "distinct files holding a copy", True),
    _c("names", "string", "tensor names / blob names at those ranges, '; '-separated", True),
    _c("locations", "string", "'file@0xoffset' of each copy, '; '-separated", True),
]

# -- workbench.profile(): load paths (workbench/loadpaths/), one fresh process per run. ---------
SCHEMAS["profile"] = [
    _c("path", "string", "load path name (workbench.loadpaths.PATHS), or 'etdump:<event>': "
       "the runtime's own timing of its load, from an ETDump (Profile.with_etdump)", True),
    _c("run", "int64", "run index (a skipped path has one row, run 0)", True),
    _c("device", "category", "cpu | cuda", True),
    _c("status", "category", "ok | error (message in `error`; a crashed worker has rc < 0) | "
       "skipped (reason in `error`)", True),
    _c("wall_s", "float64", "seconds until every weight byte was read once: load_s + read_s "
       "(imports and setup excluded)", True),
    _c("load_s", "float64", "seconds of the load alone (zero-copy paths: mapping + one touch per page)"),
    _c("read_s", "float64", "seconds of the read after it: a checksum of every weight byte "
       "(runtime paths: the first forward)"),
    _c("steady_s", "float64", "runtime paths: seconds of a second forward (not in wall_s)"),
    _c("bytes", "Int64", "bytes made available: every file (whole-file paths) or the unique "
       "stored tensor ranges (per-tensor and device paths)", True),
    _c("bytes_copied", "Int64", "bytes copied into new host or device memory (0: zero-copy)"),
    _c("read_bytes", "Int64", "weight bytes the read phase read (the same for every path)"),
    _c("gbps", "float64", "read_bytes / wall_s / 1e9 (ok runs)", True),
    _c("load_gbps", "float64", "bytes / load_s / 1e9 (zero-copy: pages mapped, not bytes read)"),
    _c("consume", "category", "the read phase: checksum | device_checksum | forward | none"),
    _c("checksum", "string", "hex sum of the weights' 64-bit words (forward: of the outputs); "
       "a mismatch with the file's is an error"),
    _c("peak_rss_growth", "Int64", "VmHWM after the load minus VmRSS before (mark reset first)"),
    _c("rss_anon_growth", "Int64", "RssAnon growth held at the end: private copies"),
    _c("rss_file_growth", "Int64", "RssFile (+RssShmem) growth held at the end: mapped pages"),
    _c("locked", "Int64", "VmLck at the end (mlock'ed bytes, e.g. the ExecuTorch mmap loader)"),
    _c("major_faults", "Int64", "major page faults during the load (getrusage)"),
    _c("minor_faults", "Int64", "minor page faults during the load (getrusage)"),
    _c("cuda_peak_bytes", "Int64", "CUDA paths: peak torch allocation during the load (else the "
       "growth of device memory in use)"),
    _c("resident_before", "float64", "fraction of the files' pages in the page cache just "
       "before the load (mincore)"),
    _c("cold_requested", "bool", "the files were evicted before the run"),
    _c("cold_achieved", "boolean", "at most 2% of the pages stayed resident (missing unless "
       "cold was requested)"),
    _c("cold_note", "string", "cold requested but not achieved: what stayed and why it may have"),
    _c("roofline", "category", "the limit gbps is compared with: ram_read | h2d_pinned | "
       "memcpy | page_cache_read"),
    _c("roofline_gbps", "float64", "that limit, measured in the same profile run"),
    _c("frac_roofline", "float64", "gbps / roofline_gbps"),
    _c("rc", "Int64", "worker exit code (negative: killed by that signal)"),
    _c("hwm_reset", "boolean", "the RSS high-water mark could be reset before the load"),
    _c("error", "string", "error message or skip reason"),
    _c("note", "string", "what the path reports about itself"),
]
SCHEMAS["profile_summary"] = [
    _c("path", "string", "load path name, or 'etdump:<event>' (as in `profile`)", True),
    _c("device", "category", "cpu | cuda", True),
    _c("status", "category", "ok (at least one ok run) | error | skipped", True),
    _c("runs", "int64", "ok runs the medians are taken over", True),
    _c("consume", "category", "the read phase (as in `profile`)"),
    _c("wall_s", "float64", "median seconds until every weight byte was read once", True),
    _c("load_s", "float64", "median seconds of the load alone"),
    _c("read_s", "float64", "median seconds of the read phase"),
    _c("steady_s", "float64", "median seconds of a second forward (runtime paths)"),
    _c("bytes", "Int64", "median bytes made available", True),
    _c("bytes_copied", "Int64", "median bytes copied"),
    _c("read_bytes", "Int64", "median weight bytes read"),
    _c("gbps", "float64", "median GB/s (read_bytes / wall_s)", True),
    _c("load_gbps", "float64", "median bytes / load_s"),
    _c("peak_rss_growth", "Int64", "median peak RSS growth"),
    _c("rss_anon_growth", "Int64", "median anonymous RSS growth held at the end"),
    _c("rss_file_growth", "Int64", "median file-backed RSS growth held at the end"),
    _c("locked", "Int64", "median VmLck at the end"),
    _c("major_faults", "Int64", "median major page faults"),
    _c("minor_faults", "Int64", "median minor page faults"),
    _c("cuda_peak_bytes", "Int64", "median CUDA peak bytes"),
    _c("resident_before", "float64", "median fraction resident before the load"),
    _c("cold_achieved", "boolean", "every run achieved cold (missing unless requested)"),
    _c("cold_note", "string", "cold_note of the first run that was not cold"),
    _c("roofline", "category", "ram_read | h2d_pinned | memcpy | page_cache_read"),
    _c("roofline_gbps", "float64", "the limit in GB/s"),
    _c("frac_roofline", "float64", "median gbps / roofline_gbps"),
    _c("frac_memcpy", "float64", "median gbps / memcpy GB/s"),
    _c("error", "string", "skip reason, error, or 'k of n runs failed: ...'"),
    _c("note", "string", "note of the first ok run"),
]

# -- ETDump runtime traces (workbench/formats/etdump/): `run` is the index of the RunData block
# in the file, `block` its name (the runtime writes `Default` for the load and one `Execute` per
# execution), `iteration` the k-th block of that name. Timestamps are the runtime's raw units
# (ns with the default clock; cycles on some targets). Table positions are `table_offset`.
_RUN_COLUMNS = [
    _c("run", "int64", "index of the RunData block in ETDump.run_data", True),
    _c("block", "category", "RunData.name: Default (load) | Execute (one execution) | ...", True),
    _c("iteration", "int64", "the k-th block with this name (0, 1, ...)"),
]
_DELEGATE_ID_COLUMNS = [
    _c("delegate_debug_id", "category", "delegate debug identifier as the Inspector names it: "
       "the integer id when set, else the string id; missing for non-delegated events", True),
    _c("delegate_debug_id_int", "Int64", "delegate_debug_id_int (missing when -1: not set)"),
    _c("delegate_debug_id_str", "string", "delegate_debug_id_str (e.g. an XNNPACK operator "
       "'Fully Connected (NC, F32) GEMM #1')"),
]
SCHEMAS["runs"] = [
    *_RUN_COLUMNS,
    _c("bundled_input_index", "Int64", "bundled test input used for this run (missing when -1)"),
    _c("events", "int64", "events in the block (all types)"),
    _c("profile_events", "int64", "profile events (rows of `events`)"),
    _c("allocation_events", "int64", "allocation events (rows of `allocations`)"),
    _c("debug_events", "int64", "debug events (values logged; rows of `debug_values` by event)"),
    _c("unknown_events", "int64", "events with no known type set (a newer schema?)"),
    _c("allocators", "string", "RunData.allocators names, '; '-separated"),
    _c("start", "Int64", "earliest start of the block's profile events (missing: none)"),
    _c("end", "Int64", "latest end of the block's profile events"),
    _c("duration", "Int64", "end - start"),
    _c("table_offset", "int64", "absolute offset of the RunData table in the .etdp"),
]
SCHEMAS["events"] = [
    *_RUN_COLUMNS,
    _c("index", "int64", "position of the event in RunData.events (all types counted)"),
    _c("name", "category", "event name as the Inspector gives it: the delegate debug id for "
       "delegated events, else ProfileEvent.name", True),
    _c("event_name", "category", "ProfileEvent.name as stored (missing when absent)"),
    _c("kind", "category", "delegate_op (logged by a backend: a delegate debug id is set) | "
       "framework (chain -1: Program::load_method, Method::init, Method::execute) | "
       "operator_call (OPERATOR_CALL: one kernel instruction) | kernel (native_call_<op>: the "
       "kernel body inside it) | delegate_call (DELEGATE_CALL: one delegate instruction) | other",
       True),
    _c("chain", "int64", "ProfileEvent.chain_index (-1: the runtime's own events)", True),
    _c("instruction", "int64", "ProfileEvent.instruction_id in the chain (-1: not set; the "
       "runtime writes 0 for its own events)", True),
    *_DELEGATE_ID_COLUMNS,
    _c("start", "uint64", "start_time (raw runtime units)", True),
    _c("end", "uint64", "end_time (raw runtime units)", True),
    _c("duration", "Int64", "end - start; a start after the end is a wrapped 32-bit timer "
       "((2**32 - 1 - start) + end, the Inspector's rule), else missing", True),
    _c("metadata_offset", "Int64", "absolute offset of delegate_debug_metadata bytes (missing: "
       "absent)"),
    _c("metadata_size", "Int64", "length of delegate_debug_metadata (missing: absent)"),
    _c("table_offset", "int64", "absolute offset of the ProfileEvent table in the .etdp"),
]
SCHEMAS["allocations"] = [
    *_RUN_COLUMNS,
    _c("index", "int64", "position of the event in RunData.events"),
    _c("allocator_id", "int64", "AllocationEvent.allocator_id (index in RunData.allocators)"),
    _c("allocator", "string", "the allocator's name (missing when the id is out of range)"),
    _c("size", "uint64", "allocation_size in bytes"),
    _c("table_offset", "int64", "absolute offset of the AllocationEvent table"),
]
SCHEMAS["debug_values"] = [
    *_RUN_COLUMNS,
    _c("index", "int64", "position of the DebugEvent in RunData.events"),
    _c("list_index", "Int64", "position in a TensorList (one row per tensor; missing otherwise)"),
    _c("name", "category", "DebugEvent.name, or the delegate debug id for delegated values"),
    _c("chain", "int64", "DebugEvent.chain_index (-1: a program output)"),
    _c("instruction", "int64", "DebugEvent.instruction_id (-1: not set)"),
    *_DELEGATE_ID_COLUMNS,
    _c("type", "category", "Value.val: Null | Int | Bool | Float | Double | Tensor | TensorList | "
       "String (missing when the event has no debug_entry)"),
    _c("output", "boolean", "Value.output: the runtime marks program outputs True (missing: "
       "absent)"),
    _c("value", "object", "the scalar of an Int/Bool/Float/Double value (None otherwise)"),
    _c("tensor", "string", "name of the tensor in `tensors` / for Artifact.tensor: "
       "'<run>/<index>' ('/<list_index>' for a list element)"),
    _c("dtype", "category", "tensor dtype"),
    _c("shape", "object", "tuple of int (Tensor.sizes)"),
    _c("strides", "object", "tuple of int (Tensor.strides, in elements)"),
    _c("nbytes", "Int64", "numel x element size"),
    _c("file", "string", "the attached debug buffer (missing: none attached)"),
    _c("offset", "Int64", "absolute offset of the bytes in `file` (missing: none attached)"),
    _c("debug_offset", "Int64", "Tensor.offset: where the bytes are in the debug buffer"),
    _c("table_offset", "int64", "absolute offset of the DebugEvent table in the .etdp"),
]

# -- ETRecords (workbench/formats/etrecord/): `members` as for .pt2 (kind: marker | program |
# state_dict | constants | example_inputs | debug_handle_map | delegate_map | num_outs_map |
# export_graph_id | reference_outputs | representative_inputs | other; `model` is the program a
# member belongs to), plus:
SCHEMAS["programs"] = [
    _c("program", "string", "member holding the serialized exported program (JSON)", True),
    _c("stage", "category", "export (given to to_edge) | edge (edge dialect, per method) | extra "
       "(a graph recorded by name)", True),
    _c("method", "category", "method the program is for (missing: not per method)"),
    _c("nodes", "int64", "graph nodes, nested graphs included"),
    _c("ops", "int64", "distinct node targets"),
    _c("debug_handles", "int64", "nodes with a debug handle"),
    _c("schema_version", "string", "torch.export serialization schema version"),
    _c("dialect", "string", "the program's dialect field"),
]
SCHEMAS["nodes"] = [
    _c("program", "category", "member of the program the node belongs to", True),
    _c("stage", "category", "export | edge | extra (see `programs`)"),
    _c("method", "category", "method of the program (missing: not per method)"),
    _c("graph", "string", "'' for the program's graph, else the nested graph's path (control flow)"),
    _c("index", "int64", "position in its graph's node list"),
    _c("name", "string", "node name", True),
    _c("target", "category", "call target, e.g. executorch.exir.dialects.edge.ops.aten.addmm.default",
       True),
    _c("op", "category", "target without the torch.ops. / edge dialect prefix: aten.addmm.default"),
    _c("debug_handle", "Int64", "metadata debug_handle: what ETDump instructions and delegate "
       "events refer to (missing: none)", True),
    _c("module", "string", "innermost module path from nn_module_stack (e.g. 'fc1')", True),
    _c("module_type", "category", "its class, e.g. torch.nn.modules.linear.Linear"),
    _c("module_stack", "string", "nn_module_stack as serialized: 'key,path,type' joined by ';'"),
    _c("stack_trace", "string", "Python stack trace recorded at export (the exporting machine's "
       "paths)", True),
    _c("torch_fn", "string", "metadata torch_fn"),
    _c("inputs", "object", "names of the values the node reads, in argument order (tuple)"),
    _c("outputs", "object", "names of the values the node writes (tuple)"),
    _c("dtypes", "object", "dtype of each written value (tuple, None where unknown)"),
    _c("shapes", "object", "shape of each written value (tuple of tuples; -1: symbolic size)"),
]
SCHEMAS["debug_handles"] = [
    _c("method", "category", "method (missing: a map written without the method level)", True),
    _c("instruction", "int64", "instruction id in the method's chain", True),
    _c("position", "int64", "position in the instruction's list of handles"),
    _c("debug_handle", "int64", "debug handle of a node the instruction runs", True),
    _c("node", "string", "an edge-program node with that handle: one row per node (a handle "
       "can name several, e.g. permute_copy + addmm of one linear); missing: none has it"),
    _c("target", "category", "its target"),
    _c("op", "category", "its target without the dialect prefix (the Inspector's op_types)"),
]
SCHEMAS["delegate_map"] = [
    _c("method", "category", "method (missing: a map written without the method level)", True),
    _c("instruction", "int64", "instruction id of the delegate call", True),
    _c("backend", "category", "backend id, e.g. XnnpackBackend", True),
    _c("delegate_debug_id", "string", "delegate debug identifier (ETDump events carry it; "
       "missing: the delegate recorded no map)", True),
    _c("position", "Int64", "position in the identifier's list of handles"),
    _c("debug_handle", "Int64", "debug handle of a node the delegate runs for that identifier"),
    _c("node", "string", "an edge-program node with that handle (one row per node)"),
    _c("target", "category", "its target"),
    _c("op", "category", "its target without the dialect prefix"),
]

# -- inside delegate blobs (workbench/formats/delegates/): one row per tensor value / node of a
# backend's graph, for every blob whose backend describes them (XNNPACK, Vulkan, MPS; Ethos-U
# lists its inputs/outputs). `method` + `index` match the `delegates` frame.
SCHEMAS["delegate_tensors"] = [
    _c("delegate", "category", "backend id the program gives, e.g. XnnpackBackend", True),
    _c("method", "category", "method the delegate belongs to", True),
    _c("index", "int64", "position in the method's delegate table (delegates.index)", True),
    _c("name", "string", "'<method>/delegate<index>/<value id>'"),
    _c("value", "int64", "value id in the backend graph (XNNPACK id_out)"),
    _c("dtype", "category", "torch dtype name of the logical elements: float32, bfloat16, int8, "
       "int4 (packed two per byte), ...", True),
    _c("backend_dtype", "category", "the backend's own type, e.g. XNNPACK fp32, qcint8, qbint4, "
       "qdint8"),
    _c("shape", "object", "tuple of int: the backend's dims", True),
    _c("numel", "int64", "elements"),
    _c("nbytes", "int64", "stored bytes: numel x element size; 4-bit rows hold ceil(cols / 2) "
       "bytes", True),
    _c("role", "category", "constant | input | output | internal (an activation of the graph)"),
    _c("quant", "category", "none | per_tensor | per_channel | per_channel_group (groupwise) | "
       "per_token_dynamic", True),
    _c("group_size", "Int64", "elements per scale along the row (per_channel_group)", True),
    _c("channel_dim", "Int64", "dimension the scales run along (per_channel, per_channel_group)"),
    _c("num_scales", "Int64", "scales stored (per_channel: channels; groupwise: rows x groups)"),
    _c("scale", "float64", "per_tensor scale"),
    _c("zero_point", "Int64", "per_tensor zero point (4-bit XNNPACK types store value + 8)"),
    _c("scale_dtype", "category", "float32 | bfloat16 (XNNPACK groupwise scales)"),
    _c("scale_storage", "category", "where the scales are: inline (in the graph flatbuffer) | "
       "blob | named_data | external"),
    _c("scale_key", "string", "named-data key of the scales"),
    _c("scale_file", "string", "file holding the scales"),
    _c("scale_offset", "Int64", "absolute offset of the scales"),
    _c("scale_nbytes", "Int64", "bytes of the scales"),
    _c("storage", "category", "where the values are: runtime (no stored bytes) | blob (the "
       "delegate's constant data) | inline (inside the graph flatbuffer) | named_data (the "
       "program's named data) | external (a .ptd)", True),
    _c("named_key", "string", "named-data key of the bytes (XNNPACK: sha256 hex)", True),
    _c("file", "string", "file holding the bytes (missing: none stored or not found)", True),
    _c("offset", "Int64", "absolute offset of the bytes in `file`", True),
    _c("align", "Int64", "largest power of two dividing `offset`"),
    _c("data_size", "Int64", "bytes the graph says are stored (ConstantDataOffset.size)"),
    _c("constant_index", "Int64", "index in the graph's constant table (XNNPACK constant_data)"),
    _c("external_id", "Int64", "external id (graph inputs/outputs)"),
    _c("flags", "int64", "value flags (XNNPACK: 1 external input, 2 external output)"),
    _c("missing", "boolean", "a named key was looked up and not found (missing: not looked up)"),
]
SCHEMAS["delegate_nodes"] = [
    _c("delegate", "category", "backend id the program gives", True),
    _c("method", "category", "method the delegate belongs to", True),
    _c("index", "int64", "position in the method's delegate table", True),
    _c("node", "int64", "position in the backend graph's node list", True),
    _c("op", "category", "operation, e.g. FullyConnected, Convert (XNNPACK), "
       "aten.linear.default (Vulkan)", True),
    _c("inputs", "object", "tuple of input value ids (absent optional inputs left out; Vulkan: "
       "every argument)", True),
    _c("outputs", "object", "tuple of output value ids", True),
    _c("flags", "int64", "node flags"),
    _c("debug_handle", "Int64", "debug handle linking back to the edge-program node"),
    _c("output_min", "float64", "fused clamp minimum (NaN: none)"),
    _c("output_max", "float64", "fused clamp maximum (NaN: none)"),
]

# -- a program's instructions over time (workbench/formats/pte/instructions.py) and the join of
# an ETDump to them (workbench/timing.py). `position` is the instruction's place in the method's
# execution order (chain by chain); a single-chain method has position == instruction.
SCHEMAS["instructions"] = [
    _c("method", "category", "execution plan name", True),
    _c("chain", "int64", "chain index (ETDump chain_index)", True),
    _c("instruction", "int64", "index in the chain (ETDump instruction_id)", True),
    _c("position", "int64", "index in the method's execution order (chain by chain)"),
    _c("kind", "category", "kernel | delegate | move | jump_false | free | none", True),
    _c("op_index", "Int64", "KernelCall.op_index (kernel calls)"),
    _c("op", "string", "operator 'name.overload' (kernel calls)"),
    _c("operator", "string", "Operator.name, e.g. aten::addmm"),
    _c("overload", "string", "Operator.overload, e.g. out"),
    _c("delegate_index", "Int64", "DelegateCall.delegate_index (delegate calls)"),
    _c("delegate", "string", "the called BackendDelegate's id, e.g. XnnpackBackend"),
    _c("args", "object", "tuple of value indices: KernelCall/DelegateCall.args, (move_from, "
       "move_to), (cond_value_index,) or (value_index,)", True),
    _c("reads", "object", "tuple of value indices read: the arguments not written, tensor "
       "lists expanded to their member tensors"),
    _c("writes", "object", "tuple of value indices written (tensor lists expanded): for a kernel "
       "call, the arguments its operator's schema marks as written (`Tensor(a!)`, "
       "`Tensor(a!)[]`) and its return values (workbench.operators); for an operator not in "
       "that table, a guess (see `alias_source`); a delegate's trailing non-constant tensors no "
       "earlier instruction used; move_to"),
    _c("alias_source", "category", "which rule split the arguments into reads and writes: "
       "schema | guessed: returned values | guessed: last argument | guessed: nothing written | "
       "guessed: arguments differ from the schema | delegate: trailing outputs (missing: move, "
       "jump, free)"),
    _c("destination", "Int64", "JumpFalseCall.destination_instruction"),
    _c("table_offset", "int64", "absolute offset of the Instruction table"),
]
SCHEMAS["lifetimes"] = [
    _c("method", "category", "execution plan name", True),
    _c("value", "int64", "value index of the memory-planned tensor", True),
    _c("name", "string", "tensor name (as in `tensors`)"),
    _c("storage", "category", "planned | mutable"),
    _c("mem_id", "int64", "arena index", True),
    _c("offset", "int64", "offset inside the arena", True),
    _c("nbytes", "int64", "tensor bytes (upper bound for dynamic shapes)", True),
    _c("end_offset", "int64", "offset + nbytes"),
    _c("first", "Int64", "position of the first instruction naming it (missing: none)", True),
    _c("last", "Int64", "position of the last instruction naming it", True),
    _c("is_input", "bool", "a method input (live from position 0)"),
    _c("is_output", "bool", "a method output (live to the last instruction)"),
    _c("live_from", "Int64", "first position it must hold its bytes (0 for inputs)"),
    _c("live_to", "Int64", "last position it must hold its bytes (the end for outputs)"),
]
SCHEMAS["memory_efficiency"] = [
    _c("method", "category", "execution plan name", True),
    _c("mem_id", "int64", "arena index (non_const_buffer_sizes index)", True),
    _c("arena_bytes", "Int64", "non_const_buffer_sizes[mem_id] (missing: out of range)", True),
    _c("tensors", "int64", "planned tensors placed in the arena"),
    _c("tensor_bytes", "int64", "their bytes added up (no reuse)"),
    _c("high_water", "int64", "largest offset + nbytes"),
    _c("peak_live_bytes", "int64", "most bytes live at one instruction (overlapping ranges once)",
       True),
    _c("peak_at", "Int64", "position of that instruction"),
    _c("peak_exact", "bool", "False: too big to merge ranges, the peak is a sum of bytes"),
    _c("efficiency", "float64", "peak_live_bytes / arena_bytes (1.0: no byte wasted)", True),
]
# -- the kernels a program needs (workbench/runtime: a view over `operators` and the installed
# runtime's registered operators)
SCHEMAS["kernels"] = [
    _c("op", "string", "operator 'ns::name.overload' of kernel (non-delegated) calls", True),
    _c("library", "string", "kernel library that provides it: portable | quantized | "
       "llm_custom_ops (workbench.operators; missing: no known library)", True),
    _c("module", "string", "the Python module whose import registers that library's kernels"),
    _c("registered", "boolean", "the installed ExecuTorch runtime registers it (with the "
       "library imported); missing: ExecuTorch is not installed", True),
    _c("uses", "int64", "kernel calls of it, over every method", True),
    _c("methods", "string", "the methods calling it, ', '-separated"),
    _c("kernel_keys", "object", "tuple of its calls' kernel keys (see operators.kernel_keys)"),
    _c("schema", "string", "'schema': its reads/writes come from its operator schema (else "
       "missing: guessed, see instructions.alias_source)"),
]
SCHEMAS["timeline"] = [
    _c("run", "int64", "index of the RunData block in the ETDump", True),
    _c("block", "category", "RunData.name (Default: load, Execute: one execution)"),
    _c("iteration", "int64", "the k-th block with this name"),
    _c("index", "int64", "position of the event in RunData.events"),
    _c("name", "category", "event name as the Inspector gives it", True),
    _c("event", "category", "the ETDump event kind (events.kind)"),
    _c("kind", "category", "kernel (a kernel instruction) | delegate (a delegate call or an "
       "event a backend logged inside it) | framework (the runtime's own) | other", True),
    _c("method", "category", "method the event is attributed to (missing: none fits)", True),
    _c("attribution", "category", "exact (one method has this chain/instruction of this kind) | "
       "ambiguous (several do: the first is named) | none | framework", True),
    _c("candidates", "string", "every method that fits, '; '-separated"),
    _c("chain", "int64", "ProfileEvent.chain_index", True),
    _c("instruction", "int64", "ProfileEvent.instruction_id", True),
    _c("op", "string", "operator 'name.overload' of a kernel instruction"),
    _c("operator", "string", "Operator.name"),
    _c("overload", "string", "Operator.overload"),
    _c("delegate_index", "Int64", "DelegateCall.delegate_index"),
    _c("backend", "string", "the delegate's backend id"),
    _c("delegate_debug_id", "string", "the event's delegate debug id (backend-internal events)"),
    _c("reads", "object", "tuple of value indices read (tensor lists expanded)"),
    _c("writes", "object", "tuple of value indices written (tensor lists expanded)"),
    _c("alias_source", "string", "which rule gave reads/writes (the instructions frame's "
       "alias_source: 'schema' or a guess)"),
    _c("read_names", "object", "tuple of the read tensors' names"),
    _c("write_names", "object", "tuple of the written tensors' names"),
    _c("read_bytes", "int64", "bytes of the tensors read"),
    _c("write_bytes", "int64", "bytes of the tensors written"),
    _c("storages", "string", "storages of the tensors touched, e.g. 'constant, planned'"),
    _c("start", "uint64", "start_time (raw runtime units)"),
    _c("end", "uint64", "end_time"),
    _c("duration", "Int64", "end - start (raw units)", True),
    _c("debug_handles", "object", "tuple of ETRecord debug handles of the instruction"),
    _c("nodes", "string", "edge-program nodes (ETRecord): of the instruction or, for an event "
       "inside a delegate, of its delegate debug id"),
    _c("ops", "string", "their ops (the Inspector's op_types), '; '-separated"),
    _c("module", "string", "module paths of those nodes (nn_module_stack), '; '-separated"),
]
SCHEMAS["timeline_stats"] = [
    _c("method", "category", "method", True),
    _c("chain", "int64", "chain index", True),
    _c("instruction", "int64", "index in the chain", True),
    _c("kind", "category", "kernel | delegate | framework | other", True),
    _c("name", "category", "event name", True),
    _c("op", "string", "operator of a kernel instruction"),
    _c("backend", "string", "backend of a delegate call"),
    _c("count", "int64", "events (one per iteration)", True),
    _c("total", "Int64", "sum of durations (raw units)"),
    _c("mean", "float64", "mean duration", True),
    _c("std", "float64", "standard deviation (ddof=1; NaN for one event)"),
    _c("min", "Int64", "shortest"),
    _c("median", "float64", "median duration"),
    _c("max", "Int64", "longest"),
    _c("share", "float64", "total / the sum of totals of the same kind"),
    _c("read_bytes", "int64", "bytes read per call"),
    _c("write_bytes", "int64", "bytes written per call"),
    _c("alias_source", "string", "which rule gave the reads/writes ('schema' or a guess)"),
    _c("storages", "string", "storages touched"),
    _c("module", "string", "module paths (ETRecord)"),
]

_INDEX = {name: {c.name: c for c in cols} for name, cols in SCHEMAS.items()}


def build(name: str, columns: dict[str, Any]) -> pd.DataFrame:
    """A DataFrame for frame ``name`` from plain columns, with the declared dtypes and order.

    Raises ``KeyError`` for a column the schema does not declare and ``ValueError`` when a
    required column is missing (both are programming errors, not artifact errors).

    Example:
        >>> df = build("named_data", {"key": ["a"], "segment": [0], "file": ["x.pte"],
        ...                           "offset": [128], "size": [4], "align": [128]})
        >>> df.dtypes["offset"]
        dtype('int64')
    """
    import pandas as pd

    schema = SCHEMAS[name]
    index = _INDEX[name]
    for col in columns:
        if col not in index:
            raise KeyError(f"frame {name!r} has no column {col!r} in workbench.frames.SCHEMAS")
    data = {}
    for col in schema:
        if col.name not in columns:
            if col.required:
                raise ValueError(f"frame {name!r} lacks required column {col.name!r}")
            continue
        values = columns[col.name]
        # Readers may hand over ready arrays (numpy / pandas) for big columns: used as is.
        data[col.name] = values if not isinstance(values, list) else _CONVERT[col.dtype](values)
    # copy=True: readers may share arrays between frames and with their own records; a
    # user editing one frame in place must not change another (or the reader's state).
    return pd.DataFrame(data, copy=True)


# -- fast converters from Python lists to pandas arrays (frames are built on hot paths) ------

def _int64(values: list) -> object:
    import numpy as np

    return np.array(values, dtype=np.int64)


def _bool(values: list) -> object:
    import numpy as np

    return np.array(values, dtype=bool)


def _object(values: list) -> object:
    import pandas as pd

    return pd.Series(values, dtype=object).array


def _nullable(values: list, kind: str) -> object:
    import numpy as np
    import pandas as pd

    dtype = np.int64 if kind == "Int64" else bool
    cls = pd.arrays.IntegerArray if kind == "Int64" else pd.arrays.BooleanArray
    n = len(values)
    if None not in values:
        return cls(np.array(values, dtype=dtype), np.zeros(n, bool))
    if values.count(None) == n:
        return cls(np.zeros(n, dtype=dtype), np.ones(n, bool))
    arr = np.array(values, dtype=object)
    mask = np.equal(arr, None)
    arr[mask] = 0
    return cls(arr.astype(dtype), mask)


def _string(values: list) -> object:
    import numpy as np
    import pandas as pd

    from ._cols import string_array

    if None in values and values.count(None) == len(values):
        return string_array(np.full(len(values), pd.NA, dtype=object))
    arr = np.array(values, dtype=object) if values else np.empty(0, dtype=object)
    if None in values:
        arr[np.equal(arr, None)] = pd.NA
    return string_array(arr)


def _category(values: list) -> object:
    import numpy as np
    import pandas as pd

    if not values:
        return pd.Categorical([])
    index: dict[object, int] = {}
    codes = [-1 if v is None else index.setdefault(v, len(index)) for v in values]
    if all(type(v) is str for v in index):  # names (the usual): no pandas factorize set-up
        from ._cols import categorical

        return categorical(np.array(codes, np.int64), list(index))
    codes, uniques = pd.factorize(np.array(values, dtype=object), use_na_sentinel=True)
    return pd.Categorical.from_codes(codes, categories=uniques, validate=False)


def _float64(values: list) -> object:
    import numpy as np

    return np.array(values, dtype=np.float64)


_CONVERT = {
    "int64": _int64,
    "float64": _float64,
    "bool": _bool,
    "object": _object,
    "string": _string,
    "category": _category,
    "Int64": lambda v: _nullable(v, "Int64"),
    "boolean": lambda v: _nullable(v, "boolean"),
}


def describe(name: str | None = None) -> pd.DataFrame:
    """The schema as a frame (frame, column, dtype, required, doc): documentation at hand.

    Example:
        >>> describe("tensors").query("required")["column"].tolist()
        ['name', 'dtype', 'shape', 'nbytes', 'storage', 'file', 'offset']
    """
    import pandas as pd

    rows = [(f, c.name, c.dtype, c.required, c.doc) for f, cols in SCHEMAS.items()
            if name in (None, f) for c in cols]
    return pd.DataFrame(rows, columns=["frame", "column", "dtype", "required", "doc"])
