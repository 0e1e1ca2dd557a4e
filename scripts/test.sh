#!/usr/bin/env bash
# Set everything up and run the test suite (real tmux, real cao-server processes, the mock
# agent) in parallel: pytest-xdist workers, each test's servers on their own port, home and
# tmux socket (tests/cao_support.py). Extra arguments go to pytest, e.g.
#   scripts/test.sh -k inbox        scripts/test.sh --last-failed --junitxml=out.xml
#   scripts/test.sh --fast          the core in under a minute: no real CLIs, browser, ssh
#                                   hosts, PostgreSQL, nor the files marked slow (conftest.py)
# CAO_TEST_WORKERS sets the number of workers (0: no xdist, one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

args=()
for arg in "$@"; do
  if [ "$arg" = "--fast" ]; then
    args+=(-m "not real_cli and not browser and not hosts and not postgres and not slow")
  else
    args+=("$arg")
  fi
done
# The tests mostly wait on subprocesses (servers, tmux, agents), so more workers than cores
# pays off; --dist loadfile keeps a module's tests (and its module-scoped server) on one worker.
workers=${CAO_TEST_WORKERS:-3}
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadfile)
fi
exec .venv/bin/python -m pytest -q "${parallel[@]}" "${args[@]}"
