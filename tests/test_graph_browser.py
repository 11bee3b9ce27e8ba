"""Model Explorer in a real browser: its server with our extension on an XNNPACK sample,
driven in Debian's chromium by Playwright. The page loads the graph through our adapter,
"Expand all layers" opens the XNNPACK delegate's group, our time overlay runs from the
"Add per-node data" menu, and the result is checked on the page and in the screenshots
(``build/screenshots/graph_*.png``, for a person to look at).

Skipped (with the reason) when chromium, Playwright or Model Explorer is missing.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
import urllib.parse
import urllib.request

import pytest
from _jupyter import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, only_local

import workbench as wb

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = ROOT / "sample_models" / "mlp_xnnpack.pte"
TRACE = ROOT / "sample_models" / "mlp_xnnpack.etdp"


def _changed_pixels(a: bytes, b: bytes) -> int:
    """Pixels that differ between two PNG screenshots of the same size."""
    import io

    import numpy as np
    from PIL import Image

    x = np.asarray(Image.open(io.BytesIO(a)).convert("RGB"), dtype=np.int16)
    y = np.asarray(Image.open(io.BytesIO(b)).convert("RGB"), dtype=np.int16)
    return int((np.abs(x - y).sum(axis=2) > 30).sum())


def test_expand_xnnpack_layer_and_time_overlay(model_explorer_server, tmp_path):
    sync = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    pytest.importorskip("PIL")
    from workbench.graphs._delegation import node_times

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    mean = node_times(wb.open(MODEL), TRACE)
    value = mean.loc[mean["instruction"] == 0, "mean"].iloc[0]
    data = {"models": [{"url": str(MODEL), "adapterId": "workbench_adapter"}]}
    url = model_explorer_server + "/?data=" + urllib.parse.quote(json.dumps(data))
    env = {**os.environ, "HOME": str(tmp_path)}
    with sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
                                    env=env)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            only_local(context)
            page = context.new_page()
            page.goto(url)
            # the graph came through our adapter: the model's name and its node count
            page.get_by_text(MODEL.name).first.wait_for(timeout=90_000)
            page.get_by_text("11 nodes").first.wait_for(timeout=60_000)
            time.sleep(2)
            collapsed = page.screenshot(path=str(SCREENSHOTS / "graph_collapsed.png"))
            page.locator("mat-icon", has_text="unfold_more_double").first.click()
            time.sleep(3)
            expanded = page.screenshot(path=str(SCREENSHOTS / "graph_expanded.png"))
            # the XNNPACK group opened: its four inner nodes and three edges appear
            assert _changed_pixels(collapsed, expanded) > 5_000
            page.get_by_text("Add per-node data").click()
            page.locator(".cdk-overlay-container").get_by_text(
                "Time per node (ETDump)").first.click()
            page.get_by_role("button", name="Run").click()
            # the side panel lists the run and its statistics once the provider answered
            page.get_by_text("Aggregated stats").first.wait_for(timeout=90_000)
            expected = f"{value:.0f}"
            deadline = time.monotonic() + 60
            text = page.locator("body").inner_text()
            while expected not in text.replace(",", "") and time.monotonic() < deadline:
                time.sleep(1)
                text = page.locator("body").inner_text()
            page.screenshot(path=str(SCREENSHOTS / "graph_time_overlay.png"))
        finally:
            browser.close()
    assert "workbench_time" in text
    # the call node's row in the panel shows the mean time per run our reader computed
    assert "delegate 0 (XnnpackBackend)" in text
    assert f"{value:.0f}" in text.replace(",", "")
