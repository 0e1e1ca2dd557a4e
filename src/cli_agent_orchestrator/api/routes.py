"""HTTP routes for sessions, terminals and providers (seed 001, core contract); the inbox, the
CLIs' hooks and the one-call agent step have routes of their own (inbox_routes.py,
hook_routes.py, step_routes.py) and share this module's parameter types.

Message text travels in JSON bodies; the query-string form (`?message=`) is
kept for compatibility with older clients.
"""

from __future__ import annotations

import os
import shutil
from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Request, status

from ..errors import InvalidInput
from ..models import OrchestrationType
from ..providers.base import RESUME_ID
from ..providers.registry import get_provider, provider_names
from ..services.terminals.spawn import CreateRequest
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .schemas import (
    HOST_DESCRIPTION,
    HOST_PATTERN,
    KEY,
    MAX_NAME,
    MAX_PATH,
    MAX_TEXT,
    MODEL_NAME,
    NEW_SESSION_NAME,
    PROFILE_NAME,
    SESSION_NAME,
    InitialMessage,
    InputBody,
    KeyBody,
    LabelsBody,
    OutputOut,
    SessionBody,
    TerminalOut,
    WorktreeOut,
    refused,
    stated,
)

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE)

TerminalId = Annotated[str, Path(pattern=r"^[a-f0-9]{8}$", description="8 lowercase hex characters")]
SessionName = Annotated[str, Path(max_length=MAX_NAME, json_schema_extra=SESSION_NAME)]
# Query parameters of the create routes: these bound the size, the services check the content
# (what the schema states of it is `stated`: a 400 with the service's reason).
Profile = Annotated[str, Query(max_length=MAX_NAME, json_schema_extra=PROFILE_NAME)]
Name = Annotated[str | None, Query(max_length=MAX_NAME)]
NewSessionName = Annotated[str | None, Query(max_length=MAX_NAME, json_schema_extra=NEW_SESSION_NAME)]
Model = Annotated[str | None, Query(max_length=MAX_NAME, json_schema_extra=MODEL_NAME)]
WorkingDirectory = Annotated[str | None, Query(max_length=MAX_PATH)]
ToolList = Annotated[str | None, Query(max_length=MAX_PATH, description="comma-separated tool names")]
CallerId = Annotated[str | None, Query(pattern=r"^[a-f0-9]{8}$")]
ResumeId = Annotated[
    str | None,
    Query(
        max_length=128,
        description="Resume this conversation of the CLI's own (claude_code, codex, gemini_cli, qwen_cli); "
        "other providers refuse it with 400",
        json_schema_extra=stated(pattern=RESUME_ID.pattern),
    ),
]
Engine = Annotated[str | None, Query(max_length=MAX_NAME, description="Kiro CLI's agent engine: v2 (kas is refused)")]
Host = Annotated[str | None, Query(pattern=HOST_PATTERN, description=HOST_DESCRIPTION)]
# Error statuses by what a route does (400, 401, 403 and 413 come with every route; 503 with every
# route that uses the database).
LISTS = answers(503)
ABOUT_ONE = answers(404, 422, 503)  # one named session or terminal
CREATES = answers(404, 422, 502, 503, 504)
# What the spawner alone can judge (a 400 with the reason).
SPAWN_REFUSALS = (
    "a provider that is unknown or not installed (or none given and the default unusable), a working "
    "directory that does not exist, an engine, model or tool list the provider cannot take"
)


def rt(request: Request):
    return request.app.state.runtime


def _tools(allowed_tools: str | None) -> list[str] | None:
    if allowed_tools is None:
        return None
    return [t.strip() for t in allowed_tools.split(",") if t.strip()] or None


def _text(body_text: str | None, query_text: str | None, what: str = "message") -> str:
    text = body_text if body_text is not None else query_text
    if not text:
        raise InvalidInput(f'{what} is required (JSON body {{"{what}": ...}} or ?{what}=)')
    if len(text) > MAX_TEXT:
        raise InvalidInput(f"{what} too long: {len(text)} characters (limit {MAX_TEXT})")
    return text


def _labels(body: LabelsBody | None) -> dict:
    """A create body's description, group and metadata, for the CreateRequest (checked there)."""
    if body is None:
        return {}
    return {"description": body.description, "group": body.group, "metadata": body.metadata}


async def _create(request: Request, req: CreateRequest, body: InitialMessage | None) -> TerminalOut:
    runtime = rt(request)
    initial = body.initial_message if body else None
    if body and body.initial_message == "":
        raise InvalidInput("initial_message must not be empty")
    if body and body.initial_message_orchestration_type and not initial:
        raise InvalidInput("initial_message_orchestration_type needs initial_message")
    if initial is None:
        return TerminalOut.of(await runtime.terminals.create(req))
    req.wait_ready = False
    term = await runtime.terminals.create(req)
    runtime.tasks.spawn(
        runtime.orchestration.deliver_initial(
            term.id, initial, body.initial_message_orchestration_type if body else None
        ),
        f"initial:{term.id}",
    )
    return TerminalOut.of(term)


# --- sessions -----------------------------------------------------------------------
@router.post(
    "/sessions",
    status_code=status.HTTP_201_CREATED,
    response_model=TerminalOut,
    responses={
        **CREATES,
        **refused(f"{SPAWN_REFUSALS}, `env_vars` names that are not allowed, a session name of flows (`cao-flow-*`)"),
    },
)
async def create_session(
    request: Request,
    agent_profile: Profile,
    provider: Name = None,
    session_name: NewSessionName = None,
    working_directory: WorkingDirectory = None,
    allowed_tools: ToolList = None,
    model: Model = None,
    yolo: bool = False,
    engine: Engine = None,
    use_worktree: bool = False,
    host: Host = None,
    resume_session_id: ResumeId = None,
    memory_manager: Annotated[
        bool, Query(description="The agent gets its memories (on for every agent; refused where memory is off)")
    ] = False,
    body: Annotated[SessionBody | None, Body()] = None,
) -> TerminalOut:
    req = CreateRequest(
        agent_profile=agent_profile,
        provider=provider,
        session_name=session_name,
        new_session=True,
        resume_session_id=resume_session_id,
        memory=memory_manager,
        working_directory=working_directory,
        allowed_tools=_tools(allowed_tools),
        model=model,
        yolo=yolo,
        engine=engine,
        use_worktree=use_worktree,
        env_vars=body.env_vars if body else None,
        host=host,
        **_labels(body),
    )
    return await _create(request, req, body)


@router.get("/sessions", responses=LISTS)
async def list_sessions(request: Request) -> list[dict]:
    return await rt(request).sessions.list()


@router.get("/sessions/{session_name}", responses=ABOUT_ONE)
async def get_session(request: Request, session_name: SessionName) -> dict:
    session, terms = await rt(request).sessions.get(session_name)
    return {"session": session, "terminals": [TerminalOut.of(t).model_dump() for t in terms]}


@router.delete("/sessions/{session_name}", responses=ABOUT_ONE)
async def delete_session(request: Request, session_name: SessionName) -> dict:
    return await rt(request).sessions.delete(session_name)


@router.post(
    "/sessions/{session_name}/terminals",
    status_code=status.HTTP_201_CREATED,
    response_model=TerminalOut,
    responses={**CREATES, **refused(f"{SPAWN_REFUSALS}, a body `initial_message` without `defer_init=true`")},
)
async def create_terminal(
    request: Request,
    session_name: SessionName,
    agent_profile: Profile,
    provider: Name = None,
    working_directory: WorkingDirectory = None,
    allowed_tools: ToolList = None,
    caller_id: CallerId = None,
    defer_init: bool = False,
    model: Model = None,
    yolo: bool = False,
    engine: Engine = None,
    use_worktree: bool = False,
    host: Host = None,
    body: Annotated[LabelsBody | None, Body()] = None,
) -> TerminalOut:
    if body and body.initial_message is not None and not defer_init:
        raise InvalidInput("initial_message is only accepted with defer_init=true")
    req = CreateRequest(
        agent_profile=agent_profile,
        provider=provider,
        session_name=session_name,
        new_session=False,
        working_directory=working_directory,
        allowed_tools=_tools(allowed_tools),
        caller_id=caller_id,
        model=model,
        yolo=yolo,
        wait_ready=not defer_init,
        engine=engine,
        use_worktree=use_worktree,
        host=host,
        **_labels(body),
    )
    return await _create(request, req, body)


@router.get("/sessions/{session_name}/terminals", response_model=list[TerminalOut], responses=ABOUT_ONE)
async def list_session_terminals(request: Request, session_name: SessionName) -> list[TerminalOut]:
    session, terms = await rt(request).sessions.get(session_name)
    return [TerminalOut.of(t) for t in terms]


# --- providers ----------------------------------------------------------------------
@router.get("/agents/providers")
async def list_providers() -> list[dict]:
    """Every provider cao has, its CLI binary and whether that binary is installed."""
    out = []
    for name in provider_names():
        binary = get_provider(name).binary
        out.append(
            {
                "name": name,
                "binary": binary,
                "installed": bool(os.path.isabs(binary) and os.path.exists(binary) or shutil.which(binary)),
            }
        )
    return out


# --- terminals ----------------------------------------------------------------------
@router.get("/terminals", response_model=list[TerminalOut], responses=LISTS)
async def list_terminals(request: Request) -> list[TerminalOut]:
    return [TerminalOut.of(t) for t in await rt(request).terminals.list()]


@router.get("/terminals/{terminal_id}", response_model=TerminalOut, responses=ABOUT_ONE)
async def get_terminal(request: Request, terminal_id: TerminalId) -> TerminalOut:
    return TerminalOut.of(await rt(request).terminals.get(terminal_id))


@router.get("/terminals/{terminal_id}/attach", responses=ABOUT_ONE)
async def attach_terminal(request: Request, terminal_id: TerminalId) -> dict:
    """How a human watches this agent: the command that attaches to its session's tmux, on
    the machine it runs on (an ssh command for an agent on a host)."""
    return await rt(request).terminals.attach(terminal_id)


@router.post(
    "/terminals/{terminal_id}/input",
    responses={**ABOUT_ONE, **answers(409), **refused("the message in neither the JSON body nor `?message=`")},
)
async def send_input(
    request: Request,
    terminal_id: TerminalId,
    message: Annotated[str | None, Query(max_length=MAX_TEXT)] = None,
    sender_id: Annotated[str | None, Query(max_length=128)] = None,
    orchestration_type: OrchestrationType | None = None,
    body: Annotated[InputBody | None, Body()] = None,
) -> dict:
    text = _text(body.message if body else None, message)
    turn = await rt(request).terminals.send_input(terminal_id, text)
    return {"success": True, "turn": turn}


@router.post(
    "/terminals/{terminal_id}/key",
    responses={**ABOUT_ONE, **answers(409), **refused("the key in neither the JSON body nor `?key=`")},
)
async def send_key(
    request: Request,
    terminal_id: TerminalId,
    key: Annotated[str | None, Query(max_length=16, json_schema_extra=KEY)] = None,
    body: Annotated[KeyBody | None, Body()] = None,
) -> dict:
    await rt(request).terminals.send_key(terminal_id, _text(body.key if body else None, key, "key"))
    return {"success": True}


@router.get(
    "/terminals/{terminal_id}/output",
    response_model=OutputOut,
    response_model_exclude_defaults=True,  # `truncated` and `reason` only when they have something to say
    responses={**ABOUT_ONE, **answers(409)},
)
async def get_output(
    request: Request, terminal_id: TerminalId, mode: Annotated[str, Query(pattern="^(full|last)$")] = "full"
) -> OutputOut:
    """`full`: the whole history as text. `last`: the last reply; 409 while there is none. A
    reply whose start scrolled out of the history is `truncated`, with what is left of it."""
    terminals = rt(request).terminals
    if mode == "full":
        return OutputOut(output=await terminals.output(terminal_id, mode), mode="full")
    reply = await terminals.last_reply(terminal_id)
    return OutputOut(output=reply.text, mode="last", truncated=reply.cut is not None, reason=reply.cut)


@router.get("/terminals/{terminal_id}/working-directory", responses=ABOUT_ONE)
async def get_working_directory(request: Request, terminal_id: TerminalId) -> dict:
    return {"working_directory": await rt(request).terminals.working_directory(terminal_id)}


@router.post("/terminals/{terminal_id}/exit", responses={**ABOUT_ONE, **answers(409)})
async def exit_terminal(request: Request, terminal_id: TerminalId) -> dict:
    await rt(request).terminals.exit(terminal_id)
    return {"success": True}


@router.delete("/terminals/{terminal_id}", responses=ABOUT_ONE)
async def delete_terminal(request: Request, terminal_id: TerminalId) -> dict:
    released = await rt(request).terminals.delete(terminal_id)
    if released is None:
        return {"success": True}
    return {"success": True, "worktree": WorktreeOut.of(released).model_dump()}


@router.post("/terminals/{terminal_id}/restore", responses=ABOUT_ONE)
async def restore_terminal(request: Request, terminal_id: TerminalId) -> dict:
    return await rt(request).terminals.restore(terminal_id)
