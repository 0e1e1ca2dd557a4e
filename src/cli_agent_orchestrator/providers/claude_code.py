"""Provider for Claude Code (npm `@anthropic-ai/claude-code`, tested with 2.1.197, binary `claude`).

Per-terminal config goes in by flags pointing at files under `terminal_dir` (`--settings`,
`--mcp-config --strict-mcp-config`, `--append-system-prompt-file`): cao never writes the
user's `~/.claude*` files, and their login keeps working. Start-up screens (first run,
folder trust) get Enter on their highlighted choice, as a person would press it; Claude
records that itself. The bypass-mode warning is skipped by a per-terminal setting instead:
accepting it would make Claude write the user's `~/.claude/settings.json`.

Status: hooks report turns (UserPromptSubmit → processing, Stop → completed, StopFailure →
error). Dialogs come from the screen only: it sees a permission prompt appear *and* go away,
while a hook would hold `waiting_user_answer` through the approved tool's whole run (the
monitor lets only the screen end a dialog it saw). Never keyed on the random spinner verbs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..agent_credentials import ENV_VAR as MCP_TOKEN_ENV
from ..models import TerminalStatus
from . import tool_names
from .base import Launch, LaunchContext, Provider, Screen, StatusReading, stop_hook_message
from .common import HOOK_TIMEOUT_S, MCP_SERVER_NAME, hook_command, terminal_dir

HOOK_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop", "StopFailure")
PERMISSION_MODES = ("acceptEdits", "auto", "default", "dontAsk", "plan")

# --- launch ------------------------------------------------------------------------


def _bypass(ctx: LaunchContext) -> bool:
    return (
        ctx.yolo or "*" in (ctx.allowed_tools or []) or ctx.profile_extra.get("permissionMode") == "bypassPermissions"
    )


def permissions(ctx: LaunchContext) -> dict[str, list[str]]:
    """The tool set (tool_names.py's table) as Claude's allow/deny rules: the set runs without
    asking; builtins and profile MCP servers outside it are denied (deny wins)."""
    # cao's own tools never ask: delegating is what a cao agent is for.
    allow, deny = [f"mcp__{MCP_SERVER_NAME}"], []
    tools = ctx.allowed_tools
    if tools is not None and not _bypass(ctx):
        if not tool_names.keeps_prompts(ctx.profile_extra):
            allow += [name for name in tool_names.names("claude_code", tools) if name not in allow]
        deny = tool_names.refused_builtins("claude_code", tools)
        declared = ctx.profile_extra.get("mcpServers")
        inside = tool_names.servers(tools) | {MCP_SERVER_NAME}
        deny += [f"mcp__{name}" for name in declared or {} if isinstance(declared, Mapping) and name not in inside]
    return {"allow": allow, "deny": deny} if deny else {"allow": allow}


def settings(ctx: LaunchContext) -> dict[str, Any]:
    # Claude runs these synchronously (UserPromptSubmit and Stop in every turn): the hook
    # channel's bash script, a few ms, where a Python start took ~0.1 s.
    hooks = {
        event: [{"hooks": [{"type": "command", "command": hook_command(ctx, event), "timeout": HOOK_TIMEOUT_S}]}]
        for event in HOOK_EVENTS
    }
    out: dict[str, Any] = {
        "hooks": hooks,
        "permissions": permissions(ctx),
        # Ghost text in the composer and tip rows would blur the screen reading.
        # (Not prefersReducedMotion: it draws the spinner with the reply's "●".)
        "promptSuggestionEnabled": False,
        "spinnerTipsEnabled": False,
    }
    if _bypass(ctx):
        out["skipDangerousModePermissionPrompt"] = True
    return out


def mcp_config(ctx: LaunchContext) -> dict[str, Any]:
    servers: dict[str, Any] = {}
    declared = ctx.profile_extra.get("mcpServers")
    if isinstance(declared, Mapping):
        servers.update(
            {str(k): dict(v) for k, v in declared.items() if k != MCP_SERVER_NAME and isinstance(v, Mapping)}
        )
    # cao-server's own endpoint. The credential stays in the pane's environment: Claude expands
    # `${VAR}` in an --mcp-config file as it reads it, so the file holds only the reference. As a
    # bearer, not X-CAO-Agent-Token: Claude writes an HTTP server's headers into its MCP log
    # (~/.cache/claude-cli-nodejs/…/mcp-logs-*), and redacts only `…Authorization` ones.
    # alwaysLoad: cao's tools are never deferred behind Claude's tool search.
    servers[MCP_SERVER_NAME] = {
        "type": "http",
        "url": ctx.mcp_url,
        "headers": {"Authorization": "Bearer ${" + MCP_TOKEN_ENV + "}"},
        "alwaysLoad": True,
    }
    return {"mcpServers": servers}


def _write(path: Path, text: str) -> str:
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
        fh.write(text)
    return str(path)


def build_launch(ctx: LaunchContext) -> Launch:
    tdir = terminal_dir(ctx)
    argv = [
        shutil.which("claude") or "claude",
        "--settings",
        _write(tdir / "settings.json", json.dumps(settings(ctx), indent=1)),
        "--mcp-config",
        _write(tdir / "mcp.json", json.dumps(mcp_config(ctx), indent=1)),
        "--strict-mcp-config",
    ]
    # The transcript lands in ~/.claude/projects/<cwd>/<id>.jsonl: a fresh id per terminal, or the
    # resumed conversation's own (Claude refuses --session-id with --resume unless it forks).
    if ctx.resume_session_id:
        argv += ["--resume", ctx.resume_session_id]
    else:
        argv += ["--session-id", str(uuid.uuid4())]
    if ctx.system_prompt:
        argv += ["--append-system-prompt-file", _write(tdir / "system_prompt.md", ctx.system_prompt)]
    if ctx.model:
        argv += ["--model", ctx.model]
    env = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    mode = ctx.profile_extra.get("permissionMode")
    if _bypass(ctx):
        argv.append("--dangerously-skip-permissions")
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"  # as root Claude refuses bypass mode outside a declared sandbox
    elif mode in PERMISSION_MODES:
        argv += ["--permission-mode", str(mode)]
    return Launch(argv=argv, env=env)


# --- hooks -------------------------------------------------------------------------


_HOOK_STATUS = {"UserPromptSubmit": TerminalStatus.PROCESSING, "Stop": TerminalStatus.COMPLETED}


def status_from_hook(event: str, payload: dict, last_event: str | None = None) -> StatusReading | None:
    if event in _HOOK_STATUS:
        return StatusReading(_HOOK_STATUS[event])
    if event == "StopFailure":
        detail = str(payload.get("last_assistant_message") or payload.get("error") or "the turn failed")
        return StatusReading(TerminalStatus.ERROR, detail.splitlines()[0][:300])
    if event == "SessionStart" and payload.get("source") != "compact":  # compaction happens mid-turn
        return StatusReading(TerminalStatus.IDLE)
    return None


# --- screen ------------------------------------------------------------------------
_RULE = re.compile(r"^─{20,}$")
_SPINNER = re.compile(r"^[·✢✳✶✻✽*] \S.*(…|Retrying in \d)")
_DONE = re.compile(r"^[·✢✳✶✻✽*] \S+ for \d")  # "✻ Brewed for 4s": the turn's closing line
_OPTION = re.compile(r"^\s+❯ \d+\. ")  # the highlighted entry of a numbered menu
_MENU_ROW = re.compile(r"^\s+(?:❯ )?\s*([1-9])\. (.+?)(?: ✔)?$")
_YES, _NO = {"y", "yes", "allow", "approve", "ok"}, {"n", "no", "deny", "reject", "cancel"}
_INTERRUPTED = "Interrupted · What should Claude do instead?"
# A dialog's bottom row, drawn last: key hints (the theme picker ends with its preview's).
_HINTS = ("Esc to cancel", "Enter to confirm", "Press Enter to continue", "ctrl+t to disable")
_QUEUED_PLACEHOLDER = "Press up to edit queued messages"  # grey text in an empty composer
# Start-up screens cao answers with Enter (the highlighted choice is the safe one).
_STARTUP = (
    ("Yes, I trust this folder", "folder trust dialog"),
    ("Choose the text style", "first-run theme choice"),
    ("Press Enter to continue", "first-run security notes"),
)
# Left to a person (or answer_user_prompt): a credential choice, a risk waiver, tool permissions.
_ASKING = (
    ("Do you want to use this API key?", "Claude asks whether to use the API key in the environment"),
    ("Bypass Permissions mode", "Claude asks to accept bypass-permissions mode"),
    ("Do you want to", "permission prompt"),
)  # "…proceed?", "…make this edit…?", "…create…?"


def _clean(lines: list[str]) -> list[str]:
    # Claude pads some markers with no-break spaces (`❯\xa0text` in the prompt box).
    rows = [line.replace("\xa0", " ").rstrip() for line in lines]
    while rows and not rows[-1]:
        rows.pop()
    return rows


def _input_box(rows: list[str]) -> tuple[int, int] | None:
    """(top rule, bottom rule) of the last prompt box: a rule, `❯` rows, a rule."""
    for top in range(len(rows) - 2, -1, -1):
        if _RULE.match(rows[top]) and rows[top + 1].startswith("❯"):
            bottom = top + 2
            while bottom < len(rows) and (not rows[bottom] or rows[bottom].startswith("  ")):
                bottom += 1
            if bottom < len(rows) and _RULE.match(rows[bottom]):
                return top, bottom
    return None


def _last_turn(rows: list[str]) -> list[str]:
    """Transcript rows after the last submitted prompt (`❯ text` at column 0, then indented rows)."""
    for i in range(len(rows) - 1, -1, -1):
        if rows[i].startswith("❯ "):
            end = i + 1
            while end < len(rows) and rows[end].startswith("  "):
                end += 1
            return rows[end:]
    return rows


def _blocks(rows: list[str]) -> list[tuple[bool, str]]:
    """The `● ` blocks of a turn as (is a tool call, text)."""
    out: list[tuple[bool, str]] = []
    i = 0
    while i < len(rows):
        if not rows[i].startswith("● "):
            i += 1
            continue
        end = i + 1
        while end < len(rows) and (not rows[end] or rows[end].startswith("  ")):
            end += 1
        body = rows[i + 1 : end]
        tool = any(r.startswith("  ⎿") for r in body)  # a call's arguments may wrap before its ⎿ rows
        text = "\n".join([rows[i][2:]] + [r[2:] for r in body])
        out.append((tool, text.strip("\n")))
        i = end
    return out


def _outcome(turn: list[str]) -> StatusReading:
    # After Esc or a refused permission no hook fires, and Claude asks the user what to do.
    if any(_INTERRUPTED in r for r in turn):
        return StatusReading(TerminalStatus.WAITING_USER_ANSWER, "turn interrupted; Claude asks what to do instead")
    texts = [text for tool, text in _blocks(turn) if not tool]
    if texts and texts[-1].startswith("API Error"):
        return StatusReading(TerminalStatus.ERROR, texts[-1].splitlines()[0][:300])
    if texts or any(_DONE.match(r) for r in turn):
        return StatusReading(TerminalStatus.COMPLETED)
    return StatusReading(TerminalStatus.IDLE)


def _dialog_area(rows: list[str]) -> list[str]:
    """A dialog is drawn below a rule in place of the prompt box (first-run screens have
    none); looking only there keeps an old answer quoting a marker from counting."""
    rules = [i for i, r in enumerate(rows) if _RULE.match(r)]
    return rows[rules[-1] + 1 :] if rules else rows


def _dialog(rows: list[str]) -> StatusReading | None:
    area = _dialog_area(rows)
    if not area or not any(hint in area[-1] for hint in _HINTS):
        return None  # not drawn to its last row yet: a half-drawn frame is no answerable dialog
    text = "\n".join(area)
    what = next((what for marker, what in _ASKING + _STARTUP if marker in text), None)
    if what is None and any(_OPTION.match(r) for r in area):
        what = "Claude shows a menu"
    if what is None:
        return None
    # A choice Claude is already acting on is ticked ("❯ 1. Yes, I trust this folder ✔"); the
    # dialog stays drawn a moment, and answering it again would press keys into what comes next.
    # (The theme picker ticks the current theme from the start: it never counts as chosen.)
    if what != "first-run theme choice" and any(_OPTION.match(r) and r.endswith(" ✔") for r in area):
        return StatusReading(TerminalStatus.PROCESSING, f"{what} answered")
    return StatusReading(TerminalStatus.WAITING_USER_ANSWER, what)


def read_status(screen: Screen) -> StatusReading:
    rows = _clean(screen.lines)
    box = _input_box(rows)
    if box is None:  # a dialog replaces the prompt box; or the UI is not drawn yet
        dialog = _dialog(rows)
        if dialog is not None:
            return dialog
        busy = any("esc to interrupt" in r for r in rows[-4:])
        return StatusReading(TerminalStatus.PROCESSING if busy else TerminalStatus.UNKNOWN)
    top, bottom = box
    composer = " ".join(r.strip() for r in [rows[top + 1][1:]] + rows[top + 2 : bottom]).strip()
    has_text = bool(composer) and composer != _QUEUED_PLACEHOLDER
    live = [r for r in rows[:top] if r.strip()][-6:]
    if any("esc to interrupt" in r for r in rows[bottom + 1 :]) or any(_SPINNER.match(r) for r in live):
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=has_text)
    outcome = _outcome(_last_turn(rows[:top]))
    if has_text and outcome.status in (TerminalStatus.IDLE, TerminalStatus.COMPLETED):
        return StatusReading(TerminalStatus.IDLE, composer_has_text=True)
    return StatusReading(outcome.status, outcome.reason, has_text)


def answer_startup_dialog(screen: Screen) -> list[str] | None:
    # Judged on the marker alone, even mid-redraw or once ticked: cao asks while the status is
    # waiting, and a None here would end its wait; a spare Enter only meets the next start-up
    # screen (also answered with Enter) or the empty prompt, where it does nothing.
    rows = _clean(screen.lines)
    text = "" if _input_box(rows) is not None else "\n".join(_dialog_area(rows))
    return ["Enter"] if any(marker in text for marker, _ in _STARTUP) else None


def dialog_keys(screen: Screen, answer: str) -> list[str] | None:
    """Claude's menus ignore pasted text and Enter confirms the highlighted "Yes", so an answer
    becomes its option's digit (which selects at once): "2", "yes", "no", or a label's start."""
    rows = _clean(screen.lines)
    found = [] if _input_box(rows) is not None else [_MENU_ROW.match(r) for r in _dialog_area(rows)]
    menu = {m.group(1): m.group(2).lower() for m in found if m}  # digit → label
    if not menu:
        return None  # no menu (e.g. "what should Claude do instead?"): the answer is typed
    word = answer.strip().lower().rstrip(".!")
    if word in menu:
        return [word]
    wanted = "yes" if word in _YES else "no" if word in _NO else word
    digit = next((d for d, label in menu.items() if label.startswith(wanted)), None)
    if digit is None and word not in _YES:
        # Anything else must not approve by accident: refuse, so Claude asks what to do instead.
        digit = next((d for d, label in menu.items() if label.startswith("no")), None)
    return [digit] if digit else None


def extract_reply(history_lines: list[str]) -> str | None:
    rows = _clean(history_lines)
    box = _input_box(rows)
    texts = [text for tool, text in _blocks(_last_turn(rows[: box[0]] if box else rows)) if not tool]
    return texts[-1] if texts else None


PROVIDER = Provider(
    name="claude_code",
    resumes=True,  # --resume-session-id
    binary="claude",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    answer_startup_dialog=answer_startup_dialog,
    exit_command="/exit",
    startup_timeout=60.0,
    # Claude queues a message typed during a turn and runs it next.
    accepts_input_while_busy=True,
    status_from_hook=status_from_hook,
    reply_from_hook=stop_hook_message,
    dialog_keys=dialog_keys,
    # Claude reaches /mcp itself and lists cao's tools as it starts, but hands them to the model
    # only once it has also listed prompts and resources (a message sent before that is offered
    # Claude's WaitForMcpServers instead): it is ready after all three.
    mcp="http",
    lists_tools_at_start=True,
    mcp_ready_after=("tools/list", "prompts/list", "resources/list"),
)
