"""HTTP routes for agent profiles: the catalogue and one profile, as written (never with
`.env` values filled in), and installing one (profile_install). Static sub-paths of
`/agents/profiles/` go above `{name}`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from ..models import SAFE_NAME_RE
from ..profiles.catalog import catalog, details, find_entry, summary
from ..profiles.install import InstallConfig, install_profile
from ..providers.common import mcp_server_argv
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .schemas import json_pattern, refused, stated

router = APIRouter(prefix="/agents/profiles", tags=["profiles"], route_class=StrictJsonRoute, responses=EVERY_ROUTE)

ProfileName = Annotated[
    str,
    Path(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$", description="1-64 of [A-Za-z0-9_-], not starting with '-'"),
]


def _home(request: Request):
    return request.app.state.runtime.settings.home_dir


# Plain `def`: these read files, so FastAPI runs them in its thread pool, off the event loop.
@router.get("")
def list_profiles(request: Request) -> list[dict[str, Any]]:
    """Every profile in lookup order's winner, sorted by name: `source` is `local` (agent
    store), `custom` (an `extra_profile_dirs` entry) or `built-in`; a file that does not parse
    has `loadable: false` and `error`; `duplicated_in` lists the files of the same name it hides."""
    return [summary(entry) for entry in catalog(_home(request))]


class InstallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(
        min_length=1,
        max_length=2048,
        description="a profile name or an allow-listed https URL",
        # A name, or a URL (which host and scheme it may have is checked when it is fetched).
        json_schema_extra=stated(pattern=json_pattern(SAFE_NAME_RE, "[A-Za-z][A-Za-z0-9+.-]*://.*")),
    )
    provider: str | None = Field(default=None, max_length=64)
    env_vars: dict[str, str] | None = Field(default=None, max_length=64, description="written to the cao .env")


class InstallResponse(BaseModel):
    success: bool
    message: str
    agent_name: str
    context_file: str = Field(description="the profile as installed: <home>/agent-store/NAME.md")
    agent_file: str | None = Field(description="the provider's file (Kiro agent JSON), null when none is needed")
    unresolved_vars: list[str] = Field(description="${VAR} names the cao .env does not set")
    source_kind: str = Field(description="name | url")
    provider: str


@router.post(
    "/install",
    responses={
        **answers(422),
        **refused(
            "a name that is neither built-in nor installed, a local path, a URL whose host is not allowed or "
            "that cannot be fetched, a file that is not a profile"
        ),
    },
)
def install(request: Request, body: InstallRequest) -> InstallResponse:
    """Install a profile by name or from an https URL whose host is in
    CAO_PROFILE_ALLOWED_HOSTS (a local path is refused: files only through `cao install`).
    Writes `<home>/agent-store/NAME.md`, `env_vars` to `<home>/.env`, and for kiro_cli the
    Kiro agent JSON; 400 names the problem, and then nothing was written."""
    runtime = request.app.state.runtime
    config = InstallConfig.from_settings(runtime.settings, mcp_server_argv())
    result = install_profile(body.source, config, provider=body.provider, env_vars=body.env_vars, allow_files=False)
    return InstallResponse(**result.as_dict())


@router.get("/{name}", responses=answers(404, 422))
def get_profile(request: Request, name: ProfileName) -> dict[str, Any]:
    """One profile as written (`${VAR}` not expanded; `variables` names them), null fields
    omitted; 400 when the file that wins the lookup does not parse."""
    return details(find_entry(_home(request), name))
