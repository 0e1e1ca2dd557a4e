"""The status monitor alone decides what a CLI hook means, once, keeping per-terminal hook
memory itself (providers stay pure functions). Real bus, real SQLite store, the real
provider modules; no tmux needed because hooks carry the status."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from cli_agent_orchestrator.bus import EventBus, Subscription
from cli_agent_orchestrator.events import HookReceived, StatusChanged
from cli_agent_orchestrator.models import Terminal, TerminalStatus
from cli_agent_orchestrator.providers import qwen_cli
from cli_agent_orchestrator.providers.base import Provider
from cli_agent_orchestrator.services.status.monitor import StatusMonitor
from cli_agent_orchestrator.store import Store
from cli_agent_orchestrator.tasks import TaskGroup

TID = "0123abcd"


@asynccontextmanager
async def _monitored(
    tmp_path: Path, provider: Provider, monitor_out: list[StatusMonitor] | None = None, **watch
) -> AsyncIterator[tuple[EventBus, Subscription]]:
    """A status monitor on a real bus and store watching terminal TID; yields the bus and a
    stream of the terminal's status events (and puts the monitor in `monitor_out`)."""
    bus = EventBus()
    bus.start()
    store = Store(tmp_path / "cao.db")
    store.add_terminal(Terminal(TID, "cao-t", "w-0001", provider.name, "dev", str(tmp_path)), None)
    tasks = TaskGroup()
    monitor = StatusMonitor(bus, store, tasks)
    if monitor_out is not None:
        monitor_out.append(monitor)
    bus.subscribe("status-monitor", "terminal.#", monitor.handle)
    stream = bus.open_stream("test", f"terminal.{TID}.status")
    monitor.watch(TID, provider, **watch)
    try:
        yield bus, stream
    finally:
        await monitor.stop()
        await tasks.close()
        await bus.stop()
        store.close()


async def _statuses_after(tmp_path: Path, hooks: list[tuple[str, dict]]) -> list[TerminalStatus]:
    async with _monitored(tmp_path, qwen_cli.PROVIDER) as (bus, stream):
        # A last UserPromptSubmit closes the sequence: once its "processing" is out, every hook
        # before it has been applied, in order.
        for event, payload in [*hooks, ("UserPromptSubmit", {"session_id": "s"})]:
            bus.publish(HookReceived(TID, event, payload))
        seen: list[TerminalStatus] = []
        while not seen or seen[-1] != TerminalStatus.PROCESSING or len(seen) == 1:
            event = await bus.next_event(stream, 5)
            assert event is not None, f"statuses so far: {seen}"
            if isinstance(event, StatusChanged):
                seen.append(event.status)
        return seen


def test_a_failed_qwen_turn_stays_an_error_after_the_idle_notice(tmp_path: Path):
    """Qwen sends `Notification(idle_prompt)` right after `StopFailure`. When the route and the
    monitor both asked the provider (which kept a module-level set), the second answer turned
    the failed turn into `completed`."""
    seen = asyncio.run(
        _statuses_after(
            tmp_path,
            [
                ("UserPromptSubmit", {"session_id": "s"}),
                ("StopFailure", {"session_id": "s", "error_details": "400 scripted failure"}),
                ("Notification", {"session_id": "s", "notification_type": "idle_prompt"}),
            ],
        )
    )
    assert seen == [TerminalStatus.PROCESSING, TerminalStatus.ERROR, TerminalStatus.PROCESSING]


def test_the_idle_notice_of_a_good_qwen_turn_completes_it(tmp_path: Path):
    seen = asyncio.run(
        _statuses_after(
            tmp_path,
            [
                ("UserPromptSubmit", {"session_id": "s"}),
                ("Notification", {"session_id": "s", "notification_type": "idle_prompt"}),
            ],
        )
    )
    assert seen == [TerminalStatus.PROCESSING, TerminalStatus.COMPLETED, TerminalStatus.PROCESSING]


def test_a_turn_end_waits_for_the_screen_and_a_stale_busy_screen_never_starts_the_next_turn(tmp_path: Path):
    """Claude Code's Stop comes before it draws the turn's end, and its next message, given the
    moment `completed` was out, was dropped while the last turn's spinner still showed: that
    busy screen was taken for the new turn's start, so the dropped Enter was never pressed
    again. Now `completed` waits for a screen that is not busy, and after input a busy screen
    that was already up (or shows the text still in the composer) does not start the turn:
    the CLI's own start hook does."""
    from screen_fixtures import ScreenFixtures

    from cli_agent_orchestrator.events import InputSubmitted, ScreenSnapshot
    from cli_agent_orchestrator.providers import claude_code

    screens = ScreenFixtures("claude_code", rows=50)

    def snapshot(state: str) -> ScreenSnapshot:
        return ScreenSnapshot(TID, "\n".join(screens.lines(state)), 0, 0)

    async def scenario() -> None:
        async with _monitored(tmp_path, claude_code.PROVIDER, initial=TerminalStatus.IDLE) as (bus, stream):
            await steps(bus, stream)

    async def steps(bus: EventBus, stream: Subscription) -> None:
        seen: list[tuple[TerminalStatus, str, int]] = []

        async def settle() -> None:
            while (event := await bus.next_event(stream, 0.3)) is not None:
                if isinstance(event, StatusChanged):
                    seen.append((event.status, event.source, event.turn))

        stop = {"session_id": "s", "last_assistant_message": "the answer"}
        bus.publish(InputSubmitted(TID, 1))
        bus.publish(snapshot("working_bypass"))
        bus.publish(HookReceived(TID, "UserPromptSubmit", {"session_id": "s"}))
        bus.publish(HookReceived(TID, "Stop", stop))  # the spinner is still up
        await settle()
        assert seen[-1][0] == TerminalStatus.PROCESSING, seen  # held while the screen reads busy
        bus.publish(snapshot("done_bypass"))
        await settle()
        assert seen[-1] == (TerminalStatus.COMPLETED, "hook:Stop", 1), seen

        # Done by its hook, but the spinner is drawn again as the next input comes in.
        bus.publish(HookReceived(TID, "UserPromptSubmit", {"session_id": "s"}))  # a queued message
        bus.publish(snapshot("working_bypass"))
        bus.publish(HookReceived(TID, "Stop", stop))
        await settle()
        count = len(seen)
        bus.publish(InputSubmitted(TID, 2))  # the held end is moot; the busy screen is the last turn's
        bus.publish(snapshot("queued"))  # still busy, and the screen changed: not turn 2's start
        await settle()
        assert all(turn < 2 for _, _, turn in seen[count:]), seen
        bus.publish(HookReceived(TID, "UserPromptSubmit", {"session_id": "s"}))
        await settle()
        assert seen[-1] == (TerminalStatus.PROCESSING, "hook:UserPromptSubmit", 2), seen

    asyncio.run(scenario())


def test_gemini_s_title_carries_its_turns_and_the_screen_says_how_one_ended(tmp_path: Path):
    """Gemini sets its title to Working/Ready as its state changes (no hook: each costs Gemini
    40–110 ms a turn). The title is read from the output stream in order with the screen, also
    when split across reads or found in a snapshot after a flood; a Ready while the screen still
    reads busy waits for it; an error or a cancelled turn on the screen decides how a turn ended."""
    from screen_fixtures import ScreenFixtures

    from cli_agent_orchestrator.events import InputSubmitted, ScreenSnapshot, TerminalOutput
    from cli_agent_orchestrator.providers import gemini_cli

    screens = ScreenFixtures("gemini_cli", rows=50)
    ready, working = "◇  Ready (work)".ljust(80), "✦  Working… (work)".ljust(80)

    def snapshot(state: str, title: str | None = None) -> ScreenSnapshot:
        return ScreenSnapshot(TID, "\n".join(screens.lines(state)), 0, 0, title)

    def title(text: str) -> bytes:
        return b"\x1b]0;" + text.encode() + b"\x07"

    async def scenario() -> list[tuple[TerminalStatus, str, int, str]]:
        async with _monitored(tmp_path, gemini_cli.PROVIDER, initial=TerminalStatus.IDLE) as (bus, stream):
            seen: list[tuple[TerminalStatus, str, int, str]] = []

            async def settle() -> list[tuple[TerminalStatus, str, int, str]]:
                while (event := await bus.next_event(stream, 0.3)) is not None:
                    if isinstance(event, StatusChanged):
                        seen.append((event.status, event.source, event.turn, event.reason))
                return seen

            bus.publish(snapshot("idle_yolo"))
            bus.publish(TerminalOutput(TID, title(ready)))  # start-up: the screen tells when it is ready
            assert await settle() == [], seen

            # Turn 1: the title, split across two reads, starts it; Ready while the spinner is
            # still drawn waits for the answer's draw.
            bus.publish(InputSubmitted(TID, 1))
            data = title(working)
            bus.publish(TerminalOutput(TID, data[:6]))
            bus.publish(TerminalOutput(TID, data[6:]))
            await settle()
            assert seen[-1] == (TerminalStatus.PROCESSING, "title", 1, ""), seen
            bus.publish(snapshot("working"))
            bus.publish(TerminalOutput(TID, title(ready)))
            await settle()
            assert seen[-1][0] == TerminalStatus.PROCESSING, seen
            bus.publish(snapshot("done"))
            await settle()
            assert seen[-1] == (TerminalStatus.COMPLETED, "title", 1, ""), seen

            # Turn 2 fails: Ready, and the screen shows the error.
            bus.publish(InputSubmitted(TID, 2))
            bus.publish(TerminalOutput(TID, title(working)))
            bus.publish(snapshot("error"))
            bus.publish(TerminalOutput(TID, title(ready)))
            await settle()
            assert seen[-1][:3] == (TerminalStatus.ERROR, "screen", 2), seen

            # Turn 3 is cancelled (Esc): Ready, and the screen says so.
            bus.publish(InputSubmitted(TID, 3))
            bus.publish(TerminalOutput(TID, title(working)))
            bus.publish(snapshot("cancelled"))
            bus.publish(TerminalOutput(TID, title(ready)))
            await settle()
            assert seen[-1] == (TerminalStatus.IDLE, "screen", 3, "the request was cancelled"), seen

            # Turn 4: its output was skipped (a flood); the snapshot's title (tmux's) tells.
            bus.publish(InputSubmitted(TID, 4))
            bus.publish(snapshot("working", working))
            await settle()
            assert seen[-1] == (TerminalStatus.PROCESSING, "title", 4, ""), seen
            bus.publish(snapshot("done", ready))
            await settle()
            assert seen[-1] == (TerminalStatus.COMPLETED, "title", 4, ""), seen
            return seen

    asyncio.run(scenario())


def test_a_snapshot_after_skipped_output_is_read_whole_even_when_the_skip_cut_a_sequence(tmp_path: Path):
    """Output skipped in a flood can end in the middle of an escape sequence (here a title, which
    Gemini writes after each state change): the emulator's parser, left inside it, took the
    snapshot that replaced the output for the title's text, and the screen read blank."""
    import pyte

    from cli_agent_orchestrator.providers import gemini_cli
    from cli_agent_orchestrator.services.status.screen import EmulatedScreen
    from cli_agent_orchestrator.services.status.watched import FLOOD_BYTES, WatchedTerminal

    async def scenario() -> None:
        screen = EmulatedScreen(80, 5)
        asked: list[str] = []
        term = WatchedTerminal(
            "t1", gemini_cli.PROVIDER, screen, pyte.ByteStream(screen), lambda tid: asked.append(tid) or True
        )
        await term.feed_output(b"before\r\n\x1b]0;\xe2\x9c\xa6  Work")  # emulated: the parser is inside the title
        term.queued_output = FLOOD_BYTES  # falling behind: the rest of the title and more are skipped
        await term.feed_output(b"ing\xe2\x80\xa6 (work)\x07" + b"x" * 100)
        assert term.flooding and asked == ["t1"]
        term.queued_output = 0
        term.apply_snapshot("the screen as tmux has it\nsecond row", (10, 1), "✦  Working… (work)")
        assert screen.rows()[:2] == ["the screen as tmux has it", "second row"]
        assert screen.take_titles() == ["✦  Working… (work)"]  # the cut one never completed
        await term.feed_output(b", then more")  # emulated again, from a clean parser
        assert screen.rows()[1] == "second row, then more"

    asyncio.run(scenario())


def test_a_held_ready_reading_is_dropped_when_a_dialog_follows_before_the_tools_are_listed(tmp_path: Path):
    """An agent is ready only once its CLI has listed cao's tools, so an early `idle` is held.
    A dialog read after it (a start-up question) outdates it: when the tools are listed, the
    held `idle` must not be forced out over the dialog (once seen with Codex's trust dialog)."""

    async def scenario() -> list[TerminalStatus]:
        monitors: list[StatusMonitor] = []
        async with _monitored(tmp_path, qwen_cli.PROVIDER, monitors, awaiting_tools=True) as (bus, stream):
            monitor_events: list[TerminalStatus] = []
            monitor = monitors[0]
            await monitor.set_external(TID, TerminalStatus.IDLE, "screen")
            await monitor.set_external(TID, TerminalStatus.WAITING_USER_ANSWER, "screen", "a dialog")
            for method in qwen_cli.PROVIDER.mcp_ready_after:
                await monitor.on_mcp_listed(TID, method)
            await monitor.set_external(TID, TerminalStatus.PROCESSING, "hook")  # an end marker
            while not monitor_events or monitor_events[-1] != TerminalStatus.PROCESSING:
                event = await bus.next_event(stream, 5)
                assert event is not None, f"statuses so far: {monitor_events}"
                if isinstance(event, StatusChanged):
                    monitor_events.append(event.status)
            return monitor_events

    seen = asyncio.run(scenario())
    assert TerminalStatus.IDLE not in seen, seen
    assert seen[-2:] == [TerminalStatus.WAITING_USER_ANSWER, TerminalStatus.PROCESSING], seen


def test_a_frame_caught_mid_redraw_never_reads_as_an_emptied_composer(tmp_path: Path):
    """Gemini erases its whole frame before drawing the next. Recorded under load (a full run of
    the real-CLI tests): the paste's frame, then the frame of an Enter read as a newline, handed
    over in two reads, erase and redraw. Between them the screen shows no composer at all; read
    as an empty one, it told the input service the Enter was taken, and the message stayed in
    Gemini's composer with nobody pressing Enter again."""
    from cli_agent_orchestrator.events import ComposerChanged, TerminalOutput
    from cli_agent_orchestrator.providers import gemini_cli

    data = (Path(__file__).parent / "fixtures" / "streams" / "gemini_cli" / "enter_as_newline.log").read_bytes()
    pasted_end = data.rindex(b"\x1b[4A\x1b[19G") + len(b"\x1b[4A\x1b[19G")  # the cursor put after the text
    redraw = data.index(b"\r\n\r\n\r\n\xe2\x94\x80", pasted_end)  # the newline frame's rows, after its erase

    async def scenario() -> list[tuple[bool, int]]:
        async with _monitored(tmp_path, gemini_cli.PROVIDER, initial=TerminalStatus.IDLE) as (bus, _):
            composer = bus.open_stream("composer", f"terminal.{TID}.composer")

            async def settle() -> list[tuple[bool, int]]:
                seen = []
                while (event := await bus.next_event(composer, 0.3)) is not None:
                    assert isinstance(event, ComposerChanged)
                    seen.append((event.has_text, event.rows))
                return seen

            bus.publish(TerminalOutput(TID, data[:pasted_end]))
            assert (await settle())[-1] == (True, 2)  # the text, and the blank row above the footer
            bus.publish(TerminalOutput(TID, data[pasted_end:redraw]))
            mid = await settle()
            bus.publish(TerminalOutput(TID, data[redraw:]))
            return mid + await settle()

    assert asyncio.run(scenario()) == [(True, 3)]  # one row more: the newline, the text still there


def test_a_dialog_caught_mid_redraw_is_still_answered_with_its_keys(tmp_path: Path):
    """Hermes redraws its approval dialog (erase below, then the box again). Recorded under load:
    an answer typed between the erase and the box found no menu on the latest screen, went in as
    text, and its Enter picked the dialog's default "Allow once" for a "no". The view keeps the
    last screen that read as something known: the dialog is answered from it."""
    import pyte

    from cli_agent_orchestrator.events import ScreenSnapshot, TerminalOutput
    from cli_agent_orchestrator.providers import hermes
    from cli_agent_orchestrator.services.status.screen import EmulatedScreen, render
    from cli_agent_orchestrator.services.status.view import TerminalView

    data = (Path(__file__).parent / "fixtures" / "streams" / "hermes" / "dialog_redrawn.log").read_bytes()
    box = data.rindex("⚠️  Dangerous Command".encode())
    erase = data.rindex(b"\x1b[17A\x1b[J", 0, box)  # the first draw of the dialog erased, the second to come
    screen = EmulatedScreen(220, 50)
    pyte.ByteStream(screen).feed(data[:erase])
    drawn = ("\n".join(render(screen).lines), screen.cursor.x, screen.cursor.y)

    async def scenario() -> None:
        monitors: list[StatusMonitor] = []
        async with _monitored(tmp_path, hermes.PROVIDER, monitors, initial=TerminalStatus.IDLE) as (bus, _):

            async def view_when(check) -> TerminalView:
                """The monitor's view once `check` holds (the output is read in the monitor's own task)."""
                for _ in range(500):
                    view = monitors[0].view(TID)
                    if view is not None and check(view):
                        return view
                    await asyncio.sleep(0.01)
                raise AssertionError(f"not within 5 s: {monitors[0].view(TID)}")

            bus.publish(ScreenSnapshot(TID, *drawn))  # the dialog's first draw (tmux's copy: no flood)
            view = await view_when(lambda v: v.status == TerminalStatus.WAITING_USER_ANSWER)
            assert hermes.dialog_keys(view.screen, "no") == ["4"]
            bus.publish(TerminalOutput(TID, b"\x1b[17A\x1b[J"))
            view = await view_when(lambda v: hermes.dialog_keys(v.screen, "no") is None)  # no menu now
            assert view.status == TerminalStatus.WAITING_USER_ANSWER
            assert view.known_screen is not None and hermes.dialog_keys(view.known_screen, "no") == ["4"]
            bus.publish(TerminalOutput(TID, data[erase + len(b"\x1b[17A\x1b[J") :]))
            await view_when(lambda v: hermes.dialog_keys(v.screen, "no") == ["4"])  # drawn again

    asyncio.run(scenario())


def test_a_start_up_redraw_after_the_paste_is_not_the_turn(tmp_path: Path):
    """Recorded under load: an assigned Gemini worker took its task while Gemini was still
    redrawing its start-up screen (its footer gained the MCP server, then the GEMINI.md count).
    Those ready screens, changed above the composer, passed for the new turn's answer: an `idle`
    for the turn went out before its Enter was pressed, the input service took it for the turn's
    start, and the Enter, read as a newline, was never taken back. Nothing before the turn's
    Enter (EnterPressed) can be the turn."""
    from cli_agent_orchestrator.events import EnterPressed, InputSubmitted, TerminalOutput
    from cli_agent_orchestrator.providers import gemini_cli

    data = (
        Path(__file__).parent / "fixtures" / "streams" / "gemini_cli" / "startup_redrawn_after_ready.log"
    ).read_bytes()
    frames = [0, *(m.start() for m in re.finditer(rb"\x1b\[4B\x1b\[2K", data)), len(data)]
    assert len(frames) == 6  # three start-up frames, the paste's, the newline's

    async def scenario() -> list[StatusChanged]:
        monitors: list[StatusMonitor] = []
        async with _monitored(tmp_path, gemini_cli.PROVIDER, monitors, initial=TerminalStatus.IDLE) as (bus, stream):

            async def read(frame: int, shows: str) -> None:
                """Give the monitor one frame; return once it has read it (a frame at a time,
                as a loaded machine hands them over)."""
                bus.publish(TerminalOutput(TID, data[frames[frame] : frames[frame + 1]]))
                for _ in range(500):
                    view, term = monitors[0].view(TID), monitors[0]._terms[TID]
                    if view is not None and shows in "\n".join(view.screen.lines) and not term.dirty:
                        return
                    await asyncio.sleep(0.01)
                raise AssertionError(f"frame {frame} not read within 5 s")

            await read(0, "Type your message")
            bus.publish(InputSubmitted(TID, 1, enter_follows=True))
            await read(1, "MCP server")  # start-up redraws, after the input began
            await read(2, "GEMINI.md file")
            await read(3, "the assigned task")  # the paste's echo
            bus.publish(EnterPressed(TID, 1))
            await read(4, "the assigned task")  # the Enter, read as a newline
            seen = []
            while (event := await bus.next_event(stream, 0.3)) is not None:
                seen.append(event)
            view = monitors[0].view(TID)
            assert view is not None and view.composer_has_text and view.composer_rows == 5
            return seen

    assert asyncio.run(scenario()) == []  # no status for the turn: it has not started


def test_an_unknown_reading_before_the_tools_are_listed_keeps_the_held_ready_one(tmp_path: Path):
    """Claude's resumed agent once never became ready under load: its `idle` (SessionStart) was held
    for the tools, then a screen that read as nothing known (a redraw) dropped the held reading,
    and once the tools were listed nothing said ready again (the screen decides no idle once the
    CLI's hooks do)."""

    async def scenario() -> list[tuple[TerminalStatus, str]]:
        monitors: list[StatusMonitor] = []
        async with _monitored(tmp_path, qwen_cli.PROVIDER, monitors, awaiting_tools=True) as (bus, stream):
            seen: list[tuple[TerminalStatus, str]] = []
            monitor = monitors[0]
            await monitor.set_external(TID, TerminalStatus.IDLE, "hook:SessionStart")
            await monitor.set_external(TID, TerminalStatus.UNKNOWN, "screen")
            for method in qwen_cli.PROVIDER.mcp_ready_after:
                await monitor.on_mcp_listed(TID, method)
            while (event := await bus.next_event(stream, 0.5)) is not None:
                if isinstance(event, StatusChanged):
                    seen.append((event.status, event.reason))
            return seen

    from cli_agent_orchestrator.services.status.monitor import TOOLS_PENDING

    assert asyncio.run(scenario()) == [(TerminalStatus.UNKNOWN, TOOLS_PENDING), (TerminalStatus.IDLE, "")]
