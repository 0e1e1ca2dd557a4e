"""tmux adapter of the terminal backend.

Each cao home has its own tmux server (`tmux -L <socket>`; TMUX_TMPDIR is
honoured by tmux itself). Output comes from one control-mode client per tmux
server (see tmux_control.py). A control client only sees windows of the session
it is attached to, so every agent window is also linked into a hidden session,
`_cao_monitor`; the link is made in the same tmux command as the window, so not
one byte of output escapes the reader. Commands travel over the same
connection; tmux client processes are used before it exists and for stdin.

`CAO_OUTPUT_SOURCE=pipe-pane` selects the fallback source instead (tmux_pipe.py:
pipe-pane into one FIFO per terminal); it carries no commands, so every command
then runs as a tmux client process.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from pathlib import Path

from ..bus import EventBus
from ..errors import BackendError
from ..settings import Settings
from .base import WindowInfo, WindowRef
from .tmux_control import ControlClient
from .tmux_pipe import PipePaneSource

log = logging.getLogger(__name__)

MONITOR_SESSION = "_cao_monitor"
PANE_WIDTH, PANE_HEIGHT = 220, 50
HISTORY_LIMIT = 100_000
OUTPUT_SOURCES = ("control", "pipe-pane")
_LIST_FORMAT = ("#{session_name}\t#{window_id}\t#{pane_id}\t#{window_name}\t#{pane_dead}\t"
                "#{pane_dead_status}\t#{window_width}\t#{window_height}")


def tmux_missing_message() -> str:
    return ("tmux was not found on PATH. cao runs every agent in tmux; install it first "
            "(Debian/Ubuntu: `sudo apt-get install tmux`, Fedora: `sudo dnf install tmux`, "
            "macOS: `brew install tmux`).")


class TmuxBackend:
    name = "tmux"

    def __init__(self, socket_name: str, bus: EventBus, output_source: str | None = None,
                 fifo_dir: Path | None = None):
        """`output_source`/`fifo_dir` default to the environment (CAO_OUTPUT_SOURCE,
        `<CAO_HOME_DIR>/fifos`), so the composition root need not pass them."""
        self.socket_name = socket_name
        self.bus = bus
        self.binary = shutil.which("tmux")
        if self.binary is None:
            raise BackendError(tmux_missing_message())
        if output_source is None or fifo_dir is None:
            settings = Settings.from_env()
            output_source = settings.output_source if output_source is None else output_source
            fifo_dir = settings.home_dir / "fifos" if fifo_dir is None else fifo_dir
        kind = output_source.strip().lower() or "control"
        if kind not in OUTPUT_SOURCES:
            raise BackendError(f"unknown output source {output_source!r} (CAO_OUTPUT_SOURCE): "
                               f"use 'control' (the default, tmux control mode) or 'pipe-pane'")
        self.output_source = kind
        self.fifo_dir = fifo_dir
        self._source: ControlClient | PipePaneSource | None = None
        self._started = asyncio.Lock()

    # --- running tmux -----------------------------------------------------------
    def base_argv(self) -> list[str]:
        return [self.binary or "tmux", "-L", self.socket_name]

    async def run(self, *args: str, input_bytes: bytes | None = None, check: bool = True) -> str:
        # Only the control client carries commands; the pipe-pane source has none.
        control = self._source if isinstance(self._source, ControlClient) else None
        if (input_bytes is None and control is not None and control.alive
                and not any("\n" in a or "\r" in a for a in args)):
            ok, out = await control.command(list(args))
            if check and not ok:
                raise BackendError(f"tmux {args[0]} failed: {out.strip()}")
            return out + "\n" if out else out
        return await self._run_process(*args, input_bytes=input_bytes, check=check)

    async def _run_process(self, *args: str, input_bytes: bytes | None = None, check: bool = True) -> str:
        """A tmux client process: for the first command (no control client yet), for
        commands that read stdin (load-buffer) and for all of them with pipe-pane."""
        env = dict(os.environ)
        env.pop("TMUX", None)  # we address our own server by -L, never the caller's
        proc = await asyncio.create_subprocess_exec(
            *self.base_argv(), *args,
            stdin=asyncio.subprocess.PIPE if input_bytes is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        out, err = await proc.communicate(input_bytes)
        if check and proc.returncode != 0:
            raise BackendError(f"tmux {args[0]} failed: {err.decode(errors='replace').strip()}")
        return out.decode("utf-8", errors="replace")

    # --- lifecycle --------------------------------------------------------------
    async def start(self) -> None:
        async with self._started:
            if self._source is not None and self._source.alive:
                return
            await self._ensure_server()
            if self.output_source == "pipe-pane":
                self._source = PipePaneSource(self.base_argv(), self.fifo_dir, self.bus)
            else:
                self._source = ControlClient(self.base_argv(), MONITOR_SESSION, self.bus)
            await self._source.start()

    async def stop(self) -> None:
        if self._source is not None:
            await self._source.stop()
            self._source = None

    async def _ensure_server(self) -> None:
        if await self.session_exists(MONITOR_SESSION):
            return
        # -f /dev/null: a user's tmux.conf must not change how agents are started.
        # remain-on-exit keeps a dead agent's last screen (and its exit code) readable.
        await self.run(
            "-f", "/dev/null", "new-session", "-d", "-s", MONITOR_SESSION,
            "-x", str(PANE_WIDTH), "-y", str(PANE_HEIGHT), "tail -f /dev/null", ";",
            "set-option", "-g", "default-shell", "/bin/sh", ";",
            "set-option", "-g", "history-limit", str(HISTORY_LIMIT), ";",
            "set-option", "-g", "default-size", f"{PANE_WIDTH}x{PANE_HEIGHT}", ";",
            "set-option", "-g", "remain-on-exit", "on", ";",
            "set-option", "-g", "allow-rename", "off", ";",
            "set-option", "-g", "automatic-rename", "off")

    @property
    def source(self) -> ControlClient | PipePaneSource:
        if self._source is None:
            raise BackendError("terminal backend not started")
        return self._source

    # --- windows ----------------------------------------------------------------
    async def create_window(self, terminal_id: str, session_name: str, window_name: str,
                            working_directory: str, command: str, new_session: bool,
                            watch: bool = True) -> WindowRef:
        await self.start()
        target = f"{session_name}:={window_name}"
        if new_session:
            create = ["new-session", "-d", "-s", session_name, "-x", str(PANE_WIDTH),
                      "-y", str(PANE_HEIGHT), "-n", window_name, "-c", working_directory,
                      "-e", f"CAO_TERMINAL_ID={terminal_id}", command]
        else:
            create = ["new-window", "-d", "-t", f"{session_name}:", "-n", window_name,
                      "-c", working_directory, "-e", f"CAO_TERMINAL_ID={terminal_id}", command]
        show = ["display-message", "-p", "-t", target, "#{window_id} #{pane_id}"]
        if watch:
            # One tmux invocation: the window is linked into the monitor session (and,
            # with pipe-pane, piped to its FIFO) before tmux reads the pane's first output.
            source = self.source
            pipe = [";", *source.pipe_args(terminal_id, target)] if isinstance(source, PipePaneSource) else []
            try:
                out = await self.run(*create, ";", "link-window", "-d", "-s", target,
                                     "-t", f"{MONITOR_SESSION}:", *pipe, ";", *show)
            except BackendError:
                source.unwatch(terminal_id)  # drops a FIFO made for this window
                raise
        else:
            out = await self.run(*create, ";", *show)
        window_id, pane_id = out.split()
        if watch:
            self.source.watch(pane_id, terminal_id, window_id)
        return WindowRef(window_id, pane_id)

    async def watch(self, terminal_id: str, window_id: str) -> WindowRef | None:
        await self.start()
        for info in await self.list_windows():
            if info.window_id == window_id:
                self.source.watch(info.pane_id, terminal_id, window_id)
                return WindowRef(window_id, info.pane_id)
        return None

    async def unwatch(self, terminal_id: str) -> None:
        if self._source is not None:
            self._source.unwatch(terminal_id)

    def request_snapshot(self, terminal_id: str) -> bool:
        return self._source is not None and self._source.request_snapshot(terminal_id)

    async def paste(self, window_id: str, text: str) -> None:
        buffer = f"cao-{uuid.uuid4().hex[:12]}"
        # load-buffer from stdin + paste-buffer -p (bracketed) -d (delete buffer):
        # the text never passes through a shell or tmux's key parser.
        await self.run("load-buffer", "-b", buffer, "-", ";",
                       "paste-buffer", "-p", "-d", "-b", buffer, "-t", window_id,
                       input_bytes=text.encode("utf-8"))

    async def send_keys(self, window_id: str, keys: list[str]) -> None:
        await self.run("send-keys", "-t", window_id, *keys)

    async def capture(self, window_id: str, *, history: bool = False, escapes: bool = False) -> str:
        args = ["capture-pane", "-p", "-t", window_id]
        if history:
            args += ["-J", "-S", "-"]
        if escapes:
            args.append("-e")
        return await self.run(*args)

    async def current_path(self, window_id: str) -> str | None:
        out = await self.run("display-message", "-p", "-t", window_id, "#{pane_current_path}", check=False)
        return out.strip() or None

    async def kill_window(self, window_id: str) -> None:
        await self.run("kill-window", "-t", window_id, check=False)

    async def kill_session(self, session_name: str) -> None:
        # Windows also linked into the monitor session survive kill-session, so
        # kill them one by one first.
        out = await self.run("list-windows", "-t", f"={session_name}", "-F", "#{window_id}", check=False)
        for window_id in out.split():
            await self.kill_window(window_id)
        await self.run("kill-session", "-t", f"={session_name}", check=False)

    async def list_windows(self) -> list[WindowInfo]:
        out = await self.run("list-panes", "-a", "-F", _LIST_FORMAT, check=False)
        seen: dict[str, WindowInfo] = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) != 8:
                continue
            session, window_id, pane_id, name, dead, status, width, height = parts
            if session == MONITOR_SESSION and window_id in seen:
                continue
            info = WindowInfo(session, window_id, pane_id, name, dead == "1",
                              int(status) if status.lstrip("-").isdigit() else None,
                              int(width or 0), int(height or 0))
            # Prefer the cao-* session's view of a window linked into two sessions.
            if window_id not in seen or seen[window_id].session_name == MONITOR_SESSION:
                seen[window_id] = info
        return list(seen.values())

    async def session_exists(self, session_name: str) -> bool:
        try:
            await self.run("has-session", "-t", f"={session_name}")
        except BackendError:
            return False
        return True

    async def list_sessions(self) -> list[tuple[str, bool]]:
        out = await self.run("list-sessions", "-F", "#{session_name}\t#{session_attached}", check=False)
        rows = [line.split("\t") for line in out.splitlines() if "\t" in line]
        return [(name, attached not in ("", "0")) for name, attached in rows if name != MONITOR_SESSION]

    def attach_command(self, session_name: str) -> list[str]:
        return ["tmux", "-L", self.socket_name, "attach-session", "-t", session_name]
