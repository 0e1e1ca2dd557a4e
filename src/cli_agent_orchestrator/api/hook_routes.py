"""POST /terminals/{id}/hooks: a CLI's own hook (Claude Code's, Qwen Code's HTTP hooks, `cao-hook`),
admitted only with the terminal's hook secret; the status monitor alone decides what it means."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..events import HookReceived
from .errors import EVERY_ROUTE
from .limits import StrictJsonRoute
from .routes import (
    ABOUT_ONE,
    TerminalId,
    rt,
)

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE)

# --- CLI hooks ----------------------------------------------------------------------
HOOK_EVENT_PATTERN = r"^[A-Za-z0-9_.:-]+$"


class HookBody(BaseModel):
    """cao-hook's `{"event", "payload"}`, or a CLI's own hook JSON as an HTTP hook posts it
    (Claude Code's `"type": "http"` hooks: the event in `hook_event_name`, the JSON its payload)."""

    # The model validator's rule, stated: one of the two names the event.
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"type": "string"}}} for name in ("event", "hook_event_name")
            ]
        },
    )
    event: str | None = Field(None, min_length=1, max_length=64, pattern=HOOK_EVENT_PATTERN)
    payload: dict | None = None
    hook_event_name: str | None = Field(None, min_length=1, max_length=64, pattern=HOOK_EVENT_PATTERN)

    @model_validator(mode="after")
    def _names_an_event(self) -> HookBody:
        if self.event is None and self.hook_event_name is None:
            raise ValueError("a hook needs `event` (cao-hook's form) or `hook_event_name` (a CLI's own hook JSON)")
        return self

    def event_and_payload(self) -> tuple[str, dict]:
        if self.event is not None:
            return self.event, self.payload or {}
        assert self.hook_event_name is not None
        return self.hook_event_name, self.model_dump(exclude={"event"}, exclude_none=True)


@router.post("/terminals/{terminal_id}/hooks", responses=ABOUT_ONE)
async def post_hook(
    request: Request,
    terminal_id: TerminalId,
    body: HookBody,
    x_cao_hook_secret: Annotated[str | None, Header(max_length=128)] = None,
) -> dict:
    """A CLI's own hook event, with the terminal's secret (header `X-CAO-Hook-Secret`, from
    CAO_HOOK_SECRET in the agent's environment; 403 without it): sent by `cao-hook`, or by a
    CLI's HTTP hook. The providers' hooks use the hook channel (services/terminals/hook_channel.py),
    which takes the same two steps. The status monitor alone decides what an event means, in
    order with the input before it."""
    runtime = rt(request)
    await runtime.terminals.check_hook_secret(terminal_id, x_cao_hook_secret)
    event, payload = body.event_and_payload()
    runtime.bus.publish(HookReceived(terminal_id, event, payload))
    return {"success": True}
