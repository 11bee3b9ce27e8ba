"""Run the test cases of a bundled program on the ExecuTorch runtime (in the runtime's child
process, :mod:`workbench.runtime`; optional dependency)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from .artifact import Artifact

_COLUMNS = ["method", "case", "output", "passed", "max_abs_error", "max_rel_error", "dtype",
            "shape", "error"]


def run_test_cases(art: Artifact, rtol: float = 1e-3, atol: float = 1e-5) -> pd.DataFrame:
    """Execute every bundled test case and compare outputs with the expected values.

    The cases run in the runtime's child process (a crash there is an error here, naming
    the phase), with the kernel libraries the embedded program needs imported; the embedded
    program's bytes are read through the file descriptor (checked) and stay referenced while
    the runtime holds them.

    Returns:
        One row per (method, case, output): ``passed``, ``max_abs_error``, ``max_rel_error``,
        ``dtype``, ``shape`` and an ``error`` message when the case failed to run;
        ``attrs["kernel_libraries"]``: the libraries imported.

    Raises:
        MissingKernelError: the embedded program calls operators the runtime lacks.
    """
    import pandas as pd

    from .runtime._registry import check_of, run_child

    libraries = check_of(art)
    result = run_child({"task": "bundled", "load": libraries, "path": art.path,
                                "rtol": float(rtol), "atol": float(atol)}, what=art.path)
    rows = result["rows"]
    for r in rows:
        r["shape"] = tuple(r["shape"]) if r["shape"] is not None else None
    frame = pd.DataFrame(rows, columns=_COLUMNS)
    frame.attrs["kernel_libraries"] = result["loaded_libraries"]
    return frame
