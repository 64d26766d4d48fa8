#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
export HF_HUB_OFFLINE=1
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -ra --durations=25 "$@"
