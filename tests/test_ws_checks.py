"""The terminal WebSocket's gate (api/security.py RequestGate) against a real cao-server: a
handshake from an address that is not loopback is refused (close 4003) unless that address is
in CAO_WS_ALLOWED_CLIENTS, and one with a foreign Origin is refused (close 4403) unless that
origin is in CAO_WS_ALLOWED_ORIGINS; the server's own origin passes. Every connection here
presents the owner's token, so what refuses it can only be the gate under test, never auth.
"""

from __future__ import annotations

import asyncio
import ipaddress

import psutil
import pytest
import websockets
from conftest import CaoServer
from test_web_api import read_until

OPENING = b"\x1b[8;"  # the pane's size: the first bytes of an admitted socket
PEER_REFUSED, ORIGIN_REFUSED = 4003, 4403


def outside_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (the default route's, usually)."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family.name == "AF_INET" and not ipaddress.ip_address(address.address).is_loopback:
                return address.address
    return None


def token(cao: CaoServer) -> str:
    return (cao.home / "auth-token").read_text().strip()


async def admitted_or_code(url: str, bearer: str, **kwargs) -> int | None:
    """None when the socket opens onto the terminal's screen, else the close code it got."""
    headers = {"authorization": f"Bearer {bearer}"}
    try:
        async with websockets.connect(url, additional_headers=headers, **kwargs) as sock:
            await read_until(sock, OPENING)
            return None
    except websockets.ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd else -1


def started_on_all_addresses(cao_factory, address: str, **env: str) -> CaoServer:
    # 0.0.0.0: the harness still reaches it on 127.0.0.1, and `address` reaches it from outside
    # loopback; the Host check must let that address's name in for the gate to be what is tested.
    return cao_factory("home", CAO_API_HOST="0.0.0.0", CAO_ALLOWED_HOSTS=address, **env).start()


@pytest.fixture
def address() -> str:
    found = outside_address()
    if found is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    return found


def ws_url(host: str, cao: CaoServer, terminal_id: str) -> str:
    return f"ws://{host}:{cao.port}/terminals/{terminal_id}/ws"


def test_a_client_outside_loopback_is_refused_even_with_the_token(cao_factory, address: str):
    cao = started_on_all_addresses(cao_factory, address)
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    # The same token over loopback is admitted: only the address differs.
    assert asyncio.run(admitted_or_code(ws_url("127.0.0.1", cao, tid), token(cao))) is None
    assert asyncio.run(admitted_or_code(ws_url(address, cao, tid), token(cao))) == PEER_REFUSED
    # Plain HTTP with the token is not the WebSocket's rule: the address itself reaches the server.
    http = cao.client.get(f"http://{address}:{cao.port}/terminals", headers={"authorization": f"Bearer {token(cao)}"})
    assert http.status_code == 200, http.text


def test_a_client_address_in_the_allowed_list_is_admitted(cao_factory, address: str):
    cao = started_on_all_addresses(cao_factory, address, CAO_WS_ALLOWED_CLIENTS=address)
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    assert asyncio.run(admitted_or_code(ws_url(address, cao, tid), token(cao))) is None
    # Listing one address opens only that one: its token-less form is still auth's to refuse.
    assert asyncio.run(admitted_or_code(ws_url(address, cao, tid), "wrong")) == 4401


def test_a_foreign_origin_is_refused_and_the_servers_own_origin_admitted(cao_factory):
    allowed = "https://console.example"
    cao = cao_factory("home", CAO_WS_ALLOWED_ORIGINS=allowed).start()
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    url, bearer = ws_url("127.0.0.1", cao, tid), token(cao)
    assert asyncio.run(admitted_or_code(url, bearer, origin="http://evil.example")) == ORIGIN_REFUSED
    # Same host, another port: another origin.
    assert asyncio.run(admitted_or_code(url, bearer, origin=f"http://127.0.0.1:{cao.port + 1}")) == ORIGIN_REFUSED
    assert asyncio.run(admitted_or_code(url, bearer, origin=cao.url)) is None
    assert asyncio.run(admitted_or_code(url, bearer, origin=allowed)) is None
    assert asyncio.run(admitted_or_code(url, bearer)) is None  # no Origin: not a browser
