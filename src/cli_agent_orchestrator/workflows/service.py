"""The workflow feature as the entry points see it: the spec catalogue, the runs'
lifecycle and the read views, built by the composition root (`bootstrap.py`) around one
registry of live drives. The script step gate is built beside it, for the run-step route.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import WorkflowCatalog
from .runs import RunLifecycle
from .views import RunViews


@dataclass(frozen=True)
class WorkflowService:
    catalog: WorkflowCatalog
    runs: RunLifecycle
    views: RunViews

    async def recover(self) -> None:
        """Server start: runs the previous server was driving become interrupted."""
        await self.runs.recover()

    async def shutdown(self) -> None:
        """Server stop: end the scripts being driven."""
        await self.runs.shutdown()
