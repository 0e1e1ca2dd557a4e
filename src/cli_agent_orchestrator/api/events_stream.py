"""`GET /events`: the event bus as Server-Sent Events, for UIs, `cao` follow modes
and benchmarks. Status and lifecycle events are never dropped; terminal output
is only streamed when the pattern asks for it and may be dropped under load.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from ..bus import Subscription
from ..errors import InvalidInput
from ..events import Event
from ..events.base import public_fields
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE)
_PATTERN = re.compile(r"\A[A-Za-z0-9_*#-]+(\.[A-Za-z0-9_*#-]+)*\Z")
KEEPALIVE_S = 15.0
# How OpenAPI (3.2's `itemSchema`, as FastAPI writes it) describes one event of cao's streams.
SSE_CONTENT = {
    "text/event-stream": {
        "itemSchema": {
            "type": "object",
            "required": ["data"],
            "properties": {
                "event": {"type": "string"},
                "id": {"type": "string"},
                "data": {"type": "string", "contentMediaType": "application/json"},
            },
        }
    }
}


def event_json(event: Event) -> dict:
    body = {"type": type(event).__name__, "topic": event.topic}
    for name, value in public_fields(event).items():
        body[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return body


@router.get(
    "/events",
    response_class=StreamingResponse,
    responses={200: {"description": "Server-Sent Events, one per bus event", "content": SSE_CONTENT}, **answers(422)},
)
async def events(request: Request, pattern: str = Query("terminal.*.status", max_length=200)) -> StreamingResponse:
    """Follow events whose topic matches `pattern` (`*` one segment, `#` the rest)."""
    if not _PATTERN.match(pattern):
        raise InvalidInput(f"invalid topic pattern {pattern!r}")
    bus = request.app.state.runtime.bus
    return sse_follow(request, bus.open_stream(f"sse:{id(request)}", pattern))


def sse_follow(request: Request, stream: Subscription) -> StreamingResponse:
    """A bus stream as Server-Sent Events until the client leaves; the stream is closed then."""
    bus = request.app.state.runtime.bus

    async def body() -> AsyncIterator[bytes]:
        try:
            yield b": connected\n\n"
            while not await request.is_disconnected():
                event = await bus.next_event(stream, KEEPALIVE_S)
                if event is None:
                    yield b": keepalive\n\n"
                    continue
                yield f"event: {type(event).__name__}\ndata: {json.dumps(event_json(event))}\n\n".encode()
        finally:
            bus.close_stream(stream)

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
