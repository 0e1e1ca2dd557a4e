"""Map a script's tool name onto the tool the requesting CLI actually offers.

Scripts are written once and replayed against any CLI, so a step says
``shell`` or ``mcp:<server>:<tool>`` and this module looks through the request's
tool list for that CLI's spelling (Claude ``Bash``, Codex ``exec_command`` or a
namespaced MCP function, opencode ``<server>_<tool>``, ...). The request's own
tool list is the source of truth: nothing is emitted that the CLI did not offer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .conversation import SEARCH_TOOLS, ToolDef

# Shell tools per CLI, in preference order: (tool name, argument that takes the command).
SHELL_TOOLS = (
    ("Bash", "command"),
    ("exec_command", "cmd"),
    ("run_shell_command", "command"),
    ("bash", "command"),
    ("shell_command", "command"),
    ("shell", "command"),
    ("terminal", "command"),  # Hermes Agent
)


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]
    namespace: str | None = None
    auxiliary: bool = False  # a tool_search call inserted to load a deferred tool


def _canon(name: str) -> str:
    # CLIs sanitise server names differently (hyphens kept, turned into _, ...);
    # comparing only letters and digits makes those spellings meet.
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _find(tools: list[ToolDef], names: list[str]) -> ToolDef | None:
    for wanted in names:
        for t in tools:
            if t.full_name == wanted:
                return t
    for wanted in map(_canon, names):
        for t in tools:
            if _canon(t.full_name) == wanted:
                return t
    return None


def _fill_required(tool: ToolDef, args: dict[str, Any], command: str = "") -> dict[str, Any]:
    """Give required arguments the script did not set a neutral value, so the CLI's validation passes."""
    filled = dict(args)
    types = dict(tool.types)
    for prop in tool.required:
        if prop in filled:
            continue
        kind = types.get(prop, "string")
        if kind == "boolean":
            filled[prop] = False
        elif kind in ("integer", "number"):
            continue  # no neutral number; leave it to the CLI's default
        elif kind == "array":
            filled[prop] = []
        elif kind == "object":
            filled[prop] = {}
        else:
            filled[prop] = f"Run: {command}"[:80] if prop == "description" and command else ""
    return filled


def _shell_call(tools: list[ToolDef], args: dict[str, Any]) -> Call | None:
    command = str(args.get("command", args.get("cmd", "")))
    extra = {k: v for k, v in args.items() if k not in ("command", "cmd")}
    for name, arg in SHELL_TOOLS:
        tool = _find_exact(tools, name)
        if tool is None:
            continue
        value: Any = ["bash", "-lc", command] if name == "shell" else command
        kept = {k: v for k, v in extra.items() if not tool.properties or k in tool.properties}
        return Call(name, _fill_required(tool, {arg: value, **kept}, command), tool.namespace)
    return None


def _find_exact(tools: list[ToolDef], name: str) -> ToolDef | None:
    return next((t for t in tools if t.full_name == name), None)


def _search_call(tools: list[ToolDef], flat_name: str, tool_name: str) -> Call | None:
    """qwen (and Claude when it defers tools) loads MCP tools through a search tool first."""
    for search in SEARCH_TOOLS:
        tool = _find_exact(tools, search)
        if tool is None:
            continue
        # A search tool that documents a "select:" form gets an exact selection; others a keyword.
        query = f"select:{flat_name}" if "select:" in tool.description else tool_name
        return Call(tool.name, {"query": query}, tool.namespace, auxiliary=True)
    return None


def _device_part(name: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]+", "_", name.lower())).strip("_")


def _device_call(tools: list[ToolDef], server: str, tool_name: str, args: dict[str, Any]) -> Call | None:
    """oh-my-pi offers no MCP tool by name: it mounts each as a device `xd://mcp__<server>_<tool>`
    that its `write` tool (the one with an intent argument `i`) runs, the JSON arguments as content."""
    write = _find_exact(tools, "write")
    if write is None or not {"i", "path", "content"} <= set(write.properties):
        return None
    device = f"mcp__{_device_part(server)}_{_device_part(tool_name)}"
    return Call(write.name, {"i": f"Run {tool_name}", "path": f"xd://{device}", "content": json.dumps(args)})


def resolve(step_name: str, args: dict[str, Any], tools: list[ToolDef], searched: bool) -> Call | None:
    """The call to emit for a script step, a tool_search call to load it first, or None if unavailable.

    ``searched`` says a search call was already made for this step, so a tool that is
    still missing is reported instead of searched for forever.
    """
    if step_name == "shell":
        found = _shell_call(tools, args)
        if found:
            return found
    if step_name.startswith("mcp:"):
        _, _, rest = step_name.partition(":")
        server, _, tool_name = rest.rpartition(":")
        if not server or not tool_name:
            return None
        flat = f"mcp__{server}__{tool_name}"
        # Claude/qwen flat name, Codex namespace, Gemini, opencode; the bare tool name last.
        candidates = [flat, f"{server}__{tool_name}", f"mcp_{server}_{tool_name}", f"{server}_{tool_name}", tool_name]
        tool = _find(tools, candidates)
        if tool is None:
            device = _device_call(tools, server, tool_name, args)
            if device is not None:
                return device
            return None if searched else _search_call(tools, flat, tool_name)
        return Call(tool.name, _fill_required(tool, args), tool.namespace)
    tool = _find(tools, [step_name])
    if tool is None:
        return None
    return Call(tool.name, _fill_required(tool, args), tool.namespace)
