"""The notebooks in a real browser: a private JupyterLab driven by Debian's chromium.

Opens the Explorer (02) and Compare (03) notebooks, waits for the real kernel, runs all
cells, fails on any error output or widget that does not render, then changes the artifact
dropdowns and checks that the layout image and the tables change. Screenshots of the widgets
go to ``build/screenshots/`` for a person to look at, with one full-page screenshot per
committed notebook as a reader on GitHub sees it (its stored outputs rendered to HTML by
nbconvert, no kernel, in a GitHub-wide page): ``build/screenshots/committed_<notebook>.png``;
those need no JupyterLab (``pytest tests/test_browser.py -k committed``).

Skipped (with the reason) when ``/usr/bin/chromium`` or Playwright is missing.
"""

from __future__ import annotations

import os
import pathlib
import re
import time
from typing import Any

import pytest
from _jupyter import (
    CHROMIUM,
    JS_ERRORS,
    JS_KERNEL_IDLE,
    SCREENSHOTS,
    Lab,
    copy_workspace,
    launch_browser,
    only_local,
    open_and_run_all,
)
from _jupyter import NOTEBOOKS as NB_DIR

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]

NOTEBOOKS = ["02_layout_explorer.ipynb", "03_inline_vs_external.ipynb"]

#: Viewport width of the committed-notebook screenshots: about the width GitHub gives a notebook.
GITHUB_WIDTH = 1024


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    pytest.importorskip("jupyterlab")
    base = tmp_path_factory.mktemp("lab")
    root = copy_workspace(base / "root", NOTEBOOKS)
    with Lab(root, base / "home") as server:
        yield server


@pytest.fixture(scope="module")
def playwright() -> Any:
    """One Playwright driver for the module: a second ``sync_playwright()`` while one is open
    refuses to start ("Sync API inside the asyncio loop")."""
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def page(lab: Lab, playwright: Any) -> Any:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser = launch_browser(playwright, lab.home)
    context = browser.new_context(viewport={"width": 1500, "height": 1800})
    only_local(context)
    pg = context.new_page()
    console: list[str] = []
    pg.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    pg.console_errors = console  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        context.close()
        browser.close()


@pytest.fixture(scope="module")
def static_page(tmp_path_factory: pytest.TempPathFactory, playwright: Any) -> Any:
    """A chromium page for static HTML (no JupyterLab), about as wide as GitHub's notebook view."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    home = tmp_path_factory.mktemp("static-browser")
    browser = launch_browser(playwright, home)
    context = browser.new_context(viewport={"width": GITHUB_WIDTH, "height": 1200})
    only_local(context)
    try:
        yield context.new_page()
    finally:
        context.close()
        browser.close()


def _settle(page: Any) -> None:
    """Let the kernel handle what the last click sent, and the page apply the updates."""
    page.wait_for_timeout(300)
    page.wait_for_function(JS_KERNEL_IDLE, timeout=60_000, polling=100)
    page.wait_for_timeout(300)


def _tab(page: Any, widget: Any, title: str) -> None:
    """Click the tab called ``title`` of ``widget`` and wait until it is drawn."""
    widget.locator(".lm-TabBar-tab", has_text=re.compile(f"^{re.escape(title)}$")).click()
    _settle(page)


def _shot(locator: Any, name: str) -> pathlib.Path:
    path = SCREENSHOTS / name
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(path))
    return path


def _wait_changed(page: Any, locator: Any, attr: str | None, before: str, what: str,
                  timeout: float = 30) -> str:
    """Wait until ``locator``'s attribute (or inner HTML) differs from ``before``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = locator.get_attribute(attr) if attr else locator.inner_html()
        if now and now != before:
            return now
        page.wait_for_timeout(200)
    raise AssertionError(f"{what} did not change within {timeout} s")


def _wait_text(page: Any, widget: Any, ok: Any, what: str, timeout: float = 30) -> str:
    """Wait until the first visible table in ``widget`` has text for which ``ok`` holds."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        tables = widget.locator(".wb-table:visible")
        text = tables.first.inner_text() if tables.count() else ""
        if ok(text):
            return text
        page.wait_for_timeout(200)
    raise AssertionError(f"{what} did not show what was expected within {timeout} s: {text[:300]!r}")


def _select_containing(select: Any, text: str) -> str:
    """Choose the first option of a ``<select>`` whose label contains ``text``."""
    labels = select.locator("option").all_text_contents()
    index = next(i for i, label in enumerate(labels) if text in label)
    select.select_option(index=index)
    return labels[index]


def _no_errors(page: Any, notebook: str) -> None:
    errors = page.evaluate(JS_ERRORS)
    assert not errors, f"{notebook}: {errors}"
    shown = page.locator(".jp-NotebookPanel:visible .wb-error")
    assert shown.count() == 0, f"{notebook}: widget shows an error: {shown.first.inner_text()}"


@pytest.mark.parametrize("name", sorted(p.name for p in NB_DIR.glob("*.ipynb")))
def test_committed_notebook_reads_without_a_kernel(name: str, static_page: Any, tmp_path: pathlib.Path
                                                   ) -> None:
    """The committed notebook, rendered from its stored outputs (no execution), shows pictures
    and tables; the screenshot is kept for a person to look at."""
    page = static_page
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(NB_DIR / name, as_version=4)
    html, _ = HTMLExporter().from_notebook_node(nb)
    page_file = tmp_path / (name + ".html")
    page_file.write_text(html)
    page.goto(page_file.as_uri())
    page.wait_for_selector(".jp-Notebook", timeout=30_000)
    assert page.locator(".jp-OutputArea-output img").count() >= 1, f"{name}: no picture shown"
    assert page.locator(".jp-OutputArea-output table").count() >= 1, f"{name}: no table shown"
    assert "Takeaways" in page.inner_text("body")
    page.screenshot(path=str(SCREENSHOTS / f"committed_{name.removesuffix('.ipynb')}.png"), full_page=True)


def test_explorer_notebook(lab: Lab, page: Any) -> None:
    nb = NOTEBOOKS[0]
    t0 = time.perf_counter()
    seconds = open_and_run_all(page, lab, nb)
    print(f"\n{nb}: opened in {time.perf_counter() - t0 - seconds:.1f} s, ran all in {seconds:.1f} s")
    _no_errors(page, nb)

    ex = page.locator(".jp-NotebookPanel:visible .wb-explorer").first
    ex.wait_for(state="visible")
    image = ex.locator(".widget-image:visible").first  # the Layout tab is selected in the notebook
    image.wait_for(state="visible", timeout=30_000)
    assert image.get_attribute("src"), "the layout image is empty"
    _shot(ex, "explorer_layout_mlp_xnnpack.png")
    src_before = image.get_attribute("src")
    box_before = image.screenshot()
    table = ex.locator(".wb-table:visible").first
    table_before = table.inner_html()

    label = _select_containing(ex.locator(".widget-dropdown select").first, "kv_cache.pte")
    _wait_changed(page, image, "src", src_before, "the layout image")
    _wait_changed(page, table, None, table_before, "the segment table")
    assert image.screenshot() != box_before, "the layout image looks the same"
    assert "mutable_data" in ex.inner_text(), f"{label}: the kv_cache layout should show mutable_data"
    _shot(ex, "explorer_layout_kv_cache.png")

    # the Tensors tab: drawn when first shown, paged, with the new artifact's tensors
    _tab(page, ex, "Tensors")
    tensors = ex.locator(".wb-table:visible").first
    tensors.wait_for(state="visible")
    text = tensors.inner_text()
    assert "k_cache" in text and "mutable" in text, text[:500]
    _shot(ex, "explorer_tensors_kv_cache.png")

    # filter by name: the table narrows
    ex.locator("input[placeholder='name contains…']:visible").first.fill("cache")
    page.keyboard.press("Enter")
    _settle(page)
    _wait_text(page, ex, lambda t: "forward/8" not in t and "k_cache" in t, "the filtered table")

    # the Tensor tab: one tensor's histogram
    _tab(page, ex, "Tensor")
    hist = ex.locator(".widget-image:visible").first
    hist.wait_for(state="visible", timeout=30_000)
    _shot(ex, "explorer_tensor_kv_cache.png")

    # the Memory plan tab
    _tab(page, ex, "Memory plan")
    ex.locator(".widget-image:visible").first.wait_for(state="visible", timeout=30_000)
    _shot(ex, "explorer_memory_plan_kv_cache.png")

    # Summary (facts and treemap) and Methods
    _tab(page, ex, "Summary")
    ex.locator(".widget-image:visible").first.wait_for(state="visible", timeout=30_000)
    _shot(ex, "explorer_summary_kv_cache.png")
    _tab(page, ex, "Methods")
    _wait_text(page, ex, lambda t: "forward" in t, "the methods table")
    assert "aten::index_put" in ex.inner_text()
    _shot(ex, "explorer_methods_kv_cache.png")
    _no_errors(page, nb)
    print(f"{nb}: checks done {time.perf_counter() - t0:.1f} s after opening")
    assert not [e for e in page.console_errors if "widget" in e.lower()], page.console_errors


def test_compare_notebook(lab: Lab, page: Any) -> None:
    nb = NOTEBOOKS[1]
    t0 = time.perf_counter()
    seconds = open_and_run_all(page, lab, nb)
    print(f"\n{nb}: opened in {time.perf_counter() - t0 - seconds:.1f} s, ran all in {seconds:.1f} s")
    _no_errors(page, nb)

    view = page.locator(".jp-NotebookPanel:visible .wb-compare").first
    view.wait_for(state="visible")
    summary = view.locator(".wb-table:visible").first
    summary.wait_for(state="visible")
    assert "weights" in summary.inner_text()
    _shot(view, "compare_summary_mlp_external.png")

    _tab(page, view, "Tensors")
    moved = view.locator(".wb-table:visible").first
    moved.wait_for(state="visible")
    assert "segment → external" in moved.inner_text()
    _shot(view, "compare_tensors_mlp_external.png")

    _tab(page, view, "Layouts")
    image = view.locator(".widget-image:visible").first
    image.wait_for(state="visible", timeout=30_000)
    src_before = image.get_attribute("src")
    _shot(view, "compare_layouts_mlp_external.png")

    # side b -> the XNNPACK-lowered MLP: the chart and the tables follow
    _select_containing(view.locator(".widget-dropdown select").nth(1), "mlp_xnnpack.pte")
    _wait_changed(page, image, "src", src_before, "the side-by-side layout")
    _shot(view, "compare_layouts_mlp_xnnpack.png")
    _tab(page, view, "Tensors")
    _wait_text(page, view, lambda t: "segment → named_data" in t, "the moved-tensors table")
    _shot(view, "compare_tensors_mlp_xnnpack.png")
    _no_errors(page, nb)
    print(f"{nb}: checks done {time.perf_counter() - t0:.1f} s after opening")
