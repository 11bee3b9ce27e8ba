#!/usr/bin/env bash
# Execute the notebooks in notebooks/.
#
#   bash scripts/render_notebooks.sh --store            # execute IN PLACE and keep the outputs (and
#                                                       # the widget state): what is committed, so the
#                                                       # notebooks read on GitHub without a kernel
#   bash scripts/render_notebooks.sh                    # execute copies into build/notebooks/*.html
#   bash scripts/render_notebooks.sh notebooks/01_tour.ipynb   # (either mode) only these
#
# tests/test_notebooks.py checks that the stored outputs are current (same cells, same kinds of
# output per cell); after editing a notebook, run this with --store and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/jupyter ] || bash scripts/setup.sh

store=0
if [ "${1:-}" = "--store" ]; then store=1; shift; fi
if [ "$#" -gt 0 ]; then notebooks=("$@"); else notebooks=(notebooks/*.ipynb); fi
# Keep Jupyter's and IPython's state out of the repository and the user's home.
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export JUPYTER_RUNTIME_DIR="$state/runtime" IPYTHONDIR="$state/ipython" PYTHONDONTWRITEBYTECODE=1
export MPLCONFIGDIR="$state/matplotlib"
unset MPLBACKEND   # inline plots must not vanish
out=build/notebooks
mkdir -p "$out"
for nb in "${notebooks[@]}"; do
    if [ "$store" = 1 ]; then
        echo "[store] $nb"
        .venv/bin/jupyter nbconvert --to notebook --execute --inplace --log-level=WARN \
            --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.store_widget_state=True "$nb"
        .venv/bin/python - "$nb" <<'PY'
import sys, nbformat
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
# Smaller widget state: drop attributes left at None (the widget manager fills in defaults).
state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
for model in state.values():
    model["state"] = {k: v for k, v in model.get("state", {}).items() if v is not None}
nbformat.write(nb, path)
PY
    else
        echo "[render] $nb"
        .venv/bin/jupyter nbconvert --to html --execute --log-level=WARN \
            --ExecutePreprocessor.timeout=600 --output-dir "$out" "$nb"
    fi
done
if [ "$store" = 0 ]; then echo "[render] HTML in $out/:"; ls -1 "$out"; fi
