"""Building the shell line that starts an agent's CLI in a fresh pane.

The environment the agent gets is cao-server's own (so a user's
ANTHROPIC_BASE_URL, proxies and the like reach the CLI) plus the provider's
additions, CAO_TERMINAL_ID and the terminal's hook secret. It travels through a
0600 file that the pane sources and deletes, so no secret appears in a process
list or tmux's argv. The server deletes it too on every other path (a failed
start, a deleted terminal, files left by a crash), so it never outlives the start.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from ...private_files import write_private
from ...providers.base import Launch

ENV_FILE_SUFFIX = ".env"

_ENV_NAME_OK = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
# Describe the server's own terminal, not the pane's.
_NOT_INHERITED = {"TMUX", "TMUX_PANE", "COLUMNS", "LINES", "TERM_PROGRAM", "TERM_PROGRAM_VERSION"}


def write_env_file(path: Path, base: Mapping[str, str], extra: dict[str, str]) -> None:
    """The launch file: `base` (cao-server's environment) minus what describes the server's
    own terminal, plus `extra`."""
    write_private(path, env_file_text(base, extra))


def env_file_text(base: Mapping[str, str], extra: Mapping[str, str]) -> str:
    env = {k: v for k, v in base.items() if k not in _NOT_INHERITED}
    env.update(extra)
    lines = [
        f"export {k}={shlex.quote(v)}"
        for k, v in env.items()
        if k and set(k) <= _ENV_NAME_OK and not k[0].isdigit() and "\x00" not in v
    ]
    return "\n".join(lines) + "\n"


def env_file(tmp_dir: Path, terminal_id: str) -> Path:
    return tmp_dir / f"{terminal_id}{ENV_FILE_SUFFIX}"


def sweep_env_files(tmp_dir: Path, keep: set[str]) -> int:
    """Remove launch files of terminals not being started (left by a crash)."""
    removed = 0
    for path in tmp_dir.glob(f"*{ENV_FILE_SUFFIX}"):
        if path.name[: -len(ENV_FILE_SUFFIX)] not in keep:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def pane_command(env_file: Path, launch: Launch) -> str:
    quoted = shlex.quote(str(env_file))
    return f". {quoted}; rm -f {quoted}; exec {shlex.join(launch.argv)}"
