#!/usr/bin/env bash
# Set everything up and run the test suite (real tmux, real cao-server processes,
# the mock agent). Extra arguments go to pytest, e.g. `scripts/test.sh -k inbox`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
