"""HTTP routes for what workers know of each other: a terminal's description, group and metadata
(each replaced whole: the last write wins), and its siblings. The bounds are
services/terminals/labels.py's; a value out of them is a 422 with the reason, and nothing changes.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ..services.terminals.labels import MAX_DEPTH
from .errors import EVERY_ROUTE, answers
from .limits import StrictJsonRoute
from .routes import TerminalId, rt
from .schemas import DescriptionBody, GroupBody, MetadataBody, SiblingOut, TerminalOut

router = APIRouter(route_class=StrictJsonRoute, responses=EVERY_ROUTE)
ABOUT_ONE = answers(404, 422, 503)


@router.patch("/terminals/{terminal_id}/group", response_model=TerminalOut, responses=ABOUT_ONE)
async def set_group(request: Request, terminal_id: TerminalId, body: GroupBody) -> TerminalOut:
    """Replace the terminal's group path (null or [] clears it)."""
    return TerminalOut.of(await rt(request).terminals.set_labels(terminal_id, group=body.group))


@router.patch("/terminals/{terminal_id}/metadata", response_model=TerminalOut, responses=ABOUT_ONE)
async def set_metadata(request: Request, terminal_id: TerminalId, body: MetadataBody) -> TerminalOut:
    """Replace the terminal's metadata object whole (null or {} clears it): the last write wins."""
    return TerminalOut.of(await rt(request).terminals.set_labels(terminal_id, metadata=body.metadata))


@router.patch("/terminals/{terminal_id}/description", response_model=TerminalOut, responses=ABOUT_ONE)
async def set_description(request: Request, terminal_id: TerminalId, body: DescriptionBody) -> TerminalOut:
    """Replace the terminal's description (null or "" clears it)."""
    return TerminalOut.of(await rt(request).terminals.set_labels(terminal_id, description=body.description))


@router.get("/terminals/{terminal_id}/siblings", response_model=list[SiblingOut], responses=ABOUT_ONE)
async def list_siblings(
    request: Request,
    terminal_id: TerminalId,
    depth: Annotated[int, Query(ge=1, le=MAX_DEPTH)] = 1,
    cross_session: bool = False,
) -> list[SiblingOut]:
    """The terminal's siblings, itself left out. With a group: the terminals whose group starts
    with its first `depth` elements, in its session (any session with `cross_session`).
    Without a group: every other agent of its session."""
    found = await rt(request).terminals.siblings(terminal_id, depth, cross_session)
    return [SiblingOut.of(t) for t in found]
