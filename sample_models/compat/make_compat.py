"""Make the compat matrix: the same tiny MLP exported by older ExecuTorch / PyTorch releases.

A one-off driver, run with any Python 3.10+ (it uses only the standard library)::

    python sample_models/compat/make_compat.py                       # every target below
    python sample_models/compat/make_compat.py --only executorch-0.4.0 torch-2.15.0
    python sample_models/compat/make_compat.py --list
    python sample_models/compat/make_compat.py --table                # README table from the facts

For each target it creates a throw-away virtual environment under ``--work``
(default ``/tmp/compat-venvs``), installs the release and the torch it pins, copies
``probe.py`` into it and runs it there. The probe exports the MLP
(``Linear(16,32) -> ReLU -> Linear(32,8)``, ``torch.manual_seed(0)``) as

* ``mlp_portable.pte`` (no delegate),
* ``mlp_xnnpack.pte`` (XNNPACK, weights inside the file),
* ``mlp_external.pte`` + ``.ptd`` (portable, ``external_constants=True``) and
  ``mlp_xnnpack_external.pte`` + ``.ptd`` (XNNPACK, weights tagged for a ``.ptd``),
  where the release can write ``.ptd`` files,
* ``mlp.pt2`` (``torch.export.save``),

reads every file back with the release's own readers, runs each ``.pte`` once on the
release's runtime and writes ``<out>/<target>/facts.json``. The environment is then
deleted (unless ``--keep``). ``<out>/matrix.json`` sums up every target tried,
including install failures with pip's own error text.

Install notes: PyPI's Linux torch wheels are CUDA builds. The driver installs torch
with ``--no-deps`` plus the wheel's own requirements minus ``triton`` (the NVIDIA
libraries stay: ``libtorch_cuda.so`` links them, so ``import torch`` needs them even
on a CPU-only machine), and executorch with ``--no-deps`` plus its requirements minus
torch, torchvision, torchaudio, coremltools and scikit-learn, under a constraint file
that pins torch. The machine's pip constraint (``torch<=2.14.1``) is replaced by that
file, so torch 2.15 can be tried.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Target:
    """One release to install and export with."""

    name: str
    torch: str
    executorch: str | None = None
    pins: tuple[str, ...] = ()
    note: str = ""
    extra: dict = field(default_factory=dict)


#: ExecuTorch releases (each with the torch it was built against) and torch-only releases.
TARGETS: tuple[Target, ...] = (
    Target("executorch-0.2.0", "2.3.0", "0.2.0", ("numpy<2",), "needs numpy 1.x (torch 2.3)"),
    Target("executorch-0.3.0", "2.4.0", "0.3.0", ("numpy<2",), "needs numpy 1.x (torch 2.4)"),
    Target("executorch-0.4.0", "2.5.0", "0.4.0", ("numpy==1.23.2",)),
    Target("executorch-0.5.0", "2.6.0", "0.5.0", ("numpy==2.0.0", "pandas==2.2.2")),
    Target("executorch-0.6.0", "2.7.0", "0.6.0", ("torchao==0.10.0",)),
    Target("executorch-0.7.0", "2.8.0", "0.7.0", ("torchao==0.12.0",)),
    Target("executorch-1.0.0", "2.9.0", "1.0.0", ("torchao==0.14.0",)),
    Target("executorch-1.1.0", "2.10.0", "1.1.0", ("torchao==0.15.0",)),
    Target("executorch-1.2.0", "2.11.0", "1.2.0", ("torchao==0.17.0",)),
    Target("executorch-1.3.1", "2.12.0", "1.3.1", ("torchao==0.17.0",)),
    Target("executorch-1.4.1", "2.13.0+cpu", "1.4.1", ("torchao==0.18.0",)),
    Target("torch-2.14.1", "2.14.1"),
    Target("torch-2.15.0", "2.15.0"),
)

#: Requirements of the torch wheel that are not needed to export on a CPU.
TORCH_SKIP = {"triton", "pytorch-triton"}
#: Requirements of the executorch wheel left out: torch itself, domain libraries that
#: would pull another torch, and packages only some backends need.
EXECUTORCH_SKIP = {"torch", "torchvision", "torchaudio", "coremltools", "scikit-learn", "torchao"}


def log(msg: str) -> None:
    """Print a progress line with the time."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd: list[str], env: dict | None = None, timeout: int = 3600) -> subprocess.CompletedProcess:
    """Run a command (niced), capturing its output."""
    return subprocess.run(
        ["nice", "-n", "19", *cmd], capture_output=True, text=True, env=env, timeout=timeout
    )


class InstallError(RuntimeError):
    """pip could not install something; the message is pip's own error."""


def pip_env(constraints: Path) -> dict:
    """Environment for pip: our constraint file instead of the machine's, no cache."""
    env = dict(os.environ)
    env["PIP_CONSTRAINT"] = str(constraints)
    env["PIP_NO_CACHE_DIR"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def pip(venv: Path, args: list[str], env: dict) -> str:
    """Run the venv's pip; raise ``InstallError`` with pip's last lines on failure."""
    proc = run([str(venv / "bin" / "python"), "-m", "pip", *args], env=env)
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if "ERROR" in line or "error" in line.lower()]
        raise InstallError(" | ".join((errors or lines)[-6:])[-3000:])
    return proc.stdout


def requirements(wheel: Path, skip: set[str], venv: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` entries that apply here, minus ``skip``.

    Markers are evaluated by the venv's own pip (its vendored ``packaging``).
    """
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    reqs = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    code = (
        "import json,sys\n"
        "from pip._vendor.packaging.requirements import Requirement\n"
        "out=[]\n"
        "for line in json.load(sys.stdin):\n"
        "    r=Requirement(line)\n"
        "    if r.marker is None or r.marker.evaluate({'extra': ''}):\n"
        "        r.marker=None; out.append([r.name, str(r)])\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        input=json.dumps(reqs),
        capture_output=True,
        text=True,
        check=True,
    )
    return [req for name, req in json.loads(proc.stdout) if name.lower().replace("_", "-") not in skip]


def download(venv: Path, spec: str, dest: Path, env: dict) -> Path:
    """``pip download --no-deps`` one wheel; return its path."""
    before = set(dest.glob("*.whl"))
    pip(venv, ["download", "--no-deps", "--only-binary=:all:", "-d", str(dest), spec], env)
    new = set(dest.glob("*.whl")) - before
    if not new:  # already there
        name = spec.split("=")[0].replace("-", "_")
        new = {p for p in dest.glob(f"{name}-*.whl")}
    return sorted(new)[-1]


def install(target: Target, venv: Path, wheels: Path) -> dict:
    """Create the venv and install torch (+ executorch); return what was installed."""
    start = time.monotonic()
    proc = run([sys.executable, "-m", "venv", str(venv)])
    if proc.returncode != 0:
        raise InstallError(proc.stderr.strip()[-2000:])
    constraints = venv / "constraints.txt"
    constraints.write_text(f"torch=={target.torch}\n")
    env = pip_env(constraints)
    wheels.mkdir(parents=True, exist_ok=True)

    torch_wheel = download(venv, f"torch=={target.torch}", wheels, env)
    torch_deps = requirements(torch_wheel, TORCH_SKIP, venv)
    pip(venv, ["install", "--no-deps", str(torch_wheel)], env)
    pip(
        venv,
        ["install", "setuptools<81", *torch_deps, *[p for p in target.pins if not p.startswith("torchao")]],
        env,
    )
    info = {"torch_wheel": torch_wheel.name, "torch_wheel_bytes": torch_wheel.stat().st_size}
    torch_wheel.unlink()

    if target.executorch:
        et_wheel = download(venv, f"executorch=={target.executorch}", wheels, env)
        et_deps = requirements(et_wheel, EXECUTORCH_SKIP, venv)
        pip(venv, ["install", "--no-deps", str(et_wheel)], env)
        pip(venv, ["install", *et_deps, *[p for p in target.pins if not p.startswith("torchao")]], env)
        torchao = [p for p in target.pins if p.startswith("torchao")]
        if torchao:
            pip(venv, ["install", "--no-deps", *torchao], env)
        info["executorch_wheel"] = et_wheel.name
        et_wheel.unlink()
    freeze = pip(venv, ["freeze"], env)
    info["pip_freeze"] = sorted(freeze_line(line) for line in freeze.splitlines() if line.strip())
    info["venv_bytes"] = du(venv)
    info["install_seconds"] = round(time.monotonic() - start, 1)
    return info


def freeze_line(line: str) -> str:
    """``name @ file:///tmp/.../name-1.0-....whl#sha256=...`` -> ``name @ name-1.0-....whl``."""
    name, sep, url = line.partition(" @ ")
    if not sep:
        return line.strip()
    return f"{name.strip()} @ {url.split('#', 1)[0].rsplit('/', 1)[-1]}"


def du(path: Path) -> int:
    """Bytes used by the files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            p = Path(root, name)
            if not p.is_symlink():
                total += p.stat().st_size
    return total


def probe(target: Target, venv: Path, out: Path) -> dict:
    """Copy ``probe.py`` into the venv, run it, return its exit status and stderr tail."""
    script = venv / "probe.py"
    shutil.copyfile(HERE / "probe.py", script)
    cmd = [str(venv / "bin" / "python"), str(script), "--out", str(out)]
    if not target.executorch:
        cmd.append("--no-executorch")
    env = dict(os.environ)
    scratch = tempfile.mkdtemp(prefix="compat_tmp_", dir=venv)
    env.update(TMPDIR=scratch, TORCHINDUCTOR_CACHE_DIR=os.path.join(scratch, "inductor"))
    start = time.monotonic()
    proc = run(cmd, env=env, timeout=3600)
    return {
        "returncode": proc.returncode,
        "seconds": round(time.monotonic() - start, 1),
        "stderr_tail": proc.stderr[-3000:] if proc.returncode else "",
    }


def do_target(target: Target, args: argparse.Namespace) -> dict:
    """Install, probe and clean up one target; return its matrix entry."""
    venv = args.work / target.name
    out = args.out / target.name
    entry: dict = {"target": target.name, "torch": target.torch, "executorch": target.executorch}
    if target.note:
        entry["note"] = target.note
    shutil.rmtree(venv, ignore_errors=True)
    log(f"{target.name}: installing into {venv}")
    try:
        entry["install"] = install(target, venv, venv / "wheels")
        log(
            f"{target.name}: installed in {entry['install']['install_seconds']} s, "
            f"venv {entry['install']['venv_bytes'] / 1e9:.2f} GB"
        )
        shutil.rmtree(out, ignore_errors=True)
        entry["probe"] = probe(target, venv, out)
        facts_path = out / "facts.json"
        if facts_path.exists():
            facts = json.loads(facts_path.read_text())
            facts["install"] = {k: v for k, v in entry["install"].items() if k != "venv_bytes"}
            facts_path.write_text(json.dumps(facts, indent=1) + "\n")
            entry["made"] = sorted(f for m in facts["made"].values() for f in m["files"])
            entry["errors"] = facts["errors"]
            entry["runs"] = {
                name: ("ok" if "sha256_float32" in f.get("run", {}) else f.get("run", {}).get("error"))
                for name, f in facts["files"].items()
                if name.endswith(".pte")
            }
        log(
            f"{target.name}: probe exit {entry['probe']['returncode']} in {entry['probe']['seconds']} s; "
            f"made {entry.get('made')}"
        )
    except InstallError as exc:
        entry["install_error"] = str(exc)
        log(f"{target.name}: INSTALL FAILED: {exc}")
    except subprocess.TimeoutExpired as exc:
        entry["install_error"] = f"timed out: {exc}"
    finally:
        if not args.keep:
            shutil.rmtree(venv, ignore_errors=True)
    return entry


#: Columns of the README table: sample name -> files it makes.
COLUMNS = {
    "mlp_portable": ("mlp_portable.pte",),
    "mlp_xnnpack": ("mlp_xnnpack.pte",),
    "mlp_external": ("mlp_external.pte", "mlp_external.ptd"),
    "mlp_xnnpack_external": ("mlp_xnnpack_external.pte", "mlp_xnnpack_external.ptd"),
    "mlp_pt2": ("mlp.pt2",),
}


def cell(facts: dict, sample: str) -> str:
    """One README table cell: sizes of the files made and whether the runtime ran them."""
    if sample not in facts.get("made", {}):
        return "—"
    parts = []
    for name in facts["made"][sample]["files"]:
        info = facts["files"].get(name, {})
        text = f"{info.get('file_size', 0):,}"
        run_info = info.get("run")
        if run_info is not None:
            text += " ran" if "sha256_float32" in run_info else " (not run)"
        if name.endswith(".pt2"):
            loaded = info.get("export_load", {})
            text += " loads" if "output" in loaded else " (load failed)"
        parts.append(text)
    return " + ".join(parts)


def table(out: Path) -> str:
    """Markdown table of targets x samples from ``matrix.json`` and the facts files."""
    matrix = json.loads((out / "matrix.json").read_text())
    head = ["target", "torch", *COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, entry in matrix.items():
        facts_path = out / name / "facts.json"
        if "install_error" in entry or not facts_path.exists():
            cells = ["not installed"] + [""] * (len(COLUMNS) - 1)
            torch_version = entry["torch"]
        else:
            facts = json.loads(facts_path.read_text())
            cells = [cell(facts, sample) for sample in COLUMNS]
            torch_version = facts["versions"]["torch"]
        lines.append(f"| {name} | {torch_version} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the selected targets and update ``matrix.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="TARGET", help="targets to run (see --list)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/compat-venvs"), help="venv folder")
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the virtual environments")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument("--table", action="store_true", help="print the README table and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.out))
        return 0
    if args.list:
        for t in TARGETS:
            print(f"{t.name:20} torch {t.torch:12} executorch {t.executorch or '-'}")
        return 0
    known = {t.name: t for t in TARGETS}
    wanted = args.only or list(known)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown target(s): {', '.join(unknown)} (see --list)")
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    matrix_path = args.out / "matrix.json"
    matrix = json.loads(matrix_path.read_text()) if matrix_path.exists() else {}
    for name in wanted:
        matrix[name] = do_target(known[name], args)
        ordered = {t.name: matrix[t.name] for t in TARGETS if t.name in matrix}
        matrix_path.write_text(json.dumps(ordered, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
