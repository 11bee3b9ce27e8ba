"""workbench: look inside PyTorch and ExecuTorch deployment artifacts.

Open an artifact by its magic bytes, get pandas frames of its byte layout and its tensors,
and zero-copy views of tensor data — without executing or copying anything from the file.

Example:
    >>> import workbench as wb
    >>> art = wb.open("sample_models/mlp_portable.pte")     # doctest: +SKIP
    >>> art.format
    'pte'
    >>> art.segments.groupby("kind")["size"].sum()          # doctest: +SKIP
    >>> art.tensor("forward/0").shape                       # doctest: +SKIP
    (32, 16)
"""

from __future__ import annotations

# The package only re-exports: ``open`` lives in ``_open.py``; ``compare``, ``scan`` and
# ``profile`` in ``comparison.py``, ``corpus.py`` and ``profiling/`` (module names that no
# function shadows). Their imports are cheap: pandas, dask, tqdm, matplotlib, torch and the
# load paths load inside the calls.
from ._open import open  # noqa: A004 - the public verb
from .artifact import Artifact
from .comparison import compare
from .corpus import scan
from .errors import (
    ArtifactError,
    CorruptError,
    MissingDataError,
    MissingKernelError,
    OutOfBoundsError,
    RangeNotSupportedError,
    RemoteAccessError,
    RemoteError,
    RemoteNotFoundError,
    RemoteUnavailableError,
    StaleFileError,
    TruncatedError,
    UnknownFormatError,
    UnsafeContentError,
    UnsupportedVersionError,
)
from .fit import memory
from .graphs import Graph, delegation, graph
from .profiling import profile
from .timing import run, timeline

__version__ = "0.1.0"

__all__ = [
    "open",
    "scan",
    "compare",
    "profile",
    "timeline",
    "run",
    "memory",
    "graph",
    "delegation",
    "Graph",
    "Artifact",
    "ArtifactError",
    "UnknownFormatError",
    "TruncatedError",
    "OutOfBoundsError",
    "CorruptError",
    "UnsupportedVersionError",
    "MissingDataError",
    "MissingKernelError",
    "UnsafeContentError",
    "StaleFileError",
    "RemoteError",
    "RemoteNotFoundError",
    "RemoteAccessError",
    "RemoteUnavailableError",
    "RangeNotSupportedError",
    "__version__",
]
