"""PyTorch ``.pt2`` archives: ``torch.export.save`` programs and AOTInductor packages.

Read without torch and without unpickling anything: the zip directory is verified
(:mod:`._zip`), member bytes are located in place, and only small JSON metadata is parsed.

Layout of a ``torch.export.save`` archive (every member under ``<root>/``, stored, data
64-aligned)::

    archive_format                       "pt2"
    archive_version, byteorder, .data/version, .data/serialization_id
    models/<model>.json                  the serialized graph (torch._export.serde schema)
    data/weights/<model>_weights_config.json     FQN -> {path_name, is_param, use_pickle,
    data/constants/<model>_constants_config.json         tensor_meta {dtype, sizes, strides,
                                                          storage_offset, requires_grad}}
    data/weights/weight_<n>, data/constants/tensor_<n>   raw storage bytes (shared by views)
    data/constants/custom_obj_<n>, opaque_obj_<n>        pickles
    data/sample_inputs/<model>.pt        torch.save (a zip holding data.pkl)

An AOTInductor package keeps ``data/aotinductor/<model>/``: the generated wrapper and kernel
sources (``*.cpp``), their metadata (``*.json``), the compiled ``*.so`` and, when constants
are not compiled into the ``.so``, a ``*_weights.blob``. The wrapper source declares every
constant (``constants_info_[i].name/dtype/offset/data_size/shape/stride/original_fqn``); the
constants are laid out in that order, each padded to 64 bytes, either in the ``.so`` between
the symbols ``_binary_constants_bin_start``/``_end`` or in the blob. Nothing is loaded.

Example:
    >>> import workbench as wb
    >>> art = wb.open("sample_models/tied.pt2")                     # doctest: +SKIP
    >>> art.tensors[["name", "member", "storage_id", "shared"]]    # doctest: +SKIP
    >>> art.frames["graph"]                                        # doctest: +SKIP

Modules: :mod:`.schema` (member paths, kinds, codes and limits, named once), :mod:`.archive`
(members classified, metadata read), :mod:`.config` (weights/constants configs: a regex fast
path and the JSON path), :mod:`.graph_json` (the serialized-graph scanner), :mod:`.aoti` (the
AOTInductor wrapper's constants), :mod:`.elf` (ELF symbols) and :mod:`.columns` (the frame
builders and the typed records they read).
"""

from __future__ import annotations

from functools import partial

from ...source import Source
from ..parsed import Parsed
from .archive import Archive
from .columns import (
    graph_columns,
    graph_nodes_columns,
    members_columns,
    models_columns,
    segments_columns,
    tensors_columns,
)
from .elf import elf_symbol_range
from .graph_json import graph_stats
from .schema import AOTI_ALIGN, FORMAT, FULL_PARSE_LIMIT, MAGIC, METADATA_LIMIT, SERDE_DTYPES

__all__ = ["AOTI_ALIGN", "FORMAT", "FULL_PARSE_LIMIT", "MAGIC", "METADATA_LIMIT", "SERDE_DTYPES",
           "TAKES_DATA", "detect", "elf_symbol_range", "graph_stats", "read"]

#: A ``.pt2`` archive takes no ``data=``.
TAKES_DATA = False
#: Frame name -> builder (each takes the :class:`Archive`).
BUILDERS = {"segments": segments_columns, "tensors": tensors_columns, "members": members_columns,
            "models": models_columns, "graph": graph_columns, "graph_nodes": graph_nodes_columns}


def detect(head: bytes) -> bool:
    """True when ``head`` starts a zip archive (a local file header, ``PK\\x03\\x04``).

    Example:
        >>> detect(b"PK\\x03\\x04\\x00\\x00")
        True
    """
    return head[:4] == MAGIC


def read(src: Source) -> Parsed:
    """Read the ``.pt2`` archive in ``src`` (verified, zero-copy) into a :class:`Parsed`.

    Frames: ``segments``, ``tensors``, ``members``, ``models``, ``graph`` and ``graph_nodes``.

    Example:
        >>> from workbench.source import Source
        >>> parsed = read(Source("sample_models/mlp.pt2"))        # doctest: +SKIP
        >>> parsed.info["archive_format"]                         # doctest: +SKIP
        'pt2'
    """
    arc = Archive(src)
    parsed = Parsed(format=FORMAT, path=src.path, sources={src.path: src})
    parsed.info.update(arc.info)
    arc.share_findings(parsed.findings)
    parsed.builders.update({name: partial(build, arc) for name, build in BUILDERS.items()})
    return parsed
