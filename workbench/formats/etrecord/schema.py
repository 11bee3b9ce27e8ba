"""The ETRecord archive: member names, member kinds and the JSON keys that are read, named
once.

Facts (ExecuTorch ``devtools/etrecord``, 2023-2026): an ETRecord is a zip archive written
with Python's ``zipfile`` (stored, not compressed) whose first member is the empty marker
``ETRECORD_V0``. Members:

* serialized exported programs (``torch._export.serde`` JSON): ``exported_program`` (the
  program given to ``to_edge``), ``edge_dialect_exported_program/<method>`` (the edge
  program per method; before 2025 a single ``edge_dialect_exported_program``), and any extra
  graphs recorded by name, ``<name>/<method>`` (e.g. ``aten_dialect_output/forward``);
* beside each program ``<program>_state_dict``, ``<program>_constants`` and
  ``<program>_example_inputs``: ``torch.save`` archives (pickles: listed, never loaded);
* JSON maps: ``debug_handle_map`` (method -> instruction -> debug handle(s)),
  ``delegate_map`` (method -> delegate instruction -> {name: backend, delegate_map:
  delegate debug id -> debug handle(s)}), ``instruction_id_to_num_outs_map`` and
  ``export_graph_id``;
* ``reference_outputs`` and ``representative_inputs``: ``torch.save`` pickles.

Example:
    >>> member_kind("edge_dialect_exported_program/forward_state_dict")
    ('state_dict', 'edge_dialect_exported_program/forward')
"""

from __future__ import annotations

__all__ = ["MARKER", "JSON_MAPS", "PICKLES", "COMPANIONS", "MEMBER_KINDS", "SEGMENT_KIND",
           "member_kind", "program_stage"]

#: The marker member that identifies an ETRecord (written first).
MARKER = "ETRECORD_V0"
EXPORTED_PROGRAM = "exported_program"
EDGE_PROGRAM = "edge_dialect_exported_program"
DEBUG_HANDLE_MAP = "debug_handle_map"
DELEGATE_MAP = "delegate_map"
NUM_OUTS_MAP = "instruction_id_to_num_outs_map"
EXPORT_GRAPH_ID = "export_graph_id"
REFERENCE_OUTPUTS = "reference_outputs"
REPRESENTATIVE_INPUTS = "representative_inputs"

#: Members holding JSON maps (member name -> kind).
JSON_MAPS = {DEBUG_HANDLE_MAP: "debug_handle_map", DELEGATE_MAP: "delegate_map",
             NUM_OUTS_MAP: "num_outs_map", EXPORT_GRAPH_ID: "export_graph_id"}
#: Members that are ``torch.save`` pickles by name.
PICKLES = {REFERENCE_OUTPUTS: "reference_outputs",
           REPRESENTATIVE_INPUTS: "representative_inputs"}
#: Suffixes of the ``torch.save`` members stored beside each program.
COMPANIONS = {"_state_dict": "state_dict", "_constants": "constants",
              "_example_inputs": "example_inputs"}

#: ``members.kind`` vocabulary.
MEMBER_KINDS = ("marker", "program", "state_dict", "constants", "example_inputs",
                "debug_handle_map", "delegate_map", "num_outs_map", "export_graph_id",
                "reference_outputs", "representative_inputs", "other")
#: member kind -> ``segments.kind`` of its bytes (the byte classes shared with ``.pt2``).
SEGMENT_KIND = {"marker": "metadata", "program": "graph", "debug_handle_map": "metadata",
                "delegate_map": "metadata", "num_outs_map": "metadata",
                "export_graph_id": "metadata", "state_dict": "pickle", "constants": "pickle",
                "example_inputs": "pickle", "reference_outputs": "pickle",
                "representative_inputs": "pickle", "other": "other"}

#: Keys of the serialized exported program (torch.export serde JSON) that are read.
GRAPH_MODULE = "graph_module"
GRAPH = "graph"
NODES = "nodes"
SCHEMA_VERSION = "schema_version"
DIALECT = "dialect"
#: Node keys and the node metadata keys that are read.
NODE_NAME = "name"
NODE_TARGET = "target"
NODE_INPUTS = "inputs"
NODE_OUTPUTS = "outputs"
NODE_METADATA = "metadata"
META_STACK_TRACE = "stack_trace"
META_MODULE_STACK = "nn_module_stack"
META_DEBUG_HANDLE = "debug_handle"
META_TORCH_FN = "torch_fn"
#: Argument key of a nested graph (control flow: cond, map, ...).
AS_GRAPH = "as_graph"
#: Target prefixes dropped for the short ``op`` column.
TARGET_PREFIXES = ("executorch.exir.dialects.edge.ops.", "torch.ops.")


def member_kind(name: str) -> tuple[str, str | None]:
    """``(kind, program)`` of a member by its name: ``program`` is the exported program the
    member belongs to (itself for a program), ``None`` for the others. A name that is not
    reserved is taken for a program (the reader checks that its content is JSON).

    Example:
        >>> member_kind("debug_handle_map"), member_kind("exported_program")
        (('debug_handle_map', None), ('program', 'exported_program'))
    """
    if name == MARKER:
        return "marker", None
    if name in JSON_MAPS:
        return JSON_MAPS[name], None
    if name in PICKLES:
        return PICKLES[name], None
    for suffix, kind in COMPANIONS.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return kind, name[: -len(suffix)]
    return "program", name


def program_stage(program: str) -> tuple[str, str | None]:
    """``(stage, method)`` of a program member: stage ``export`` (the program given to
    ``to_edge``), ``edge`` (the edge dialect program of a method) or ``extra`` (a graph
    recorded by name).

    Example:
        >>> program_stage("edge_dialect_exported_program/forward"), program_stage("aten/forward")
        (('edge', 'forward'), ('extra', 'forward'))
    """
    if program == EXPORTED_PROGRAM:
        return "export", None
    if program == EDGE_PROGRAM:
        return "edge", "forward"
    if program.startswith(EDGE_PROGRAM + "/"):
        return "edge", program[len(EDGE_PROGRAM) + 1:]
    if "/" in program:
        return "extra", program.rsplit("/", 1)[1]
    return "extra", None
