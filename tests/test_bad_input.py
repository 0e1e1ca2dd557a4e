"""Bad input gets a clear 4xx with a one-line reason, never a 500, and loses nothing."""
from __future__ import annotations

import pytest

from conftest import CaoServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = CaoServer(tmp_path_factory.mktemp("bad") / "home").start()
    srv.term = srv.create_session()
    try:
        yield srv
    finally:
        srv.cleanup()


def _detail(resp) -> str:
    body = resp.json()
    assert "detail" in body, body
    return str(body["detail"])


@pytest.mark.parametrize("method,path", [
    ("get", "/terminals/deadbeef"),
    ("post", "/terminals/deadbeef/exit"),
    ("delete", "/terminals/deadbeef"),
    ("get", "/terminals/deadbeef/output"),
    ("get", "/terminals/deadbeef/working-directory"),
    ("get", "/sessions/cao-nope"),
    ("delete", "/sessions/cao-nope"),
])
def test_unknown_ids_are_404(server, method, path):
    resp = getattr(server.client, method)(path)
    assert resp.status_code == 404 and _detail(resp)


def test_unknown_terminal_input_and_inbox_are_404(server):
    assert server.client.post("/terminals/deadbeef/input", json={"message": "x"}).status_code == 404
    resp = server.client.post("/terminals/deadbeef/inbox/messages", json={"sender_id": "me", "message": "x"})
    assert resp.status_code == 404 and "deadbeef" in _detail(resp)


@pytest.mark.parametrize("bad_id", ["DEADBEEF", "xyz", "deadbeef0", "dead%20beef", "..%2f..%2fetc"])
def test_malformed_terminal_ids_are_422(server, bad_id):
    assert server.client.get(f"/terminals/{bad_id}").status_code in (404, 422)
    assert server.client.post(f"/terminals/{bad_id}/input", json={"message": "x"}).status_code in (404, 422)


def test_bad_bodies_and_parameters(server):
    tid = server.term["id"]
    cases = [
        server.client.post(f"/terminals/{tid}/input", json={}),
        server.client.post(f"/terminals/{tid}/input", json={"message": ""}),
        server.client.post(f"/terminals/{tid}/input", json={"message": 5}),
        server.client.post(f"/terminals/{tid}/input", json={"message": "x", "surprise": 1}),
        server.client.post(f"/terminals/{tid}/input", content=b"\xff\xfe{not json",
                           headers={"content-type": "application/json"}),
        server.client.post(f"/terminals/{tid}/input", json={"message": "x" * 1_000_001}),
        server.client.post(f"/terminals/{tid}/key", params={"key": "rm -rf"}),
        server.client.post(f"/terminals/{tid}/key", params={"key": ""}),
        server.client.get(f"/terminals/{tid}/output", params={"mode": "everything"}),
        server.client.get(f"/terminals/{tid}/inbox/messages", params={"status": "lost"}),
        server.client.get(f"/terminals/{tid}/inbox/messages", params={"limit": 0}),
        server.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli",
                                                "session_name": "bad name;rm"}),
        server.client.post("/sessions", params={"agent_profile": "../../etc/passwd", "provider": "mock_cli"}),
        server.client.post("/sessions", params={"agent_profile": "developer", "provider": "no_such_cli"}),
        server.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli",
                                                "working_directory": "/no/such/dir"}),
        server.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli",
                                                "model": "bad model $(x)"}),
        server.client.post("/sessions", params={"provider": "mock_cli"}),
        server.client.post("/terminals/run-step", json={"agent": "developer"}),
        server.client.post("/terminals/run-step", json={"agent": "developer", "prompt": "x", "timeout": -1}),
    ]
    for resp in cases:
        assert 400 <= resp.status_code < 500, (resp.request.url, resp.status_code, resp.text)
        assert _detail(resp)
    # Nothing was lost or broken: the terminal still works.
    server.send(tid, "still fine")
    server.wait_status(tid, "completed")


def test_unknown_profile_is_404_with_reason(server):
    resp = server.client.post("/sessions", params={"agent_profile": "ghost", "provider": "mock_cli"})
    assert resp.status_code == 404 and "ghost" in _detail(resp)


def test_duplicate_session_name_is_refused(server):
    name = server.term["session_name"]
    resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli",
                                                   "session_name": name})
    assert resp.status_code == 400 and "exists" in _detail(resp)


def test_cross_origin_state_change_is_refused_but_reads_are_served(server):
    tid = server.term["id"]
    host = f"127.0.0.1:{server.port}"
    evil = {"Origin": "http://evil.example", "Host": host}
    resp = server.client.post(f"/terminals/{tid}/input", json={"message": "pwn"}, headers=evil)
    assert resp.status_code == 403 and _detail(resp) == "Cross-origin request blocked"
    assert server.client.delete(f"/terminals/{tid}", headers=evil).status_code == 403
    assert server.client.get(f"/terminals/{tid}", headers=evil).status_code == 200
    same = {"Origin": f"http://{host}", "Host": host}
    assert server.client.post(f"/terminals/{tid}/key", params={"key": "Left"}, headers=same).status_code == 200
    dev = {"Origin": "http://localhost:5173", "Host": host}
    assert server.client.post(f"/terminals/{tid}/key", params={"key": "Left"}, headers=dev).status_code == 200


def test_foreign_host_header_is_refused(server):
    resp = server.client.get("/health", headers={"Host": "attacker.example:9889"})
    assert resp.status_code == 400 and _detail(resp) == "Invalid host header"
    assert server.client.get("/health", headers={"Host": f"localhost:{server.port}"}).status_code == 200


def test_openapi_is_served(server):
    spec = server.client.get("/openapi.json").json()
    assert "/terminals/{terminal_id}/input" in spec["paths"]
    assert "/terminals/{receiver_id}/inbox/messages" in spec["paths"]


def test_providers_are_listed_with_their_binaries(server):
    providers = {p["name"]: p for p in server.client.get("/agents/providers").json()}
    assert providers["mock_cli"]["installed"] is True


def test_provider_whose_cli_is_missing_is_refused_before_anything_starts(server, monkeypatch):
    before = server.client.get("/terminals").json()
    resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": "claude_code"})
    if resp.status_code == 201:  # the CLI happens to be installed on this machine
        server.client.delete(f"/terminals/{resp.json()['id']}")
        return
    assert resp.status_code == 400
    assert "claude" in _detail(resp)
    assert server.client.get("/terminals").json() == before
