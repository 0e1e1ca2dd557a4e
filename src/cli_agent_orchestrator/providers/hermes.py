"""Provider for Hermes Agent (PyPI `hermes-agent`, tested with 0.19.0, binary `hermes`).

Per-terminal settings. Hermes reads everything from its home (`HERMES_HOME`, default `~/.hermes`):
`config.yaml`, `.env`, its sessions database, memories, skills. Its managed scope
(`HERMES_MANAGED_DIR`) would lay a file over the user's config, but 0.19 decides whether to start
MCP discovery from the user's file alone, so cao's endpoint there would never be connected. Each
terminal gets a shadow home instead: `config.yaml` is the user's copy with cao's keys over it (its
MCP endpoint, the profile's servers), every other entry a symlink to the user's home, so logins,
sessions and memories keep working and the user's files are read but never rewritten by cao.
What Hermes writes to its own config there (a command allowed "permanently") ends with the agent.
The profile's prompt goes in with `HERMES_EPHEMERAL_SYSTEM_PROMPT` (added to Hermes' own).

Status comes from the screen (the classic prompt_toolkit REPL, `--cli`): Hermes has no terminal
title, and a shell hook of its runs only once approved in an allow-list of the user's home.
Tool sets are Hermes' toolsets (`-t`): reading and writing files are one toolset, so a read-only
set still lets the agent write files (enforcement "partial").
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..agent_credentials import ENV_VAR as MCP_TOKEN_ENV
from ..models import TerminalStatus
from . import tool_names
from ._node_settings import merge
from .base import Launch, LaunchContext, Provider, Screen, StatusReading
from .common import MCP_SERVER_NAME, mcp_headers, terminal_dir

MCP_CALL_TIMEOUT_S = 900  # a handoff waits for the worker's whole turn
# Keys of a profile's `mcpServers` entry that mean the same in Hermes' `mcp_servers`.
_MCP_KEYS = ("command", "args", "env", "cwd", "url", "headers", "timeout", "connect_timeout", "transport")


def user_home(ctx: LaunchContext) -> Path:
    """The Hermes home the user's own `hermes` would use."""
    if ctx.environ.get("HERMES_HOME"):
        return Path(ctx.environ["HERMES_HOME"])
    return Path(ctx.environ.get("HOME") or Path.home()) / ".hermes"


def _read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping as Hermes reads it; {} if absent or unreadable (Hermes then ignores it too)."""
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return value if isinstance(value, dict) else {}


def _mcp_servers(ctx: LaunchContext) -> dict[str, dict]:
    """cao's endpoint (its header a `${VAR}` Hermes expands: the credential is in no file) plus the
    profile's other servers."""
    servers: dict[str, dict] = {}
    declared = ctx.profile_extra.get("mcpServers")
    for name, spec in declared.items() if isinstance(declared, Mapping) else []:
        if name != MCP_SERVER_NAME and isinstance(spec, Mapping):
            servers[str(name)] = {k: spec[k] for k in _MCP_KEYS if k in spec}
    header = next(iter(mcp_headers(ctx)))
    servers[MCP_SERVER_NAME] = {
        "url": ctx.mcp_url,
        "headers": {header: "${" + MCP_TOKEN_ENV + "}"},
        "timeout": MCP_CALL_TIMEOUT_S,
    }
    return servers


def config(ctx: LaunchContext, user: dict[str, Any]) -> dict[str, Any]:
    """The user's config with cao's keys over it (a stale cao entry of the user's dropped whole)."""
    servers = user.get("mcp_servers")
    if isinstance(servers, Mapping) and MCP_SERVER_NAME in servers:
        user = {**user, "mcp_servers": {k: v for k, v in servers.items() if k != MCP_SERVER_NAME}}
    return merge(user, {"mcp_servers": _mcp_servers(ctx)})


def toolsets(ctx: LaunchContext) -> list[str] | None:
    """The Hermes toolsets a tool set allows (`-t`), or None for Hermes' own default set."""
    tools = ctx.allowed_tools
    if ctx.yolo or tools is None or tool_names.UNRESTRICTED in tools:
        return None
    return [*tool_names.names("hermes", tools), f"mcp-{MCP_SERVER_NAME}"]


def _without_prompts(ctx: LaunchContext) -> bool:
    """Hermes asks before a dangerous command only; a set's shell runs without asking unless the
    profile keeps the CLI's prompts (`--yolo` still refuses Hermes' hard-line commands)."""
    tools = ctx.allowed_tools
    if ctx.yolo or tool_names.UNRESTRICTED in (tools or []):
        return True
    return tools is not None and "execute_bash" in tools and not tool_names.keeps_prompts(ctx.profile_extra)


def _shadow_home(ctx: LaunchContext) -> Path:
    """The terminal's Hermes home: its own config.yaml (0600), symlinks to the rest of the user's."""
    source, home = user_home(ctx), terminal_dir(ctx) / "hermes-home"
    home.mkdir(mode=0o700, exist_ok=True)
    for name in os.listdir(source) if source.is_dir() else []:
        if name != "config.yaml" and not os.path.lexists(home / name):
            (home / name).symlink_to(source / name)
    fd = os.open(home / "config.yaml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        yaml.safe_dump(config(ctx, _read_yaml(source / "config.yaml")), fh, sort_keys=False, allow_unicode=True)
    return home


def build_launch(ctx: LaunchContext) -> Launch:
    home = _shadow_home(ctx)
    argv = ["hermes", "chat", "--cli"]
    if _without_prompts(ctx):
        argv.append("--yolo")
    if ctx.model:
        argv += ["--model", ctx.model]
    if (sets := toolsets(ctx)) is not None:
        argv += ["--toolsets", ",".join(sets)]
    # The shell tool keeps a snapshot of Hermes' environment (cao's credential included) in
    # $TMPDIR: a directory of the terminal's own, deleted with it.
    tmp = home.parent / "tmp"
    tmp.mkdir(mode=0o700, exist_ok=True)
    env = {"HERMES_HOME": str(home), "TMPDIR": str(tmp)}
    if ctx.system_prompt:
        env["HERMES_EPHEMERAL_SYSTEM_PROMPT"] = ctx.system_prompt
    return Launch(argv=argv, env=env)


# --- the screen (Hermes 0.19 classic REPL; see tests/fixtures/screens/hermes) ---------------------
#   ● say hello                                    <- echoed prompt, under a short rule
#     ┊ 💻 $   echo hi  0.4s                      <- tool rows
#   ╭─ ⚕ Hermes ──────────────────────╮           <- the answer, rows indented 4
#       Hello.
#   ╰─────────────────────────────────╯
#    ⚕ fake-model │ 15K/128K │ … │ ⏲ 5s │ ✓ 0s   <- status bar (⏱ while a turn runs)
#   ─────────────────────────────────────────     <- rule
#   ❯                                             <- composer; busy: "⚕ ❯ msg=interrupt · … Ctrl+C cancel"
#   ─────────────────────────────────────────     <- rule
# A dangerous command replaces nothing: a box with "❯ 1. Allow once … 4. Deny" and the row
# "↑/↓ to select, Enter to confirm" appear above the status bar, the composer reads "⚠ ❯".
_RULE = re.compile(r"^─{60,}$")  # the composer's rules span the pane; turn separators are 40 wide
_COMPOSER = re.compile(r"^(?:(?P<mark>\S+) )?❯(?: (?P<text>.*))?$")
_BUSY = ("msg=interrupt", "Ctrl+C cancel")  # the composer's hints while a turn runs
_BUSY_MARK = "⚕"  # before the composer's ❯ while a turn runs, drawn before the hints are
_RUNNING = "⏱"  # the status bar's clock while a turn runs (⏲ between turns)
_ECHO = "● "
_ANSWER_TOP = re.compile(r"^╭─ ⚕ \S.*╮$")
_MENU = "to select, Enter to confirm"
_OPTION = re.compile(r"^│\s*(?:❯ )?\d+\. ")


def _composer(rows: list[str]) -> tuple[int, int] | None:
    """The composer's first row and how many rows it takes (typed text can wrap), if drawn."""
    rules = [i for i, row in enumerate(rows) if _RULE.match(row)]
    if len(rules) >= 2 and _COMPOSER.match(rows[rules[-2] + 1]):
        return rules[-2] + 1, rules[-1] - rules[-2] - 1
    return None


def _question(rows: list[str]) -> str:
    """The dialog's title and what it is about (the box rows that are not options)."""
    top = max((i for i, row in enumerate(rows) if row.startswith("╭")), default=0)
    body = [row.strip("│ ").strip() for row in rows[top + 1 :] if row.startswith("│") and not _OPTION.match(row)]
    return " · ".join(part for part in body if part)[:300]


def read_status(screen: Screen) -> StatusReading:
    rows = [row.rstrip() for row in screen.lines]
    found = _composer(rows)
    if found is None:
        return StatusReading(TerminalStatus.UNKNOWN)  # starting (banner), or exiting
    at, height = found
    match = _COMPOSER.match(rows[at])
    typed = (match.group("text") or "").strip() if match else ""
    history = rows[: at - 1]
    echo = max((i for i, row in enumerate(history) if row.startswith(_ECHO)), default=-1)
    turn = history[echo + 1 :] if echo >= 0 else []
    if any(_MENU in row for row in turn[-6:]):
        return StatusReading(TerminalStatus.WAITING_USER_ANSWER, _question(turn))
    bar = rows[at - 2] if at >= 2 else ""
    mark = match.group("mark") if match else None
    if mark == _BUSY_MARK or any(hint in typed for hint in _BUSY) or _RUNNING in bar:
        return StatusReading(TerminalStatus.PROCESSING)
    has_text = bool(typed) or height > 1
    tops = [i for i, row in enumerate(turn) if _ANSWER_TOP.match(row)]
    # The box is printed row by row above the composer, which is idle already: done once it is closed.
    if tops and any(row.startswith("╰") for row in turn[tops[-1] :]) and not has_text:
        return StatusReading(TerminalStatus.COMPLETED)
    return StatusReading(TerminalStatus.IDLE, composer_has_text=has_text, composer_rows=height if has_text else 0)


def extract_reply(history_lines: list[str]) -> str | None:
    """The last answer box of the last turn, its 4-space indent removed."""
    lines = [line.rstrip() for line in history_lines]
    echo = max((i for i, row in enumerate(lines) if row.startswith(_ECHO)), default=None)
    if echo is None:
        return None
    tops = [i for i in range(echo + 1, len(lines)) if _ANSWER_TOP.match(lines[i])]
    if not tops:
        return None
    body: list[str] = []
    for row in lines[tops[-1] + 1 :]:
        # Every row of the box's body is indented 4 (or blank); the bottom border, a redraw of it
        # or the status bar below is not.
        if row and not row.startswith("    "):
            break
        body.append(row[4:])
    text = "\n".join(body).strip("\n")
    return text or None


# The dangerous-command menu takes a digit as choice and confirmation at once.
_DIALOG_KEYS = (
    ({"1", "y", "yes", "allow", "allow once", "once"}, "1"),
    ({"2", "session", "allow for this session"}, "2"),
    ({"3", "always", "a", "add to permanent allowlist"}, "3"),
    ({"4", "n", "no", "deny", "reject", "cancel"}, "4"),
)


def dialog_keys(screen: Screen, answer: str) -> list[str] | None:
    if not any(_MENU in row for row in screen.lines):
        return None
    word = " ".join(answer.strip().lower().rstrip(".").split())
    return next(([key] for words, key in _DIALOG_KEYS if word in words), None)


PROVIDER = Provider(
    name="hermes",
    binary="hermes",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    exit_command="/exit",
    startup_timeout=90.0,
    # A message typed during a turn interrupts it ("msg=interrupt"): cao waits for the turn.
    accepts_input_while_busy=False,
    dialog_keys=dialog_keys,
    mcp="http",
    # Hermes connects its MCP servers when it builds its agent, at the first message, and waits
    # for them then: nothing is listed at start.
    lists_tools_at_start=True,
)
