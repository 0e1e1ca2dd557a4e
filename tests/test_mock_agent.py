"""The mock coding agent (real tmux, private server) and its provider's parsers."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import random
import shlex
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import cao_testkit
import cli_agent_orchestrator
from cao_testkit.provider import PROVIDER, build_launch, extract_reply, read_status
from cli_agent_orchestrator.models import TerminalStatus as S
from cli_agent_orchestrator.providers.base import LaunchContext, Screen

# The agent runs under tmux: both source trees on its path, whatever the caller's environment.
SRC = os.pathsep.join(str(Path(pkg.__file__).resolve().parents[1]) for pkg in (cli_agent_orchestrator, cao_testkit))
AGENT_ARGV = [sys.executable, "-m", "cao_testkit.mock.agent"]
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


def _agent_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "CAO_MOCK_"))}
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


class Pane:
    """One mock agent in a 220x50 session of a tmux server private to the test."""

    def __init__(self, tmp_path: Path, **env: str):
        self.sock = str(tmp_path / "sock")
        self.record = tmp_path / "record.jsonl"
        env = {"CAO_MOCK_RECORD": str(self.record), "CAO_MOCK_DELAY_MS": "50", **env}
        command = shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *AGENT_ARGV])
        # remain-on-exit lets the /exit test read the exit status of the dead pane.
        self.tmux(
            "new-session",
            "-d",
            "-s",
            "m",
            "-x",
            "220",
            "-y",
            "50",
            command,
            ";",
            "set-option",
            "-w",
            "-t",
            "m",
            "remain-on-exit",
            "on",
        )

    def tmux(self, *args: str, data: bytes | None = None) -> str:
        proc = subprocess.run(
            ["tmux", "-S", self.sock, "-f", "/dev/null", *args],
            input=data,
            capture_output=True,
            env=_agent_env(),
            timeout=10,
        )
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc.stdout.decode("utf-8", errors="replace")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=10)

    def screen(self) -> Screen:
        text = self.tmux("capture-pane", "-p", "-t", "m")
        x, y = self.tmux("display-message", "-p", "-t", "m", "#{cursor_x} #{cursor_y}").split()
        return Screen(lines=[line.rstrip() for line in text.split("\n")[:50]], cursor_row=int(y), cursor_col=int(x))

    def history(self) -> list[str]:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "m").split("\n")

    def paste(self, text: str | bytes, bracketed: bool = True) -> None:
        data = text.encode("utf-8") if isinstance(text, str) else text
        flags = ["-p"] if bracketed else []
        self.tmux("load-buffer", "-b", "t", "-", ";", "paste-buffer", *flags, "-d", "-b", "t", "-t", "m", data=data)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "m", *keys)

    def send(self, text: str) -> None:
        self.paste(text)
        self.keys("Enter")

    def wait(self, pred: Callable[[Screen], bool], timeout: float = 5.0, what: str = "") -> Screen:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if pred(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {what}; status {read_status(screen)}; screen:\n{screen.text}"
                )
            time.sleep(0.02)

    def wait_status(self, status: S, timeout: float = 5.0) -> Screen:
        return self.wait(lambda s: read_status(s).status == status, timeout, str(status))

    def wait_reply(self, expected: str, timeout: float = 5.0) -> None:
        """Completed with `expected` as the last reply (the previous turn may also be completed)."""
        self.wait(
            lambda s: read_status(s).status == S.COMPLETED and extract_reply(self.history()) == expected,
            timeout,
            f"reply {expected[:60]!r}",
        )

    def recorded(self) -> list[str]:
        return [json.loads(line) for line in self.record.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def pane(tmp_path: Path):
    p = Pane(tmp_path, CAO_MOCK_PROFILE="tester")
    try:
        p.wait_status(S.IDLE)
        yield p
    finally:
        p.close()


# --- real agent in tmux ---------------------------------------------------------------
@needs_tmux
def test_banner_then_idle(pane: Pane) -> None:
    screen = pane.screen()
    assert screen.lines[0] == "MockCli ready. (profile: tester)"
    assert screen.lines[1] == "❯"
    assert read_status(screen) == read_status(Screen(["MockCli ready. (profile: x)", "❯"]))
    assert extract_reply(pane.history()) is None


@needs_tmux
def test_turn_completes_and_reply_is_exact(pane: Pane) -> None:
    pane.send("hello")
    pane.wait_reply("MOCK: hello")
    assert pane.screen().lines[1:4] == ["❯ hello", "⏺ MOCK: hello", "❯"]
    # Typed text sits in the composer until Enter: idle, with text.
    pane.keys("draft")
    screen = pane.wait(lambda s: read_status(s).composer_has_text, what="composer text")
    assert read_status(screen).status == S.IDLE
    assert extract_reply(pane.history()) == "MOCK: hello"
    pane.keys("C-c")  # clears the composer while idle
    pane.wait(lambda s: read_status(s).status == S.COMPLETED, what="cleared composer")
    multi = "first line\nsecond: ❯ not a prompt\n⏺ not a reply\n\n✗ Error: not an error"
    pane.send(multi)
    pane.wait_reply("MOCK: " + multi)
    assert pane.recorded() == ["hello", multi]


@needs_tmux
def test_multiline_paste_recorded_byte_exact(pane: Pane) -> None:
    text = (
        "say \"hi\" and 'bye'\n$(rm -rf /) `whoami` $HOME \\n %s {}\n\tindented\ttabs\n"
        "ünïcödé 日本語 🎉 — “quotes”\n\n  last line"
    )
    pane.send(text)
    # tmux shows tabs as spaces; both reply prefixes are two columns wide.
    shown = "\n".join(("  " + line).expandtabs(8)[2:] for line in ("MOCK: " + text).split("\n"))
    pane.wait_reply(shown)
    assert pane.recorded() == [text]


@needs_tmux
def test_large_paste_summarised_and_recorded(pane: Pane) -> None:
    rows, size = [], 0
    while size < 100_000:
        rows.append(f'{len(rows):05d} "q" $(x) `y` ünï 日本 {"z" * 40}')
        size += len(rows[-1]) + 1
    text = "\n".join(rows)
    pane.paste(text)
    summary = f"❯ [Pasted text: {len(text)} chars, {len(rows)} lines]"
    pane.wait(lambda s: summary in s.lines, what="paste summary")
    pane.keys("Enter")
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    pane.wait_reply(f"MOCK: received {len(text)} chars, {len(rows)} lines, sha256 {digest}")
    assert pane.recorded() == [text]


@needs_tmux
def test_error_until_next_input(pane: Pane) -> None:
    pane.send("__mock_error__")
    screen = pane.wait_status(S.ERROR)
    assert read_status(screen).reason == "✗ Error: mock failure requested"
    pane.keys("x")
    screen = pane.wait(lambda s: read_status(s).composer_has_text, what="composer text")
    assert read_status(screen).status == S.ERROR
    pane.keys("BSpace", "again", "Enter")
    pane.wait_reply("MOCK: again")


@needs_tmux
def test_question_then_answer(pane: Pane) -> None:
    pane.send("__mock_ask__")
    screen = pane.wait_status(S.WAITING_USER_ANSWER)
    assert screen.last_nonblank() == ["answer>"] and "? Mock question: proceed with the change?" in screen.lines
    pane.keys("yes")
    pane.wait(lambda s: read_status(s).composer_has_text, what="typed answer")
    assert read_status(pane.screen()).status == S.WAITING_USER_ANSWER
    pane.keys("Enter")
    pane.wait_reply("MOCK: you answered yes")


@needs_tmux
def test_long_reply_extracted(pane: Pane) -> None:
    pane.send("__mock_long_30")
    pane.wait_reply("\n".join(f"MOCK: line {i} of 30" for i in range(1, 31)))


@needs_tmux
def test_sleep_is_processing_and_typeahead_is_kept(pane: Pane) -> None:
    pane.send("__mock_sleep_2")
    screen = pane.wait_status(S.PROCESSING)
    assert screen.last_nonblank()[0].endswith(" Thinking… (esc to interrupt)")
    # Typed while busy: hidden, shown after the reply; the Enter is ignored while busy. Had the
    # agent not been sleeping, the Enter would have submitted "next" as a turn of its own.
    pane.keys("next", "Enter")
    screen = pane.wait(lambda s: read_status(s).status != S.PROCESSING, timeout=10, what="end of sleep")
    assert read_status(screen).status == S.IDLE and read_status(screen).composer_has_text
    assert screen.last_nonblank(2) == ["⏺ MOCK: slept 2s", "❯ next"]
    assert extract_reply(pane.history()) == "MOCK: slept 2s"
    assert pane.recorded() == ["__mock_sleep_2"]


@needs_tmux
def test_interrupts_and_junk(pane: Pane) -> None:
    pane.send("__mock_sleep_30")
    pane.wait_status(S.PROCESSING)
    pane.keys("C-c")
    screen = pane.wait_status(S.IDLE)
    assert screen.last_nonblank(2) == ["Interrupted.", "❯"]
    pane.send("__mock_sleep_30")
    pane.wait_status(S.PROCESSING)
    pane.keys("Escape")
    pane.wait(lambda s: s.lines.count("Interrupted.") == 2 and read_status(s).status == S.IDLE, what="second interrupt")
    # Raw binary junk (not a bracketed paste) must not kill the agent; Ctrl-C clears it.
    junk = bytes(b for b in random.Random(7).randbytes(3000) if b not in b"\r\n\x03")
    pane.paste(junk, bracketed=False)
    pane.keys("Left", "F5", "C-c")
    pane.send("ping")
    pane.wait_reply("MOCK: ping")


@needs_tmux
def test_exit_command(pane: Pane) -> None:
    pane.send(PROVIDER.exit_command)
    pane.wait(lambda s: "Bye." in s.lines, what="Bye.")
    deadline = time.monotonic() + 5
    while (dead := pane.tmux("display-message", "-p", "-t", "m", "#{pane_dead}:#{pane_dead_status}").strip()) == "0:":
        assert time.monotonic() < deadline, "agent did not exit"
        time.sleep(0.02)
    # tmux 3.3 sometimes marks the pane dead before it has reaped the status.
    assert dead in ("1:0", "1:"), dead


# --- agent process without tmux -------------------------------------------------------------
def test_stdin_closed_exits() -> None:
    proc = subprocess.run(AGENT_ARGV, input=b"hi", capture_output=True, env=_agent_env(), timeout=10)
    assert proc.returncode == 0
    assert b"MockCli ready. (profile: mock)" in proc.stdout


def test_sigterm_restores_tty() -> None:
    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    proc = subprocess.Popen(AGENT_ARGV, stdin=slave, stdout=slave, stderr=slave, env=_agent_env())
    try:
        seen = b""
        deadline = time.monotonic() + 10
        while b"\xe2\x9d\xaf" not in seen:  # the prompt glyph
            assert time.monotonic() < deadline, seen
            seen += os.read(master, 4096)
        assert termios.tcgetattr(slave) != before  # raw mode while running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert termios.tcgetattr(slave) == before
        assert b"\x1b[?2004l" in os.read(master, 4096)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
        os.close(slave)


# --- pure parsers on hand-written screens ----------------------------------------------
BANNER = "MockCli ready. (profile: mock)"


def status(*rows: str) -> tuple[S, str, bool]:
    r = read_status(Screen(lines=list(rows) + ["", ""]))
    return r.status, r.reason, r.composer_has_text


def test_read_status_basic_states() -> None:
    assert status() == (S.UNKNOWN, "", False)
    assert status(BANNER) == (S.UNKNOWN, "", False)
    assert status(BANNER, "❯") == (S.IDLE, "", False)
    assert status(BANNER, "❯ draft") == (S.IDLE, "", True)
    assert status(BANNER, "❯", "  second line") == (S.IDLE, "", True)
    assert status(BANNER, "❯ hi", "✻ Thinking… (esc to interrupt)") == (S.PROCESSING, "", False)
    assert status(BANNER, "❯ hi", "· Thinking… (esc to interrupt)") == (S.PROCESSING, "", False)
    assert status(BANNER, "❯ hi", "⏺ MOCK: hi") == (S.PROCESSING, "", False)  # prompt not back yet
    assert status(BANNER, "❯ hi", "⏺ MOCK: hi", "❯") == (S.COMPLETED, "", False)
    assert status(BANNER, "❯ hi", "⏺ MOCK: hi", "❯", "❯") == (S.COMPLETED, "", False)  # empty Enter
    assert status(BANNER, "❯ hi", "⏺ MOCK: hi", "❯ more") == (S.IDLE, "", True)
    assert status(BANNER, "❯ hi", "Interrupted.", "❯") == (S.IDLE, "", False)
    assert status(BANNER, "❯ /exit", "Bye.")[0] == S.UNKNOWN
    err = "✗ Error: mock failure requested"
    assert status(BANNER, "❯ __mock_error__", err, "❯") == (S.ERROR, err, False)
    assert status(BANNER, "❯ __mock_error__", err, "❯ typed") == (S.ERROR, err, True)
    assert status(BANNER, "❯ __mock_error__", err, "❯ next", "⏺ MOCK: next", "❯") == (S.COMPLETED, "", False)


def test_read_status_question() -> None:
    q = [
        "❯ __mock_ask__",
        "? Mock question: proceed with the change?",
        "  1. Yes",
        "  2. No",
        "  (type an answer and press Enter)",
    ]
    assert status(BANNER, *q, "answer>") == (S.WAITING_USER_ANSWER, "", False)
    assert status(BANNER, *q, "answer> y") == (S.WAITING_USER_ANSWER, "", True)
    assert status(BANNER, *q, "answer> y", "⏺ MOCK: you answered y", "❯") == (S.COMPLETED, "", False)
    assert status(BANNER, *q, "answer>", "Interrupted.", "❯") == (S.IDLE, "", False)


def test_read_status_not_fooled_by_quoted_markers() -> None:
    # The user quoted a whole transcript; in the reply every quoted line is indented.
    reply = [
        "⏺ MOCK: look:",
        "  ❯ fake prompt",
        "  ✻ Thinking… (esc to interrupt)",
        "  ✗ Error: fake",
        "  answer>",
        "  ⏺ fake reply",
    ]
    composer = [
        "❯ look:",
        "  ❯ fake prompt",
        "  ✻ Thinking… (esc to interrupt)",
        "  ✗ Error: fake",
        "  answer>",
        "  ⏺ fake reply",
    ]
    assert status(BANNER, *composer) == (S.IDLE, "", True)
    assert status(BANNER, *composer, "✻ Thinking… (esc to interrupt)")[0] == S.PROCESSING
    assert status(BANNER, *composer, *reply, "❯") == (S.COMPLETED, "", False)
    # Typed text that looks like the indicator is still composer text.
    assert status(BANNER, "❯ Thinking… (esc to interrupt)") == (S.IDLE, "", True)
    # A reply row soft-wrapped by the terminal may start with anything; one such row
    # must not change the verdict (two crafted rows in a row can: a documented limit).
    head = ["❯ msg", "⏺ MOCK: " + "a" * 212]
    for fake in (["❯ x", "  b"], ["❯ x"], ["✗ Error: y"], ["Interrupted."], ["answer> z"]):
        assert status(BANNER, *head, *fake, "❯") == (S.COMPLETED, "", False), fake


def test_read_status_scrolled_long_reply() -> None:
    rows = [f"  MOCK: line {i} of 100" for i in range(52, 101)] + ["❯"]
    assert status(*rows) == (S.COMPLETED, "", False)
    assert status(*rows[:-1])[0] == S.PROCESSING  # prompt not drawn yet


def test_extract_reply() -> None:
    assert extract_reply([]) is None
    assert extract_reply([BANNER, "❯ ", "", ""]) is None
    assert extract_reply([BANNER, "❯ hello", "⏺ MOCK: hello", "❯ ", "", ""]) == "MOCK: hello"
    # tmux -J keeps trailing spaces; a blank reply line is "  ".
    hist = [BANNER, "❯ a", "  ", "  b", "⏺ MOCK: a   ", "  ", "  b", "❯ "]
    assert extract_reply(hist) == "MOCK: a\n\nb"
    # The last turn failed or is still running: no reply for it.
    first = [BANNER, "❯ hi", "⏺ MOCK: hi", "❯ "]
    assert extract_reply(first + ["❯ __mock_error__", "✗ Error: mock failure requested", "❯ "]) is None
    assert extract_reply(first + ["❯ next", "✻ Thinking… (esc to interrupt)", ""]) is None
    # Unsubmitted composer text at the bottom does not hide the last reply.
    assert extract_reply(first + ["❯ draft", "  more", "", ""]) == "MOCK: hi"
    ask = [
        "❯ __mock_ask__",
        "? Mock question: proceed with the change?",
        "  1. Yes",
        "  2. No",
        "  (type an answer and press Enter)",
        "answer> no",
        "⏺ MOCK: you answered no",
        "❯ ",
    ]
    assert extract_reply(first + ask) == "MOCK: you answered no"
    # Quoted markers stay inside the reply.
    quoted = ["❯ x", "  ❯ y", "  ⏺ z", "⏺ MOCK: x", "  ❯ y", "  ⏺ z", "❯ "]
    assert extract_reply(first + quoted) == "MOCK: x\n❯ y\n⏺ z"
    # Reply still at the end of the history (no prompt yet): screen blanks are not reply lines.
    assert extract_reply([BANNER, "❯ q", "⏺ MOCK: q", "  r", "", ""]) == "MOCK: q\nr"


def test_build_launch(tmp_path: Path) -> None:
    ctx = LaunchContext(
        terminal_id="abcd1234",
        profile_name="dev",
        system_prompt="",
        working_directory="/",
        home_dir=tmp_path,
        profile_extra={"mock": {"delay_ms": 200, "record": "/tmp/r", "startup_ms": 5}},
    )
    launch = build_launch(ctx)
    assert launch.argv == AGENT_ARGV
    assert launch.env == {
        "CAO_MOCK_PROFILE": "dev",
        "CAO_MOCK_DELAY_MS": "200",
        "CAO_MOCK_RECORD": "/tmp/r",
        "CAO_MOCK_STARTUP_MS": "5",
    }
    assert PROVIDER.name == "mock_cli" and PROVIDER.startup_timeout == 15.0
    assert not PROVIDER.accepts_input_while_busy
