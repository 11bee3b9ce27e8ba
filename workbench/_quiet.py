"""Silence the ExecuTorch runtime's diagnostics at their source: its CPU probe (``cpuinfo``)
logs through the runtime's log hook, which the Python bindings send to ``sys.stderr`` one
fragment at a time (a notebook shows dozens of pink chunks), and native code may also write
straight to file descriptor 2.

``native_stderr()`` points both ``sys.stderr`` and fd 2 at private sinks for the duration of a
``with`` block, then keeps what was written on the returned object (``.text``, ``.lines``), so
nothing is lost: a caller can show it, count it or assert on it.

Example:
    >>> from workbench._quiet import native_stderr
    >>> with native_stderr() as err:                       # doctest: +SKIP
    ...     report = wb.open("sample_models/mlp.bpte").run_test_cases()
    >>> len(err.lines)                                       # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator


class Captured:
    """What the native code wrote to fd 2 inside the block."""

    def __init__(self) -> None:
        self.text = ""

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.text.splitlines() if ln.strip()]

    def __repr__(self) -> str:
        return f"<native stderr: {len(self.lines)} lines captured>"


@contextlib.contextmanager
def native_stderr() -> Iterator[Captured]:
    """Redirect file descriptor 2 to a temporary file inside the block; see the module doc."""
    captured = Captured()
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
    saved = os.dup(2)
    python_sink = io.StringIO()
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            with contextlib.redirect_stderr(python_sink):
                yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = python_sink.getvalue() + sink.read().decode("utf-8", errors="replace")
