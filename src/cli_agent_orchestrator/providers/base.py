"""The provider interface: what cao needs to know about one coding CLI.

A provider is data plus a few pure functions. It never touches tmux, HTTP or
the database; everything generic (waiting, pasting, retries) lives in the
service layer and works the same for every CLI.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..models import TerminalStatus


@dataclass(frozen=True)
class Screen:
    """The rendered visible screen of a pane (a terminal emulator's view)."""

    lines: list[str]  # one entry per row, trailing blanks stripped
    cursor_row: int = 0
    cursor_col: int = 0

    @property
    def text(self) -> str:
        return "\n".join(self.lines).rstrip("\n")

    def last_nonblank(self, n: int = 1) -> list[str]:
        rows = [line for line in self.lines if line.strip()]
        return rows[-n:]


@dataclass(frozen=True)
class StatusReading:
    status: TerminalStatus
    reason: str = ""  # human-readable cause, mostly for ERROR
    composer_has_text: bool = False  # typed input sits unsubmitted at the prompt
    # How many screen rows the composer's text takes, where the provider can tell (0: it
    # cannot). One more row after an Enter, with the text still there: the Enter became a newline.
    composer_rows: int = 0
    # The screen is certain (e.g. a turn was interrupted and no hook will say so):
    # let it through even when hooks decide busy/done/idle.
    definite: bool = False


# A conversation id a CLI prints for resuming (UUIDs, names): never an option or a shell word.
RESUME_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


@dataclass(frozen=True)
class LaunchContext:
    terminal_id: str
    profile_name: str
    system_prompt: str
    working_directory: str
    home_dir: Path  # the cao home; providers may write per-terminal files under home/tmp
    model: str | None = None
    # cao's tool vocabulary, resolved (profiles/roles.py resolve_tools); None: no policy at all.
    # Tools inside run without asking, tools outside are refused; yolo: unrestricted.
    allowed_tools: list[str] | None = None
    yolo: bool = False
    mcp_server_argv: list[str] = field(default_factory=list)  # how to start cao-mcp-server (the stdio relay)
    # cao's MCP endpoint as this agent reaches it, and the credential that proves the agent on it
    # (agent_credentials.py): for a config file the provider writes 0600 under the terminal's
    # directory, never for argv (the agent's environment also holds it, as CAO_MCP_TOKEN).
    mcp_url: str = ""
    mcp_token: str = ""
    profile_extra: dict = field(default_factory=dict)  # provider-specific frontmatter
    # The environment the agent inherits (cao-server's own): where a provider finds the
    # user's CLI configuration (CODEX_HOME, QWEN_HOME, …) and API keys. Providers read this,
    # never os.environ, so that building a launch is a pure function of its context.
    environ: Mapping[str, str] = field(default_factory=dict)
    # How the CLI's hooks reach cao-server: "fifo" (the cao home's hook FIFO, this machine) or
    # "http" (`cao-hook`, for an agent on another host, through its reverse forward).
    hook_channel: str = "fifo"
    # The agent runs on a registered host, not on cao-server's machine: every command in its
    # launch must be a name the host's own PATH resolves, never a path of this machine (the
    # host may be another user, or another box).
    on_host: bool = False
    # Resume this conversation of the CLI's own (`cao launch --resume-session-id`), checked
    # (RESUME_ID); only for a provider with `resumes`.
    resume_session_id: str | None = None


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added on top of the server's env


def no_startup_dialog(screen: Screen) -> Sequence[str] | None:
    return None


def no_hooks(event: str, payload: dict, last_event: str | None = None) -> StatusReading | None:
    return None


def no_title_status(title: str, previous: str | None) -> StatusReading | None:
    return None


def no_dialog_keys(screen: Screen, answer: str) -> Sequence[str] | None:
    return None


def no_hook_reply(event: str, payload: dict) -> str | None:
    return None


def no_preflight(profile_name: str, environ: Mapping[str, str]) -> str | None:
    return None


def stop_hook_message(event: str, payload: dict) -> str | None:
    """`last_assistant_message` of a `Stop` hook (Claude Code, Codex), when it has text."""
    text = payload.get("last_assistant_message") if event == "Stop" else None
    return text if isinstance(text, str) and text.strip() else None


@dataclass(frozen=True)
class Provider:
    name: str
    binary: str  # the CLI on cao-server's machine: a command name, or an absolute path
    build_launch: Callable[[LaunchContext], Launch]
    read_status: Callable[[Screen], StatusReading]
    # Given the pane's whole history (wrapped lines joined), return the text of
    # the last reply, or None when there is none.
    extract_reply: Callable[[list[str]], str | None]
    # Keys to press for a start-up dialog (trust, consent) seen on the screen.
    answer_startup_dialog: Callable[[Screen], Sequence[str] | None] = no_startup_dialog
    exit_command: str = "/exit"
    startup_timeout: float = 60.0
    # A second launch line, tried once in the same window when the first does not become
    # ready within the start-up timeout (Kiro: its TUI, then `--legacy-ui`); None: none.
    fallback_launch: Callable[[LaunchContext], Launch | None] | None = None
    # Providers that accept typed input while busy (seed: eager inbox delivery).
    accepts_input_while_busy: bool = False
    # The CLI's own signals: a hook event (name, JSON payload) posted by `cao-hook`
    # → the status it means, or None to ignore it. `last_event` is the hook event that
    # decided the terminal's previous hook reading (the status monitor keeps it per
    # terminal, so the provider stays a pure function). Once a terminal has sent a hook,
    # its busy/done/idle come from hooks only; the screen still detects dialogs
    # (waiting_user_answer) and errors.
    status_from_hook: Callable[[str, dict, str | None], StatusReading | None] = no_hooks
    # The CLI's own status in its terminal title (OSC 0/2), read from the output stream in order
    # with the screen: (title, the title before it or None) → the status it means, or None to
    # ignore it. A signal like a hook (no process, no request: it costs the CLI nothing), so once
    # one is seen busy/done/idle come from signals only. A title saying the turn is done does not
    # say how: an error or a cancelled turn that the screen shows decides that.
    status_from_title: Callable[[str, str | None], StatusReading | None] = no_title_status
    # While waiting_user_answer: the keys that give `answer` to the dialog on the
    # screen (menus that ignore pasted text), or None to paste the answer as text.
    dialog_keys: Callable[[Screen, str], Sequence[str] | None] = no_dialog_keys
    # The exact text of a turn's answer when the CLI's turn-end hook carries it: better
    # than reading the screen (no wrapping, markdown kept). None → the screen is read.
    reply_from_hook: Callable[[str, dict], str | None] = no_hook_reply
    # How long the turn's end may wait for reply_from_hook to find the answer, for a CLI whose hook
    # can run before the record it names is written (Copilot's transcript); 0: not waited for.
    hook_reply_wait_s: float = 0.0
    # extract_reply gets history lines untrimmed (trailing blanks can be the only mark
    # that tells a reply from echoed text, as in opencode's inline mode).
    raw_history: bool = False
    # A pause between the paste and Enter for CLIs that read an Enter arriving right
    # after a paste as part of it (Gemini turns it into a newline). A CLI quirk, not sync.
    enter_delay_s: float = 0.0
    # The CLI takes an Enter only once the paste is drawn (an Enter in the same read as the
    # paste becomes part of it): Enter waits for the composer to show the text (ComposerChanged),
    # at most `enter_delay_s`.
    enter_after_echo: bool = False
    # With `enter_after_echo`: then this long before Enter, for a CLI that refuses an Enter for a
    # while after it has read a paste (Gemini); the draw is the first sign that it has.
    pause_after_echo_s: float = 0.0
    # With `enter_after_echo`, once the echo was seen: how long an Enter may take to show any
    # effect before it is pressed again (None: the input service's default, 1.5 s). Shorter for a
    # CLI that visibly takes an Enter within tens of ms but sometimes reads it as a newline
    # (Gemini): the next Enter then submits the text.
    submit_confirm_s: float | None = None
    # How the CLI reaches cao's tools: "http" (cao-server's MCP endpoint itself), "stdio" (the
    # cao-mcp-server relay it starts), or "none" (no MCP at all: a worker, never a supervisor).
    mcp: str = "stdio"
    # The CLI lists its MCP servers' tools as it starts, so an agent given cao's tools is ready
    # only once it has (McpListed); False for a CLI that lists them later (it is not waited for).
    lists_tools_at_start: bool = True
    # What the CLI lists on cao's endpoint before it hands cao's tools to its model: the agent is
    # ready once all of these are answered (Claude Code takes its tools only after prompts/list
    # and resources/list; a message typed before that went out without them).
    mcp_ready_after: tuple[str, ...] = ("tools/list",)
    # Why a launch of this profile cannot work (a file the CLI needs is missing), or None;
    # checked before anything is allocated, so the request is a 400 that says what to do.
    preflight: Callable[[str, Mapping[str, str]], str | None] = no_preflight
    # The CLI's command name on a host, for a provider whose `binary` is a path of this machine
    # (one installed beside cao, like the mock agent): what `cao host check` looks for on the
    # host's PATH, and what build_launch runs when `ctx.on_host`. None: `binary` is that name.
    host_binary: str | None = None
    # build_launch resumes `ctx.resume_session_id`, a conversation the CLI recorded (its own id).
    resumes: bool = False

    @property
    def command_on_host(self) -> str:
        """The name a host's PATH must resolve for this provider's agents to start there."""
        return self.host_binary or self.binary
