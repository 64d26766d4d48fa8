#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
export HF_HUB_OFFLINE=1
.venv/bin/ruff check .
# Two workers (pytest-xdist): the timing-sensitive tests run one at a time on one of them, the rest on the
# other meanwhile at a lower CPU priority; each module stays on one worker (tests/conftest.py says which).
exec .venv/bin/python -m pytest -q -ra --durations=25 -n 2 --dist loadscope --no-loadscope-reorder "$@"
