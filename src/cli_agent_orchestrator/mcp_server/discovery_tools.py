"""The discovery tools: an agent finds the other agents it works beside (`list_siblings`) and
says what it is doing (`update_metadata`), through cao-server's HTTP API like every tool.

cao's endpoint lists every tool to every agent, and a CLI's own allowed-tool set decides which
it may call (`@cao-mcp-server` gives them all). These two also need the `discovery` marker in
the caller's tool set (or `*`): an agent whose profile does not name it gets a refusal that says
so. They speak for the calling terminal only; the server's own user (no terminal) has no
siblings and no metadata of its own. Failures are `success: false` results, never raised.
"""

from __future__ import annotations

from typing import Any

from ..clients.aio import CaoApi
from .tools import ToolConfig, bad_terminal_id

Result = dict[str, Any]
MARKER = "discovery"  # providers/tool_names.py MARKERS
UNRESTRICTED = "*"


class DiscoveryTools:
    def __init__(self, config: ToolConfig, api: CaoApi):
        self.config = config
        self.api = api

    async def _caller(self, tool: str) -> tuple[dict | None, str | None]:
        """(the calling terminal's record, None) or (None, why the tool is refused)."""
        me = self.config.terminal_id
        if me is None:
            return None, f"{tool} must be called from an agent running in a cao terminal (CAO_TERMINAL_ID)"
        if error := bad_terminal_id(me, "CAO_TERMINAL_ID"):
            return None, error
        resp = await self.api.get(f"/terminals/{me}")
        if not (resp.ok and isinstance(resp.body, dict)):
            return None, f"cannot look up the calling terminal {me}: {resp.error}"
        tools = resp.body.get("allowed_tools")
        if isinstance(tools, list) and MARKER not in tools and UNRESTRICTED not in tools:
            return None, (
                f"{tool} needs the `{MARKER}` tool marker: add `{MARKER}` to your profile's allowedTools "
                f"(terminal {me} has: {', '.join(map(str, tools)) or 'none'})"
            )
        return resp.body, None

    async def list_siblings(self, depth: int = 1, cross_session: bool = False) -> Result:
        me, error = await self._caller("list_siblings")
        if me is None:
            return {"success": False, "error": error}
        if isinstance(depth, bool) or not isinstance(depth, int):
            return {"success": False, "error": f"depth must be an integer, got {depth!r}"}
        resp = await self.api.get(
            f"/terminals/{me['id']}/siblings",
            params={"depth": depth, "cross_session": "true" if cross_session else "false"},
        )
        if not (resp.ok and isinstance(resp.body, list)):
            return {"success": False, "error": resp.error or "unexpected answer from cao-server"}
        return {
            "success": True,
            "terminal_id": me["id"],
            "group": me.get("group"),
            "siblings": resp.body,
        }

    async def update_metadata(self, metadata: dict[str, Any] | None) -> Result:
        me, error = await self._caller("update_metadata")
        if me is None:
            return {"success": False, "error": error}
        resp = await self.api.request("PATCH", f"/terminals/{me['id']}/metadata", json={"metadata": metadata})
        if not (resp.ok and isinstance(resp.body, dict)):
            return {"success": False, "error": resp.error or "unexpected answer from cao-server"}
        return {"success": True, "terminal_id": me["id"], "metadata": resp.body.get("metadata")}
