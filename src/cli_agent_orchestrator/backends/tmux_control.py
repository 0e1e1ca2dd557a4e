"""One tmux control-mode client (`tmux -C`) per tmux server: the output source and the
command channel. This module runs the connection: the process, its reader and its end.

Output. tmux writes `%output %<pane> <bytes>` for every pane of the attached session (all
agent windows are linked into it), `%window-close` when a window goes, and
`%subscription-changed` for our `pane_dead` subscription, so pane deaths are seen without
a thread or a poll per terminal (tmux_control_output.py publishes them). What one read
brings is coalesced into one bus event per pane, and the reader yields to the loop after
every read: a pane printing a flood neither multiplies events nor holds the loop.

Commands. Every command list is framed so its reply reaches its caller
(tmux_control_replies.py). A caller waits COMMAND_DEADLINE_S for its reply, then is told
that tmux does not answer (BackendNotAnswering); the list stays in flight, since tmux may
still run it. A channel that lost sync, or a reply that does not come within STALL_S, makes
the client give up (every command in flight fails) and tell its owner, who reconnects or
reports the tmux server gone. The same protocol works unchanged over SSH, which is how
remote hosts will be added.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..bus import EventBus
from ..errors import BackendNotAnswering
from ..events import ScreenSnapshot
from .tmux_commands import SNAPSHOT_FORMAT, Reply, cursor_and_title
from .tmux_control_output import DEATH_SUBSCRIPTION, ControlOutput
from .tmux_control_replies import ChannelBroken, PendingReplies
from .tmux_panes import PaneMap
from .tmux_process import client_env

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024
SUBSCRIBE_TIMEOUT_S = 5.0
# tmux answers a command list in microseconds to milliseconds (a 100k-line capture is the
# slowest we send); a reply this late means the channel is wedged.
STALL_S = 15.0
# How long a caller waits for a reply before it is answered that tmux does not answer (a
# stopped or overloaded server): a thousand times what tmux takes, well short of STALL_S.
COMMAND_DEADLINE_S = 5.0
# What `probe` asks tmux: a command with no effect, answered at once by a live server.
_PROBE = ["display-message", "-p", "cao-probe"]


class ControlClient:
    """`on_lost(reason)` is called once when the channel ends for any reason but `stop()`."""

    def __init__(
        self,
        attach_argv: list[str],
        session: str,
        bus: EventBus,
        panes: PaneMap,
        on_lost: Callable[[str], None] | None = None,
        stall_s: float = STALL_S,
    ):
        self.stall_s = stall_s
        self.attach_argv = attach_argv  # a tmux client that runs `-C attach-session` (maybe over ssh)
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
        self._replies = PendingReplies()
        self._output = ControlOutput(bus, panes)
        self._stall_timer: asyncio.TimerHandle | None = None
        self._probe: asyncio.Future | None = None

    # --- watching -------------------------------------------------------------------
    def watch(self, pane_id: str, terminal_id: str, window_id: str) -> None:
        self.panes.add(terminal_id, pane_id, window_id)
        self._output.adopt(pane_id, terminal_id)

    def unwatch(self, terminal_id: str) -> None:
        self.panes.remove(terminal_id)

    # --- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.attach_argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=client_env(),
        )
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="tmux-control")
        try:
            await asyncio.wait_for(self._attached.wait(), SUBSCRIBE_TIMEOUT_S)
        except TimeoutError:
            await self.stop()
            raise ConnectionError(
                f"tmux control client did not attach to {self.session} within {SUBSCRIBE_TIMEOUT_S:.0f}s"
            ) from None
        # Pane deaths arrive as subscription changes (tmux checks them about once a second).
        reply = await self.command(["refresh-client", "-B", DEATH_SUBSCRIPTION])
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
        self._replies.fail_all("tmux control client stopped")
        await self._end_process()

    async def _end_process(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()  # detaches the control client; the tmux server lives on
            await asyncio.wait_for(proc.wait(), 2)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            proc.kill()
            await proc.wait()

    def _lose(self, reason: str) -> None:
        """The channel is unusable: fail what waits, end the process, tell the owner once."""
        if self._lost_reason is not None or self._stopping:
            return
        self._lost_reason = reason
        self.alive = False
        self._replies.fail_all(f"tmux control channel lost: {reason}")
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()  # a desynced or stalled client must not answer anyone again
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        log.warning("tmux control client lost: %s", reason)
        if self.on_lost is not None:
            self.on_lost(reason)

    # --- commands -------------------------------------------------------------------
    async def command(self, args: list[str], deadline_s: float = COMMAND_DEADLINE_S) -> Reply:
        """Run a tmux command list (tokens; ";" separates commands) over this connection.
        Raises BackendNotAnswering when tmux has not answered within `deadline_s`."""
        future = self._send(args)
        try:
            return await asyncio.wait_for(asyncio.shield(future), deadline_s)
        except TimeoutError:
            raise BackendNotAnswering(
                f"tmux did not answer within {deadline_s:g}s (its server is stopped or overloaded; "
                f"see /health); what was sent may still take effect when it answers"
            ) from None

    async def probe(self, deadline_s: float) -> str | None:
        """None if tmux answers a no-op within `deadline_s`, else why not. At most one probe is
        in flight: a stopped server does not collect a queue of them."""
        if self._probe is None or self._probe.done():
            self._probe = self._send(_PROBE)
        try:
            reply = await asyncio.wait_for(asyncio.shield(self._probe), deadline_s)
        except TimeoutError:
            return f"tmux does not answer (no reply within {deadline_s:g}s; is its server stopped?)"
        return None if reply.ok else reply.error.strip() or "tmux refused a no-op command"

    def _send(self, args: list[str], on_reply: Callable[[Reply], None] | None = None) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        if self.proc is None or self.proc.stdin is None or self._lost_reason is not None:
            future.set_result(Reply(False, [], "tmux control client is not connected"))
            return future
        line = self._replies.frame(args, future, loop.time(), on_reply)
        try:
            self.proc.stdin.write(line)
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
            x, y, title = cursor_and_title(cursor[0] if cursor else "")
            self.bus.publish(ScreenSnapshot(terminal_id, "\n".join(capture), x, y, title))

        self._send(
            [
                "capture-pane",
                "-p",
                "-e",
                "-t",
                pane,
                ";",
                "display-message",
                "-p",
                "-t",
                pane,
                SNAPSHOT_FORMAT,
            ],
            publish,
        )
        return True

    def _arm_stall_timer(self) -> None:
        if self._stall_timer is None and self._replies:
            self._stall_timer = asyncio.get_running_loop().call_later(self.stall_s, self._check_stall)

    def _check_stall(self) -> None:
        self._stall_timer = None
        if not self._replies:
            return
        age = asyncio.get_running_loop().time() - self._replies.oldest_sent_at()
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
                self._output.flush()
                # A read returns at once while data is buffered: yield, so that a flood
                # does not hold the loop for as long as tmux can write.
                await asyncio.sleep(0)
        except ChannelBroken as exc:
            reason = str(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the reader must report, not die silently
            log.exception("tmux control client reader failed")
            reason = f"the tmux control reader failed: {exc}"
        self._output.flush()
        self._lose(reason)

    def _line(self, line: bytes) -> None:
        if self._replies.in_block:
            self._replies.block_line(line)
            return
        if line.startswith(b"%output "):
            self._output.output(line)
            return
        self._output.flush()  # keep every other fact in order with the output before it
        if line.startswith(b"%begin "):
            self._replies.begin_block(line)
        elif line.startswith(b"%session-changed ") and not self._attached.is_set():
            self.alive = True
            self._attached.set()
        elif line.startswith(b"%subscription-changed "):
            self._output.subscription(line)
        elif line.startswith((b"%window-close ", b"%unlinked-window-close ")):
            self._output.window_close(line)
        elif line.startswith(b"%layout-change "):
            self._output.layout(line)
        elif line.startswith(b"%exit"):
            why = line[len(b"%exit") :].strip().decode("utf-8", "replace")
            raise ChannelBroken(f"tmux ended the control client{': ' + why if why else ''}")
