"""The tmux adapter against a real tmux server of its own: replies stay matched to their
commands after failures, a desynced or stalled control channel is detected and
reconnected, a dead pane never receives a paste, and nothing a caller supplies is read
as tmux syntax."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from cli_agent_orchestrator.backends.tmux import TmuxBackend
from cli_agent_orchestrator.bus import EventBus
from cli_agent_orchestrator.errors import AgentExited
from cli_agent_orchestrator.events import BackendLost, TerminalOutput


@pytest.fixture
def tmux_env(tmp_path: Path, monkeypatch):
    """A private TMUX_TMPDIR: the backend's server lives and dies inside the test."""
    tmpdir = tmp_path / "tmux"
    tmpdir.mkdir()
    monkeypatch.setenv("TMUX_TMPDIR", str(tmpdir))
    monkeypatch.delenv("TMUX", raising=False)
    socket = f"cao-chan-{os.getpid()}"
    yield socket
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def _backend(socket: str, **kwargs) -> tuple[TmuxBackend, EventBus]:
    bus = EventBus()
    bus.start()
    backend = TmuxBackend(socket, bus, **kwargs)
    await backend.start()
    return backend, bus


def test_a_failing_command_in_a_list_leaves_every_later_reply_with_its_caller(tmux_env):
    async def scenario():
        backend, _ = await _backend(tmux_env)
        try:
            # tmux stops this list at the first command and sends ONE %error block for it.
            failed = await backend.run_reply("new-window", "-t", "nosuch:", ";", "display-message", "-p", "x")
            assert not failed.ok and "nosuch" in failed.error
            also = await backend.run_reply(
                "display-message", "-p", "a", ";", "new-window", "-t", "nope:", ";", "display-message", "-p", "never"
            )
            assert not also.ok and also.blocks == [["a"]]
            # The next hundred replies, sent concurrently, each reach the command that asked.
            replies = await asyncio.gather(
                *(backend.run_reply("display-message", "-p", f"reply-{i}") for i in range(100))
            )
            assert [r.text for r in replies] == [f"reply-{i}" for i in range(100)]
            # if-shell adds a block for the command it runs: still matched by the frame.
            both = await backend.run_reply(
                "if-shell", "-F", "1", "display-message -p inner", "", ";", "display-message", "-p", "outer"
            )
            assert both.ok and both.text.split() == ["inner", "outer"]
            assert backend._source.alive
        finally:
            await backend.stop()

    run(scenario())


def test_a_reply_nobody_asked_for_is_a_desync_and_the_channel_reconnects(tmux_env, tmp_path):
    async def scenario():
        backend, bus = await _backend(tmux_env)
        stream = bus.open_stream("test", "terminal.#")
        try:
            ref = await backend.create_window(
                "0123abcd", "cao-chan", "w-0001", str(tmp_path), "exec cat", new_session=True
            )
            first = backend._source
            # A command written around the framing: its reply belongs to nobody.
            first.proc.stdin.write(b"display-message -p rogue\n")
            await _until(lambda: backend._source is not first and backend._source is not None and backend._source.alive)
            assert (await backend.run_reply("display-message", "-p", "after")).text == "after"
            # The pane is still watched through the new client: its output reaches the bus.
            await backend.paste(ref.window_id, "still-read\n")
            seen = b""
            while b"still-read" not in seen:
                event = await bus.next_event(stream, 10)
                assert event is not None, "output of the re-watched pane never arrived"
                if isinstance(event, TerminalOutput):
                    seen += event.data
            assert backend.health() == {"status": "ok"}
        finally:
            await backend.stop()

    run(scenario())


def test_a_stalled_channel_is_detected_and_replaced(tmux_env):
    async def scenario():
        backend, _ = await _backend(tmux_env, stall_s=1.0)
        server = int((await backend.run("display-message", "-p", "#{pid}")).strip())
        try:
            first = backend._source
            # tmux writes a control client's replies itself: stopping the server stalls them.
            os.kill(server, signal.SIGSTOP)
            await _until(lambda: "T (stopped)" in Path(f"/proc/{server}/status").read_text())
            stalled = await backend.run_reply("display-message", "-p", "lost")
            assert not stalled.ok and "did not answer" in stalled.error
            os.kill(server, signal.SIGCONT)
            await _until(
                lambda: backend._source is not first and backend._source is not None and backend._source.alive,
                timeout=30,
            )
            assert (await backend.run_reply("display-message", "-p", "again")).text == "again"
        finally:
            os.kill(server, signal.SIGCONT)
            await backend.stop()

    run(scenario())


def test_a_killed_tmux_server_is_reported_and_a_new_one_starts_on_demand(tmux_env, tmp_path):
    async def scenario():
        backend, bus = await _backend(tmux_env)
        lost = bus.open_stream("lost", "backend.#")
        try:
            await backend.create_window("0123abcd", "cao-chan", "w-0001", str(tmp_path), "exec cat", True)
            pid = int((await backend.run("display-message", "-p", "#{pid}")).strip())
            os.kill(pid, signal.SIGKILL)
            event = await bus.next_event(lost, 10)
            assert isinstance(event, BackendLost) and "ended" in event.reason
            assert backend.health()["status"] == "down"
            await backend.create_window("4567cdef", "cao-chan2", "w-0002", str(tmp_path), "exec cat", True)
            assert backend.health() == {"status": "ok"}
        finally:
            await backend.stop()

    run(scenario())


def test_paste_and_keys_never_reach_a_dead_pane_and_tmux_survives(tmux_env, tmp_path):
    async def scenario():
        backend, _ = await _backend(tmux_env)
        try:
            live = await backend.create_window("0123abcd", "cao-chan", "w-0001", str(tmp_path), "exec cat", True)
            dead = await backend.create_window("4567cdef", "cao-chan", "w-0002", str(tmp_path), "exit 3", False)
            await _until_async(lambda: _dead(backend, dead.window_id))
            for _ in range(3):  # tmux 3.3a dies on the first paste into a dead pane
                with pytest.raises(AgentExited):
                    await backend.paste(dead.window_id, "/exit")
                with pytest.raises(AgentExited):
                    await backend.send_keys(dead.window_id, ["Enter"])
            await backend.paste(live.window_id, "alive\n")
            assert await backend.server_running()
            assert "cao-" not in await backend.run("list-buffers", "-F", "#{buffer_name}")  # no buffer left
            with pytest.raises(AgentExited):
                await backend.paste("@999", "nowhere")
        finally:
            await backend.stop()

    run(scenario())


def test_names_and_directories_are_literal_for_tmux(tmux_env, tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("CAO_TEST_MARKER", str(marker))  # the tmux server's shell would expand it

    async def scenario():
        backend, _ = await _backend(tmux_env)
        workdir = tmp_path / "d#(touch $CAO_TEST_MARKER)#{pane_id}"
        workdir.mkdir()
        try:
            ref = await backend.create_window("0123abcd", "cao-chan", "w-0001", str(workdir), "exec cat", True)
            await _until_async(lambda: _path_is(backend, ref.window_id, str(workdir)))
            assert not marker.exists()
        finally:
            await backend.stop()

    run(scenario())


async def _dead(backend: TmuxBackend, window_id: str) -> bool:
    return any(w.window_id == window_id and w.dead for w in await backend.list_windows())


async def _path_is(backend: TmuxBackend, window_id: str, path: str) -> bool:
    return await backend.current_path(window_id) == path


async def _until(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def _until_async(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


def test_text_placed_on_a_control_line_is_data_for_any_text(tmux_env, tmp_path, monkeypatch):
    """A paste short enough for the control client's command line goes there, escaped
    (tmux_commands.escaped): for any text, the buffer tmux fills holds exactly that text, and
    nothing of it is read as tmux syntax ($VAR, ~, #{format}, ;, quotes, backslashes)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from cli_agent_orchestrator.backends.tmux_commands import escaped

    marker = tmp_path / "pwned"
    monkeypatch.setenv("CAO_TEST_MARKER", str(marker))
    hostile = st.sampled_from(
        [
            "-0",
            "-b x",
            "--",
            "$CAO_TEST_MARKER",
            "${HOME}",
            "~",
            "#{pane_id}",
            "#(touch $CAO_TEST_MARKER)",
            ";",
            "\\;",
            '"',
            "'",
            "\\",
            "\\n",
            "\\101",
            "\n",
            "\t",
            "%",
            "#",
            "{",
            "}",
            "\u241b[201~",
            "ü",
            "日本",
            "😀",
            " ",
        ]
    )
    texts = st.lists(st.one_of(hostile, st.text(min_size=1, max_size=8)), min_size=1, max_size=20).map("".join)

    async def scenario(samples: list[str]) -> list[str]:
        backend, _ = await _backend(tmux_env)
        try:
            assert backend.parses_commands
            got = []
            for i, text in enumerate(samples):
                reply = await backend.run_reply("set-buffer", "-b", f"t{i}", "--", escaped(text))
                assert reply.ok, reply.error
                saved = tmp_path / f"buffer-{i}"
                await backend.run("save-buffer", "-b", f"t{i}", str(saved))
                await backend.run("delete-buffer", "-b", f"t{i}")
                got.append(saved.read_bytes().decode("utf-8"))
                saved.unlink()
            return got
        finally:
            await backend.stop()

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(texts.filter(lambda t: "\0" not in t), min_size=5, max_size=5))
    def check(samples):
        got = run(scenario(samples))
        assert got == samples
        assert not marker.exists()

    check()


def test_a_pasted_message_reaches_the_pane_exactly_by_either_path(tmux_env, tmp_path):
    """Short text goes on the control line, long text through load-buffer's stdin: the pane
    gets the same bytes either way (a bracketed paste into `cat -v`)."""
    from cli_agent_orchestrator.backends.tmux_input import MAX_LINE_TEXT

    out = tmp_path / "out"

    async def scenario():
        backend, _ = await _backend(tmux_env)
        try:
            ref = await backend.create_window(
                "0123abcd", "cao-chan", "w-0001", str(tmp_path), f"exec cat > {out}", True
            )
            short = "-b x -- a $HOME ~ #{pane_id} ; 'q' \"d\" \\ ünï\tend"  # a leading "-" is no flag
            long = ("y" * 99 + "\n") * (MAX_LINE_TEXT // 100 + 1)  # rows: a tty line holds 4 KB
            assert len(short) <= MAX_LINE_TEXT < len(long)
            await backend.paste(ref.window_id, short + "\n")
            await backend.paste(ref.window_id, long)
            expected = short + "\n" + long
            await _until(lambda: out.exists() and len(out.read_bytes()) >= len(expected.encode()))
            assert out.read_text() == expected
            assert "cao-" not in await backend.run("list-buffers", "-F", "#{buffer_name}")
        finally:
            await backend.stop()

    run(scenario())


def test_a_cancelled_client_process_is_ended_with_its_caller():
    """A caller cancelled while its tmux client runs (a stopped backend, a dropped request)
    takes the client with it: no process left running with pipes that outlive the loop."""
    import psutil

    from cli_agent_orchestrator.backends.tmux_process import run_client

    async def scenario() -> list[psutil.Process]:
        call = asyncio.get_running_loop().create_task(run_client(["sleep"], ("30",)))
        await asyncio.sleep(0.3)
        started = [p for p in psutil.Process().children() if p.name() == "sleep"]
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return started

    started = asyncio.run(scenario())
    assert len(started) == 1
    assert not started[0].is_running()  # killed and reaped, not a zombie


@pytest.mark.parametrize("source", ["control", "pipe-pane"])
def test_a_screen_snapshot_carries_the_pane_s_title_as_the_program_set_it(tmux_env, tmp_path, source):
    """Some CLIs say their status in the title (Gemini): a snapshot taken after a flood, whose
    output was skipped, must still tell it. The title is data: tmux formats and command syntax
    in it come back as written."""
    from cli_agent_orchestrator.events import ScreenSnapshot

    title = "✦  Working… #{pane_id} ; kill-server $(x) 'q'"
    script = tmp_path / "titled.sh"
    script.write_text(f"printf '\\033]0;%s\\007' {shlex.quote(title)}\necho drawn\nexec sleep 60\n")

    async def scenario():
        fifo = tmp_path / "fifo"
        fifo.mkdir()
        backend, bus = await _backend(tmux_env, output_source=source, fifo_dir=fifo)
        stream = bus.open_stream("test", "terminal.0123abcd.snapshot")
        try:
            await backend.create_window("0123abcd", "cao-chan", "w-0001", str(tmp_path), f"exec sh {script}", True)
            await _until(
                lambda: (
                    "drawn"
                    in subprocess.run(
                        ["tmux", "-L", tmux_env, "capture-pane", "-p", "-t", "cao-chan"], capture_output=True, text=True
                    ).stdout
                )
            )
            assert backend.request_snapshot("0123abcd")
            event = await bus.next_event(stream, 10)
            assert isinstance(event, ScreenSnapshot), event
            assert event.title == title
            assert "drawn" in event.text
        finally:
            await backend.stop()

    run(scenario())
