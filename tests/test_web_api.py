"""The web UI's server side, driven as any client would (httpx, websockets) against a real
cao-server with mock agents: browser sign-in (one-time ticket -> cookie, per port), the
browser rule (Fetch metadata needs a session), the terminal WebSocket (contract §3.6), the
board, a waiting agent's menu, the launch preview and deleted agents' scrollback.
The same flows in a real browser are in test_web_ui.py.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets
from browser_support import cao_ui
from conftest import CaoServer, wait_until

from cli_agent_orchestrator.services.prompts import menu_options
from cli_agent_orchestrator.web.logins import Logins

SAME_ORIGIN = {"sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"}


def ws_url(cao: CaoServer, terminal_id: str) -> str:
    return cao.url.replace("http://", "ws://") + f"/terminals/{terminal_id}/ws"


def sign_in(cao: CaoServer) -> str:
    """A browser session cookie, obtained the way the page does: ticket from the owner, login."""
    ticket = cao.client.post("/ui/tickets")
    assert ticket.status_code == 201, ticket.text
    resp = cao.client.post(
        "/ui/login", json={"ticket": ticket.json()["ticket"]}, headers={**SAME_ORIGIN, "origin": cao.url}
    )
    assert resp.status_code == 204, resp.text
    cookie = resp.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    return cookie.split(";", 1)[0]


async def read_until(sock, needle: bytes, timeout: float = 10) -> bytes:
    got = b""
    deadline = time.monotonic() + timeout
    while needle not in got:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} not seen in {got[-400:]!r}")
        frame = await asyncio.wait_for(sock.recv(), left)
        assert isinstance(frame, bytes), f"server frames are binary, got {frame!r}"
        got += frame
    return got


# --- sign-in and the browser rule ------------------------------------------------------------
def test_a_browser_needs_a_session_which_a_one_time_ticket_opens(cao: CaoServer):
    # The owner's scripts need nothing; the same user's browser does (any site can drive it).
    assert cao.client.get("/ui/board").status_code == 200
    refused = cao.client.get("/ui/board", headers=SAME_ORIGIN)
    assert refused.status_code == 401 and "cao ui" in refused.json()["detail"]
    assert cao.client.get("/terminals", headers={"sec-fetch-site": "none"}).status_code == 401
    # The page shell and its assets are open to a browser that has not signed in (no data).
    assert cao.client.get("/", headers=SAME_ORIGIN).status_code == 200
    cookie = sign_in(cao)
    ok = cao.client.get("/ui/board", headers={**SAME_ORIGIN, "cookie": cookie})
    assert ok.status_code == 200 and "terminals" in ok.json()
    # Typed in the address bar ("none") is the user's own request too; another site's is not.
    assert cao.client.get("/terminals", headers={"sec-fetch-site": "none", "cookie": cookie}).status_code == 200
    for site in ("cross-site", "same-site"):
        resp = cao.client.get("/terminals", headers={"sec-fetch-site": site, "cookie": cookie})
        assert resp.status_code == 403, (site, resp.text)
    # A made-up cookie admits nothing.
    forged = cookie.split("=", 1)[0] + "=forged"
    assert cao.client.get("/terminals", headers={**SAME_ORIGIN, "cookie": forged}).status_code == 401
    # Logging out ends the session.
    out = cao.client.post("/ui/logout", headers={**SAME_ORIGIN, "cookie": cookie, "origin": cao.url})
    assert out.status_code == 204
    assert cao.client.get("/terminals", headers={**SAME_ORIGIN, "cookie": cookie}).status_code == 401


def test_a_ticket_works_once_and_a_browser_session_cannot_mint_more(cao: CaoServer):
    ticket = cao.client.post("/ui/tickets").json()
    assert ticket["path"] == f"/login#{ticket['ticket']}"  # in the fragment: never sent to a server
    first = cao.client.post("/ui/login", json={"ticket": ticket["ticket"]}, headers=SAME_ORIGIN)
    assert first.status_code == 204
    again = cao.client.post("/ui/login", json={"ticket": ticket["ticket"]}, headers=SAME_ORIGIN)
    assert again.status_code == 401 and "already used or has expired" in again.json()["detail"]
    bogus = cao.client.post("/ui/login", json={"ticket": "x" * 43}, headers=SAME_ORIGIN)
    assert bogus.status_code == 401
    cookie = first.headers["set-cookie"].split(";", 1)[0]
    minted = cao.client.post("/ui/tickets", headers={**SAME_ORIGIN, "cookie": cookie, "origin": cao.url})
    assert minted.status_code == 403
    # Malformed bodies get a clear 422 and echo nothing.
    for body in ({}, {"ticket": ""}, {"ticket": "a" * 500}, {"ticket": "t", "extra": 1}):
        resp = cao.client.post("/ui/login", json=body, headers=SAME_ORIGIN)
        assert resp.status_code == 422, (body, resp.text)


def test_sessions_of_two_servers_on_one_host_stay_apart(cao_factory):
    a, b = cao_factory("a").start(), cao_factory("b").start()
    cookie_a = sign_in(a)
    assert cookie_a.startswith(f"cao_ui_{a.port}=")  # cookies ignore ports: the name carries it
    assert b.client.get("/terminals", headers={**SAME_ORIGIN, "cookie": cookie_a}).status_code == 401


def test_cli_ui_prints_a_working_one_time_link(cao: CaoServer):
    out = cao_ui(cao, "--json")
    assert out.returncode == 0, out.stderr
    link = json.loads(out.stdout)
    assert link["url"].startswith(f"{cao.url}/login#") and link["opened"] is False
    ticket = link["url"].split("#", 1)[1]
    assert cao.client.post("/ui/login", json={"ticket": ticket}, headers=SAME_ORIGIN).status_code == 204
    text = cao_ui(cao, "--no-browser")
    assert text.returncode == 0 and f"{cao.url}/login#" in text.stdout and "works once" in text.stdout


def test_logins_expire_and_are_kept_only_as_digests():
    now = [1000.0]
    logins = Logins(clock=lambda: now[0])
    ticket = logins.new_ticket()
    assert ticket not in repr(logins.__dict__)
    now[0] += 121
    assert logins.redeem(ticket) is None  # a ticket lives two minutes
    session = logins.redeem(logins.new_ticket())
    assert session is not None and logins.check(session)
    now[0] += 11 * 3600
    assert logins.check(session)  # use extends it
    now[0] += 13 * 3600
    assert not logins.check(session)


# --- the page ------------------------------------------------------------------------------
def test_the_page_is_served_with_a_strict_policy_and_api_routes_win(cao: CaoServer):
    page = cao.client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["referrer-policy"] == "no-referrer"
    assert '<script type="module" src="/assets/app.js"' in page.text
    assert cao.client.get("/login").text == page.text
    script = cao.client.get("/assets/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert cao.client.get("/assets/../auth-token").status_code == 404
    assert cao.client.get("/assets/nope.js").status_code == 404
    assert cao.client.get("/health").json()["status"] in ("ok", "degraded")  # the API keeps its paths


# --- board, prompt, preview, deleted ---------------------------------------------------------
def test_board_has_status_since_pending_inbox_and_callers(cao: CaoServer):
    sup = cao.create_session()
    cao.wait_status(sup["id"], "idle")
    worker = cao.client.post(
        f"/sessions/{sup['session_name']}/terminals",
        params={"agent_profile": "developer", "provider": "mock_cli", "caller_id": sup["id"]},
    )
    assert worker.status_code == 201, worker.text
    wid = worker.json()["id"]
    cao.wait_status(wid, "idle")
    cao.send(wid, "__mock_sleep_8")  # busy, so the next message waits in its inbox
    cao.wait_status(wid, "processing")
    queued = cao.client.post(f"/terminals/{wid}/inbox/messages", json={"sender_id": sup["id"], "message": "later"})
    assert queued.status_code == 200, queued.text
    board = cao.client.get("/ui/board").json()
    rows = {r["id"]: r for r in board["terminals"]}
    assert rows[wid]["caller_id"] == sup["id"] and rows[sup["id"]]["caller_id"] is None
    assert rows[wid]["pending_inbox"] == 1 and rows[sup["id"]]["pending_inbox"] == 0
    assert rows[wid]["status"] == "processing" and rows[wid]["status_source"]
    assert rows[wid]["status_since"] >= rows[sup["id"]]["status_since"]
    assert sup["session_name"] in [s["name"] if isinstance(s, dict) else s for s in board["sessions"]]


def test_waiting_prompt_lists_the_menu_and_an_option_answers_it(cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    assert cao.client.get(f"/terminals/{tid}/prompt").json()["options"] == []
    cao.send(tid, "__mock_ask__")
    cao.wait_status(tid, "waiting_user_answer")
    prompt = cao.client.get(f"/terminals/{tid}/prompt").json()
    assert "proceed with the change?" in prompt["question"]
    assert prompt["options"] == [{"key": "1", "label": "Yes"}, {"key": "2", "label": "No"}]
    assert cao.client.post(f"/terminals/{tid}/input", json={"message": "1"}).status_code == 200
    cao.wait_status(tid, {"completed", "idle"})
    assert cao.client.get("/terminals/nothexid/prompt").status_code == 422
    assert cao.client.get("/terminals/deadbeef/prompt").status_code == 404


def test_menu_options_read_numbered_rows_and_nothing_else():
    screen = "\n".join(
        [
            "Step 1. was done",  # a numbered sentence in prose, before the menu
            "Do you want to proceed?",
            "❯ 1. Yes",
            "  2. Yes, and don't ask again",
            "  3) No, and tell me what to do (esc)",
            "│ 7. stray │",
        ]
    )
    assert [(o.key, o.label) for o in menu_options(screen)] == [
        ("1", "Yes"),
        ("2", "Yes, and don't ask again"),
        ("3", "No, and tell me what to do (esc)"),
    ]
    assert menu_options("nothing to pick") == []


def test_launch_preview_is_what_cao_launch_shows(cao: CaoServer):
    resp = cao.client.get("/ui/launch-preview", params={"agent_profile": "reviewer", "provider": "mock_cli"})
    assert resp.status_code == 200, resp.text
    preview = resp.json()
    assert preview["profile"] == "reviewer" and preview["provider"] == "mock_cli"
    assert "fs_write" not in preview["tools"] and "fs_read" in preview["tools"]
    own = cao.client.get(
        "/ui/launch-preview", params={"agent_profile": "developer", "allowed_tools": "fs_read, execute_bash"}
    ).json()
    assert own["tools"] == ["fs_read", "execute_bash"] and own["tools_source"] == "allowed_tools"
    assert cao.client.get("/ui/launch-preview", params={"agent_profile": "no-such-profile"}).status_code in (400, 404)
    assert cao.client.get("/ui/launch-preview", params={"agent_profile": "../etc"}).status_code in (400, 404, 422)


def test_deleted_agents_keep_their_scrollback_for_the_page(cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    cao.send(tid, "remember this line")
    cao.wait_status(tid, "completed")
    assert cao.client.delete(f"/terminals/{tid}").status_code == 200
    deleted = cao.client.get("/ui/deleted").json()
    assert [d["terminal_id"] for d in deleted] == [tid] and deleted[0]["agent_profile"] == "developer"
    text = cao.client.get(f"/ui/deleted/{tid}/scrollback")
    assert text.status_code == 200 and "remember this line" in text.text
    assert cao.client.get("/ui/deleted/deadbeef/scrollback").status_code == 404
    assert cao.client.get("/ui/deleted/..%2f..%2fetc/scrollback").status_code in (404, 422)


def test_board_events_carry_status_but_never_output(cao: CaoServer):
    import httpx

    seen: list[dict] = []
    with httpx.stream("GET", f"{cao.url}/ui/events", timeout=30) as stream:
        tid = cao.create_session()["id"]
        lines = stream.iter_lines()
        deadline = time.monotonic() + 20
        sent = False
        for line in lines:
            if line.startswith("data: "):
                event = json.loads(line[6:])
                seen.append(event)
                if event["type"] == "StatusChanged" and event["status"] == "idle" and not sent:
                    cao.send(tid, "hello board")
                    sent = True
                if event["type"] == "StatusChanged" and event["status"] == "completed":
                    break
            assert time.monotonic() < deadline, seen
    types = {e["type"] for e in seen}
    assert {"TerminalSpawned", "StatusChanged"} <= types
    assert not types & {"TerminalOutput", "ScreenSnapshot", "HookReceived", "ComposerChanged"}


# --- the terminal WebSocket ------------------------------------------------------------------
@pytest.mark.anyio
async def test_terminal_socket_streams_the_screen_and_takes_input(cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    async with websockets.connect(ws_url(cao, tid)) as sock:
        opening = await read_until(sock, b"\x1b[8;")
        assert b"\x1b[8;50;220t" in opening  # the pane's size, in band, before anything else
        await sock.send(json.dumps({"type": "input", "data": "typed on the web\r"}))
        await read_until(sock, b"MOCK: typed on the web")  # the agent's reply, live
        # Hostile input is only ever bytes for the pane: no tmux command runs.
        await sock.send(json.dumps({"type": "input", "data": "; kill-server #{pane_id} $(touch /tmp/x)"}))
        await sock.send(json.dumps({"type": "nonsense"}))  # ignored
        await sock.send(json.dumps({"type": "resize", "rows": "x", "cols": -1}))  # ignored
        await read_until(sock, b"kill-server")
    assert cao.client.get("/health").json()["status"] == "ok"
    await asyncio.to_thread(cao.wait_status, tid, {"completed", "idle"})
    # A second viewer sees the scrollback of what came before it connected.
    async with websockets.connect(ws_url(cao, tid)) as sock:
        await read_until(sock, b"MOCK: typed on the web")


@pytest.mark.anyio
async def test_terminal_socket_resize_changes_the_window_only_when_asked(cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    async with websockets.connect(ws_url(cao, tid)) as sock:
        await read_until(sock, b"\x1b[8;50;220t")
        await sock.send(json.dumps({"type": "resize", "rows": 30, "cols": 100}))
        await read_until(sock, b"\x1b[8;30;100t")  # the pane's new size comes back in band
    sizes = cao.tmux("list-windows", "-a", "-F", "#{window_width}x#{window_height}").stdout
    assert "100x30" in sizes


@pytest.mark.anyio
async def test_terminal_socket_refusals_use_the_contract_close_codes(cao: CaoServer):
    async def close_code(url: str, **kwargs) -> int | None:
        try:
            async with websockets.connect(url, **kwargs) as sock:
                await asyncio.wait_for(sock.recv(), 10)
                await asyncio.wait_for(sock.recv(), 10)
        except websockets.ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd else None
        return None

    tid = cao.create_session()["id"]
    assert await close_code(ws_url(cao, "deadbeef")) == 4004
    assert await close_code(ws_url(cao, "not-an-id")) == 4004
    assert await close_code(ws_url(cao, tid), origin="http://evil.example") == 4403
    # A browser (Fetch metadata) without a session is refused even on the owner's uid.
    assert await close_code(ws_url(cao, tid), additional_headers={"sec-fetch-site": "same-origin"}) == 4401
    # A handshake with an Origin comes from a browser: it needs the browser session (or the token).
    assert await close_code(ws_url(cao, tid), origin=cao.url) == 4401
    cookie = sign_in(cao)
    # A dev-server origin passes the Origin list, but a browser session is for the page's own origin.
    dev = await close_code(ws_url(cao, tid), origin="http://localhost:5173", additional_headers={"cookie": cookie})
    assert dev == 4403
    token = (cao.home / "auth-token").read_text().strip()
    async with websockets.connect(
        ws_url(cao, tid), origin=cao.url, additional_headers={"authorization": f"Bearer {token}"}
    ) as sock:
        await read_until(sock, b"\x1b[8;")
    async with websockets.connect(ws_url(cao, tid) + f"?token={token}", origin=cao.url) as sock:  # §3.6's form
        await read_until(sock, b"\x1b[8;")
    assert await close_code(ws_url(cao, tid) + "?token=wrong", origin=cao.url) == 4401
    async with websockets.connect(ws_url(cao, tid), origin=cao.url, additional_headers={"cookie": cookie}) as sock:
        await read_until(sock, b"\x1b[8;")
        await sock.send("{not json")
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(sock.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003


@pytest.mark.anyio
async def test_terminal_socket_closes_when_the_agent_is_deleted(cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")
    async with websockets.connect(ws_url(cao, tid)) as sock:
        await read_until(sock, b"\x1b[8;")
        assert (await asyncio.to_thread(cao.client.delete, f"/terminals/{tid}")).status_code == 200
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(sock.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_a_fast_printer_reaches_the_socket_in_order(cao: CaoServer):
    tid = cao.create_session()["id"]
    cao.wait_status(tid, "idle")

    async def watch() -> bytes:
        async with websockets.connect(ws_url(cao, tid), max_size=None) as sock:
            await read_until(sock, b"\x1b[8;")
            await asyncio.to_thread(cao.send, tid, "__mock_long_400")
            return await read_until(sock, b"line 400", timeout=60)

    got = asyncio.run(watch())
    text = got.decode("utf-8", "replace")
    positions = [text.find(f"line {n}") for n in (1, 100, 200, 300, 400)]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), positions
    wait_until(lambda: cao.status(tid) in ("completed", "idle"), 30, message="long turn done")
