"""Terminals: create, type into, read, delete, restore and re-adopt agents.

A terminal is one agent CLI in one tmux window. This service owns their
lifecycle; status comes from the status monitor, input goes through the input
service, and facts (spawned, removed) are published on the bus for the others.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import TerminalBackend
from ..bus import EventBus
from ..errors import AgentExited, Conflict, Forbidden, InvalidInput, NotFound, WaitTimeout, WorkerError
from ..events import BackendLost, Event, TerminalRemoved, TerminalSpawned
from ..models import MODEL_RE, SAFE_NAME_RE, SESSION_PREFIX, TERMINAL_ID_RE, Terminal, TerminalStatus
from ..private_files import private_dir, write_private
from ..profiles import AgentProfile, load_profile
from ..providers.base import LaunchContext
from ..providers.registry import DEFAULT_PROVIDER, get_provider
from ..settings import Settings
from ..store import Store
from .input import InputService, valid_key
from .launch import env_file, mcp_server_argv, pane_command, sweep_env_files, write_env_file
from .status import StatusMonitor, StatusView
from .waiting import TerminalVanished, ready_or_stuck, wait_for

log = logging.getLogger(__name__)

MAX_STARTUP_ANSWERS = 12  # first-run screens (theme, notes, trust) can each be drawn more than once
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: longer is never a directory
HOOK_SECRET_ENV = "CAO_HOOK_SECRET"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


@dataclass
class CreateRequest:
    agent_profile: str
    provider: str | None = None
    session_name: str | None = None
    new_session: bool = True
    working_directory: str | None = None
    caller_id: str | None = None
    model: str | None = None
    allowed_tools: list[str] | None = None
    yolo: bool = False
    wait_ready: bool = True
    # Extra variables for the agent's pane (e.g. a workflow step's identity).
    env: dict[str, str] | None = None


def normalise_session_name(name: str | None) -> str:
    if not name:
        return SESSION_PREFIX + secrets.token_hex(4)
    if not name.startswith(SESSION_PREFIX):
        name = SESSION_PREFIX + name
    if not SAFE_NAME_RE.match(name):
        raise InvalidInput(f"invalid session name {name!r}: use up to 64 of [A-Za-z0-9_-], "
                           "starting with a letter, digit or underscore")
    return name


def check_terminal_id(terminal_id: str) -> str:
    if not TERMINAL_ID_RE.match(terminal_id or ""):
        raise InvalidInput(f"invalid terminal id {terminal_id!r}: expected 8 lowercase hex characters")
    return terminal_id


class TerminalService:
    def __init__(self, settings: Settings, store: Store, bus: EventBus, backend: TerminalBackend,
                 monitor: StatusMonitor, typing: InputService):
        self.settings = settings
        self.store = store
        self.bus = bus
        self.backend = backend
        self.monitor = monitor
        self.typing = typing
        self._session_lock = asyncio.Lock()
        self._background: set[asyncio.Task] = set()
        self._starting: set[str] = set()  # terminals whose launch file may still be read

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

    async def check_hook_secret(self, terminal_id: str, secret: str | None) -> None:
        """A hook may only speak for the terminal whose environment holds its secret."""
        await self.get(terminal_id)
        expected = await self.store.run(self.store.hook_secret, terminal_id)
        if not expected or not secret or not hmac.compare_digest(expected.encode(), secret.encode()):
            raise Forbidden(f"hook refused: it does not carry terminal {terminal_id}'s hook secret "
                            f"({HOOK_SECRET_ENV} in the agent's environment)")

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
    def _resolve(self, req: CreateRequest) -> tuple[AgentProfile, str]:
        profile = load_profile(self.settings.home_dir, req.agent_profile)
        provider = req.provider or profile.provider or os.environ.get("CAO_DEFAULT_PROVIDER") or DEFAULT_PROVIDER
        spec = get_provider(provider)  # unknown provider → 400 before anything is allocated
        if not os.path.isabs(spec.binary) and shutil.which(spec.binary) is None:
            raise InvalidInput(f"provider {provider}: its CLI `{spec.binary}` is not on cao-server's PATH; "
                               "install it (see the README's provider table) or pick another provider")
        if req.model is not None and not MODEL_RE.match(req.model):
            raise InvalidInput(f"invalid model {req.model!r}: up to 128 of [A-Za-z0-9._:/-]")
        return profile, provider

    def _working_directory(self, path: str | None) -> str:
        if path is None:
            return os.getcwd()
        if len(path) > MAX_PATH_CHARS or "\x00" in path:
            raise InvalidInput(f"working directory is not a usable path (at most {MAX_PATH_CHARS} "
                               "characters, no NUL)")
        try:
            resolved = Path(path).expanduser()
        except RuntimeError:  # ~user of a user that does not exist
            raise InvalidInput(f"working directory {path[:200]!r}: no such user's home") from None
        if not resolved.is_absolute():
            raise InvalidInput(f"working directory must be an absolute path, got {path[:200]!r}")
        try:
            is_dir = resolved.is_dir()
        except OSError as exc:  # e.g. a path component longer than NAME_MAX
            raise InvalidInput(f"working directory {path[:200]!r} is not usable: {exc.strerror}") from None
        if not is_dir:
            raise InvalidInput(f"working directory {path[:200]!r} does not exist or is not a directory")
        return str(resolved)

    async def create(self, req: CreateRequest) -> Terminal:
        profile, provider_name = self._resolve(req)
        provider = get_provider(provider_name)
        if req.caller_id is not None:
            check_terminal_id(req.caller_id)
        workdir = await self._default_workdir(req)
        terminal_id = secrets.token_hex(4)
        window_name = f"{profile.name if SAFE_NAME_RE.match(profile.name) else req.agent_profile}-{secrets.token_hex(2)}"
        async with self._session_lock:
            session = normalise_session_name(req.session_name)
            exists = await self.backend.session_exists(session)
            if req.new_session and exists:
                raise InvalidInput(f"session {session!r} already exists")
            if not req.new_session and not exists:
                raise NotFound(f"session {session!r} not found")
            ctx = LaunchContext(
                terminal_id=terminal_id, profile_name=profile.name, system_prompt=profile.system_prompt,
                working_directory=workdir, home_dir=self.settings.home_dir,
                model=req.model or profile.model, allowed_tools=req.allowed_tools or profile.allowed_tools,
                yolo=req.yolo, mcp_server_argv=mcp_server_argv(), profile_extra=profile.frontmatter)
            hook_secret = secrets.token_urlsafe(24)
            launch_file = env_file(self.settings.tmp_dir, terminal_id)
            term = Terminal(id=terminal_id, session_name=session, window_name=window_name,
                            provider=provider_name, agent_profile=profile.name, working_directory=workdir,
                            caller_id=req.caller_id, model=ctx.model, allowed_tools=ctx.allowed_tools)
            self._starting.add(terminal_id)
            created = False
            try:
                launch = provider.build_launch(ctx)
                write_env_file(launch_file, {**(req.env or {}), **launch.env, "CAO_TERMINAL_ID": terminal_id,
                                             HOOK_SECRET_ENV: hook_secret})
                await self.store.run(self.store.add_terminal, term, None, hook_secret)
                self.monitor.watch(terminal_id, provider)
                try:
                    ref = await self.backend.create_window(terminal_id, session, window_name, workdir,
                                                           pane_command(launch_file, launch), req.new_session)
                except BaseException:
                    self.monitor.forget(terminal_id)
                    await self.store.run(self.store.delete_terminal, terminal_id)
                    raise
                await self.store.run(self.store.set_window_id, terminal_id, ref.window_id)
                created = True
            finally:
                if not created:  # nothing of a failed start stays behind: not its secrets either
                    self._launch_done(terminal_id)
                    shutil.rmtree(self.settings.tmp_dir / terminal_id, ignore_errors=True)
        self.bus.publish(TerminalSpawned(terminal_id, session))
        if req.wait_ready:
            await self.wait_until_ready(terminal_id)
        return await self.get(terminal_id)

    def _launch_done(self, terminal_id: str) -> None:
        """The pane has read its launch file (or never will): make sure it is gone."""
        self._starting.discard(terminal_id)
        env_file(self.settings.tmp_dir, terminal_id).unlink(missing_ok=True)

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
        return self._working_directory(req.working_directory)

    async def wait_until_ready(self, terminal_id: str) -> TerminalStatus:
        """Wait for the agent's first ready state, answering known start-up dialogs.

        On failure the terminal is deleted (nothing leaks) and the error names the cause.
        Either way its launch file is gone afterwards.
        """
        try:
            return await self._wait_until_ready(terminal_id)
        finally:
            self._launch_done(terminal_id)

    async def _wait_until_ready(self, terminal_id: str) -> TerminalStatus:
        term = await self.store.run(self.store.get_terminal, terminal_id)
        if term is None:
            raise WorkerError(f"terminal {terminal_id} was deleted while starting", terminal_id)
        provider = get_provider(term.provider)
        timeout = min(provider.startup_timeout, self.settings.provider_init_timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        answered = 0
        while True:
            try:
                status = await wait_for(self.bus, self.monitor, terminal_id, ready_or_stuck,
                                        max(0.0, deadline - loop.time()))
            except TerminalVanished as gone:
                raise WorkerError(f"terminal {terminal_id} was removed while starting ({gone})", terminal_id) from None
            screen = self.monitor.screen(terminal_id)
            if status == TerminalStatus.WAITING_USER_ANSWER and screen is not None and answered < MAX_STARTUP_ANSWERS:
                keys = provider.answer_startup_dialog(screen)
                if keys:
                    answered += 1
                    await self.typing.send_keys(await self.window(terminal_id), list(keys))
                    await self.monitor.set_external(terminal_id, TerminalStatus.PROCESSING, "startup-dialog")
                    continue
            if status is not None and status != TerminalStatus.ERROR:
                return status
            tail = "\n".join(screen.last_nonblank(8)) if screen else ""
            view = self.monitor.view(terminal_id)
            reason = view.reason if view else ""
            await self.delete(terminal_id)
            if status is None:
                raise WaitTimeout(f"{term.provider} agent did not become ready within {timeout:.0f}s; "
                                  f"last screen:\n{tail}", terminal_id)
            raise WorkerError(f"{term.provider} agent failed to start: {reason or 'error'}; "
                              f"last screen:\n{tail}", terminal_id)

    def spawn_background(self, coro) -> asyncio.Task:
        """A task nobody awaits: kept referenced, and its failure recorded (never lost)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _background_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("background task %s failed", task.get_name(), exc_info=exc)
            self.bus.record_failure("background", task.get_name(), exc)

    # --- input ------------------------------------------------------------------
    async def send_input(self, terminal_id: str, text: str) -> int:
        if not text:
            raise InvalidInput("message must not be empty")
        window_id = await self.window(terminal_id)
        async with self.typing.lock(terminal_id):
            if self.monitor.exited(terminal_id):
                term = await self.get(terminal_id)
                raise Conflict(f"terminal {terminal_id}: {term.status_reason or 'the agent is not running'}; "
                               "input refused")
            keys = self._dialog_keys(terminal_id, text)
            if keys:
                # A menu that ignores typed text (an approval dialog): answer with its keys.
                turn = await self.typing.next_turn(terminal_id)  # before the keys: no reaction can beat it
                await self.typing.send_keys(window_id, keys)
                return turn
            return await self.typing.submit(terminal_id, window_id, text)

    def _dialog_keys(self, terminal_id: str, answer: str) -> list[str] | None:
        provider, screen = self.monitor.provider_of(terminal_id), self.monitor.screen(terminal_id)
        if provider is None or screen is None or self.monitor.status(terminal_id) != TerminalStatus.WAITING_USER_ANSWER:
            return None
        keys = provider.dialog_keys(screen, answer)
        return [k for k in keys if valid_key(k)] if keys else None

    async def send_key(self, terminal_id: str, key: str) -> None:
        if not valid_key(key):
            raise InvalidInput(f"invalid key {key!r}: use Enter, Escape, Tab, Space, BSpace, Up, Down, Left, "
                               "Right, one letter or digit, or C-/M-/S- plus one letter or digit")
        window_id = await self.window(terminal_id)
        async with self.typing.lock(terminal_id):
            await self.typing.send_keys(window_id, [key])

    async def exit(self, terminal_id: str) -> None:
        term = await self.get(terminal_id)
        window_id = await self.window(terminal_id)
        command = get_provider(term.provider).exit_command
        async with self.typing.lock(terminal_id):
            await self.typing.submit(terminal_id, window_id, command)

    # --- output -----------------------------------------------------------------
    async def history(self, terminal_id: str) -> str:
        window_id = await self.window(terminal_id)
        return await self.backend.capture(window_id, history=True)

    async def output(self, terminal_id: str, mode: str) -> str:
        term = await self.get(terminal_id)
        if mode == "last" and (hooked := self.monitor.hook_reply(terminal_id)) is not None:
            return hooked  # exact text from the CLI itself; the screen has it wrapped
        text = await self.history(terminal_id)
        if mode == "full":
            return text
        provider = get_provider(term.provider)
        lines = text.splitlines() if provider.raw_history else [line.rstrip() for line in text.splitlines()]
        reply = provider.extract_reply(lines)
        if reply is None:
            raise Conflict(f"terminal {terminal_id} has no reply to extract yet (status {term.status})")
        return reply

    async def working_directory(self, terminal_id: str) -> str | None:
        return await self.backend.current_path(await self.window(terminal_id))

    # --- deleting and restoring ---------------------------------------------------
    async def delete(self, terminal_id: str) -> None:
        check_terminal_id(terminal_id)
        term = await self.store.run(self.store.get_terminal, terminal_id)
        if term is None:
            raise NotFound(f"terminal {terminal_id} not found")
        window_id = await self.store.run(self.store.window_id, terminal_id)
        logs = private_dir(self.settings.terminal_logs_dir)
        if window_id and not term.gone:
            try:
                text = await self.backend.capture(window_id, history=True)
                write_private(logs / f"{terminal_id}.scrollback", _ANSI.sub("", text))
            except Exception as exc:  # the window may already be gone; the row still goes
                log.warning("could not save scrollback of %s: %s", terminal_id, exc)
        snapshot = {"terminal_id": term.id, "session_name": term.session_name, "window_name": term.window_name,
                    "agent_profile": term.agent_profile, "provider": term.provider,
                    "working_directory": term.working_directory, "allowed_tools": term.allowed_tools,
                    "caller_id": term.caller_id}
        write_private(logs / f"{terminal_id}.snapshot.json", json.dumps(snapshot, indent=2))
        await self.backend.unwatch(terminal_id)
        if window_id and not term.gone:
            await self.backend.kill_window(window_id)
        await self.store.run(self.store.delete_terminal, terminal_id)
        self._remove_files(terminal_id)
        self.typing.forget(terminal_id)
        self.bus.publish(TerminalRemoved(terminal_id, "deleted"))

    def _remove_files(self, terminal_id: str) -> None:
        # Generated per-terminal files (launch scripts, settings, the env file) may hold
        # the system prompt or secrets: they go with the terminal.
        shutil.rmtree(self.settings.tmp_dir / terminal_id, ignore_errors=True)
        self._launch_done(terminal_id)

    async def restore(self, terminal_id: str) -> dict:
        """Show a deleted terminal's saved scrollback again, in a plain window. Asked
        again, it shows the same window (tagged with the terminal id), not another one."""
        check_terminal_id(terminal_id)
        logs = self.settings.terminal_logs_dir
        scrollback = logs / f"{terminal_id}.scrollback"
        snapshot_path = logs / f"{terminal_id}.snapshot.json"
        if not scrollback.is_file():
            raise NotFound(f"no saved scrollback for terminal {terminal_id}")
        try:
            snapshot = json.loads(snapshot_path.read_text()) if snapshot_path.is_file() else {}
        except ValueError:
            snapshot = {}
        tag = f"restored:{terminal_id}"
        for window in await self.backend.list_windows():
            if window.tag == tag:
                if not window.dead:
                    return self._restored(terminal_id, window.session_name, window.window_name,
                                          window.window_id, scrollback)
                await self.backend.kill_window(window.window_id)  # its shell was left: a fresh one
        session = snapshot.get("session_name")
        if not isinstance(session, str) or not SAFE_NAME_RE.match(session):
            session = f"{SESSION_PREFIX}restored"
        new_session = not await self.backend.session_exists(session)
        taken = {w.window_name for w in await self.backend.list_windows() if w.session_name == session}
        original = snapshot.get("window_name")
        base = f"restored-{original if isinstance(original, str) and SAFE_NAME_RE.match(original) else terminal_id}"[:58]
        window = next(name for n in range(1, 1000)
                      if (name := base if n == 1 else f"{base}-{n}") not in taken)
        command = f"cat {_shquote(str(scrollback))}; exec /bin/sh"
        workdir = snapshot.get("working_directory")
        if not (isinstance(workdir, str) and os.path.isdir(workdir)):
            workdir = os.getcwd()
        ref = await self.backend.create_window(terminal_id, session, window, workdir, command, new_session,
                                               watch=False, tag=tag)
        return self._restored(terminal_id, session, window, ref.window_id, scrollback)

    def _restored(self, terminal_id: str, session: str, window: str, window_id: str, scrollback: Path) -> dict:
        return {"terminal_id": terminal_id, "session_name": session, "window_name": window,
                "window_id": window_id, "scrollback": str(scrollback),
                "attach": self.backend.attach_command(session)}

    # --- restart and lost servers ----------------------------------------------------
    async def adopt_all(self) -> dict:
        """Re-attach to terminals that survived a server restart; mark the others gone."""
        sweep_env_files(self.settings.tmp_dir, keep=set(self._starting))
        windows = {w.window_id: w for w in await self.backend.list_windows()}
        adopted, gone = [], []
        for term in await self.store.run(self.store.list_terminals, None):
            window_id = await self.store.run(self.store.window_id, term.id)
            info = windows.get(window_id or "")
            if info is None or info.session_name != term.session_name and info.session_name != "_cao_monitor":
                await self._mark_gone(term.id, "tmux window disappeared while cao-server was down")
                gone.append(term.id)
                continue
            provider = get_provider(term.provider)
            self.monitor.watch(term.id, provider, info.width or 220, info.height or 50)
            await self.backend.watch(term.id, info.window_id)
            if info.dead:
                await self.monitor.set_external(term.id, TerminalStatus.ERROR, "restart",
                                                f"the agent process exited (code {info.exit_code})")
            else:
                self.monitor.resync(term.id)
            adopted.append(term.id)
        return {"adopted": adopted, "gone": gone}

    async def on_backend_lost(self, event: Event) -> None:
        """The tmux server ended: every agent it ran is gone, and says why."""
        assert isinstance(event, BackendLost)
        for term in await self.store.run(self.store.list_terminals, None):
            await self._mark_gone(term.id, event.reason)

    async def _mark_gone(self, terminal_id: str, reason: str) -> None:
        await self.store.run(self.store.mark_gone, terminal_id, reason)
        await self.backend.unwatch(terminal_id)
        self._remove_files(terminal_id)
        self.typing.forget(terminal_id)
        self.bus.publish(TerminalRemoved(terminal_id, reason))


def _overlay_live(term: Terminal, view: StatusView | None) -> None:
    """The monitor's live status over the stored one (written behind it); a gone terminal
    keeps the stored status that says why it is gone."""
    if view is not None and not term.gone:
        term.status, term.status_source = view.status, view.source or term.status_source
        term.status_reason = view.reason or None


def _shquote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
