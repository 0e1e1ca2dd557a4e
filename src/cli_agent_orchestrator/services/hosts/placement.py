"""Where an agent runs: the host a request (or its profile) names, else its caller's host, else
the placement policy (CAO_PLACEMENT):

- `local` (the default): this machine;
- `least-loaded`: the active host with room that runs the fewest agents now (ties: the name
  first in order), and this machine when no host has room.

A named host must be registered, active (not draining) and below its `max_agents`; each of
these is a clear refusal naming the host, before anything is started.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ...errors import InvalidInput
from .records import HostRecord

LOCAL = "local"
POLICIES = ("local", "least-loaded")


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise InvalidInput(f"unknown placement policy {policy!r} (CAO_PLACEMENT): use {' or '.join(POLICIES)}")
    return policy


def choose(
    requested: str | None,
    caller_host: str | None,
    hosts: Iterable[HostRecord],
    live_hosts: Iterable[str | None],
    policy: str,
) -> str | None:
    """The host's name, or None for this machine. `live_hosts`: the host of each live agent."""
    registry = {h.name: h for h in hosts}
    load = Counter(h for h in live_hosts if h is not None)
    if requested == LOCAL:
        return None
    if requested is not None:
        record = registry.get(requested)
        if record is None:
            raise InvalidInput(f"unknown host {requested!r}: add it with `cao host add`, see `cao host list`")
        _check_room(record, load[record.name])
        return record.name
    if caller_host is not None and caller_host in registry:
        record = registry[caller_host]
        if record.state == "active" and _has_room(record, load[record.name]):
            return record.name  # a worker works beside its caller, on the same files
    if check_policy(policy) == LOCAL:
        return None
    open_hosts = [h for h in registry.values() if h.state == "active" and _has_room(h, load[h.name])]
    if not open_hosts:
        return None
    return min(open_hosts, key=lambda h: (load[h.name], h.name)).name


def _has_room(record: HostRecord, running: int) -> bool:
    return record.max_agents is None or running < record.max_agents


def _check_room(record: HostRecord, running: int) -> None:
    if record.state != "active":
        raise InvalidInput(f"host {record.name!r} is draining: no new agents are placed there (`cao host list`)")
    if not _has_room(record, running):
        raise InvalidInput(f"host {record.name!r} is full: it runs {running} of its {record.max_agents} agents")
