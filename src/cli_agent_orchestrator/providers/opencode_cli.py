"""Provider for opencode (npm `opencode-ai`, tested with 1.18.33, binary `opencode`).

opencode runs in its `--mini` interface: it prints the conversation inline, so the
whole of a long answer stays in tmux's scrollback for `extract_reply` (the full TUI
draws on the alternate screen, where anything above the visible rows is lost).

Per-terminal settings go in a file under `terminal_dir` named by OPENCODE_CONFIG,
which opencode deep-merges over the user's own `~/.config/opencode/opencode.json`
(the user's providers, models and login in `~/.local/share/opencode` keep working;
HOME and the XDG dirs are left alone). It defines the agent (system prompt, model),
cao's tools, the permission rules and a status plugin.

cao's tools: opencode reaches cao-server's MCP endpoint itself (a `remote` server, no relay
process). The agent's credential stays out of the file: its header reads `{env:CAO_MCP_TOKEN}`,
which opencode fills in from its own environment (the pane's) as it reads the config. opencode
lists the tools as it starts, so the agent is ready once it has.

Status: a small JS plugin (PLUGIN below) receives opencode's own events in-process
and POSTs the few that matter to cao-server's `/terminals/{id}/hooks`; `session.idle` carries the
turn's answer as opencode stored it (read back through the plugin's SDK client), the screen
being the fallback. Unlike
`opencode --port` + `GET /event`, that needs no long-lived SSE reader inside
cao-server and no port per terminal, and `--port` cannot be combined with `--mini`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..agent_credentials import ENV_VAR as MCP_TOKEN_ENV
from ..agent_credentials import HEADER as MCP_TOKEN_HEADER
from ..models import TerminalStatus
from . import tool_names
from .base import Launch, LaunchContext, Provider, Screen, StatusReading
from .common import MCP_SERVER_NAME, terminal_dir

# A blocking handoff lasts as long as its worker (up to 3600 s + cao's margin); opencode's
# default MCP call timeout is about a minute.
MCP_CALL_TIMEOUT_MS = 3_900_000
# Tools with side effects ask first unless the terminal runs in bypass mode.
_ASKING = ("bash", "edit", "webfetch", "websearch", "external_directory", "doom_loop")


# opencode loads this into its own process; it reads the terminal's identity and
# cao-server's address from the pane's environment. Posts go out one at a time so
# busy/idle cannot overtake each other; repeats (busy is emitted many times a turn)
# and events of sub-agent sessions (the task tool) are dropped.
# session.idle fires 50-350 ms before the TUI has printed the answer, and cao reads
# the answer from the pane as soon as it hears "idle": so the plugin first waits
# (bounded) until the pane shows a `▣` row below the last `›` row.
PLUGIN = r"""// cao status plugin, generated per terminal by cao (providers/opencode_cli.py).
import { execFile } from "node:child_process"

const pane = process.env.TMUX_PANE
const shown = () => new Promise((resolve) => {
  execFile("tmux", ["capture-pane", "-p", "-t", pane], {timeout: 2000}, (err, out) => {
    if (err) return resolve(true)  // cannot look: do not hold the status back
    let user = -1, done = -1
    String(out).split("\n").forEach((row, i) => {
      if (row.startsWith("› ")) user = i
      if (row.startsWith("▣ ")) done = i
    })
    resolve(done > user)
  })
})
const rendered = async () => {
  for (let i = 0; pane && i < 100 && !(await shown()); i++) await new Promise((r) => setTimeout(r, 30))
}

// The turn's answer as opencode stored it (the last assistant message's text after its last tool
// call), sent with session.idle: the --mini screen can break a streamed answer where the model's
// chunks met. Empty when it cannot be read; cao then reads the answer from the screen.
const answer = async (client, sessionID) => {
  try {
    const got = await Promise.race([client.session.messages({path: {id: sessionID}}),
                                    new Promise((r) => setTimeout(() => r(null), 3000))])
    const messages = (got && got.data) || []
    for (let m = messages.length - 1; m >= 0; m--) {
      const {info, parts} = messages[m] || {}
      if (info && info.role === "user") break  // nothing answered since the last prompt
      if (!info || info.role !== "assistant") continue
      let texts = []
      for (const part of parts || []) {
        if (part.type === "tool") texts = []
        else if (part.type === "text" && !part.synthetic && !part.ignored && part.text) texts.push(part.text)
      }
      const text = texts.join("\n").trim()
      if (text) return text.length <= 500000 ? text : ""
    }
  } catch {}
  return ""
}

export const CaoStatus = async ({client} = {}) => {
  const id = process.env.CAO_TERMINAL_ID || ""
  if (!/^[a-f0-9]{8}$/.test(id)) return {}
  let host = process.env.CAO_API_HOST || "127.0.0.1"
  if (host === "0.0.0.0" || host === "::") host = "127.0.0.1"
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${process.env.CAO_API_PORT || "9889"}/terminals/${id}/hooks`
  const children = new Set()
  let queue = Promise.resolve(), state = "", error = "", aborted = false
  const send = async (body) => {
    for (let attempt = 0; attempt < 3; attempt++) {  // a lost edge would leave cao's status stale
      try {
        const resp = await fetch(url, {method: "POST", body, signal: AbortSignal.timeout(5000),
                                       headers: {"content-type": "application/json",
                                                 "x-cao-hook-secret": process.env.CAO_HOOK_SECRET || ""}})
        if (resp.status < 500) return
      } catch {}
      await new Promise((r) => setTimeout(r, 300 * (attempt + 1)))
    }
  }
  const post = (event, payload = {}) => {
    queue = queue.then(() => send(JSON.stringify({event, payload})))  // (after what is queued before)
  }
  return {
    event: async ({event}) => {
      const p = event.properties || {}
      if (event.type === "session.created" && p.info && p.info.parentID) children.add(p.info.id)
      if (p.sessionID && children.has(p.sessionID)) return
      if (event.type === "session.status") {
        const s = p.status || {}
        if (s.type === "busy" && state !== "busy") {
          if (state !== "asked") { error = ""; aborted = false }
          state = "busy"; post("session.busy")
        } else if (s.type === "retry") {
          state = "retry"; post("session.retry", {attempt: s.attempt, message: String(s.message || "").slice(0, 300)})
        }
      } else if (event.type === "permission.asked") {
        state = "asked"; post("permission.asked", {permission: p.permission, patterns: p.patterns})
      } else if (event.type === "permission.replied") {
        state = "busy"; post("permission.replied", {reply: p.reply})
      } else if (event.type === "session.error") {
        const e = p.error || {}
        if (e.name === "MessageAbortedError") aborted = true
        else error = String((e.data && e.data.message) || e.name || "error").slice(0, 500)
      }
      const idle = event.type === "session.idle" || (event.type === "session.status" && p.status && p.status.type === "idle")
      if (idle && state !== "idle") {
        state = "idle"
        const payload = error ? {error} : aborted ? {aborted: true} : {}
        const session = p.sessionID
        queue = queue.then(rendered).then(async () => {
          if (!error && !aborted && client && session) {
            const text = await answer(client, session)
            if (text) payload.text = text
          }
        })
        post("session.idle", payload)
      }
    },
  }
}
"""


# --- launch ------------------------------------------------------------------------
def _bypass(ctx: LaunchContext) -> bool:
    return (
        ctx.yolo or "*" in (ctx.allowed_tools or []) or ctx.profile_extra.get("permissionMode") == "bypassPermissions"
    )


def _permissions(ctx: LaunchContext) -> dict[str, str]:
    """The tool set as opencode permissions: the set is allowed, everything else denied.
    opencode applies the last matching rule, so the catch-all comes first."""
    rules: dict[str, str] = {}
    tools, bypass = ctx.allowed_tools, _bypass(ctx)
    if tools is not None and "*" not in tools and not bypass:
        rules["*"] = "deny"  # hard enforcement: a tool the profile does not list is not offered
        rules.update(dict.fromkeys(tool_names.names("opencode_cli", tools), "allow"))  # the shared table
        # opencode's own machinery: its to-do list, the stand-in for a malformed call, the
        # checks on paths outside the project and on a model repeating the same call.
        rules.update(dict.fromkeys(("todowrite", "todoread", "invalid", "external_directory", "doom_loop"), "allow"))
    elif bypass:
        # Everything, but not what opencode itself keeps off: a question dialog (nobody
        # would answer it; cao's agents end their turn to ask) and plan-mode switches.
        rules.update({"*": "allow", "question": "deny", "plan_enter": "deny", "plan_exit": "deny"})
    if (tools is None or tool_names.keeps_prompts(ctx.profile_extra)) and not bypass:  # opencode's prompts stay
        accept_edits = ctx.profile_extra.get("permissionMode") == "acceptEdits"
        for key in _ASKING:
            if rules.get(key, rules.get("*", "allow")) == "allow" and not (accept_edits and key == "edit"):
                rules[key] = "ask"
    rules[f"{MCP_SERVER_NAME}_*"] = "allow"  # cao's own orchestration calls never ask
    return rules


def _mcp(ctx: LaunchContext) -> dict[str, dict]:
    """cao's endpoint (proving this terminal by its credential) plus the profile's other servers."""
    servers: dict[str, dict] = {}
    declared = ctx.profile_extra.get("mcpServers")
    for name, spec in declared.items() if isinstance(declared, Mapping) else []:
        if name == MCP_SERVER_NAME or not isinstance(spec, Mapping):
            continue
        if spec.get("url"):
            servers[str(name)] = {"type": "remote", "url": spec["url"], "headers": dict(spec.get("headers") or {})}
        elif spec.get("command"):
            servers[str(name)] = {
                "type": "local",
                "command": [str(spec["command"]), *map(str, spec.get("args") or [])],
                "environment": {str(k): str(v) for k, v in (spec.get("env") or {}).items()},
            }
    servers[MCP_SERVER_NAME] = {
        "type": "remote",
        "url": ctx.mcp_url,
        # opencode substitutes `{env:NAME}` anywhere in a config it reads: the credential comes
        # from the pane's environment and is never written into this file.
        "headers": {MCP_TOKEN_HEADER: f"{{env:{MCP_TOKEN_ENV}}}"},
        # A refused credential (a terminal deleted meanwhile) must not start opencode's OAuth
        # discovery and browser login against cao-server.
        "oauth": False,
        "enabled": True,
        "timeout": MCP_CALL_TIMEOUT_MS,
    }
    return servers


def agent_name(profile: str) -> str:
    return f"cao-{profile}"  # never shadows opencode's own build/plan or a user's agent


def config(ctx: LaunchContext, plugin: Path) -> dict[str, Any]:
    agent: dict[str, Any] = {
        "description": f"cao agent profile {ctx.profile_name}",
        "mode": "primary",
        "prompt": ctx.system_prompt or f"You are the cao agent {ctx.profile_name}.",
    }
    if ctx.model:
        agent["model"] = ctx.model
    return {
        "mcp": _mcp(ctx),
        "plugin": [plugin.as_uri()],
        "experimental": {"mcp_timeout": MCP_CALL_TIMEOUT_MS},
        "permission": _permissions(ctx),
        "agent": {agent_name(ctx.profile_name): agent},
    }


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def build_launch(ctx: LaunchContext) -> Launch:
    own = terminal_dir(ctx)
    plugin = own / "opencode_status.js"
    _write(plugin, PLUGIN)
    settings = own / "opencode.json"
    text = json.dumps(config(ctx, plugin), indent=2, ensure_ascii=False)
    _write(settings, text)
    argv = [shutil.which("opencode") or "opencode", "--mini", "--agent", agent_name(ctx.profile_name)]
    # Bun unpacks ~19 MB of native libraries into $TMPDIR at every start and never
    # removes them: each terminal gets its own TMPDIR, deleted with the rest of this
    # terminal's files when opencode ends. opencode runs as a child (not `exec`) so the
    # EXIT trap can run; it is started asynchronously, its stdin still the pane's tty,
    # because a shell defers traps while a foreground child runs and a killed window
    # (SIGHUP to this shell, the session leader) must reach opencode at once.
    script = own / "opencode-launch.sh"
    _write(
        script,
        "#!/bin/sh\n"
        f'own={shlex.quote(str(own))}; TMPDIR="$own/tmp"; export TMPDIR; mkdir -p "$TMPDIR"\n'
        "trap 'rm -rf \"$own\"' EXIT\n"
        "trap 'kill -HUP $child 2>/dev/null; wait $child; exit 129' HUP\n"
        "trap 'kill -TERM $child 2>/dev/null; wait $child; exit 143' TERM\n"
        f"{shlex.join(argv)} <&0 &\nchild=$!\nwait $child\n",
        0o700,
    )
    env = {"OPENCODE_CONFIG": str(settings), "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    if ctx.environ.get("OPENCODE_CONFIG"):
        # The user points opencode at a config of their own: keep it, and layer ours on
        # top as inline config (merged after every file, so our keys still apply).
        env = {"OPENCODE_CONFIG_CONTENT": text, "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    return Launch(argv=["/bin/sh", str(script)], env=env)


# --- the plugin's events -----------------------------------------------------------
def status_from_hook(event: str, payload: dict, last_event: str | None = None) -> StatusReading | None:
    if event in ("session.busy", "permission.replied"):
        return StatusReading(TerminalStatus.PROCESSING)
    if event == "session.retry":
        return StatusReading(TerminalStatus.PROCESSING, f"retrying: {payload.get('message') or 'model error'}")
    if event == "permission.asked":
        what = payload.get("permission") or "a tool"
        patterns = ", ".join(map(str, payload.get("patterns") or []))[:200]
        return StatusReading(
            TerminalStatus.WAITING_USER_ANSWER,
            f"opencode asks permission for {what}" + (f": {patterns}" if patterns else ""),
        )
    if event == "session.idle":
        if payload.get("error"):
            return StatusReading(TerminalStatus.ERROR, str(payload["error"])[:500])
        return StatusReading(TerminalStatus.IDLE if payload.get("aborted") else TerminalStatus.COMPLETED)
    return None


def reply_from_hook(event: str, payload: dict) -> str | None:
    """The answer opencode stored for the turn, which the plugin sends with session.idle."""
    text = payload.get("text") if event == "session.idle" and not payload.get("error") else None
    return text if isinstance(text, str) and text.strip() else None


# --- screen ------------------------------------------------------------------------
_FOOTER = "ctrl+p cmd"  # right end of the mini footer row, idle or busy
# In the footer while a turn runs, after the progress dots: "esc interrupt", or
# "esc again to interrupt" once Escape was pressed.
_BUSY = re.compile(r"\besc (?:again to )?interrupt\b")
_USER = "› "  # an echoed user message
_DONE = "▣ "  # `▣ Agent · model · 1.2s` closes every finished turn
_PLACEHOLDER = "Ask anything"
_PERMISSION = "△ Permission required"
_ABORTED = "Aborted"  # the last row of a turn interrupted with Escape, Escape


def _composer(rows: list[str], footer: int) -> list[str]:
    """The input rows: directly above the footer's blank spacer, up to a blank row."""
    block: list[str] = []
    i = footer - 2
    while i >= 0 and rows[i].strip():
        block.insert(0, rows[i])
        i -= 1
    return block


def read_status(screen: Screen) -> StatusReading:
    rows = [line.rstrip() for line in screen.lines]
    while rows and not rows[-1]:
        rows.pop()
    if not rows:
        return StatusReading(TerminalStatus.UNKNOWN)
    last = rows[-1]
    user = max((i for i, r in enumerate(rows) if r.startswith(_USER)), default=-1)
    head = next((i for i in range(len(rows) - 1, user, -1) if _PERMISSION in rows[i]), None)
    if head is not None and "Allow once" in last and "Reject" in last:
        # The dialog replaces the composer and the footer; its body says what would run.
        body = " · ".join(r.strip() for r in rows[head + 1 : -1] if r.strip())
        return StatusReading(TerminalStatus.WAITING_USER_ANSWER, f"opencode asks for permission: {body}"[:300])
    if _FOOTER not in last:
        return StatusReading(TerminalStatus.UNKNOWN)  # starting, exiting, or a menu over the footer
    composer = _composer(rows, len(rows) - 1)
    typed = bool(composer) and not composer[0].lstrip().startswith(_PLACEHOLDER)
    if _BUSY.search(last):
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=typed)
    above = rows[: len(rows) - 1 - len(composer)]
    user = max((i for i, r in enumerate(above) if r.startswith(_USER)), default=-1)
    done = max((i for i, r in enumerate(above) if r.startswith(_DONE)), default=-1)
    if done > user >= 0 and not typed:
        # A failed turn prints its error in the transcript and again below the ▣ row.
        turn = set(above[user:done])
        notice = [r for r in above[done + 1 :] if r.strip()]
        if notice and all(r in turn for r in notice):
            return StatusReading(TerminalStatus.ERROR, " ".join(r.strip() for r in notice)[:500])
        if [r for r in above[user:done] if r.strip()][-1] != _ABORTED:
            return StatusReading(TerminalStatus.COMPLETED)
    return StatusReading(TerminalStatus.IDLE, composer_has_text=typed)


# --- reply -------------------------------------------------------------------------
# First rows of tool blocks (shell, file write/edit and to-dos, read, grep/glob, MCP,
# failure); the first two kinds put their output in a paragraph of its own below.
_TOOL_HEADS = ("$ ", "# ", "→ ", "← ", "✱ ", "⚙ ", "✖ ")
_HEADS_WITH_BODY = ("$ ", "# ")


def _paragraph_end(lines: list[str], start: int, stop: int) -> int:
    i = start
    while i < stop and lines[i].strip():
        i += 1
    return i


def extract_reply(history_lines: list[str]) -> str | None:
    lines = [line.replace("\u00a0", " ") for line in history_lines]
    done = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(_DONE)), None)
    if done is None or any(line.startswith(_USER) for line in lines[done:]):
        return None  # no turn finished, or the latest one is still running
    user = next((i for i in range(done - 1, -1, -1) if lines[i].startswith(_USER)), None)
    if user is None:
        return None
    if any(line != line.rstrip() for line in lines[user:done]):
        # Unstripped capture: reply text rows are padded to the pane width (blank ones
        # inside the reply too); the prompt, tool rows and spacers are not.
        end = done
        while end > user and lines[end - 1] == lines[end - 1].rstrip():
            end -= 1
        start = end
        while start > user and lines[start - 1] != lines[start - 1].rstrip():
            start -= 1
        body = lines[start:end]
    else:
        # Stripped capture: skip the prompt's first paragraph and each tool block (its
        # head's paragraph, and for some one more paragraph of output).
        start = _paragraph_end(lines, user, done)
        i = start
        while i < done:
            if lines[i].startswith(_TOOL_HEADS):
                start = _paragraph_end(lines, i, done)
                if lines[i].startswith(_HEADS_WITH_BODY) and start + 1 < done:
                    start = _paragraph_end(lines, start + 1, done)
                i = start
            i += 1
        body = lines[start:done]
    text = "\n".join(line.rstrip() for line in body).strip("\n")
    return text if text and text != _ABORTED else None


# The permission dialog is a menu (Allow once / Allow always / Reject) that ignores typed text.
_DIALOG_KEYS = (
    ({"y", "yes", "1", "allow", "allow once", "once"}, ["Enter"]),
    ({"a", "always", "2", "allow always"}, ["Right", "Enter"]),
    ({"n", "no", "3", "reject", "deny", "cancel"}, ["Escape"]),
)


def dialog_keys(screen: Screen, answer: str) -> list[str] | None:
    if not any(_PERMISSION in row for row in screen.lines):
        return None
    word = " ".join(answer.strip().lower().rstrip(".").split())
    for words, keys in _DIALOG_KEYS:
        if word in words:
            return keys
    return None


PROVIDER = Provider(
    name="opencode_cli",
    binary="opencode",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    exit_command="/exit",
    startup_timeout=60.0,
    accepts_input_while_busy=False,
    status_from_hook=status_from_hook,
    reply_from_hook=reply_from_hook,
    dialog_keys=dialog_keys,
    raw_history=True,
    mcp="http",
    lists_tools_at_start=True,
)
