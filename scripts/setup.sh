#!/usr/bin/env bash
# Set up a development environment in .venv: Python >= 3.11, tmux, and the pinned
# dependencies (pyproject.toml). Safe to run again; it only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v tmux >/dev/null 2>&1; then
  echo "cao needs tmux. Install it first:" >&2
  echo "  Debian/Ubuntu: sudo apt-get install tmux    Fedora: sudo dnf install tmux    macOS: brew install tmux" >&2
  exit 1
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      PY=$candidate
      break
    fi
  done
fi
if [ -z "$PY" ]; then
  echo "cao needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)." >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.cao-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ testkit/pyproject.toml -nt "$stamp" ] ||
   [ constraints.txt -nt "$stamp" ]; then
  # constraints.txt pins every transitive package to the versions the suite was tested with.
  # testkit/ holds the test doubles (the mock agent and its mock_cli provider, the scripted
  # model server); one pip run, so its dependency on cao is met by this checkout, not an index.
  .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[test]' -e ./testkit
  touch "$stamp"
fi
# cao's own modules are installed editable (their .py files in src/): compile them once here, so
# that each of the many cao-server, cao and mock-agent processes a run starts does not compile
# them again where PYTHONDONTWRITEBYTECODE keeps Python from writing its cache (about 0.3 s a
# start). Up-to-date files are skipped; Python checks each file's timestamp before using it.
.venv/bin/python -m compileall -q -j 0 src testkit/src >/dev/null
