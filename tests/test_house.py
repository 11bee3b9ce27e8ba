"""The shape of the package: data flows one way (no import cycles, counting imports inside
functions), views depend on the core and never the reverse, no function shadows its module,
and the built wheel installs and works with only its declared dependencies."""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys
import venv

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "workbench"

#: Modules that present results (they may import the core; the core never imports them).
#: ``workbench.__main__`` is ``python -m workbench``: the CLI's entry point.
VIEWS = ("workbench.comparison", "workbench.plots", "workbench.profiling", "workbench.loadpaths",
         "workbench.corpus", "workbench.cli", "workbench.__main__", "workbench.widgets",
         "workbench.timing", "workbench.llm", "workbench.graphs", "workbench.model_explorer")


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its source (also inside functions
    and ``TYPE_CHECKING`` blocks are skipped: they do not run)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip: set[int] = set()
        for node in ast.walk(tree):  # `if TYPE_CHECKING:` bodies never run
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for b in node.body for n in ast.walk(b))
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for t in targets:
                while t and t not in mods:  # `import workbench.formats.pte.schema` etc.
                    t = t.rpartition(".")[0]
                if t.startswith("workbench") and t != mod:
                    graph[mod].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _parents(mod: str) -> set[str]:
    parts = mod.split(".")
    return {".".join(parts[:k]) for k in range(1, len(parts))}


def test_import_graph_has_no_cycle():
    graph = import_graph()
    # A package's __init__ importing its own submodules is the usual way in; a submodule
    # importing its package's __init__ back is the cycle we forbid.
    assert _cycles(graph) == []


def test_cycle_detector_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_core_never_imports_a_view():
    graph = import_graph()
    bad = []
    for mod, deps in graph.items():
        if mod == "workbench" or any(mod == v or mod.startswith(v + ".") for v in VIEWS):
            continue
        for d in deps:
            if any(d == v or d.startswith(v + ".") for v in VIEWS):
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_formats_never_import_the_artifact():
    graph = import_graph()
    bad = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("workbench.formats")
           for d in deps if d in ("workbench.artifact", "workbench")]
    assert bad == []


def test_no_function_shadows_its_module():
    import importlib

    import workbench as wb

    for name in dir(wb):
        if name.startswith("_"):
            continue
        if f"workbench.{name}" in _modules():
            mod = importlib.import_module(f"workbench.{name}")
            assert getattr(wb, name) is mod, f"workbench.{name} is not the module"


def _index_reachable(tmp: pathlib.Path) -> bool:
    """Whether pip can fetch a small package (the wheel's dependencies come from an index)."""
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                            str(tmp), "six"], capture_output=True, timeout=60)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow
def test_wheel_installs_with_declared_dependencies_only(tmp_path, sample):
    """Build the wheel, install it into a fresh venv with only its declared dependencies
    (plus the notebook extra), and run the CLI and the library on a sample."""
    if not _index_reachable(tmp_path / "probe"):
        pytest.skip("no package index reachable: cannot install the wheel's dependencies")
    wheels = tmp_path / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(wheels), str(ROOT)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.startswith("pte_workbench-"), wheel.name
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        f"{wheel}[notebook]"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    pte = sample("mlp_portable.pte")
    cli = env_dir / "bin" / "workbench"
    r = subprocess.run([str(cli), "inspect", str(pte)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "mlp_portable.pte" in r.stdout and "[pte]" in r.stdout
    code = ("import workbench as wb, sys; t = wb.open(sys.argv[1]).tensors; "
            "print(len(t), sorted(t.columns)[:3]); import matplotlib, ipywidgets; "
            "assert 'torch' not in sys.modules")
    r = subprocess.run([str(py), "-c", code, str(pte)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[0] == str(len(__import__("workbench").open(pte).tensors))
    shutil.rmtree(env_dir, ignore_errors=True)


#: Names only :mod:`workbench.readpath` may read or bind: the read-tier switch and its size rule.
READ_SWITCH = ("TIER", "SCALAR_INSTRUCTIONS", "FAST")


def _tier_choices(source: str) -> list[str]:
    """Places in ``source`` that choose a read tier themselves: a flag of the switch's names
    (bound or read), or a ``raise SlowPath("disabled")`` that stands in for the switch."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in READ_SWITCH:
            out.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in READ_SWITCH:
            out.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Raise) and node.exc is not None and "SlowPath(" in ast.unparse(
                node.exc) and "disabled" in ast.unparse(node.exc):
            out.append(f"line {node.lineno}: raise SlowPath('disabled')")
    return sorted(out)


def test_one_place_chooses_the_read_tier():
    """The read tier is chosen in ``workbench.readpath`` only: readers ask it
    (``readpath.chosen()``) and keep no flag of their own."""
    bad = {mod: found for mod, path in _modules().items() if mod != "workbench.readpath"
           and (found := _tier_choices(path.read_text()))}
    assert bad == {}
    assert _tier_choices((PKG / "readpath.py").read_text())  # (the switch itself is found)


def test_tier_choice_detector_finds_planted_flags():
    assert _tier_choices("FAST = True\n") == ["line 1: FAST"]
    assert _tier_choices("if not FAST:\n    raise SlowPath('disabled')\n") == [
        "line 1: FAST", "line 2: raise SlowPath('disabled')"]
    assert _tier_choices("m.TIER\n") == ["line 1: .TIER"]
    assert _tier_choices("readpath.chosen().read(f, g)\nraise SlowPath('bad union')\n") == []


def test_every_format_is_a_reader():
    """Each format package implements :class:`workbench.formats.Reader` explicitly: its
    ``read`` takes ``data=`` exactly when it says ``TAKES_DATA`` (``open`` relies on it)."""
    import inspect

    from workbench import formats

    for r in formats.READERS:
        assert isinstance(r, formats.Reader), r.__name__
        assert isinstance(r.FORMAT, str) and isinstance(r.TAKES_DATA, bool), r.__name__
        assert ("data" in inspect.signature(r.read).parameters) is r.TAKES_DATA, r.__name__
    assert sorted(r.FORMAT for r in formats.READERS if r.TAKES_DATA) == ["etdump", "pte"]


#: Methods that change a list, dict or set in place.
_MUTATORS = ("append", "extend", "update", "setdefault", "pop", "insert", "clear", "add")


def _archive_writes(source: str) -> list[str]:
    """Places in ``source`` that write an archive's state (``arc.<x> = ...``,
    ``arc.<x>[...] = ...``, ``arc.<x>.append(...)``, ...) instead of asking the archive."""
    out = []

    def is_arc_attr(node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript):
            node = node.value
        return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "arc")

    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        out += [f"line {node.lineno}: {ast.unparse(t)}" for t in targets if is_arc_attr(t)]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS and is_arc_attr(node.func.value)):
            out.append(f"line {node.lineno}: {ast.unparse(node.func)}")
    return sorted(out)


def test_only_the_archive_module_writes_a_pt2_archive():
    """The pt2 ``Archive`` lives in one module: the config and AOTInductor readers and the
    frame builders hand results to its methods and never write its attributes."""
    bad = {mod: found for mod, path in _modules().items()
           if mod.startswith("workbench.formats.pt2.") and mod != "workbench.formats.pt2.archive"
           and (found := _archive_writes(path.read_text()))}
    assert bad == {}


def test_archive_write_detector_finds_planted_writes():
    assert _archive_writes("arc.models[k] = v\narc.x = 1\narc.used_by.setdefault(i, [])\n") == [
        "line 1: arc.models[k]", "line 2: arc.x", "line 3: arc.used_by.setdefault"]
    assert _archive_writes("arc.add_row(r)\nx = arc.models[k]\nrows.append(arc.path)\n") == []


def test_memory_plan_analysis_is_a_view_over_frames():
    """The memory plan's analysis (``memory_efficiency``) is computed from the ``lifetimes``
    frame by ``workbench.memory_plan``, which never reads bytes (imports no reader)."""
    import workbench as wb
    from workbench.formats.parsed import FrameView

    deps = import_graph()["workbench.memory_plan"]
    assert not [d for d in deps if d.startswith("workbench.formats")], deps
    with wb.open(ROOT / "sample_models" / "mlp_portable.pte", data=[]) as art:
        view = art._parsed.builders["memory_efficiency"]
        assert isinstance(view, FrameView) and view.inputs == ("lifetimes",)
        assert len(art.frames["memory_efficiency"]) >= 1
