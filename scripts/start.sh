#!/usr/bin/env bash
# Main job: set up .venv/ (if needed) and open the workbench.
#
#   bash scripts/start.sh           JupyterLab on notebooks/ — prints the URL; Ctrl-C stops it
#   bash scripts/start.sh --cli     non-interactive: the CLI summary of sample_models/
#   bash scripts/start.sh --html    non-interactive: execute the notebooks, HTML in build/notebooks/
#
# Environment: PORT (default: 8888, or the next free port), IP (default 127.0.0.1),
# JUPYTER_TOKEN (default: a random token).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

case "${1:-}" in
    --cli)  shift; exec .venv/bin/workbench inspect sample_models/ "$@" ;;
    --html) shift; exec bash scripts/render_notebooks.sh "$@" ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    "") ;;
    *) echo "usage: bash scripts/start.sh [--cli [inspect args] | --html | --help]" >&2; exit 2 ;;
esac

IP=${IP:-127.0.0.1}
PORT=${PORT:-$(.venv/bin/python - <<'PY'
import socket
for port in range(8888, 8988):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(port)
        break
PY
)}
TOKEN=${JUPYTER_TOKEN:-$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(16))')}
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)
echo "[start] JupyterLab on notebooks/ — open this URL in a browser:"
echo
echo "    http://$IP:$PORT/lab/tree/01_tour.ipynb?token=$TOKEN"
echo
echo "[start] (Ctrl-C to stop; 'bash scripts/start.sh --cli' for the command-line summary)"
exec .venv/bin/jupyter lab --no-browser --ip="$IP" --port="$PORT" --port-retries=0 \
    --ServerApp.root_dir=notebooks --IdentityProvider.token="$TOKEN" "${extra[@]}"
