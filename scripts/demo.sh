#!/usr/bin/env bash
# Set everything up and run the main job: seed 000's "Combining Patterns" recipe
# with mock agents, on a private cao-server (own home, port and tmux socket).
#
#   bash scripts/demo.sh            # run it, print progress and the tmux command to watch it
#   bash scripts/demo.sh --watch    # the same, attached to the supervisor's tmux session
#   bash scripts/demo.sh --keep     # leave the server and agents running afterwards
# Run from a terminal, it keeps the agents in tmux after the run until you press Enter, so the
# printed `tmux attach` command still works; from a script it stops them at once (or --keep).
# Environment: CAO_DEMO_DELAY_MS (agents' thinking time, default 400), CAO_API_PORT (9890),
# CAO_DEMO_DIR (where the demo keeps its home and logs, default .demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

watch=0 keep=0
for arg in "$@"; do
  case "$arg" in
    --watch) watch=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: scripts/demo.sh [--watch] [--keep]" >&2; exit 2 ;;
  esac
done

demo_dir=${CAO_DEMO_DIR:-$PWD/.demo}
export CAO_HOME_DIR=$demo_dir/home
export CAO_API_PORT=${CAO_API_PORT:-9890}
export CAO_API_HOST=127.0.0.1
unset TMUX
mkdir -p "$demo_dir"
mkdir -p -m 700 "$CAO_HOME_DIR"  # cao refuses a home others can open
chmod 700 "$CAO_HOME_DIR"          # the demo's own home, made by an older demo with the umask's mode
py=.venv/bin/python
url="http://127.0.0.1:$CAO_API_PORT"
socket=$("$py" -c "from cli_agent_orchestrator.settings import Settings; print(Settings.from_env().tmux_socket_name)")

if "$py" -c "import httpx,sys; httpx.get('$url/health', timeout=1)" 2>/dev/null; then
  echo "Something already answers on $url; set CAO_API_PORT to a free port." >&2
  exit 1
fi

.venv/bin/cao-server --log-level warning >"$demo_dir/server.log" 2>&1 &
server_pid=$!
cleanup() {
  if [ "$keep" = 0 ]; then
    kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
    tmux -L "$socket" kill-server 2>/dev/null || true
  else
    echo "cao-server (pid $server_pid) keeps running on $url with CAO_HOME_DIR=$CAO_HOME_DIR"
  fi
}
trap cleanup EXIT
"$py" - "$url" <<'PY'
import sys, time, httpx
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        if httpx.get(sys.argv[1] + "/health", timeout=1).status_code == 200:
            sys.exit(0)
    except httpx.HTTPError:
        time.sleep(0.1)
sys.exit("cao-server did not come up; see .demo/server.log")
PY

# A fresh session name each run, so --keep runs can repeat.
session="demo-$(date +%H%M%S)"
if [ "$watch" = 1 ]; then
  "$py" examples/combining-patterns/run_demo.py --session "$session" >"$demo_dir/demo.log" 2>&1 &
  demo_pid=$!
  for _ in $(seq 100); do tmux -L "$socket" has-session -t "cao-$session" 2>/dev/null && break; sleep 0.1; done
  tmux -L "$socket" attach-session -t "cao-$session" || true
  wait "$demo_pid" && status=0 || status=$?
  cat "$demo_dir/demo.log"
  exit "$status"
fi
"$py" examples/combining-patterns/run_demo.py --session "$session" && status=0 || status=$?
if [ "$keep" = 0 ] && [ -t 0 ] && [ -t 1 ]; then
  echo
  echo "The agents stay in tmux until you press Enter: tmux -L $socket attach -t cao-$session"
  read -r _ || true
elif [ "$keep" = 0 ]; then
  echo "The demo's tmux server ends with the demo; pass --keep to look at it afterwards."
fi
exit "$status"
