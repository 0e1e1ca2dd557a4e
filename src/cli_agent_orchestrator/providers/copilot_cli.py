"""Provider for GitHub Copilot CLI (npm `@github/copilot`, tested with 1.0.102, binary `copilot`).

Everything cao adds goes in per terminal, through flags and files under the terminal's own
directory; the user's `~/.copilot` (or `$COPILOT_HOME`) is read by Copilot as usual and never
written by cao:
- hooks: a plugin directory (`--plugin-dir`) whose `hooks.json` reports Copilot's own events to
  cao (the user's hooks, in their home or repository, keep running beside it);
- cao's tools: `--additional-mcp-config @file`, cao's endpoint as an `http` server whose header
  names `${CAO_MCP_TOKEN}`; Copilot expands it from its environment, so no file holds the token;
- the profile's prompt: an `*.instructions.md` file in a directory named by
  `COPILOT_CUSTOM_INSTRUCTIONS_DIRS` (Copilot has no flag that appends to its system prompt);
- tools: `--excluded-tools` for builtins outside the set (the model never sees them), the set
  runs without asking (`--allow-all-tools`), `--yolo` for an unrestricted agent.
The model endpoint is the user's: Copilot's own `COPILOT_PROVIDER_*` variables (BYOK) or login.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from .. import agent_credentials
from ..models import TerminalStatus
from . import tool_names
from ._node_settings import box_question, last_answer, last_box, last_turn, menu_keys, write_json, write_private
from .base import Launch, LaunchContext, Provider, Screen, StatusReading
from .common import HOOK_TIMEOUT_S, MCP_SERVER_NAME, hook_command, terminal_dir

# Copilot's hook events that carry a status (hooks.json, format version 1).
_HOOK_EVENTS = ("userPromptSubmitted", "postToolUse", "agentStop")
# Keys a profile's `mcpServers` entry may carry over to Copilot's MCP config.
_MCP_KEYS = ("type", "command", "args", "env", "cwd", "url", "headers", "tools", "timeout")
_TRANSCRIPT_TAIL = 1 << 20  # bytes of the session's events.jsonl read back for the last answer


def _unrestricted(ctx: LaunchContext) -> bool:
    return ctx.yolo or tool_names.UNRESTRICTED in (ctx.allowed_tools or [])


def _mcp_config(ctx: LaunchContext) -> dict:
    """cao's endpoint plus the profile's MCP servers inside the tool set (one outside is not
    configured at all: Copilot cannot call what it does not know)."""
    inside = tool_names.servers(ctx.allowed_tools or []) if ctx.allowed_tools is not None else None
    servers: dict[str, dict] = {}
    declared = ctx.profile_extra.get("mcpServers")
    for name, spec in (declared if isinstance(declared, Mapping) else {}).items():
        keep = inside is None or _unrestricted(ctx) or name in inside
        if name != MCP_SERVER_NAME and isinstance(spec, Mapping) and keep:
            servers[str(name)] = {"tools": ["*"], **{k: spec[k] for k in _MCP_KEYS if k in spec}}
    if ctx.mcp_url:
        servers[MCP_SERVER_NAME] = {
            "type": "http",
            "url": ctx.mcp_url,
            # Expanded by Copilot from its own environment: the credential is in no file.
            "headers": {agent_credentials.HEADER: "${" + agent_credentials.ENV_VAR + "}"},
            "tools": ["*"],
        }
    return {"mcpServers": servers}


def _plugin(ctx: LaunchContext, directory: Path) -> Path:
    """A plugin of hooks only: Copilot runs each with the event's JSON on stdin."""
    hooks = {
        event: [{"type": "command", "bash": hook_command(ctx, event), "timeoutSec": HOOK_TIMEOUT_S}]
        for event in _HOOK_EVENTS
    }
    write_json(directory / "hooks.json", {"version": 1, "hooks": hooks})
    manifest = {"name": "cao-hooks", "description": "cao status hooks", "version": "1.0.0", "hooks": "hooks.json"}
    write_json(directory / "plugin.json", manifest)
    return directory


def _instructions(ctx: LaunchContext, directory: Path) -> str:
    """The directory list for COPILOT_CUSTOM_INSTRUCTIONS_DIRS: ours first, then the user's."""
    text = f"---\napplyTo: '**'\n---\n{ctx.system_prompt}\n"
    write_private(directory / ".github" / "instructions" / "cao-profile.instructions.md", text)
    return ",".join(filter(None, [str(directory), ctx.environ.get("COPILOT_CUSTOM_INSTRUCTIONS_DIRS", "")]))


def build_launch(ctx: LaunchContext) -> Launch:
    own = terminal_dir(ctx)
    mcp = own / "copilot-mcp.json"
    write_json(mcp, _mcp_config(ctx))
    argv = ["copilot", "--no-auto-update", "--plugin-dir", str(_plugin(ctx, own / "copilot-plugin"))]
    argv += ["--additional-mcp-config", f"@{mcp}", f"--allow-tool={MCP_SERVER_NAME}"]
    if ctx.model:
        argv += ["--model", ctx.model]
    tools = ctx.allowed_tools
    if _unrestricted(ctx):
        argv.append("--yolo")
    elif tools is not None:
        if refused := tool_names.refused_builtins("copilot_cli", tools):
            argv.append("--excluded-tools=" + ",".join(refused))
        if not tool_names.keeps_prompts(ctx.profile_extra):
            argv.append("--allow-all-tools")  # what is left is the set: it runs without asking
    env = {"COPILOT_AUTO_UPDATE": "false"}
    if ctx.system_prompt:
        env["COPILOT_CUSTOM_INSTRUCTIONS_DIRS"] = _instructions(ctx, own / "copilot-instructions")
    return Launch(argv=argv, env=env)


def status_from_hook(event: str, payload: dict, last_event: str | None = None) -> StatusReading | None:
    """`agentStop` ends a turn (it runs once the answer is recorded). A permission dialog is left to
    the screen: Copilot's `notification(permission_prompt)` hook runs before the dialog takes keys
    (seen: an Esc answering it at once was lost and the dialog stayed). A turn cancelled at a dialog
    fires nothing either: the screen says so (read_status, definite)."""
    if event in ("userPromptSubmitted", "postToolUse"):
        return StatusReading(TerminalStatus.PROCESSING)
    if event == "agentStop":
        return StatusReading(TerminalStatus.COMPLETED)
    return None


def _tail_lines(path: Path) -> list[str]:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - _TRANSCRIPT_TAIL))
            return fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def reply_from_hook(event: str, payload: dict) -> str | None:
    """The turn's last answer as Copilot recorded it (`transcriptPath`, its events.jsonl): the
    whole text, where the screen (an alternate screen: no scrollback) may show only its end."""
    path = payload.get("transcriptPath") if event == "agentStop" else None
    if not isinstance(path, str) or not path:
        return None
    for line in reversed(_tail_lines(Path(path))):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "user.message":
            return None  # the turn has no answer with text
        content = (record.get("data") or {}).get("content") if kind == "assistant.message" else None
        if isinstance(content, str) and content.strip():
            return content.strip()
    return None


# --- the screen (Copilot 1.0: alternate screen; see tests/fixtures/screens/copilot_cli) -----------
#    ❯ please greet the tester                           20:21   <- history: echoed prompt
#    ● Hello from the scripted model.                            <- answer, continuation indented 3
#      Second line, exact.
#    /tmp/work                                                   <- the working directory
#   ──────────────────────────────────────────────────
#   ❯                                                            <- composer
#   ──────────────────────────────────────────────────
#    ◎ Working esc esc edit prompt                    fake-model <- footer: busy, loading or hints
# A dialog (trust, permission) replaces composer and footer with a box whose options read
# "❯ 1. Yes". A long history gets a scrollbar column "┃" at the right edge.
_RULE = re.compile(r"^─{20,}$")
_SCROLLBAR = re.compile(r"\s*┃$")
_COMPOSER = re.compile(r"^❯(?: |$)")
_ECHO = re.compile(r"^ ❯ ")
_ANSWER = " ● "
_OPTION = re.compile(r"^[ │]*(?:❯ )?\s*\d+\. ")
_BUSY = re.compile(r"^ \S Working\b.*\besc\b")
_LOADING = re.compile(r"^ \S Loading: ")
_CANCELLED = "Operation cancelled by user"
_FAILED, _ABORTED = " ✗ ", "Operation aborted by user"  # a tool's row when its dialog was declined
# Rows of the folder-trust dialog (any one will do: cao's copy of a screen can lack a row).
_TRUST = ("Confirm folder trust", "Do you trust the files in this folder?", "remember this folder for future sessions")
_STATUS_ROW = re.compile(r"^ \S (Working|Loading)\b")


def _rows(lines: list[str]) -> list[str]:
    return [_SCROLLBAR.sub("", line.rstrip()) for line in lines]


def _dialog(rows: list[str]) -> StatusReading | None:
    box = last_box(rows, _STATUS_ROW)
    if not any(_OPTION.match(r) for r in box):
        return None
    return StatusReading(TerminalStatus.WAITING_USER_ANSWER, box_question(box, _OPTION))


def read_status(screen: Screen) -> StatusReading:
    rows = _rows(screen.lines)
    rules = [i for i, row in enumerate(rows) if _RULE.match(row)]
    asked = _dialog(rows)
    if asked is not None:
        return asked
    if len(rules) < 2 or not _COMPOSER.match(rows[rules[-2] + 1]):
        return StatusReading(TerminalStatus.UNKNOWN)  # still drawing the start
    composer = rows[rules[-2] + 1 : rules[-1]]
    typed = "\n".join([composer[0][1:], *composer[1:]]).strip()
    footer = next((r for r in rows[rules[-1] + 1 :] if r.strip()), "")
    if _LOADING.match(footer):
        return StatusReading(TerminalStatus.UNKNOWN)  # MCP servers still connecting: no cao tools yet
    if _BUSY.match(footer):
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=bool(typed))
    history = rows[: rules[-2]]
    asked_at, answer = last_turn(history, _ECHO, _ANSWER)
    answered = asked_at is not None and answer is not None
    cancelled = answer is not None and answered and history[answer][len(_ANSWER) :].startswith(_CANCELLED)
    # A declined tool is drawn ("✗ … Operation aborted by user") a moment before the turn's
    # "Operation cancelled" line; the entry above it (a start-up notice) is no answer of this turn.
    aborted = asked_at is not None and any(
        row.startswith(_FAILED) and _ABORTED in row for row in history[max(asked_at, answer or 0) :]
    )
    if cancelled or aborted:
        # A turn stopped at a dialog (declined) or by Esc fires no hook: the screen is certain.
        return StatusReading(TerminalStatus.IDLE, _CANCELLED, bool(typed), len(composer), definite=True)
    status = TerminalStatus.COMPLETED if answered and not typed else TerminalStatus.IDLE
    return StatusReading(status, "", bool(typed), len(composer))


def extract_reply(history_lines: list[str]) -> str | None:
    rows = _rows(history_lines)
    rules = [i for i, row in enumerate(rows) if _RULE.match(row)]
    history = rows[: rules[-2]] if len(rules) >= 2 else rows
    if last_turn(history, _ECHO, _ANSWER)[0] is None:
        return None  # no prompt on screen: the rows marked like answers are start-up notices
    return last_answer(history, _ECHO, _ANSWER, _STATUS_ROW)


def answer_startup_dialog(screen: Screen) -> list[str] | None:
    """Folder trust, for this session only (the highlighted "1. Yes"): whoever started the agent chose
    its directory. Enter, not "1": a second answer to a screen not yet redrawn lands in the composer,
    where "1" would become part of the first message and an Enter does nothing."""
    return ["Enter"] if any(cue in row for row in screen.lines for cue in _TRUST) else None


def dialog_keys(screen: Screen, answer: str) -> list[str]:
    """Copilot's dialogs are numbered menus: a number or a yes picks, anything else is Esc."""
    return menu_keys(answer)


PROVIDER = Provider(
    name="copilot_cli",
    binary="copilot",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    answer_startup_dialog=answer_startup_dialog,
    exit_command="/exit",
    startup_timeout=90.0,  # the first start in a home unpacks ~235 MB into ~/.cache/copilot
    status_from_hook=status_from_hook,
    reply_from_hook=reply_from_hook,
    # agentStop can run before Copilot has written the answer to its transcript (seen under load:
    # the turn's user.message was the last record); the screen meanwhile may show only its start.
    hook_reply_wait_s=2.0,
    dialog_keys=dialog_keys,
    mcp="http",  # cao's endpoint itself, streamable HTTP (--additional-mcp-config)
    enter_delay_s=0.5,  # at most: Enter waits for the composer to show the paste
    enter_after_echo=True,
)
