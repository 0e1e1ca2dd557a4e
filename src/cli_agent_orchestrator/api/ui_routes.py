"""Routes the web page reads that no other client needs: the board in one call, the bus as a
board-sized event stream, a waiting agent's menu, a launch preview, deleted agents, and the
browser sign-in (one-time ticket -> cookie). Everything else the page does goes through the
same routes as any client."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import Forbidden, NotFound, Unauthorized
from ..events import (
    AssignFinished,
    AssignStarted,
    BackendLost,
    FlowRunFinished,
    FlowRunStarted,
    HandoffFinished,
    HandoffStarted,
    InboxDelivered,
    InboxFailed,
    InboxQueued,
    SessionCreated,
    SessionKilled,
    StatusChanged,
    TerminalExited,
    TerminalRemoved,
    TerminalSpawned,
    WorkflowEvent,
)
from ..models import TerminalStatus
from ..profiles.loading import load_profile
from ..profiles.roles import resolve_tools
from ..services.prompts import menu_options
from ..services.worker_questions import question_on_screen
from ..web.logins import SESSION_TTL_S, TICKET_TTL_S
from .auth import cookie_name, session_cookie
from .errors import EVERY_ROUTE, answers
from .events_stream import SSE_CONTENT, sse_follow
from .limits import StrictJsonRoute
from .routes import TerminalId
from .schemas import MAX_NAME, MAX_PATH, PROFILE_NAME, TerminalOut, refused

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE, tags=["web ui"])
# What a board draws; never terminal output, screens or hooks (they would only cost the page work).
_FOR_THE_BOARD = (
    StatusChanged,
    TerminalSpawned,
    TerminalExited,
    TerminalRemoved,
    InboxQueued,
    InboxDelivered,
    InboxFailed,
    SessionCreated,
    SessionKilled,
    HandoffStarted,
    HandoffFinished,
    AssignStarted,
    AssignFinished,
    WorkflowEvent,
    FlowRunStarted,
    FlowRunFinished,
    BackendLost,
)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


@router.get("/ui/board", responses=answers(503))
async def board(request: Request) -> dict:
    """Every live agent with its status, since when, its caller and its pending inbox, and
    the sessions: what the page draws before it follows `/ui/events`."""
    runtime = request.app.state.runtime
    terms = await runtime.terminals.list()
    pending = await runtime.store.run(runtime.store.pending_counts)
    rows = []
    for term in terms:
        row = TerminalOut.of(term).model_dump()
        view = runtime.monitor.view(term.id)
        row["status_since"] = _iso(view.status_since) if view is not None and view.status_since else None
        row["pending_inbox"] = pending.get(term.id, 0)
        rows.append(row)
    return {"now": _iso(datetime.now(UTC).timestamp()), "terminals": rows, "sessions": await runtime.sessions.list()}


@router.get(
    "/ui/events",
    response_class=StreamingResponse,
    responses={200: {"description": "Server-Sent Events for the board", "content": SSE_CONTENT}},
)
async def board_events(request: Request) -> StreamingResponse:
    """Status, lifecycle, inbox, handoff/assign, workflow and flow events as they happen
    (never terminal output): what keeps the board current without polling."""
    bus = request.app.state.runtime.bus
    return sse_follow(request, bus.open_stream(f"ui-sse:{id(request)}", "#", kinds=_FOR_THE_BOARD))


@router.get("/terminals/{terminal_id}/prompt", responses=answers(404, 422))
async def waiting_prompt(request: Request, terminal_id: TerminalId) -> dict:
    """The question a waiting agent shows and its menu's options (empty when it waits for
    free text, or does not wait at all). Answer with POST /terminals/{id}/input, the
    option's `key` as the message."""
    runtime = request.app.state.runtime
    term = await runtime.terminals.get(terminal_id)
    waiting = term.status == TerminalStatus.WAITING_USER_ANSWER
    question = question_on_screen(runtime.monitor, term.id) if waiting else ""
    return {
        "terminal_id": term.id,
        "status": term.status.value,
        "question": question,
        "options": [{"key": o.key, "label": o.label} for o in menu_options(question)],
    }


@router.get(
    "/ui/launch-preview",
    responses={
        **answers(404, 422),
        **refused("the tools, unknown to the tool policy, or a profile that does not load"),
    },
)
async def launch_preview(
    request: Request,
    agent_profile: Annotated[str, Query(max_length=MAX_NAME, json_schema_extra=PROFILE_NAME)],
    provider: Annotated[str | None, Query(max_length=MAX_NAME)] = None,
    working_directory: Annotated[str | None, Query(max_length=MAX_PATH)] = None,
    allowed_tools: Annotated[str | None, Query(max_length=MAX_PATH)] = None,
) -> dict:
    """What `cao launch` shows before it asks "Proceed?": the profile, provider, directory and
    the tool set that will run without asking."""
    runtime = request.app.state.runtime
    home = runtime.settings.home_dir
    tools = [t.strip() for t in (allowed_tools or "").split(",") if t.strip()]
    profile = load_profile(home, agent_profile, runtime.terminals.environ)
    policy = resolve_tools(home, profile.name, tools or profile.allowed_tools, profile.role, profile.mcp_servers)
    return {
        "profile": profile.name,
        "profile_source": profile.source,
        "provider": provider or profile.provider or runtime.settings.default_provider,
        "working_directory": working_directory or os.getcwd(),
        "tools": list(policy.tools),
        "tools_source": "allowed_tools" if tools else policy.source,
        "everything_else": "refused by the CLI where it can",
    }


@router.get("/ui/deleted", responses=answers(503))
async def deleted_agents(request: Request) -> list[dict]:
    """Deleted agents whose scrollback was saved (newest first): each can be shown again."""
    logs = request.app.state.runtime.settings.terminal_logs_dir
    out = []
    for snap in logs.glob("*.snapshot.json") if logs.is_dir() else []:
        terminal_id = snap.name.split(".", 1)[0]
        if not (logs / f"{terminal_id}.scrollback").is_file():
            continue
        try:
            facts = json.loads(snap.read_text())
        except (OSError, ValueError):
            facts = {}
        if not isinstance(facts, dict):
            facts = {}
        out.append(
            {
                "terminal_id": terminal_id,
                "session_name": facts.get("session_name"),
                "agent_profile": facts.get("agent_profile"),
                "provider": facts.get("provider"),
                "deleted_at": _iso(snap.stat().st_mtime),
            }
        )
    return sorted(out, key=lambda d: d["deleted_at"], reverse=True)


@router.get(
    "/ui/deleted/{terminal_id}/scrollback",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "The saved text"}, **answers(404, 422)},
)
async def deleted_scrollback(request: Request, terminal_id: TerminalId) -> Response:
    """A deleted agent's saved scrollback, as text."""
    path = request.app.state.runtime.settings.terminal_logs_dir / f"{terminal_id}.scrollback"
    if not path.is_file():
        raise NotFound(f"no saved scrollback for terminal {terminal_id}")
    return PlainTextResponse(path.read_text(errors="replace"))


# --- browser sign-in ------------------------------------------------------------------------
class TicketBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket: str = Field(..., min_length=1, max_length=128)


@router.post("/ui/tickets", status_code=status.HTTP_201_CREATED, responses=answers(403))
async def new_ticket(request: Request) -> dict:
    """A one-time login ticket for a browser (what `cao ui` prints as a link). Only for the
    server's own user or a token holder: a browser session cannot make more."""
    if session_cookie(request.scope.get("headers") or [], cookie_name(request.scope)) is not None:
        raise Forbidden("a browser session cannot make login tickets; run `cao ui`")
    ticket = request.app.state.logins.new_ticket()
    return {"ticket": ticket, "path": f"/login#{ticket}", "expires_in": TICKET_TTL_S}


@router.post("/ui/login", status_code=status.HTTP_204_NO_CONTENT, responses=answers(401, 422))
async def login(request: Request, body: TicketBody) -> Response:
    """Trade a one-time ticket for a browser session cookie (HttpOnly, SameSite=Strict)."""
    session = request.app.state.logins.redeem(body.ticket)
    if session is None:
        raise Unauthorized("this login link was already used or has expired; run `cao ui` for a new one")
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    response.set_cookie(
        cookie_name(request.scope),
        session,
        max_age=int(SESSION_TTL_S),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/ui/logout", status_code=status.HTTP_204_NO_CONTENT)
async def logout(request: Request) -> Response:
    name = cookie_name(request.scope)
    session = session_cookie(request.scope.get("headers") or [], name)
    if session is not None:
        request.app.state.logins.end(session)
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    response.delete_cookie(name, path="/")
    return response
