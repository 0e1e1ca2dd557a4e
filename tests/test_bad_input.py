"""Bad input gets a clear 4xx with a one-line reason, never a 500, and loses nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cao_support import CaoServer


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


@pytest.mark.parametrize(
    "method,path",
    [
        ("get", "/terminals/deadbeef"),
        ("post", "/terminals/deadbeef/exit"),
        ("delete", "/terminals/deadbeef"),
        ("get", "/terminals/deadbeef/output"),
        ("get", "/terminals/deadbeef/working-directory"),
        ("get", "/sessions/cao-nope"),
        ("delete", "/sessions/cao-nope"),
    ],
)
def test_unknown_ids_are_404(server, method, path):
    resp = getattr(server.client, method)(path)
    assert resp.status_code == 404 and _detail(resp)


def test_unknown_terminal_input_and_inbox_are_404(server):
    assert server.client.post("/terminals/deadbeef/input", json={"message": "x"}).status_code == 404
    resp = server.client.post("/terminals/deadbeef/inbox/messages", json={"sender_id": "me", "message": "x"})
    assert resp.status_code == 404 and "deadbeef" in _detail(resp)


@pytest.mark.parametrize("bad_id", ["DEADBEEF", "xyz", "deadbeef0", "dead%20beef"])
def test_malformed_terminal_ids_are_422(server, bad_id):
    """A path segment that is not 8 lowercase hex characters is refused for its shape (422,
    naming the parameter), before anything is looked up. `dead%20beef` arrives decoded as one
    segment "dead beef", so it is a malformed id like the others."""
    for resp in (
        server.client.get(f"/terminals/{bad_id}"),
        server.client.post(f"/terminals/{bad_id}/input", json={"message": "x"}),
    ):
        assert resp.status_code == 422, (bad_id, resp.status_code, resp.text)
        [issue] = resp.json()["detail"]
        assert issue["loc"] == ["path", "terminal_id"] and issue["type"] == "string_pattern_mismatch", issue


def test_an_encoded_path_traversal_matches_no_route(server):
    """`..%2f..%2fetc` is no id at all: the server decodes `%2f` before routing, so the path
    `/terminals/../../etc` has segments no route takes, and the router answers 404 "Not
    Found" without calling a terminal handler (nothing is resolved against the file system)."""
    for resp in (
        server.client.get("/terminals/..%2f..%2fetc"),
        server.client.post("/terminals/..%2f..%2fetc/input", json={"message": "x"}),
    ):
        assert resp.status_code == 404 and resp.json() == {"detail": "Not Found"}, resp.text


def test_bad_bodies_and_parameters(server):
    tid = server.term["id"]
    cases = [
        server.client.post(f"/terminals/{tid}/input", json={}),
        server.client.post(f"/terminals/{tid}/input", json={"message": ""}),
        server.client.post(f"/terminals/{tid}/input", json={"message": 5}),
        server.client.post(f"/terminals/{tid}/input", json={"message": "x", "surprise": 1}),
        server.client.post(
            f"/terminals/{tid}/input", content=b"\xff\xfe{not json", headers={"content-type": "application/json"}
        ),
        server.client.post(f"/terminals/{tid}/input", json={"message": "x" * 1_000_001}),
        server.client.post(f"/terminals/{tid}/key", params={"key": "rm -rf"}),
        server.client.post(f"/terminals/{tid}/key", params={"key": ""}),
        server.client.get(f"/terminals/{tid}/output", params={"mode": "everything"}),
        server.client.get(f"/terminals/{tid}/inbox/messages", params={"status": "lost"}),
        server.client.get(f"/terminals/{tid}/inbox/messages", params={"limit": 0}),
        server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "session_name": "bad name;rm"}
        ),
        server.client.post("/sessions", params={"agent_profile": "../../etc/passwd", "provider": "mock_cli"}),
        server.client.post("/sessions", params={"agent_profile": "developer", "provider": "no_such_cli"}),
        server.client.post(
            "/sessions",
            params={"agent_profile": "developer", "provider": "mock_cli", "working_directory": "/no/such/dir"},
        ),
        server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "model": "bad model $(x)"}
        ),
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
    resp = server.client.post(
        "/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "session_name": name}
    )
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
    assert "/terminals/{terminal_id}/inbox/messages" in spec["paths"]  # one path item, GET and POST


def test_providers_are_listed_with_their_binaries(server):
    providers = {p["name"]: p for p in server.client.get("/agents/providers").json()}
    assert providers["mock_cli"]["installed"] is True


def test_provider_whose_cli_is_missing_is_refused_before_anything_starts(cao_factory):
    # A PATH that provably lacks `claude`, whatever is installed on this machine.
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not Path(d, "claude").exists()
    )
    assert shutil.which("claude", path=path) is None
    srv = cao_factory("no-claude", PATH=path).start()
    assert srv.client.get("/health").json()["status"] == "ok"
    providers = {p["name"]: p for p in srv.client.get("/agents/providers").json()}
    assert providers["claude_code"]["installed"] is False and providers["mock_cli"]["installed"] is True
    windows_before = srv.tmux("list-windows", "-a", "-F", "#{window_id}").stdout
    resp = srv.client.post("/sessions", params={"agent_profile": "developer", "provider": "claude_code"})
    assert resp.status_code == 400, resp.text
    assert _detail(resp).startswith("provider claude_code: its CLI `claude` is not on cao-server's PATH")
    assert srv.client.get("/terminals").json() == [] and srv.client.get("/sessions").json() == []
    assert srv.tmux("list-windows", "-a", "-F", "#{window_id}").stdout == windows_before  # no window was made


# --- issue 9: bad input found by schemathesis and by hand ------------------------------
def _raw_json(server, method: str, path: str, text: str):
    return server.client.request(method, path, content=text.encode(), headers={"content-type": "application/json"})


def _strict_json(resp) -> object:
    """The answer is standard JSON (no NaN or Infinity crept into it)."""
    import json

    return json.loads(resp.text, parse_constant=lambda name: pytest.fail(f"{name} in {resp.text[:200]}"))


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
def test_non_finite_numbers_are_4xx_with_json_answers(server, number):
    tid = server.term["id"]
    cases = [
        _raw_json(
            server, "post", "/terminals/run-step", f'{{"agent": "developer", "prompt": "x", "timeout": {number}}}'
        ),
        _raw_json(server, "post", f"/terminals/{tid}/hooks", f'{{"event": "Stop", "payload": {{"x": {number}}}}}'),
        _raw_json(server, "post", "/workflows/runs", f'{{"name_or_path": "x", "inputs": {{"n": {number}}}}}'),
        _raw_json(server, "post", "/workflows/runs/run-1/steps/s1/output", f'{{"output": {{"n": {number}}}}}'),
        server.client.get("/workflows/runs/run-1/wait", params={"timeout": number}),
        server.client.post("/terminals/run-step", json={"agent": "developer", "prompt": "x", "timeout": number}),
    ]
    for resp in cases:
        assert resp.status_code == 422, (resp.request.url, resp.status_code, resp.text)
        assert _strict_json(resp)["detail"]
    assert server.status(tid) in ("idle", "completed")


def test_path_fields_over_4096_characters_are_refused_at_the_edge(server):
    long_dir = "/" + "d" * 5000
    cases = [
        server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "working_directory": long_dir}
        ),
        server.client.post(
            f"/sessions/{server.term['session_name']}/terminals",
            params={"agent_profile": "developer", "provider": "mock_cli", "working_directory": long_dir},
        ),
        server.client.post(
            "/terminals/run-step", json={"agent": "developer", "prompt": "x", "working_directory": long_dir}
        ),
        server.client.post("/workflows/validate", json={"path": long_dir}),
        server.client.post("/workflows/runs", json={"name_or_path": long_dir}),
    ]
    for resp in cases:
        assert resp.status_code == 422, (resp.request.url, resp.text)
        assert "4096" in resp.text and len(resp.content) < 2000


@pytest.mark.parametrize(
    "path,status,reason",
    [
        ("a\u0000b", 400, "NUL"),
        ("ok.py\u0000../../etc/passwd", 400, "NUL"),
        ("x" * 300 + ".py", 400, "255 bytes"),
        ("\u00e9/" * 1400 + "x.py", 400, "4096 bytes"),  # under 4096 characters, over 4096 bytes
        ("~no_such_user_cao/x.py", 400, "no_such_user_cao"),
        ("\ud800.py", 422, "surrogate"),  # not Unicode text: refused while parsing the body
    ],
)
def test_unusable_workflow_paths_are_4xx_with_a_reason(server, path, status, reason):
    import json

    # json.dumps escapes NUL and lone surrogates, which httpx's encoder would refuse.
    for resp in (
        _raw_json(server, "post", "/workflows/validate", json.dumps({"path": path})),
        _raw_json(server, "post", "/workflows/runs", json.dumps({"name_or_path": path})),
    ):
        assert resp.status_code == status, (path[:40], resp.status_code, resp.text[:300])
        assert "\n" not in _detail(resp)
    assert reason in _detail(resp) or path.startswith("a\u0000"), resp.text  # `a\0b` is no valid name


def test_unusable_path_input_of_a_workflow_is_400(server):
    (server.home / "workflows").mkdir(exist_ok=True)
    (server.home / "workflows" / "takes_a_dir.py").write_text(
        'INPUTS = {"where": {"type": "path", "required": True}}\nprint("CAO_WORKFLOW_OUTPUT:1")\n'
    )
    import json

    for value, status, reason in (
        ("/tmp/a\u0000b", 400, "NUL"),
        ("~no_such_user_cao/x", 400, "not an existing directory"),
        ("/\ud800", 422, "surrogate"),
    ):  # refused while parsing the body
        resp = _raw_json(
            server, "post", "/workflows/runs", json.dumps({"name_or_path": "takes_a_dir", "inputs": {"where": value}})
        )
        assert resp.status_code == status and reason in str(_detail(resp)), resp.text


def test_422_never_echoes_the_request(server):
    big = "z" * 2_000_000
    resp = server.client.post("/terminals/run-step", json={"agent": "developer", "prompt": "x", "timeout": big})
    assert resp.status_code == 422 and len(resp.content) < 2000, len(resp.content)
    entry = resp.json()["detail"][0]
    assert entry["loc"] == ["body", "timeout"] and "input" not in entry and set(entry) <= {"loc", "msg", "type", "ctx"}
    # A huge unknown field name is cut short in `loc`.
    resp = server.client.post("/terminals/run-step", json={"agent": "developer", "prompt": "x", big: 1})
    assert resp.status_code == 422 and len(resp.content) < 2000
    # A malformed body is not echoed either.
    resp = server.client.post(
        "/terminals/run-step", content=b'{"agent": "' + b"q" * 100_000, headers={"content-type": "application/json"}
    )
    assert resp.status_code == 422 and len(resp.content) < 2000


@pytest.mark.parametrize(
    "env_vars", ["s3cret-token", ["s3cret-token"], 7e7, {"CAO_WORKFLOW_RUN_ID": {"s3cret-token": 1}}]
)
def test_env_vars_are_never_echoed(server, env_vars):
    resp = server.client.post("/terminals/run-step", json={"agent": "developer", "prompt": "x", "env_vars": env_vars})
    assert 400 <= resp.status_code < 500, resp.text
    assert "s3cret" not in resp.text


def test_bodies_over_the_limit_are_413_from_content_length_before_any_byte_is_read(server):
    """The server answers while the (announced) 100 MB are still unsent."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(
            f"POST /workflows/validate HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n{".encode()
        )
        status, body = _read_response(sock)
    assert status == 413 and body == {"detail": "request body exceeds 8388608 bytes"}


def test_streamed_bodies_are_counted_and_refused_once_over_the_limit(server):
    import select
    import socket

    chunk = b"x" * 65536
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(
            f"POST /workflows/validate HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        sock.setblocking(False)
        pending = b""
        while sent < 100 * 1024 * 1024:
            readable, writable, _ = select.select([sock], [sock], [], 20)
            if readable:
                break
            assert writable, "the server neither read nor answered for 20 s"
            pending = pending or frame
            n = sock.send(pending)
            pending, sent = pending[n:], sent + n
        sock.setblocking(True)
        status, body = _read_response(sock)
    assert status == 413 and body == {"detail": "request body exceeds 8388608 bytes"}
    assert sent < 40 * 1024 * 1024  # refused long before the client was done


def test_a_million_character_message_escaped_fits_the_limit(server):
    import json

    body = json.dumps({"sender_id": "me", "message": "\u0001" * 1_000_000})  # 6 bytes per character
    assert len(body) > 6_000_000
    resp = server.client.post(
        "/terminals/deadbeef/inbox/messages", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert resp.status_code == 404, resp.text[:300]  # read and parsed: only the receiver is unknown


def test_body_limit_is_set_by_cao_max_body_bytes(cao_factory):
    srv = cao_factory("small", CAO_MAX_BODY_BYTES="1000").start()
    resp = srv.client.post("/workflows/validate", json={"source": "x" * 2000, "tier": "script"})
    assert resp.status_code == 413 and resp.json() == {"detail": "request body exceeds 1000 bytes"}
    assert srv.client.post("/workflows/validate", json={"source": "x = 1\n", "tier": "script"}).status_code == 200


def _read_response(sock) -> tuple[int, object]:
    import json

    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, f"connection closed without an answer: {data!r}"
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    )
    while len(rest) < length:
        more = sock.recv(65536)
        assert more
        rest += more
    return int(head.split(b" ", 2)[1]), json.loads(rest[:length])


def test_openapi_documents_every_error_status_with_the_shared_models(server):
    spec = server.client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert "HTTPValidationError" not in schemas  # cao's own 422 model replaces FastAPI's
    ops = {(m.upper(), p): op for p, item in spec["paths"].items() for m, op in item.items()}
    ours = {k: op for k, op in ops.items() if k[1] not in ("/health", "/diagnostics")}
    for (method, path), op in ours.items():
        codes = set(op["responses"])
        assert {"400", "401", "403", "413"} <= codes, (method, path, codes)  # the request gates
        if "{" in path or op.get("parameters") or op.get("requestBody"):
            assert "422" in codes, (method, path)
        for code, response in op["responses"].items():
            if code.startswith(("4", "5")):
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ValidationFailed" if code == "422" else "/Error"), (method, path, code)
    assert {"404", "409", "422", "502", "504"} <= set(ops[("POST", "/terminals/run-step")]["responses"])
    assert "501" in ops[("POST", "/workflows/runs")]["responses"]
    detail = schemas["ValidationFailed"]["properties"]["detail"]["anyOf"]
    assert {"array", "string"} <= {d.get("type") for d in detail}
    assert any(d.get("$ref", "").endswith("/ErrorObject") for d in detail)
    assert "input" not in schemas["ValidationIssue"]["properties"]


def test_working_directory_in_an_unknown_users_home_is_400(server):
    where = "~no_such_user_cao/x"
    for resp in (
        server.client.post(
            "/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "working_directory": where}
        ),
        server.client.post(
            "/terminals/run-step",
            json={"agent": "developer", "provider": "mock_cli", "prompt": "x", "working_directory": where},
        ),
    ):
        assert resp.status_code == 400 and "no_such_user_cao" in _detail(resp), resp.text


def test_event_positions_beyond_sqlite_integers_are_4xx_or_ignored(server):
    """Found by schemathesis: an `after_seq` past 2**63-1 reached SQLite and answered 500."""
    path = "/workflows/runs/run-0000000000000000/events"
    resp = server.client.get(path, params={"after_seq": 10**28})
    assert resp.status_code == 422 and "after_seq" in resp.text
    for last_event_id in (b"1" * 30, b"\xb2"):  # too big for SQLite; "²" (latin-1), a digit int() cannot read
        resp = server.client.get(path, headers={"Last-Event-ID": last_event_id})
        assert resp.status_code == 200 and resp.json()["run_absent"] is True, resp.text
