"""HTTP routes for skills (skills/): the user's — every skill, one skill's text, adding one
from an allow-listed URL (a local folder only through `cao skills add`), removing one — and an
agent's, which see and load only what its profile's `skills:` allows (`/terminals/{id}/skills`,
what cao's `load_skill` MCP tool calls). Plain `def`: these read files, so FastAPI runs them in
its thread pool, off the event loop; the agent's routes read the store first, then the files
in a thread.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import NotFound
from ..models import SAFE_NAME_RE
from ..profiles.fetch import allowed_hosts
from ..profiles.loading import AgentProfile, load_profile
from ..skills.catalogue import allowed_skills, skill_document, skill_for_agent, visible_skills
from ..skills.install import add_skill
from ..skills.skill_file import SKILL_NAME_RE
from ..skills.store import find_skill, list_skills, remove_skill
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .routes import TerminalId, rt
from .schemas import json_pattern, refused, stated

router = APIRouter(tags=["skills"], route_class=StrictJsonRoute, responses=EVERY_ROUTE)

SkillName = Annotated[
    str,
    Path(
        pattern=json_pattern(SKILL_NAME_RE),
        description="1-64 of [A-Za-z0-9_-], starting with a letter or digit",
    ),
]
ForProfile = Annotated[
    str | None,
    Query(
        pattern=json_pattern(SAFE_NAME_RE),
        description="Only the skills an agent of this profile sees (its `skills:`)",
    ),
]


class AddSkillBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(
        min_length=1,
        max_length=2048,
        description="The https URL of a SKILL.md on a host of CAO_PROFILE_ALLOWED_HOSTS",
        # Which host and scheme it may have is checked when it is fetched.
        json_schema_extra=stated(pattern="^[A-Za-z][A-Za-z0-9+.-]*://.*$"),
    )
    force: bool = Field(False, description="Replace a skill of the same name")


def _home(request: Request):
    return rt(request).settings.home_dir


async def _profile_of(request: Request, terminal_id: str) -> AgentProfile:
    store = rt(request).store
    term = await store.run(store.get_terminal, terminal_id)
    if term is None:
        raise NotFound(f"terminal {terminal_id!r} not found")
    return await asyncio.to_thread(load_profile, _home(request), term.agent_profile)


@router.get("/skills", responses=answers(404, 422))
def list_all(request: Request, profile: ForProfile = None) -> list[dict[str, Any]]:
    """Every skill by name: `source` is `store` (`<home>/skills/`) or `settings` (a
    `skills_dirs` entry of settings.json); a folder whose SKILL.md does not read has
    `loadable: false` and `error`; `shadows` lists the folders of the same name it hides.
    With `profile`: only the loadable skills an agent of that profile sees."""
    entries = list_skills(_home(request))
    if profile is None:
        return [e.as_dict() for e in entries]
    wanted = load_profile(_home(request), profile).skills
    return [e.as_dict() for e in entries if e.skill is not None and allowed_skills(e.name, wanted)]


@router.get("/skills/{name}", responses=answers(404, 422))
def show(request: Request, name: SkillName) -> dict[str, Any]:
    """One skill: its description, folder, `text` (SKILL.md's body and the list of its other
    files) and `files` (their absolute paths)."""
    return skill_document(find_skill(_home(request), name))


@router.post(
    "/skills",
    status_code=201,
    responses={
        **answers(422),
        **refused(
            "a local path, a URL whose host is not allowed or that cannot be fetched, a file that is not a SKILL.md, "
            "a skill of that name already there (without force)"
        ),
    },
)
def add(request: Request, body: AddSkillBody) -> dict[str, Any]:
    """Add a skill from the https URL of its SKILL.md (host in CAO_PROFILE_ALLOWED_HOSTS) as
    `<home>/skills/NAME/SKILL.md`, NAME being the frontmatter's `name`, else the URL's folder.
    A local folder is refused here: add it with `cao skills add PATH`."""
    settings = rt(request).settings
    result = add_skill(
        body.source,
        settings.home_dir,
        allowed_hosts(settings.profile_allowed_hosts),
        allow_files=False,
        replace=body.force,
        fetch_timeout=settings.profile_fetch_timeout,
    )
    return result.as_dict()


@router.delete("/skills/{name}", responses=answers(404, 422))
def remove(request: Request, name: SkillName) -> dict[str, Any]:
    """Delete a skill from cao's store (`<home>/skills/NAME/`); one in a `skills_dirs`
    directory is the user's own and is refused."""
    return {"removed": name, "directory": str(remove_skill(_home(request), name))}


# --- an agent's ----------------------------------------------------------------------------
@router.get("/terminals/{terminal_id}/skills", responses=answers(404, 422))
async def list_for_agent(request: Request, terminal_id: TerminalId) -> list[dict[str, Any]]:
    """The skills this terminal's agent sees (its profile's `skills:`), as in its catalogue."""
    wanted = (await _profile_of(request, terminal_id)).skills
    skills = await asyncio.to_thread(visible_skills, _home(request), wanted)
    return [{"name": s.name, "description": s.description} for s in skills]


@router.get("/terminals/{terminal_id}/skills/{name}", responses=answers(404, 422))
async def load_for_agent(request: Request, terminal_id: TerminalId, name: SkillName) -> dict[str, Any]:
    """Skill `name` as this terminal's agent loads it; 403 when its profile's `skills:` leaves it out."""
    profile = await _profile_of(request, terminal_id)
    skill = await asyncio.to_thread(skill_for_agent, _home(request), name, profile.name, profile.skills)
    return await asyncio.to_thread(skill_document, skill)
