"""Provider for cao-mock-agent, the credential-free stand-in coding CLI.

Status is judged from line *starts* only: every marker the agent prints begins
a row at column 0, while user text is always behind "❯ " or indented by two
spaces (in the composer and in the echoed reply), so quoted markers cannot
begin a row. Known limit: a reply row soft-wrapped by the terminal starts with
whatever character falls at the wrap point; a message crafted to the exact pane
width could place a fake marker there. The checks below are ordered so that a
single such row cannot flip a finished turn to another state (see
_submitted_prompt), and extract_reply works on tmux's joined history, where
soft wraps do not exist.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping

from cao_testkit.mock.screen import ANSWER_PROMPT, PROMPT, QUESTION_LINES, REPLY_MARK, SPINNER, THINKING
from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.providers.base import Launch, LaunchContext, Provider, Screen, StatusReading

_PROMPT_BARE = PROMPT.rstrip()  # a prompt row with an empty composer, trailing blank trimmed
_REPLY_BARE = REPLY_MARK.rstrip()
_ANSWER_BARE = ANSWER_PROMPT.rstrip()
_ERROR = "✗ Error:"
_INTERRUPTED = "Interrupted."
_QUESTION = QUESTION_LINES[0].split(":")[0]  # "? Mock question"
_BYE = "Bye."
_BANNER = "MockCli ready."
# The console script testkit installs (pyproject.toml): how a host that has the testkit starts
# the mock, found on the host's PATH. Here the server's own interpreter runs it (its bin
# directory need not be on the PATH).
HOST_BINARY = "cao-mock-agent"


def build_launch(ctx: LaunchContext) -> Launch:
    env = {"CAO_MOCK_PROFILE": ctx.profile_name}
    if ctx.mcp_server_argv:  # with `mock: {mcp: stdio}` the mock starts the cao-mcp-server relay so
        env["CAO_MOCK_MCP_COMMAND"] = json.dumps(ctx.mcp_server_argv)
    # Profile frontmatter `mock: {delay_ms: 200, record: /tmp/x}` -> CAO_MOCK_DELAY_MS=200 ...
    # Structured values (`rules: [...]`) travel as JSON. Launch env goes on top of the
    # server's, so a profile's values win over the server's CAO_MOCK_* settings.
    extra = ctx.profile_extra.get("mock", {})
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            name = str(key).upper()
            if name.replace("_", "").isalnum() and name.isascii():
                env[f"CAO_MOCK_{name}"] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    # `mock: {hooks: true}`: report turns through cao-hook, as Claude Code's hooks do.
    if str(env.pop("CAO_MOCK_HOOKS", "")).lower() in ("true", "1", "yes"):
        env["CAO_MOCK_HOOK_COMMAND"] = json.dumps(hook_command(ctx.on_host))
    if ctx.on_host:  # the host's own installation: this machine's interpreter path means nothing there
        return Launch(argv=[HOST_BINARY], env=env)
    return Launch(argv=[sys.executable, "-m", "cao_testkit.mock.agent"], env=env)


def hook_command(on_host: bool = False) -> list[str]:
    if on_host:
        return ["cao-hook"]
    return [sys.executable, "-m", "cli_agent_orchestrator.cli.cao_hook"]


# The mock's hooks use Claude Code's event names.
_HOOK_STATUS = {
    "SessionStart": TerminalStatus.IDLE,
    "UserPromptSubmit": TerminalStatus.PROCESSING,
    "PostToolUse": TerminalStatus.PROCESSING,
    "Stop": TerminalStatus.COMPLETED,
}


def status_from_hook(event: str, payload: dict, last_event: str | None = None) -> StatusReading | None:
    if event == "Notification" and payload.get("notification_type") == "permission_prompt":
        return StatusReading(TerminalStatus.WAITING_USER_ANSWER, "the agent asks a question")
    if event == "StopFailure":
        return StatusReading(TerminalStatus.ERROR, "the turn failed")
    status = _HOOK_STATUS.get(event)
    return StatusReading(status) if status else None


# --- row classification ----------------------------------------------------------
def _is_prompt(row: str) -> bool:
    return row == _PROMPT_BARE or row.startswith(PROMPT)


def _is_reply(row: str) -> bool:
    return row == _REPLY_BARE or row.startswith(REPLY_MARK)


def _is_answer_prompt(row: str) -> bool:
    return row == _ANSWER_BARE or row.startswith(ANSWER_PROMPT)


def _is_continuation(row: str) -> bool:
    """Rows that belong to the block above them: indented or blank."""
    return not row.strip() or row.startswith("  ")


def _is_indicator(row: str) -> bool:
    return len(row) > 1 and row[0] in SPINNER and row[1:].rstrip() == " " + THINKING


def _is_output_start(row: str) -> bool:
    """The first row the agent prints after accepting a message."""
    return _is_reply(row) or _is_indicator(row) or row.startswith((_ERROR, _QUESTION)) or row in (_INTERRUPTED, _BYE)


def _block_end(rows: list[str], start: int) -> int:
    end = start + 1
    while end < len(rows) and _is_continuation(rows[end]):
        end += 1
    return end


def _block_text(rows: list[str], start: int, end: int, prefix_len: int) -> str:
    return "\n".join([rows[start][prefix_len:]] + [r[2:] for r in rows[start + 1 : end]]).strip()


def _submitted_prompt(rows: list[str], below: int) -> int | None:
    """Index of the last prompt above `below` that really was submitted.

    A genuine one has text and is followed, right after its composer rows, by
    agent output. A fake "❯" row inside a soft-wrapped reply is followed by more
    reply rows or by the next prompt, so it is skipped.
    """
    for q in range(below - 1, -1, -1):
        if _is_prompt(rows[q]):
            end = _block_end(rows, q)
            if end < below and _block_text(rows, q, end, len(PROMPT)) and _is_output_start(rows[end]):
                return q
    return None


def _turn_outcome(rows: list[str], prompt: int) -> StatusReading | None:
    """How the last turn before the active prompt at `prompt` ended (None: no turn)."""
    q = _submitted_prompt(rows, prompt)
    if q is None and any(r.startswith(_BANNER) for r in rows[:prompt]):
        return None  # fresh start: nothing submitted yet
    # Without a visible submitted prompt the turn's start scrolled off the top:
    # judge what is left of its output.
    start = 0 if q is None else _block_end(rows, q)
    for row in rows[start:prompt]:
        if _is_reply(row):
            return StatusReading(TerminalStatus.COMPLETED)
        if row.startswith(_ERROR):
            return StatusReading(TerminalStatus.ERROR, reason=row.strip())
        if row == _INTERRUPTED:
            return None
    if q is None and any(_is_continuation(r) and r.strip() for r in rows[:prompt]):
        return StatusReading(TerminalStatus.COMPLETED)  # only the tail of a long reply is visible
    return None


def read_status(screen: Screen) -> StatusReading:
    rows = [line.rstrip() for line in screen.lines]
    while rows and not rows[-1]:
        rows.pop()
    if not rows:
        return StatusReading(TerminalStatus.UNKNOWN)
    bottom = rows[-1]
    if _is_indicator(bottom):
        return StatusReading(TerminalStatus.PROCESSING)
    if bottom == _BYE:
        return StatusReading(TerminalStatus.UNKNOWN, reason="agent exiting")

    prompt = next((i for i in range(len(rows) - 1, -1, -1) if _is_prompt(rows[i])), None)
    answer = next((i for i in range(len(rows) - 1, -1, -1) if _is_answer_prompt(rows[i])), None)
    if answer is not None and (prompt is None or answer > prompt):
        end = _block_end(rows, answer)
        if end < len(rows):  # answered, reply not drawn yet
            return StatusReading(TerminalStatus.PROCESSING)
        typed = bool(_block_text(rows, answer, end, len(ANSWER_PROMPT)))
        return StatusReading(TerminalStatus.WAITING_USER_ANSWER, composer_has_text=typed)
    if prompt is None:
        # Output without any prompt on screen: a reply still coming. Otherwise
        # the agent has not drawn its first prompt yet.
        busy = any(_is_reply(r) or r.startswith("  ") for r in rows)
        return StatusReading(TerminalStatus.PROCESSING if busy else TerminalStatus.UNKNOWN)

    end = _block_end(rows, prompt)
    if end < len(rows):  # the last prompt was submitted; its turn has not ended
        return StatusReading(TerminalStatus.PROCESSING)
    has_text = bool(_block_text(rows, prompt, end, len(PROMPT)))
    outcome = _turn_outcome(rows, prompt)
    if outcome is not None and outcome.status is TerminalStatus.ERROR:
        return StatusReading(TerminalStatus.ERROR, reason=outcome.reason, composer_has_text=has_text)
    if has_text:
        return StatusReading(TerminalStatus.IDLE, composer_has_text=True)
    return outcome or StatusReading(TerminalStatus.IDLE)


def extract_reply(history_lines: list[str]) -> str | None:
    lines = [line.rstrip() for line in history_lines]
    q = _submitted_prompt(lines, len(lines))
    start = 0 if q is None else _block_end(lines, q)
    stop = next((i for i in range(start, len(lines)) if _is_prompt(lines[i])), len(lines))
    first = next((i for i in range(stop - 1, start - 1, -1) if _is_reply(lines[i])), None)
    if first is None:
        return None
    out = [lines[first][len(REPLY_MARK) :]]
    i = first + 1
    while i < stop and _is_continuation(lines[i]):
        out.append(lines[i][2:])
        i += 1
    if i == len(lines):  # no prompt after it: the blank rows are the empty screen, not the reply
        while len(out) > 1 and not out[-1]:
            out.pop()
    return "\n".join(out)


PROVIDER = Provider(
    name="mock_cli",
    binary=sys.executable,
    host_binary=HOST_BINARY,
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    exit_command="/exit",
    startup_timeout=15.0,
    accepts_input_while_busy=False,
    status_from_hook=status_from_hook,
    mcp="http",  # cao's tools over cao-server's /mcp (or `mock: {mcp: stdio}`: through the relay)
)
