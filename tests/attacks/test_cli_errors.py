"""The CLI on a bad file: one line on stderr and exit code 1, never a traceback; a bug in our
own code (any other exception) prints the traceback and exits with 70."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import EXIT_BUG

from . import json_attacks
from ._common import SAMPLES

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.mark.parametrize("frame", [None, "graph", "models"])
def test_bad_file_is_one_line_and_exit_1(tmp_path, frame):
    case = next(c for c in json_attacks.CASES if c.id == "json_depth_model_json")
    path = case.build(tmp_path)
    extra = ["--frame", frame] if frame else []
    r = _run("-m", "workbench", "inspect", str(path), *extra)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "JSON_MAX_DEPTH=256" in lines[0] and "models/model.json" in lines[0]


def test_bug_in_our_code_gives_a_traceback_and_exit_70():
    code = ("import sys, workbench.formats.pte as pte\n"
            "def read(src, **kw):\n    raise RuntimeError('a seeded bug')\n"
            "pte.read = read\n"
            "from workbench.cli import main\n"
            f"sys.exit(main(['inspect', {str(SAMPLES / 'mlp_portable.pte')!r}]))\n")
    r = _run("-c", code)
    assert r.returncode == EXIT_BUG == 70, r.stderr
    assert "Traceback" in r.stderr and "RuntimeError: a seeded bug" in r.stderr
    assert "bug in workbench" in r.stderr
