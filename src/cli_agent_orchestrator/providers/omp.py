"""Provider for oh-my-pi (npm `@oh-my-pi/pi-coding-agent`, tested with 18.2.3, binary `omp`, run by Bun).

Per-terminal files only. omp reads the user's `~/.omp/agent` (config.yml, models.yml, logins)
as always; cao adds a `--config` overlay (no setup wizard, no update check) and one extension
package passed with `-e`, both in `terminal_dir`. The package holds a status extension and a
`.mcp.json` naming cao's MCP endpoint; its header reads `${CAO_MCP_TOKEN}`, which omp expands
from its own environment (the pane's), so the credential is in no file and no argv.

Status: the extension sees omp's own agent events in-process and POSTs `agent_start`,
`tool_execution_start` and `agent_end` (with the last assistant message) to cao-server's
`/terminals/{id}/hooks`; the reply comes from that message. The screen detects the approval
dialog (`--approval-mode always-ask`) and errors, and is the fallback for everything else.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from ..models import TerminalStatus
from . import tool_names
from .base import Launch, LaunchContext, Provider, Screen, StatusReading
from .common import MCP_SERVER_NAME, hook_url, mcp_headers, terminal_dir

# cao's overlay on the user's config: a wizard or an update notice would sit in front of the composer.
CONFIG_OVERLAY = "startup:\n  setupWizard: false\n  checkUpdate: false\n  quiet: true\n"
# A blocking handoff lasts as long as its worker (up to 3600 s + cao's margin).
MCP_CALL_TIMEOUT_MS = 3_900_000

# omp loads this into its own process. Posts go one at a time, so busy and done cannot overtake
# each other; `agent_end` with willContinue (an automatic retry) is not the end of the turn.
EXTENSION = r"""// cao status extension, generated per terminal by cao (providers/omp.py).
// cao-server's address and the terminal's identity come from the pane's environment.
const id = process.env.CAO_TERMINAL_ID || ""
let host = process.env.CAO_API_HOST || "127.0.0.1"
if (host === "0.0.0.0" || host === "::" || host === "localhost") host = "127.0.0.1"
const url = `http://${host.includes(":") ? `[${host}]` : host}:${process.env.CAO_API_PORT || "9889"}/terminals/${id}/hooks`
// The terminal's tool set (null: unrestricted): builtin names, and MCP tool-name prefixes. omp
// runs an MCP tool as a device: `write` to `xd://mcp__<server>_<tool>` (or the device's own name);
// its other devices front builtins that are checked under their own names.
const policy = __POLICY__
const allowed = (name, input) => {
  if (!policy) return true
  const device = name === "write" && input && typeof input.path === "string" && input.path.startsWith("xd://")
    ? input.path.slice(5) : null
  if (device !== null && !device.startsWith("mcp__")) return true
  const tool = device ?? name
  return policy.builtins.includes(tool) || policy.mcp.some((prefix) => tool.startsWith(prefix))
}
export default function (pi) {
  if (policy) {
    pi.on("tool_call", async (event) => allowed(event.toolName, event.input) ? undefined : {
      block: true, reason: `cao: the tool ${event.toolName} is outside this agent's tool set`})
  }
  if (!__ENABLED__ || !/^[a-f0-9]{8}$/.test(id)) return
  let queue = Promise.resolve()
  const send = async (body) => {
    for (let attempt = 0; attempt < 3; attempt++) {  // a lost edge would leave cao's status stale
      try {
        const resp = await fetch(url, {method: "POST", body, signal: AbortSignal.timeout(5000),
          headers: {"content-type": "application/json", "x-cao-hook-secret": process.env.CAO_HOOK_SECRET || ""}})
        if (resp.status < 500) return
      } catch {}
      await new Promise((r) => setTimeout(r, 300 * (attempt + 1)))
    }
  }
  const post = (event, payload = {}) => {
    const body = JSON.stringify({event, payload})
    queue = queue.then(() => send(body))
    return queue
  }
  pi.on("agent_start", async () => { post("agent_start") })
  pi.on("tool_execution_start", async () => { post("tool_execution_start") })
  pi.on("agent_end", async (event) => {
    if (event.willContinue) return
    const last = [...(event.messages || [])].reverse().find((m) => m && m.role === "assistant") || {}
    const text = (Array.isArray(last.content) ? last.content : [])
      .filter((part) => part && part.type === "text").map((part) => part.text).join("")
    await post("agent_end", {stop_reason: last.stopReason || "", error: last.errorMessage || "", text})
  })
}
"""


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _mcp_name(part: str) -> str:
    """A server or tool name as omp spells it inside `mcp__<server>_<tool>`."""
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]+", "_", part.lower())).strip("_")


def _policy(ctx: LaunchContext) -> dict | None:
    """What the extension lets run: the set's builtins, and the MCP tools of the servers it names."""
    if ctx.yolo or ctx.allowed_tools is None or tool_names.UNRESTRICTED in ctx.allowed_tools:
        return None
    builtins = [n for n in tool_names.names("omp", ctx.allowed_tools) if n in tool_names.BUILTINS["omp"]]
    mcp = []
    for tool in ctx.allowed_tools:
        if tool.startswith("@") and tool not in tool_names.TABLE:
            server, _, one = tool[1:].partition("/")
            mcp.append(f"mcp__{_mcp_name(server)}_" + (_mcp_name(one) if one else ""))
    return {"builtins": builtins, "mcp": mcp}


def _tool_flags(ctx: LaunchContext, policy: dict | None) -> list[str]:
    """Approval mode and tool set: the set runs unasked (yolo); `permissionMode: default` keeps
    omp's prompts for writes and the shell. `--tools` hides the builtins outside the set, but it
    hides every MCP tool too: it is given only when the set names no MCP server (the extension
    refuses what is outside the set either way)."""
    if ctx.yolo or (ctx.allowed_tools is not None and tool_names.UNRESTRICTED in ctx.allowed_tools):
        return ["--approval-mode", "yolo"]
    mode = "always-ask" if tool_names.keeps_prompts(ctx.profile_extra) else "yolo"
    if policy is None or policy["mcp"]:
        return ["--approval-mode", mode]
    # omp reads an empty --tools as "all": a set with no builtin gets --no-tools instead.
    names = policy["builtins"]
    return ["--approval-mode", mode, *(["--tools", ",".join(names)] if names else ["--no-tools"])]


def build_launch(ctx: LaunchContext) -> Launch:
    own = terminal_dir(ctx)
    overlay = own / "omp-config.yml"
    _write(overlay, CONFIG_OVERLAY)
    package = own / "omp-cao"
    package.mkdir(mode=0o700, exist_ok=True)
    policy = _policy(ctx)
    extension = EXTENSION.replace("__ENABLED__", json.dumps(hook_url(ctx) is not None))
    _write(package / "index.js", extension.replace("__POLICY__", json.dumps(policy)))
    if ctx.mcp_url:
        # The header names the variable; omp fills it in from the pane's environment.
        headers = {name: "${CAO_MCP_TOKEN}" for name in mcp_headers(ctx)}
        server = {"type": "http", "url": ctx.mcp_url, "headers": headers, "timeout": MCP_CALL_TIMEOUT_MS}
        _write(package / ".mcp.json", json.dumps({"mcpServers": {MCP_SERVER_NAME: server}}, indent=2))
    binary = "omp" if ctx.on_host else (shutil.which("omp") or "omp")
    argv = [binary, "--config", str(overlay), "-e", str(package)]
    argv += ["--no-title", *_tool_flags(ctx, policy)]
    if ctx.model:
        argv += ["--model", ctx.model]
    if ctx.system_prompt.strip():
        prompt = own / "system-prompt.md"
        _write(prompt, ctx.system_prompt)
        argv += ["--append-system-prompt", str(prompt)]  # a file's contents are appended
    return Launch(argv=argv)


# --- the extension's events ------------------------------------------------------------
def status_from_hook(event: str, payload: dict, last_event: str | None = None) -> StatusReading | None:
    if event in ("agent_start", "tool_execution_start"):
        return StatusReading(TerminalStatus.PROCESSING)
    if event == "agent_end":
        reason = payload.get("stop_reason")
        if reason == "error":
            return StatusReading(TerminalStatus.ERROR, str(payload.get("error") or "model error")[:500])
        return StatusReading(TerminalStatus.IDLE if reason == "aborted" else TerminalStatus.COMPLETED)
    return None


def reply_from_hook(event: str, payload: dict) -> str | None:
    text = payload.get("text") if event == "agent_end" and payload.get("stop_reason") != "error" else None
    return text.strip() if isinstance(text, str) and text.strip() else None


# --- the screen (omp 18.2: see tests/fixtures/screens/omp) -------------------------------
# Bottom of the screen while the composer is shown:
#    ⎋ Working…                                        <- only while busy
#    π > ⬢ Model > 🗑 dir ▶────12%────…────128K─        <- status row: spinner and seconds while busy
#   ╰─ typed text                                       <- the composer
# History above: user messages and answers both start with one space (only colour tells them
# apart), tools are boxes (╭ │ ╰); a failed turn shows "✘ <error>" and "Dismissed when you send
# your next message."; the approval dialog replaces status row and composer with a box
# "╭─ Allow tool: bash ─" whose options read "❯ Approve" / "Deny".
_STATUS_ROW = re.compile(r"^ (π|[\u2800-\u28ff] \S+) > .*─{3,}")
_BUSY = re.compile(r"^ [\u2800-\u28ff] ")
_COMPOSER = "╰─"
_WORKING = "⎋ "
_DIALOG = "╭─ Allow tool: "
_ERROR, _DISMISSED = " ✘ ", "Dismissed when you send your next message."
_BOX_ROW = re.compile(r"^[╭│├╰]")


def _status_row(rows: list[str]) -> int | None:
    for i in range(len(rows) - 2, -1, -1):
        if rows[i + 1].startswith(_COMPOSER) and _STATUS_ROW.match(rows[i]):
            return i
    return None


def read_status(screen: Screen) -> StatusReading:
    rows = [line.rstrip() for line in screen.lines]
    while rows and not rows[-1]:
        rows.pop()
    status = _status_row(rows)
    dialog = max((i for i, r in enumerate(rows) if r.startswith(_DIALOG)), default=-1)
    if dialog > (status if status is not None else -1) and any(r.strip("│ ") == "Deny" for r in rows[dialog:]):
        tool = rows[dialog][len(_DIALOG) :].split(" ", 1)[0]
        body = " · ".join(r.strip("│ ") for r in rows[dialog + 1 :] if r.strip("│ ") and "Approve" not in r)
        return StatusReading(TerminalStatus.WAITING_USER_ANSWER, f"omp asks to run {tool}: {body}"[:300])
    if status is None:
        return StatusReading(TerminalStatus.UNKNOWN)  # starting, exiting, or a menu over the composer
    composer = [rows[status + 1][len(_COMPOSER) :].strip(), *(r.strip() for r in rows[status + 2 :])]
    typed = any(composer)
    # "⎋ Working…" shows above the status row a moment before its spinner does.
    if _BUSY.match(rows[status]) or (status > 0 and rows[status - 1].lstrip().startswith(_WORKING)):
        return StatusReading(TerminalStatus.PROCESSING, composer_has_text=typed)
    above = [r for r in rows[:status] if r.strip() and not r.lstrip().startswith("─")]
    if not above:
        return StatusReading(TerminalStatus.IDLE, composer_has_text=typed)
    if above[-1].strip() == _DISMISSED:
        errors = [r.strip()[2:] for r in above if r.startswith(_ERROR)]
        reason = errors[-1] if errors else "omp reports an error"
        return StatusReading(TerminalStatus.ERROR, reason[:500], composer_has_text=typed)
    return StatusReading(TerminalStatus.COMPLETED, composer_has_text=typed)


def _user_block_end(rows: list[str]) -> int:
    """Just past the last echoed user message, or 0. On an untrimmed capture a user message is a
    block of rows padded to the pane's full width (its background), blank rows around its text;
    an answer's rows are not padded (the blank rows between its paragraphs are)."""
    width = max((len(r) for r in rows), default=0)
    full = [len(r) == width and width > 0 for r in rows]
    for i in range(len(rows) - 2, 0, -1):
        if full[i] and rows[i].strip() and full[i - 1] and not rows[i - 1].strip():
            end = i + 1
            while end < len(rows) and full[end] and rows[end].strip():
                end += 1
            return end
    return 0


def extract_reply(history_lines: list[str]) -> str | None:
    """The screen's fallback (the extension's `agent_end` carries the exact text): the rows after
    the last user message and the last tool box, up to the status row."""
    status = _status_row([r.rstrip() for r in history_lines])
    if status is None:
        return None
    raw = history_lines[:status]
    start = _user_block_end(raw)
    boxes = [i for i in range(start, len(raw)) if _BOX_ROW.match(raw[i])]
    start = boxes[-1] + 1 if boxes else start
    body = [r.rstrip() for r in raw[start:]]
    text = "\n".join(r[1:] if r.startswith(" ") else r for r in body).strip()
    if not text or _DISMISSED in text or text.startswith("─"):
        return None
    return text


# The approval dialog is a menu (Approve / Deny) that ignores typed text.
def dialog_keys(screen: Screen, answer: str) -> list[str] | None:
    if not any(row.startswith(_DIALOG) for row in screen.lines):
        return None
    word = " ".join(answer.strip().lower().rstrip(".").split())
    if word in {"y", "yes", "1", "approve", "allow", "ok"}:
        return ["Enter"]
    if word in {"n", "no", "2", "deny", "reject", "cancel"}:
        return ["Down", "Enter"]
    return None


PROVIDER = Provider(
    name="omp",
    binary="omp",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    exit_command="/exit",
    startup_timeout=90.0,
    status_from_hook=status_from_hook,
    reply_from_hook=reply_from_hook,
    dialog_keys=dialog_keys,
    raw_history=True,
    mcp="http",
    lists_tools_at_start=True,
)
