"""An example cao plugin: one short line of text per interesting event, posted as
`{"text": "..."}` (Slack's incoming-webhook body; Discord takes the same with `/slack`
appended to its webhook URL).

Settings (`plugins.slack` in <cao home>/settings.json):
    url      the incoming-webhook URL (required)
    events   which event types to post (default: DEFAULT_EVENTS)
"""

from __future__ import annotations

from typing import Any

import httpx

from cli_agent_orchestrator.plugins import hookimpl
from cli_agent_orchestrator.plugins.manager import PluginContext

DEFAULT_EVENTS = (
    "handoff.finished",
    "assign.finished",
    "inbox.failed",
    "workflow.run.completed",
    "workflow.run.failed",
)
TIMEOUT_S = 10.0


def summary(event: dict[str, Any]) -> str:
    """The line a human reads in the channel."""
    data, kind = event["data"], event["type"]
    if kind == "handoff.finished":
        outcome = "done" if data["ok"] else f"failed: {data['error']}"
        return f"cao: handoff to {data['agent']} (worker {data['terminal_id']}) {outcome}"
    if kind == "assign.finished":
        outcome = "started work" if data["ok"] else f"could not start: {data['error']}"
        return f"cao: assigned worker {data['terminal_id']} ({data['agent']}) {outcome}"
    if kind == "inbox.failed":
        return f"cao: message {data['message_id']} to {data['receiver_id']} was not delivered: {data['reason']}"
    if kind.startswith("workflow.run."):
        return f"cao: workflow run {data['run_id']} {kind.removeprefix('workflow.run.')}"
    return f"cao: {kind} ({event['actor']})"


class SlackPlugin:
    def __init__(self, context: PluginContext):
        url = context.config.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError("plugins.slack.url must be the incoming webhook's http(s) URL")
        self.url = url
        self.events = frozenset(context.config.get("events", DEFAULT_EVENTS))
        self._client: httpx.AsyncClient | None = None

    @hookimpl
    async def post_event(self, event: dict[str, Any]) -> None:
        if event["type"] not in self.events:
            return
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=TIMEOUT_S)
        resp = await self._client.post(self.url, json={"text": summary(event)})
        resp.raise_for_status()  # a failure is counted in cao's GET /diagnostics

    @hookimpl
    async def cao_shutdown(self) -> None:
        if self._client is not None:
            await self._client.aclose()
