"""A registered host and its SSH target, and the strict checks every name and target passes
before it is stored: whatever a client sends becomes one argv word of `ssh`, never a shell
word or an ssh option, so a target is `[user@]host[:port]` and nothing else.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...errors import InvalidInput

HostState = Literal["active", "draining"]
MAX_NAME = 32
MAX_TARGET = 300  # a user, a 253-character DNS name, a port and the separators
MAX_IDENTITY = 4096
MAX_AGENTS_LIMIT = 1000
DEFAULT_PORT = 22

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
DNS_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
PORT_RE = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True)
class SshTarget:
    """Where ssh connects: `host` is a DNS name or a bare IP literal (no brackets)."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (f"{self.user}@" if self.user else "") + host + (f":{self.port}" if self.port else "")


@dataclass(frozen=True)
class HostRecord:
    name: str
    target: SshTarget
    identity: str | None  # a private key file on the server's machine; None: ssh's own choice
    max_agents: int | None  # None: no limit of cao's own
    state: HostState
    added_at: str

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "ssh": str(self.target),
            "identity": self.identity,
            "max_agents": self.max_agents,
            "state": self.state,
            "added_at": self.added_at,
        }


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(f"invalid host name {_shown(name)}: use 1-{MAX_NAME} of [a-z0-9-], starting with [a-z0-9]")
    return name


def parse_target(text: str) -> SshTarget:
    """`[user@]host[:port]`; an IPv6 literal is bracketed when a port follows (`[::1]:2222`)."""
    if not text or len(text) > MAX_TARGET or text.startswith("-"):
        raise InvalidInput(f"invalid ssh target {_shown(text)}: expected [user@]host[:port]")
    user, at, rest = text.rpartition("@")
    if at and not USER_RE.fullmatch(user):
        raise InvalidInput(f"invalid ssh user {_shown(user)}: use [a-z_][a-z0-9_-]*, at most 32 characters")
    host, port_text = _split_port(rest)
    port = None
    if port_text is not None:
        if not PORT_RE.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
            raise InvalidInput(f"invalid ssh port {_shown(port_text)}: use 1-65535")
        port = int(port_text)
    return SshTarget(_checked_host(host), user or None, port)


def _split_port(rest: str) -> tuple[str, str | None]:
    if rest.startswith("["):
        inside, close, after = rest[1:].partition("]")
        if not close or (after and not after.startswith(":")) or ":" not in inside:
            raise InvalidInput(f"invalid ssh host {_shown(rest)}: brackets hold an IPv6 address only")
        return inside, after[1:] if after else None
    if rest.count(":") == 1:
        host, _, port = rest.partition(":")
        return host, port
    return rest, None  # a bare IPv6 literal has several colons and no port


def _checked_host(host: str) -> str:
    if ":" in host:
        if "%" in host:  # a zone id (fe80::1%eth0) would reach ssh's own %-token expansion
            raise InvalidInput(f"invalid ssh host {_shown(host)}: an IPv6 zone id is not supported")
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            raise InvalidInput(f"invalid ssh host {_shown(host)}: not an IPv6 address") from None
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    labels = host.split(".")
    if len(host) > 253 or not all(DNS_LABEL_RE.fullmatch(label) for label in labels) or labels[-1].isdigit():
        raise InvalidInput(f"invalid ssh host {_shown(host)}: expected a DNS name or an IP address")
    return host.lower()


def check_identity(path: str) -> str:
    """An existing key file, named by an absolute path. ssh expands `%` tokens and `~` in it,
    so neither is accepted: the path is used as written."""
    if (
        len(path) > MAX_IDENTITY
        or not path.startswith("/")
        or any(c in path for c in "%\x00")
        or any(ord(c) < 0x20 for c in path)
    ):
        raise InvalidInput(f"invalid identity {_shown(path)}: give the absolute path of a private key file")
    if not Path(path).is_file():
        raise InvalidInput(f"identity file {path} does not exist (on the cao-server's machine)")
    return path


def check_max_agents(value: int | None) -> int | None:
    if value is not None and not 1 <= value <= MAX_AGENTS_LIMIT:
        raise InvalidInput(f"max_agents must be 1-{MAX_AGENTS_LIMIT}, got {value}")
    return value


def _shown(text: str) -> str:
    """The offending value for a one-line reason: bounded, control characters escaped."""
    return repr(text if len(text) <= 60 else text[:60] + "…")
