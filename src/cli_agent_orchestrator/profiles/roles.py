"""Roles and the tool set an agent gets: the profile's `allowedTools`, else its role's defaults
(a built-in role, or one the user defines in `<home>/settings.json`), else a `developer`'s.
The vocabulary itself, and what each entry is in each CLI, is providers/tool_names.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidInput
from ..providers.tool_names import CAO_SERVER, UNRESTRICTED, check_tool
from ..user_settings import user_roles

ROLE_DEFAULTS: dict[str, tuple[str, ...]] = {
    "supervisor": (f"@{CAO_SERVER}", "fs_read", "fs_list"),
    "reviewer": ("@builtin", "fs_read", "fs_list", f"@{CAO_SERVER}"),
    "developer": ("@builtin", "fs_*", "execute_bash", "web_fetch", f"@{CAO_SERVER}"),
}
FALLBACK_ROLE = "developer"


def gives_cao_tools(tools: Sequence[str] | None, yolo: bool) -> bool:
    """Whether an agent with this tool set has cao's own tools (handoff, assign, ...)."""
    if yolo or tools is None:
        return True
    server = f"@{CAO_SERVER}"
    return any(t in (UNRESTRICTED, server) or t.startswith(server + "/") for t in tools)


def needs_cao_tools(role: object, explicit_tools: Sequence[str] | None) -> str | None:
    """Why an agent of this profile cannot do without cao's tools, or None: a supervisor hands
    work out with them, and a set that names them asks for them. (Every role's defaults include
    them, so a worker without them still works: it only cannot report back by itself.)"""
    if role == "supervisor":
        return "is a supervisor"
    server = f"@{CAO_SERVER}"
    named = [t for t in explicit_tools or () if t == server or t.startswith(server + "/")]
    return f"names {named[0]} in its tools" if named else None


def roles(home: Path) -> dict[str, tuple[str, ...]]:
    """The built-in roles plus the user's (`roles` in `<home>/settings.json`, which may override)."""
    out = dict(ROLE_DEFAULTS)
    for role, tools in user_roles(home).items():
        out[role] = tuple(check_tool(t, f"role {role!r} in settings.json") for t in tools)
    return out


@dataclass(frozen=True)
class ToolSet:
    tools: list[str]
    source: str  # where the set came from, for people: "allowedTools" or "role developer (default)"


def resolve_tools(
    home: Path,
    profile_name: str,
    allowed_tools: list[str] | None,
    role: object,
    mcp_servers: Mapping | None = None,
) -> ToolSet:
    """Explicit `allowedTools` wins; else the role's defaults (`developer` when there is no
    role), plus `@name` for each of the profile's MCP servers. Unknown role or tool → InvalidInput."""
    where = f"profile {profile_name!r}"
    if role is not None and not isinstance(role, str):
        raise InvalidInput(f"{where}: role must be a string")
    known = roles(home) if role is not None or allowed_tools is None else ROLE_DEFAULTS
    if role is not None and role not in known:
        raise InvalidInput(f"{where}: unknown role {role!r} (known: {', '.join(sorted(known))})")
    if allowed_tools is not None:
        return ToolSet([check_tool(t, where) for t in allowed_tools], "allowedTools")
    tools = list(known[role or FALLBACK_ROLE])
    tools += [f"@{name}" for name in mcp_servers or {} if f"@{name}" not in tools]
    return ToolSet(tools, f"role {role}" if role else f"role {FALLBACK_ROLE} (no role or allowedTools)")
