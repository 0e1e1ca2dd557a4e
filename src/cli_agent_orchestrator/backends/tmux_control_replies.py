"""Command lists over a tmux control channel, framed so that every reply reaches the caller
that sent the list, and the `%begin … %end|%error` blocks read back into those replies.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .tmux_commands import Parsed, Reply, quote

log = logging.getLogger(__name__)


class ChannelBroken(Exception):
    """The control channel is out of sync or ended: no later block can be trusted."""


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


class PendingReplies:
    """The command lists in flight on one channel, oldest first, and the block being read.

    tmux answers each command of a `;` list with one `%begin … %end|%error` block, stops the
    list at its first failing command, and adds a block for any command an `if-shell` runs;
    so a reply cannot be matched by counting blocks. Every list we send is framed by two
    marker commands (`display-message -p <begin>` first, `<end>` last) and the replies
    between the markers are that list's. A block outside any frame, or a frame that does
    not start with the expected marker, means the channel lost sync: ChannelBroken.
    """

    def __init__(self) -> None:
        # A marker no pane text can forge: agents never see this client's nonce.
        self._nonce = secrets.token_hex(8)
        self._seq = 0
        self._frames: deque[_Frame] = deque()
        # reader state across reads
        self.in_block = False
        self._ours = False
        self._block_id = b""
        self._block: list[bytes] = []

    def __bool__(self) -> bool:
        return bool(self._frames)

    def oldest_sent_at(self) -> float:
        return self._frames[0].sent_at

    def frame(
        self, args: list[str], future: asyncio.Future, sent_at: float, on_reply: Callable[[Reply], None] | None = None
    ) -> bytes:
        """The line to write for command list `args` (tokens; ";" separates commands); its
        reply will complete `future`."""
        self._seq += 1
        begin, end = f"cao-{self._nonce}-{self._seq}-begin", f"cao-{self._nonce}-{self._seq}-end"
        self._frames.append(_Frame([begin], [end], future, sent_at, on_reply))
        line = " ".join(a if a == ";" or isinstance(a, Parsed) else quote(a) for a in args)
        return f"display-message -p {begin} ; {line} ; display-message -p {end}\n".encode()

    def fail_all(self, reason: str) -> None:
        while self._frames:
            frame = self._frames.popleft()
            if not frame.future.done():
                frame.future.set_result(Reply(False, frame.blocks, reason))

    def begin_block(self, line: bytes) -> None:
        """A `%begin <time> <number> <flags>` line."""
        self._block_id = line[len(b"%begin ") :]
        # flags 1: a command of ours (0: the attach itself, or tmux's own)
        self.in_block, self._ours = True, line.endswith(b" 1")

    def block_line(self, line: bytes) -> None:
        """A line inside a block. Raises ChannelBroken when the block belongs to no frame."""
        # Only the exact closing line ends a block: block content is pane text,
        # which may itself contain "%end …".
        if line in (b"%end " + self._block_id, b"%error " + self._block_id):
            self.in_block = False
            if self._ours:
                self._on_block([b.decode("utf-8", "replace") for b in self._block], line.startswith(b"%end "))
            self._block = []
        elif self._ours:
            self._block.append(line)

    def _on_block(self, lines: list[str], ok: bool) -> None:
        frame = self._frames[0] if self._frames else None
        if frame is None:
            raise ChannelBroken("tmux answered a command nobody is waiting for (channel out of sync)")
        if not frame.opened:
            if ok and lines == frame.begin:
                frame.opened = True
                return
            if not ok:  # the whole line failed to parse: none of it ran
                self._complete(Reply(False, [], "\n".join(lines)))
                return
            raise ChannelBroken(
                f"expected the start of reply {frame.begin[0]}, got {lines[:1]!r} (channel out of sync)"
            )
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
