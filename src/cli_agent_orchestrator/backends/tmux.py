"""tmux adapter of the terminal backend.

Each cao home has its own tmux server (`tmux -L <socket>`; TMUX_TMPDIR is honoured by
tmux itself). Output comes from one control-mode client per tmux server (tmux_control.py).
A control client only sees windows of the session it is attached to, so every agent window
lives in a hidden session, `_cao_monitor`, from its first byte and is linked into its cao
session in the same tmux command. Commands travel over the same connection; tmux client
processes are used before it exists and for stdin.

Nothing a client or an agent supplies becomes tmux syntax: windows are addressed by their
ids (`@N`), never by name; `#` is doubled in the arguments tmux expands as formats (`-c`,
`-n`); text reaches a pane only through a buffer loaded from stdin. Pastes and keys go to
a pane only if tmux itself finds it alive in the same command (tmux 3.3a crashes the whole
server on a paste into a dead pane).

When the control client ends, the backend reconnects if the tmux server lives (re-reading
every pane) and otherwise publishes `BackendLost`; the next terminal starts a new server.

`CAO_OUTPUT_SOURCE=pipe-pane` selects the fallback source instead (tmux_pipe.py: pipe-pane
into one FIFO per terminal); it carries no commands, so every command then runs as a tmux
client process.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import uuid
from pathlib import Path

from ..bus import EventBus
from ..errors import AgentExited, BackendError
from ..events import BackendLost, TerminalExited
from .base import WindowInfo, WindowRef
from .tmux_control import ControlClient, PaneMap, Reply, quote
from .tmux_pipe import PipePaneSource

log = logging.getLogger(__name__)

MONITOR_SESSION = "_cao_monitor"
PANE_WIDTH, PANE_HEIGHT = 220, 50
HISTORY_LIMIT = 100_000
OUTPUT_SOURCES = ("control", "pipe-pane")
# Reconnecting the control client while the tmux server lives: delays between attempts.
RECONNECT_DELAYS_S = (0.0, 0.2, 0.5, 1.0, 2.0, 4.0)
# A tmux client process that takes this long is talking to a wedged server.
PROCESS_TIMEOUT_S = 10.0
_DEAD = "cao-pane-dead"
_WINDOW_ID = re.compile(r"\A@[0-9]+\Z")
_LIST_FORMAT = ("#{session_name}\t#{window_id}\t#{pane_id}\t#{window_name}\t#{pane_dead}\t"
                "#{pane_dead_status}\t#{window_width}\t#{window_height}\t#{@cao_tag}")


def tmux_missing_message() -> str:
    return ("tmux was not found on PATH. cao runs every agent in tmux; install it first "
            "(Debian/Ubuntu: `sudo apt-get install tmux`, Fedora: `sudo dnf install tmux`, "
            "macOS: `brew install tmux`).")


def literal(text: str) -> str:
    """An argument tmux expands as a format (`-c`, `-n`), made to mean exactly `text`."""
    return text.replace("#", "##")


def _window(window_id: str) -> str:
    """Window ids come from tmux, but they are placed inside command strings here: check."""
    if not _WINDOW_ID.match(window_id or ""):
        raise BackendError(f"not a tmux window id: {window_id!r}")
    return window_id


class TmuxBackend:
    name = "tmux"

    def __init__(self, socket_name: str, bus: EventBus, output_source: str = "control",
                 fifo_dir: Path | None = None, stall_s: float | None = None):
        self.stall_s = stall_s
        self.socket_name = socket_name
        self.bus = bus
        self.binary = shutil.which("tmux")
        if self.binary is None:
            raise BackendError(tmux_missing_message())
        kind = output_source.strip().lower() or "control"
        if kind not in OUTPUT_SOURCES:
            raise BackendError(f"unknown output source {output_source!r} (CAO_OUTPUT_SOURCE): "
                               f"use 'control' (the default, tmux control mode) or 'pipe-pane'")
        if kind == "pipe-pane" and fifo_dir is None:
            raise BackendError("the pipe-pane output source needs a FIFO directory")
        self.output_source = kind
        self.fifo_dir = fifo_dir
        self.panes = PaneMap()
        self._source: ControlClient | PipePaneSource | None = None
        self._started = asyncio.Lock()
        self._recovery: asyncio.Task | None = None
        self._stopping = False
        # Why the tmux server is not usable now (None: it is); shown by /health.
        self.down_reason: str | None = None

    # --- running tmux -----------------------------------------------------------
    def base_argv(self) -> list[str]:
        return [self.binary or "tmux", "-L", self.socket_name]

    async def run(self, *args: str, input_bytes: bytes | None = None, check: bool = True) -> str:
        reply = await self.run_reply(*args, input_bytes=input_bytes)
        if check and not reply.ok:
            raise BackendError(f"tmux {args[0]} failed: {reply.error.strip()}")
        text = reply.text
        return text + "\n" if text else text

    async def run_reply(self, *args: str, input_bytes: bytes | None = None) -> Reply:
        # Only the control client carries commands; the pipe-pane source has none.
        control = self._source if isinstance(self._source, ControlClient) else None
        if (input_bytes is None and control is not None and control.alive
                and not any("\n" in a or "\r" in a for a in args)):
            reply = await control.command(list(args))
            if reply.ok or control.alive:
                return reply
            # The channel broke under this command: it may not have run; say so.
            return Reply(False, reply.blocks, reply.error or "tmux control channel lost")
        return await self._run_process(*args, input_bytes=input_bytes)

    async def _run_process(self, *args: str, input_bytes: bytes | None = None) -> Reply:
        """A tmux client process: for the first command (no control client yet), for
        commands that read stdin (load-buffer) and for all of them with pipe-pane."""
        env = dict(os.environ)
        env.pop("TMUX", None)  # we address our own server by -L, never the caller's
        proc = await asyncio.create_subprocess_exec(
            *self.base_argv(), *args,
            stdin=asyncio.subprocess.PIPE if input_bytes is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        try:
            out, err = await asyncio.wait_for(proc.communicate(input_bytes), PROCESS_TIMEOUT_S)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return Reply(False, [], f"tmux did not answer within {PROCESS_TIMEOUT_S:.0f}s")
        lines = out.decode("utf-8", errors="replace").splitlines()
        return Reply(proc.returncode == 0, [lines] if lines else [], err.decode(errors="replace"))

    # --- lifecycle --------------------------------------------------------------
    async def start(self) -> None:
        async with self._started:
            if self._source is not None and self._source.alive:
                return
            await self._connect()

    async def _connect(self) -> None:
        """Start (or find) the tmux server and attach the output source. Caller holds _started."""
        await self._ensure_server()
        if self.output_source == "pipe-pane":
            assert self.fifo_dir is not None
            self._source = PipePaneSource(self.base_argv(), self.fifo_dir, self.bus, self.panes,
                                          on_lost=self._on_source_lost)
        else:
            self._source = ControlClient(self.base_argv(), MONITOR_SESSION, self.bus, self.panes,
                                         on_lost=self._on_source_lost,
                                         **({"stall_s": self.stall_s} if self.stall_s else {}))
        try:
            await self._source.start()
        except (ConnectionError, OSError) as exc:
            self._source = None
            raise BackendError(f"cannot read the tmux server's output: {exc}") from exc
        self.down_reason = None

    async def stop(self) -> None:
        self._stopping = True
        if self._recovery is not None:
            self._recovery.cancel()
            await asyncio.gather(self._recovery, return_exceptions=True)
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

    async def server_running(self) -> bool:
        return (await self._run_process("list-sessions", "-F", "x")).ok

    def health(self) -> dict:
        """`{"status": "ok"|"down", "reason": …}` for /health."""
        if self.down_reason is not None:
            return {"status": "down", "reason": self.down_reason}
        return {"status": "ok"}

    # --- losing and regaining the output source -------------------------------------
    def _on_source_lost(self, reason: str) -> None:
        if self._stopping or (self._recovery is not None and not self._recovery.done()):
            return
        self._recovery = asyncio.get_running_loop().create_task(self._recover(reason), name="tmux-recover")

    async def _recover(self, reason: str) -> None:
        """The output source ended. A live tmux server gets a new client (its panes re-read
        from scratch); a dead one is reported, and every agent it ran is gone."""
        async with self._started:
            lost = self._source
            if lost is not None:
                await lost.stop()
                self._source = None
            error = reason
            for delay in RECONNECT_DELAYS_S:
                await asyncio.sleep(delay)
                if not await self.server_running():
                    break
                try:
                    await self._connect()
                except (BackendError, ConnectionError, OSError) as exc:
                    error = f"{reason}; reconnecting failed: {exc}"
                    continue
                log.warning("tmux output source reconnected after: %s", reason)
                await self._reconcile()
                return
            why = (f"the tmux server of this cao home ({self.socket_name}) ended: {error}"
                   if not await self.server_running() else f"lost the tmux server: {error}")
            self.down_reason = why
            watched = list(self.panes.pane_of_terminal)
            for terminal_id in watched:
                self.panes.remove(terminal_id)
            log.error("%s; %d agent(s) gone", why, len(watched))
            self.bus.publish(BackendLost(self.name, why))

    async def _reconcile(self) -> None:
        """After a reconnect: panes that died or vanished meanwhile are reported, the rest
        are re-read (output in the gap was not seen)."""
        windows = {w.window_id: w for w in await self.list_windows()}
        for terminal_id, window_id in list(self.panes.window_of_terminal.items()):
            info = windows.get(window_id)
            if info is None:
                if self.panes.report_dead_once(terminal_id):
                    self.bus.publish(TerminalExited(terminal_id, window_gone=True))
            elif info.dead:
                if self.panes.report_dead_once(terminal_id):
                    self.bus.publish(TerminalExited(terminal_id, exit_code=info.exit_code))
            else:
                if info.session_name != MONITOR_SESSION and not await self._in_monitor(window_id):
                    await self.run("link-window", "-d", "-s", window_id, "-t", f"={MONITOR_SESSION}:", check=False)
                self.request_snapshot(terminal_id)

    async def _in_monitor(self, window_id: str) -> bool:
        out = await self.run("list-windows", "-t", f"={MONITOR_SESSION}", "-F", "#{window_id}", check=False)
        return window_id in out.split()

    @property
    def source(self) -> ControlClient | PipePaneSource:
        if self._source is None:
            raise BackendError(self.down_reason or "terminal backend not started")
        return self._source

    # --- windows ----------------------------------------------------------------
    async def create_window(self, terminal_id: str, session_name: str, window_name: str,
                            working_directory: str, command: str, new_session: bool,
                            watch: bool = True, tag: str | None = None) -> WindowRef:
        await self.start()
        ids = "#{window_id} #{pane_id}"
        common = ["-n", literal(window_name), "-c", literal(working_directory),
                  "-e", f"CAO_TERMINAL_ID={terminal_id}", "-P", "-F", ids, command]
        if new_session:
            create = ["new-session", "-d", "-s", session_name, "-x", str(PANE_WIDTH), "-y", str(PANE_HEIGHT),
                      *common]
            this = f"={session_name}:^"  # the new session's only window
            link = ["link-window", "-d", "-s", this, "-t", f"={MONITOR_SESSION}:"] if watch else []
        elif watch:
            # Born in the monitor session, so its first byte of output is read; `-a` after
            # `{end}` makes it the new `{end}` for the commands that follow in this list.
            this = f"={MONITOR_SESSION}:{{end}}"
            create = ["new-window", "-d", "-a", "-t", this, *common]
            link = ["link-window", "-d", "-s", this, "-t", f"={session_name}:"]
        else:
            create = ["new-window", "-d", "-t", f"={session_name}:", *common]
            this, link = "", []
        tail: list[str] = []
        if link:
            tail += [";", *link]
        if tag is not None and this:
            tail += [";", "set-option", "-w", "-t", this, "@cao_tag", tag]
        source = self.source if watch else None
        if isinstance(source, PipePaneSource):
            tail += [";", *source.pipe_args(terminal_id, this)]
        reply = await self.run_reply(*create, *tail)
        first = reply.blocks[0][0].split() if reply.blocks and reply.blocks[0] else []
        made = WindowRef(first[0], first[1]) if len(first) == 2 and _WINDOW_ID.match(first[0]) else None
        if not reply.ok or made is None:
            if isinstance(source, PipePaneSource):
                source.unwatch(terminal_id)  # drops a FIFO made for this window
            if made is not None:  # half made: nothing may stay behind untracked
                await self.kill_window(made.window_id)
            if new_session:
                await self.run("kill-session", "-t", f"={session_name}", check=False)
            raise BackendError(f"tmux could not create the window: {reply.error.strip() or 'no answer'}")
        if tag is not None and not this:
            await self.run("set-option", "-w", "-t", made.window_id, "@cao_tag", tag, check=False)
        if source is not None:
            source.watch(made.pane_id, terminal_id, made.window_id)
        return made

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
        self.panes.remove(terminal_id)

    def request_snapshot(self, terminal_id: str) -> bool:
        return self._source is not None and self._source.request_snapshot(terminal_id)

    async def paste(self, window_id: str, text: str) -> None:
        window = _window(window_id)
        buffer = f"cao-{uuid.uuid4().hex[:12]}"
        # load-buffer from stdin + paste-buffer -p (bracketed) -d (delete buffer): the text
        # never passes through a shell or tmux's parser. if-shell -F decides inside tmux,
        # in the same command, that the pane is alive: nothing can die in between.
        reply = await self.run_reply(
            "load-buffer", "-b", buffer, "-", ";",
            "if-shell", "-F", "-t", window, "#{pane_dead}",
            f"delete-buffer -b {buffer} ; display-message -p {_DEAD}",
            f"paste-buffer -p -d -b {buffer} -t {window}",
            input_bytes=text.encode("utf-8"))
        await self._check_alive(reply, window, cleanup=["delete-buffer", "-b", buffer])

    async def send_keys(self, window_id: str, keys: list[str]) -> None:
        window = _window(window_id)
        typed = " ".join(quote(k) for k in keys)
        reply = await self.run_reply("if-shell", "-F", "-t", window, "#{pane_dead}",
                                     f"display-message -p {_DEAD}", f"send-keys -t {window} {typed}")
        await self._check_alive(reply, window)

    async def _check_alive(self, reply: Reply, window: str, cleanup: list[str] | None = None) -> None:
        if reply.ok and _DEAD not in reply.text.split():
            return
        if cleanup:
            await self.run(*cleanup, check=False)
        if reply.ok:
            raise AgentExited("the agent's process has exited (its pane is dead)")
        if "can't find" in reply.error:
            raise AgentExited("the agent's tmux window no longer exists")
        raise BackendError(f"tmux refused input for {window}: {reply.error.strip()}")

    async def capture(self, window_id: str, *, history: bool = False, escapes: bool = False,
                      start: int | None = None) -> str:
        """The pane's text: the visible screen, the whole history, or from line `start`
        (tmux numbering: 0 is the top visible row, negative numbers reach into history)."""
        args = ["capture-pane", "-p", "-t", _window(window_id)]
        if history:
            args += ["-J", "-S", "-"]
        elif start is not None:
            args += ["-J", "-S", str(start)]
        if escapes:
            args.append("-e")
        return await self.run(*args)

    async def position(self, window_id: str) -> tuple[int, int] | None:
        """(history_size, cursor_y): where the next text will land, as an absolute line
        number history_size + cursor_y that stays valid while lines scroll into history."""
        out = await self.run("display-message", "-p", "-t", _window(window_id),
                             "#{history_size} #{cursor_y}", check=False)
        parts = out.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None
        return int(parts[0]), int(parts[1])

    async def current_path(self, window_id: str) -> str | None:
        out = await self.run("display-message", "-p", "-t", _window(window_id), "#{pane_current_path}",
                             check=False)
        return out.strip() or None

    async def kill_window(self, window_id: str) -> None:
        await self.run("kill-window", "-t", _window(window_id), check=False)

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
            if len(parts) != 9:
                continue
            session, window_id, pane_id, name, dead, status, width, height, tag = parts
            if session == MONITOR_SESSION and window_id in seen:
                continue
            info = WindowInfo(session, window_id, pane_id, name, dead == "1",
                              int(status) if status.lstrip("-").isdigit() else None,
                              int(width or 0), int(height or 0), tag)
            # Prefer the cao-* session's view of a window linked into two sessions.
            if window_id not in seen or seen[window_id].session_name == MONITOR_SESSION:
                seen[window_id] = info
        return list(seen.values())

    async def session_exists(self, session_name: str) -> bool:
        return (await self.run_reply("has-session", "-t", f"={session_name}")).ok

    async def list_sessions(self) -> list[tuple[str, bool]]:
        out = await self.run("list-sessions", "-F", "#{session_name}\t#{session_attached}", check=False)
        rows = [line.split("\t") for line in out.splitlines() if "\t" in line]
        return [(name, attached not in ("", "0")) for name, attached in rows if name != MONITOR_SESSION]

    def attach_command(self, session_name: str) -> list[str]:
        return ["tmux", "-L", self.socket_name, "attach-session", "-t", session_name]
