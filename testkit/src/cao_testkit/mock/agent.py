"""cao-mock-agent: a credential-free stand-in for an interactive coding CLI.

It runs in a tmux pane like a real agent (raw tty, bracketed paste, a composer,
a working indicator, replies, questions, errors) so the whole orchestrator can
be exercised end to end without any vendor binary or account. The screen
layout is a contract with cao_testkit/provider.py; change both together.

Screen layout (every marker starts a row at column 0, so it can be judged by
line starts; anything the user wrote is shown after a prefix or indented):

    MockCli ready. (profile: mock)
    ❯ first line of a submitted message       <- prompt + composer
      second line                              <- composer continuation
    ✻ Thinking… (esc to interrupt)             <- while busy, erased afterwards
    ⏺ MOCK: first line of a submitted message  <- reply start
      second line                              <- reply continuation
    ❯                                          <- prompt again
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import termios
import time
import tty
from types import FrameType

from .mcp_caller import list_tools_at_start
from .screen import (
    ANSWER_PROMPT,
    ERROR_LINE,
    PROMPT,
    QUESTION_LINES,
    SPINNER,
    THINKING,
    layout_input,
    line_count,
    render_reply,
    visible,
)
from .terminal_input import env_argv, env_int, env_ms, escape_length
from .turns import Turn, plan_turn

PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
BRACKETED_PASTE_ON = "\x1b[?2004h"
BRACKETED_PASTE_OFF = "\x1b[?2004l"
REPLY_ECHO_LIMIT = 2000  # longer messages get a digest instead of an echo
ESC_TIMEOUT = 0.05  # a lone ESC with nothing after it for this long is the Esc key
STALE_ESCAPE = 0.5  # an unfinished escape sequence older than this is junk
SPIN_INTERVAL = 0.1

# Runs of characters that can go into the composer as typed (no C0/DEL/C1).
_PLAIN_RE = re.compile(r"[^\x00-\x1f\x7f-\x9f]+")


def compute_reply(message: str) -> str:
    """The agent's "brain": the reply text for one ordinary message.

    Deliberately a module-level function looked up at call time, so a scripted
    brain can replace it (``agent.compute_reply = my_brain``). Magic inputs are
    handled before this is called and never reach it.
    """
    if len(message) <= REPLY_ECHO_LIMIT:
        return "MOCK: " + message
    digest = hashlib.sha256(message.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"MOCK: received {len(message)} chars, {line_count(message)} lines, sha256 {digest}"


HOOK_TIMEOUT_S = 5.0


class MockAgent:
    """The interactive loop. States: "idle" (composer), "busy" (thinking), "asking"."""

    def __init__(self, fd_in: int, fd_out: int, profile: str, delay: float, record: str | None):
        self.fd_in, self.fd_out = fd_in, fd_out
        self.profile, self.delay, self.record = profile, delay, record
        self.state = "idle"
        self.composer = ""  # also collects input typed while busy
        self.answer = ""  # input at the "answer> " prompt
        self.turn: Turn | None = None
        self.deadline = 0.0
        self.exit_code: int | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._in_paste = False
        self._paste_cr = False  # last pasted char was CR: a following LF is the same newline
        self._after_cr = False  # typed CR submitted: a following LF is the same Enter
        self._carry = ""  # an escape sequence split across reads
        self._carry_since = 0.0
        self._rows_above = 0  # input rows above the cursor row
        self._drawn: tuple[str, str] | None = None
        self._spin = 0
        self._next_spin = 0.0
        self.drop_enters = env_int("CAO_MOCK_DROP_ENTERS")
        self.hook_argv = env_argv("CAO_MOCK_HOOK_COMMAND")

    # --- output -------------------------------------------------------------
    def out(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        while data:
            try:
                n = os.write(self.fd_out, data)
            except OSError:  # the pane is gone
                raise SystemExit(0) from None
            data = data[n:]

    def _input_area(self, fresh: bool) -> str:
        """Repaint the prompt and its buffer; fresh=True when at the start of a new row."""
        prefix, text = (ANSWER_PROMPT, self.answer) if self.state == "asking" else (PROMPT, self.composer)
        try:
            size = os.get_terminal_size(self.fd_out)
            cols, rows = size.columns, size.lines
        except OSError:
            cols, rows = 80, 24
        lines = layout_input(prefix, text, cols, rows)
        up = f"\x1b[{self._rows_above}A" if self._rows_above and not fresh else ""
        self._rows_above = len(lines) - 1
        self._drawn = (prefix, text)
        return up + "\r\x1b[J" + "\r\n".join(lines)

    def _catch_up(self) -> str:
        """Repaint text for the input area if it changed since it was last drawn."""
        if self.state == "busy":  # typed-ahead input stays hidden until the reply
            return ""
        current = (ANSWER_PROMPT, self.answer) if self.state == "asking" else (PROMPT, self.composer)
        return self._input_area(fresh=False) if current != self._drawn else ""

    def _refresh(self) -> None:
        if text := self._catch_up():
            self.out(text)

    def _indicator(self) -> str:
        return f"\r\x1b[2K{SPINNER[self._spin % len(SPINNER)]} {THINKING}"

    # --- main loop ----------------------------------------------------------
    def run(self) -> int:
        banner = f"MockCli ready. (profile: {visible(self.profile).replace(chr(10), ' ')})"
        self.hook("SessionStart", {"source": "startup"})  # before the prompt shows, as real CLIs do
        self.out(banner + "\r\n" + self._input_area(fresh=True))
        while self.exit_code is None:
            ready, _, _ = select.select([self.fd_in], [], [], self._timeout(time.monotonic()))
            if ready:
                try:
                    data = os.read(self.fd_in, 65536)
                except OSError:  # EIO: the pty went away
                    data = b""
                if not data:
                    return 0
                self.feed(self._decoder.decode(data))
            self.tick(time.monotonic())
            if self.exit_code is None:
                self._refresh()
        return self.exit_code

    def _timeout(self, now: float) -> float | None:
        waits: list[float] = []
        if self.state == "busy":
            waits += [self.deadline - now, self._next_spin - now]
        if self._carry and not self._in_paste:
            limit = ESC_TIMEOUT if self._carry == "\x1b" else STALE_ESCAPE
            waits.append(self._carry_since + limit - now)
        return max(min(waits), 0.0) if waits else None

    def tick(self, now: float) -> None:
        """Time-driven work: the lone-Esc timeout, the spinner, finishing a turn."""
        if self._carry and not self._in_paste:
            age = now - self._carry_since
            if self._carry == "\x1b" and age >= ESC_TIMEOUT:
                self._carry = ""
                self._escape_key()
            elif age >= STALE_ESCAPE:
                self._carry = ""
        if self.state != "busy":
            return
        if now >= self.deadline:
            self._finish_turn()
        elif now >= self._next_spin:
            self._spin += 1
            self._next_spin = now + SPIN_INTERVAL
            self.out(self._indicator())

    # --- input parsing --------------------------------------------------------
    def feed(self, data: str) -> None:
        text, self._carry = self._carry + data, ""
        i, n = 0, len(text)
        while i < n and self.exit_code is None:
            if self._in_paste:
                j = text.find("\x1b", i)
                if j < 0:
                    self._paste(text[i:])
                    return
                self._paste(text[i:j])
                if text.startswith(PASTE_END, j):
                    self._in_paste = self._paste_cr = False
                    i = j + len(PASTE_END)
                elif PASTE_END.startswith(text[j:]):  # end marker split across reads
                    self._keep(text[j:])
                    return
                else:  # an ESC that is part of the pasted text
                    self._paste("\x1b")
                    i = j + 1
                continue
            after_cr, self._after_cr = self._after_cr, False
            ch = text[i]
            if m := _PLAIN_RE.match(text, i):
                self._insert(m.group())
                i = m.end()
            elif ch == "\x1b":
                size = escape_length(text, i)
                if size == 0:
                    self._keep(text[i:])
                    return
                seq = text[i : i + size]
                i += size
                if seq == PASTE_START:
                    self._in_paste, self._paste_cr = True, False
                elif seq == "\x1b":
                    self._escape_key()
                # anything else (arrows, function keys, focus events, Alt-x) is ignored
            else:
                i += 1
                if ch == "\r" or (ch == "\n" and not after_cr):
                    self._after_cr = ch == "\r"
                    self._enter()
                elif ch in "\x7f\x08":
                    self._backspace()
                elif ch == "\x03":
                    self._ctrl_c()
                elif ch == "\t":
                    self._insert("\t")
                # other control characters are ignored

    def _keep(self, partial: str) -> None:
        self._carry, self._carry_since = partial, time.monotonic()

    def _paste(self, chunk: str) -> None:
        """Pasted text: CR, LF and CRLF are all one newline of the message."""
        if self._paste_cr and chunk.startswith("\n"):
            chunk = chunk[1:]
        if not chunk:
            return
        self._paste_cr = chunk.endswith("\r")
        self._insert(chunk.replace("\r\n", "\n").replace("\r", "\n"))

    def _insert(self, chunk: str) -> None:
        if self.state == "asking":
            self.answer += chunk
        else:
            self.composer += chunk

    def _backspace(self) -> None:
        if self.state == "asking":
            self.answer = self.answer[:-1]
        else:
            self.composer = self.composer[:-1]

    def _ctrl_c(self) -> None:
        if self.state == "idle":
            self.composer = ""
        else:
            self._interrupt()

    def _escape_key(self) -> None:
        if self.state != "idle":
            self._interrupt()

    def _enter(self) -> None:
        if self.state == "idle" and self.composer and self.drop_enters > 0:
            # Imitates a CLI that is not ready yet and loses the Enter (CAO_MOCK_DROP_ENTERS).
            self.drop_enters -= 1
            return
        if self.state == "idle":
            self._submit()
        elif self.state == "asking":
            self._answer()
        # Enter while busy is ignored: the typed-ahead text stays in the composer.

    # --- turns ----------------------------------------------------------------
    def _submit(self) -> None:
        # Input and Enter can arrive in one read: show the message before moving on,
        # so the submitted prompt row always holds what was sent.
        shown = self._catch_up()
        message, self.composer = self.composer, ""
        if not message.strip():
            self.out(shown + "\r\n" + self._input_area(fresh=True))
            return
        self._record(message)
        if message.strip() == "/exit":
            self.out(shown + "\r\nBye.\r\n")
            self.exit_code = 0
            return
        self.hook("UserPromptSubmit", {"prompt": message})
        self.turn = plan_turn(message, self.delay)
        self.state = "busy"
        now = time.monotonic()
        self.deadline = now + self.turn.seconds
        self._spin, self._next_spin = 0, now + SPIN_INTERVAL
        # Newline and indicator in one write: no screen ever shows a submitted
        # prompt with nothing under it.
        self.out(shown + "\r\n" + self._indicator())

    def _record(self, message: str) -> None:
        if not self.record:
            return
        try:
            with open(self.record, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(message) + "\n")
                fh.flush()
        except OSError:
            pass  # a test aid; a bad path must not kill the agent

    def _finish_turn(self) -> None:
        turn, self.turn = self.turn, None
        assert turn is not None
        out = "\r\x1b[2K"
        if turn.kind == "ask":
            self.state, self.answer = "asking", ""
            self.out(out + "\r\n".join(QUESTION_LINES) + "\r\n" + self._input_area(fresh=True))
            self.hook("Notification", {"notification_type": "permission_prompt"})
            return
        self.state = "idle"
        if turn.kind == "error":
            out += ERROR_LINE
        else:
            try:
                text = turn.text if turn.text is not None else compute_reply(turn.message)
                out += render_reply(text)
            except Exception as exc:  # a scripted brain failing is an agent error, not a crash
                # A brain may word its own error row (mock/brain.py: "<tool> failed: ...").
                detail = getattr(exc, "error_text", None) or f"{type(exc).__name__}: {exc}"
                out += "✗ Error: " + visible(str(detail)).replace("\n", " ")
        self.out(out + "\r\n" + self._input_area(fresh=True))
        self.hook("StopFailure" if out.startswith("\r\x1b[2K✗") else "Stop", {})

    def hook(self, event: str, payload: dict) -> None:
        """Run the configured hook command like Claude Code does: synchronously,
        the event JSON on stdin (CAO_MOCK_HOOK_COMMAND, a JSON argv)."""
        if not self.hook_argv:
            return
        try:
            subprocess.run(
                [*self.hook_argv, event],
                input=json.dumps({"hook_event_name": event, **payload}),
                text=True,
                timeout=HOOK_TIMEOUT_S,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError):
            pass  # like a real CLI: a failing hook does not stop the agent

    def _answer(self) -> None:
        answer = self.answer.strip()
        if not answer:
            return
        shown = self._catch_up()
        self.hook("PostToolUse", {})
        self.state, self.answer = "idle", ""
        self.out(shown + "\r\n" + render_reply(f"MOCK: you answered {answer}") + "\r\n" + self._input_area(fresh=True))
        self.hook("Stop", {})

    def _interrupt(self) -> None:
        # Busy: the cursor sits on the indicator row. Asking: at the end of the answer.
        lead = "\r\x1b[2K" if self.state == "busy" else "\r\n"
        self.state, self.turn, self.answer = "idle", None, ""
        self.out(lead + "Interrupted.\r\n" + self._input_area(fresh=True))


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _install_brain(agent: MockAgent) -> None:
    """Replace compute_reply with the scripted brain when rules are configured (mock/brain.py)."""
    global compute_reply
    from .brain import brain_from_env

    def heartbeat() -> None:
        # Tool calls block this loop; keep the indicator moving so the pane looks (and is) busy.
        agent._spin += 1
        agent.out(agent._indicator())

    brain = brain_from_env(os.environ, compute_reply, heartbeat)
    if brain is not None:
        compute_reply = brain  # type: ignore[assignment]  # the documented replacement point


def main() -> int:
    fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()
    saved = termios.tcgetattr(fd_in) if os.isatty(fd_in) else None
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    record = os.environ.get("CAO_MOCK_RECORD") or None
    agent = MockAgent(
        fd_in, fd_out, os.environ.get("CAO_MOCK_PROFILE") or "mock", env_ms("CAO_MOCK_DELAY_MS", 50), record
    )
    _install_brain(agent)
    list_tools_at_start(os.environ)  # as a real CLI connects its MCP servers while its prompt shows
    try:
        if saved is not None:
            tty.setraw(fd_in)  # also turns off ISIG: Ctrl-C arrives as a byte
        agent.out(BRACKETED_PASTE_ON)
        time.sleep(env_ms("CAO_MOCK_STARTUP_MS", 0))
        return agent.run()
    finally:
        try:
            os.write(fd_out, BRACKETED_PASTE_OFF.encode())
        except OSError:
            pass
        if saved is not None:
            try:
                termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
            except (termios.error, OSError):
                pass


if __name__ == "__main__":
    sys.exit(main())
