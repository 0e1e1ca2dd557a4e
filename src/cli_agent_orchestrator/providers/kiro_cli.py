"""Provider for the Kiro CLI (binary `kiro-cli`), cao's default provider.

Kiro cannot be installed on our machines, so this module implements the reference's
documented behaviour (shared notes: core-contract §11) and is tested only on screens
written by hand from those markers (tests/fixtures/screens/kiro_cli/, labelled as
synthesised), never on captured ones.

Launch: `kiro-cli chat --agent-engine v2 [--legacy-ui] --trust-all-tools [--model M]
--agent <profile>`. The agent (its tools and cao-mcp-server) is the Kiro agent JSON
that `cao install` writes, once per profile. cao's tools: Kiro starts cao-mcp-server, the stdio
relay to cao-server's /mcp, with its own environment (the pane's), which holds this terminal's
CAO_MCP_URL and CAO_MCP_TOKEN; the shared agent file names neither. Kiro connects its MCP
servers as it starts ("N of M mcp servers initialized"), so the agent is ready once the relay has
listed cao's tools. With unrestricted tools the classic line-mode UI starts directly; otherwise
the TUI starts, and one that is not ready within the start-up timeout is replaced in its
window by the line UI (`fallback_launch`; the terminal service tries it once).

Status: §11's rules in order, first match wins, on the rendered screen rather than
the reference's colour-stripped output stream (a redrawn line is one row either way).
The idle prompt's profile part matches any agent name, not only this terminal's.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..models import TerminalStatus
from . import tool_names
from .base import Launch, LaunchContext, Provider, Screen, StatusReading

# Idle prompts. Legacy: `[profile] 42% λ !> ` (percent, λ and ! optional); what follows
# `>` is typed input. TUI: the empty composer's placeholder.
_LEGACY_PROMPT = re.compile(r"^\s*\[[\w.-]+\]\s*(?:\d{1,3}%\s*)?(?:λ\s*)?(?:!\s*)?>(?P<typed>.*)$")
_TUI_PROMPT = re.compile(r"[Aa]sk a question,? or describe a task")
_BOOT = re.compile(
    r"Initializing\.\.\.|\d+ of \d+ mcp servers initialized\. ctrl-c to start chatting now"
    r"|Initializing · type to queue a message"
)
_WORKING = re.compile(r"Kiro is working|Thinking\.\.\.")
_CONSENT_FOOTER = "esc to cancel · ↑↓ to navigate · ↵ to select"
_CONSENT_BODY = "Kiro is running in trust all tools mode"
_CONSENT_CURSOR = re.compile(r"^\s*❯\s*No, exit\b")
_TROUBLE = re.compile(r"kiro is having trouble responding right now", re.I)
_PERMISSION = re.compile(
    r"Allow this action\? \[y/n/t\]:|\bYes\s{2,}No\s{2,}Always Allow\b"
    r"|Yes, single permission.*Trust, always allow.*\bNo\b"
)
_CREDITS = re.compile(r"▸ Credits: [\d.,]+")
_RULE = re.compile(r"^\s*─{20,}\s*$")
_HEADER = re.compile(r"^\s*\S+ · .+ · ◔ \d{1,3}%\s*$")  # `<profile> · <model> · ◔ NN%`


# --- launch ------------------------------------------------------------------------


def _typed(row: str) -> str:
    """What a legacy prompt row holds after the prompt ("" for any other row)."""
    match = _LEGACY_PROMPT.match(row)
    return match["typed"] if match else ""


def unrestricted(ctx: LaunchContext) -> bool:
    return ctx.yolo or "*" in (ctx.allowed_tools or [])


def agent_tools(tools: list[str]) -> dict[str, list[str]]:
    """The `tools` of a Kiro agent JSON for a tool set (tool_names.py's table): Kiro offers only
    these, and `--trust-all-tools` lets them run. `cao install` writes them (kiro_agent.py)."""
    if tool_names.UNRESTRICTED in tools:
        return {"tools": ["*"]}
    return {"tools": tool_names.names("kiro_cli", tools)}


def agents_dir(environ: Mapping[str, str]) -> Path:
    """Where Kiro reads agent files: CAO_AGENTS_DIR, else ~/.kiro/agents."""
    home = environ.get("HOME") or str(Path.home())
    return Path(environ.get("CAO_AGENTS_DIR") or Path(home) / ".kiro" / "agents").expanduser()


# The flags cao's launch line needs from `kiro-cli chat` (contract §11: probed before launch).
REQUIRED_CHAT_FLAGS = ("--agent-engine", "--trust-all-tools", "--agent", "--legacy-ui")
HELP_TIMEOUT_S = 10.0


def missing_flags(help_text: str) -> list[str]:
    """The required flags `kiro-cli chat --help` does not list."""
    return [flag for flag in REQUIRED_CHAT_FLAGS if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text)]


@functools.lru_cache(maxsize=8)
def _chat_help(binary: str, mtime_ns: int) -> str | None:
    """`kiro-cli chat --help`, once per binary version (its path and mtime); None if it cannot run."""
    try:
        done = subprocess.run(
            [binary, "chat", "--help"], capture_output=True, text=True, timeout=HELP_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout + done.stderr


def preflight(profile_name: str, environ: Mapping[str, str]) -> str | None:
    """Kiro takes the agent's tools, prompt and cao-mcp-server from its agent file only:
    without it the agent would start without cao's tools. And the installed kiro-cli must know
    the flags of cao's launch line (an older one would start with other defaults or fail)."""
    path = agents_dir(environ) / f"{profile_name}.json"
    if not path.is_file():
        return (
            f"kiro_cli needs the agent file {path} for profile {profile_name!r} (its tools and cao-mcp-server); "
            f"run `cao install {profile_name} --provider kiro_cli` first"
        )
    binary = shutil.which("kiro-cli", path=environ.get("PATH") or os.defpath)
    if binary is None:
        return None  # the launch's own check says so
    help_text = _chat_help(binary, os.stat(binary).st_mtime_ns)
    missing = missing_flags(help_text) if help_text is not None else []
    if missing:
        return f"{binary} lacks {', '.join(missing)} (`kiro-cli chat --help`); cao needs a kiro-cli that has them"
    return None


def build_launch(ctx: LaunchContext) -> Launch:
    argv = [shutil.which("kiro-cli") or "kiro-cli", "chat", "--agent-engine", "v2"]
    if unrestricted(ctx):
        argv.append("--legacy-ui")
    argv.append("--trust-all-tools")  # always: Kiro then shows its consent dialog, answered below
    if ctx.model:
        argv += ["--model", ctx.model]
    return Launch(argv=argv + ["--agent", ctx.profile_name])


def build_legacy_launch(ctx: LaunchContext) -> Launch | None:
    """The TUI did not come up in time: the same agent in the line UI (`--legacy-ui`), which
    needs no full-screen terminal. None when the first launch already was the line UI."""
    if unrestricted(ctx):
        return None
    first = build_launch(ctx)
    argv = list(first.argv)
    argv.insert(argv.index("--trust-all-tools"), "--legacy-ui")
    return Launch(argv=argv, env=first.env)


def answer_startup_dialog(screen: Screen) -> Sequence[str] | None:
    """The trust-all-tools consent: Down, Enter picks "Yes, I accept" for this session only."""
    rows = [row.rstrip() for row in screen.lines]
    while rows and not rows[-1]:
        rows.pop()
    bottom = rows[-15:]  # of the drawn rows: blank rows below a short screen do not count
    if any(_CONSENT_BODY in row for row in bottom) and any(_CONSENT_CURSOR.match(row) for row in bottom):
        return ["Down", "Enter"]
    return None


# --- status ------------------------------------------------------------------------
def _is_prompt(row: str) -> bool:
    return bool(_LEGACY_PROMPT.match(row) or _TUI_PROMPT.search(row))


def _last(rows: list[str], test) -> int:
    return max((i for i, row in enumerate(rows) if test(row)), default=-1)


def _prompts_after(rows: list[str], index: int) -> int:
    return sum(1 for row in rows[index + 1 :] if _is_prompt(row))


def _is_arrow(row: str) -> bool:
    return row.startswith(">") and not _is_prompt(row)


def _tui_block(rows: list[str], end: int) -> tuple[int, int] | None:
    """The two rules nearest above row `end` when they enclose ≥ 2 non-empty rows."""
    rules = [i for i in range(end - 1, -1, -1) if _RULE.match(rows[i])][:2]
    if len(rules) == 2 and sum(1 for r in rows[rules[1] + 1 : rules[0]] if r.strip()) >= 2:
        return rules[1], rules[0]
    return None


def read_status(screen: Screen) -> StatusReading:
    rows = [row.rstrip() for row in screen.lines]
    while rows and not rows[-1]:
        rows.pop()
    if not rows:
        return StatusReading(TerminalStatus.UNKNOWN)
    last_prompt = _last(rows, _is_prompt)
    # Typed but unsent input: text after the legacy prompt on the bottom row (once sent,
    # output appears below it). The TUI's composer layout is not documented: never seen.
    typed = bool((m := _LEGACY_PROMPT.match(rows[-1])) and m["typed"].strip())

    def reading(status: TerminalStatus, reason: str = "") -> StatusReading:
        return StatusReading(status, reason, composer_has_text=typed)

    for pattern in (_BOOT, _WORKING):  # rules 2 and 3
        if (at := _last(rows, pattern.search)) >= 0 and last_prompt < at:
            return reading(TerminalStatus.PROCESSING)
    footer = _last(rows[-20:], lambda r: _CONSENT_FOOTER in r)  # rule 4
    if footer >= 0 and last_prompt < len(rows) - min(20, len(rows)) + footer:
        return reading(TerminalStatus.WAITING_USER_ANSWER, "Kiro asks to confirm trust-all-tools mode")
    if last_prompt < 0:  # rule 5
        return reading(TerminalStatus.PROCESSING)
    if (at := _last(rows, _TROUBLE.search)) >= 0:  # rule 6
        return reading(TerminalStatus.ERROR, rows[at].strip())
    if (at := _last(rows, _PERMISSION.search)) >= 0 and _prompts_after(rows, at) <= 1:  # rule 7
        return reading(TerminalStatus.WAITING_USER_ANSWER, f"Kiro asks permission: {rows[at].strip()}"[:300])
    for test in (_is_arrow, _CREDITS.search):  # rules 8 and 9
        if (at := _last(rows, test)) >= 0:
            return reading(TerminalStatus.COMPLETED if _prompts_after(rows, at) else TerminalStatus.PROCESSING)
    tui_idle = _last(rows, _TUI_PROMPT.search)  # rule 10
    if tui_idle >= 0 and _tui_block(rows, tui_idle):
        return reading(TerminalStatus.COMPLETED)
    return reading(TerminalStatus.IDLE)  # rule 11


# --- reply -------------------------------------------------------------------------
def _without_first_paragraph(block: list[str]) -> str | None:
    """A TUI block minus the echoed user message (its first paragraph), dedented."""
    while block and not block[0].strip():
        block = block[1:]
    end = next((i for i, row in enumerate(block) if not row.strip()), len(block))
    return textwrap.dedent("\n".join(block[end:])).strip("\n") or None


def extract_reply(history_lines: list[str]) -> str | None:
    rows = [row.rstrip() for row in history_lines]
    credits = _last(rows, _CREDITS.search)
    if credits >= 0:  # TUI with a Credits line: from the exchange's outer rule to the Credits line
        start = _last(rows[:credits], _CREDITS.search) + 1
        outer = next((i for i in range(start, credits) if _RULE.match(rows[i])), None)
        if outer is not None:
            return _without_first_paragraph(rows[outer + 1 : credits])
    tui_idle = _last(rows, _TUI_PROMPT.search)
    if tui_idle >= 0 and (block := _tui_block(rows, tui_idle)):  # newer TUI, no Credits line
        body = rows[block[0] + 1 : block[1]]
        return _without_first_paragraph([r for r in body if not _HEADER.match(r)])
    prompts = [i for i, row in enumerate(rows) if _LEGACY_PROMPT.match(row)]
    # Legacy. The last exchange starts at the last prompt holding submitted input (the
    # final prompt's text, if any, is still in the composer).
    asked = max((p for p in prompts[:-1] if _typed(rows[p]).strip()), default=-1)
    arrow = _last(rows, _is_arrow)
    if arrow > asked:  # the reply: from the green arrow to the next idle prompt, less a Credits footer
        end = next((p for p in prompts if p > arrow), len(rows))
        body = [rows[arrow][1:].lstrip(), *rows[arrow + 1 : end]]
        while body and (not body[-1].strip() or _CREDITS.search(body[-1])):
            body.pop()
        return "\n".join(body) or None
    if asked >= 0 and _typed(rows[asked]).strip().startswith("/"):
        end = next(p for p in prompts if p > asked)  # a slash command: its output
        return "\n".join(rows[asked + 1 : end]).strip("\n") or None
    return None  # the last exchange has no reply (never an older exchange's)


PROVIDER = Provider(
    name="kiro_cli",
    binary="kiro-cli",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    answer_startup_dialog=answer_startup_dialog,
    exit_command="/exit",
    startup_timeout=60.0,
    fallback_launch=build_legacy_launch,
    accepts_input_while_busy=False,
    preflight=preflight,
    # Stdio, through the relay: Kiro's documented MCP format has remote servers with headers, but
    # Kiro expands a `${VAR}` in its MCP config only for variables approved in the user's own Kiro
    # settings, which cao does not write (and headers want an undocumented `${env:VAR}`). Its
    # start-up connects the agent's MCP servers before the prompt (the boot line counts them), so
    # the relay lists cao's tools then.
    mcp="stdio",
    lists_tools_at_start=True,
)
