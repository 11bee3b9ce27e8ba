"""Make executed notebooks ready to commit: what a reader without a kernel sees.

    .venv/bin/python scripts/store_notebook.py notebooks/01_tour.ipynb [more.ipynb ...]

``scripts/render_notebooks.sh --store`` runs this after executing a notebook in place. It

* drops the widget state (``metadata.widgets``): stored state renders only in a trusted
  notebook with the widget manager at hand, shows broken images elsewhere, and records the
  paths the widgets were opened on (temporary folders included);
* keeps of each widget output only its text/plain form: the widget's own words (which widget,
  which files, that it needs a running kernel). Every widget cell has a static twin under it,
  a picture and a table, which is what GitHub and nbconvert show;
* removes progress bars (tqdm in Jupyter is a widget whose stored form is the bar at 0%);
* refuses (exit status 1, the offending strings printed) a notebook that names a temporary
  folder, the home folder or this checkout's absolute path anywhere in the file.

``tests/test_notebooks.py`` applies :func:`static_outputs` to the notebooks it executes before
comparing them with the committed ones, and checks the committed files with
:func:`machine_paths` and :func:`progress_bars`.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]

WIDGET = "application/vnd.jupyter.widget-view+json"

#: A tqdm bar's text form: ``desc:  40%|████      | 2/5 [00:01<00:01, 2.0it/s]``.
PROGRESS = re.compile(r"\d{1,3}%\|")


def is_progress_bar(output: dict[str, Any]) -> bool:
    """Whether an output is a progress bar (a widget whose text is a tqdm bar)."""
    data = output.get("data", {})
    return WIDGET in data and bool(PROGRESS.search(str(data.get("text/plain", ""))))


def static_outputs(nb: Any) -> Any:
    """``nb`` (an nbformat notebook or its JSON dict) as it is committed: no widget state, no
    progress bars, widgets as their text/plain form. Changes ``nb`` in place and returns it."""
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            if is_progress_bar(out):
                continue
            data = out.get("data")
            if data and WIDGET in data:
                out["data"] = {k: v for k, v in data.items() if k != WIDGET}
            kept.append(out)
        cell["outputs"] = kept
    return nb


def forbidden_paths() -> list[str]:
    """Absolute paths that must not appear in a committed notebook: temporary folders, the
    home folder, and this checkout."""
    tmp = {"/tmp/", "/var/tmp/", "/var/folders/", "/private/var/", "/dev/shm/",
           os.path.join(tempfile.gettempdir(), ""), "\\AppData\\Local\\Temp", "\\\\AppData\\\\Local\\\\Temp"}
    home = pathlib.Path.home()
    mine = {os.path.join(str(p), "") for p in (home, home.resolve(), ROOT, ROOT.resolve())
            if str(p) not in ("/", "")}
    return sorted(tmp | mine)


def machine_paths(text: str) -> list[str]:
    """The forbidden paths (see :func:`forbidden_paths`) that occur in ``text``, each with a
    little context."""
    found = []
    for p in forbidden_paths():
        for m in re.finditer(re.escape(p), text):
            found.append(text[max(0, m.start() - 30): m.end() + 40])
    return found


def progress_bars(nb: Any) -> list[str]:
    """Text of every progress bar left in a notebook's outputs (stored or as text)."""
    bars = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] if out.get("output_type") == "stream" else \
                [v for k, v in out.get("data", {}).items() if k.startswith("text/")]
            texts = [t if isinstance(t, str) else "".join(t) for t in texts]
            bars += [t for t in texts if PROGRESS.search(t)]
    return bars


def store(path: str | os.PathLike[str]) -> list[str]:
    """Rewrite the notebook at ``path`` with :func:`static_outputs`; returns the machine paths
    still in it (an empty list when it is fit to commit)."""
    import nbformat

    nbformat.write(static_outputs(nbformat.read(path, as_version=4)), path)
    return machine_paths(pathlib.Path(path).read_text())


def main(argv: list[str]) -> int:
    bad = 0
    for path in argv:
        found = store(path)
        if found:
            bad += 1
            print(f"{path}: names machine or temporary paths (fix the notebook, then store it again):",
                  *[f"  …{json.dumps(f)[1:-1]}…" for f in found], sep="\n", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
