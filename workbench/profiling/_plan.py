"""The plan of a profile: what the workers need (files, sizes, stored tensor ranges,
methods, delegates), computed once in the parent from the :class:`~workbench.Artifact`.

This module owns :func:`make_plan`; the workers never open the artifact themselves.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..artifact import Artifact
    from ..loadpaths import Plan

__all__ = ["make_plan"]


def _pt2_kind(path: str) -> str | None:
    """``export`` | ``aoti`` | None, from the zip's central directory (nothing extracted)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        return None
    if any("data/aotinductor/" in n for n in names):
        return "aoti"
    if any("/models/" in f"/{n}" and n.endswith(".json") for n in names):
        return "export"
    return None


def _plan_from_artifact(art: Artifact, trusted: bool) -> Plan:
    from ..loadpaths import Plan

    files = [os.path.abspath(f) for f in art.files]
    index = {f: i for i, f in enumerate(art.files)}
    ten = art.tensors
    stored = ten[ten["offset"].notna() & ten["file"].notna()]
    seen: set[tuple[str, int, int]] = set()
    tensors: list[list[Any]] = []
    for name, dtype, nbytes, file, offset in zip(stored["name"], stored["dtype"], stored["nbytes"],
                                                 stored["file"], stored["offset"]):
        key = (file, int(offset), int(nbytes))
        if key in seen or file not in index:
            continue
        seen.add(key)
        tensors.append([index[file], int(offset), int(nbytes), str(dtype), str(name)])
    methods = (art.frames["methods"]["method"].astype(str).tolist()
               if "methods" in art.frames else [])
    delegates = (sorted(set(art.frames["delegates"]["id"].astype(str)))
                 if "delegates" in art.frames else [])
    data_files = ([os.path.abspath(f) for f in art.info.get("data_files") or []]
                  if art.format == "pte" else [])
    return Plan(format=art.format, path=files[0], files=files,
                sizes=[os.path.getsize(f) for f in files], data_files=data_files,
                tensors=tensors, methods=methods, delegates=delegates,
                pt2_kind=_pt2_kind(files[0]) if art.format == "pt2" else None,
                trusted=trusted, open_data=data_files if art.format == "pte" else None)


def make_plan(artifact: Artifact | str | os.PathLike[str], *,
              data: Sequence[str | os.PathLike[str]] | None = None,
              trusted: bool = False) -> Plan:
    """The :class:`~workbench.loadpaths.Plan` workers get: files, sizes, stored tensor ranges.

    A path is opened with :func:`workbench.open` (and closed again). A file workbench does not
    recognise is profiled as ``raw`` (whole-file paths only); a ``.pt2`` it cannot read yet
    keeps its format with no tensor table (the reason is in ``plan.unreadable``). A corrupt
    artifact raises its :class:`~workbench.ArtifactError`.

    Example:
        >>> plan = make_plan("sample_models/mlp_portable.pte")     # doctest: +SKIP
        >>> plan.format, len(plan.tensors), plan.tensor_bytes       # doctest: +SKIP
        ('pte', 4, 3232)
    """
    from .._open import open as wb_open
    from ..artifact import Artifact
    from ..errors import UnknownFormatError, UnsupportedVersionError
    from ..loadpaths import Plan

    if isinstance(artifact, Artifact):
        if data is not None:
            raise TypeError("data= applies when profile() opens a path, not to an open Artifact")
        return _plan_from_artifact(artifact, trusted)
    path = os.path.abspath(os.fspath(artifact))
    try:
        art = wb_open(path, data=data)
    except UnknownFormatError as e:
        return Plan(format="raw", path=path, files=[path], sizes=[os.path.getsize(path)],
                    readable=False, unreadable=str(e), trusted=trusted)
    except UnsupportedVersionError as e:
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                raise
        return Plan(format="pt2", path=path, files=[path], sizes=[os.path.getsize(path)],
                    pt2_kind=_pt2_kind(path), readable=False, unreadable=str(e), trusted=trusted)
    try:
        return _plan_from_artifact(art, trusted)
    finally:
        art.close()
