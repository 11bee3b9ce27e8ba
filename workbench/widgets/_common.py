"""Building blocks shared by the widgets: artifact discovery, the artifact picker, a paged
HTML table, a figure view, and in-widget error reporting.

Everything here works on frames, figures and paths; nothing parses artifact bytes (the
picker peeks at the first bytes and asks :func:`workbench.formats.sniff_path`, the readers' own
magic check).
"""

from __future__ import annotations

import functools
import html
import io
import numbers
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import ipywidgets as widgets
import traitlets

from .. import formats
from .._fmt import escape, human_bytes
from ..errors import ArtifactError, StaleFileError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "ArtifactPicker", "FigureView", "PagedTable", "ReloadBar", "StatusLine", "error_html",
    "find_artifacts", "find_by_format", "guarded", "note_html", "table_html", "widget_repr",
]

#: Colours used for messages (readable on Lab's light and dark themes).
ERROR_COLOR = "#c62828"
NOTE_COLOR = "#666"

F = TypeVar("F", bound=Callable[..., Any])


#: ipywidgets cuts a widget's text/plain form at this many characters.
_REPR_MAX = 110


def widget_repr(kind: str, *pickers: Any) -> str:
    """The text a widget shows where it cannot be drawn (a notebook on GitHub, a static HTML
    page, a closed kernel): what it is, the files it shows (names only, never a folder), and
    that it needs a running kernel; at most 110 characters, as ipywidgets keeps.

    Example:
        >>> widget_repr("Explorer")
        'Explorer widget: interactive, shown by a running Jupyter kernel'
    """
    names = [os.path.basename(str(getattr(p, "path", "") or "")) for p in pickers if p is not None]
    shown = ", ".join(escape(n) for n in names if n)
    text = f"{kind} widget{f' ({shown})' if shown else ''}: interactive, shown by a running Jupyter kernel"
    return text if len(text) <= _REPR_MAX else text[:_REPR_MAX - 1] + "…"


# -- discovery ------------------------------------------------------------------------------

def detect_format(path: str | os.PathLike[str]) -> str | None:
    """The artifact format of the file at ``path`` by its magic bytes, else ``None``.

    Peeks at the first bytes only (:func:`workbench.formats.sniff_path`).

    Example:
        >>> detect_format("sample_models/mlp_portable.pte")      # doctest: +SKIP
        'pte'
    """
    try:
        reader = formats.sniff_path(path)
    except OSError:
        return None
    return None if reader is None else str(getattr(reader, "FORMAT", reader.__name__.rsplit(".", 1)[-1]))


def find_artifacts(folder: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """``(label, path)`` for every artifact file directly in ``folder``, sorted by name.

    Files are recognised by magic, not by extension: a renamed ``.pte`` is found, a
    README is not.

    Example:
        >>> find_artifacts("sample_models")[0]                     # doctest: +SKIP
        ('kv_cache.pte  · pte · 10.4 KiB', 'sample_models/kv_cache.pte')
    """
    found = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        if not entry.is_file():
            continue
        fmt = detect_format(entry.path)
        if fmt is None:
            continue
        size = entry.stat().st_size
        found.append((f"{entry.name}  · {fmt} · {human_bytes(size)}", entry.path))
    return found


def find_by_format(folder: str | os.PathLike[str], wanted: Iterable[str]) -> dict[str, list[str]]:
    """Paths of the files directly in ``folder`` of each format in ``wanted`` (by magic),
    sorted by name; every wanted format is a key.

    Example:
        >>> find_by_format("sample_models", ["etdump"])["etdump"][0]    # doctest: +SKIP
        'sample_models/mlp_portable.etdp'
    """
    out: dict[str, list[str]] = {f: [] for f in wanted}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return out
    for entry in entries:
        if entry.is_file():
            fmt = detect_format(entry.path)
            if fmt in out:
                out[fmt].append(entry.path)
    return out


# -- messages ---------------------------------------------------------------------------------

def error_html(exc: BaseException) -> str:
    """A red, escaped message for ``exc``; unexpected errors add a collapsed traceback."""
    name = type(exc).__name__
    msg = html.escape(str(exc)) or name
    body = f"<b>{html.escape(name)}</b>: {msg}"
    if not isinstance(exc, (ArtifactError, OSError, KeyError, ValueError, ImportError)):
        tb = html.escape("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        body += f"<details><summary>traceback</summary><pre>{tb}</pre></details>"
    return (f'<div class="wb-error" style="color:{ERROR_COLOR};white-space:pre-wrap;'
            f'overflow-wrap:anywhere">{body}</div>')


def note_html(text: str) -> str:
    """A grey note (escaped): for "nothing to show here" situations that are not errors."""
    return f'<div class="wb-note" style="color:{NOTE_COLOR}">{html.escape(text)}</div>'


class StatusLine(widgets.HTML):
    """One line under a widget's controls: empty, a note, or an error in red."""

    def show_error(self, exc: BaseException) -> None:
        self.value = error_html(exc)

    def note(self, text: str) -> None:
        self.value = note_html(text) if text else ""

    def clear(self) -> None:
        self.value = ""

    @property
    def has_error(self) -> bool:
        """Whether an error is shown (handy in tests)."""
        return "wb-error" in self.value


def guarded(method: F) -> F:
    """Decorate a widget method so that an exception is shown in ``self.status`` (red)
    instead of escaping into the browser console."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # shown to the user, not swallowed
            self.status.show_error(exc)
            offer_reload(self, exc)
            return None

    return wrapper  # type: ignore[return-value]


# -- tables ----------------------------------------------------------------------------------

_CELL = "padding:2px 8px;border-bottom:1px solid #ddd;vertical-align:top;white-space:nowrap"


def _cell_text(value: Any, max_chars: int) -> tuple[str, str | None, bool]:
    """(shown text, full text if truncated, is_number) for one cell."""
    import numpy as np
    import pandas as pd

    if value is None or (not isinstance(value, (tuple, list)) and pd.isna(value)):
        return "", None, False
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)), None, False
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}", None, True
    if isinstance(value, numbers.Real):
        return f"{float(value):.6g}", None, True
    text = str(value)
    if len(text) > max_chars:
        return text[: max_chars - 1] + "…", text, False
    return text, None, False


def table_html(df: pd.DataFrame, *, max_chars: int = 48,
               basename: Iterable[str] = ("file", "file_a", "file_b")) -> str:
    """A compact, escaped HTML table of ``df`` (all its rows: page before calling).

    Integers get thousands separators and are right-aligned; long strings are cut with an
    ellipsis (the full text is in the cell's tooltip); columns in ``basename`` show only the
    file name of a path.
    """
    base = set(basename)
    head = "".join(f'<th style="{_CELL};text-align:left;position:sticky;top:0;'
                   f'background:var(--jp-layout-color1,#fff)">{html.escape(str(c))}</th>'
                   for c in df.columns)
    rows = []
    for rec in df.itertuples(index=False, name=None):
        cells = []
        for col, value in zip(df.columns, rec):
            if col in base and isinstance(value, str):
                value = os.path.basename(value)
            text, full, numeric = _cell_text(value, max_chars)
            title = f' title="{html.escape(full)}"' if full else ""
            align = "right" if numeric else "left"
            cells.append(f'<td style="{_CELL};text-align:{align}"{title}>{html.escape(text)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return ('<div class="wb-table" style="overflow:auto;max-height:600px;max-width:100%;line-height:1.5">'
            '<table style="border-collapse:collapse;font-size:12px;font-family:var(--jp-code-font-family,'
            f'monospace)"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


class PagedTable(widgets.VBox):
    """A table that shows one page of a frame at a time (never thousands of rows at once).

    Attributes:
        frame: the whole frame (set with :meth:`set_frame`).
        page: current page (0-based).
        html: the widget holding the rendered page.
        info: "rows a–b of n".
    """

    def __init__(self, page_size: int = 25, empty: str = "no rows", **kwargs: Any) -> None:
        self.empty = empty
        self.frame: pd.DataFrame | None = None
        self.page = 0
        self.prev = widgets.Button(icon="chevron-left", tooltip="previous page",
                                   layout=widgets.Layout(width="36px"))
        self.next = widgets.Button(icon="chevron-right", tooltip="next page",
                                   layout=widgets.Layout(width="36px"))
        self.page_size = widgets.Dropdown(options=[10, 25, 50, 100, 200], value=page_size,
                                          description="per page",
                                          style={"description_width": "initial"},
                                          layout=widgets.Layout(width="150px"))
        self.info = widgets.Label()
        self.html = widgets.HTML()
        self.prev.on_click(lambda _: self.go(self.page - 1))
        self.next.on_click(lambda _: self.go(self.page + 1))
        self.page_size.observe(lambda _: self.go(0), names="value")
        self.info.layout.margin = "0 16px 0 8px"
        self.bar = widgets.HBox([self.prev, self.next, self.info, self.page_size],
                                layout=widgets.Layout(align_items="center"))
        super().__init__([self.bar, self.html], **kwargs)

    @property
    def pages(self) -> int:
        n = 0 if self.frame is None else len(self.frame)
        return max(1, -(-n // self.page_size.value))

    def set_frame(self, df: pd.DataFrame | None) -> None:
        """Show ``df`` from its first page."""
        self.frame = df
        self.go(0)

    def go(self, page: int) -> None:
        """Show page ``page`` (clamped)."""
        self.page = min(max(page, 0), self.pages - 1)
        df = self.frame
        n = 0 if df is None else len(df)
        size = self.page_size.value
        start = self.page * size
        stop = min(start + size, n)
        self.prev.disabled = self.page == 0
        self.next.disabled = self.page >= self.pages - 1
        self.bar.layout.display = "none" if n <= min(self.page_size.options) else ""
        if df is None or n == 0:
            self.info.value = "0 rows"
            self.html.value = note_html(self.empty)
            return
        self.info.value = f"rows {start + 1:,}–{stop:,} of {n:,}"
        self.html.value = table_html(df.iloc[start:stop])


# -- figures ---------------------------------------------------------------------------------

def figure_png(fig: Figure, scale: float = 2.0) -> tuple[bytes, int]:
    """PNG bytes of ``fig`` at ``scale`` × its dpi (sharp on HiDPI screens) and the width in
    CSS pixels to show it at. Figures without a layout engine get a tight bounding box, so
    nothing is clipped. A figure that pyplot manages is closed, so the inline backend does
    not display it a second time."""
    import struct

    buf = io.BytesIO()
    # a figure with a layout engine (constrained/tight) is laid out already; "tight" would
    # draw it twice
    bbox = None if fig.get_layout_engine() is not None else "tight"
    fig.savefig(buf, format="png", dpi=fig.dpi * scale, bbox_inches=bbox, facecolor="white")
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close(fig)
    png = buf.getvalue()
    (width,) = struct.unpack(">I", png[16:20])  # IHDR: the PNG's width in pixels
    return png, round(width / scale)


class FigureView(widgets.VBox):
    """A PNG image of a matplotlib figure, or a message saying why there is none.

    Attributes:
        image: the ``ipywidgets.Image`` (its ``value`` is the PNG).
        message: note/error shown instead of (or above) the image.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.image = widgets.Image(format="png", layout=widgets.Layout(
            max_width="100%", height="auto", align_self="flex-start"))
        self.message = StatusLine()
        self.image.layout.display = "none"
        super().__init__([self.message, self.image], **kwargs)

    def show(self, make: Callable[[], Figure | None]) -> bool:
        """Draw ``make()``; on an exception show it in red and hide the image.

        Returns whether an image is shown.
        """
        try:
            fig = make()
        except Exception as exc:  # shown in the widget
            self.show_error(exc)
            return False
        if fig is None:
            self.show_note("nothing to draw")
            return False
        png, width = figure_png(fig)
        self.image.value = png
        self.image.width = str(width)
        self.image.layout.display = ""
        self.message.clear()
        return True

    def show_note(self, text: str) -> None:
        """Hide the image and say ``text`` (grey)."""
        self.image.layout.display = "none"
        self.message.note(text)

    def show_error(self, exc: BaseException) -> None:
        """Hide the image and show ``exc`` in red."""
        self.image.layout.display = "none"
        self.message.show_error(exc)


# -- live files: the file changed on disk ------------------------------------------------------

class ReloadBar(widgets.HBox):
    """A line, hidden until the artifact's file changed on disk, that says so and offers a
    **Reload** button (reading the changed file's map could kill the kernel; the workbench
    raises :class:`~workbench.errors.StaleFileError` instead, and this turns it into a choice).

    Args:
        on_reload: called when the button is pressed.

    Example:
        >>> bar = ReloadBar(lambda: print("reloading"))     # doctest: +SKIP
        >>> bar.offer("model.pte changed since it was opened")   # doctest: +SKIP
    """

    def __init__(self, on_reload: Callable[[], None]) -> None:
        self.message = widgets.HTML()
        self.button = widgets.Button(description="Reload", icon="refresh",
                                     button_style="warning",
                                     tooltip="open the changed file again")
        self.button.on_click(lambda _b: on_reload())
        super().__init__([self.button, self.message], layout=widgets.Layout(display="none"))
        self.add_class("wb-reload")

    def offer(self, reason: BaseException | str) -> None:
        """Show ``reason`` (an exception or text) and the Reload button."""
        text = str(reason)
        self.message.value = (f'<span style="color:{ERROR_COLOR}">the file changed on disk: '
                              f"{html.escape(text)}</span>")
        self.layout.display = "flex"

    def hide(self) -> None:
        """Hide the line (after a reload)."""
        self.layout.display = "none"
        self.message.value = ""

    @property
    def offered(self) -> bool:
        """Whether the Reload button is shown (handy in tests)."""
        return self.layout.display != "none"


def offer_reload(owner: Any, exc: BaseException) -> bool:
    """Show ``owner.reload_bar`` when ``exc`` is a :class:`StaleFileError`; whether it did."""
    bar = getattr(owner, "reload_bar", None)
    if isinstance(exc, StaleFileError) and bar is not None:
        bar.offer(exc)
        return True
    return False


# -- the artifact picker -----------------------------------------------------------------------

class ArtifactPicker(widgets.HBox):
    """A dropdown over the artifacts of a folder (found by magic) and a path box.

    Typing a file path (Enter) selects it; typing a folder rescans the dropdown. Observe
    ``path`` for the chosen file.

    Attributes:
        dropdown: the artifacts found in :attr:`folder`.
        text: the path box.
        path: the selected file ('' when none).
    """

    path = traitlets.Unicode("")

    def __init__(self, path_or_folder: str | os.PathLike[str] = "sample_models/",
                 description: str = "artifact", **kwargs: Any) -> None:
        self.dropdown = widgets.Dropdown(description=description, options=[],
                                         style={"description_width": "initial"},
                                         layout=widgets.Layout(width="360px"))
        self.text = widgets.Text(placeholder="or type a path / folder and press Enter",
                                 continuous_update=False, layout=widgets.Layout(width="340px"))
        self.status = StatusLine()
        self.folder = ""
        self._syncing = False
        super().__init__([self.dropdown, self.text, self.status],
                         layout=widgets.Layout(align_items="center", flex_flow="row wrap"), **kwargs)
        self.dropdown.observe(self._on_dropdown, names="value")
        self.text.observe(self._on_text, names="value")
        self.go(os.fspath(path_or_folder))

    def go(self, path: str) -> None:
        """Select file ``path`` (scanning its folder) or scan folder ``path``."""
        self.status.clear()
        if os.path.isdir(path):
            self._scan(path)
            files = [p for _, p in self.dropdown.options]
            self._select(files[0] if files else "")
            if not files:
                self.status.note(f"no artifacts in {path}")
        elif os.path.isfile(path):
            folder = os.path.dirname(path) or "."
            if os.path.abspath(folder) != os.path.abspath(self.folder or "\0"):
                self._scan(folder)
            self._select(path)
        else:
            self.status.show_error(FileNotFoundError(f"no such file or folder: {path}"))

    def _scan(self, folder: str) -> None:
        self.folder = folder
        with self._quiet():
            self.dropdown.options = find_artifacts(folder)
            self.dropdown.value = None

    def _select(self, path: str) -> None:
        with self._quiet():
            known = {os.path.abspath(p): p for _, p in self.dropdown.options}
            match = known.get(os.path.abspath(path)) if path else None
            if match is None and path:  # a file the magic check does not know: offer it anyway
                self.dropdown.options = [*self.dropdown.options, (os.path.basename(path), path)]
                match = path
            self.dropdown.value = match
            self.text.value = path
        self.path = path

    def _quiet(self) -> _Quiet:
        return _Quiet(self)

    def _on_dropdown(self, change: dict) -> None:
        if self._syncing or change["new"] is None:
            return
        self._select(change["new"])

    def _on_text(self, change: dict) -> None:
        if self._syncing:
            return
        path = change["new"].strip()
        if path:
            self.go(os.path.expanduser(path))


class _Quiet:
    """Context manager that mutes the picker's own observers while it updates itself."""

    def __init__(self, picker: ArtifactPicker) -> None:
        self.picker = picker

    def __enter__(self) -> None:
        self.picker._syncing = True

    def __exit__(self, *exc: object) -> None:
        self.picker._syncing = False


def plots_module() -> Any:
    """:mod:`workbench.plots`, or raise an ImportError that says it is not there yet."""
    try:
        from .. import plots
    except ImportError as exc:
        raise ImportError(f"workbench.plots is not available ({exc}); charts are disabled") from exc
    return plots
