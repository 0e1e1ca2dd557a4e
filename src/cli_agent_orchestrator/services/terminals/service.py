"""TerminalService: the lifecycle of an agent terminal (one agent CLI in one tmux window) as the
API sees it: create, read, type into, delete, restore and re-adopt. Status comes from the status
monitor, input goes through the input service; facts (spawned, removed) go out on the bus.
"""

from __future__ import annotations

import asyncio
import builtins
import hmac
import logging
import os
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from ...backends.base import HostPlacement, TerminalBackend
from ...backends.tmux_windows import HISTORY_LIMIT
from ...bus import EventBus
from ...errors import AgentExited, Conflict, Forbidden, InvalidInput, NotFound, WaitTimeout, WorkerError
from ...events import BackendLost, Event, SessionCreated, TerminalRemoved, TerminalSpawned
from ...models import Terminal, TerminalStatus, Worktree
from ...providers.registry import get_provider
from ...settings import Settings
from ...store import Store
from ...tasks import TaskGroup
from ..input import InputService, valid_key
from ..status.monitor import TOOLS_PENDING, StatusMonitor
from ..status.view import TerminalView
from ..waiting import TerminalVanished, ready_or_stuck, wait_for
from ..worktrees import Worktrees
from .adoption import adopt_survivors
from .labels import checked_description, checked_group, checked_metadata, siblings_among
from .launch_file import sweep_env_files
from .names import check_terminal_id
from .scrollback import note_worktree, restore_scrollback, save_scrollback
from .spawn import HOOK_SECRET_ENV, CreateRequest, Spawner, checked_working_directory, new_terminal_id

log = logging.getLogger(__name__)

MAX_STARTUP_ANSWERS = 12  # first-run screens (theme, notes, trust) can each be drawn more than once
# tmux drops the oldest tenth of a full history at once, so a pane that has lost lines to the
# history limit holds between 90 % and 100 % of it: from here on, the top may be gone.
HISTORY_FULL_LINES = HISTORY_LIMIT * 9 // 10


@dataclass(frozen=True)
class Reply:
    """An agent's last reply as cao can read it. `cut`: why `text` is not the whole reply
    (its start scrolled out of the pane's history); None when it is."""

    text: str
    cut: str | None = None


class TerminalService:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        bus: EventBus,
        backend: TerminalBackend,
        placement: HostPlacement,
        monitor: StatusMonitor,
        input_service: InputService,
        tasks: TaskGroup,
        environ: Mapping[str, str],
    ):
        """`environ`: cao-server's environment, which every agent inherits. `placement`: where
        agents on hosts run (the same PlacedBackend as `backend`, seen for its hosts)."""
        self.environ = environ
        self.settings = settings
        self.store = store
        self.bus = bus
        self.backend = backend
        self.placement = placement
        self.monitor = monitor
        self.input = input_service
        self.tasks = tasks
        self._spawner = Spawner(settings, store, backend, placement, monitor, environ)
        self.session_envs = self._spawner.session_envs  # a session's variables for its later agents
        self.worktrees = Worktrees(settings.home_dir, environ)

    # --- reading ----------------------------------------------------------------
    async def get(self, terminal_id: str) -> Terminal:
        check_terminal_id(terminal_id)
        term = await self.store.run(self.store.get_terminal, terminal_id)
        if term is None:
            raise NotFound(f"terminal {terminal_id} not found")
        _overlay_live(term, self.monitor.view(terminal_id))
        return term

    async def list(self, session_name: str | None = None) -> list[Terminal]:
        terms = await self.store.run(self.store.list_terminals, session_name)
        for term in terms:
            _overlay_live(term, self.monitor.view(term.id))
        return terms

    async def set_labels(self, terminal_id: str, **labels: object) -> Terminal:
        """Replace some of a terminal's description, group, metadata (each whole: last write
        wins); every value is checked before any is stored."""
        checks = {"description": checked_description, "group": checked_group, "metadata": checked_metadata}
        values = {name: checks[name](value) for name, value in labels.items()}
        check_terminal_id(terminal_id)
        if not await self.store.run(self.store.set_labels, terminal_id, values):
            raise NotFound(f"terminal {terminal_id} not found")
        return await self.get(terminal_id)

    async def siblings(self, terminal_id: str, depth: int = 1, cross_session: bool = False) -> builtins.list[Terminal]:
        """The terminal's siblings (labels.py says who they are)."""
        me = await self.get(terminal_id)
        everyone = await self.list(None if cross_session else me.session_name)
        return siblings_among(me, everyone, depth, cross_session)

    async def check_hook_secret(self, terminal_id: str, secret: str | None) -> None:
        """A hook may only speak for the terminal whose environment holds its secret."""
        await self.get(terminal_id)
        expected = await self.store.run(self.store.hook_secret, terminal_id)
        if not expected or not secret or not hmac.compare_digest(expected.encode(), secret.encode()):
            raise Forbidden(
                f"hook refused: it does not carry terminal {terminal_id}'s hook secret "
                f"({HOOK_SECRET_ENV} in the agent's environment)"
            )

    async def window(self, terminal_id: str) -> str:
        check_terminal_id(terminal_id)
        found = await self.store.run(self.store.window_of, terminal_id)
        if found is None:
            raise NotFound(f"terminal {terminal_id} not found")
        gone, window_id, reason = found
        if gone:
            # Its window id may name another agent's window in a newer tmux server.
            raise AgentExited(f"terminal {terminal_id} is gone ({reason}); it has no window")
        if window_id is None:
            raise NotFound(f"terminal {terminal_id} has no window")
        return window_id

    # --- creating ---------------------------------------------------------------
    async def create(self, req: CreateRequest) -> Terminal:
        req.description = checked_description(req.description)
        req.group, req.metadata = checked_group(req.group), checked_metadata(req.metadata)
        profile, provider_name, host = await self._spawner.resolve(req)
        if req.caller_id is not None:
            check_terminal_id(req.caller_id)
        if host is not None:
            if req.use_worktree:
                raise InvalidInput(f"use_worktree is not available for agents on another host ({host}) yet")
            workdir = await self._host_workdir(req, host)
        else:
            workdir = await self._default_workdir(req)
        terminal_id, worktree = req.terminal_id or new_terminal_id(), None
        if req.use_worktree:
            worktree, workdir = await self.worktrees.create(workdir, terminal_id, profile.name)
        try:
            term = await self._spawner.spawn(req, profile, provider_name, workdir, terminal_id, worktree, host)
        except BaseException:
            if worktree is not None:  # nothing half-created: not its worktree or branch either
                await self.worktrees.release(worktree, discard=True)
            raise
        if req.new_session:
            self.bus.publish(SessionCreated(term.session_name, term.id))
        self.bus.publish(TerminalSpawned(term.id, term.session_name, term.caller_id))
        if req.wait_ready:
            await self.wait_until_ready(term.id)
        return await self.get(term.id)

    async def _host_workdir(self, req: CreateRequest, host: str) -> str:
        if req.working_directory is None and req.caller_id is not None:
            caller = await self.store.run(self.store.get_terminal, req.caller_id)
            if caller is not None and caller.host == host:
                try:  # beside its caller on the same host: where the caller works now
                    live = await self.backend.current_path(await self.window(req.caller_id))
                    if live:
                        return await self._spawner.remote_workdir(live, host)
                except (NotFound, AgentExited, InvalidInput):
                    pass
        return await self._spawner.remote_workdir(req.working_directory, host)

    async def _default_workdir(self, req: CreateRequest) -> str:
        if req.working_directory is None and req.caller_id is not None:
            # A worker starts where its caller is working now.
            try:
                window_id = await self.window(req.caller_id)
                live = await self.backend.current_path(window_id)
                if live and os.path.isdir(live):
                    return live
            except (NotFound, AgentExited):
                pass  # the caller is gone: the server's own directory, as without a caller
        return checked_working_directory(req.working_directory)

    async def wait_until_ready(self, terminal_id: str) -> TerminalStatus:
        """Wait for the agent's first ready state, answering known start-up dialogs.

        On failure the terminal is deleted (nothing leaks) and the error names the cause.
        Either way its launch file is gone afterwards.
        """
        try:
            return await self._wait_until_ready(terminal_id)
        finally:
            self._spawner.launch_done(terminal_id)

    async def _wait_until_ready(self, terminal_id: str) -> TerminalStatus:
        term = await self.store.run(self.store.get_terminal, terminal_id)
        if term is None:
            raise WorkerError(f"terminal {terminal_id} was deleted while starting", terminal_id)
        provider = get_provider(term.provider)
        timeout = min(provider.startup_timeout, self.settings.provider_init_timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        answered, fell_back = 0, False
        while True:
            try:
                status = await wait_for(
                    self.bus, self.monitor, terminal_id, ready_or_stuck, max(0.0, deadline - loop.time())
                )
            except TerminalVanished as gone:
                raise WorkerError(f"terminal {terminal_id} was removed while starting ({gone})", terminal_id) from None
            view = self.monitor.view(terminal_id)
            screen = view.screen if view else None
            if status == TerminalStatus.WAITING_USER_ANSWER and view is not None and answered < MAX_STARTUP_ANSWERS:
                # The screen the dialog was read from: the latest may be a frame caught mid-redraw.
                keys = provider.answer_startup_dialog(view.known_screen or view.screen)
                if keys:
                    answered += 1
                    await self.input.send_keys(await self.window(terminal_id), list(keys))
                    await self.monitor.set_external(terminal_id, TerminalStatus.PROCESSING, "startup-dialog")
                    continue
            if status is not None and status != TerminalStatus.ERROR:
                return status
            if status is None and not fell_back:
                argv = await self._spawner.fall_back(
                    terminal_id, await self.window(terminal_id), term.working_directory
                )
                if argv is not None:
                    fell_back, answered = True, 0
                    deadline = loop.time() + timeout
                    log.warning(
                        "%s agent %s not ready within %.0fs; started again as: %s",
                        term.provider,
                        terminal_id,
                        timeout,
                        " ".join(argv[1:]),
                    )
                    continue
            tail = "\n".join(screen.last_nonblank(8)) if screen else ""
            view = self.monitor.view(terminal_id)
            reason = view.reason if view else ""
            await self.delete(terminal_id, never_started=True)
            if status is None and reason == TOOLS_PENDING:
                raise WaitTimeout(
                    f"{term.provider} agent did not become ready within {timeout:.0f}s: its CLI did not connect "
                    f"to cao's MCP endpoint (/mcp) and list cao's tools (handoff, assign, send_message...), "
                    f"which its profile gives it; last screen:\n{tail}",
                    terminal_id,
                )
            if status is None:
                raise WaitTimeout(
                    f"{term.provider} agent did not become ready within {timeout:.0f}s; last screen:\n{tail}",
                    terminal_id,
                )
            raise WorkerError(
                f"{term.provider} agent failed to start: {reason or 'error'}; last screen:\n{tail}", terminal_id
            )

    # --- input ------------------------------------------------------------------
    async def send_input(self, terminal_id: str, text: str) -> int:
        if not text:
            raise InvalidInput("message must not be empty")
        window_id = await self.window(terminal_id)
        async with self.input.lock(terminal_id):
            view = self.monitor.view(terminal_id)
            if view is None or view.exited:
                term = await self.get(terminal_id)
                raise Conflict(
                    f"terminal {terminal_id}: {term.status_reason or 'the agent is not running'}; input refused"
                )
            keys = self._dialog_keys(terminal_id, text)
            if keys:
                # A menu that ignores typed text (an approval dialog): answer with its keys.
                turn = await self.input.next_turn(terminal_id)  # before the keys: no reaction can beat it
                await self.input.send_keys(window_id, keys)
                return turn
            return await self.input.submit(terminal_id, window_id, text)

    def _dialog_keys(self, terminal_id: str, answer: str) -> builtins.list[str] | None:  # (`list` is a method here)
        view = self.monitor.view(terminal_id)
        if view is None or view.status != TerminalStatus.WAITING_USER_ANSWER:
            return None
        # The latest screen may be a frame caught mid-redraw, without the dialog: then the screen
        # the dialog was read from. Typed as text instead, the answer's Enter would pick the
        # dialog's default option (Hermes: "Allow once" for a "no").
        keys = view.provider.dialog_keys(view.screen, answer)
        if keys is None and view.known_screen is not None:
            keys = view.provider.dialog_keys(view.known_screen, answer)
        return [k for k in keys if valid_key(k)] if keys else None

    async def send_key(self, terminal_id: str, key: str) -> None:
        if not valid_key(key):
            raise InvalidInput(
                f"invalid key {key!r}: use Enter, Escape, Tab, Space, BSpace, Up, Down, Left, "
                "Right, one letter or digit, or C-/M-/S- plus one letter or digit"
            )
        window_id = await self.window(terminal_id)
        async with self.input.lock(terminal_id):
            await self.input.send_keys(window_id, [key])

    async def exit(self, terminal_id: str) -> None:
        term = await self.get(terminal_id)
        window_id = await self.window(terminal_id)
        command = get_provider(term.provider).exit_command
        async with self.input.lock(terminal_id):
            await self.input.submit(terminal_id, window_id, command)

    # --- output -----------------------------------------------------------------
    async def history(self, terminal_id: str) -> str:
        window_id = await self.window(terminal_id)
        return await self.backend.capture(window_id, history=True)

    async def output(self, terminal_id: str, mode: str) -> str:
        """The whole history ("full") or the last reply ("last"); a reply whose start is gone
        comes with a first line saying so (the API gives that as `truncated` and `reason`)."""
        if mode == "full":
            await self.get(terminal_id)
            return await self.history(terminal_id)
        reply = await self.last_reply(terminal_id)
        return reply.text if reply.cut is None else f"[cao: {reply.cut}]\n{reply.text}"

    async def last_reply(self, terminal_id: str) -> Reply:
        """The last reply; when its start scrolled out of the history, what is left of it.
        Conflict when there is none yet."""
        term = await self.get(terminal_id)
        view = self.monitor.view(terminal_id)
        if view is not None and view.hook_reply is not None:
            return Reply(view.hook_reply)  # exact text from the CLI itself; the screen has it wrapped
        window_id = await self.window(terminal_id)
        text = await self.backend.capture(window_id, history=True)
        provider = get_provider(term.provider)
        lines = text.splitlines() if provider.raw_history else [line.rstrip() for line in text.splitlines()]
        reply = provider.extract_reply(lines)
        if reply is not None:
            return Reply(reply)
        position = await self.backend.position(window_id)
        if position is not None and position[0] >= HISTORY_FULL_LINES:
            # No reply start in a full history: it scrolled out. What is left is the pane's text
            # itself, the reply's end and whatever the agent drew after it.
            return Reply(
                text.rstrip("\n"),
                f"the reply's start scrolled out of the terminal's history (tmux keeps {HISTORY_LIMIT} lines); "
                "this is the rest of the pane: the reply's end and what the agent showed after it",
            )
        raise Conflict(f"terminal {terminal_id} has no reply to extract yet (status {term.status})")

    async def attach(self, terminal_id: str) -> dict:
        term = await self.get(terminal_id)
        argv = self.backend.attach_command(term.session_name, term.host)
        return {"terminal_id": term.id, "host": term.host, "argv": argv, "command": shlex.join(argv)}

    async def working_directory(self, terminal_id: str) -> str | None:
        return await self.backend.current_path(await self.window(terminal_id))

    # --- deleting and restoring ---------------------------------------------------
    async def delete(self, terminal_id: str, never_started: bool = False) -> Worktree | None:
        """Remove the terminal: its window, row and files. Its worktree, if it has one, is
        removed when clean and kept otherwise; the answer says which (None: it had none).
        `never_started`: its agent never became ready, so its unused branch goes too."""
        check_terminal_id(terminal_id)
        term = await self.store.run(self.store.get_terminal, terminal_id)
        if term is None:
            raise NotFound(f"terminal {terminal_id} not found")
        window_id = await self.store.run(self.store.window_id, terminal_id)
        await save_scrollback(self.backend, self.settings.terminal_logs_dir, term, window_id)
        await self.backend.unwatch(terminal_id)
        if window_id and not term.gone:
            await self.backend.kill_window(window_id)
        await self.store.run(self.store.delete_terminal, terminal_id)
        self._remove_files(terminal_id, term.host)
        self.input.forget(terminal_id)
        self.bus.publish(TerminalRemoved(terminal_id, "deleted"))
        if term.worktree is None:
            return None
        # After the window is gone: nothing writes into the worktree while it is judged.
        released = await self.worktrees.release(term.worktree, discard=never_started)
        note_worktree(self.settings.terminal_logs_dir, terminal_id, released)
        return released

    def _remove_files(self, terminal_id: str, host: str | None = None) -> None:
        # Generated per-terminal files (launch scripts, settings, the env file) may hold
        # the system prompt or secrets: they go with the terminal, here and on its host.
        shutil.rmtree(self.settings.tmp_dir / terminal_id, ignore_errors=True)
        self._spawner.launch_done(terminal_id)
        if host is not None:
            self.tasks.spawn(self.placement.remove_files(host, f"tmp/{terminal_id}"), f"remove-files:{terminal_id}")

    async def restore(self, terminal_id: str) -> dict:
        """Show a deleted terminal's saved scrollback again, in a plain window. Asked
        again, it shows the same window (tagged with the terminal id), not another one."""
        check_terminal_id(terminal_id)
        return await restore_scrollback(self.backend, self.settings.terminal_logs_dir, terminal_id)

    # --- restart and lost servers ----------------------------------------------------
    async def adopt_all(self) -> dict:
        """Re-attach to terminals that survived a server restart; mark the others gone."""
        sweep_env_files(self.settings.tmp_dir, keep=set(self._spawner.starting))
        return await adopt_survivors(self.store, self.backend, self.placement, self.monitor, self._mark_gone)

    async def on_backend_lost(self, event: Event) -> None:
        """A tmux server ended: every agent it ran (this machine's, or one host's) is gone, and says why."""
        assert isinstance(event, BackendLost)
        for term in await self.store.run(self.store.list_terminals, None):
            if term.host == event.host:
                await self._mark_gone(term.id, event.reason, term.host)

    async def _mark_gone(self, terminal_id: str, reason: str, host: str | None = None) -> None:
        await self.store.run(self.store.mark_gone, terminal_id, reason)
        await self.backend.unwatch(terminal_id)
        self._remove_files(terminal_id, host)
        self.input.forget(terminal_id)
        self.bus.publish(TerminalRemoved(terminal_id, reason))


def _overlay_live(term: Terminal, view: TerminalView | None) -> None:
    """The monitor's live status over the stored one (written behind it); a gone terminal
    keeps the stored status that says why it is gone."""
    if view is not None and not term.gone:
        term.status, term.status_source = view.status, view.source or term.status_source
        term.status_reason = view.reason or None
