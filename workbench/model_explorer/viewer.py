"""Model Explorer's local server from Python, with our extension, for a notebook's iframe.

Model Explorer embeds itself inline only in Colab; elsewhere it serves on a local port. This
starts that server in a child process (``model-explorer --extensions=workbench.model_explorer``)
on a free port and gives the URL that opens a model through our adapter.

Example:
    >>> from workbench.model_explorer.viewer import serve          # doctest: +SKIP
    >>> v = serve("sample_models/mlp_xnnpack.pte")                 # doctest: +SKIP
    >>> v                       # in a notebook: the viewer in an iframe  # doctest: +SKIP
    >>> v.close()                                                  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

__all__ = ["Viewer", "serve"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


class Viewer:
    """A running Model Explorer server showing one model; ``close()`` stops it.

    Example:
        >>> v = serve("sample_models/mlp_xnnpack.pte"); v.url       # doctest: +SKIP
    """

    def __init__(self, proc: subprocess.Popen, base: str, url: str) -> None:
        self.proc, self.base, self.url = proc, base, url

    def close(self) -> None:
        """Stop the server."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def _repr_html_(self) -> str:
        return (f'<iframe src="{self.url}" width="100%" height="640" '
                f'style="border:1px solid #ccc"></iframe>')

    def __repr__(self) -> str:
        return f"Viewer({self.url!r})"


def serve(model: str | os.PathLike[str], *, port: int | None = None,
          timeout: float = 120.0) -> Viewer:
    """Start Model Explorer with the workbench extension and return the :class:`Viewer` of
    ``model`` (``ai-edge-model-explorer`` must be installed: the ``graph`` extra).

    Example:
        >>> serve("sample_models/mlp_xnnpack_qc8.pte").url             # doctest: +SKIP
    """
    exe = pathlib.Path(sys.executable).with_name("model-explorer")
    if not exe.exists():
        raise FileNotFoundError("model-explorer is not installed (pip install "
                                "'pte-workbench[graph]')")
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen([str(exe), "--extensions=workbench.model_explorer",
                             "--no_open_in_browser", f"--port={port}", "--host=127.0.0.1",
                             "--skip_health_check"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(base + "/check_health", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.terminate()
                raise RuntimeError(f"model-explorer did not start on port {port}") from None
            time.sleep(0.5)
    data = {"models": [{"url": str(pathlib.Path(model).resolve()),
                        "adapterId": "workbench_adapter"}]}
    return Viewer(proc, base, base + "/?data=" + urllib.parse.quote(json.dumps(data)))
