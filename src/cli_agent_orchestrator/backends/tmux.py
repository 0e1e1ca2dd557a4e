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
A server that does not answer (stopped, overloaded) is not a lost one: commands are answered
BackendNotAnswering (503) after COMMAND_DEADLINE_S, `probe` tells /health within a fraction
of a second, and a reconnect waits for the server as long as it takes, its agents intact.

`CAO_OUTPUT_SOURCE=pipe-pane` selects the fallback source instead (tmux_pipe.py: pipe-pane
into one FIFO per terminal); it carries no commands, so every command then runs as a tmux
client process (tmux_process.py).

This module is the backend itself: lifecycle, recovery and the protocol's methods. Quoting
lives in tmux_commands.py, the window layout in tmux_windows.py, input in tmux_input.py,
reading a pane (its text, where the cursor is) in tmux_reading.py.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from ..bus import EventBus
from ..errors import BackendError, BackendNotAnswering
from ..events import BackendLost, TerminalExited
from . import tmux_input, tmux_reading
from .base import WindowInfo, WindowRef
from .tmux_commands import Parsed, Reply, literal, window_target
from .tmux_control import COMMAND_DEADLINE_S, ControlClient
from .tmux_panes import PaneMap
from .tmux_pipe import PipePaneSource
from .tmux_process import run_client
from .tmux_windows import (
    LIST_FORMAT,
    MONITOR_SESSION,
    create_window_commands,
    created_window,
    parse_window_list,
    server_start_commands,
)

log = logging.getLogger(__name__)

OUTPUT_SOURCES = ("control", "pipe-pane")
# Reconnecting the control client while the tmux server lives: delays between attempts.
RECONNECT_DELAYS_S = (0.0, 0.2, 0.5, 1.0, 2.0, 4.0)


def tmux_missing_message() -> str:
    return (
        "tmux was not found on PATH. cao runs every agent in tmux; install it first "
        "(Debian/Ubuntu: `sudo apt-get install tmux`, Fedora: `sudo dnf install tmux`, "
        "macOS: `brew install tmux`)."
    )


class TmuxBackend:
    name = "tmux"

    def __init__(
        self,
        socket_name: str,
        bus: EventBus,
        output_source: str = "control",
        fifo_dir: Path | None = None,
        stall_s: float | None = None,
        spawn: Callable[[Coroutine[Any, Any, Any], str], Any] | None = None,
    ):
        """`spawn(coro, name)` starts a background task (the runtime's task group)."""
        self.stall_s = stall_s
        self.spawn = spawn or (lambda coro, name: asyncio.get_running_loop().create_task(coro, name=name))
        self.socket_name = socket_name
        self.bus = bus
        self.binary = shutil.which("tmux")
        if self.binary is None:
            raise BackendError(tmux_missing_message())
        kind = output_source.strip().lower() or "control"
        if kind not in OUTPUT_SOURCES:
            raise BackendError(
                f"unknown output source {output_source!r} (CAO_OUTPUT_SOURCE): "
                f"use 'control' (the default, tmux control mode) or 'pipe-pane'"
            )
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
        # Why a reconnect waits (the server lives but does not answer); None when it does not.
        self.stalled_reason: str | None = None

    # --- running tmux -----------------------------------------------------------
    def base_argv(self) -> list[str]:
        return [self.binary or "tmux", "-L", self.socket_name]

    def client_argv(self, *args: str) -> list[str]:
        """The argv of a tmux client process running `args` on this backend's tmux server."""
        return [*self.base_argv(), *args]

    async def run(self, *args: str, input_bytes: bytes | None = None, check: bool = True) -> str:
        reply = await self.run_reply(*args, input_bytes=input_bytes)
        if check and not reply.ok:
            raise BackendError(f"tmux {args[0]} failed: {reply.error.strip()}")
        text = reply.text
        return text + "\n" if text else text

    @property
    def parses_commands(self) -> bool:
        """Whether commands go as lines to the control client, which parses them: only then
        may an argument be `Parsed` (tmux_commands.escaped)."""
        control = self._source if isinstance(self._source, ControlClient) else None
        return control is not None and control.alive

    async def run_reply(self, *args: str, input_bytes: bytes | None = None) -> Reply:
        # Only the control client carries commands; the pipe-pane source has none.
        control = self._source if isinstance(self._source, ControlClient) else None
        if (
            input_bytes is None
            and control is not None
            and control.alive
            and not any("\n" in a or "\r" in a for a in args)
        ):
            reply = await control.command(list(args))
            if reply.ok or control.alive:
                return reply
            # The channel broke under this command: it may not have run; say so.
            return Reply(False, reply.blocks, reply.error or "tmux control channel lost")
        if any(isinstance(a, Parsed) for a in args):
            # A client process would take the escapes literally: never run it there.
            return Reply(False, [], "tmux control channel lost")
        # A tmux client process: for the first command (no control client yet), for
        # commands that read stdin (load-buffer) and for all of them with pipe-pane.
        try:
            return await asyncio.wait_for(run_client(self.client_argv(*args), (), input_bytes), COMMAND_DEADLINE_S)
        except TimeoutError:  # run_client kills its process when cancelled
            raise BackendNotAnswering(
                f"tmux did not answer within {COMMAND_DEADLINE_S:g}s (its server is stopped or overloaded; "
                "see /health); what was sent may still take effect when it answers"
            ) from None

    # --- lifecycle --------------------------------------------------------------
    async def start(self) -> None:
        if self.stalled_reason is not None:  # a reconnect holds the lock until tmux answers
            raise BackendNotAnswering(self.stalled_reason)
        async with self._started:
            if self._source is not None and self._source.alive:
                return
            await self._connect()

    async def _connect(self) -> None:
        """Start (or find) the tmux server and attach the output source. Caller holds _started."""
        await self._ensure_server()
        if self.output_source == "pipe-pane":
            assert self.fifo_dir is not None
            self._source = PipePaneSource(
                self.base_argv(), self.fifo_dir, self.bus, self.panes, on_lost=self._on_source_lost
            )
        else:
            self._source = ControlClient(
                self.client_argv("-C", "attach-session", "-t", f"={MONITOR_SESSION}"),
                MONITOR_SESSION,
                self.bus,
                self.panes,
                on_lost=self._on_source_lost,
                **({"stall_s": self.stall_s} if self.stall_s else {}),
            )
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
        await self.run(*server_start_commands())

    async def server_running(self) -> bool:
        return (await run_client(self.client_argv("list-sessions", "-F", "x"), ())).ok

    def health(self) -> dict:
        """`{"status": "ok"|"down"|"not answering", "reason": …}` as last known, for /health."""
        if self.down_reason is not None:
            return {"status": "down", "reason": self.down_reason}
        if self.stalled_reason is not None:
            return {"status": "not answering", "reason": self.stalled_reason}
        return {"status": "ok"}

    async def probe(self, deadline_s: float) -> dict:
        """`health()`, with the server asked now to answer a no-op within `deadline_s`."""
        known = self.health()
        if known["status"] != "ok":
            return known
        control = self._source if isinstance(self._source, ControlClient) else None
        if control is not None and control.alive:
            why = await control.probe(deadline_s)
        else:  # the pipe-pane source, or between two control clients: a client process
            try:
                asked = run_client(self.client_argv("display-message", "-p", "x"), ())
                reply = await asyncio.wait_for(asked, deadline_s)
            except TimeoutError:
                why = f"tmux does not answer (no reply within {deadline_s:g}s; is its server stopped?)"
            else:
                if not reply.ok:
                    return {"status": "down", "reason": reply.error.strip() or "the tmux server does not run"}
                why = None
        return {"status": "ok"} if why is None else {"status": "not answering", "reason": why}

    async def _server_state(self) -> str:
        """Whether the server is "running", "gone", or "not answering" (stopped or overloaded)."""
        probe = run_client(self.client_argv("list-sessions", "-F", "x"), ())
        try:
            reply = await asyncio.wait_for(probe, COMMAND_DEADLINE_S)
        except TimeoutError:
            return "not answering"
        return "running" if reply.ok else "gone"

    # --- losing and regaining the output source -------------------------------------
    def _on_source_lost(self, reason: str) -> None:
        if self._stopping or (self._recovery is not None and not self._recovery.done()):
            return
        self._recovery = self.spawn(self._recover(reason), "tmux-recover")

    async def _recover(self, reason: str) -> None:
        """The output source ended. A live tmux server gets a new client (its panes re-read
        from scratch); a dead one is reported, and every agent it ran is gone."""
        async with self._started:
            lost = self._source
            if lost is not None:
                await lost.stop()
                self._source = None
            error, state, attempt = reason, "running", 0
            while attempt < len(RECONNECT_DELAYS_S):
                await asyncio.sleep(RECONNECT_DELAYS_S[attempt])  # back-off between attempts, not sync
                state = await self._server_state()
                if state == "not answering":
                    # Stopped (SIGSTOP) or overloaded, not lost: its agents live on. Ask again
                    # as long as it takes; each question waits COMMAND_DEADLINE_S, and is
                    # answered the moment the server runs again (a stopped process sends
                    # nothing else to wait on). Once it answers, the attempts start afresh.
                    if self.stalled_reason is None:
                        log.warning("the tmux server %s does not answer; waiting for it", self.socket_name)
                    self.stalled_reason = (
                        f"tmux does not answer (its server {self.socket_name} lives but is stopped or overloaded); "
                        "cao reconnects when it does"
                    )
                    attempt = 0
                    continue
                self.stalled_reason = None
                if state == "gone":
                    break
                attempt += 1
                try:
                    await self._connect()
                except (BackendError, ConnectionError, OSError) as exc:
                    error = f"{reason}; reconnecting failed: {exc}"
                    continue
                log.warning("tmux output source reconnected after: %s", reason)
                try:
                    await self._reconcile()
                except BackendError as exc:  # stopped again meanwhile: the next loss reconnects
                    log.warning("re-reading the panes after a reconnect failed: %s", exc)
                return
            why = (
                f"the tmux server of this cao home ({self.socket_name}) ended: {error}"
                if state == "gone"
                else f"lost the tmux server: {error}"
            )
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
    async def create_window(
        self,
        terminal_id: str,
        session_name: str,
        window_name: str,
        working_directory: str,
        command: str,
        new_session: bool,
        watch: bool = True,
        tag: str | None = None,
    ) -> WindowRef:
        await self.start()
        commands = create_window_commands(
            terminal_id, session_name, window_name, working_directory, command, new_session, watch, tag
        )
        this, tail = commands.target, list(commands.tail)
        source = self.source if watch else None
        if isinstance(source, PipePaneSource):
            tail += [";", *source.pipe_args(terminal_id, this)]
        reply = await self.run_reply(*commands.create, *tail)
        made = created_window(reply)
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
        await tmux_input.paste(self, window_id, text)

    async def send_keys(self, window_id: str, keys: list[str]) -> None:
        await tmux_input.send_keys(self, window_id, keys)

    async def respawn(self, window_id: str, working_directory: str, command: str) -> None:
        target = window_target(window_id)
        # -c is expanded as a format: literal() keeps a '#' in the path a '#'.
        await self.run("respawn-pane", "-k", "-t", target, "-c", literal(working_directory), command)
        await self.run("clear-history", "-t", target, check=False)

    async def send_bytes(self, window_id: str, data: bytes) -> None:
        await tmux_input.send_bytes(self, window_id, data)

    async def resize(self, window_id: str, cols: int, rows: int) -> None:
        await self.run("resize-window", "-t", window_target(window_id), "-x", str(int(cols)), "-y", str(int(rows)))

    async def capture(
        self,
        window_id: str,
        *,
        history: bool = False,
        escapes: bool = False,
        start: int | None = None,
        end: int | None = None,
    ) -> str:
        return await tmux_reading.capture(self, window_id, history=history, escapes=escapes, start=start, end=end)

    async def position(self, window_id: str) -> tuple[int, int] | None:
        return await tmux_reading.position(self, window_id)

    async def current_path(self, window_id: str) -> str | None:
        return await tmux_reading.current_path(self, window_id)

    async def kill_window(self, window_id: str) -> None:
        await self.run("kill-window", "-t", window_target(window_id), check=False)

    async def kill_session(self, session_name: str) -> None:
        # Windows also linked into the monitor session survive kill-session, so
        # kill them one by one first.
        out = await self.run("list-windows", "-t", f"={session_name}", "-F", "#{window_id}", check=False)
        for window_id in out.split():
            await self.kill_window(window_id)
        await self.run("kill-session", "-t", f"={session_name}", check=False)

    async def list_windows(self) -> list[WindowInfo]:
        return parse_window_list(await self.run("list-panes", "-a", "-F", LIST_FORMAT, check=False))

    async def session_exists(self, session_name: str) -> bool:
        return (await self.run_reply("has-session", "-t", f"={session_name}")).ok

    async def list_sessions(self) -> list[tuple[str, bool]]:
        out = await self.run("list-sessions", "-F", "#{session_name}\t#{session_attached}", check=False)
        rows = [line.split("\t") for line in out.splitlines() if "\t" in line]
        return [(name, attached not in ("", "0")) for name, attached in rows if name != MONITOR_SESSION]

    def attach_command(self, session_name: str) -> list[str]:
        return ["tmux", "-L", self.socket_name, "attach-session", "-t", session_name]
