"""Sessions: a tmux session named `cao-…` holding one or more agent terminals."""

from __future__ import annotations

import builtins
from dataclasses import asdict

from ..backends.base import TerminalBackend
from ..errors import NotFound
from ..events import SessionKilled
from ..models import SESSION_PREFIX, Terminal
from .terminals.names import normalise_session_name
from .terminals.service import TerminalService


class SessionService:
    def __init__(self, backend: TerminalBackend, terminals: TerminalService):
        self.backend = backend
        self.terminals = terminals

    async def list(self) -> list[dict]:
        sessions = []
        for name, attached in await self.backend.list_sessions():
            if not name.startswith(SESSION_PREFIX):
                continue
            terms = await self.terminals.list(name)
            sessions.append(
                {
                    "id": name,
                    "name": name,
                    "status": "active" if attached else "detached",
                    "terminal_count": len(terms),
                    "agent_profile": terms[0].agent_profile if terms else None,
                    "working_directory": terms[0].working_directory if terms else None,
                }
            )
        return sessions

    async def get(self, name: str) -> tuple[dict, builtins.list[Terminal]]:  # (`list` is a method here)
        name = normalise_session_name(name)
        if not await self.backend.session_exists(name):
            raise NotFound(f"session {name!r} not found")
        attached = dict(await self.backend.list_sessions()).get(name, False)
        session = {"id": name, "name": name, "status": "active" if attached else "detached"}
        return session, await self.terminals.list(name)

    async def delete(self, name: str) -> dict:
        name = normalise_session_name(name)
        if not await self.backend.session_exists(name):
            raise NotFound(f"session {name!r} not found")
        errors, worktrees, deleted = [], [], []
        for term in await self.terminals.list(name):
            try:
                released = await self.terminals.delete(term.id)
                deleted.append(term.id)
                if released is not None:
                    worktrees.append({"terminal_id": term.id, **asdict(released)})
            except Exception as exc:  # keep going: one stuck terminal must not keep the others
                errors.append(f"{term.id}: {exc}")
        await self.backend.kill_session(name)
        self.terminals.bus.publish(SessionKilled(name, tuple(deleted)))
        answer: dict = {"success": not errors, "deleted": [name], "errors": errors}
        if worktrees:  # what became of each worker's worktree: removed, or kept and why
            answer["worktrees"] = worktrees
        return answer
