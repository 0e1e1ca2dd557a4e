"""Hosts as the API and the CLI see them: add, list, get, check, drain, remove; and the end
of every host's SSH master connection when the server stops.

Invariant: a host is stored only after its name, target, identity and limit passed the checks
in records.py, so nothing read back from the registry can become an ssh option.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

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
from .ssh import close_master, control_dir, run_on_host

log = logging.getLogger(__name__)
CHECK_TIMEOUT_S = 30.0  # the connection (ConnectTimeout 10s, then the login) and the probe


class HostService:
    def __init__(self, tmp_dir: Path, store: Store, tables: HostTables, environ: Mapping[str, str]):
        self.tmp_dir = tmp_dir  # the ControlMaster sockets live in its `ssh/`
        self.store = store
        self.tables = tables
        self.environ = dict(environ)  # ssh's environment: the user's agent socket, locale

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
        return [h.as_json() for h in await self.store.run(self.tables.list_hosts)]

    async def get(self, name: str) -> dict:
        return (await self._host(name)).as_json()

    async def drain(self, name: str) -> dict:
        """No new agents go to the host; those there keep running."""
        check_name(name)
        record = await self.store.run(self.tables.set_state, name, "draining")
        if record is None:
            raise NotFound(f"no host {name}")
        return record.as_json()

    async def remove(self, name: str) -> None:
        host = await self._host(name)
        await close_master(host, control_dir(self.tmp_dir), self.environ)
        await self.store.run(self.tables.delete_host, name)

    async def check(self, name: str) -> dict:
        host = await self._host(name)
        return (await self._check(host)).as_json()

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
        clis = _provider_clis()
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
        items = [reached, *report_items(values, clis)]
        return CheckReport(host.name, target, is_ready(items), items)


def _provider_clis() -> dict[str, str]:
    """Provider → the CLI it runs, for the providers whose binary is a plain command name
    (a provider that runs a local path, like the mock agent's, has nothing to look for)."""
    clis = {}
    for name in provider_names():
        try:
            binary = get_provider(name).binary
        except InvalidInput:  # a plugin provider that does not load is left out
            continue
        if BINARY_RE.fullmatch(binary):
            clis[name] = binary
    return clis


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.replace("\r", "").split("\n") if line.strip()]
    return lines[-1][:200] if lines else "nothing on stderr"
