"""Provider for Grok CLI (npm `@vibe-kit/grok-cli`, tested with 0.0.34, binary `grok`).

Grok speaks OpenAI Chat Completions to `GROK_BASE_URL` with `GROK_API_KEY` (both from the
environment; the `--api-key`/`--base-url` flags would be saved into the user's settings, so cao
never passes them). Everything else goes through cao's start-up shim (`_grok_cli_shim.py`,
loaded with NODE_OPTIONS): Grok's two settings files become per-terminal copies (the user's
`~/.grok/user-settings.json`, and the working directory's `.grok/settings.json` with cao's
relay added to its `mcpServers`), the tool set is enforced, yolo approves everything, and the
profile's prompt is appended to Grok's system prompt. The user's `GROK.md` files still apply.

Grok has no hooks, events or terminal title: status comes from the screen. Its MCP client speaks
stdio only (its HTTP transports do not implement the protocol), so cao's tools come through the
`cao-mcp-server` relay, which inherits this terminal's CAO_MCP_* from Grok's environment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..models import TerminalStatus
from . import tool_names
from ._grok_cli_shim import write_shim
from ._node_settings import write_json
from .base import Launch, LaunchContext, Provider, Screen, StatusReading
from .common import MCP_SERVER_NAME, mcp_server, terminal_dir

_FILE_TOOLS = frozenset({"create_file", "str_replace_editor", "edit_file"})  # Grok's "file" confirmations


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _user_settings_path(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()) / ".grok" / "user-settings.json"


def _mcp_servers(ctx: LaunchContext, project: dict[str, Any], tools: list[str] | None) -> dict[str, Any]:
    """The user's project servers and the profile's (only those the tool set names, when it is
    limited), and cao's relay: a stdio entry without env, so the relay takes this terminal's
    CAO_MCP_URL and CAO_MCP_TOKEN from the environment Grok passes its servers."""
    limited = tools is not None and not ctx.yolo and tool_names.UNRESTRICTED not in tools
    inside = tool_names.servers(tools or [])
    servers: dict[str, Any] = {}
    declared = ctx.profile_extra.get("mcpServers")
    for source in (project.get("mcpServers"), declared):
        for name, spec in (source if isinstance(source, Mapping) else {}).items():
            if name != MCP_SERVER_NAME and isinstance(spec, Mapping) and (not limited or name in inside):
                servers[str(name)] = {"name": str(name), **spec}
    relay = mcp_server(ctx)
    servers[MCP_SERVER_NAME] = {
        "name": MCP_SERVER_NAME,
        "transport": {"type": "stdio", "command": relay["command"], "args": relay["args"]},
    }
    return servers


def _policy(ctx: LaunchContext) -> dict[str, Any]:
    """What runs without asking (Grok's session flags) and what is refused (tool_names' table)."""
    tools = ctx.allowed_tools
    if ctx.yolo or (tools is not None and tool_names.UNRESTRICTED in tools):
        return {"approved": ["allOperations"], "refused": [], "mcpAllowed": None}
    if tools is None:  # no policy: Grok's own confirmations
        return {"approved": [], "refused": [], "mcpAllowed": None}
    inside = set(tool_names.names("grok_cli", tools))
    approved = []
    if not tool_names.keeps_prompts(ctx.profile_extra):
        approved += ["bashCommands"] if "bash" in inside else []
        approved += ["fileOperations"] if inside & _FILE_TOOLS else []
    mcp_allowed = sorted({n for n in inside if n.startswith("mcp__")} | {f"mcp__{MCP_SERVER_NAME}"})
    return {"approved": approved, "refused": tool_names.refused_builtins("grok_cli", tools), "mcpAllowed": mcp_allowed}


def build_launch(ctx: LaunchContext) -> Launch:
    own = terminal_dir(ctx)
    project = _read_json(Path(ctx.working_directory) / ".grok" / "settings.json")
    user_settings, project_settings = own / "grok-user-settings.json", own / "grok-project-settings.json"
    write_json(user_settings, _read_json(_user_settings_path(ctx.environ)))  # Grok may migrate its copy
    write_json(project_settings, {**project, "mcpServers": _mcp_servers(ctx, project, ctx.allowed_tools)})
    config = {
        "userSettings": str(user_settings),
        "projectSettings": str(project_settings),
        "systemPrompt": ctx.system_prompt,
        "nodeOptions": ctx.environ.get("NODE_OPTIONS", ""),
        **_policy(ctx),
    }
    node_options = write_shim(own / "grok-shim.mjs", config)
    argv = ["grok"]
    if ctx.model:
        argv += ["--model", ctx.model]
    # CI=false: Ink (through ci-info) draws no frame at all until exit when CI is set to anything
    # but "false" ("0" included), and Grok then never shows its composer; cao-server may run under
    # a CI that sets CI=true, which the pane inherits.
    return Launch(argv=argv, env={"NODE_OPTIONS": node_options, "CI": "false"})


def preflight(profile_name: str, environ: Mapping[str, str]) -> str | None:
    """Without a key Grok prints an error and exits: say so before anything is started."""
    if environ.get("GROK_API_KEY") or _read_json(_user_settings_path(environ)).get("apiKey"):
        return None
    return "grok_cli needs an API key: set GROK_API_KEY (and GROK_BASE_URL for a server other than x.ai)"


# --- the screen (Grok 0.0.34: Ink UI, padded 2 columns; see tests/fixtures/screens/grok_cli) -------
#     > count the files                              <- history: echoed prompt
#     ⏺ Bash(echo hi)                                <- a tool: "⏺" row, then "⎿" rows
#       ⎿ hi
#     ⏺ The shell said: done.                        <- answer, continuation rows indented 4
#     / Thinking... (3s · ↑ 962 tokens · esc to interrupt)   <- only while busy
#     ╭──────────────────────────────╮
#     │ ❯ Ask me anything...         │               <- composer (placeholder when empty)
#     ╰──────────────────────────────╯
#     ⏸ auto-edit: off (shift + tab)  ≋ model  ⚒ mcps: 1
# A confirmation replaces composer and footer: "Do you want to proceed with this operation?",
# options "1. Yes" … "4. No, with feedback" (the choice is only a colour), "↑↓ navigate • …".
_FOOTER = re.compile(r"^\s*[⏸▶] auto-edit: ")
_BUSY = re.compile(r"esc to interrupt\)\s*$")
_DIALOG = "Do you want to proceed with this operation?"
_DIALOG_HINT = "Enter select • Esc cancel"
_PLACEHOLDER = "Ask me anything..."
_ECHO, _ENTRY, _DETAIL = "  > ", "  ⏺ ", "    ⎿ "
_INDENT = "    "
_ERROR = "Sorry, I encountered an error: "
_RUNNING = "    ⎿ Executing..."
_STREAMING = "█"  # the cursor under an answer that is still streaming
_DECLINED = "cancelled by user"  # a declined confirmation's result ("Operation cancelled by user", …)


def _box(rows: list[str], end: int) -> tuple[int, int] | None:
    """(top, bottom) of the last box that closes above row `end`."""
    bottom = next((i for i in range(end - 1, -1, -1) if rows[i].lstrip().startswith("╰")), None)
    if bottom is None:
        return None
    top = next((i for i in range(bottom - 1, -1, -1) if rows[i].lstrip().startswith("╭")), None)
    return None if top is None else (top, bottom)


def _composer_text(rows: list[str]) -> str:
    """What the composer holds: its rows without the frame and prompt, the placeholder as ""."""
    text = " ".join(r.strip().strip("│").strip().removeprefix("❯").strip() for r in rows).strip()
    return "" if text == _PLACEHOLDER else text


def _is_echo(row: str) -> bool:
    """An echoed prompt: "  > text". A multi-line one holds carriage returns, which draw its last
    line over the row from column 0; every other row of Grok's UI is indented."""
    return row.startswith(_ECHO) or row[:1] not in ("", " ")


def _entries(history: list[str]) -> tuple[int | None, list[tuple[int, int, bool]]]:
    """The last echoed prompt's row and the entries after it: (first row, end row, is a tool)."""
    asked = next((i for i in range(len(history) - 1, -1, -1) if _is_echo(history[i])), None)
    starts = [i for i in range((asked or -1) + 1, len(history)) if history[i].startswith(_ENTRY)]
    entries = []
    for n, first in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(history)
        tool = first + 1 < end and history[first + 1].startswith(_DETAIL)
        entries.append((first, end, tool))
    return asked, entries


def _answer(history: list[str]) -> str | None:
    """The last answer after the last echoed prompt (not a tool's entry), or None."""
    _, entries = _entries(history)
    answers = [(first, end) for first, end, tool in entries if not tool]
    if not answers:
        return None
    first, end = answers[-1]
    block = [history[first][len(_ENTRY) :]] + [
        row[len(_INDENT) :] if row.startswith(_INDENT) else row.strip() for row in history[first + 1 : end]
    ]
    while block and block[-1].strip() in ("", _STREAMING):
        block.pop()
    return "\n".join(row.rstrip() for row in block)


def _dialog(rows: list[str]) -> StatusReading | None:
    if not any(_DIALOG in r for r in rows) or not any(_DIALOG_HINT in r for r in rows):
        return None
    ask = next((i for i in range(len(rows) - 1, -1, -1) if "⎿ Requesting user confirmation" in rows[i]), None)
    reason = rows[ask - 1].strip().removeprefix("⏺").strip() if ask else _DIALOG
    return StatusReading(TerminalStatus.WAITING_USER_ANSWER, reason)


def read_status(screen: Screen) -> StatusReading:
    rows = [row.rstrip() for row in screen.lines]
    footer = next((i for i in range(len(rows) - 1, -1, -1) if _FOOTER.match(rows[i])), None)
    if footer is None:  # no composer: a confirmation, or still starting
        return _dialog(rows) or StatusReading(TerminalStatus.UNKNOWN)
    box = _box(rows, footer)
    if box is None:
        return StatusReading(TerminalStatus.UNKNOWN)
    typed = _composer_text(rows[box[0] + 1 : box[1]])
    has_text, composer_rows = bool(typed), box[1] - box[0] - 1
    history = rows[: box[0]]
    if any(_BUSY.search(row) for row in history[-3:]):
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=has_text, composer_rows=composer_rows)
    asked, entries = _entries(history)
    last = history[entries[-1][0] : entries[-1][1]] if entries else []
    if any(row.strip() == _STREAMING for row in last) or (
        bool(entries) and entries[-1][2] and any(_DECLINED in row or row.startswith(_RUNNING) for row in last)
    ):
        # An answer still streaming, a tool still running, or a declined confirmation: Grok drops
        # its spinner when one is declined, but goes on (the refusal is the tool's result, and the
        # model is asked again), so only the entry itself tells.
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=has_text, composer_rows=composer_rows)
    answer = _answer(history) if asked is not None else None
    if answer is not None and answer.startswith(_ERROR):
        return StatusReading(TerminalStatus.ERROR, answer[len(_ERROR) :], composer_has_text=has_text)
    # A turn that ends on a tool (the model said nothing after it) is done too; an echo with
    # nothing after it is a turn cancelled with Esc.
    done = asked is not None and bool(entries) and not has_text
    status = TerminalStatus.COMPLETED if done else TerminalStatus.IDLE
    return StatusReading(status, composer_has_text=has_text, composer_rows=composer_rows)


def extract_reply(history_lines: list[str]) -> str | None:
    rows = [line.rstrip() for line in history_lines]
    # Ink redraws the whole UI when it is taller than the pane, so the history holds many frames:
    # read the last one, above the last composer.
    footer = next((i for i in range(len(rows) - 1, -1, -1) if _FOOTER.match(rows[i])), None)
    box = _box(rows, footer) if footer is not None else None
    return _answer(rows[: box[0]] if box else rows)


def dialog_keys(screen: Screen, answer: str) -> Sequence[str] | None:
    """Grok's menu takes arrows and Enter, not digits, and starts on "1. Yes": a yes (or 1) is
    Enter, 2 ("don't ask again this session") is Down then Enter, anything else declines (Esc)."""
    word = " ".join(answer.strip().lower().rstrip(".!").split())
    if word in ("1", "y", "yes", "ok", "allow", "allow once", "approve", "accept", "proceed"):
        return ["Enter"]
    if word in ("2", "always", "allow always", "yes, and don't ask again this session"):
        return ["Down", "Enter"]
    return ["Escape"]


PROVIDER = Provider(
    name="grok_cli",
    binary="grok",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    exit_command="exit",  # "/exit" opens the command menu first; "exit" quits at once
    startup_timeout=90.0,
    dialog_keys=dialog_keys,
    mcp="stdio",  # Grok's HTTP/SSE MCP transports are stubs; stdio works
    preflight=preflight,
    enter_delay_s=0.5,  # at most: an Enter read together with the paste becomes part of the text
    enter_after_echo=True,
)
