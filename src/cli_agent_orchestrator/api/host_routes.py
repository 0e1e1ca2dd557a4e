"""HTTP routes for the hosts agents may run on: add, list, get, check, drain, remove.
A name or ssh target that is not exactly `[a-z0-9-]` / `[user@]host[:port]` is refused
with the reason (400, or 422 at the edge) and nothing is stored; an unknown host is a 404.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request, status
from pydantic import BaseModel, ConfigDict, Field

from ..services.hosts.records import MAX_AGENTS_LIMIT, MAX_IDENTITY, MAX_NAME, MAX_TARGET
from ..services.hosts.service import HostService
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .schemas import HOST_PATTERN, refused, stated

router = APIRouter(prefix="/hosts", tags=["hosts"], route_class=StrictJsonRoute, responses=EVERY_ROUTE)

HostName = Annotated[
    str, Path(max_length=MAX_NAME, pattern=r"^[a-z0-9][a-z0-9-]*$", description="host name: 1-32 of [a-z0-9-]")
]
READS = answers(404, 422, 503)


def service(request: Request) -> HostService:
    return request.app.state.runtime.hosts


class HostOut(BaseModel):
    """A registered host. `state` draining: no new agents go there."""

    name: str
    ssh: str = Field(description="[user@]host[:port]")
    identity: str | None
    max_agents: int | None
    state: Literal["active", "draining"]
    added_at: str
    agents: int = Field(0, description="its live agents")
    connection: dict = Field(
        default_factory=lambda: {"status": "idle"},
        description="status ok | down (with reason; its agents are unknown while cao reconnects) | idle (not connected)",
    )


# The form of an ssh target the service accepts; it also checks the parts (a DNS name, an IP
# address, a port 1-65535): a 400 with the reason.
SSH_TARGET_FORM = (
    r"^(?:[a-z_][a-z0-9_-]{0,31}@)?"
    r"(?:[A-Za-z0-9.-]+(?::[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?|[0-9A-Fa-f:.]+)$"
)


class AddBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(
        max_length=MAX_NAME,
        description="1-32 of [a-z0-9-], starting with [a-z0-9]",
        json_schema_extra=stated(pattern=HOST_PATTERN),
    )
    ssh: str = Field(
        max_length=MAX_TARGET,
        description="[user@]host[:port]; an IPv6 address in brackets",
        json_schema_extra=stated(pattern=SSH_TARGET_FORM),
    )
    identity: str | None = Field(
        None,
        max_length=MAX_IDENTITY,
        description="absolute path of a private key file",
        json_schema_extra=stated(pattern=r"^/[^%\x00-\x1f]*$"),
    )
    max_agents: int | None = Field(None, ge=1, le=MAX_AGENTS_LIMIT)


class CheckItemOut(BaseModel):
    name: str
    kind: Literal["connection", "requirement", "cao", "cli"]
    ok: bool
    detail: str = Field(description="what is there, or what is wrong")
    fix: str | None = Field(description="the command that installs or fixes it")
    provider: str | None = Field(description="for a CLI: the provider that runs it")


class CheckOut(BaseModel):
    """What the host has: ssh first; `ready` when every requirement, cao's tools and at
    least one CLI are there."""

    host: str
    ssh: str
    ready: bool
    items: list[CheckItemOut]


@router.get("", responses=answers(503))
async def list_hosts(request: Request) -> list[HostOut]:
    """Every host, by name."""
    return [HostOut(**h) for h in await service(request).list()]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={
        **answers(409, 422, 503),
        **refused(
            "an ssh target whose host is not a DNS name or an IP address or whose port is not 1-65535, "
            "an identity file that does not exist"
        ),
    },
)
async def add_host(request: Request, body: AddBody) -> HostOut:
    """Register a host (nothing connects yet: `POST /hosts/{name}/check` does)."""
    return HostOut(**await service(request).add(body.name, body.ssh, body.identity, body.max_agents))


@router.get("/{name}", responses=READS)
async def get_host(request: Request, name: HostName) -> HostOut:
    return HostOut(**await service(request).get(name))


@router.delete("/{name}", responses=READS)
async def remove_host(request: Request, name: HostName) -> dict:
    """Forget the host and end cao's ssh connection to it."""
    await service(request).remove(name)
    return {"success": True}


@router.post("/{name}/check", responses=READS)
async def check_host(request: Request, name: HostName) -> CheckOut:
    """Connect and report what the host has and what it is missing (an ssh failure is an
    answer too: `ready` false, its reason in the `ssh` item)."""
    return CheckOut(**await service(request).check(name))


@router.post("/{name}/drain", responses=READS)
async def drain_host(request: Request, name: HostName) -> HostOut:
    """No new agents go to the host; those there keep running."""
    return HostOut(**await service(request).drain(name))
