"""A whole JSON answer sent from ASGI middleware, for the gates that answer before any route runs
(the owner-or-token check, Host and Origin, the body limit, the MCP endpoint's credential)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.types import Send


async def send_json(send: Send, status: int, payload: object, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
