"""The status monitor alone decides what a CLI hook means, once, keeping per-terminal hook
memory itself (providers stay pure functions). Real bus, real SQLite store, the real
provider modules; no tmux needed because hooks carry the status."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cli_agent_orchestrator.bus import EventBus
from cli_agent_orchestrator.events import HookReceived, StatusChanged
from cli_agent_orchestrator.models import Terminal, TerminalStatus
from cli_agent_orchestrator.providers import qwen_cli
from cli_agent_orchestrator.services.status.monitor import StatusMonitor
from cli_agent_orchestrator.store import Store
from cli_agent_orchestrator.tasks import TaskGroup

TID = "0123abcd"


async def _statuses_after(tmp_path: Path, hooks: list[tuple[str, dict]]) -> list[TerminalStatus]:
    bus = EventBus()
    bus.start()
    store = Store(tmp_path / "cao.db")
    store.add_terminal(Terminal(TID, "cao-t", "w-0001", "qwen_cli", "dev", str(tmp_path)), None)
    tasks = TaskGroup()
    monitor = StatusMonitor(bus, store, tasks)
    bus.subscribe("status-monitor", "terminal.#", monitor.handle)
    stream = bus.open_stream("test", f"terminal.{TID}.status")
    monitor.watch(TID, qwen_cli.PROVIDER)
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
    await monitor.stop()
    await tasks.close()
    await bus.stop()
    store.close()
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
