#!/usr/bin/env bash
# Create .venv/ in the repo root and install workbench with everything the tests and the
# sample-model exporter need. Idempotent: re-running is a no-op until pyproject.toml or this
# script changes.
#
#   torch==2.13.0      the CPU build (an unpinned torch pulls a multi-GB CUDA build)
#   executorch==1.5.1  the exporter and the oracle; its native module links against that torch
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv with $($PY --version)"
    "$PY" -m venv .venv
fi

stamp=.venv/.workbench-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

pip() { .venv/bin/python -m pip --disable-pip-version-check "$@"; }
echo "[setup] installing torch==2.13.0 (CPU)"
pip install -q torch==2.13.0 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
printf 'torch==2.13.0\n' > .venv/constraints.txt
# The distribution was called `workbench` before it became `pte-workbench`: drop that old
# editable install of this repo so that one distribution owns the package.
pip uninstall -y -q workbench >/dev/null 2>&1 || true
echo "[setup] installing executorch==1.5.1 and pte-workbench[dev,oracle,notebook,scan,remote,graph] (editable)"
pip install -q -c .venv/constraints.txt executorch==1.5.1 -e ".[dev,oracle,notebook,scan,remote,graph]" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
.venv/bin/python -c "import torch, executorch, workbench; print('[setup] ok: torch', torch.__version__)"
echo "$want" > "$stamp"
