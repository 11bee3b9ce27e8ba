#!/usr/bin/env bash
# Execute the notebooks in notebooks/.
#
#   bash scripts/render_notebooks.sh --store            # execute IN PLACE and keep the outputs: what
#                                                       # is committed, so the notebooks read on GitHub
#                                                       # without a kernel (scripts/store_notebook.py
#                                                       # then drops widget state and progress bars and
#                                                       # refuses temporary or machine paths)
#   bash scripts/render_notebooks.sh                    # execute copies into build/notebooks/*.html
#   bash scripts/render_notebooks.sh notebooks/01_tour.ipynb   # (either mode) only these
#
# tests/test_notebooks.py checks that the stored outputs are current (same cells, same kinds of
# output per cell, the same text wherever it is not a timing); after editing a notebook, run this
# with --store and commit the result. Run one notebook at a time on a shared machine.
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
# The kernels import this checkout's workbench (not another one installed in the venv).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out=build/notebooks
mkdir -p "$out"
for nb in "${notebooks[@]}"; do
    if [ "$store" = 1 ]; then
        echo "[store] $nb"
        # store_widget_state stays on while executing (nbclient fails on Output widgets without
        # it); store_notebook.py then drops the state, which is not committed
        .venv/bin/jupyter nbconvert --to notebook --execute --inplace --log-level=WARN \
            --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.store_widget_state=True "$nb"
        .venv/bin/python scripts/store_notebook.py "$nb"
    else
        echo "[render] $nb"
        .venv/bin/jupyter nbconvert --to html --execute --log-level=WARN \
            --ExecutePreprocessor.timeout=600 --output-dir "$out" "$nb"
    fi
done
if [ "$store" = 0 ]; then echo "[render] HTML in $out/:"; ls -1 "$out"; fi
