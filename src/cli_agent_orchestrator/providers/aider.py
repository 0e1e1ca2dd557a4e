"""Provider for Aider (PyPI `aider-chat`, tested with 0.86.2, binary `aider`).

Aider has no hooks, no event stream, no terminal title and no MCP client: cao reads its screen
(`--no-pretty`: the model's raw text, no markdown rendering, so the reply is exact) and gives it
no cao tools (`mcp="none"`: a worker, never a supervisor). Its `--notifications-command` is not
used: it runs once per model answer when aider next waits, for the prompt and for a yes/no
question alike, with nothing to tell them apart, and nothing says a turn has started.

Everything cao sets is a flag or a file of the terminal's own directory: the profile's prompt is
a read-only chat file (`--read`, aider's way to give conventions), the input and chat history
files live there too, and aider's own network calls at start are off. The user's
`~/.aider.conf.yml`, the repository's `.aider.conf.yml` and `.env` are read by aider as usual and
never written. cao's agents leave their edits in the working tree, as the other CLIs do: no
commits (`--no-auto-commits`), no `.gitignore` edits.

Tool sets: aider's model has two powers, edits and shell commands; a set without `fs_write`
runs aider with `--dry-run` (edits shown, never applied), one without `execute_bash` with
`--no-suggest-shell-commands`. `--yes-always` (yolo, or a set without `permissionMode: default`)
answers aider's questions, except that aider never runs a shell command without a typed yes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ..models import TerminalStatus
from . import tool_names
from ._node_settings import write_private
from .base import Launch, LaunchContext, Provider, Screen, StatusReading
from .common import terminal_dir

PROFILE_FILE = "cao-profile.md"  # the profile's prompt, read-only in aider's chat
_LOCAL_COST_MAP = "LITELLM_LOCAL_MODEL_COST_MAP"
# Off for every agent: each would otherwise ask a question or call the network at start.
_QUIET = (
    "--no-check-update",
    "--no-show-release-notes",
    "--no-analytics",
    "--no-show-model-warnings",  # for an unknown model: asks to open a documentation URL
    "--no-detect-urls",  # a URL in a message: asks to add the page to the chat
    "--no-gitignore",  # asks to add .aider* to the repository's .gitignore
    "--no-auto-commits",
    "--no-dirty-commits",
    "--no-pretty",  # raw text out: the reply as the model wrote it, no spinner, no colours
)


def _in_git_repo(directory: str) -> bool:
    here = Path(directory)
    return any((d / ".git").exists() for d in (here, *here.parents))


def build_launch(ctx: LaunchContext) -> Launch:
    own = terminal_dir(ctx)
    argv = ["aider", *_QUIET]
    if not ctx.on_host and not _in_git_repo(ctx.working_directory):
        # Aider would offer to `git init` the directory, and --yes-always would accept: not cao's call.
        argv.append("--no-git")
    argv += ["--input-history-file", str(own / "input.history"), "--chat-history-file", str(own / "chat.history.md")]
    if ctx.model:
        argv += ["--model", ctx.model]
    if ctx.system_prompt:
        write_private(own / PROFILE_FILE, ctx.system_prompt + "\n")
        argv += ["--read", str(own / PROFILE_FILE)]
    tools = ctx.allowed_tools
    yolo = ctx.yolo or (tools is not None and tool_names.UNRESTRICTED in tools)
    if tools is not None and not yolo:
        refused = tool_names.refused_builtins("aider", tools)
        if "file-edits" in refused:
            argv.append("--dry-run")
        if "shell-commands" in refused:
            argv.append("--no-suggest-shell-commands")
    if yolo or (tools is not None and not tool_names.keeps_prompts(ctx.profile_extra)):
        argv.append("--yes-always")  # the set runs without asking
    # litellm fetches its model price list from GitHub at import unless told to use its own copy.
    cost_map = ctx.environ.get(_LOCAL_COST_MAP) or "True"
    return Launch(argv=argv, env={_LOCAL_COST_MAP: cost_map})


# --- the screen (aider 0.86 with --no-pretty; see tests/fixtures/screens/aider) -------------------
#   Aider v0.86.2 / Model: ... / Git repo: none / Repo-map: disabled    <- banner at start
#   diff> please say hello                  <- echoed prompt; "diff" when not the model's default format
#                                           <- (blank)
#   Hello from the scripted model.          <- the model's raw text
#   Tokens: 2.3k sent, 10 received.         <- end of the answer
#   hello.txt                               <- edits applied, shell commands, questions follow
#   Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:   <- a question, cursor after it
#                                           <- (blank)
#   ../tmp/ab12cd34/cao-profile.md (read only)   <- the chat's files
#   diff>                                   <- the prompt, the cursor on it
# While the model works nothing moves: the cursor sits below the echoed prompt.
_PROMPT = re.compile(r"^(?:[a-z-]+(?: multi)?)?>(?: |$)")  # not ">>>>>>> REPLACE"
_QUESTION = re.compile(r"^(?P<q>.*\?) \(Y\)es/\(N\)o(?:/[^\[]*)? \[[^\]]*\]: ?$")
_TOKENS = re.compile(r"^Tokens: \S+ sent, ")
_ERROR = re.compile(r"^litellm\.\w+(?:Error|Exception)\b")
_NO_GIT = "No git repo found, create one"


def _last_nonblank(rows: list[str]) -> int | None:
    return next((i for i in range(len(rows) - 1, -1, -1) if rows[i].strip()), None)


def _block_start(rows: list[str], last: int) -> int:
    """The first row of the prompt block ending at `last` (a multi-line input repeats the prompt)."""
    start = last
    while start > 0 and _PROMPT.match(rows[start - 1]):
        start -= 1
    return start


def _typed(rows: list[str]) -> str:
    return "\n".join(_PROMPT.sub("", row, count=1) for row in rows).strip()


def _last_echo(rows: list[str], before: int) -> int | None:
    """The row of the last prompt above `before` that holds submitted text."""
    for i in range(before - 1, -1, -1):
        if _PROMPT.match(rows[i]) and _PROMPT.sub("", rows[i], count=1).strip():
            return _block_start(rows, i)
    return None


def read_status(screen: Screen) -> StatusReading:
    rows = [row.rstrip() for row in screen.lines]
    last = _last_nonblank(rows)
    if last is None:
        return StatusReading(TerminalStatus.UNKNOWN)
    asked = _QUESTION.match(rows[last])
    if asked:  # unanswered: an answer stands after the colon
        subject = rows[last - 1].strip() if last > 0 and rows[last - 1].strip() else ""
        reason = asked.group("q") + (f" ({subject})" if subject and not _PROMPT.match(rows[last - 1]) else "")
        return StatusReading(TerminalStatus.WAITING_USER_ANSWER, reason)
    if not _PROMPT.match(rows[last]):
        # The answer streams, a command runs, or aider is still starting (no prompt yet).
        seen_prompt = any(_PROMPT.match(row) for row in rows)
        return StatusReading(TerminalStatus.PROCESSING if seen_prompt else TerminalStatus.UNKNOWN)
    start = _block_start(rows, last)
    if screen.cursor_row > last:
        return StatusReading(TerminalStatus.PROCESSING)  # submitted: the cursor left the prompt
    typed = _typed(rows[start : last + 1])
    echo = _last_echo(rows, start)
    turn = rows[echo:start] if echo is not None else rows[:start]
    answered = any(_TOKENS.match(r) for r in turn)
    if echo is not None and not answered and not typed:  # typed text: the next turn is on its way
        failed = next((r for r in turn if _ERROR.match(r)), None)
        if failed is not None:
            return StatusReading(TerminalStatus.ERROR, failed.strip())
    done = answered and not typed
    return StatusReading(TerminalStatus.COMPLETED if done else TerminalStatus.IDLE, composer_has_text=bool(typed))


def extract_reply(history_lines: list[str]) -> str | None:
    """The model's text of the last turn: between the echoed prompt and aider's `Tokens:` line."""
    rows = [row.rstrip() for row in history_lines]
    last = _last_nonblank(rows)
    if last is None:
        return None
    end = _block_start(rows, last) if _PROMPT.match(rows[last]) else last + 1
    echo = _last_echo(rows, end)
    if echo is None:
        return None
    body_start = echo
    while body_start < end and _PROMPT.match(rows[body_start]):
        body_start += 1
    tokens = next((i for i in range(body_start, end) if _TOKENS.match(rows[i])), None)
    if tokens is None:
        return None  # no answer (a failed turn) or still streaming
    text = "\n".join(rows[body_start:tokens]).strip("\n")
    return text or None


_YES = frozenset({"y", "yes", "1", "allow", "ok", "approve", "accept"})


def dialog_keys(screen: Screen, answer: str) -> Sequence[str] | None:
    """aider's questions take one letter and Enter: yes, a letter the question offers ((A)ll,
    (S)kip all, (D)on't ask again), anything else no."""
    word = " ".join(answer.strip().lower().rstrip(".!").split())
    if word in _YES:
        return ["y", "Enter"]
    if len(word) == 1 and word in "asd":
        return [word, "Enter"]
    return ["n", "Enter"]


def answer_startup_dialog(screen: Screen) -> Sequence[str] | None:
    """Outside a git repository aider asks to create one: no, cao does not make repositories."""
    rows = [row for row in screen.lines if row.strip()]
    return ["n", "Enter"] if rows and rows[-1].startswith(_NO_GIT) else None


PROVIDER = Provider(
    name="aider",
    binary="aider",
    build_launch=build_launch,
    read_status=read_status,
    extract_reply=extract_reply,
    answer_startup_dialog=answer_startup_dialog,
    dialog_keys=dialog_keys,
    exit_command="/exit",
    startup_timeout=90.0,
    mcp="none",  # no MCP client: a worker, never a supervisor
)
