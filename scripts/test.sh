#!/usr/bin/env bash
# Set up .venv/ (if needed), lint, and run the whole test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "[test] ruff check"
.venv/bin/ruff check .
echo "[test] pytest"
# The test run writes nothing in the repository: the plot gallery in docs/gallery/ is rewritten
# only when asked (.venv/bin/python scripts/make_gallery.py, or WORKBENCH_GALLERY=1 here).
exec .venv/bin/python -m pytest "$@"
