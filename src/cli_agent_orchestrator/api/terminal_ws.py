"""`WS /terminals/{id}/ws`: an agent's terminal, live, for a browser (xterm.js) or any client.

Server -> client: binary frames of terminal bytes. First the pane's size as the xterm
window-size sequence (`ESC [ 8 ; rows ; cols t`), then its scrollback and screen, then the
pane's output as its program writes it, in order; the size sequence again when the pane is
resized, and the screen redrawn when output was dropped under load. Client -> server: text
JSON `{"type": "input", "data": "..."}` (typed as the bytes a terminal sends: the backend
writes them as hex, so no byte is ever read as backend syntax) and
`{"type": "resize", "rows": R, "cols": C}`; other types are ignored, malformed JSON ends
the socket. Peer, Origin and credentials are checked before this runs (security.py, auth.py).

Unlike a `tmux attach`, watching never changes the agent's window size: only an explicit
resize message does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from ..errors import CaoError, NotFound
from ..events import ScreenSnapshot, TerminalOutput, TerminalRemoved, TerminalResized

log = logging.getLogger(__name__)
router = APIRouter()

_TERMINAL_ID = re.compile(r"\A[a-f0-9]{8}\Z")
MAX_INPUT_CHARS = 64 * 1024
MAX_FRAME_BYTES = 256 * 1024  # output joined into one frame at most
STREAM_QUEUE = 4096  # output events queued for one socket before the oldest are dropped
SNAPSHOT_WAIT_S = 2.0
SIZE_LIMITS = (2, 1000)
# Close codes (core contract §3.6).
UNKNOWN_TERMINAL = 4004
GONE = 1000


def size_sequence(rows: int, cols: int) -> bytes:
    return f"\x1b[8;{rows};{cols}t".encode()


def screen_bytes(rows_text: str, cursor_x: int, cursor_y: int, clear: bool) -> bytes:
    """A captured screen (rows with SGR escapes) drawn from the top-left, cursor placed."""
    rows = rows_text.split("\n")
    head = "\x1b[0m\x1b[H\x1b[2J" if clear else "\x1b[0m"
    body = "\r\n".join(rows).rstrip("\r\n")
    return (head + body + f"\x1b[0m\x1b[{cursor_y + 1};{cursor_x + 1}H").encode("utf-8", "replace")


@router.websocket("/terminals/{terminal_id}/ws")
async def terminal_socket(websocket: WebSocket, terminal_id: str) -> None:
    runtime = websocket.app.state.runtime
    await websocket.accept()
    window_id = await _window_of(runtime, terminal_id)
    if window_id is None:
        await websocket.close(UNKNOWN_TERMINAL, f"unknown terminal {terminal_id[:16]!r}")
        return
    bus, backend = runtime.bus, runtime.backend
    stream = bus.open_stream(f"ws:{id(websocket)}", f"terminal.{terminal_id}.#", max_size=STREAM_QUEUE)
    reader = asyncio.create_task(_read_client(websocket, backend, window_id), name=f"ws-in:{terminal_id}")
    try:
        start = await _opening(runtime, terminal_id, window_id, stream)
        if start is None:
            await websocket.close(UNKNOWN_TERMINAL, "the terminal's window is gone")
            return
        await websocket.send_bytes(start)
        await _pump(websocket, runtime, terminal_id, stream, reader)
    except (WebSocketDisconnect, RuntimeError):
        pass  # the client left; RuntimeError: a send after the socket closed
    finally:
        bus.close_stream(stream)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader


async def _window_of(runtime, terminal_id: str) -> str | None:
    if not _TERMINAL_ID.match(terminal_id):
        return None
    try:
        term = await runtime.terminals.get(terminal_id)
    except NotFound:
        return None
    if term.gone:
        return None
    return await runtime.store.run(runtime.store.window_id, terminal_id)


async def _opening(runtime, terminal_id: str, window_id: str, stream) -> bytes | None:
    """Size, scrollback, then the screen as of a point in the output stream, so the output
    that follows continues exactly from it."""
    backend = runtime.backend
    info = next((w for w in await backend.list_windows() if w.window_id == window_id), None)
    if info is None:
        return None
    snapshot = await _snapshot(runtime, terminal_id, stream)
    position = await backend.position(window_id)
    history = ""
    if position is not None and position[0] > 0:  # (tmux reads an empty history's -E -1 as row 0)
        try:
            history = await backend.capture(window_id, history=True, escapes=True, end=-1)
        except CaoError:
            history = ""
    if snapshot is None:  # no ordered snapshot to be had: the screen as tmux has it now
        text = await backend.capture(window_id, escapes=True)
        snapshot = ScreenSnapshot(terminal_id, text, 0, position[1] if position else info.height - 1)
    scrollback = history.rstrip("\n")
    parts = [size_sequence(info.height, info.width), b"\x1b[0m\x1b[H\x1b[2J"]
    if scrollback:
        # Printed from the bottom row, these lines scroll up into xterm's scrollback;
        # the screen is then drawn over the cleared visible rows.
        parts.append(f"\x1b[{info.height};1H".encode() + scrollback.replace("\n", "\r\n").encode() + b"\r\n")
        parts.append(b"\r\n" * (info.height - 1))
    parts.append(screen_bytes(snapshot.text, snapshot.cursor_x, snapshot.cursor_y, clear=True))
    return b"".join(parts)


async def _snapshot(runtime, terminal_id: str, stream) -> ScreenSnapshot | None:
    """The next ScreenSnapshot in the stream (output before it is covered by it)."""
    if not runtime.backend.request_snapshot(terminal_id):
        return None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SNAPSHOT_WAIT_S
    while (left := deadline - loop.time()) > 0:
        event = await runtime.bus.next_event(stream, left)
        if isinstance(event, ScreenSnapshot):
            return event
        if event is None:
            break
    return None


async def _pump(websocket: WebSocket, runtime, terminal_id: str, stream, reader: asyncio.Task) -> None:
    bus = runtime.bus
    dropped, resyncing = stream.dropped, False
    while not reader.done():
        event = await bus.next_event(stream, 1.0)
        if event is None:
            if stream.closed:
                return
            continue
        chunk = bytearray()
        while event is not None:
            if isinstance(event, TerminalOutput) and not resyncing:
                chunk += event.data
            elif isinstance(event, ScreenSnapshot) and resyncing:
                chunk += screen_bytes(event.text, event.cursor_x, event.cursor_y, clear=True)
                resyncing = False
            elif isinstance(event, TerminalResized):
                chunk += size_sequence(event.height, event.width)
            elif isinstance(event, TerminalRemoved):
                if chunk:
                    await websocket.send_bytes(bytes(chunk))
                await websocket.close(GONE, "the terminal was deleted")
                return
            if len(chunk) >= MAX_FRAME_BYTES or not stream.queue:
                break
            event = stream.queue.popleft()
        if stream.dropped != dropped:  # output was lost: redraw from the next snapshot
            dropped, resyncing = stream.dropped, True
            runtime.backend.request_snapshot(terminal_id)
        if chunk:
            await websocket.send_bytes(bytes(chunk))


async def _read_client(websocket: WebSocket, backend, window_id: str) -> None:
    """Client frames: input and resize. Ends (and so ends the socket) on malformed JSON."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is None:
            continue  # binary frames from a client mean nothing here
        try:
            frame = json.loads(text)
        except ValueError:
            await websocket.close(1003, "malformed JSON")
            return
        if not isinstance(frame, dict):
            continue
        try:
            await _apply(frame, backend, window_id)
        except CaoError as exc:  # the agent exited: say so, keep showing its last screen
            log.info("terminal socket input refused: %s", exc)


async def _apply(frame: dict, backend, window_id: str) -> None:
    kind = frame.get("type")
    if kind == "input":
        data = frame.get("data")
        if isinstance(data, str) and data and len(data) <= MAX_INPUT_CHARS:
            await backend.send_bytes(window_id, data.encode("utf-8", "replace"))
    elif kind == "resize":
        rows, cols = frame.get("rows"), frame.get("cols")
        low, high = SIZE_LIMITS
        if all(type(v) is int and low <= v <= high for v in (rows, cols)):
            await backend.resize(window_id, cols, rows)
