"""Adoption after a restart: terminals whose tmux window survived cao-server are watched again
(a dead pane is an error that says so); the others are marked gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ...backends.base import HostPlacement, TerminalBackend
from ...models import TerminalStatus
from ...providers.registry import get_provider
from ...store import Store
from ..status.monitor import StatusMonitor

# (terminal id, reason) → the terminal is marked gone, its files removed, its removal published
MarkGone = Callable[[str, str], Awaitable[None]]


async def adopt_survivors(
    store: Store, backend: TerminalBackend, placement: HostPlacement, monitor: StatusMonitor, mark_gone: MarkGone
) -> dict:
    """Re-attach to terminals that survived a server restart; mark the others gone. Terminals
    on a host that cannot be reached now are watched as unknown and adopted when it is."""
    terms = await store.run(store.list_terminals, None)
    unreachable = {}
    for host in sorted({t.host for t in terms if t.host}):
        why = await placement.reach(host)
        if why is not None:
            unreachable[host] = why
    windows = {w.window_id: w for w in await backend.list_windows()}
    adopted, gone, waiting = [], [], []
    for term in terms:
        window_id = await store.run(store.window_id, term.id)
        if term.host in unreachable and window_id:
            monitor.watch(term.id, get_provider(term.provider))
            if placement.adopt_later(term.host, term.id, window_id, unreachable[term.host]):
                waiting.append(term.id)
                continue
            monitor.forget(term.id)
            await mark_gone(term.id, unreachable[term.host])
            gone.append(term.id)
            continue
        info = windows.get(window_id or "")
        if info is None or info.session_name != term.session_name and info.session_name != "_cao_monitor":
            await mark_gone(term.id, "tmux window disappeared while cao-server was down")
            gone.append(term.id)
            continue
        provider = get_provider(term.provider)
        monitor.watch(term.id, provider, info.width or 220, info.height or 50)
        await backend.watch(term.id, info.window_id)
        if info.dead:
            await monitor.set_external(
                term.id, TerminalStatus.ERROR, "restart", f"the agent process exited (code {info.exit_code})"
            )
        else:
            monitor.resync(term.id)
        adopted.append(term.id)
    return {"adopted": adopted, "gone": gone, "waiting": waiting}
