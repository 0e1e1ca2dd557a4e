"""Hosts as the API and the CLI see them: add, list, get, check, drain, remove; and the end
of every host's SSH master connection when the server stops.

Invariant: a host is stored only after its name, target, identity and limit passed the checks
in records.py, so nothing read back from the registry can become an ssh option.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from ...backends.remote_tmux import RemoteTmuxBackend
from ...backends.ssh_link import OPEN_TIMEOUT_S, SshLink
from ...bus import EventBus
from ...errors import Conflict, InvalidInput, NotFound
from ...providers.registry import get_provider, provider_names
from ...store import Store
from ...store.hosts import HostTables
from .check import (
    BINARY_RE,
    CAO_TOOLS,
    CheckItem,
    CheckReport,
    ProbeUnreadable,
    is_ready,
    parse_probe,
    probe_words,
    report_items,
    ssh_failure,
)
from .records import HostRecord, check_identity, check_max_agents, check_name, parse_target
from .ssh import SshResult, close_master, control_dir, destination, link_path, run_on_host

log = logging.getLogger(__name__)
CHECK_TIMEOUT_S = 30.0  # the connection (ConnectTimeout 10s, then the login) and the probe


class HostService:
    def __init__(self, tmp_dir: Path, store: Store, tables: HostTables, environ: Mapping[str, str]):
        self.tmp_dir = tmp_dir  # the ControlMaster sockets live in its `ssh/`
        self.store = store
        self.tables = tables
        self.environ = dict(environ)  # ssh's environment: the user's agent socket, locale
        # Set by the composition root: a host's connection as the terminal backend has it,
        # and how to end it.
        self.connection_of: Callable[[str], dict | None] | None = None
        self.disconnect: Callable[[str], Awaitable[None]] | None = None

    async def add(self, name: str, ssh: str, identity: str | None, max_agents: int | None) -> dict:
        record = HostRecord(
            name=check_name(name),
            target=parse_target(ssh),
            identity=check_identity(identity) if identity is not None else None,
            max_agents=check_max_agents(max_agents),
            state="active",
            added_at="",
        )
        added = await self.store.run(self.tables.add_host, record)
        if added is None:
            raise Conflict(f"host {name} exists; remove it first to change it")
        return added.as_json()

    async def list(self) -> list[dict]:
        load = await self._load()
        return [self._shown(h, load) for h in await self.store.run(self.tables.list_hosts)]

    async def get(self, name: str) -> dict:
        return self._shown(await self._host(name), await self._load())

    async def _load(self) -> Counter[str]:
        return Counter(t.host for t in await self.store.run(self.store.list_terminals, None) if t.host)

    def _shown(self, host: HostRecord, load: Counter[str]) -> dict:
        """The record, its live agents, and its connection: `ok`, `down` (with the reason;
        its agents are unknown while cao reconnects) or `idle` (not connected: no agents yet)."""
        connection = self.connection_of(host.name) if self.connection_of is not None else None
        return {**host.as_json(), "agents": load[host.name], "connection": connection or {"status": "idle"}}

    async def drain(self, name: str) -> dict:
        """No new agents go to the host; those there keep running."""
        check_name(name)
        record = await self.store.run(self.tables.set_state, name, "draining")
        if record is None:
            raise NotFound(f"no host {name}")
        return record.as_json()

    async def remove(self, name: str) -> None:
        host = await self._host(name)
        running = (await self._load())[name]
        if running:
            raise Conflict(
                f"host {name} runs {running} agent(s): drain it (`cao host drain {name}`) and delete them first"
            )
        if self.disconnect is not None:
            await self.disconnect(name)
        await close_master(host, control_dir(self.tmp_dir), self.environ)
        await self.store.run(self.tables.delete_host, name)

    async def check(self, name: str) -> dict:
        host = await self._host(name)
        return (await self._check(host)).as_json()

    def connector(
        self,
        bus: EventBus,
        spawn: Callable[[Coroutine[Any, Any, Any], str], Any],
        socket_name: str,
        api_socket: str,
        token: Callable[[], str],
        dead_after_s: float,
    ) -> Callable[[str], Awaitable[RemoteTmuxBackend | None]]:
        """How the terminal backend gets a registered host's adapter (None: no such host)."""

        async def connect(name: str) -> RemoteTmuxBackend | None:
            record = await self.store.run(self.tables.get_host, name)
            if record is None:
                return None
            target, port = str(record.target), record.target.port
            link = SshLink(
                destination(record),
                link_path(control_dir(self.tmp_dir), record),
                self.environ,
                lambda text: ssh_failure(SshResult(255, "", text), target, port, OPEN_TIMEOUT_S),
            )
            # The host's own tmux server, named after this cao home's (a test's simulated hosts
            # share a machine, and one host may serve several cao homes).
            return RemoteTmuxBackend(
                name, link, f"{socket_name}-{name}", bus, api_socket, token, dead_after_s, spawn=spawn
            )

        return connect

    async def stop(self) -> None:
        """End the master connection of every host (each would linger ControlPersist)."""
        sockets = control_dir(self.tmp_dir)
        for host in await self.store.run(self.tables.list_hosts):
            try:
                await close_master(host, sockets, self.environ)
            except OSError as exc:
                log.warning("could not end the ssh connection to host %s: %s", host.name, exc)

    async def _host(self, name: str) -> HostRecord:
        check_name(name)
        record = await self.store.run(self.tables.get_host, name)
        if record is None:
            raise NotFound(f"no host {name}")
        return record

    async def _check(self, host: HostRecord) -> CheckReport:
        clis, unplaceable = _provider_clis()
        binaries = ["tmux", "python3", *CAO_TOOLS, *sorted(set(clis.values()))]
        target = str(host.target)
        result = await run_on_host(
            host, control_dir(self.tmp_dir), probe_words(binaries), CHECK_TIMEOUT_S, self.environ
        )
        if result.timed_out or result.exit_code == 255:  # ssh's own failure (the probe never exits 255)
            reason = ssh_failure(result, target, host.target.port, CHECK_TIMEOUT_S)
            return CheckReport(host.name, target, False, [CheckItem("ssh", "connection", False, reason)])
        reached = CheckItem("ssh", "connection", True, f"connected to {target}")
        try:
            if result.exit_code != 0:
                raise ProbeUnreadable(f"the probe exited with {result.exit_code}: {_last_line(result.stderr)}")
            values = parse_probe(result.stdout)
        except ProbeUnreadable as exc:
            failed = CheckItem("probe", "requirement", False, str(exc), "check that the host has a POSIX sh")
            return CheckReport(host.name, target, False, [reached, failed])
        items = [reached, *report_items(values, clis, unplaceable)]
        return CheckReport(host.name, target, is_ready(items), items)


def _provider_clis() -> tuple[dict[str, str], dict[str, str]]:
    """Every registered provider (built-in or by entry point) → the command its agents run on a
    host (`Provider.command_on_host`); apart, those whose command is not a plain name (a path of
    this machine, which a host cannot be asked for)."""
    clis, unplaceable = {}, {}
    for name in provider_names():
        try:
            command = get_provider(name).command_on_host
        except InvalidInput:  # a plugin provider that does not load is left out
            continue
        if BINARY_RE.fullmatch(command):
            clis[name] = command
        else:
            unplaceable[name] = command
    return clis, unplaceable


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.replace("\r", "").split("\n") if line.strip()]
    return lines[-1][:200] if lines else "nothing on stderr"
