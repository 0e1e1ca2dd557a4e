"""The Kiro agent JSON (`~/.kiro/agents/<name>.json`) that `cao install` writes for a profile.

Kiro has no per-launch flags for tools, prompt or MCP servers: `kiro-cli chat --agent NAME`
reads all of them from this file. Invariant: its `tools` are exactly the profile's resolved
tool set in Kiro's names (with `--trust-all-tools` Kiro runs those and offers nothing else),
and only the MCP servers that set names are configured. The file is one per profile, shared by
all its terminals: nothing terminal-specific goes in. cao-mcp-server (the stdio relay to
cao-server's /mcp) finds the agent's CAO_MCP_URL and CAO_MCP_TOKEN in the environment Kiro starts
it with, the pane's.
Field names and types follow Kiro's agent configuration reference (CLI 2.x); `AGENT_FIELDS`
lists them.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInput
from ..providers import tool_names
from ..providers.kiro_cli import agent_tools
from .loading import AgentProfile

# A blocking handoff waits for its worker (up to 3600 s plus cao's margins); Kiro's own
# default MCP call timeout would cut it off. The reference's value, in milliseconds.
CAO_MCP_TIMEOUT_MS = 1_200_000
# Set per terminal in its pane's environment, which the relay inherits through Kiro. A value in the
# shared file would be one terminal's for all, and a `${NAME}` would reach the relay as written
# (Kiro expands only variables the user approved in Kiro's settings): either way not this agent's.
PER_TERMINAL_ENV = ("CAO_TERMINAL_ID", "CAO_MCP_URL", "CAO_MCP_TOKEN")

# Kiro's documented agent fields and their JSON types ("str|null": a string or null).
AGENT_FIELDS: dict[str, str] = {
    "name": "str",
    "description": "str",
    "prompt": "str|null",
    "mcpServers": "object",
    "tools": "list[str]",
    "toolAliases": "object[str]",
    "allowedTools": "list[str]",
    "toolsSettings": "object",
    "resources": "list[str]",
    "hooks": "object",
    "useLegacyMcpJson": "bool",
    "model": "str|null",
}
# Profile frontmatter keys copied as they are when present, with the type each must have.
_PASSED: dict[str, type] = {"toolAliases": dict, "toolsSettings": dict, "hooks": dict, "useLegacyMcpJson": bool}


def _string_list(profile: AgentProfile, key: str) -> list[str] | None:
    value = profile.frontmatter.get(key)
    if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise InvalidInput(f"profile {profile.name!r}: {key} must be a list of strings")
    return value


def _servers(profile: AgentProfile, tools: list[str], mcp_server_argv: list[str]) -> dict[str, dict]:
    unrestricted = tool_names.UNRESTRICTED in tools
    wanted = tool_names.servers(tools)
    out: dict[str, dict] = {}
    for name, config in profile.mcp_servers.items():
        if not isinstance(config, dict):
            raise InvalidInput(f"profile {profile.name!r}: mcpServers.{name} must be a mapping")
        if unrestricted or name in wanted:
            out[str(name)] = dict(config)
    if tool_names.CAO_SERVER in wanted or unrestricted:
        cao = out.get(tool_names.CAO_SERVER, {})
        args = cao.get("args") or []
        if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            raise InvalidInput(f"profile {profile.name!r}: mcpServers.{tool_names.CAO_SERVER}.args must be strings")
        env = cao.get("env") or {}
        if fixed := [name for name in PER_TERMINAL_ENV if isinstance(env, dict) and name in env]:
            raise InvalidInput(
                f"profile {profile.name!r}: mcpServers.{tool_names.CAO_SERVER}.env sets {', '.join(fixed)}; "
                "cao gives each agent its own in its environment, where cao-mcp-server finds it: remove it"
            )
        # Kiro starts it from its own PATH: the absolute command of this installation instead.
        out[tool_names.CAO_SERVER] = {
            **cao,
            "command": mcp_server_argv[0],
            "args": [*mcp_server_argv[1:], *args],
            "timeout": CAO_MCP_TIMEOUT_MS,
        }
    return out


def _tools(profile: AgentProfile, tools: list[str]) -> list[str]:
    """The set in Kiro's names; a profile's own `tools` (Kiro names) may only narrow it."""
    computed = agent_tools(tools)["tools"]
    own = _string_list(profile, "tools")
    if own is None:
        return computed
    if computed != ["*"] and (wider := [t for t in own if t not in computed]):
        raise InvalidInput(
            f"profile {profile.name!r}: tools {wider} are outside its tool set {computed} "
            "(from allowedTools or its role); list them in allowedTools or drop them from tools"
        )
    return own


def agent_document(profile: AgentProfile, tools: list[str], mcp_server_argv: list[str]) -> dict[str, Any]:
    """The agent JSON for `profile` (variables already filled in) with the resolved `tools`
    (cao's vocabulary); `mcp_server_argv` is how this installation starts cao-mcp-server."""
    servers = _servers(profile, tools, mcp_server_argv)
    kiro_tools = _tools(profile, tools)
    if kiro_tools == ["*"]:  # Kiro's allowedTools has no "everything": every builtin and server
        allowed = ["@builtin", *(f"@{name}" for name in servers)]
    else:
        allowed = list(kiro_tools)
    document: dict[str, Any] = {
        "name": profile.name,
        "description": profile.description,
        "prompt": profile.system_prompt or None,
        "mcpServers": servers,
        "tools": kiro_tools,
        "allowedTools": allowed,
        "resources": _string_list(profile, "resources") or [],
    }
    for key, kind in _PASSED.items():
        value = profile.frontmatter.get(key)
        if value is None:
            continue
        if not isinstance(value, kind):
            raise InvalidInput(f"profile {profile.name!r}: {key} must be a {'mapping' if kind is dict else 'boolean'}")
        if isinstance(value, dict) and key == "toolAliases" and not all(isinstance(v, str) for v in value.values()):
            raise InvalidInput(f"profile {profile.name!r}: toolAliases must map tool names to names")
        document[key] = value
    if profile.model is not None:
        if not isinstance(profile.model, str):
            raise InvalidInput(f"profile {profile.name!r}: model must be a string")
        document["model"] = profile.model
    return document
