"""Provider for Gemini CLI (npm `@google/gemini-cli`, tested with 0.61.0, binary `gemini`).

Per-terminal settings. Gemini reads `~/.gemini/settings.json` (user), the
workspace's `.gemini/settings.json` and a system file. The system-file override
(`GEMINI_CLI_SYSTEM_SETTINGS_PATH`) is ignored unless the file and every parent
directory are owned by root and not group/world-writable, so it cannot serve an
ordinary user; the workspace file would mean writing into the user's project.
What is left is `GEMINI_CLI_HOME`, which moves `~`: each terminal gets a shadow
home whose `.gemini/` holds a merged copy of the user's settings plus cao's keys,
and symlinks to every other entry of the user's `~/.gemini` (credentials,
accounts, history, extensions, commands, policies), so a user's login keeps
working and their files are read but never rewritten by cao.

The profile's system prompt becomes the global context file (`GEMINI.md`) of
the shadow home, followed by the user's own global one: Gemini has no flag that
appends to its system prompt, and replacing it (`GEMINI_SYSTEM_MD`) would drop
the CLI's own tool instructions.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..models import TerminalStatus
from . import tool_names
from ._node_settings import (
    box_question,
    dialog_keys,
    last_answer,
    last_box,
    last_index,
    last_turn,
    mcp_servers,
    merge,
    read_jsonc,
    tool_limits,
    trim,
    without_cao_server,
    write_json,
    write_private,
)
from .base import Launch, LaunchContext, Provider, Screen, StatusReading
from .common import MCP_SERVER_NAME, terminal_dir

DEFAULT_MODEL = "gemini-2.5-flash"  # the "auto" router wants a JSON verdict first; pin a model instead
# Entries of the real home that Gemini reads through its home directory as well.
_HOME_ENTRIES = (".agents", ".env")


# cao's profile vocabulary → Gemini tool names, for allowed tools given in the Claude/Kiro style.
def _overlay(ctx: LaunchContext, user: dict) -> dict:
    overlay: dict = {
        # An update would rewrite the npm install shared by every terminal.
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        # No trust screen: the working directory was chosen by whoever started the agent.
        "security": {"folderTrust": {"enabled": False}},
        "mcpServers": mcp_servers(ctx, trust=True),
        # History in tmux's scrollback (for the reply), and whole redraws: incremental
        # rendering leaves fragments of old rows that the status reader would see. The title
        # carries Gemini's own status (status_from_title), so it stays on and dynamic.
        "ui": {
            "useAlternateBuffer": False,
            "incrementalRendering": False,
            "hideWindowTitle": False,
            "dynamicWindowTitle": True,
        },
        # Plain child processes for the shell tool: under load, the pty-backed shell of 0.61
        # returned "(empty)" for a quick `echo` in about one run out of three.
        "tools": {"shell": {"enableInteractiveShell": False}},
    }
    allowed = user.get("mcp", {}).get("allowed") if isinstance(user.get("mcp"), dict) else None
    if isinstance(allowed, list):  # a user allow-list would otherwise hide cao's server
        overlay["mcp"] = {"allowed": [MCP_SERVER_NAME]}
    auth = (user.get("security") or {}).get("auth", {}) if isinstance(user.get("security"), dict) else {}
    if not (isinstance(auth, dict) and auth.get("selectedType")) and ctx.environ.get("GEMINI_API_KEY"):
        overlay["security"]["auth"] = {"selectedType": "gemini-api-key"}  # else an auth picker at start
    return merge(overlay, tool_limits("gemini_cli", ctx))


def _context_file_name(settings: dict) -> str:
    names = (settings.get("context") or {}).get("fileName") if isinstance(settings.get("context"), dict) else None
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0]
    return names if isinstance(names, str) and names else "GEMINI.md"


def _link_entries(source: Path, target: Path, skip: set[str], only: tuple[str, ...] | None = None) -> None:
    target.mkdir(parents=True, exist_ok=True)
    names = only if only is not None else (os.listdir(source) if source.is_dir() else [])
    for name in names:
        if name in skip or not (source / name).exists() or os.path.lexists(target / name):
            continue
        (target / name).symlink_to(source / name)


def _policy_file(directory: Path, tools: list[str]) -> Path:
    """Allowed tools as policy-engine rules: these run without asking (`--allowed-tools` is deprecated).
    Gemini drops the whole file when one rule fails its schema (every rule needs a `toolName`),
    and then asks before every tool: an MCP rule names its server and `*` or the one tool."""
    rules = []
    servers = tool_names.servers(tools)
    for tool in tools:
        if tool.startswith("@") and tool[1:].partition("/")[0] in servers:  # "@server", "@server/tool"
            server, _, one = tool[1:].partition("/")
            rules.append(
                f"[[rule]]\nmcpName = {json.dumps(server)}\ntoolName = {json.dumps(one or '*')}\n"
                'decision = "allow"\npriority = 100\n'
            )
            continue
        for name in tool_names.names("gemini_cli", [tool]):  # the shared table (`@builtin` too)
            rules.append(f'[[rule]]\ntoolName = {json.dumps(name)}\ndecision = "allow"\npriority = 100\n')
    path = directory / "cao-allowed-tools.toml"
    write_private(path, "\n".join(rules))
    return path


def build_launch(ctx: LaunchContext) -> Launch:
    own = terminal_dir(ctx)
    user_home = Path(ctx.environ.get("GEMINI_CLI_HOME") or Path.home())
    user_dir = user_home / ".gemini"
    user_settings = read_jsonc(user_dir / "settings.json")
    settings = merge(without_cao_server(user_settings), _overlay(ctx, user_settings))
    shadow = own / "gemini-home"
    memory = _context_file_name(settings)
    _link_entries(user_dir, shadow / ".gemini", skip={"settings.json", memory})
    _link_entries(user_home, shadow, skip=set(), only=_HOME_ENTRIES)
    write_json(shadow / ".gemini" / "settings.json", settings)
    if ctx.system_prompt or (user_dir / memory).is_file():
        try:
            theirs = (user_dir / memory).read_text(encoding="utf-8")
        except OSError:
            theirs = ""
        write_private(shadow / ".gemini" / memory, "\n\n".join(p for p in (ctx.system_prompt, theirs) if p))

    tools = ctx.allowed_tools or []
    yolo = ctx.yolo or "*" in tools
    argv = ["gemini", "-m", ctx.model or DEFAULT_MODEL, "--approval-mode", "yolo" if yolo else "default"]
    if tools and not yolo and not tool_names.keeps_prompts(ctx.profile_extra):  # the set runs without asking
        argv += ["--policy", str(_policy_file(own, tools))]
    if ctx.resume_session_id:
        argv += ["--resume", ctx.resume_session_id]
    # NO_RELAUNCH: one node process instead of a parent that re-spawns itself with more heap.
    # TRUST_WORKSPACE: no trust screen even where an admin setting turns folder trust back on.
    # CI=0: Gemini treats a set CI variable as "not interactive" and exits at once asking
    # for stdin; an agent started by a cao-server that itself runs under CI must stay a TUI.
    return Launch(
        argv=argv,
        env={
            "GEMINI_CLI_HOME": str(shadow),
            "GEMINI_CLI_NO_RELAUNCH": "1",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "CI": "0",
            "CONTINUOUS_INTEGRATION": "0",
        },
    )


# --- the title: Gemini's own status -------------------------------------------------------------
# With `ui.dynamicWindowTitle` (the default) Gemini sets its title (OSC 0) whenever its state
# changes: "◇  Ready (dir)" idle, "✦  Working… (dir)" or "✦  <thought> (dir)" busy, "✋  Action
# Required (dir)" at a confirmation, "⏲  Working… (dir)" for a silent shell. It writes it right
# after the frame that shows the state, so the screen is already there when the title comes. cao
# uses no Gemini hooks: each one costs a Gemini turn 40–110 ms (spawning the hook holds its event
# loop, and its start and its removal 3 s later each re-render the whole app), where the title
# costs nothing and, unlike AfterAgent, follows the answer's draw instead of preceding it.
_READY, _WORKING, _ASKING = "◇", ("✦", "⏲"), "✋"


def status_from_title(title: str, previous: str | None) -> StatusReading | None:
    """Working: busy; Ready after Working or a confirmation: the turn is done (an error or a
    cancelled turn on screen says how, see Provider.status_from_title). Ready at start-up says
    nothing (the screen tells when the composer takes input), nor does "Action Required": the
    dialog takes keys a moment after the title, so the screen says when it asks."""
    glyph = title.lstrip()[:1]
    if glyph in _WORKING:
        return StatusReading(TerminalStatus.PROCESSING)
    was = (previous or "").lstrip()[:1]
    if glyph == _READY and (was in _WORKING or was == _ASKING):
        return StatusReading(TerminalStatus.COMPLETED)
    return None


# --- the screen (Gemini 0.61: Ink UI; see tests/fixtures/screens/gemini_cli) ----------------------
# Bottom of the screen while the composer is shown:
#    ⠧ Thinking... (esc to cancel, 3s)          ? for shortcuts   <- only while busy
#   ─────────────────────────────────────────────────────────  <- the composer's rule
#    Shift+Tab to accept edits               1 MCP server
#    >   Type your message or @path/to/file                    <- " * " in YOLO mode
#    workspace (/directory)   sandbox   /model
# History above it: user turns echo as " > text", answers start "✦ " with 2-space
# continuation rows, tools are boxes (╭ │ ╰), API errors "✕ ...", notes "ℹ ...".
# Dialogs (permission, trust, loop detection, sign-in) replace the composer with a box
# whose options read "● 1. ...".
_RULE = re.compile(r"^─{20,}$")
_PROMPT = re.compile(r"^ [>*!] ")
_OPTION = re.compile(r"^[ │]*● \d+\. ")
_STATUS_ROW = re.compile(r"\(esc to cancel|\? for shortcuts$|^\s*(\S )?Executing Hooks: ")
_PLACEHOLDER = "Type your message or @path/to/file"
_BUSY = re.compile(r"^ \S .*\(esc to cancel")  # spinner glyph at column 1: no answer row starts so
_ANSWER, _ERROR, _CANCELLED = "✦ ", "✕ ", "ℹ Request cancelled."
# Gemini reports an MCP server's troubles as "✕" rows too, whenever they happen (once the user has
# used an MCP tool): "✕ MCP ERROR (cao-mcp-server)" when a restarted cao-server cuts the stream its
# MCP client keeps open. A notice about the connection, not a failed turn (its next call works).
_MCP_NOTICE = re.compile(r"^✕ (MCP ERROR \(|Error (connecting to|during discovery for) MCP server |Error discovering )")
_SIGN_IN = ("How would you like to authenticate", "Get started")


def _dialog(rows: list[str]) -> StatusReading | None:
    """The box drawn last, when it asks the user to pick an option."""
    box = last_box(rows, _STATUS_ROW)
    text = "\n".join(box)
    if all(cue in text for cue in _SIGN_IN):
        return StatusReading(
            TerminalStatus.ERROR,
            "Gemini CLI is not signed in: set GEMINI_API_KEY (or another auth method) or run `gemini` once and sign in",
        )
    if not any(_OPTION.match(r) for r in box):
        return None
    return StatusReading(TerminalStatus.WAITING_USER_ANSWER, box_question(box, _OPTION))


def _composer_rows(rows: list[str], prompt: int) -> int:
    """Rows from the prompt row to the footer (continuation rows start with three spaces, and
    a blank row precedes the footer); 0 without a footer (`ui.hideFooter`). An Enter that
    Gemini reads as a newline adds a blank row."""
    footer = next((i for i in range(prompt + 1, len(rows)) if rows[i] and not rows[i].startswith("   ")), None)
    return 0 if footer is None else footer - prompt


def read_status(screen: Screen) -> StatusReading:
    rows = [row.rstrip() for row in screen.lines]
    rule = last_index(rows, lambda r: bool(_RULE.match(r)))
    prompt = None if rule is None else next((i for i in range(rule + 1, len(rows)) if _PROMPT.match(rows[i])), None)
    if prompt is None:  # no composer: a dialog, or still starting
        return _dialog(rows) or StatusReading(TerminalStatus.UNKNOWN)
    typed = rows[prompt][3:].strip(" \u200b")  # a zero-width space can stand for the cursor
    has_text = bool(typed) and not typed.startswith(_PLACEHOLDER)
    composer = _composer_rows(rows, prompt) if has_text else 0
    history = rows[:rule]
    if any(_BUSY.match(row) for row in history[-3:]):
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=has_text, composer_rows=composer)
    asked = _dialog(history)
    if asked is not None:
        return StatusReading(asked.status, asked.reason, composer_has_text=has_text, composer_rows=composer)
    asked_at, answer = last_turn(history, _PROMPT, _ANSWER)
    # What came after the last answer, or after the prompt. Before the first prompt an "✕" row is
    # a start-up notice (an MCP server that failed), not a failed turn.
    if answer is not None:
        after = answer
    else:
        after = len(history) if asked_at is None else asked_at + 1
    tail = trim(history[after:], _STATUS_ROW)
    failed = next((r for r in tail if r.startswith(_ERROR) and not _MCP_NOTICE.match(r)), None)
    if failed is not None:
        return StatusReading(
            TerminalStatus.ERROR, failed[2:].strip(), composer_has_text=has_text, composer_rows=composer
        )
    if any(r.startswith(_CANCELLED) for r in tail):
        # The title only says Ready after a cancelled turn (Esc, a declined permission): the screen is certain.
        cancelled = "the request was cancelled"
        return StatusReading(TerminalStatus.IDLE, cancelled, has_text, composer_rows=composer, definite=True)
    done = answer is not None and not has_text
    status = TerminalStatus.COMPLETED if done else TerminalStatus.IDLE
    return StatusReading(status, composer_has_text=has_text, composer_rows=composer)


def extract_reply(history_lines: list[str]) -> str | None:
    lines = [line.rstrip() for line in history_lines]
    rule = last_index(lines, lambda r: bool(_RULE.match(r)))
    history = lines[:rule] if rule is not None else lines
    return last_answer(history, _PROMPT, _ANSWER, _STATUS_ROW)


PROVIDER = Provider(
    name="gemini_cli",
    resumes=True,  # --resume-session-id
    binary="gemini",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    # With a trailing space: no completion menu. "/quit" opens one, and an Enter that Gemini reads
    # within its unsafe-paste window (see below) picks the menu's first entry instead of submitting
    # the text: seen running /clear, in 4 of 5 exits right after start; with the space 5 of 5 quit.
    exit_command="/quit ",
    startup_timeout=60.0,
    accepts_input_while_busy=False,
    status_from_title=status_from_title,
    dialog_keys=dialog_keys,
    mcp="http",  # cao's endpoint itself (_node_settings.mcp_servers)
    # Gemini 0.61 lists a server's prompts, tools, then resources, and registers the tools only
    # once all three have answered (McpClient.discoverInto): a message sent between tools/list and
    # resources/list went to the model without cao's tools (seen under load: the first handoff of a
    # supervisor never offered).
    mcp_ready_after=("prompts/list", "tools/list", "resources/list"),
    # Gemini 0.61 turns an Enter into a newline for 40 ms after it has *read* a paste (without the
    # kitty keyboard protocol, which tmux does not offer, a paste is "unsafe": InputPrompt sets
    # recentUnsafePasteTime and clears it with a 40 ms timer; KeypressContext's bufferFastReturn
    # also makes an Enter within 30 ms of the paste a Shift+Enter). The paste's draw comes after
    # Gemini read it, so the pause runs from the echo. No pause is exact (the timer's re-render
    # re-subscribes the key handler in a passive effect, which Node may run after reading the
    # Enter), so the input service also watches for the newline: the composer grows a row
    # (composer_rows), and it presses BSpace, then Enter again (~100 ms in all, where waiting for
    # a retry took 400 ms or more). Newlines in 30 turns given the moment the last one completed:
    # after a 30 ms pause 27 (median turn 319 ms), 50 ms 7 (300 ms), 70 ms 3 (272 ms); with 50 ms
    # of quiet before each turn, 30 ms was best (9–15 in 40, 252 ms; 70 ms: 0, 258–281 ms).
    # A busy Gemini reads its paste later, and an agent's next message often comes at once: 70 ms.
    enter_after_echo=True,
    enter_delay_s=0.5,  # at most, for the echo
    pause_after_echo_s=0.07,
    # A taken Enter clears the composer within ~40 ms and the Working title follows, so an Enter without
    # any effect after 0.4 s is pressed again. A second Enter that Gemini reads after taking the
    # first finds the composer empty: nothing happens.
    submit_confirm_s=0.4,
)
