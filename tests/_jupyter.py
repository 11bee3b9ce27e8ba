"""Helpers for the notebook and browser tests: execute a notebook headless with nbclient, run
a private JupyterLab server, and drive it with Debian's chromium through Playwright.

Nothing here writes the repository: notebooks run from copies in a temporary folder, and
every Jupyter/IPython/matplotlib directory points into it.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SAMPLES = ROOT / "sample_models"
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM = "/usr/bin/chromium"

#: chromium flags known to work on these machines (see the project's notes).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]

#: JupyterLab user settings that avoid flakes: no news pop-up, no autosave, every cell in the DOM.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def private_env(home: pathlib.Path) -> dict[str, str]:
    """Environment with every Jupyter, IPython, matplotlib and browser directory under ``home``."""
    dirs = {"JUPYTER_CONFIG_DIR": "jupyter_config", "JUPYTER_DATA_DIR": "jupyter_data",
            "JUPYTER_RUNTIME_DIR": "jupyter_runtime", "IPYTHONDIR": "ipython",
            "MPLCONFIGDIR": "matplotlib", "HOME": "home", "XDG_CONFIG_HOME": "xdg_config",
            "XDG_CACHE_HOME": "xdg_cache"}
    env = dict(os.environ)
    for var, sub in dirs.items():
        path = home / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # kernels import this checkout's workbench, not another one installed in the environment
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.pop("MPLBACKEND", None)  # inline plots must not vanish
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    return env


def copy_workspace(dest: pathlib.Path, notebooks: list[str] | None = None) -> pathlib.Path:
    """Copy ``notebooks/`` (or the named notebooks) and ``sample_models/`` under ``dest``."""
    (dest / "notebooks").mkdir(parents=True, exist_ok=True)
    for nb in notebooks or [p.name for p in sorted(NOTEBOOKS.glob("*.ipynb"))]:
        shutil.copy2(NOTEBOOKS / nb, dest / "notebooks" / nb)
    shutil.copytree(SAMPLES, dest / "sample_models", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dest


# -- headless execution -------------------------------------------------------------------------

def execute_notebook(path: pathlib.Path, home: pathlib.Path, *, extra_cells: Sequence[str] = (),
                     timeout: int = 240) -> tuple[Any, float]:
    """Execute the notebook at ``path`` (plus ``extra_cells`` appended) in its own folder, with
    a kernel whose Jupyter/IPython/matplotlib directories are under ``home``.

    Returns ``(notebook, seconds)``; raises ``nbclient.exceptions.CellExecutionError`` with
    the failing cell's source and traceback.
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    for src in extra_cells:
        nb.cells.append(nbformat.v4.new_code_cell(src))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute(env=private_env(home))
    return nb, time.perf_counter() - t0


def error_outputs(nb: Any) -> list[str]:
    """``ename: evalue`` of every error output of an executed notebook."""
    return [f"{o.get('ename')}: {o.get('evalue')}" for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


# -- a private JupyterLab ---------------------------------------------------------------------

def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Lab:
    """A JupyterLab server on 127.0.0.1 with a random token, serving ``root``.

    Use as a context manager; teardown asks the server to shut down (``POST /api/shutdown``)
    and then ends only the process group it started.
    """

    def __init__(self, root: pathlib.Path, home: pathlib.Path) -> None:
        self.root = root
        self.home = home
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home / "jupyterlab.log"

    def __enter__(self) -> Lab:
        t0 = time.perf_counter()
        self.start()
        print(f"\nJupyterLab answered after {time.perf_counter() - t0:.1f} s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_settings(self, env: dict[str, str]) -> None:
        settings = pathlib.Path(env["JUPYTER_CONFIG_DIR"]) / "lab" / "user-settings"
        for rel, value in LAB_SETTINGS.items():
            path = settings / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))

    def start(self, timeout: float = 90) -> None:
        env = private_env(self.home)
        self._write_settings(env)
        env["JUPYTERLAB_SETTINGS_DIR"] = str(pathlib.Path(env["JUPYTER_CONFIG_DIR"], "lab", "user-settings"))
        env["JUPYTERLAB_WORKSPACES_DIR"] = str(self.home / "workspaces")
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
               "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
               f"--ServerApp.root_dir={self.root}", f"--IdentityProvider.token={self.token}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
               "--ServerApp.open_browser=False"]
        log = self._log = open(self.log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log()}")
            try:
                self.api("GET", "/api/status")
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
        raise TimeoutError(f"JupyterLab did not answer within {timeout} s:\n{self.log()}")

    def api(self, method: str, path: str, timeout: float = 5) -> Any:
        """Call the server's REST API with the token."""
        req = urllib.request.Request(self.base + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body else None

    def url(self, notebook: str) -> str:
        return f"{self.base}/lab/tree/notebooks/{notebook}?token={self.token}&reset"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            self.api("POST", "/api/shutdown")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):  # only the group we started
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        if proc.poll() is None:
            proc.wait(timeout=10)
        self._log.close()
        self.proc = None


# -- driving Lab in the browser ---------------------------------------------------------------

#: JavaScript: the current notebook panel's kernel is connected and idle.
JS_KERNEL_READY = """() => {
  const app = window.jupyterapp; if (!app) return false;
  const w = app.shell.currentWidget;
  if (!w || !w.sessionContext || !w.sessionContext.isReady) return false;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
}"""

#: JavaScript: the current notebook's kernel is idle.
JS_KERNEL_IDLE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return w.sessionContext.session.kernel.status === 'idle';
}"""

#: JavaScript: every code cell of the current notebook has an execution count.
JS_ALL_EXECUTED = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session.kernel;
  const cells = Array.from(w.content.model.cells).filter(c => c.type === 'code');
  const prompts = Array.from(w.content.node.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt'));
  const numbered = prompts.length === cells.length && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
  return numbered && cells.every(c => c.executionCount !== null) && k.status === 'idle';
}"""

#: JavaScript: no code cell of the current notebook has an execution count (outputs cleared).
JS_NONE_EXECUTED = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return Array.from(w.content.model.cells).filter(c => c.type === 'code')
    .every(c => c.executionCount === null && c.outputs.length === 0);
}"""

#: JavaScript: error outputs of the current notebook, as "cell i: ename: evalue".
JS_ERRORS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const out = [];
  Array.from(w.content.model.cells).forEach((c, i) => {
    if (c.type !== 'code') return;
    for (const o of c.outputs.toJSON()) {
      if (o.output_type === 'error') out.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
    }
  });
  for (const n of w.content.node.querySelectorAll('.jp-OutputArea-output')) {
    const t = n.textContent || '';
    if (t.includes('Error displaying widget') || t.includes('Failed to load model class')) {
      out.push('widget failed to render: ' + t.slice(0, 200));
    }
  }
  return out;
}"""


def launch_browser(playwright: Any, home: pathlib.Path) -> Any:
    """Debian's chromium with the known-good flags, its profile under ``home``."""
    env = {**os.environ, "HOME": str(home / "home"), "XDG_CONFIG_HOME": str(home / "xdg_config"),
           "XDG_CACHE_HOME": str(home / "xdg_cache")}
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
                                      env=env)


def only_local(context: Any) -> None:
    """Abort every request that does not go to 127.0.0.1."""

    def route(r: Any) -> None:
        url = r.request.url
        if url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "file:")):
            r.continue_()
        else:
            r.abort()

    context.route("**/*", route)


def open_and_run_all(page: Any, lab: Lab, notebook: str, timeout_ms: int = 150_000) -> float:
    """Open ``notebook`` in Lab, wait for its real kernel, run all cells, wait for every
    prompt to show a number; returns the seconds the run took."""
    page.goto(lab.url(notebook))
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=60_000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_function(JS_KERNEL_READY, timeout=60_000, polling=250)
    # The notebooks are stored executed: clear the stored outputs (and prompt numbers) first,
    # or "every prompt shows a number" would hold before anything ran.
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    page.wait_for_function(JS_NONE_EXECUTED, timeout=30_000, polling=250)
    t0 = time.perf_counter()
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(JS_ALL_EXECUTED, timeout=timeout_ms, polling=500)
    return time.perf_counter() - t0
