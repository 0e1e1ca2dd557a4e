"""Terminals: create, type into, read, delete, restore and re-adopt agents.

A terminal is one agent CLI in one tmux window. This service owns their
lifecycle; status comes from the status monitor, input goes through the input
service, and facts (spawned, removed) are published on the bus for the others.
"""
from __future__ import annotations

import asyncio
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
from ..errors import Conflict, InvalidInput, NotFound, WaitTimeout, WorkerError
from ..events import TerminalRemoved, TerminalSpawned
from ..models import MODEL_RE, SAFE_NAME_RE, SESSION_PREFIX, TERMINAL_ID_RE, Terminal, TerminalStatus
from ..profiles import AgentProfile, load_profile
from ..providers.base import LaunchContext
from ..providers.registry import DEFAULT_PROVIDER, get_provider
from ..settings import Settings
from ..store import Store
from .input import InputService, valid_key
from .launch import mcp_server_argv, pane_command, write_env_file
from .status import StatusMonitor
from .waiting import TerminalVanished, ready_or_stuck, wait_for

log = logging.getLogger(__name__)

MAX_STARTUP_ANSWERS = 12  # first-run screens (theme, notes, trust) can each be drawn more than once
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

    # --- reading ----------------------------------------------------------------
    async def get(self, terminal_id: str) -> Terminal:
        check_terminal_id(terminal_id)
        term = await self.store.run(self.store.get_terminal, terminal_id)
        if term is None:
            raise NotFound(f"terminal {terminal_id} not found")
        snap = self.monitor.snapshot(terminal_id)
        if snap is not None:
            term.status, _, _, reason = snap
            term.status_reason = reason or term.status_reason
        return term

    async def list(self, session_name: str | None = None) -> list[Terminal]:
        terms = await self.store.run(self.store.list_terminals, session_name)
        for term in terms:
            live = self.monitor.status(term.id)
            if live is not None:
                term.status = live
        return terms

    async def window(self, terminal_id: str) -> str:
        await self.get(terminal_id)
        window_id = await self.store.run(self.store.window_id, terminal_id)
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
        resolved = Path(path).expanduser()
        if not resolved.is_absolute():
            raise InvalidInput(f"working directory must be an absolute path, got {path!r}")
        if not resolved.is_dir():
            raise InvalidInput(f"working directory {path!r} does not exist or is not a directory")
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
            launch = provider.build_launch(ctx)
            env_file = self.settings.tmp_dir / f"{terminal_id}.env"
            write_env_file(env_file, {**(req.env or {}), **launch.env, "CAO_TERMINAL_ID": terminal_id})
            term = Terminal(id=terminal_id, session_name=session, window_name=window_name,
                            provider=provider_name, agent_profile=profile.name, working_directory=workdir,
                            caller_id=req.caller_id, model=ctx.model, allowed_tools=ctx.allowed_tools)
            await self.store.run(self.store.add_terminal, term, None)
            self.monitor.watch(terminal_id, provider)
            try:
                ref = await self.backend.create_window(terminal_id, session, window_name, workdir,
                                                       pane_command(env_file, launch), req.new_session)
            except Exception:
                self.monitor.forget(terminal_id)
                await self.store.run(self.store.delete_terminal, terminal_id)
                env_file.unlink(missing_ok=True)
                raise
            await self.store.run(self.store.set_window_id, terminal_id, ref.window_id)
        self.bus.publish(TerminalSpawned(terminal_id, session))
        if req.wait_ready:
            await self.wait_until_ready(terminal_id)
        return await self.get(terminal_id)

    async def _default_workdir(self, req: CreateRequest) -> str:
        if req.working_directory is None and req.caller_id is not None:
            # A worker starts where its caller is working now.
            try:
                window_id = await self.window(req.caller_id)
                live = await self.backend.current_path(window_id)
                if live and os.path.isdir(live):
                    return live
            except NotFound:
                pass
        return self._working_directory(req.working_directory)

    async def wait_until_ready(self, terminal_id: str) -> TerminalStatus:
        """Wait for the agent's first ready state, answering known start-up dialogs.

        On failure the terminal is deleted (nothing leaks) and the error names the cause.
        """
        term = await self.store.run(self.store.get_terminal, terminal_id)
        assert term is not None
        provider = get_provider(term.provider)
        timeout = min(provider.startup_timeout, self.settings.provider_init_timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        answered = 0
        while True:
            try:
                status = await wait_for(self.bus, self.monitor, terminal_id, ready_or_stuck,
                                        max(0.0, deadline - loop.time()))
            except TerminalVanished:
                raise WorkerError(f"terminal {terminal_id} was deleted while starting", terminal_id) from None
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
            snap = self.monitor.snapshot(terminal_id)
            reason = snap[3] if snap else ""
            await self.delete(terminal_id)
            if status is None:
                raise WaitTimeout(f"{term.provider} agent did not become ready within {timeout:.0f}s; "
                                  f"last screen:\n{tail}", terminal_id)
            raise WorkerError(f"{term.provider} agent failed to start: {reason or 'error'}; "
                              f"last screen:\n{tail}", terminal_id)

    def spawn_background(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

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
        logs = self.settings.terminal_logs_dir
        logs.mkdir(parents=True, exist_ok=True)
        if window_id and not term.gone:
            try:
                text = await self.backend.capture(window_id, history=True)
                (logs / f"{terminal_id}.scrollback").write_text(_ANSI.sub("", text), encoding="utf-8")
            except Exception as exc:  # the window may already be gone; the row still goes
                log.warning("could not save scrollback of %s: %s", terminal_id, exc)
        snapshot = {"terminal_id": term.id, "session_name": term.session_name, "window_name": term.window_name,
                    "agent_profile": term.agent_profile, "provider": term.provider,
                    "working_directory": term.working_directory, "allowed_tools": term.allowed_tools,
                    "caller_id": term.caller_id}
        (logs / f"{terminal_id}.snapshot.json").write_text(json.dumps(snapshot, indent=2), encoding="utf-8")
        await self.backend.unwatch(terminal_id)
        if window_id:
            await self.backend.kill_window(window_id)
        await self.store.run(self.store.delete_terminal, terminal_id)
        # Generated per-terminal files (launch scripts, settings, the env file) may hold
        # the system prompt or secrets: they go with the terminal.
        shutil.rmtree(self.settings.tmp_dir / terminal_id, ignore_errors=True)
        (self.settings.tmp_dir / f"{terminal_id}.env").unlink(missing_ok=True)
        self.typing.forget(terminal_id)
        self.bus.publish(TerminalRemoved(terminal_id))

    async def restore(self, terminal_id: str) -> dict:
        """Show a deleted terminal's saved scrollback again, in a plain window."""
        check_terminal_id(terminal_id)
        logs = self.settings.terminal_logs_dir
        scrollback = logs / f"{terminal_id}.scrollback"
        snapshot_path = logs / f"{terminal_id}.snapshot.json"
        if not scrollback.is_file():
            raise NotFound(f"no saved scrollback for terminal {terminal_id}")
        snapshot = json.loads(snapshot_path.read_text()) if snapshot_path.is_file() else {}
        session = snapshot.get("session_name") or f"{SESSION_PREFIX}restored"
        new_session = not await self.backend.session_exists(session)
        taken = {w.window_name for w in await self.backend.list_windows() if w.session_name == session}
        base = f"restored-{snapshot.get('window_name', terminal_id)}"[:58]
        window = next(name for n in range(1, 1000)
                      if (name := base if n == 1 else f"{base}-{n}") not in taken)
        command = f"cat {_shquote(str(scrollback))}; exec /bin/sh"
        workdir = snapshot.get("working_directory")
        ref = await self.backend.create_window(terminal_id, session, window,
                                               workdir if workdir and os.path.isdir(workdir) else os.getcwd(),
                                               command, new_session, watch=False)
        return {"terminal_id": terminal_id, "session_name": session, "window_name": window,
                "window_id": ref.window_id, "scrollback": str(scrollback),
                "attach": self.backend.attach_command(session)}

    # --- restart --------------------------------------------------------------------
    async def adopt_all(self) -> dict:
        """Re-attach to terminals that survived a server restart; mark the others gone."""
        windows = {w.window_id: w for w in await self.backend.list_windows()}
        adopted, gone = [], []
        for term in await self.store.run(self.store.list_terminals, None):
            window_id = await self.store.run(self.store.window_id, term.id)
            info = windows.get(window_id or "")
            if info is None or info.session_name != term.session_name and info.session_name != "_cao_monitor":
                await self.store.run(self.store.mark_gone, term.id, "tmux window disappeared while cao-server was down")
                gone.append(term.id)
                self.bus.publish(TerminalRemoved(term.id))
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


def _shquote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
