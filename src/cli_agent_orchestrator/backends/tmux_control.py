"""One tmux control-mode client (`tmux -C`) per tmux server: the output source and the
command channel.

Output. tmux writes `%output %<pane> <bytes>` for every pane of the attached session (all
agent windows are linked into it), `%window-close` when a window goes, and
`%subscription-changed` for our `pane_dead` subscription, so pane deaths are seen without
a thread or a poll per terminal. What one read brings is coalesced into one bus event per
pane, and the reader yields to the loop after every read: a pane printing a flood neither
multiplies events nor holds the loop.

Commands. tmux answers each command of a `;` list with one `%begin … %end|%error` block,
stops the list at its first failing command, and adds a block for any command an
`if-shell` runs; so a reply cannot be matched by counting blocks. Every list we send is
framed by two marker commands (`display-message -p <begin>` first, `<end>` last) and the
replies between the markers are that list's. A block outside any frame, or a frame that
does not start with the expected marker, means the channel lost sync; a reply that does not
come within STALL_S means it stalled. Either way the client gives up (every command in
flight fails) and tells its owner, who reconnects or reports the tmux server gone. The same
protocol works unchanged over SSH, which is how remote hosts will be added.
"""
from __future__ import annotations

import asyncio
import codecs
import logging
import os
import re
import secrets
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from ..bus import EventBus
from ..events import ScreenSnapshot, TerminalExited, TerminalOutput, TerminalResized

log = logging.getLogger(__name__)

_OCTAL = re.compile(rb"\\([0-7]{3})")
READ_CHUNK = 256 * 1024
SUBSCRIBE_TIMEOUT_S = 5.0
# tmux answers a command list in microseconds to milliseconds (a 100k-line capture is the
# slowest we send); a reply this late means the channel is wedged.
STALL_S = 15.0
MAX_ORPHAN_PANES = 64
MAX_ORPHAN_BYTES = 256 * 1024
_LAYOUT_SIZE = re.compile(r"^[0-9a-f]{4},(\d+)x(\d+),")


def quote(arg: str) -> str:
    """Quote one argument for tmux's command parser: single quotes keep $, ~, ;, # literal."""
    return "'" + arg.replace("'", "'\\''") + "'"


def decode_output(data: bytes) -> bytes:
    """tmux escapes bytes < 0x20 and the backslash itself as \\ooo, so every backslash
    starts an octal escape: the C escape decoder reads exactly those (a flood is
    megabytes; a regex callback per escape costs ten times more)."""
    try:
        return codecs.escape_decode(data)[0]
    except ValueError:  # not tmux's escaping after all: decode what is well formed
        return _OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), data)


@dataclass(frozen=True)
class Reply:
    """What tmux answered to one command list."""

    ok: bool  # every command ran and succeeded
    blocks: list[list[str]]  # the output lines of each answered command, in order
    error: str = ""  # the failing command's message

    @property
    def text(self) -> str:
        return "\n".join(line for block in self.blocks for line in block)


class PaneMap:
    """Which pane and window belong to which terminal. Owned by the backend, so that a
    reconnected client keeps watching the same panes."""

    def __init__(self) -> None:
        self.terminal_of_pane: dict[str, str] = {}
        self.terminal_of_window: dict[str, str] = {}
        self.pane_of_terminal: dict[str, str] = {}
        self.window_of_terminal: dict[str, str] = {}
        self.reported_dead: set[str] = set()

    def add(self, terminal_id: str, pane_id: str, window_id: str) -> None:
        self.remove(terminal_id)
        self.terminal_of_pane[pane_id] = terminal_id
        self.terminal_of_window[window_id] = terminal_id
        self.pane_of_terminal[terminal_id] = pane_id
        self.window_of_terminal[terminal_id] = window_id
        self.reported_dead.discard(terminal_id)

    def remove(self, terminal_id: str) -> None:
        pane = self.pane_of_terminal.pop(terminal_id, None)
        window = self.window_of_terminal.pop(terminal_id, None)
        if pane is not None:
            self.terminal_of_pane.pop(pane, None)
        if window is not None:
            self.terminal_of_window.pop(window, None)

    def report_dead_once(self, terminal_id: str) -> bool:
        if terminal_id in self.reported_dead:
            return False
        self.reported_dead.add(terminal_id)
        return True


@dataclass
class _Frame:
    begin: list[str]
    end: list[str]
    future: asyncio.Future
    sent_at: float
    # Called from the reader the moment the reply is complete, before any later output
    # is published: a snapshot lands exactly where tmux took it in the stream.
    on_reply: Callable[[Reply], None] | None = None
    opened: bool = False
    blocks: list[list[str]] = field(default_factory=list)


class _ChannelBroken(Exception):
    pass


class ControlClient:
    """`on_lost(reason)` is called once when the channel ends for any reason but `stop()`."""

    def __init__(self, tmux_argv: list[str], session: str, bus: EventBus, panes: PaneMap,
                 on_lost: Callable[[str], None] | None = None, stall_s: float = STALL_S):
        self.stall_s = stall_s
        self.tmux_argv = tmux_argv
        self.session = session
        self.bus = bus
        self.panes = panes
        self.on_lost = on_lost
        self.proc: asyncio.subprocess.Process | None = None
        self.alive = False
        self._reader: asyncio.Task | None = None
        self._attached = asyncio.Event()
        self._stopping = False
        self._lost_reason: str | None = None
        # A marker no pane text can forge: agents never see this client's nonce.
        self._nonce = secrets.token_hex(8)
        self._seq = 0
        self._frames: deque[_Frame] = deque()
        self._stall_timer: asyncio.TimerHandle | None = None
        # reader state across reads
        self._in_block = False
        self._ours = False
        self._block_id = b""
        self._block: list[bytes] = []
        self._pending_output: dict[str, bytearray] = {}
        self._orphans: dict[str, bytearray] = {}  # output of panes not (yet) watched

    # --- watching -------------------------------------------------------------------
    def watch(self, pane_id: str, terminal_id: str, window_id: str) -> None:
        self.panes.add(terminal_id, pane_id, window_id)
        # Output that arrived before we knew the pane (it can beat the reply to the
        # command that created it) is published first, so nothing is lost or reordered.
        early = self._orphans.pop(pane_id, None)
        if early:
            self.bus.publish(TerminalOutput(terminal_id, bytes(early)))

    def unwatch(self, terminal_id: str) -> None:
        self.panes.remove(terminal_id)

    # --- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        env = dict(os.environ)
        env.pop("TMUX", None)
        self.proc = await asyncio.create_subprocess_exec(
            *self.tmux_argv, "-C", "attach-session", "-t", f"={self.session}",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, env=env)
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="tmux-control")
        try:
            await asyncio.wait_for(self._attached.wait(), SUBSCRIBE_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.stop()
            raise ConnectionError(f"tmux control client did not attach to {self.session} "
                                  f"within {SUBSCRIBE_TIMEOUT_S:.0f}s") from None
        # Pane deaths arrive as subscription changes (tmux checks them about once a second).
        reply = await self.command(["refresh-client", "-B", "cao-dead:%*:#{pane_dead} #{pane_dead_status}"])
        if not reply.ok:
            log.error("tmux refused the pane subscription (%s); pane deaths will go unseen", reply.error)

    async def stop(self) -> None:
        self._stopping = True
        self.alive = False
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        self._fail_frames("tmux control client stopped")
        await self._end_process()

    async def _end_process(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()  # detaches the control client; the tmux server lives on
            await asyncio.wait_for(proc.wait(), 2)
        except (asyncio.TimeoutError, BrokenPipeError, ConnectionResetError):
            proc.kill()
            await proc.wait()

    def _lose(self, reason: str) -> None:
        """The channel is unusable: fail what waits, end the process, tell the owner once."""
        if self._lost_reason is not None or self._stopping:
            return
        self._lost_reason = reason
        self.alive = False
        self._fail_frames(f"tmux control channel lost: {reason}")
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()  # a desynced or stalled client must not answer anyone again
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        log.warning("tmux control client lost: %s", reason)
        if self.on_lost is not None:
            self.on_lost(reason)

    # --- commands -------------------------------------------------------------------
    async def command(self, args: list[str]) -> Reply:
        """Run a tmux command list (tokens; ";" separates commands) over this connection."""
        return await self._send(args)

    def _send(self, args: list[str], on_reply: Callable[[Reply], None] | None = None) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        if self.proc is None or self.proc.stdin is None or self._lost_reason is not None:
            future.set_result(Reply(False, [], "tmux control client is not connected"))
            return future
        self._seq += 1
        begin, end = f"cao-{self._nonce}-{self._seq}-begin", f"cao-{self._nonce}-{self._seq}-end"
        self._frames.append(_Frame([begin], [end], future, loop.time(), on_reply))
        line = " ".join(a if a == ";" else quote(a) for a in args)
        try:
            self.proc.stdin.write(f"display-message -p {begin} ; {line} ; display-message -p {end}\n".encode())
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as exc:
            self._lose(f"writing to tmux failed: {exc}")
        self._arm_stall_timer()
        return future

    def request_snapshot(self, terminal_id: str) -> bool:
        """Ask tmux for the pane's screen; it is published as a ScreenSnapshot at the
        point of the output stream where tmux took it, so no byte is lost or doubled."""
        pane = self.panes.pane_of_terminal.get(terminal_id)
        if pane is None or not self.alive:
            return False

        def publish(reply: Reply) -> None:
            if not reply.ok or len(reply.blocks) != 2:
                return
            capture, cursor = reply.blocks
            parts = cursor[0].split() if cursor else []
            x, y = (int(parts[0]), int(parts[1])) if len(parts) == 2 and all(p.isdigit() for p in parts) else (0, 0)
            self.bus.publish(ScreenSnapshot(terminal_id, "\n".join(capture), x, y))

        self._send(["capture-pane", "-p", "-e", "-t", pane, ";",
                    "display-message", "-p", "-t", pane, "#{cursor_x} #{cursor_y}"], publish)
        return True

    def _fail_frames(self, reason: str) -> None:
        while self._frames:
            frame = self._frames.popleft()
            if not frame.future.done():
                frame.future.set_result(Reply(False, frame.blocks, reason))

    def _arm_stall_timer(self) -> None:
        if self._stall_timer is None and self._frames:
            self._stall_timer = asyncio.get_running_loop().call_later(self.stall_s, self._check_stall)

    def _check_stall(self) -> None:
        self._stall_timer = None
        if not self._frames:
            return
        age = asyncio.get_running_loop().time() - self._frames[0].sent_at
        if age >= self.stall_s:
            self._lose(f"tmux did not answer a command within {self.stall_s:g}s")
        else:
            self._stall_timer = asyncio.get_running_loop().call_later(self.stall_s - age, self._check_stall)

    # --- reading --------------------------------------------------------------------
    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        partial = b""
        reason = "the tmux control client ended (the tmux server may have exited)"
        try:
            while True:
                chunk = await stdout.read(READ_CHUNK)
                if not chunk:
                    break
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    self._line(line)
                self._flush_output()
                # A read returns at once while data is buffered: yield, so that a flood
                # does not hold the loop for as long as tmux can write.
                await asyncio.sleep(0)
        except _ChannelBroken as exc:
            reason = str(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the reader must report, not die silently
            log.exception("tmux control client reader failed")
            reason = f"the tmux control reader failed: {exc}"
        self._flush_output()
        self._lose(reason)

    def _line(self, line: bytes) -> None:
        if self._in_block:
            # Only the exact closing line ends a block: block content is pane text,
            # which may itself contain "%end …".
            if line in (b"%end " + self._block_id, b"%error " + self._block_id):
                self._in_block = False
                if self._ours:
                    self._on_block([b.decode("utf-8", "replace") for b in self._block],
                                   line.startswith(b"%end "))
                self._block = []
            elif self._ours:
                self._block.append(line)
            return
        if line.startswith(b"%output "):
            self._on_output(line)
            return
        self._flush_output()  # keep every other fact in order with the output before it
        if line.startswith(b"%begin "):
            self._block_id = line[len(b"%begin "):]
            # flags 1: a command of ours (0: the attach itself, or tmux's own)
            self._in_block, self._ours = True, line.endswith(b" 1")
        elif line.startswith(b"%session-changed ") and not self._attached.is_set():
            self.alive = True
            self._attached.set()
        elif line.startswith(b"%subscription-changed "):
            self._on_subscription(line)
        elif line.startswith((b"%window-close ", b"%unlinked-window-close ")):
            self._on_window_close(line)
        elif line.startswith(b"%layout-change "):
            self._on_layout(line)
        elif line.startswith(b"%exit"):
            why = line[len(b"%exit"):].strip().decode("utf-8", "replace")
            raise _ChannelBroken(f"tmux ended the control client{': ' + why if why else ''}")

    def _on_block(self, lines: list[str], ok: bool) -> None:
        frame = self._frames[0] if self._frames else None
        if frame is None:
            raise _ChannelBroken("tmux answered a command nobody is waiting for (channel out of sync)")
        if not frame.opened:
            if ok and lines == frame.begin:
                frame.opened = True
                return
            if not ok:  # the whole line failed to parse: none of it ran
                self._complete(Reply(False, [], "\n".join(lines)))
                return
            raise _ChannelBroken(f"expected the start of reply {frame.begin[0]}, got {lines[:1]!r} "
                                 "(channel out of sync)")
        if ok and lines == frame.end:
            self._complete(Reply(True, frame.blocks))
        elif not ok:  # tmux stops a list at its first failing command: this is the last block
            self._complete(Reply(False, frame.blocks, "\n".join(lines)))
        else:
            frame.blocks.append(lines)

    def _complete(self, reply: Reply) -> None:
        frame = self._frames.popleft()
        if frame.on_reply is not None:
            try:
                frame.on_reply(reply)
            except Exception:  # one caller's bug must not break the channel for everyone
                log.exception("tmux reply handler failed")
        if not frame.future.done():
            frame.future.set_result(reply)

    def _on_output(self, line: bytes) -> None:
        # "%output %<pane> <escaped bytes>": kept escaped until the flush decodes the lot
        end = line.find(b" ", 8)
        if end < 0 or end + 1 >= len(line):
            return
        pane_id = line[8:end].decode()
        data = line[end + 1:]
        if pane_id in self.panes.terminal_of_pane:
            self._pending_output.setdefault(pane_id, bytearray()).extend(data)
        elif pane_id in self._orphans or len(self._orphans) < MAX_ORPHAN_PANES:
            buf = self._orphans.setdefault(pane_id, bytearray())
            if len(buf) < MAX_ORPHAN_BYTES:
                buf += decode_output(data)

    def _flush_output(self) -> None:
        if not self._pending_output:
            return
        pending, self._pending_output = self._pending_output, {}
        for pane_id, data in pending.items():
            terminal_id = self.panes.terminal_of_pane.get(pane_id)
            if terminal_id is not None:
                self.bus.publish(TerminalOutput(terminal_id, decode_output(bytes(data))))

    def _on_subscription(self, line: bytes) -> None:
        # %subscription-changed NAME $S @W IDX %P : VALUE
        parts = line.decode(errors="replace").split(" ")
        if len(parts) < 8 or parts[1] != "cao-dead":
            return
        value = " ".join(parts[7:]).split()
        terminal_id = self.panes.terminal_of_pane.get(parts[5])
        if terminal_id is None or not value or value[0] != "1" or not self.panes.report_dead_once(terminal_id):
            return
        code = int(value[1]) if len(value) > 1 and value[1].lstrip("-").isdigit() else None
        self.bus.publish(TerminalExited(terminal_id, exit_code=code))

    def _on_layout(self, line: bytes) -> None:
        # %layout-change @W <layout> <visible layout> <flags>; layout = "csum,WxH,x,y,…"
        parts = line.decode(errors="replace").split(" ")
        terminal_id = self.panes.terminal_of_window.get(parts[1]) if len(parts) > 2 else None
        size = _LAYOUT_SIZE.match(parts[2]) if terminal_id else None
        if terminal_id and size:
            self.bus.publish(TerminalResized(terminal_id, int(size.group(1)), int(size.group(2))))

    def _on_window_close(self, line: bytes) -> None:
        window = line.split(b" ")[1].decode()
        terminal_id = self.panes.terminal_of_window.get(window)
        if terminal_id is not None and self.panes.report_dead_once(terminal_id):
            self.bus.publish(TerminalExited(terminal_id, window_gone=True))

