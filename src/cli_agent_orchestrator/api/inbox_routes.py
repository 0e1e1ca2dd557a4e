"""The inbox over HTTP: queue a message for an agent (delivered when it is ready, exactly once)
and read an agent's messages."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Request

from ..errors import InvalidInput
from ..models import MessageStatus
from .errors import EVERY_ROUTE
from .limits import StrictJsonRoute
from .routes import (
    ABOUT_ONE,
    TerminalId,
    _text,
    rt,
)
from .schemas import (
    MAX_TEXT,
    MESSAGE_STATUS,
    InboxMessageOut,
    InboxPost,
    refused,
)

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE)


# --- inbox --------------------------------------------------------------------------
@router.post(
    "/terminals/{terminal_id}/inbox/messages",
    responses={
        **ABOUT_ONE,
        **refused("the message or `sender_id` in neither the JSON body nor the query, a message to its sender"),
    },
)
async def post_inbox_message(
    request: Request,
    terminal_id: TerminalId,
    sender_id: Annotated[str | None, Query(max_length=128)] = None,
    message: Annotated[str | None, Query(max_length=MAX_TEXT)] = None,
    body: Annotated[InboxPost | None, Body()] = None,
) -> dict:
    text = _text(body.message if body else None, message)
    sender = body.sender_id if body else sender_id
    if not sender:
        raise InvalidInput("sender_id is required")
    msg = await rt(request).inbox.post(terminal_id, sender, text)
    return {
        "success": True,
        "message_id": msg.id,
        "sender_id": msg.sender_id,
        "receiver_id": msg.receiver_id,
        "created_at": msg.created_at,
    }


@router.get("/terminals/{terminal_id}/inbox/messages", response_model=list[InboxMessageOut], responses=ABOUT_ONE)
async def list_inbox_messages(
    request: Request,
    terminal_id: TerminalId,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    status: Annotated[str | None, Query(max_length=16, json_schema_extra=MESSAGE_STATUS)] = None,
) -> list[InboxMessageOut]:
    wanted = None
    if status is not None:
        try:
            wanted = MessageStatus(status)
        except ValueError:
            raise InvalidInput(f"invalid status {status!r}: use pending, delivering, delivered or failed") from None
    return [InboxMessageOut.of(m) for m in await rt(request).inbox.list(terminal_id, wanted, limit)]
