"""The names and codes a ``.pt2`` archive uses, named once.

Member paths and kinds of the archive (``torch.export.save`` and AOTInductor packages), the
``ScalarType`` numbers of the weights/constants configs, the keys of the serialized graph
JSON that :mod:`.graph_json` relies on, the ``constants_info_`` fields of an AOTInductor
wrapper, the ELF symbols that bound its constants, and the size limits.
"""

from __future__ import annotations

from ... import limits as _limits
from ...dtypes import BY_NAME
from .._zip import LOCAL_MAGIC

FORMAT = "pt2"
#: A zip archive starts with a local file header.
MAGIC = LOCAL_MAGIC

# -- limits -------------------------------------------------------------------------------------
#: Largest metadata member (JSON config, graph, generated source) read into memory.
METADATA_LIMIT = _limits.JSON_MAX_BYTES
#: Largest small text member (``archive_format``, ``byteorder``, ...).
SMALL_LIMIT = _limits.ZIP_SMALL_MEMBER_BYTES
#: Sizes, offsets and byte counts must stay below this (they go to int64 columns).
LIMIT = _limits.BYTES_MAX
#: Above this size a graph JSON is scanned instead of fully parsed (see ``graph_stats``).
FULL_PARSE_LIMIT = _limits.JSON_FULL_PARSE_BYTES
#: AOTInductor pads each CPU constant to this many bytes (``ALIGN_BYTES``).
AOTI_ALIGN = 64

# -- archive members (paths relative to the archive root folder) --------------------------------
#: Small text members read into ``info``: info key -> member path.
TEXT_MEMBERS: dict[str, str] = {"archive_format": "archive_format",
                                "archive_version": "archive_version",
                                "byteorder": "byteorder", "data_version": ".data/version"}
#: The expected contents of ``archive_format`` and ``byteorder``.
ARCHIVE_FORMAT = "pt2"
BYTEORDER = "little"
#: Top-level folders holding metadata only.
METADATA_DIRS = (".data", "extra")
DATA_DIR = "data"
MODELS_DIR = "models"
WEIGHTS_DIR = "weights"
CONSTANTS_DIR = "constants"
SAMPLE_INPUTS_DIR = "sample_inputs"
AOTI_DIR = "aotinductor"
#: ``data/<dir>/<model><suffix>``: the config of a model's weights / constants.
CONFIG_SUFFIX = {WEIGHTS_DIR: "_weights_config.json", CONSTANTS_DIR: "_constants_config.json"}
#: ``models/<model>.json``: the serialized graph.
GRAPH_SUFFIX = ".json"
#: A torch.save pickle (``data/weights/<model>.pt``, ``data/sample_inputs/<model>.pt``).
PICKLE_SUFFIX = ".pt"
#: torch.export.save before the pt2 layout (torch <= 2.7) wrote a flat zip around this member.
LEGACY_PROGRAM = "serialized_exported_program.json"
LEGACY_LAYOUT = "torch.export legacy flat layout (torch <= 2.7)"
#: ``data/constants/custom_obj_<n>``, ``opaque_obj_<n>``: pickled script objects.
PICKLED_CONSTANT_PREFIXES = ("custom_obj_", "opaque_obj_")
#: Generated sources of an AOTInductor package.
SOURCE_SUFFIXES = (".cpp", ".h", ".hpp", ".c", ".cu", ".S")
#: The AOTInductor wrapper source, its metadata, the shared object and the weights blob.
AOTI_WRAPPER_SUFFIX = "wrapper.cpp"
AOTI_CPP_SUFFIX = ".cpp"
AOTI_METADATA_SUFFIX = "_metadata.json"
AOTI_SO_SUFFIX = ".so"
AOTI_BLOB_SUFFIX = ".blob"
#: The device key of an AOTInductor package's ``*_metadata.json``.
AOTI_DEVICE_KEY = "AOTI_DEVICE_KEY"

#: ``members.kind`` (and ``segments.kind`` of a member's data) vocabulary.
KIND_OTHER = "other"
KIND_WEIGHTS = "weights"
KIND_CONSTANTS = "constants"
KIND_CONFIG = "config"
KIND_PICKLE = "pickle"
KIND_SAMPLE_INPUTS = "sample_inputs"
KIND_SO = "so"
KIND_BLOB = "blob"
KIND_SOURCE = "source"
KIND_METADATA = "metadata"
KIND_GRAPH = "graph"
#: Member kinds whose first bytes are sniffed for a pickle.
SNIFFED_KINDS = (KIND_OTHER, KIND_SAMPLE_INPUTS, KIND_METADATA, KIND_WEIGHTS, KIND_CONSTANTS)

#: ``models.kind``.
MODEL_EXPORTED = "exported_program"
MODEL_AOTI = "aoti"

#: ``tensors.storage`` of a .pt2 tensor.
STORAGE_ZIP = "zip"
STORAGE_COMPRESSED = "compressed"
STORAGE_PICKLE = "pickle"
STORAGE_SO = "so"
STORAGE_BLOB = "blob"
STORAGE_FOLDED = "folded"
#: Storages whose rows are AOTInductor constants (qualified as ``<model>/aoti/<fqn>``).
AOTI_STORAGES = (STORAGE_SO, STORAGE_BLOB, STORAGE_FOLDED)

# -- weights/constants configs ------------------------------------------------------------------
#: ``torch._export.serde.schema.ScalarType`` numbers -> torch dtype names (0 is UNKNOWN).
SERDE_DTYPES: dict[int, str] = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32",
    8: "float64", 9: "complex32", 10: "complex64", 11: "complex128", 12: "bool", 13: "bfloat16",
    28: "uint16", 29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz",
    32: "float8_e5m2fnuz", 33: "float8_e8m0fnu", 34: "uint32", 35: "uint64",
}
#: torch dtype name -> bytes per element.
ITEMSIZE: dict[str, int] = {**{d.name: d.itemsize for d in BY_NAME.values()}, "float8_e8m0fnu": 1}
#: The top-level key of a config document and the keys of an entry and its ``tensor_meta``.
CONFIG_KEY = "config"
PATH_NAME, IS_PARAM, USE_PICKLE, TENSOR_META = "path_name", "is_param", "use_pickle", "tensor_meta"
DTYPE, SIZES, STRIDES, STORAGE_OFFSET = "dtype", "sizes", "strides", "storage_offset"
REQUIRES_GRAD, AS_INT = "requires_grad", "as_int"
#: ``tensors.kind`` of a config entry: (is_param false, is_param true), per config folder.
CONFIG_KINDS = {WEIGHTS_DIR: ("buffer", "parameter"), CONSTANTS_DIR: ("constant", "constant")}
#: Pickle protocols whose magic (``0x80 <protocol>``) marks a pickled member.
PICKLE_PROTOCOLS = (2, 3, 4, 5)

# -- serialized graph JSON (torch._export.serde.schema) -----------------------------------------
#: The key of a ``Node``'s operator (the only string-valued ``target`` key).
TARGET = "target"
GRAPH_MODULE, SIGNATURE = "graph_module", "signature"
INPUT_SPECS, OUTPUT_SPECS = "input_specs", "output_specs"
SCHEMA_VERSION, TORCH_VERSION = "schema_version", "torch_version"
#: ``InputSpec`` union members (the one key of each input spec).
INPUT_KINDS = ("user_input", "parameter", "buffer", "tensor_constant", "custom_obj", "token",
               "constant_input")
#: The ``OutputSpec`` member counted as an output.
USER_OUTPUT = "user_output"
#: Input spec kinds counted as constants.
CONSTANT_INPUTS = ("tensor_constant", "custom_obj", "constant_input")
#: How torch starts a graph document (json.dumps' default separators).
CANONICAL_GRAPH_HEAD = b'{"graph_module": {"graph": {"inputs": '

# -- AOTInductor wrapper source -----------------------------------------------------------------
#: ``constants_info_[i].<field>`` fields holding a C string literal.
CINFO_STRING_FIELDS = ("name", "original_fqn")
#: Fields holding a C brace list of integers / one integer / a bool.
CINFO_INT_LIST_FIELDS = ("shape", "stride")
CINFO_INT_FIELDS = ("offset", "data_size")
CINFO_BOOL_FIELDS = ("from_folded",)
#: Fields written as ``<prefix><name>`` (the name is the value).
CINFO_NAMED_FIELDS = {"dtype": b"cached_torch_dtype_", "device_type": b"cached_torch_device_type_",
                      "layout": b"cached_torch_layout_", "type": b"ConstantType::"}
#: ``ConstantType`` -> ``tensors.kind`` (anything else is a constant).
CONSTANT_KIND = {"Parameter": "parameter", "Buffer": "buffer"}
#: ELF symbols bounding the constants compiled into the shared object.
CONSTANTS_START = b"_binary_constants_bin_start"
CONSTANTS_END = b"_binary_constants_bin_end"
#: The graph member of archives written by torch.export.save before ``models/`` (torch 2.1-2.2).
LEGACY_GRAPH = "serialized_exported_program.json"
