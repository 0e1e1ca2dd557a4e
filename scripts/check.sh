#!/usr/bin/env bash
# Static checks, run by CI before the tests: ruff (lint and format) and mypy, versions pinned
# in pyproject.toml's test extra. Run `scripts/check.sh --fix` to apply ruff's fixes and format.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
paths=(src tests bench scripts testkit)
if [ "${1:-}" = "--fix" ]; then
  .venv/bin/ruff check --fix "${paths[@]}"
  .venv/bin/ruff format "${paths[@]}"
else
  .venv/bin/ruff check "${paths[@]}"
  .venv/bin/ruff format --check "${paths[@]}"
fi
.venv/bin/mypy
