"""The `load_skill` tool: a skill's instructions for the calling agent, through cao-server's HTTP
API like every tool. An agent loads only the skills its profile's `skills:` allows (the server
decides, as it decides the catalogue in the agent's prompt); the server's own user (no terminal)
loads any. Failures are `success: false` results with the reason, never raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from ..clients.aio import CaoApi
from ..skills.skill_file import SKILL_NAME_RE
from .tools import ToolConfig, bad_terminal_id

Result = dict[str, Any]

LOAD_SKILL_DOC = """Load a skill: the instructions cao keeps for a kind of task, listed by name in your
system prompt under "Skills". Returns `text` (follow it) and `files`, the absolute paths of the
skill's other files, which you read or run when the text points to them."""


class SkillTools:
    def __init__(self, config: ToolConfig, api: CaoApi):
        self.config = config
        self.api = api

    async def load(self, name: str) -> Result:
        if not isinstance(name, str) or not SKILL_NAME_RE.match(name):
            return _fail(f"invalid skill name {str(name)[:80]!r}: use 1-64 of [A-Za-z0-9_-]")
        me = self.config.terminal_id
        if me is not None:
            error = bad_terminal_id(me, "CAO_TERMINAL_ID")
            if error:
                return _fail(error)
        resp = await self.api.get(f"/terminals/{me}/skills/{name}" if me else f"/skills/{name}")
        if not (resp.ok and isinstance(resp.body, dict)):
            return _fail(resp.error)
        return {"success": True, **resp.body}


def _fail(error: str | None) -> Result:
    return {"success": False, "error": error or "unexpected answer from cao-server"}


def add_skill_tools(server: Any, skills_for: Callable[[], SkillTools]) -> None:
    """Register load_skill; `skills_for()` gives the caller's at each call."""

    async def load_skill(
        name: Annotated[str, Field(description="The skill's name, as the Skills list in your prompt gives it")],
    ) -> Result:
        return await skills_for().load(name)

    server.add_tool(load_skill, description=LOAD_SKILL_DOC)
