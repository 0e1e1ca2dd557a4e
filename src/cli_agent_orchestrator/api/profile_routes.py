"""HTTP routes for agent profiles: the catalogue and one profile, as written (never with
`.env` values filled in). Static sub-paths of `/agents/profiles/` go above `{name}`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from ..profile_catalog import catalog, details, find_entry, summary
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute

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


@router.get("/{name}", responses=answers(404, 422))
def get_profile(request: Request, name: ProfileName) -> dict[str, Any]:
    """One profile as written (`${VAR}` not expanded; `variables` names them), null fields
    omitted; 400 when the file that wins the lookup does not parse."""
    return details(find_entry(_home(request), name))
