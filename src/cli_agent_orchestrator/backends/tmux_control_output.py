"""What a tmux control client reports about panes, published on the bus: `%output` as
TerminalOutput (coalesced per pane per read), pane deaths and closed windows as
TerminalExited, layout changes as TerminalResized.
"""

from __future__ import annotations

import codecs
import re

from ..bus import EventBus
from ..events import TerminalExited, TerminalOutput, TerminalResized
from .tmux_pane_watch import zombie_exit_code
from .tmux_panes import PaneMap

_OCTAL = re.compile(rb"\\([0-7]{3})")
_LAYOUT_SIZE = re.compile(r"^[0-9a-f]{4},(\d+)x(\d+),")
# Output of panes not (yet) watched is kept, within these bounds, for the watch that follows.
MAX_ORPHAN_PANES = 64
MAX_ORPHAN_BYTES = 256 * 1024
# The pane-death subscription the client asks for; `subscription` reads its changes.
DEATH_SUBSCRIPTION = "cao-dead:%*:#{pane_dead}/#{pane_dead_status}/#{pane_pid}"


def decode_output(data: bytes) -> bytes:
    """tmux escapes bytes < 0x20 and the backslash itself as \\ooo, so every backslash
    starts an octal escape: the C escape decoder reads exactly those (a flood is
    megabytes; a regex callback per escape costs ten times more)."""
    try:
        return codecs.escape_decode(data)[0]
    except ValueError:  # not tmux's escaping after all: decode what is well formed
        return _OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), data)


class ControlOutput:
    """Notification lines of one control client → bus events, in stream order."""

    def __init__(self, bus: EventBus, panes: PaneMap) -> None:
        self.bus = bus
        self.panes = panes
        self._pending: dict[str, bytearray] = {}
        self._orphans: dict[str, bytearray] = {}  # output of panes not (yet) watched

    def adopt(self, pane_id: str, terminal_id: str) -> None:
        """`pane_id` is now watched as `terminal_id`."""
        # Output that arrived before we knew the pane (it can beat the reply to the
        # command that created it) is published first, so nothing is lost or reordered.
        early = self._orphans.pop(pane_id, None)
        if early:
            self.bus.publish(TerminalOutput(terminal_id, bytes(early)))

    def output(self, line: bytes) -> None:
        # "%output %<pane> <escaped bytes>": kept escaped until the flush decodes the lot
        end = line.find(b" ", 8)
        if end < 0 or end + 1 >= len(line):
            return
        pane_id = line[8:end].decode()
        data = line[end + 1 :]
        if pane_id in self.panes.terminal_of_pane:
            self._pending.setdefault(pane_id, bytearray()).extend(data)
        elif pane_id in self._orphans or len(self._orphans) < MAX_ORPHAN_PANES:
            buf = self._orphans.setdefault(pane_id, bytearray())
            if len(buf) < MAX_ORPHAN_BYTES:
                buf += decode_output(data)

    def flush(self) -> None:
        """Publish the output gathered since the last flush: one event per pane."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for pane_id, data in pending.items():
            terminal_id = self.panes.terminal_of_pane.get(pane_id)
            if terminal_id is not None:
                self.bus.publish(TerminalOutput(terminal_id, decode_output(bytes(data))))

    def subscription(self, line: bytes) -> None:
        # %subscription-changed NAME $S @W IDX %P : VALUE
        parts = line.decode(errors="replace").split(" ")
        if len(parts) < 8 or parts[1] != "cao-dead":
            return
        value = " ".join(parts[7:]).strip().split("/")  # dead/status/pid
        terminal_id = self.panes.terminal_of_pane.get(parts[5])
        if terminal_id is None or value[0] != "1" or not self.panes.report_dead_once(terminal_id):
            return
        status, pid = (value + ["", ""])[1:3]
        code = int(status) if status.lstrip("-").isdigit() else None
        if code is None and pid.isdigit():
            code = zombie_exit_code(int(pid))  # tmux did not reap it (yet): the kernel knows
        self.bus.publish(TerminalExited(terminal_id, exit_code=code))

    def layout(self, line: bytes) -> None:
        # %layout-change @W <layout> <visible layout> <flags>; layout = "csum,WxH,x,y,…"
        parts = line.decode(errors="replace").split(" ")
        terminal_id = self.panes.terminal_of_window.get(parts[1]) if len(parts) > 2 else None
        size = _LAYOUT_SIZE.match(parts[2]) if terminal_id else None
        if terminal_id and size:
            self.bus.publish(TerminalResized(terminal_id, int(size.group(1)), int(size.group(2))))

    def window_close(self, line: bytes) -> None:
        window = line.split(b" ")[1].decode()
        terminal_id = self.panes.terminal_of_window.get(window)
        if terminal_id is not None and self.panes.report_dead_once(terminal_id):
            self.bus.publish(TerminalExited(terminal_id, window_gone=True))
