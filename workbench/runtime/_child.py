"""The child process that runs ExecuTorch for the workbench (``python -m workbench.runtime._child``).

It reads one JSON task from standard input, imports the kernel libraries the task names,
does the work, and writes protocol lines to standard output:

* ``WB-PHASE <name>``: the phase it enters (so that a crash names the phase it died in);
* ``WB-RESULT <json>``: the task's result, last.

Tasks (``"task"``):

* ``registered``: the operators the runtime registers before and after importing each
  kernel library (``libraries``: name -> module), and which imports failed;
* ``run``: load ``program`` (with ``data``), load ``method``, execute it ``iterations`` times
  with ETDump on, write the trace to ``etdump``;
* ``bundled``: execute the test cases of a bundled program and compare the outputs;
* ``memory``: load and execute a program, reading ``/proc/self`` after each phase.

Only this module imports ExecuTorch's runtime; it runs in its own process, so a crash in a
kernel (an XNNPACK program without its ``.ptd`` segfaults) does not end the caller.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from workbench.runtime._protocol import PHASE, RESULT


def phase(name: str) -> None:
    """Announce the phase the child enters."""
    sys.stdout.write(PHASE + name + "\n")
    sys.stdout.flush()


def load_libraries(modules: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Import the kernel libraries ``modules`` (name -> module): (loaded, failed: name ->
    error)."""
    loaded, failed = [], {}
    for name, module in modules.items():
        try:
            importlib.import_module(module)
            loaded.append(name)
        except Exception as e:  # an import that fails says why, the task decides what to do
            failed[name] = f"{type(e).__name__}: {e}"
    return loaded, failed


def _registered(task: dict[str, Any]) -> dict[str, Any]:
    from executorch.extension.pybindings import portable_lib

    base = set(portable_lib._get_operator_names())
    seen = set(base)
    libraries: dict[str, dict[str, Any]] = {}
    for name, module in task["libraries"].items():
        loaded, failed = load_libraries({name: module})
        names = set(portable_lib._get_operator_names())
        libraries[name] = {"module": module, "loaded": bool(loaded),
                           "error": failed.get(name), "added": sorted(names - seen)}
        seen |= names
    import executorch

    return {"base": sorted(base), "libraries": libraries,
            "executorch": getattr(executorch, "__version__", None)}


def _inputs(task: dict[str, Any], meta: Any) -> list[Any]:
    """The method's inputs: the caller's (a file written with ``torch.save``), else defaults
    built from ``meta`` (see ``workbench.runtime.default_inputs``)."""
    import torch

    if task.get("inputs"):
        values = torch.load(task["inputs"], weights_only=True)
        return list(values)
    from workbench.runtime._inputs import default_inputs

    return default_inputs(meta, task.get("int_limit"))


def _run(task: dict[str, Any]) -> dict[str, Any]:
    import torch
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    phase("load_program")
    m = _load_for_executorch(task["program"], data_path=task.get("data"), enable_etdump=True,
                             debug_buffer_size=int(task.get("debug_buffer_size", 0)))
    phase("load_method")
    meta = m.method_meta(task["method"])
    inputs = _inputs(task, meta)
    phase("execute")
    outputs: Any = None
    with torch.no_grad():
        for _ in range(int(task["iterations"])):
            outputs = m.run_method(task["method"], tuple(inputs))
    phase("write_etdump")
    m.write_etdump_result_to_file(task["etdump"], task["debug"])
    outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return {"inputs": [_describe(x) for x in inputs], "outputs": [_describe(x) for x in outs]}


def _describe(x: Any) -> dict[str, Any]:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        d: dict[str, Any] = {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
        if x.is_floating_point() and x.numel():
            d["finite"] = bool(x.isfinite().all())
        return d
    return {"value": repr(x)[:80]}


def _bundled(task: dict[str, Any]) -> dict[str, Any]:
    """Execute every test case of a bundled program and compare with the expected values."""
    import math

    import torch
    from executorch.runtime import Runtime

    import workbench as wb

    rows: list[dict[str, Any]] = []
    with wb.open(task["path"]) as art:
        cases = art.frames["test_cases"]
        start = art.info["program_offset"]
        size = art.info["program_size_in_bundle"]
        src = art.sources[art.path]
        phase("load_program")
        # through the descriptor (checked): a bundle re-exported meanwhile is an error
        program_bytes = bytes(src.readinto(start, bytearray(size), "bundled program"))
        program = Runtime.get().load_program(program_bytes)
        methods: dict[str, Any] = {}
        for (method, case), group in cases.groupby(["method", "case"], observed=True,
                                                   sort=True):
            inputs = [_value(art, r) for r in group[group["io"] == "input"].itertuples()]
            expected = [_value(art, r)
                        for r in group[group["io"] == "expected_output"].itertuples()]
            try:
                if method not in methods:
                    phase("load_method")
                    methods[method] = program.load_method(method)
                phase("execute")
                outputs = list(methods[method].execute(inputs))
                error = None
            except Exception as e:  # the runtime raises RuntimeError with a status code
                outputs, error = [], f"{type(e).__name__}: {e}"
            for k, exp in enumerate(expected):
                row: dict[str, Any] = {"method": method, "case": int(case), "output": k,
                                       "passed": False, "max_abs_error": math.nan,
                                       "max_rel_error": math.nan, "dtype": None, "shape": None,
                                       "error": error}
                if error is None and k >= len(outputs):
                    row["error"] = f"the method returned {len(outputs)} outputs"
                elif error is None:
                    got = outputs[k]
                    if isinstance(exp, torch.Tensor):
                        got_t = torch.as_tensor(got)
                        row["dtype"] = str(exp.dtype).replace("torch.", "")
                        row["shape"] = list(exp.shape)
                        if got_t.shape != exp.shape:
                            row["error"] = (f"shape {tuple(got_t.shape)} != expected "
                                            f"{tuple(exp.shape)}")
                        else:
                            diff = (got_t.double() - exp.double()).abs()
                            row["max_abs_error"] = float(diff.max()) if diff.numel() else 0.0
                            rel = diff / exp.double().abs().clamp_min(1e-12)
                            row["max_rel_error"] = float(rel.max()) if rel.numel() else 0.0
                            row["passed"] = bool(torch.allclose(
                                got_t.double(), exp.double(), rtol=task["rtol"],
                                atol=task["atol"]))
                    else:
                        row["passed"] = bool(got == exp)
                rows.append(row)
        del methods, program  # release the runtime's hold before the bytes go away
        del program_bytes
    return {"rows": rows}


def _value(art: Any, r: Any) -> Any:
    import torch

    if r.kind == "Tensor":
        t = art.tensor(r.name, copy=True)
        return t if isinstance(t, torch.Tensor) else torch.from_numpy(t)
    if r.kind == "Int":
        return int(r.value)
    if r.kind == "Bool":
        return r.value == "True"
    return float(r.value)


def _memory(task: dict[str, Any]) -> dict[str, Any]:
    from workbench.runtime._memory_child import measure

    return measure(task, phase)


TASKS = {"registered": _registered, "run": _run, "bundled": _bundled, "memory": _memory}


def main() -> int:
    task = json.loads(sys.stdin.read())
    phase("import")
    loaded, failed = load_libraries(task.get("load", {}))
    result = TASKS[task["task"]](task)
    result["loaded_libraries"] = loaded
    result["failed_libraries"] = failed
    phase("done")
    sys.stdout.write(RESULT + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
