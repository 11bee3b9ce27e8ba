"""The vocabularies of the core, written once: segment kinds, byte classes, tensor storages,
timeline kinds — and, keyed by them, their colours.

This module owns the words; the readers write them into frames (``segments.kind``,
``tensors.storage``, ``timeline.kind``) and every view reads them from here. The vocabulary
comes first and the colour tables are keyed by it (never the reverse): a word without a
colour, or a colour for a word that is not in the vocabulary, fails at import. The plots
(:mod:`workbench.plots`), the HTML overview (:meth:`Artifact._repr_html_`), the comparison
summary and the widgets take every colour from here; none of them spells a kind list or a
colour of its own. No imports beyond the standard library: importing this module costs
nothing.

Example:
    >>> from workbench.vocab import KIND_CLASS, KIND_COLORS, byte_class
    >>> KIND_CLASS["constant"], byte_class("named_data", "x_so_blob"), KIND_COLORS["padding"]
    ('weights', 'delegate', '#ffffff')
"""

from __future__ import annotations

__all__ = ["SEGMENT_KINDS", "SCAN_KINDS", "STORAGES", "NO_BYTES", "CLASSES", "KIND_CLASS",
           "TIMELINE_KINDS", "LINK_KINDS", "byte_class", "KIND_COLORS", "OTHER_COLOR",
           "STORAGE_COLORS", "CLASS_COLORS", "TIME_COLORS", "LINK_COLORS"]


def _coloured(words: tuple[str, ...], colours: dict[str, str], what: str) -> dict[str, str]:
    """``colours`` in the order of ``words``, after checking that every word has exactly one
    colour and every colour belongs to a word of the vocabulary.

    Example:
        >>> _coloured(("a", "b"), {"b": "#000000", "a": "#ffffff"}, "test")
        {'a': '#ffffff', 'b': '#000000'}
    """
    missing = [w for w in words if w not in colours]
    extra = [w for w in colours if w not in words]
    if missing or extra:  # pragma: no cover - a mistake in this file, caught at import
        raise AssertionError(f"{what}: no colour for {missing}; colours of unknown words {extra}")
    return {w: colours[w] for w in words}


# -- segment kinds (``segments.kind``) ---------------------------------------------------------

#: Every segment kind a reader writes (``.pte``/``.ptd``/``.bpte``: header ... unused; ``.pt2``
#: zip members by role: weights, constants, graph, config, ...; zip structure records). The
#: meaning of each is documented with the ``segments`` frame in :mod:`workbench.frames`.
SEGMENT_KINDS: tuple[str, ...] = (
    # file and archive structure
    "header", "data_descriptor", "central_directory", "end_record",
    # descriptions of the model
    "flatbuffer", "graph", "config", "metadata", "source", "sample_inputs", "pickle",
    # stored tensor data (mutable_data: initial values of mutable buffers)
    "constant", "weights", "constants", "named_data", "blob", "mutable_data",
    # backend payloads and code
    "delegate", "so",
    # the rest
    "test_data", "padding", "trailing", "unused", "other",
    # bytes of zip members whose local header cannot be located (a stale directory)
    "damaged",
)

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


# -- tensor storages (``tensors.storage``) ------------------------------------------------------

#: Every storage a reader writes in ``tensors.storage`` (where a tensor's bytes are).
STORAGES: tuple[str, ...] = ("segment", "inline", "external", "named_data", "mutable", "planned",
                             "unallocated", "zip", "so", "blob", "pickle", "compressed", "folded")

#: Storages that hold no bytes of their own: such tensors are not matched or hashed.
NO_BYTES = frozenset({"planned", "unallocated", "folded"})

# -- timeline kinds (``wb.timeline(...)["kind"]``) ----------------------------------------------

#: What a timeline row ran: a kernel call, a delegate call (or an operation inside one), the
#: runtime's own work, or an event that is none of these.
TIMELINE_KINDS: tuple[str, ...] = ("kernel", "delegate", "framework", "other")

# -- comparison links (what happened to a tensor matched across two artifacts) -------------------

#: How :func:`workbench.plots.compare` draws a matched pair: its storage changed (``moved``),
#: it stayed where it was (``kept``), or it is a copy of bytes stored twice (``copy``).
LINK_KINDS: tuple[str, ...] = ("moved", "kept", "copy")

# -- colours, keyed by the vocabularies above ---------------------------------------------------

#: Colour of a kind (or storage, or class) that has no colour of its own.
OTHER_COLOR = "#bab0ac"

#: Segment kind -> colour. Greens hold weights, oranges backend payloads, blues structure,
#: greys bookkeeping.
KIND_COLORS: dict[str, str] = _coloured(SEGMENT_KINDS, {
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
    "other": OTHER_COLOR,
    # a stale zip directory: red
    "damaged": "#ff0000",
}, "segment kinds")

#: Byte class -> colour (the colour of the class's main segment kind).
CLASS_COLORS: dict[str, str] = _coloured(CLASSES, {
    "weights": KIND_COLORS["constant"], "delegate": KIND_COLORS["delegate"],
    "flatbuffer": KIND_COLORS["flatbuffer"], "header": KIND_COLORS["header"],
    "metadata": KIND_COLORS["config"], "padding": KIND_COLORS["padding"], "other": OTHER_COLOR,
}, "byte classes")

#: Tensor storage -> colour (the segment colour of where such bytes live, where one exists).
STORAGE_COLORS: dict[str, str] = _coloured(STORAGES, {
    "segment": KIND_COLORS["constant"], "inline": KIND_COLORS["flatbuffer"],
    "external": "#499894", "named_data": KIND_COLORS["named_data"],
    "mutable": KIND_COLORS["mutable_data"], "planned": OTHER_COLOR, "unallocated": "#e0e0e0",
    "zip": KIND_COLORS["weights"], "so": KIND_COLORS["so"], "blob": KIND_COLORS["blob"],
    "pickle": KIND_COLORS["pickle"], "compressed": "#9d7660", "folded": "#d4a6c8",
}, "storages")

#: Timeline kind -> colour (kernels blue, delegates orange, the runtime's own work grey).
TIME_COLORS: dict[str, str] = _coloured(TIMELINE_KINDS, {
    "kernel": KIND_COLORS["flatbuffer"], "delegate": KIND_COLORS["delegate"],
    "framework": OTHER_COLOR, "other": "#e0e0e0",
}, "timeline kinds")

#: Comparison link kind -> colour.
LINK_COLORS: dict[str, str] = _coloured(LINK_KINDS, {
    "moved": KIND_COLORS["pickle"], "kept": KIND_COLORS["flatbuffer"],
    "copy": KIND_COLORS["mutable_data"],
}, "link kinds")
