"""Run the test cases of a bundled program on the ExecuTorch runtime (optional dependency)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from .artifact import Artifact


def run_test_cases(art: Artifact, rtol: float = 1e-3, atol: float = 1e-5) -> pd.DataFrame:
    """Execute every bundled test case and compare outputs with the expected values.

    The embedded program's bytes are copied once into a ``bytes`` object that stays
    referenced for the lifetime of the loaded program (the runtime keeps pointers into it).

    Returns:
        One row per (method, case, output): ``passed``, ``max_abs_error``, ``max_rel_error``,
        ``dtype``, ``shape`` and an ``error`` message when the case failed to run.
    """
    import numpy as np
    import pandas as pd
    import torch

    try:
        from executorch.runtime import Runtime
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("running bundled test cases needs the `executorch` package") from e

    cases = art.frames["test_cases"]
    start = art.info["program_offset"]
    size = art.info["program_size_in_bundle"]
    src = art.sources[art.path]
    # through the descriptor (checked): a bundle re-exported meanwhile is an error, not SIGBUS
    program_bytes = bytes(src.readinto(start, bytearray(size), "bundled program"))
    program = Runtime.get().load_program(program_bytes)
    rows: list[dict[str, Any]] = []
    methods: dict[str, Any] = {}
    for (method, case), group in cases.groupby(["method", "case"], observed=True, sort=True):
        inputs = [_value(art, r) for r in group[group["io"] == "input"].itertuples()]
        expected = [_value(art, r) for r in group[group["io"] == "expected_output"].itertuples()]
        try:
            if method not in methods:
                methods[method] = program.load_method(method)
            outputs = list(methods[method].execute(inputs))
            error = None
        except Exception as e:  # the runtime raises RuntimeError with a status code
            outputs, error = [], f"{type(e).__name__}: {e}"
        for k, exp in enumerate(expected):
            row: dict[str, Any] = {"method": method, "case": case, "output": k, "passed": False,
                                   "max_abs_error": np.nan, "max_rel_error": np.nan,
                                   "dtype": None, "shape": None, "error": error}
            if error is None and k >= len(outputs):
                row["error"] = f"the method returned {len(outputs)} outputs"
            elif error is None:
                got = outputs[k]
                if isinstance(exp, torch.Tensor):
                    got_t = torch.as_tensor(got)
                    row["dtype"], row["shape"] = str(exp.dtype).replace("torch.", ""), tuple(exp.shape)
                    if got_t.shape != exp.shape:
                        row["error"] = f"shape {tuple(got_t.shape)} != expected {tuple(exp.shape)}"
                    else:
                        diff = (got_t.double() - exp.double()).abs()
                        row["max_abs_error"] = float(diff.max()) if diff.numel() else 0.0
                        rel = diff / exp.double().abs().clamp_min(1e-12)
                        row["max_rel_error"] = float(rel.max()) if rel.numel() else 0.0
                        row["passed"] = bool(torch.allclose(got_t.double(), exp.double(),
                                                            rtol=rtol, atol=atol))
                else:
                    row["passed"] = got == exp
            rows.append(row)
    del methods, program  # release the runtime's hold before the bytes go away
    del program_bytes
    return pd.DataFrame(rows, columns=["method", "case", "output", "passed", "max_abs_error",
                                       "max_rel_error", "dtype", "shape", "error"])


def _value(art: Artifact, r: Any) -> Any:
    import torch

    if r.kind == "Tensor":
        t = art.tensor(r.name, copy=True)
        return t if isinstance(t, torch.Tensor) else torch.from_numpy(t)
    if r.kind == "Int":
        return int(r.value)
    if r.kind == "Bool":
        return r.value == "True"
    return float(r.value)
