"""The vocabularies of the core, written once: segment kinds, byte classes, tensor storages
and their colours.

The core (``artifact.py``, ``frames.py``) and the views (``comparison``, ``plots``, ``corpus``,
``widgets``) import these names from here; none of them spells a segment kind list of its own.
No imports beyond the standard library: importing this module costs nothing.

Example:
    >>> from workbench.vocab import KIND_CLASS, KIND_COLORS, byte_class
    >>> KIND_CLASS["constant"], byte_class("named_data", "x_so_blob"), KIND_COLORS["padding"]
    ('weights', 'delegate', '#ffffff')
"""

from __future__ import annotations

__all__ = ["SEGMENT_KINDS", "SCAN_KINDS", "STORAGES", "NO_BYTES", "CLASSES", "KIND_CLASS",
           "byte_class", "KIND_COLORS", "OTHER_COLOR", "STORAGE_COLORS", "CLASS_COLORS"]

# -- segment kinds (``segments.kind``) ---------------------------------------------------------

#: Segment kind -> colour (ExecuTorch and .pt2 vocabularies; see :mod:`workbench.frames`).
#: Greens hold weights, oranges backend payloads, blues structure, greys bookkeeping. Its keys
#: are the segment kinds the readers write (see :data:`SEGMENT_KINDS`).
KIND_COLORS: dict[str, str] = {
    # file and archive structure: greys
    "header": "#9c9c9c", "data_descriptor": "#c7c7c7", "central_directory": "#7f7f7f",
    "end_record": "#5f5f5f",
    # descriptions of the model: blues, teal, brown
    "flatbuffer": "#4e79a7", "graph": "#1f4e79", "config": "#a0cbe8", "metadata": "#9edae5",
    "source": "#86bcb6", "sample_inputs": "#9d7660", "pickle": "#e15759",
    # stored tensor data: greens (and purple for initial values of mutable buffers)
    "constant": "#59a14f", "weights": "#2e8540", "constants": "#b3de69",
    "named_data": "#8cd17d", "blob": "#bcbd22", "mutable_data": "#b07aa1",
    # backend payloads and code: oranges
    "delegate": "#f28e2b", "so": "#ffbe7d",
    # the rest
    "test_data": "#edc948", "padding": "#ffffff", "trailing": "#d4a6c8", "unused": "#d37295",
    "other": "#bab0ac",
    # bytes of zip members whose local header cannot be located (a stale directory)
    "damaged": "#ff0000",
}

#: Every segment kind a reader writes (``.pte``/``.ptd``/``.bpte``: header ... unused; ``.pt2``
#: zip members by role: weights, constants, graph, config, ...; zip structure records).
SEGMENT_KINDS: tuple[str, ...] = tuple(KIND_COLORS)

#: Colour of a kind (or storage, or class) that has no colour of its own.
OTHER_COLOR = "#bab0ac"

#: Segment kinds with their own ``<kind>_bytes`` column in the scan ``artifacts`` frame; the
#: bytes of every other kind go to ``other_bytes``.
SCAN_KINDS: tuple[str, ...] = ("header", "flatbuffer", "padding", "constant", "mutable_data",
                               "delegate", "named_data", "test_data", "weights", "constants", "so",
                               "blob", "unused", "trailing")

# -- byte classes (the summary of a comparison) -------------------------------------------------

#: The byte classes of a comparison summary, in display order; every segment falls in exactly one.
CLASSES: tuple[str, ...] = ("weights", "delegate", "flatbuffer", "header", "metadata", "padding",
                            "other")

#: ``segments.kind`` -> byte class (kinds not listed are ``other``).
KIND_CLASS: dict[str, str] = {
    # stored tensor data
    "constant": "weights", "named_data": "weights", "mutable_data": "weights",
    "weights": "weights", "constants": "weights", "blob": "weights",
    # backend payloads and code
    "delegate": "delegate", "so": "delegate",
    "flatbuffer": "flatbuffer",
    # file and archive structure
    "header": "header", "data_descriptor": "header", "central_directory": "header",
    "end_record": "header",
    # descriptions of the model rather than its data
    "graph": "metadata", "config": "metadata", "metadata": "metadata", "source": "metadata",
    "sample_inputs": "metadata", "pickle": "metadata",
    "padding": "padding",
    "trailing": "other", "unused": "other", "test_data": "other", "other": "other",
}


def byte_class(kind: str, name: str = "") -> str:
    """The summary class of one segment (see :data:`KIND_CLASS`).

    Named data whose key ends in ``_so_blob`` (the AOTI delegate's shared object) is a
    delegate payload, not weights.

    Example:
        >>> byte_class("constant"), byte_class("named_data", "abc_so_blob"), byte_class("xyz")
        ('weights', 'delegate', 'other')
    """
    if kind == "named_data" and name.endswith("_so_blob"):
        return "delegate"
    return KIND_CLASS.get(kind, "other")


#: Byte class -> colour.
CLASS_COLORS: dict[str, str] = {
    "weights": KIND_COLORS["constant"], "delegate": KIND_COLORS["delegate"],
    "flatbuffer": KIND_COLORS["flatbuffer"], "header": KIND_COLORS["header"],
    "metadata": KIND_COLORS["config"], "padding": "#ffffff", "other": OTHER_COLOR,
}

# -- tensor storages (``tensors.storage``) ------------------------------------------------------

#: Tensor storage -> colour (the segment colour of where such bytes live, where one exists).
STORAGE_COLORS: dict[str, str] = {
    "segment": KIND_COLORS["constant"], "inline": KIND_COLORS["flatbuffer"],
    "external": "#499894", "named_data": KIND_COLORS["named_data"],
    "mutable": KIND_COLORS["mutable_data"], "planned": "#bab0ac", "unallocated": "#e0e0e0",
    "zip": KIND_COLORS["weights"], "so": KIND_COLORS["so"], "blob": KIND_COLORS["blob"],
    "pickle": KIND_COLORS["pickle"], "compressed": "#9d7660", "folded": "#d4a6c8",
}

#: Every storage a reader writes in ``tensors.storage``.
STORAGES: tuple[str, ...] = tuple(STORAGE_COLORS)

#: Storages that hold no bytes of their own: such tensors are not matched or hashed.
NO_BYTES = frozenset({"planned", "unallocated", "folded"})
