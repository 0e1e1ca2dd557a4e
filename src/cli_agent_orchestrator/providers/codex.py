"""Provider for the Codex CLI (npm `@openai/codex`, tested with 0.171.0, binary `codex`).

Per-terminal settings go in as `-c key=value` overrides (values are TOML), so the
user's `$CODEX_HOME/config.toml` is only read, never written, and their login in
`$CODEX_HOME` keeps working. The overrides are written with the whole command
line into a 0700 launch script under `terminal_dir`, since tmux refuses a
command longer than ~16 KB and a system prompt can be longer than that.

Status: Codex's UserPromptSubmit and Stop hooks report through the hook channel. `notify` is not
used: it also fires for the title-generation thread, in the middle of a tool turn,
so it cannot mean "turn done". The screen is the fallback and the detector of
dialogs, errors and interrupted turns (none of which fires a hook).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..agent_credentials import ENV_VAR as MCP_TOKEN_ENV
from ..agent_credentials import HEADER as AGENT_HEADER
from ..models import TerminalStatus
from . import tool_names
from .base import Launch, LaunchContext, Provider, Screen, StatusReading, stop_hook_message
from .common import HOOK_TIMEOUT_S, MCP_SERVER_NAME, hook_command, terminal_dir

MODEL_PROVIDER = "cao_openai"  # defined per terminal when the server env names OPENAI_BASE_URL
# Codex runs hooks synchronously (the hook channel's bash script, a few ms each), so only the
# two that carry the turn: tool hooks would only repeat "processing". Approval dialogs are left to the
# screen: it sees them ~0.1 s before PermissionRequest would arrive, and sees them go, while
# a hook-set "waiting" would last (the monitor lets only hooks end it) until the next hook.
HOOK_EVENTS = ("UserPromptSubmit", "Stop")
MCP_TOOL_TIMEOUT_S = 3600  # a blocking handoff runs for as long as its worker; Codex's default is 60 s
_MCP_KEYS = ("command", "args", "env", "cwd", "url")

# --- TOML values for -c ------------------------------------------------------------


def _toml_str(text: str) -> str:
    # JSON's string escapes are all valid in TOML basic strings; TOML also wants DEL escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_str(str(k))} = {toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return _toml_str(str(value))


def _user_config(ctx: LaunchContext) -> dict:
    """The user's config.toml, read only to keep their hooks and project entries alive
    next to ours (a -c override replaces a whole value)."""
    home = Path(ctx.environ.get("CODEX_HOME") or Path.home() / ".codex")
    try:
        return tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# --- launch ------------------------------------------------------------------------


def _bypass(ctx: LaunchContext) -> bool:
    return (
        ctx.yolo or "*" in (ctx.allowed_tools or []) or ctx.profile_extra.get("permissionMode") == "bypassPermissions"
    )


def _mcp_servers(ctx: LaunchContext) -> dict[str, dict]:
    servers: dict[str, dict] = {}
    declared = ctx.profile_extra.get("mcpServers")
    # A profile server outside the tool set is not configured at all (nothing to refuse).
    tools = ctx.allowed_tools
    inside = None if tools is None or _bypass(ctx) else tool_names.servers(tools)
    if isinstance(declared, Mapping):
        for name, spec in declared.items():
            if inside is not None and name not in inside:
                continue
            if name != MCP_SERVER_NAME and isinstance(spec, Mapping) and re.fullmatch(r"[\w-]+", str(name)):
                servers[str(name)] = {k: spec[k] for k in _MCP_KEYS if k in spec}
    # cao's own server, cao-server's /mcp over streamable HTTP. The credential is named, not
    # given: Codex reads the header's value from its environment (the pane's CAO_MCP_TOKEN), so
    # it never appears in a `-c` argument. Its tools are cao's orchestration calls, so they never
    # ask. Required: Codex then holds a prompt until the server is up (an optional one gets ~1 s,
    # and a first turn would miss handoff/assign), and exits with the cause if it cannot start.
    servers[MCP_SERVER_NAME] = {
        "url": ctx.mcp_url,
        "env_http_headers": {AGENT_HEADER: MCP_TOKEN_ENV},
        "required": True,
        "startup_timeout_sec": 30,
        "tool_timeout_sec": MCP_TOOL_TIMEOUT_S,
        "default_tools_approval_mode": "approve",
    }
    return servers


def overrides(ctx: LaunchContext) -> list[tuple[str, Any]]:
    """The per-terminal config, as (dotted key, value) pairs for `-c`."""
    user = _user_config(ctx)
    out: list[tuple[str, Any]] = [("check_for_update_on_startup", False)]
    # Trusting the working directory for this run avoids the "Trust this folder?" screen
    # without Codex saving the decision. A decision the user already made stands, and
    # their other entries stay (the override replaces the whole table).
    projects = {k: v for k, v in (user.get("projects") or {}).items() if isinstance(v, Mapping)}
    entry = dict(projects.get(ctx.working_directory, {}))
    entry.setdefault("trust_level", "trusted")
    projects[ctx.working_directory] = entry
    out.append(("projects", projects))
    if base_url := ctx.environ.get("OPENAI_BASE_URL"):
        # Codex speaks only the Responses API; an OpenAI-compatible endpoint in the
        # server env becomes a model provider of its own (no login needed for it).
        spec: dict[str, Any] = {"name": "OpenAI-compatible (cao)", "base_url": base_url, "wire_api": "responses"}
        if ctx.environ.get("OPENAI_API_KEY"):
            spec["env_key"] = "OPENAI_API_KEY"
        out += [("model_providers." + MODEL_PROVIDER, spec), ("model_provider", MODEL_PROVIDER)]
    if not _bypass(ctx):
        # Codex has no per-tool switch: the set picks the sandbox (tool_names.py's codex column).
        # "never": what the sandbox allows runs without asking, and what it refuses goes back
        # to the model as a failure, never to a prompt nobody is there to answer.
        levels = tool_names.names("codex", ctx.allowed_tools or ["@builtin"])
        out += [
            ("approval_policy", "on-request" if tool_names.keeps_prompts(ctx.profile_extra) else "never"),
            ("sandbox_mode", "workspace-write" if "workspace-write" in levels else "read-only"),
        ]
    if ctx.system_prompt:
        out.append(("developer_instructions", ctx.system_prompt))
    for name, server in _mcp_servers(ctx).items():
        out.append((f"mcp_servers.{name}", server))
    # Codex writes its shell's whole environment to $CODEX_HOME/shell_snapshots/*.sh (0644, left
    # behind when the pane is killed): the credential stays out of the shell, and so out of there.
    # (Codex itself reads it from its own environment for the MCP header.) The user's list stays.
    policy = user.get("shell_environment_policy")
    theirs = policy.get("exclude") if isinstance(policy, Mapping) else None
    out.append(("shell_environment_policy.exclude", [*(theirs if isinstance(theirs, list) else []), MCP_TOKEN_ENV]))
    hooks = user.get("hooks")
    user_hooks: Mapping[str, Any] = hooks if isinstance(hooks, Mapping) else {}
    out.append(("features.hooks", True))
    for event in HOOK_EVENTS:
        ours = {"hooks": [{"type": "command", "command": hook_command(ctx, event), "timeout": HOOK_TIMEOUT_S}]}
        theirs = user_hooks.get(event)
        out.append((f"hooks.{event}", (list(theirs) if isinstance(theirs, list) else []) + [ours]))
    # Profile frontmatter `codexConfig: {key: value}`: further overrides, last wins.
    extra = ctx.profile_extra.get("codexConfig")
    if isinstance(extra, Mapping):
        out += [(str(k), v) for k, v in extra.items() if re.fullmatch(r"[\w.-]+", str(k))]
    return out


def build_launch(ctx: LaunchContext) -> Launch:
    argv = [
        shutil.which("codex") or "codex",
        # No shared app-server daemon: it (and its MCP servers) would outlive the terminal.
        "--no-daemon",
        # Inline mode: the conversation stays in tmux's scrollback for extract_reply.
        "--no-alt-screen",
        # Hooks from -c are "untrusted" and would not run; cao vets its own.
        "--dangerously-bypass-hook-trust",
    ]
    if _bypass(ctx):
        argv.append("--dangerously-bypass-approvals-and-sandbox")
    if ctx.model:
        argv += ["-m", ctx.model]
    for key, value in overrides(ctx):
        argv += ["-c", f"{key}={toml(value)}"]
    if ctx.resume_session_id:  # the subcommand takes the same options, then the session's id
        argv[1:1] = ["resume"]
        argv.append(ctx.resume_session_id)
    script = terminal_dir(ctx) / "codex-launch.sh"
    fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(f"#!/bin/sh\nexec {shlex.join(argv)}\n")
    # A start-up failure (a bad setting) then ends with its message, not a backtrace that
    # would push the message out of the screen tail cao reports.
    return Launch(argv=["/bin/sh", str(script)], env={"RUST_BACKTRACE": "0"})


# --- hooks -------------------------------------------------------------------------

_HOOK_STATUS = {"UserPromptSubmit": TerminalStatus.PROCESSING, "Stop": TerminalStatus.COMPLETED}


def status_from_hook(event: str, payload: dict, last_event: str | None = None) -> StatusReading | None:
    status = _HOOK_STATUS.get(event)
    return StatusReading(status) if status else None


# --- screen ------------------------------------------------------------------------

# Dialogs end with one of these key hints as their last row (a reply never does:
# the composer and footer are always drawn below it).
_DIALOG_HINTS = (
    ("Press enter to confirm or esc to cancel", "Codex asks for approval"),
    ("enter to submit | esc to cancel", "Codex asks a question"),
    ("enter continue · esc back", "Codex asks to trust the folder"),
    ("enter confirm · esc skip", "Codex asks to review hooks"),
)
_BUSY = re.compile(r"^\S \S.*\besc to interrupt\)")
_PROMPT = "› "
_REPLY = "• "
_FAILED = "■ "
_INTERRUPTED = "■ Conversation interrupted"
_WORKED = re.compile(r"^\s*(?:─ )?Worked for ")
_STARTING = "? for shortcuts"  # the footer's only row until the session is ready
_WAITING_FOR_START = "Waiting for startup"  # footer while a prompt sent during start-up waits
_QUEUED = "• Queued follow-up inputs"
# A dialog's option list marks its selected row with the composer's `› `: "› 1. Trust and
# continue" over "  2. Back …". Codex draws a frame row by row, so a screen read mid-frame can
# hold the list without the key-hint row below it; that list is no composer.
_SELECTED_OPTION = re.compile(r"^› \d+\. ")
_OTHER_OPTION = re.compile(r"^  \d+\. ")


def _rows(lines: list[str]) -> list[str]:
    return "\n".join(line.rstrip() for line in lines).rstrip("\n").split("\n")


def _block_end(rows: list[str], start: int) -> int:
    """First row after the item starting at `start` (its rows are indented, up to a blank row)."""
    end = start + 1
    while end < len(rows) and rows[end].startswith("  "):
        end += 1
    return end


def _composer(rows: list[str]) -> int | None:
    """The live input row: the last `› ` row with only indented footer rows below it."""
    for i in range(len(rows) - 1, -1, -1):
        row = rows[i]
        if row.startswith(_PROMPT) or row == _PROMPT.rstrip():
            return i
        if row and not row.startswith(" "):
            return None
    return None


def _is_option_list(rows: list[str], composer: int) -> bool:
    # The composer always has a footer row below it; a list may not have its next option yet.
    below = next((r for r in rows[composer + 1 :] if r.strip()), "")
    return bool(_SELECTED_OPTION.match(rows[composer]) and (not below or _OTHER_OPTION.match(below)))


def _last_turn(rows: list[str], end: int) -> tuple[int | None, int]:
    """(index of the last submitted prompt above `end`, first row of its output)."""
    for i in range(end - 1, -1, -1):
        if rows[i].startswith(_PROMPT):
            return i, min(_block_end(rows, i), end)
    return None, 0


def read_status(screen: Screen) -> StatusReading:
    rows = _rows(screen.lines)
    for hint, reason in _DIALOG_HINTS:
        if any(hint in row for row in rows[-2:]):
            return StatusReading(TerminalStatus.WAITING_USER_ANSWER, reason)
    composer = _composer(rows)
    if composer is None:
        return StatusReading(TerminalStatus.UNKNOWN)  # starting up, or exiting
    if _is_option_list(rows, composer):
        # A dialog drawn up to its options: its hint row (and so which dialog) is still to come.
        return StatusReading(TerminalStatus.UNKNOWN)
    # The placeholder is grey text; only the cursor tells it from typed text.
    has_text = not (screen.cursor_row == composer and screen.cursor_col <= len(_PROMPT))
    footer = [r.strip() for r in rows[_block_end(rows, composer) :] if r.strip()]
    if footer and all(r == _STARTING for r in footer):
        # Drawn before the session is configured; the model/cwd line comes when it is.
        return StatusReading(TerminalStatus.UNKNOWN, composer_has_text=has_text)
    # The item right above the composer: the busy row, or prompts queued until the session
    # (and its required MCP server) is up or the running turn ends.
    live = ""
    for row in reversed(rows[:composer]):
        if _WORKED.match(row):
            break  # a finished turn's last row: nothing is live
        if row and not row.startswith(" "):
            live = row
            break
    if _BUSY.match(live) or live.startswith(_QUEUED) or any(r.startswith(_WAITING_FOR_START) for r in footer):
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=has_text)
    _, start = _last_turn(rows, composer)
    outcome = None
    for row in rows[start:composer]:
        if row.startswith(_INTERRUPTED):
            # No hook fires on Esc: the screen is certain here and says so (definite).
            outcome = StatusReading(TerminalStatus.IDLE, "the turn was interrupted", definite=True)
        elif row.startswith(_FAILED):
            outcome = StatusReading(TerminalStatus.ERROR, row[len(_FAILED) :].strip())
        elif row.startswith(_REPLY) or _WORKED.match(row):
            outcome = StatusReading(TerminalStatus.COMPLETED)
    if has_text:
        # A new prompt is being typed: the last turn's outcome (even an error) is history,
        # and a new turn must not be judged by it.
        return StatusReading(TerminalStatus.IDLE, composer_has_text=True)
    return outcome or StatusReading(TerminalStatus.IDLE)


# Command approval menu: options end in their shortcut key, "(y)", "(p)", "(esc)".
_APPROVAL_KEYS = (
    ({"y", "yes", "1", "allow", "approve"}, "y"),
    ({"p", "2", "always", "yes always"}, "p"),
    ({"n", "no", "3", "deny", "reject", "cancel"}, "Escape"),
)


def dialog_keys(screen: Screen, answer: str) -> list[str] | None:
    """Codex's approval menu ignores typed text (Enter would confirm "Yes"): answer with its keys."""
    if not any(row.rstrip().endswith("(y)") for row in screen.lines):
        return None
    word = answer.strip().lower().rstrip(".")
    for words, key in _APPROVAL_KEYS:
        if word in words:
            return [key]
    return None


def extract_reply(history_lines: list[str]) -> str | None:
    """The last `• ` block of the last turn that is the model's text, not a tool row."""
    rows = [line.rstrip() for line in history_lines]
    composer = _composer(_rows(rows))
    end = composer if composer is not None else len(rows)
    _, start = _last_turn(rows, end)
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for row in rows[start:end]:
        if row.startswith(_REPLY):
            current = [row[len(_REPLY) :]]
            blocks.append(current)
        elif current is not None and (row.startswith("  ") or not row) and not _WORKED.match(row):
            current.append(row[2:])
        elif row:
            current = None  # another item (the turn's footer, an error, a notice) ends the block
    texts = [b for b in blocks if not _is_tool_block(b)]
    if not texts:
        return None
    return "\n".join(texts[-1]).strip("\n")


def _is_tool_block(block: list[str]) -> bool:
    # Tool items carry their output under a "└ " row: "• Ran cmd", "• Called server.tool(...)".
    return any(row.lstrip().startswith("└ ") for row in block[1:3])


PROVIDER = Provider(
    name="codex",
    resumes=True,  # --resume-session-id
    binary="codex",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    exit_command="/quit",
    startup_timeout=60.0,
    accepts_input_while_busy=False,
    status_from_hook=status_from_hook,
    reply_from_hook=stop_hook_message,
    dialog_keys=dialog_keys,
    # Codex reaches /mcp itself and lists cao's tools while it starts (a required server: a prompt
    # typed earlier waits, "Waiting for startup").
    mcp="http",
    lists_tools_at_start=True,
)
