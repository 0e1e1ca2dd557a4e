"""Strangers: another local user cannot use cao-server, while its owner's clients still can.

Real parts only: real cao-server processes, real sockets and a real second Unix user
(`cao-stranger`, created once), whose requests Debian's /usr/bin/python3 sends under
setpriv. The machine and CI run as root; elsewhere these tests skip.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import stranger_support
from cao_support import CAO, REPO, CaoServer, wait_until
from mcp_support import agent_env, call, mcp_session
from stranger_support import Stranger

from cli_agent_orchestrator.api.auth import OwnerOrToken
from cli_agent_orchestrator.api.peer import socket_owner_uid
from cli_agent_orchestrator.settings import Settings

stranger = stranger_support.stranger  # the fixture, under the name older test modules import
HOOKED = "---\nname: hooked\nprovider: mock_cli\nmock: {hooks: true}\n---\nA mock that reports its turns by hooks.\n"


def token_of(server: CaoServer) -> str:
    return (server.home / "auth-token").read_text().strip()


def raw_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    """A raw urllib client (no proxies, no credentials unless given): status, JSON body, headers."""
    opener = urllib.request.OpenerDirector()  # no HTTPErrorProcessor: a 401 is an answer, not an error
    opener.add_handler(urllib.request.HTTPHandler())
    request = urllib.request.Request(url, headers=headers or {})
    with opener.open(request, timeout=20) as resp:
        return resp.status, json.loads(resp.read()), resp.headers


def install_hooked(server: CaoServer) -> None:
    store = server.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / "hooked.md").write_text(HOOKED)


def run_hook(server: CaoServer, env: dict[str, str], terminal_id: str, event: str) -> None:
    """cao-hook as the terminal's CLI runs it: its identity (and, where hooks carry one, the
    terminal's hook secret) in the environment."""
    identity = {"CAO_TERMINAL_ID": terminal_id}
    if hasattr(server, "hook_secret"):
        identity["CAO_HOOK_SECRET"] = server.hook_secret(terminal_id)
    proc = subprocess.run(
        [sys.executable, "-m", "cli_agent_orchestrator.cli.cao_hook", event],
        input="{}",
        text=True,
        env={**env, **identity},
        timeout=20,
    )
    assert proc.returncode == 0


def wait_hook_applied(server: CaoServer, terminal_id: str, event: str) -> None:
    wait_until(
        lambda: server.client.get(f"/terminals/{terminal_id}").json()["status_source"] == f"hook:{event}",
        timeout=15,
        message=f"{event} from cao-hook applied",
    )


def non_loopback_address() -> str | None:
    """This machine's own address on a real interface (no packet is sent)."""
    candidates = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            candidates.append(probe.getsockname()[0])
        except OSError:
            pass
    try:
        candidates += subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
    except (OSError, subprocess.SubprocessError):
        pass
    for address in candidates:
        ip = ipaddress.ip_address(address)
        if ip.version == 4 and not ip.is_loopback and not ip.is_unspecified:
            return address
    return None


# --- the server refuses strangers ------------------------------------------------------------
def test_a_stranger_is_refused_on_every_route_and_changes_nothing(cao: CaoServer, stranger: Stranger):
    term = cao.create_session()
    tid, session = term["id"], term["session_name"]
    cao.wait_status(tid, {"idle", "completed"})
    attempts = [
        ("GET", "/health", None),
        ("GET", "/terminals", None),
        ("GET", f"/terminals/{tid}/output?mode=full", None),
        ("POST", "/sessions?agent_profile=developer&provider=mock_cli", None),
        ("POST", f"/terminals/{tid}/input", {"message": "echo stranger was here"}),
        ("POST", f"/terminals/{tid}/hooks", {"event": "UserPromptSubmit", "payload": {}}),
        ("GET", "/events", None),
        ("DELETE", f"/sessions/{session}", None),
    ]
    for (method, path, _), answer in zip(attempts, stranger.requests(cao.port, attempts)):
        assert answer["status"] == 403, (method, path, answer)
        detail = json.loads(answer["body"])["detail"]
        assert f"uid {stranger.uid}" in detail and f"uid {os.geteuid()}" in detail and "owner" in detail, detail
        assert str(cao.home) not in answer["body"]
    # Nothing the stranger asked for happened.
    assert [t["id"] for t in cao.client.get("/terminals").json()] == [tid]
    detail = cao.client.get(f"/terminals/{tid}").json()
    assert detail["session_name"] == session and detail["status_source"] != "hook:UserPromptSubmit"
    output = cao.client.get(f"/terminals/{tid}/output", params={"mode": "full"}).json()["output"]
    assert "stranger was here" not in output


def test_a_forwarded_for_header_cannot_borrow_the_owners_connection(cao: CaoServer, stranger: Stranger):
    # uvicorn believes X-Forwarded-For from 127.0.0.1; naming the owner's open connection
    # there must not make the stranger's request look like the owner's.
    with socket.create_connection(("127.0.0.1", cao.port)) as owners:
        owner_port = owners.getsockname()[1]
        forged = {"X-Forwarded-For": f"127.0.0.1:{owner_port}"}
        [answer] = stranger.requests(cao.port, [("GET", "/terminals", None, forged)])
    assert answer["status"] == 401, answer
    assert "forwarded" in json.loads(answer["body"])["detail"]


def test_the_token_admits_a_stranger_and_a_wrong_one_does_not(cao: CaoServer, stranger: Stranger):
    good = {"Authorization": f"Bearer {token_of(cao)}"}
    wrong = {"Authorization": "Bearer " + "x" * 43}
    answers = stranger.requests(
        cao.port, [("GET", "/terminals", None, good), ("GET", "/health", None, wrong), ("GET", "/health", None)]
    )
    assert [a["status"] for a in answers] == [200, 403, 403], answers


def test_the_token_file_is_private_and_kept_across_restarts(cao: CaoServer, stranger: Stranger):
    path = cao.home / "auth-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_uid == os.geteuid()
    token = token_of(cao)
    assert len(token) >= 43 and token.replace("-", "").replace("_", "").isalnum()
    path.chmod(0o644)  # loosened by hand: the next start narrows it again
    cao.stop()
    cao.start()
    assert token_of(cao) == token and stat.S_IMODE(path.stat().st_mode) == 0o600
    # The stranger can neither read it nor use the server without it.
    cat = subprocess.run(
        stranger.argv("import sys; print(open(sys.argv[1]).read())", str(path)),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert cat.returncode != 0 and "Permission denied" in cat.stderr
    assert stranger.requests(cao.port, [("GET", "/health", None)])[0]["status"] == 403


def test_websocket_refusals_close_with_4403_and_4401(
    tmp_path: Path, stranger: Stranger, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("CAO_HOME_DIR", str(tmp_path / "home"))
    reached: list[dict] = []

    async def app(scope, _receive, _send):
        reached.append(scope)

    gate = OwnerOrToken(app, Settings.from_env())
    token = (tmp_path / "home" / "auth-token").read_text().strip()

    def attempt(client: tuple[str, int], server: tuple[str, int], headers=()) -> list[dict]:
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        async def receive() -> dict:
            return {"type": "websocket.connect"}

        scope = {"type": "websocket", "path": "/ws", "client": client, "server": server, "headers": list(headers)}
        asyncio.run(gate(scope, receive, send))
        return sent

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(20)
        holder = stranger.connect("127.0.0.1", listener.getsockname()[1])
        try:
            conn, client = listener.accept()
            with conn:
                server = conn.getsockname()
                accepted, closed = attempt(client, server)  # accepted, so the client reads the code
                assert accepted["type"] == "websocket.accept"
                assert closed["type"] == "websocket.close" and closed["code"] == 4403
                assert attempt(client, server, [(b"authorization", f"Bearer {token}".encode())]) == []
        finally:
            holder.stdin.close()
            holder.wait(20)
    _, closed = attempt(("192.0.2.77", 50000), ("192.0.2.2", 9889))
    assert closed["code"] == 4401
    assert len(reached) == 1


# --- the owner's clients keep working --------------------------------------------------------
@pytest.mark.anyio
async def test_the_owners_clients_work_without_help_while_a_stranger_is_refused(cao: CaoServer, stranger: Stranger):
    install_hooked(cao)
    first, second = cao.create_session("hooked"), cao.create_session()
    assert stranger.requests(cao.port, [("GET", "/terminals", None)])[0]["status"] == 403
    env = {k: v for k, v in cao.env.items() if k not in ("CAO_TERMINAL_ID", "CAO_AUTH_TOKEN")}
    # The cao CLI.
    listed = subprocess.run([CAO, "session", "list", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert {s["name"] for s in json.loads(listed.stdout)} == {first["session_name"], second["session_name"]}
    # cao-mcp-server, through the official MCP client SDK.
    async with mcp_session(agent_env(cao, first["id"])) as session:
        sent = await call(session, "send_message", message="hello from the owner", receiver_id=second["id"])
    assert sent["success"] is True, sent
    # cao-hook.
    run_hook(cao, env, first["id"], "UserPromptSubmit")
    wait_hook_applied(cao, first["id"], "UserPromptSubmit")
    # A raw urllib client that sends no credentials at all.
    status, body, _ = raw_get(f"{cao.url}/terminals")
    assert status == 200 and {t["id"] for t in body} == {first["id"], second["id"]}


def test_workflow_scripts_raw_http_and_shim_run_for_the_owner(cao: CaoServer, stranger: Stranger):
    assert stranger.requests(cao.port, [("POST", "/workflows/runs", {"name_or_path": "x"})])[0]["status"] == 403
    workflows = cao.home / "workflows"
    workflows.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "docs" / "examples" / "loop_raw_http_example.py", workflows)
    (workflows / "one_shim_step.py").write_text(
        "from cao_workflow import emit_output, step\n"
        "handle = step('mock_cli', 'developer', 'via the shim', recovery='idempotent')\n"
        "emit_output({'answer': handle.output})\n"
    )
    for name in ("loop_raw_http_example", "one_shim_step"):
        resp = cao.client.post("/workflows/runs", json={"name_or_path": name, "inputs": {}}, timeout=120)
        assert resp.status_code == 200, resp.text
        assert resp.json()["state"] == "completed", resp.json()
    assert resp.json()["output"] == {"answer": "MOCK: via the shim"}


# --- beyond loopback the token is required ---------------------------------------------------
@pytest.mark.anyio
async def test_a_non_loopback_bind_needs_the_token_which_every_client_sends(
    cao_factory, stranger: Stranger, tmp_path: Path
):
    address = non_loopback_address()
    if address is None:
        pytest.skip("no non-loopback IPv4 address on this machine")
    cao = cao_factory("wide", CAO_API_HOST="0.0.0.0", CAO_ALLOWED_HOSTS=address).start()
    wide = f"http://{address}:{cao.port}"
    token = token_of(cao)

    # Raw HTTP: refused without the token or with a wrong one, admitted with it.
    for headers, wanted in (({}, "a token is required"), ({"Authorization": "Bearer " + "y" * 43}, "invalid")):
        status, body, response_headers = raw_get(f"{wide}/health", headers)
        assert status == 401 and wanted in body["detail"], body
        assert response_headers["WWW-Authenticate"].startswith("Bearer")
    assert raw_get(f"{wide}/health", {"Authorization": f"Bearer {token}"})[0] == 200
    assert raw_get(f"{cao.url}/health")[0] == 200  # the owner on loopback still needs nothing
    [answer] = stranger.requests(cao.port, [("GET", "/terminals", None)], host=address)
    assert answer["status"] == 401 and answer["www_authenticate"].startswith("Bearer")

    # Every client reads the token of its cao home (or CAO_AUTH_TOKEN) and sends it.
    install_hooked(cao)
    first, second = cao.create_session("hooked"), cao.create_session()
    env = {k: v for k, v in cao.env.items() if k not in ("CAO_TERMINAL_ID", "CAO_AUTH_TOKEN")}
    env["CAO_API_HOST"] = address
    elsewhere = {**env, "CAO_HOME_DIR": str(tmp_path / "no-token-here")}
    listed = subprocess.run([CAO, "session", "list", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    refused_cli = subprocess.run([CAO, "session", "list"], env=elsewhere, capture_output=True, text=True, timeout=60)
    assert refused_cli.returncode == 1 and "token is required" in refused_cli.stderr
    by_env = subprocess.run(
        [CAO, "session", "list"], env={**elsewhere, "CAO_AUTH_TOKEN": token}, capture_output=True, text=True, timeout=60
    )
    assert by_env.returncode == 0, by_env.stderr

    async with mcp_session(agent_env(cao, first["id"])) as session:
        sent = await call(session, "send_message", message="over the wire", receiver_id=second["id"])
    assert sent["success"] is True, sent

    run_hook(cao, env, first["id"], "UserPromptSubmit")
    wait_hook_applied(cao, first["id"], "UserPromptSubmit")

    # The cao_workflow shim, with a run id the server does not know: once admitted, the
    # answer is about the run (404 today), not about the token.
    shim = (
        "from cao_workflow import ShimHTTPError, run_step\n"
        "try:\n    run_step('mock_cli', 'developer', 'x')\n"
        "except ShimHTTPError as exc:\n    print(exc.status)\n"
    )
    run_env = {**env, "CAO_API_BASE_URL": wide, "CAO_WORKFLOW_RUN_ID": "wf-nosuchrun", "CAO_WORKFLOW_GENERATION": "1"}
    statuses = {}
    for label, extra in (
        ("home", {}),
        ("env", {"CAO_HOME_DIR": str(tmp_path / "no-token-here"), "CAO_AUTH_TOKEN": token}),
        ("none", {"CAO_HOME_DIR": str(tmp_path / "no-token-here")}),
    ):
        proc = subprocess.run(
            [sys.executable, "-c", shim], env={**run_env, **extra}, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        statuses[label] = int(proc.stdout.strip())
    assert statuses["none"] == 401
    assert statuses["none"] == 401, statuses
    assert statuses["home"] == statuses["env"] and statuses["home"] not in (401, 403), statuses


# --- the peer lookup itself ------------------------------------------------------------------
@pytest.mark.parametrize(
    "family,host,client_host",
    [
        (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
        (socket.AF_INET6, "::1", "::1"),
        (socket.AF_INET6, "::", "127.0.0.1"),  # a dual-stack listener sees ::ffff:127.0.0.1
    ],
)
def test_peer_lookup_names_the_user_who_opened_the_client_socket(
    stranger: Stranger, family: int, host: str, client_host: str
):
    try:
        listener = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_INET6:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind((host, 0))
    except OSError as exc:
        pytest.skip(f"cannot listen on {host}: {exc}")
    with listener:
        listener.listen()
        listener.settimeout(20)
        port = listener.getsockname()[1]
        with socket.create_connection((client_host, port)) as mine:
            conn, client = listener.accept()
            with conn:
                server = conn.getsockname()
                assert client[1] == mine.getsockname()[1]
                assert socket_owner_uid(client[:2], server[:2]) == os.geteuid()
                assert socket_owner_uid(client[:2], server[:2], use_netlink=False) == os.geteuid()
                # The server's own end of the same connection is not the client's socket.
                assert socket_owner_uid((client[0], 1), server[:2]) is None

        holder = stranger.connect(client_host, port)
        try:
            conn, client = listener.accept()
            with conn:
                server = conn.getsockname()
                assert int(holder.stdout.readline()) == client[1]
                assert socket_owner_uid(client[:2], server[:2]) == stranger.uid
                assert socket_owner_uid(client[:2], server[:2], use_netlink=False) == stranger.uid
                holder.stdin.close()
                holder.wait(20)
                # Closed by its process, the socket lingers owned by nobody (the kernel says uid 0):
                # it must not pass for root's.
                assert socket_owner_uid(client[:2], server[:2]) is None
                assert socket_owner_uid(client[:2], server[:2], use_netlink=False) is None
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait(5)
