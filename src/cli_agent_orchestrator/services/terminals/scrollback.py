"""A deleted terminal's scrollback: saved (escape sequences stripped, private files) when it is
deleted, and shown again on request in a plain tmux window, the same one each time it is asked.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict
from pathlib import Path

from ...backends.base import TerminalBackend
from ...errors import NotFound
from ...models import SAFE_NAME_RE, SESSION_PREFIX, Terminal, Worktree
from ...private_files import private_dir, write_private

log = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


async def save_scrollback(backend: TerminalBackend, logs_dir: Path, term: Terminal, window_id: str | None) -> None:
    """Keep what a terminal about to be deleted shows, and what it was (for a later restore)."""
    logs = private_dir(logs_dir)
    if window_id and not term.gone:
        try:
            text = await backend.capture(window_id, history=True)
            write_private(logs / f"{term.id}.scrollback", _ANSI.sub("", text))
        except Exception as exc:  # the window may already be gone; the row still goes
            log.warning("could not save scrollback of %s: %s", term.id, exc)
    snapshot = {
        "terminal_id": term.id,
        "session_name": term.session_name,
        "window_name": term.window_name,
        "agent_profile": term.agent_profile,
        "provider": term.provider,
        "working_directory": term.working_directory,
        "allowed_tools": term.allowed_tools,
        "caller_id": term.caller_id,
        "host": term.host,
    }
    write_private(logs / f"{term.id}.snapshot.json", json.dumps(snapshot, indent=2))


def note_worktree(logs_dir: Path, terminal_id: str, worktree: Worktree) -> None:
    """Add what became of a deleted terminal's worktree (removed, or kept and why) to its snapshot."""
    path = logs_dir / f"{terminal_id}.snapshot.json"
    try:
        snapshot = json.loads(path.read_text()) if path.is_file() else {"terminal_id": terminal_id}
    except ValueError:
        snapshot = {"terminal_id": terminal_id}
    snapshot["worktree"] = asdict(worktree)
    try:
        write_private(path, json.dumps(snapshot, indent=2))
    except OSError as exc:  # the delete answer still says it; the terminal is gone either way
        log.warning("could not note the worktree of %s in its snapshot: %s", terminal_id, exc)


async def restore_scrollback(backend: TerminalBackend, logs_dir: Path, terminal_id: str) -> dict:
    """Show a deleted terminal's saved scrollback again, in a plain window. Asked
    again, it shows the same window (tagged with the terminal id), not another one."""
    scrollback = logs_dir / f"{terminal_id}.scrollback"
    snapshot_path = logs_dir / f"{terminal_id}.snapshot.json"
    if not scrollback.is_file():
        raise NotFound(f"no saved scrollback for terminal {terminal_id}")
    try:
        snapshot = json.loads(snapshot_path.read_text()) if snapshot_path.is_file() else {}
    except ValueError:
        snapshot = {}
    tag = f"restored:{terminal_id}"
    for window in await backend.list_windows():
        if window.tag == tag:
            if not window.dead:
                return _restored(
                    backend, terminal_id, window.session_name, window.window_name, window.window_id, scrollback
                )
            await backend.kill_window(window.window_id)  # its shell was left: a fresh one
    session = snapshot.get("session_name")
    if not isinstance(session, str) or not SAFE_NAME_RE.match(session):
        session = f"{SESSION_PREFIX}restored"
    new_session = not await backend.session_exists(session)
    taken = {w.window_name for w in await backend.list_windows() if w.session_name == session}
    original = snapshot.get("window_name")
    base = f"restored-{original if isinstance(original, str) and SAFE_NAME_RE.match(original) else terminal_id}"[:58]
    window_name = next(name for n in range(1, 1000) if (name := base if n == 1 else f"{base}-{n}") not in taken)
    command = f"cat {_shquote(str(scrollback))}; exec /bin/sh"
    workdir = snapshot.get("working_directory")
    if not (isinstance(workdir, str) and os.path.isdir(workdir)):
        workdir = os.getcwd()
    ref = await backend.create_window(
        terminal_id, session, window_name, workdir, command, new_session, watch=False, tag=tag
    )
    return _restored(backend, terminal_id, session, window_name, ref.window_id, scrollback)


def _restored(
    backend: TerminalBackend, terminal_id: str, session: str, window: str, window_id: str, scrollback: Path
) -> dict:
    return {
        "terminal_id": terminal_id,
        "session_name": session,
        "window_name": window,
        "window_id": window_id,
        "scrollback": str(scrollback),
        "attach": backend.attach_command(session),
    }


def _shquote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
