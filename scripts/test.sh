#!/usr/bin/env bash
# Set up .venv/ (if needed), lint, and run the whole test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "[test] ruff check"
.venv/bin/ruff check .
echo "[test] pytest"
# The plot gallery in docs/gallery/ is (re)written by the test run (tests/test_plots.py).
export WORKBENCH_GALLERY=1
exec .venv/bin/python -m pytest "$@"
