"""Jupyter widgets over workbench frames: :class:`Explorer`, :class:`CompareView` and
:class:`LoadPathProfiler`.

Widgets know frames only — they call :func:`workbench.open`, read ``art.frames`` and
``art.tensor(name)``, and draw with :mod:`workbench.plots`; they never parse bytes. Every
error (an :class:`~workbench.ArtifactError` above all) is shown inside the widget in red,
never lost in the browser console.

``ipywidgets`` and ``matplotlib`` are imported on first use of a widget class (``import
workbench`` and ``import workbench.widgets`` import neither).

Example:
    >>> from workbench.widgets import Explorer            # doctest: +SKIP
    >>> Explorer("sample_models/")                          # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._compare import CompareView
    from ._explorer import Explorer
    from ._profiler import LoadPathProfiler

__all__ = ["Explorer", "CompareView", "LoadPathProfiler"]

_HOME = {"Explorer": "._explorer", "CompareView": "._compare", "LoadPathProfiler": "._profiler"}


def __getattr__(name: str) -> Any:
    """Import a widget's module (and with it ipywidgets) on first access."""
    where = _HOME.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
