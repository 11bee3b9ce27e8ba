"""What every tab of the :class:`~workbench.widgets.Explorer` shares: the state the explorer
owns (the open artifact, the status line, which tabs still need drawing) and the few helpers
every tab uses (:meth:`ExplorerTab._frame`, :meth:`ExplorerTab._drawn`).

This module owns that shared surface; each tab is a mixin in its own module
(``_explorer_bytes``, ``_explorer_tensors``, ``_explorer_program``, ``_explorer_time``) that
builds its widgets (``_build_<tab>``) and draws them (``_draw_<tab>``), and
:mod:`._explorer` assembles them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact
    from ._common import StatusLine

__all__ = ["ExplorerTab", "ALL", "MAX_OPTIONS", "TENSOR_COLUMNS", "tensor_columns"]

#: Columns of the Tensors table (those the artifact has, in this order).
TENSOR_COLUMNS = ("name", "dtype", "shape", "nbytes", "storage", "file", "offset", "align",
                  "method", "value", "missing", "used_by")
ALL = "(all)"
#: Most options in a segment or tensor chooser; narrow with the filters beyond this.
MAX_OPTIONS = 500


def tensor_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the columns of :data:`TENSOR_COLUMNS` it has, in that order.

    Example:
        >>> import pandas as pd
        >>> list(tensor_columns(pd.DataFrame({"x": [1], "dtype": ["f"], "name": ["a"]})))
        ['name', 'dtype']
    """
    return df[[c for c in TENSOR_COLUMNS if c in df]]


class ExplorerTab:
    """The state and helpers the explorer's tabs share (a mixin: the explorer sets the
    state; a tab reads it).

    Example:
        >>> from workbench.widgets import Explorer                          # doctest: +SKIP
        >>> isinstance(Explorer("sample_models/mlp_portable.pte"), ExplorerTab)  # doctest: +SKIP
        True
    """

    TABS: ClassVar[tuple[str, ...]]
    art: Artifact | None
    data: list[str] | None
    status: StatusLine
    _stale: set[int]

    def _frame(self, name: str) -> pd.DataFrame | None:
        """``art.frames[name]``, or ``None`` when there is no artifact or no such frame."""
        if self.art is None or name not in self.art.frames:
            return None
        return self.art.frames[name]

    def _drawn(self, tab: str) -> bool:
        """Whether tab ``tab`` has been drawn (a tab not yet shown draws itself when it is)."""
        return self.TABS.index(tab) not in self._stale

    @staticmethod
    def _set_options(dd: Any, df: pd.DataFrame | None, col: str) -> None:
        """Fill dropdown ``dd`` with ``(all)`` and the sorted values of ``df[col]``."""
        values = [] if df is None or col not in df else sorted(str(v) for v in df[col].dropna().unique())
        dd.options = [ALL, *values]
        dd.value = ALL
