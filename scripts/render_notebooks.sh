#!/usr/bin/env bash
# Execute every notebook in notebooks/ and render it to HTML in build/notebooks/.
# The notebooks themselves are not modified (they are stored without outputs).
#
#   bash scripts/render_notebooks.sh                      # all notebooks
#   bash scripts/render_notebooks.sh notebooks/01_tour.ipynb
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/jupyter ] || bash scripts/setup.sh

out=build/notebooks
mkdir -p "$out"
if [ "$#" -gt 0 ]; then notebooks=("$@"); else notebooks=(notebooks/*.ipynb); fi
# Keep Jupyter's and IPython's state out of the repository and the user's home.
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export JUPYTER_RUNTIME_DIR="$state/runtime" IPYTHONDIR="$state/ipython" PYTHONDONTWRITEBYTECODE=1
unset MPLBACKEND   # inline plots must not vanish
for nb in "${notebooks[@]}"; do
    echo "[render] $nb"
    .venv/bin/jupyter nbconvert --to html --execute --log-level=WARN \
        --ExecutePreprocessor.timeout=600 --output-dir "$out" "$nb"
done
echo "[render] HTML in $out/:"
ls -1 "$out"
