"""Which local user opened the client end of a TCP connection, as the kernel records it.

Why: HTTP on loopback carries no identity, but the kernel keeps the creator's uid on every
socket. One NETLINK_SOCK_DIAG exact lookup by the 4-tuple (inet_diag, what `ss` uses) costs
tens of microseconds; /proc/net/tcp{,6} is the fallback. Linux only: elsewhere, and for a
socket no process holds any more, the owner is unknown (None) and callers ask for a token.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 2
INET_DIAG_NOCOOKIE = 0xFFFFFFFF
ALL_TCP_STATES = 0xFFFFFFFF
# A socket its process has closed lingers (FIN_WAIT, TIME_WAIT mini-sockets report uid 0)
# with no inode: a client that closes right after sending must not pass for root, so only
# a socket some process still holds (inode != 0) has an owner.
NO_INODE = 0
NETLINK_TIMEOUT_S = 0.5  # the kernel answers within the sendmsg; this only bounds a broken stack

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_REQ_HEAD = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, ext, pad, states
_PORTS = struct.Struct("!HH")  # inet_diag_sockid: sport, dport (network order)
_IF_COOKIE = struct.Struct("=III")  # inet_diag_sockid: interface, cookie[2]
# inet_diag_msg: family, state, timer, retrans, sockid (48 bytes), expires, rqueue, wqueue, uid
_MSG_HEAD = struct.Struct("=BBBB")
_MSG_ENDS = struct.Struct("!HH16s16s")  # the found socket's sport, dport, src, dst
_MSG_UID_INODE = struct.Struct("=II")
_MSG_UID_OFFSET = 4 + 48 + 12
_V4_MAPPED_PREFIX = b"\0" * 10 + b"\xff\xff"

PROC_TCP = "/proc/net/tcp"
PROC_TCP6 = "/proc/net/tcp6"

# Once netlink has named one socket in this process, its "no such socket" is believed: a
# /proc scan walks the kernel's whole connection hash (milliseconds) and would find nothing more.
_netlink_proven = False

Address = tuple[str, int]


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and their IPv4-mapped forms (a dual-stack listener's view of 127.x)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def socket_owner_uid(client: Address, server: Address, *, use_netlink: bool = True) -> int | None:
    """The uid that created the socket whose local end is `client` and remote end `server`
    (the two ends as the server sees them: scope["client"], scope["server"]), or None.
    `use_netlink=False` goes straight to the /proc fallback."""
    global _netlink_proven
    if not sys.platform.startswith("linux"):
        return None
    try:
        family, client_raw, server_raw = _packed(client[0], server[0])
    except ValueError:
        return None
    if use_netlink:
        answered, uid = _ask_netlink(family, client_raw, client[1], server_raw, server[1])
        if answered:
            _netlink_proven = True
            return uid
        if _netlink_proven:
            return None
    return _scan_proc(client_raw, client[1], server_raw, server[1])


def _packed(client_host: str, server_host: str) -> tuple[int, bytes, bytes]:
    a = ipaddress.ip_address(client_host.split("%", 1)[0])
    b = ipaddress.ip_address(server_host.split("%", 1)[0])
    a4 = a if a.version == 4 else a.ipv4_mapped
    b4 = b if b.version == 4 else b.ipv4_mapped
    if a4 is not None and b4 is not None:
        # The IPv4 table holds IPv4 sockets and dual-stack sockets talking IPv4 alike.
        return socket.AF_INET, a4.packed, b4.packed
    if a.version == 6 and b.version == 6:
        return socket.AF_INET6, a.packed, b.packed
    raise ValueError("mixed address families")


def _ask_netlink(family: int, src: bytes, sport: int, dst: bytes, dport: int) -> tuple[bool, int | None]:
    """(answered, uid): answered is False when netlink could not say (no socket family,
    no tcp_diag handler, no such socket), so the caller may try /proc."""
    body = (
        _REQ_HEAD.pack(family, socket.IPPROTO_TCP, 0, 0, ALL_TCP_STATES)
        + _PORTS.pack(sport, dport)
        + src.ljust(16, b"\0")
        + dst.ljust(16, b"\0")
        + _IF_COOKIE.pack(0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE)
    )
    request = _NLMSGHDR.pack(_NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(NETLINK_TIMEOUT_S)
            nl.send(request)
            reply = nl.recv(8192)
    except (OSError, AttributeError):  # AttributeError: a Python built without AF_NETLINK
        return False, None
    if len(reply) < _NLMSGHDR.size:
        return False, None
    _length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(reply)
    msg = reply[_NLMSGHDR.size :]
    if kind == NLMSG_ERROR or kind != SOCK_DIAG_BY_FAMILY or len(msg) < _MSG_UID_OFFSET + _MSG_UID_INODE.size:
        return False, None
    found_family, _state, _timer, _retrans = _MSG_HEAD.unpack_from(msg)
    found_sport, found_dport, found_src, found_dst = _MSG_ENDS.unpack_from(msg, _MSG_HEAD.size)
    # An exact lookup that misses the connected sockets falls through to listeners: only a
    # socket with exactly our two ends is the client's.
    if (
        (found_sport, found_dport) != (sport, dport)
        or _address(found_family, found_src) != src
        or _address(found_family, found_dst) != dst
    ):
        return False, None
    uid, inode = _MSG_UID_INODE.unpack_from(msg, _MSG_UID_OFFSET)
    return True, (None if inode == NO_INODE else uid)


def _address(family: int, raw16: bytes) -> bytes:
    """An address from inet_diag in the form _packed() uses (IPv4 as 4 bytes)."""
    if family == socket.AF_INET:
        return raw16[:4]
    return raw16[12:] if raw16.startswith(_V4_MAPPED_PREFIX) else raw16


def _proc_hex(raw: bytes, port: int) -> str:
    # /proc prints each 32-bit word of the address as a host-order integer.
    words = struct.unpack(f"={len(raw) // 4}I", raw)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def _scan_proc(src: bytes, sport: int, dst: bytes, dport: int) -> int | None:
    """The slow path: one pass over the kernel's socket tables; each read walks the whole
    connection hash, 2-4 ms on the CI machine."""
    wanted = []
    if len(src) == 4:
        wanted.append((PROC_TCP, _proc_hex(src, sport), _proc_hex(dst, dport)))
        # A dual-stack socket talking IPv4 is listed in tcp6 as ::ffff:a.b.c.d.
        wanted.append((PROC_TCP6, _proc_hex(_V4_MAPPED_PREFIX + src, sport), _proc_hex(_V4_MAPPED_PREFIX + dst, dport)))
    else:
        wanted.append((PROC_TCP6, _proc_hex(src, sport), _proc_hex(dst, dport)))
    for path, local, remote in wanted:
        try:
            with open(path, encoding="ascii") as table:
                next(table, None)  # header
                for line in table:
                    fields = line.split()
                    if len(fields) > 9 and fields[1] == local and fields[2] == remote:
                        return None if int(fields[9]) == NO_INODE else int(fields[7])
        except OSError:
            continue
    return None
