"""Provider for Qwen Code (npm `@qwen-code/qwen-code`, tested with 0.15.10, binary `qwen`).

Per-terminal settings go in through `QWEN_CODE_SYSTEM_SETTINGS_PATH`: the system
scope is read before (and overrides) the user's `~/.qwen/settings.json`, and
unlike Gemini CLI, Qwen loads it from any path. cao writes there a copy of the
admin's system file (if any) with its own keys laid over it, and points
`QWEN_CODE_SYSTEM_DEFAULTS_PATH` back at the usual defaults file, so the user's
and admin's settings keep working and no user file is written by cao. The
profile's prompt goes in with `--append-system-prompt` (Qwen keeps its own).

`general.enableAutoUpdate: false` is not optional: by default Qwen updates
itself with a global `npm install` on start.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..models import TerminalStatus
from . import tool_names
from ._node_settings import (
    box_question,
    dialog_keys,
    hooks,
    last_answer,
    last_box,
    last_turn,
    mcp_servers,
    merge,
    read_jsonc,
    tool_limits,
    without_cao_server,
    write_json,
)
from .base import Launch, LaunchContext, Provider, Screen, StatusReading
from .common import terminal_dir

SETTINGS_VERSION = 4  # Qwen 0.15 rewrites a settings file without this `$version`
_HOOK_EVENTS = ("UserPromptSubmit", "PostToolUse", "StopFailure", "Notification")


def _system_path(ctx: LaunchContext) -> Path:
    return Path(ctx.environ.get("QWEN_CODE_SYSTEM_SETTINGS_PATH") or "/etc/qwen-code/settings.json")


def _user_settings(ctx: LaunchContext) -> dict:
    qwen_home = ctx.environ.get("QWEN_HOME")
    return read_jsonc(Path(qwen_home) / "settings.json" if qwen_home else Path.home() / ".qwen" / "settings.json")


def _overlay(ctx: LaunchContext) -> dict:
    overlay: dict = {
        "$version": SETTINGS_VERSION,
        "general": {"enableAutoUpdate": False},  # else a global `npm install` of a newer Qwen
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"folderTrust": {"enabled": False}},  # the caller chose the working directory
        # The background memory extractor sends its own model requests after each turn.
        "memory": {"enableManagedAutoMemory": False},
        # HTTP hooks: Qwen posts each event itself (~1 ms) instead of starting a shell per event
        # (tens of ms, before the model is even asked); it waits for the answer, so an event
        # is applied before the UI goes on, as with the hook channel's ack.
        "hooks": hooks(ctx, _HOOK_EVENTS, http=True),
        "mcpServers": mcp_servers(ctx, trust=True),
        # Plain child processes for the shell tool: output capture does not race a pty.
        "tools": {"shell": {"enableInteractiveShell": False}},
    }
    auth = (_user_settings(ctx).get("security") or {}).get("auth")
    if not (isinstance(auth, dict) and auth.get("selectedType")) and ctx.environ.get("OPENAI_API_KEY"):
        # The system scope wins over the user's: only pick an auth type the user has not picked.
        overlay["security"]["auth"] = {"selectedType": "openai"}
    return merge(overlay, tool_limits("qwen_cli", ctx))


def build_launch(ctx: LaunchContext) -> Launch:
    system = _system_path(ctx)
    ours = terminal_dir(ctx) / "qwen-settings.json"
    write_json(ours, merge(without_cao_server(read_jsonc(system)), _overlay(ctx)))
    tools = ctx.allowed_tools or []
    yolo = ctx.yolo or "*" in tools
    argv = ["qwen", "--approval-mode", "yolo" if yolo else "default"]
    if ctx.model:
        argv += ["--model", ctx.model]
    if ctx.system_prompt:
        argv += ["--append-system-prompt", ctx.system_prompt]
    # The shared table's names; MCP servers are trusted in the settings instead.
    allowed = tool_names.names("qwen_cli", [t for t in tools if not tool_names.servers([t])])
    if allowed and not yolo and not tool_names.keeps_prompts(ctx.profile_extra):  # the set runs without asking
        argv += ["--allowed-tools", *allowed]
    if ctx.resume_session_id:
        argv += ["--resume", ctx.resume_session_id]
    env = {
        "QWEN_CODE_SYSTEM_SETTINGS_PATH": str(ours),
        # The defaults file is looked up beside the system file: keep the admin's in force.
        "QWEN_CODE_SYSTEM_DEFAULTS_PATH": ctx.environ.get("QWEN_CODE_SYSTEM_DEFAULTS_PATH")
        or str(system.parent / "system-defaults.json"),
        "QWEN_CODE_NO_RELAUNCH": "true",
    }  # one node process, not a launcher plus a child
    return Launch(argv=argv, env=env)


def status_from_hook(event: str, payload: dict, last_event: str | None = None) -> StatusReading | None:
    """Claude-style hooks. The end of a turn is `Notification(idle_prompt)`, which the UI sends once
    it has gone idle: `Stop` runs before the answer is drawn (seen: "completed" while the screen
    still showed the spinner and no answer). `Notification(permission_prompt)` also comes from the
    UI, after the dialog is drawn, so an answer sent at once is taken (unlike Gemini's hook).
    The idle notice right after a failed turn (`StopFailure`) must not turn the error into done."""
    if event in ("UserPromptSubmit", "PostToolUse"):
        return StatusReading(TerminalStatus.PROCESSING)
    if event == "StopFailure":
        return StatusReading(
            TerminalStatus.ERROR,
            str(payload.get("error_details") or payload.get("error") or "the model request failed"),
        )
    if event == "Notification" and payload.get("notification_type") == "permission_prompt":
        return StatusReading(TerminalStatus.WAITING_USER_ANSWER, str(payload.get("message") or "permission"))
    if event == "Notification" and payload.get("notification_type") == "idle_prompt":
        if last_event == "StopFailure":
            return None
        return StatusReading(TerminalStatus.COMPLETED)  # also ends a cancelled turn, which has no hook
    return None


# --- the screen (Qwen 0.15: Ink UI; see tests/fixtures/screens/qwen_cli) ---------------------------
#   > say hello                                   <- history: echoed prompt (2 spaces)
#   ✦ Hello.                                      <- answer, continuation rows indented 4
#   ⠏ Reticulating splines... (1s · esc to cancel)  <- only while busy
#   ─────────────────────────────────────────      <- rule
#   >   Type your message or @path/to/file        <- composer ("*" in YOLO mode)
#   ─────────────────────────────────────────      <- rule
#     ? for shortcuts                             <- "Connecting to MCP servers..." at start
# A dialog replaces the composer with a box whose options read "› 1. ...".
_RULE = re.compile(r"^─{20,}$")
_COMPOSER = re.compile(r"^[>*!] ")
_ECHO = re.compile(r"^  [>*!] ")
_OPTION = re.compile(r"^[ │]*› \d+\. ")
_BUSY = re.compile(r"^  [^\s✦].*esc to cancel\)$")  # a spinner row; answers start "✦" or deeper
_STATUS_ROW = re.compile(r"esc to cancel\)$|Waiting for user confirmation")
_PLACEHOLDER = "Type your message or @path/to/file"
_STARTING = ("Initializing...", "Connecting to MCP servers")  # shown under the composer at start
_ANSWER, _ERROR = "  ✦ ", "  ✕ "


def _dialog(rows: list[str]) -> StatusReading | None:
    box = last_box(rows, _STATUS_ROW)
    if not any(_OPTION.match(r) for r in box):
        return None
    return StatusReading(TerminalStatus.WAITING_USER_ANSWER, box_question(box, _OPTION))


def read_status(screen: Screen) -> StatusReading:
    rows = [row.rstrip() for row in screen.lines]
    rules = [i for i, row in enumerate(rows) if _RULE.match(row)]
    composer = rules[-2] + 1 if len(rules) >= 2 and _COMPOSER.match(rows[rules[-2] + 1]) else None
    if composer is None:  # no composer: a dialog, or still starting
        return _dialog(rows) or StatusReading(TerminalStatus.UNKNOWN)
    if any(cue in row for row in rows[rules[-1] :] for cue in _STARTING):
        return StatusReading(TerminalStatus.UNKNOWN)  # input now would run without cao's MCP tools
    typed = rows[composer][2:].strip(" \u200b")  # the cursor of an empty composer is a zero-width space
    has_text = bool(typed) and not typed.startswith(_PLACEHOLDER)
    history = rows[: rules[-2]]
    if any(_BUSY.match(row) for row in history[-3:]):
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=has_text)
    asked = _dialog(history)
    if asked is not None:
        return StatusReading(asked.status, asked.reason, composer_has_text=has_text)
    asked_at, answer = last_turn(history, _ECHO, _ANSWER)
    if asked_at is not None and answer is None:  # the last turn has no answer: did it fail?
        failed = next((r for r in history[asked_at + 1 :] if r.startswith(_ERROR)), None)
        if failed is not None:
            return StatusReading(TerminalStatus.ERROR, failed[4:].strip(), composer_has_text=has_text)
    done = answer is not None and not has_text
    return StatusReading(TerminalStatus.COMPLETED if done else TerminalStatus.IDLE, composer_has_text=has_text)


def extract_reply(history_lines: list[str]) -> str | None:
    lines = [line.rstrip() for line in history_lines]
    rules = [i for i, row in enumerate(lines) if _RULE.match(row)]
    history = lines[: rules[-2]] if len(rules) >= 2 else lines
    return last_answer(history, _ECHO, _ANSWER, _STATUS_ROW)


PROVIDER = Provider(
    name="qwen_cli",
    resumes=True,  # --resume-session-id
    binary="qwen",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    exit_command="/quit",
    startup_timeout=90.0,
    accepts_input_while_busy=False,
    status_from_hook=status_from_hook,
    dialog_keys=dialog_keys,
    mcp="http",  # cao's endpoint itself (_node_settings.mcp_servers)
    enter_delay_s=0.5,  # at most: like Gemini, Qwen reads an Enter right after a paste as part of it
    enter_after_echo=True,
)
