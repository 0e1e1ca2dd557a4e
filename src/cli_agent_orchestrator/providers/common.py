"""Small pieces every real-CLI provider needs: where its per-terminal files go,
how its hooks call back, and how it starts cao-mcp-server."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from ..agent_credentials import HEADER as AGENT_HEADER
from .base import LaunchContext

MCP_SERVER_NAME = "cao-mcp-server"

# The hook channel (read by cao-server, services/terminals/hook_channel.py). A CLI hook runs a
# small bash script, not Python: the payload goes to a file of the terminal's own directory, then
# one record of fewer than PIPE_BUF bytes to a FIFO of the cao home, so records of concurrent
# hooks never interleave. Record: "<HOOK_RECORD_TAG> <terminal id> <secret> <event> <pid>\n";
# the payload is `<cao home>/tmp/<terminal id>/hook-<pid>.json`. The server answers an accepted
# record with a line on the terminal's ack FIFO, and the hook waits for it, so that (as with a
# synchronous HTTP hook) the event is applied before the CLI goes on and draws what follows.
HOOK_FIFO_NAME = "hooks.fifo"  # in the cao home's tmp directory (0700)
HOOK_SERVER_PID_NAME = "hooks.pid"  # beside it, while a server reads it: a hook waits only then
HOOK_ACK_NAME = "hook-ack"  # FIFO in the terminal's directory
HOOK_RECORD_TAG = "cao-hook-1"
HOOK_SCRIPT_NAME = "cao-hook.sh"
HOOK_ACK_WAIT_S = 2  # a server that is up but does not answer (stuck) costs a hook this much
HOOK_TIMEOUT_S = 5  # what a CLI gives a hook (the script itself ends within HOOK_ACK_WAIT_S)
_HOOK_EVENT = re.compile(r"[A-Za-z0-9_]{1,64}")
_HOOK_SCRIPT = """\
# cao's hook for terminal {terminal_id}: `bash {script_name} EVENT`, the event's JSON on stdin.
# The payload goes to a file of this terminal's private directory, then one short record to
# cao-server's hook FIFO, opened read-write so that the open never waits for a reader. If the
# server that reads it is alive, wait (at most {ack_wait} s) for its ack: the event is then applied
# before the CLI goes on. Only builtins see the secret, the payload never becomes part of a
# command, and nothing is printed: the CLI reads a hook's stdout.
[ -t 0 ] || cat 2>/dev/null >{payload}
[ -p {fifo} ] || exit 0
{{ exec 4<>{ack}; }} 2>/dev/null || exit 0
printf '{tag} {terminal_id} %s %s %s\\n' "$CAO_HOOK_SECRET" "$1" "$$" 2>/dev/null 1<>{fifo}
read -r server 2>/dev/null <{pid_file} && kill -0 "$server" 2>/dev/null && read -r -t {ack_wait} -u 4 _
exit 0
"""


def terminal_dir(ctx: LaunchContext) -> Path:
    """A directory cao owns for this terminal's generated config (0700). The user's own
    configuration files are never written."""
    path = ctx.home_dir / "tmp" / ctx.terminal_id
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def hook_fifo(home_dir: Path) -> Path:
    """The FIFO through which the hooks of every terminal of the cao home `home_dir` report."""
    return home_dir / "tmp" / HOOK_FIFO_NAME


def hook_command(ctx: LaunchContext, event: str) -> str:
    """The shell command a CLI hook runs to report `event` (JSON on stdin): a few ms of bash and
    cat. Writes the terminal's hook script and ack FIFO. (`cao-hook EVENT`, the Python form,
    still works: it posts to POST /terminals/{id}/hooks.)"""
    if not _HOOK_EVENT.fullmatch(event) or not re.fullmatch(r"[a-f0-9]{8}", ctx.terminal_id):
        raise ValueError(f"hook event {event!r} of terminal {ctx.terminal_id!r}: not a name cao gives")
    if ctx.hook_channel == "http":
        # On another host there is no hook FIFO: cao-hook posts through the host's forward.
        return shlex.join(["cao-hook", event])
    own = terminal_dir(ctx)
    ack = own / HOOK_ACK_NAME
    if not ack.is_fifo():
        ack.unlink(missing_ok=True)
        os.mkfifo(ack, 0o600)
    text = _HOOK_SCRIPT.format(
        terminal_id=ctx.terminal_id,
        script_name=HOOK_SCRIPT_NAME,
        ack_wait=HOOK_ACK_WAIT_S,
        payload=shlex.quote(str(own)) + '/hook-"$$".json',
        fifo=shlex.quote(str(hook_fifo(ctx.home_dir))),
        ack=shlex.quote(str(ack)),
        pid_file=shlex.quote(str(hook_fifo(ctx.home_dir).with_name(HOOK_SERVER_PID_NAME))),
        tag=HOOK_RECORD_TAG,
    )
    script = own / HOOK_SCRIPT_NAME
    fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    # bash, not sh: `read -t` bounds the wait for the ack (the CLIs start a shell for hooks anyway).
    return shlex.join([shutil.which("bash") or "/bin/bash", str(script), event])


def hook_url(ctx: LaunchContext) -> str | None:
    """Where a CLI's own HTTP hook posts this terminal's events (POST /terminals/{id}/hooks,
    with the terminal's secret in X-CAO-Hook-Secret), or None where it cannot: an agent on
    another host (its forward admits only cao's token, which no hook setting can carry), or a
    server that does not listen on loopback."""
    if ctx.hook_channel != "fifo" or not re.fullmatch(r"[a-f0-9]{8}", ctx.terminal_id):
        return None
    host = ctx.environ.get("CAO_API_HOST") or "127.0.0.1"
    if host in ("0.0.0.0", "::", "localhost"):
        host = "127.0.0.1"
    port = ctx.environ.get("CAO_API_PORT") or "9889"
    if host not in ("127.0.0.1", "::1") or not port.isdigit():
        return None
    return f"http://{'[::1]' if host == '::1' else host}:{port}/terminals/{ctx.terminal_id}/hooks"


def mcp_server_argv() -> list[str]:
    """How an agent starts cao-mcp-server: the console script beside this Python."""
    script = Path(sys.executable).parent / "cao-mcp-server"
    if script.exists():
        return [str(script)]
    found = shutil.which("cao-mcp-server")
    if found:
        return [found]
    return [sys.executable, "-m", "cli_agent_orchestrator.mcp_server.relay"]


def mcp_server(ctx: LaunchContext) -> dict:
    """cao-mcp-server (the stdio relay to cao-server's /mcp) as a stdio MCP server entry: command,
    args, and the environment that proves the agent (some CLIs pass their MCP servers only what
    the entry names). For a CLI that cannot reach an HTTP MCP server."""
    argv = ctx.mcp_server_argv or mcp_server_argv()
    env = {"CAO_TERMINAL_ID": ctx.terminal_id, "CAO_MCP_URL": ctx.mcp_url, "CAO_MCP_TOKEN": ctx.mcp_token}
    for name in ("CAO_HOME_DIR", "CAO_MCP_RECONNECT_SECONDS"):
        if ctx.environ.get(name):
            env[name] = ctx.environ[name]
    return {"command": argv[0], "args": argv[1:], "env": {k: v for k, v in env.items() if v}}


def mcp_headers(ctx: LaunchContext) -> dict[str, str]:
    """The header that proves the agent on cao's MCP endpoint (agent_credentials.py). For the
    CLI's per-terminal config file (0600, removed with the agent), never for its argv."""
    return {AGENT_HEADER: ctx.mcp_token}
