"""Settings-file plumbing and screen reading (dialog boxes, turns, the last answer, menu keys)
shared by the Gemini CLI and Qwen Code providers.

Both CLIs (qwen-code is a fork of gemini-cli) read a JSON-with-comments
`settings.json` with the same `mcpServers` and `hooks` shapes. cao never writes
the user's file: it reads it, lays its own per-terminal keys over a copy, and
points the CLI at the copy (each provider says how).

Both reach cao's MCP endpoint themselves (`httpUrl`: streamable HTTP). Both expand `$VAR` and
`${VAR}` in every string of a settings file they load, from their own environment, so the
header that proves the agent names CAO_MCP_TOKEN (the pane's environment holds it) and the
credential is in no file cao writes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import agent_credentials
from . import tool_names
from .base import LaunchContext, Screen
from .common import HOOK_ACK_WAIT_S, HOOK_TIMEOUT_S, MCP_SERVER_NAME, hook_command, hook_url

# Keys a profile's `mcpServers` entry may carry over to the CLI's settings.
_MCP_KEYS = ("command", "args", "env", "cwd", "url", "httpUrl", "headers", "timeout", "trust")

# A string, a comment, or a comma that only precedes a closing bracket. Strings are
# matched first so that `//` or `,}` inside a value is left alone.
_JSONC_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/|,(?=\s*[}\]])', re.S)


def read_jsonc(path: Path) -> dict[str, Any]:
    """A settings file as the CLI reads it (comments and trailing commas allowed); {} if absent or
    unreadable, since the CLI itself would then run on its defaults too."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    cleaned = _JSONC_TOKEN.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)
    try:
        value = json.loads(cleaned) if cleaned.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`overlay` over `base`: mappings merge key by key, lists keep the user's items and add ours
    (so a user's own hooks and allow-lists keep working), any other value is replaced."""
    out = dict(base)
    for key, value in overlay.items():
        old = out.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = merge(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            out[key] = old + [item for item in value if item not in old]
        else:
            out[key] = value
    return out


def tool_limits(provider: str, ctx: LaunchContext) -> dict[str, Any]:
    """Settings that make the CLI refuse what is outside the tool set (tool_names.py's table):
    `tools.exclude` for builtins, `mcp.excluded` for the profile's other MCP servers."""
    tools = ctx.allowed_tools
    if tools is None or ctx.yolo or tool_names.UNRESTRICTED in tools:
        return {}
    out: dict[str, Any] = {}
    if refused := tool_names.refused_builtins(provider, tools):
        out["tools"] = {"exclude": refused}
    declared = ctx.profile_extra.get("mcpServers")
    inside = tool_names.servers(tools) | {MCP_SERVER_NAME}
    if excluded := [str(n) for n in (declared if isinstance(declared, Mapping) else {}) if n not in inside]:
        out["mcp"] = {"excluded": excluded}
    return out


def hooks(ctx: LaunchContext, events: Iterable[str], http: bool = False) -> dict[str, list]:
    """`hooks` settings that report each event to cao-server: through the hook channel (a
    command hook, JSON payload on stdin) or, with `http` (a CLI that has HTTP hooks), posted
    by the CLI itself, which starts no process at all (see common.hook_url)."""
    url = hook_url(ctx) if http else None

    def hook(event: str) -> dict:
        if url is not None:
            return {
                "type": "http",
                "name": "cao-hook",
                "url": url,
                # Interpolated by the CLI from its own environment: the secret is in no file.
                "headers": {"X-CAO-Hook-Secret": "${CAO_HOOK_SECRET}"},
                "allowedEnvVars": ["CAO_HOOK_SECRET"],
                "timeout": HOOK_ACK_WAIT_S,  # seconds, for an HTTP hook
            }
        return {
            "type": "command",
            "name": "cao-hook",
            "command": hook_command(ctx, event),
            "timeout": HOOK_TIMEOUT_S * 1000,  # ms
        }

    return {event: [{"hooks": [hook(event)]}] for event in events}


# The credential as the CLI reads it: a reference it expands from its own environment.
_TOKEN_REFERENCE = "${" + agent_credentials.ENV_VAR + "}"


def mcp_servers(ctx: LaunchContext, trust: bool) -> dict[str, dict]:
    """cao's endpoint as `cao-mcp-server` (trusted: its tools are cao's own orchestration calls)
    plus the profile's other `mcpServers`. The profile's own cao-mcp-server entry is replaced by
    the real one, whose header proves this terminal."""
    servers: dict[str, dict] = {}
    declared = ctx.profile_extra.get("mcpServers")
    if isinstance(declared, Mapping):
        for name, spec in declared.items():
            if name != MCP_SERVER_NAME and isinstance(spec, Mapping):
                servers[str(name)] = {k: spec[k] for k in _MCP_KEYS if k in spec}
    servers[MCP_SERVER_NAME] = {
        "httpUrl": ctx.mcp_url,
        "headers": {agent_credentials.HEADER: _TOKEN_REFERENCE},
        "trust": trust,
    }
    return servers


def without_cao_server(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` without an `mcpServers` entry of cao's name: cao's entry is laid over whole, not
    merged, so that an entry of an older setup (a stdio `command`, its `env`) lends it nothing."""
    servers = settings.get("mcpServers")
    if not isinstance(servers, Mapping) or MCP_SERVER_NAME not in servers:
        return settings
    return {**settings, "mcpServers": {k: v for k, v in servers.items() if k != MCP_SERVER_NAME}}


def write_private(path: Path, text: str) -> None:
    """Write a file only this user can read (settings may hold tokens copied from the user's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_private(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


# --- screen helpers: both UIs come from the same Ink code base --------------------------------
def last_index(rows: list[str], test: Callable[[str], object]) -> int | None:
    return next((i for i in range(len(rows) - 1, -1, -1) if test(rows[i])), None)


def trim(rows: list[str], status_row: re.Pattern[str]) -> list[str]:
    """Rows without the trailing blank and status rows (spinner, hints, hook notices)."""
    end = len(rows)
    while end and (not rows[end - 1].strip() or status_row.search(rows[end - 1])):
        end -= 1
    return rows[:end]


def last_box(rows: list[str], status_row: re.Pattern[str]) -> list[str]:
    """The rows of the box drawn last (╭ to ╰), or [] when the rows do not end with one."""
    rows = trim(rows, status_row)
    if not rows or not rows[-1].lstrip().startswith("╰"):
        return []
    top = last_index(rows, lambda r: r.lstrip().startswith("╭"))
    return rows[top:] if top is not None else []


def box_question(box: list[str], option: re.Pattern[str]) -> str:
    """The question a dialog box asks: its first line ending in "?", else its first text line."""
    texts = [r.strip(" │") for r in box[1:-1] if r.strip(" │") and not option.match(r)]
    return next((t for t in texts if t.endswith("?")), texts[0] if texts else "a question")


_YES = {"y", "yes", "ok", "okay", "allow", "allow once", "approve", "accept", "proceed", "sure", "trust"}


def menu_keys(answer: str) -> list[str]:
    """Keys that answer a numbered option menu: a number picks that option, a yes picks the first
    (allow once, trust), anything else declines with Esc. Typed words would be ignored by the menu
    and the Enter after them would confirm the highlighted first option, whatever they said."""
    word = " ".join(answer.strip().lower().rstrip(".!").split())
    if len(word) == 1 and word.isdigit():
        return [word]
    return ["1"] if word in _YES else ["Escape"]


def dialog_keys(screen: Screen, answer: str) -> list[str] | None:
    """Every question these CLIs ask is a numbered menu: answer it with keys (see menu_keys). cao asks
    only while the status is waiting_user_answer; the screen is not consulted, since cao's copy of it
    can lag behind the hook that reported the dialog (seen: "no" pasted, Enter allowed the tool)."""
    return menu_keys(answer)


def last_turn(rows: list[str], echo: re.Pattern[str], answer_mark: str) -> tuple[int | None, int | None]:
    """(last echoed prompt, last answer row after it) in `rows`; a prompt scrolled off reads as None."""
    q = last_index(rows, lambda r: bool(echo.match(r)))
    start = 0 if q is None else q + 1
    answer = last_index(rows[start:], lambda r: r.startswith(answer_mark))
    return q, None if answer is None else start + answer


def last_answer(history: list[str], echo: re.Pattern[str], answer_mark: str, status_row: re.Pattern[str]) -> str | None:
    """The text of the last answer after the last echoed prompt, or None. An answer's first row
    starts with `answer_mark`; its continuation rows are indented to the width of that mark."""
    _, answer = last_turn(history, echo, answer_mark)
    if answer is None:
        return None
    indent = " " * len(answer_mark)
    end = answer + 1
    while end < len(history) and (not history[end].strip() or history[end].startswith(indent)):
        end += 1
    block = trim(history[answer:end], status_row)
    return "\n".join([block[0][len(answer_mark) :]] + [row[len(indent) :] for row in block[1:]])
