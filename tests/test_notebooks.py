"""Every notebook in notebooks/ executes headless, top to bottom, from a copy in a temporary
folder (nbclient, a real kernel); cells appended to some notebooks then drive their widgets
(set values, assert on what the widgets show), which catches exceptions raised inside widget
callbacks that a plain run would miss.

The notebooks run two at a time (the machines have two cores; most of the time is spent in
imports and exports); each test waits for its own notebook.
"""

from __future__ import annotations

import concurrent.futures
import copy
import difflib
import importlib.util
import json
import pathlib
import re
from typing import Any

import pytest
from _jupyter import NOTEBOOKS, copy_workspace, error_outputs, execute_notebook

pytestmark = pytest.mark.slow

ALL = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def _load_store_script() -> Any:
    """``scripts/store_notebook.py``: what ``render_notebooks.sh --store`` does to a notebook."""
    path = NOTEBOOKS.parent / "scripts" / "store_notebook.py"
    spec = importlib.util.spec_from_file_location("store_notebook", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


STORE = _load_store_script()

#: Cells appended to a notebook: they drive its widgets as a person would.
DRIVE: dict[str, list[str]] = {
    "02_layout_explorer.ipynb": [
        """
        before = explorer.layout_view.image.value
        assert before, "the layout tab shows no image"
        kv = next(p for _, p in explorer.picker.dropdown.options if p.endswith("kv_cache.pte"))
        explorer.picker.dropdown.value = kv
        assert explorer.art is not None and explorer.art.path == kv
        assert not explorer.status.has_error, explorer.status.value
        after = explorer.layout_view.image.value
        assert after and after != before, "the layout image did not change"
        assert "mutable_data" in str(explorer.segment_select.options)
        """,
        """
        explorer.tabs.selected_index = explorer.TABS.index("Tensors")
        html = explorer.tensor_table.html.value
        assert "k_cache" in html and "forward/8" in html
        explorer.name_filter.value = "cache"
        html = explorer.tensor_table.html.value
        assert "k_cache" in html and "forward/8" not in html
        explorer.storage_filter.value = "segment"
        assert "no tensor matches" in explorer.tensor_table.html.value
        """,
        """
        explorer.tabs.selected_index = explorer.TABS.index("Tensor")
        explorer.tensor_filter.value = "k_cache"
        assert "k_cache" in explorer.tensor_facts.value
        assert explorer.tensor_hist.image.value and "statistics" in explorer.tensor_values.value
        explorer.tabs.selected_index = explorer.TABS.index("Memory plan")
        assert explorer.memory_view.image.value and not explorer.memory_view.message.has_error
        assert not explorer.status.has_error, explorer.status.value
        """,
    ],
    "03_inline_vs_external.ipynb": [
        """
        assert "segment → external" in view.tensor_table.html.value
        before = view.layout_view.image.value
        xnn = next(p for _, p in view.picker_b.dropdown.options if p.endswith("mlp_xnnpack.pte"))
        view.picker_b.dropdown.value = xnn
        assert not view.status.has_error, view.status.value
        assert "segment → named_data" in view.tensor_table.html.value
        assert view.layout_view.image.value != before
        view.show.value = "all"
        assert view.tensor_count.value
        """,
    ],
    "04_load_paths.ipynb": [
        """
        from workbench.loadpaths.cuda import cuda_unavailable
        assert profiler.result is not None
        assert set(profiler.result.summary["status"]) == {"ok"}
        assert profiler.chart.image.value and "read" in profiler.table.html.value
        cuda = [n for n, lp in __import__("workbench.loadpaths", fromlist=["PATHS"]).PATHS.items()
                if lp.device == "cuda"]
        if cuda_unavailable():
            assert all(profiler.checks[n].disabled for n in cuda)
            assert all(profiler.reasons[n] for n in cuda)
        """,
    ],
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A copy of notebooks/ and sample_models/ (the notebooks run there, never in the repo)."""
    return copy_workspace(tmp_path_factory.mktemp("notebooks") / "root")


@pytest.fixture(scope="module")
def executed(workspace: pathlib.Path, request: pytest.FixtureRequest) -> dict[str, concurrent.futures.Future]:
    """Start every notebook the selected tests need (all of them when no test names one; two
    at a time); name -> future of (notebook, seconds)."""
    wanted = {item.callspec.params["name"] for item in request.session.items
              if item.module is request.module and "executed" in item.fixturenames
              and "name" in getattr(getattr(item, "callspec", None), "params", {})}
    home = workspace.parent / "home"
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {name: pool.submit(execute_notebook, workspace / "notebooks" / name, home,
                                 extra_cells=[_dedent(c) for c in DRIVE.get(name, [])])
               for name in ALL if name in (wanted or ALL)}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _dedent(src: str) -> str:
    import textwrap

    return textwrap.dedent(src).strip()


def test_there_are_notebooks() -> None:
    assert {"01_tour.ipynb", "02_layout_explorer.ipynb", "03_inline_vs_external.ipynb",
            "04_load_paths.ipynb", "05_bundled_programs.ipynb", "06_where_time_goes.ipynb",
            "07_bring_your_own_model.ipynb"} <= set(ALL)


#: Numbers prose may state without computing them: format constants (header sizes, the default
#: alignments), the sizes of what a notebook itself builds, and notebook numbers. Anything else
#: a Markdown cell states (a size, a time, a ratio, a count) must come from the notebook: a code
#: cell that computes it and asserts it, or shows it with ``Markdown(f"...")``.
DEFINITIONAL = {"01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "8", "16", "32", "64",
                "128", "1024", "4096"}

_CODE = re.compile(r"```.*?```|`[^`]*`", re.S)
_LINK = re.compile(r"\]\([^)]*\)")
_LIST = re.compile(r"^\s*\d+\.\s", re.M)
_NUMBER = re.compile(r"(?<![\w.-])\d+(?:[.,]\d+)*")


def unchecked_numbers(markdown: str) -> list[str]:
    """Numbers that static Markdown states outside code spans, links and list markers, and
    that are not in :data:`DEFINITIONAL`: each is a claim nothing in the notebook checks."""
    text = _LIST.sub(" ", _LINK.sub("]", _CODE.sub(" ", markdown)))
    return [n for n in _NUMBER.findall(text) if n not in DEFINITIONAL]


def test_unchecked_numbers_finds_claims() -> None:
    assert unchecked_numbers("the pair is 560 bytes bigger") == ["560"]
    assert unchecked_numbers("`forward/5` at [docs](https://x/1.html), 128-aligned\n1. try it") == []
    assert unchecked_numbers("mmap_touch at 108 GB/s, 11.8x") == ["108", "11.8"]


@pytest.mark.parametrize("name", ALL)
def test_prose_states_no_unchecked_numbers(name: str) -> None:
    """Claims are computed: static Markdown holds no measured or counted number."""
    nb = json.loads((NOTEBOOKS / name).read_text())
    found = {i: unchecked_numbers("".join(c["source"])) for i, c in enumerate(nb["cells"])
             if c["cell_type"] == "markdown"}
    found = {i: n for i, n in found.items() if n}
    assert not found, f"{name}: numbers in prose that no cell computes (cell: numbers): {found}"


#: Committed notebooks are stored executed, so that they read on GitHub without a kernel.
MAX_BYTES = 1_000_000


def _committed(name: str) -> Any:
    import nbformat

    return nbformat.read(NOTEBOOKS / name, as_version=4)


@pytest.mark.parametrize("name", ALL)
def test_stored_executed_and_small(name: str) -> None:
    nb = _committed(name)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "a notebook without code"
    assert all(c.get("execution_count") for c in code), \
        f"{name} is stored unexecuted: run `bash scripts/render_notebooks.sh --store`"
    assert not error_outputs(nb), error_outputs(nb)
    assert not [c for c in code for o in c.outputs if o.get("name") == "stderr"], \
        f"{name} stores stderr output: silence it at its source (workbench._quiet.native_stderr)"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert sum(c.cell_type == "markdown" for c in nb.cells) >= 3, "notebooks teach: add prose"
    assert (NOTEBOOKS / name).stat().st_size < MAX_BYTES, f"{name} is over {MAX_BYTES:,} bytes"
    text = json.dumps([(c.source, c.get("outputs", [])) for c in nb.cells])
    assert "/work/" not in text and "/tmp/" not in text, "no absolute paths: use SAMPLES"
    last = nb.cells[-1]
    assert last.cell_type == "markdown" and "Takeaways" in last.source and "Exercises" in last.source


#: Cells whose output depends on the machine (a GPU or not): their structure is not compared.
VARIES = "varies-by-machine"


def structure(nb: Any, cells: int | None = None) -> list[tuple[str, ...]]:
    """Per cell: the sorted kinds of output it has (``stdout``, ``stderr``, ``image``,
    ``table``, ``markdown``, ``widget``, ``text``, ``error``); no values, pixels or timings."""
    out = []
    for c in nb.cells[:cells]:
        kinds: set[str] = set()
        if c.cell_type == "code" and VARIES not in c.metadata.get("tags", []):
            for o in c.get("outputs", []):
                if o["output_type"] == "stream":
                    kinds.add(o["name"])
                elif o["output_type"] == "error":
                    kinds.add("error")
                else:
                    data = o.get("data", {})
                    kinds.update(k for m, k in (("image/png", "image"), ("text/html", "table"),
                                                ("text/markdown", "markdown"),
                                                ("application/vnd.jupyter.widget-view+json", "widget"))
                                 if m in data)
                    if set(data) == {"text/plain"}:
                        kinds.add("text")
        out.append((c.cell_type, *sorted(kinds)))
    return out


@pytest.mark.parametrize("name", ALL)
def test_committed_notebook_names_no_machine_or_temporary_path(name: str) -> None:
    """Nowhere in the committed file (sources, outputs, metadata): a temporary folder, the
    home folder, this checkout's absolute path (``scripts/store_notebook.py`` lists them)."""
    found = STORE.machine_paths((NOTEBOOKS / name).read_text())
    assert not found, f"{name} names machine or temporary paths: {found}"


def test_machine_paths_are_found() -> None:
    home = str(pathlib.Path.home())
    text = json.dumps({"a": "/tmp/wb-keys-x1/big.pte", "b": f"{home}/models/x.pte",
                       "c": str(NOTEBOOKS.parent / "sample_models" / "x.pte"), "d": "../sample_models"})
    found = STORE.machine_paths(text)
    assert any("/tmp/wb-keys" in f for f in found) and any("models/x.pte" in f for f in found)
    assert any("sample_models/x.pte" in f for f in found)
    assert STORE.machine_paths(json.dumps({"d": "../sample_models", "e": "tempfile.mkdtemp()"})) == []


@pytest.mark.parametrize("name", ALL)
def test_committed_notebook_has_no_widget_state_or_progress_bar(name: str) -> None:
    """Committed as a reader without a kernel sees it: no widget state (it renders only in a
    trusted notebook, with broken images elsewhere), widgets as their own text, no progress
    bar (its stored form is the bar at 0%)."""
    nb = json.loads((NOTEBOOKS / name).read_text())
    assert "widgets" not in nb["metadata"], f"{name} stores widget state: store it again"
    views = [i for i, c in enumerate(nb["cells"]) for o in c.get("outputs", [])
             if STORE.WIDGET in o.get("data", {})]
    assert not views, f"{name}: widget views stored in cells {views}: store it again"
    assert not STORE.progress_bars(nb), f"{name}: progress bars stored: {STORE.progress_bars(nb)}"


def test_static_outputs_drop_bars_and_widget_views() -> None:
    bar = {"output_type": "display_data", "metadata": {},
           "data": {STORE.WIDGET: {"model_id": "x"}, "text/plain": "export:   0%|          | 0/3"}}
    widget = {"output_type": "execute_result", "metadata": {}, "execution_count": 1,
              "data": {STORE.WIDGET: {"model_id": "y"}, "text/plain": "Explorer widget (a.pte): …"}}
    nb = {"metadata": {"widgets": {"state": {}}},
          "cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": [bar, widget]}]}
    assert STORE.progress_bars(nb) == ["export:   0%|          | 0/3"]
    out = STORE.static_outputs(nb)["cells"][0]["outputs"]
    assert out == [{**widget, "data": {"text/plain": "Explorer widget (a.pte): …"}}]
    assert "widgets" not in nb["metadata"] and STORE.progress_bars(nb) == []


def _static(nb: Any) -> Any:
    """An executed notebook as it would be committed (see ``scripts/store_notebook.py``)."""
    return STORE.static_outputs(copy.deepcopy(nb))


@pytest.mark.parametrize("name", ALL)
def test_every_widget_has_a_static_twin(name: str, executed: dict[str, Any]) -> None:
    """A widget shows nothing without a kernel: the next code cell shows the same view as a
    picture and a table (what GitHub and nbconvert show)."""
    nb, _ = executed[name].result()
    n = len(_committed(name).cells)
    kinds = structure(nb, n)
    code = [i for i in range(n) if nb.cells[i].cell_type == "code"]
    for i in code:
        if any(STORE.WIDGET in o.get("data", {}) and not STORE.is_progress_bar(o)
               for o in nb.cells[i].get("outputs", [])):
            twin = next((j for j in code if j > i), None)
            assert twin is not None and {"image", "table"} <= set(kinds[twin]), \
                f"{name}: the widget of cell {i} has no static twin (picture and table) after it"


@pytest.mark.parametrize("name", ALL)
def test_committed_outputs_are_current(name: str, executed: dict[str, Any]) -> None:
    """Re-executed now, the notebook has the committed notebook's shape: the same cells, and
    per cell the same kinds of output (images, tables, Markdown, widgets, streams)."""
    nb, _ = executed[name].result()
    nb = _static(nb)
    committed = _committed(name)
    n = len(committed.cells)
    assert [c.source for c in nb.cells[:n]] == [c.source for c in committed.cells], \
        f"{name}: sources changed since the outputs were stored: bash scripts/render_notebooks.sh --store"
    now, then = structure(nb, n), structure(committed)
    diff = [(i, t, w) for i, (t, w) in enumerate(zip(then, now)) if t != w]
    assert not diff, f"{name}: committed outputs are stale (cell, committed, now): {diff}; " \
                     "re-store with: bash scripts/render_notebooks.sh --store"


#: Cells whose output is a timing, or derived from one (a rate, a ratio of times, a sentence
#: that says which path was faster): their text is not compared with the committed text (their
#: shape still is). Tag only cells whose every output depends on time: split a cell whose output
#: mixes timings with counts or sizes, so that the counts and sizes stay checked. There is no
#: other masking: every other text output must be identical.
TIMING = "timing"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "".join(value)


def output_texts(nb: Any, cells: int | None = None) -> dict[int, list[str]]:
    """Per code cell that is not tagged ``timing`` (nor ``varies-by-machine``): the text of
    each output in order — a stream's text, a result's Markdown, else its HTML, else its plain
    text. Images have no text here; apply :func:`_static` first to an executed notebook."""
    texts: dict[int, list[str]] = {}
    for i, c in enumerate(nb.cells[:cells]):
        tags = c.metadata.get("tags", [])
        if c.cell_type != "code" or TIMING in tags or VARIES in tags:
            continue
        out = []
        for o in c.get("outputs", []):
            if o["output_type"] == "stream":
                out.append(f"[{o['name']}]\n{_text(o['text'])}")
            elif o["output_type"] == "error":
                out.append(f"[error] {o.get('ename')}: {o.get('evalue')}")
            else:
                data = o.get("data", {})
                mime = next((m for m in ("text/markdown", "text/html", "text/plain") if m in data), None)
                if mime:
                    out.append(f"[{mime}]\n{_text(data[mime])}")
        texts[i] = out
    return texts


def drift(committed: Any, now: Any) -> list[str]:
    """Where the text outputs of ``now`` differ from ``committed`` (cells of ``committed``
    only; timing cells skipped): one unified diff per differing cell, shortened."""
    then, cur = output_texts(committed), output_texts(now, len(committed.cells))
    diffs = []
    for i in sorted(then):
        if then[i] != cur.get(i):
            a = "\n".join(then[i]).splitlines()
            b = "\n".join(cur.get(i, [])).splitlines()
            lines = list(difflib.unified_diff(a, b, "committed", "now", lineterm="", n=1))
            diffs.append(f"cell {i}:\n" + "\n".join(lines[:30]))
    return diffs


def test_drift_is_found_and_timings_are_not() -> None:
    """The drift check fails on a changed number, and only outside cells tagged ``timing``."""
    import nbformat

    def nb(blob: str, ms: str) -> Any:
        v4 = nbformat.v4
        cells = [v4.new_markdown_cell("prose"),
                 v4.new_code_cell("x", outputs=[v4.new_output("execute_result", {
                     "text/markdown": f"the blob is {blob} B", "text/plain": "<Markdown>"},
                     execution_count=1)]),
                 v4.new_code_cell("y", outputs=[v4.new_output("stream", name="stdout", text=f"{ms} ms")],
                                  metadata={"tags": [TIMING]}),
                 v4.new_code_cell("z", outputs=[v4.new_output("display_data", {"image/png": ms})])]
        return v4.new_notebook(cells=cells)

    assert drift(nb("1,184", "3.2"), nb("1,184", "4.7")) == []
    found = drift(nb("1,184", "3.2"), nb("1,185", "3.2"))
    assert len(found) == 1 and "-the blob is 1,184 B" in found[0] and "+the blob is 1,185 B" in found[0]


@pytest.mark.parametrize("name", ALL)
def test_deterministic_outputs_are_the_committed_ones(name: str, executed: dict[str, Any]) -> None:
    """Re-executed now, every text output that is not a timing (cells tagged ``timing``) is
    exactly the committed one: a number the notebook states cannot drift from what it computes."""
    nb, _ = executed[name].result()
    found = drift(_committed(name), _static(nb))
    assert not found, (f"{name}: outputs differ from the committed ones (if the change is "
                       "intended, store again: bash scripts/render_notebooks.sh --store "
                       f"notebooks/{name}; if a cell shows timings, tag it {TIMING!r}):\n"
                       + "\n".join(found))


@pytest.mark.parametrize("name", ALL)
def test_notebook_executes(name: str, executed: dict[str, Any]) -> None:
    nb, seconds = executed[name].result()
    assert not error_outputs(nb), error_outputs(nb)
    print(f"{name}: {seconds:.1f} s")


def test_notebooks_write_nothing_next_to_them(workspace: pathlib.Path, executed: dict[str, Any]) -> None:
    """After every run, the copied folders hold exactly what was copied (temp files go to a
    temporary folder, not next to the notebooks or the samples)."""
    for fut in executed.values():
        fut.exception()  # wait; failures are reported by test_notebook_executes
    assert sorted(p.name for p in (workspace / "notebooks").iterdir()) == ALL
    from _jupyter import SAMPLES

    assert sorted(p.name for p in (workspace / "sample_models").iterdir()) == \
        sorted(p.name for p in SAMPLES.iterdir() if p.name != "__pycache__")
