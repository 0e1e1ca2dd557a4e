"""One tmux control-mode client (`tmux -C`) per tmux server: the output source.

tmux writes `%output %<pane> <bytes>` for every pane of the attached session
(all agent windows are linked into it), `%window-close` when a window goes, and
`%subscription-changed` for the `pane_dead` subscription we register, so pane
deaths are seen without a thread or a poll per terminal. The same protocol works
unchanged over SSH, which is how remote hosts will be added.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
from collections import deque
from typing import Callable

from ..bus import EventBus
from ..events import ScreenSnapshot, TerminalExited, TerminalOutput, TerminalResized

log = logging.getLogger(__name__)

_OCTAL = re.compile(rb"\\([0-7]{3})")
STREAM_LIMIT = 64 * 1024 * 1024
SUBSCRIBE_TIMEOUT_S = 5.0
MAX_ORPHAN_PANES = 64
MAX_ORPHAN_BYTES = 256 * 1024
_LAYOUT_SIZE = re.compile(r"^[0-9a-f]{4},(\d+)x(\d+),")


def quote(arg: str) -> str:
    """Quote one argument for tmux's command parser: single quotes keep $, ~, ;, # literal."""
    return "'" + arg.replace("'", "'\\''") + "'"


def decode_output(data: bytes) -> bytes:
    """tmux escapes bytes < 0x20 and the backslash itself as \\ooo."""
    return _OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), data)


class ControlClient:
    def __init__(self, tmux_argv: list[str], session: str, bus: EventBus):
        self.tmux_argv = tmux_argv
        self.session = session
        self.bus = bus
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._pane_to_terminal: dict[str, str] = {}
        self._window_to_terminal: dict[str, str] = {}
        self._terminal_to_pane: dict[str, str] = {}
        self._reported_dead: set[str] = set()
        # One callback per reply block we expect, in the order tmux answers (FIFO).
        self._replies: deque[Callable[[list[bytes], bool], None]] = deque()
        self._orphans: dict[str, bytearray] = {}  # output of panes not (yet) watched
        self.alive = False

    def watch(self, pane_id: str, terminal_id: str, window_id: str) -> None:
        # Output that arrived before we knew the pane (it can beat the reply to the
        # command that created it) is published first, so nothing is lost or reordered.
        early = self._orphans.pop(pane_id, None)
        if early:
            self.bus.publish(TerminalOutput(terminal_id, bytes(early)))
        self._pane_to_terminal[pane_id] = terminal_id
        self._window_to_terminal[window_id] = terminal_id
        self._terminal_to_pane[terminal_id] = pane_id

    def unwatch(self, terminal_id: str) -> None:
        pane = self._terminal_to_pane.pop(terminal_id, None)
        self._pane_to_terminal.pop(pane or "", None)
        for window, term in list(self._window_to_terminal.items()):
            if term == terminal_id:
                del self._window_to_terminal[window]

    async def start(self) -> None:
        env = dict(os.environ)
        env.pop("TMUX", None)
        self.proc = await asyncio.create_subprocess_exec(
            *self.tmux_argv, "-C", "attach-session", "-t", f"={self.session}",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, env=env, limit=STREAM_LIMIT)
        self.alive = True
        self._subscribed = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="tmux-control")
        try:
            await asyncio.wait_for(self._subscribed.wait(), SUBSCRIBE_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.error("tmux control client did not attach within %ss; pane deaths will go unseen",
                      SUBSCRIBE_TIMEOUT_S)

    def _subscribe(self) -> None:
        """Pane deaths arrive as subscription changes (tmux checks them about once a second).

        Sent only once the client is attached: before that tmux answers "no current client".
        """
        self._send("refresh-client -B 'cao-dead:%*:#{pane_dead} #{pane_dead_status}'",
                   lambda lines, ok: ok or log.error("tmux refused the pane subscription: %s", lines))
        self._subscribed.set()

    def _send(self, command_line: str, *on_reply: Callable[[list[bytes], bool], None]) -> None:
        """Write one command line; `on_reply` gets each of its reply blocks in turn."""
        assert self.proc is not None and self.proc.stdin is not None
        self._replies.extend(on_reply)
        self.proc.stdin.write(command_line.encode() + b"\n")

    async def command(self, args: list[str]) -> tuple[bool, str]:
        """Run a tmux command list (tokens; ";" separates commands) over this
        connection: no process per command. Returns (all succeeded, output)."""
        count = 1 + sum(1 for a in args if a == ";")
        future: asyncio.Future[tuple[bool, str]] = asyncio.get_running_loop().create_future()
        outputs: list[bytes] = []
        status = {"ok": True, "left": count}

        def on_block(lines: list[bytes], ok: bool) -> None:
            outputs.extend(lines)
            status["ok"] = status["ok"] and ok
            status["left"] -= 1
            if status["left"] == 0 and not future.done():
                future.set_result((bool(status["ok"]), b"\n".join(outputs).decode("utf-8", "replace")))

        self._send(" ".join(a if a == ";" else quote(a) for a in args), *([on_block] * count))
        return await future

    def request_snapshot(self, terminal_id: str) -> bool:
        """Ask tmux for the pane's screen; it is published as a ScreenSnapshot at the
        point of the output stream where tmux took it, so no byte is lost or doubled."""
        pane = self._terminal_to_pane.get(terminal_id)
        if pane is None or not self.alive:
            return False
        captured: list[bytes] = []

        def on_capture(lines: list[bytes], ok: bool) -> None:
            captured.extend(lines if ok else [])

        def on_cursor(lines: list[bytes], ok: bool) -> None:
            parts = lines[0].split() if ok and lines else []
            x, y = (int(parts[0]), int(parts[1])) if len(parts) == 2 and all(p.isdigit() for p in parts) else (0, 0)
            if ok:
                text = b"\n".join(captured).decode("utf-8", "replace")
                self.bus.publish(ScreenSnapshot(terminal_id, text, x, y))

        self._send(f"capture-pane -p -e -t {pane} ; display-message -p -t {pane} '#{{cursor_x}} #{{cursor_y}}'",
                   on_capture, on_cursor)
        return True

    async def stop(self) -> None:
        self.alive = False
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self.proc is not None and self.proc.returncode is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # detaches the control client; the tmux server lives on
                await asyncio.wait_for(self.proc.wait(), 2)
            except (asyncio.TimeoutError, BrokenPipeError, ConnectionResetError):
                self.proc.kill()
                await self.proc.wait()

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        in_block = False
        ours = False  # the block answers a command of ours (flags 1), not the attach
        block: list[bytes] = []
        block_id = b""
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                line = line.rstrip(b"\n")
                if in_block:
                    # Only the exact closing line ends a block: block content is pane
                    # text, which may itself contain "%end …".
                    if line in (b"%end " + block_id, b"%error " + block_id):
                        in_block = False
                        if ours and self._replies:
                            self._replies.popleft()(block, line.startswith(b"%end "))
                        block = []
                    elif ours:
                        block.append(line)
                    continue
                if line.startswith(b"%output "):
                    self._on_output(line)
                elif line.startswith(b"%begin "):
                    block_id = line[len(b"%begin "):]
                    in_block, ours = True, line.endswith(b" 1")
                elif line.startswith(b"%session-changed ") and not self._subscribed.is_set():
                    self._subscribe()
                elif line.startswith(b"%subscription-changed "):
                    self._on_subscription(line)
                elif line.startswith((b"%window-close ", b"%unlinked-window-close ")):
                    self._on_window_close(line)
                elif line.startswith(b"%layout-change "):
                    self._on_layout(line)
                elif line.startswith(b"%exit"):
                    break
        except asyncio.CancelledError:
            raise
        except Exception:  # the reader must report, not die silently
            log.exception("tmux control client reader failed")
        finally:
            while self._replies:  # nobody will answer these now
                self._replies.popleft()([b"tmux control client ended"], False)
            if self.alive:
                log.warning("tmux control client ended; terminals of this tmux server are unwatched")
            self.alive = False

    def _on_output(self, line: bytes) -> None:
        _, pane, data = (line.split(b" ", 2) + [b""])[:3]
        pane_id = pane.decode()
        terminal_id = self._pane_to_terminal.get(pane_id)
        if not data:
            return
        if terminal_id is not None:
            self.bus.publish(TerminalOutput(terminal_id, decode_output(data)))
        elif pane_id in self._orphans or len(self._orphans) < MAX_ORPHAN_PANES:
            buf = self._orphans.setdefault(pane_id, bytearray())
            if len(buf) < MAX_ORPHAN_BYTES:
                buf += decode_output(data)

    def _on_subscription(self, line: bytes) -> None:
        # %subscription-changed NAME $S @W IDX %P : VALUE
        parts = line.decode(errors="replace").split(" ")
        if len(parts) < 8 or parts[1] != "cao-dead":
            return
        pane = parts[5]
        value = " ".join(parts[7:]).split()
        terminal_id = self._pane_to_terminal.get(pane)
        if terminal_id is None or not value or value[0] != "1" or terminal_id in self._reported_dead:
            return
        self._reported_dead.add(terminal_id)
        code = int(value[1]) if len(value) > 1 and value[1].lstrip("-").isdigit() else None
        self.bus.publish(TerminalExited(terminal_id, exit_code=code))

    def _on_layout(self, line: bytes) -> None:
        # %layout-change @W <layout> <visible layout> <flags>; layout = "csum,WxH,x,y,…"
        parts = line.decode(errors="replace").split(" ")
        terminal_id = self._window_to_terminal.get(parts[1]) if len(parts) > 2 else None
        size = _LAYOUT_SIZE.match(parts[2]) if terminal_id else None
        if terminal_id and size:
            self.bus.publish(TerminalResized(terminal_id, int(size.group(1)), int(size.group(2))))

    def _on_window_close(self, line: bytes) -> None:
        window = line.split(b" ")[1].decode()
        terminal_id = self._window_to_terminal.get(window)
        if terminal_id is not None and terminal_id not in self._reported_dead:
            self._reported_dead.add(terminal_id)
            self.bus.publish(TerminalExited(terminal_id, window_gone=True))
