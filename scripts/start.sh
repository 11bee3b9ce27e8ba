#!/usr/bin/env bash
# Main job: set up .venv/ (if needed) and open the workbench on the sample models.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/workbench inspect sample_models/ "$@"
