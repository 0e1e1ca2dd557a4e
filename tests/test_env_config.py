"""Configuration the docs promise (docs/configuration.md, profiles.md), checked through a real cao-server:

- agent profiles: "`${VAR}` is filled from the environment and `<home>/.env`";
- provider resolution "explicit `provider` → the profile's → `CAO_DEFAULT_PROVIDER` → `kiro_cli`";
- `CAO_ALLOWED_HOSTS` and `CAO_CORS_ORIGINS`: "comma lists; `*` opens" (a Host not loopback
  nor listed gets 400 "Invalid host header"; a cross-origin state change from an origin not
  listed gets 403 "Cross-origin request blocked").
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cao_support import CaoServer, read_records, wait_until

# --- ${VAR} in agent profiles -------------------------------------------------------------------
# The variables land where the API shows them (model, allowedTools) and where the agent acts on
# them (`mock: {record: ...}` becomes the mock's CAO_MOCK_RECORD: it writes what it receives there).
VARS_PROFILE = """---
name: from_vars
provider: mock_cli
model: ${CAO_TEST_MODEL}
allowedTools: ["${CAO_TEST_TOOL}"]
mock: {delay_ms: 0, record: "${CAO_TEST_RECORD}"}
---
A mock whose model, tools and record file come from variables.
"""
VARS = ("CAO_TEST_MODEL", "CAO_TEST_TOOL", "CAO_TEST_RECORD")


def _server_with_profile(cao_factory, **env: str) -> CaoServer:
    server = cao_factory(**env)
    for name in VARS:
        if name not in env:
            server.env.pop(name, None)  # only the sources a test names
    store = server.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / "from_vars.md").write_text(VARS_PROFILE)
    return server


def _expanded_agent(server: CaoServer, workdir: Path, record: Path) -> dict:
    # Working directory: tmp, so an unexpanded "${CAO_TEST_RECORD}" file could not land in the repo.
    term = server.create_session("from_vars", working_directory=str(workdir))
    server.send(term["id"], "hello from a variable")
    wait_until(
        lambda: read_records(record) == ["hello from a variable"],
        message=f"the agent recording to {record} (files in {workdir}: {sorted(os.listdir(workdir))})",
    )
    return server.client.get(f"/terminals/{term['id']}").json()


def test_profile_variables_are_filled_from_cao_servers_environment(cao_factory, tmp_path: Path):
    record = tmp_path / "from-environment.jsonl"
    server = _server_with_profile(
        cao_factory,
        CAO_TEST_MODEL="model-from-environment",
        CAO_TEST_TOOL="@tool_from_environment",
        CAO_TEST_RECORD=str(record),
    ).start()
    assert not (server.home / ".env").exists()
    term = _expanded_agent(server, tmp_path, record)
    assert (term["model"], term["allowed_tools"]) == ("model-from-environment", ["@tool_from_environment"])


def test_profile_variables_are_filled_from_the_homes_dotenv_file(cao_factory, tmp_path: Path):
    """`<home>/.env` alone fills what the environment lacks, and the two sources combine in one
    profile: here the model comes from the environment and the rest from `.env` (quoted values
    unquoted, comments and blank lines skipped)."""
    record = tmp_path / "from-dotenv.jsonl"
    server = _server_with_profile(cao_factory, CAO_TEST_MODEL="model-from-environment")
    (server.home / ".env").write_text(
        f'# cao\'s own variables\n\nCAO_TEST_TOOL=@tool_from_dotenv\nCAO_TEST_RECORD="{record}"\n', encoding="utf-8"
    )
    server.start()
    term = _expanded_agent(server, tmp_path, record)
    assert (term["model"], term["allowed_tools"]) == ("model-from-environment", ["@tool_from_dotenv"])


# --- CAO_DEFAULT_PROVIDER ---------------------------------------------------------------------
def _detail(resp) -> str:
    return resp.json()["detail"]


def test_the_default_provider_serves_a_request_and_profile_that_name_none(cao_factory, tmp_path: Path):
    record = tmp_path / "rec.jsonl"
    server = cao_factory(CAO_DEFAULT_PROVIDER="mock_cli", CAO_MOCK_RECORD=str(record)).start()
    # The built-in `developer` names no provider; neither does this request.
    resp = server.client.post("/sessions", params={"agent_profile": "developer"})
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["provider"] == "mock_cli"
    server.send(term["id"], "who runs me?")
    server.wait_status(term["id"], "completed")
    assert (
        server.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json()["output"]
        == "MOCK: who runs me?"
    )
    assert read_records(record) == ["who runs me?"]  # the mock agent really ran it

    # A profile's own provider comes before the default (this one does not exist: it is refused
    # by name, so it was the profile's choice that was tried) ...
    store = server.home / "agent-store"
    store.mkdir(exist_ok=True)
    (store / "elsewhere.md").write_text("---\nname: elsewhere\nprovider: no_such_cli\n---\nElsewhere.\n")
    resp = server.client.post("/sessions", params={"agent_profile": "elsewhere"})
    assert resp.status_code == 400 and _detail(resp).startswith("unknown provider 'no_such_cli'; available: "), (
        resp.text
    )
    # ... and the request's provider before the profile's.
    resp = server.client.post("/sessions", params={"agent_profile": "elsewhere", "provider": "mock_cli"})
    assert resp.status_code == 201 and resp.json()["provider"] == "mock_cli", resp.text
    assert {t["agent_profile"] for t in server.client.get("/terminals").json()} == {"developer", "elsewhere"}


def test_an_invalid_default_provider_is_a_clear_error_and_nothing_starts(cao_factory):
    server = cao_factory(CAO_DEFAULT_PROVIDER="no_such_cli").start()  # the server itself starts
    windows_before = server.tmux("list-windows", "-a", "-F", "#{window_id}").stdout
    resp = server.client.post("/sessions", params={"agent_profile": "developer"})
    assert resp.status_code == 400, resp.text
    detail = _detail(resp)
    assert detail.startswith(
        "no provider given (neither the request nor profile 'developer' names one) and "
        "cao-server's default, CAO_DEFAULT_PROVIDER=no_such_cli, cannot be used: "
        "unknown provider 'no_such_cli'; available: "
    ), detail
    assert "mock_cli" in detail.rsplit("available: ", 1)[1].split(", ")
    assert server.client.get("/terminals").json() == [] and server.client.get("/sessions").json() == []
    assert server.tmux("list-windows", "-a", "-F", "#{window_id}").stdout == windows_before
    # A request that names its provider does not depend on the default.
    resp = server.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli"})
    assert resp.status_code == 201 and resp.json()["provider"] == "mock_cli", resp.text


def test_without_the_variable_the_default_is_kiro_cli(cao_factory):
    # A PATH that provably lacks `kiro-cli`, whatever is installed on this machine.
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not Path(d, "kiro-cli").exists()
    )
    assert shutil.which("kiro-cli", path=path) is None
    server = cao_factory(PATH=path)
    server.env.pop("CAO_DEFAULT_PROVIDER", None)
    server.start()
    resp = server.client.post("/sessions", params={"agent_profile": "developer"})
    assert resp.status_code == 400, resp.text
    assert _detail(resp) == (
        "no provider given (neither the request nor profile 'developer' names one) and cao-server's default, "
        "kiro_cli (CAO_DEFAULT_PROVIDER is not set), cannot be used: provider kiro_cli: its CLI `kiro-cli` is "
        "not on cao-server's PATH; install it (see docs/providers.md) or pick another provider"
    )
    assert server.client.get("/terminals").json() == []


# --- CAO_ALLOWED_HOSTS ---------------------------------------------------------------------------
INVALID_HOST = {"detail": "Invalid host header"}


def _health_with_host(server: CaoServer, host: str):
    return server.client.get("/health", headers={"Host": host})


def test_allowed_hosts_is_a_comma_list_of_extra_host_names(cao_factory):
    listed = cao_factory("listed", CAO_ALLOWED_HOSTS="cao.internal, build-box.example").start()
    plain = cao_factory("plain").start()
    port = listed.port
    for host in ("cao.internal", f"cao.internal:{port}", "build-box.example", f"build-box.example:{port}"):
        resp = _health_with_host(listed, host)
        assert resp.status_code == 200 and resp.json()["status"] == "ok", (host, resp.text)
        # Without the list the same name is refused: the list is what let it in.
        assert _health_with_host(plain, host.replace(str(port), str(plain.port))).json() == INVALID_HOST, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):  # loopback stays allowed
        assert _health_with_host(listed, host).status_code == 200, host
    for host in ("evil.example", f"evil.example:{port}", "internal", "cao.internal.evil.example"):
        resp = _health_with_host(listed, host)
        assert (resp.status_code, resp.json()) == (400, INVALID_HOST), (host, resp.text)


def test_allowed_hosts_star_accepts_any_host(cao_factory):
    server = cao_factory(CAO_ALLOWED_HOSTS="*").start()
    for host in ("evil.example", f"anything.example:{server.port}", "10.1.2.3"):
        resp = _health_with_host(server, host)
        assert resp.status_code == 200 and resp.json()["status"] == "ok", (host, resp.text)


# --- CAO_CORS_ORIGINS ---------------------------------------------------------------------------
LISTED_ORIGINS = ("https://ui.example", "http://tools.example:8080")


def _cors(server: CaoServer, tid: str, origin: str) -> tuple:
    """(a read's CORS answer, the preflight of a POST, the POST itself) from `origin`."""
    read = server.client.get(f"/terminals/{tid}", headers={"Origin": origin})
    preflight = server.client.options(
        f"/terminals/{tid}/key",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    post = server.client.post(f"/terminals/{tid}/key", json={"key": "Left"}, headers={"Origin": origin})
    return read, preflight, post


def _allowed(read, preflight, post, origin: str) -> None:
    assert read.status_code == 200 and read.headers.get("access-control-allow-origin") == origin, read.headers
    assert read.headers.get("access-control-allow-credentials") == "true"
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers.get("access-control-allow-origin") == origin, preflight.headers
    assert "POST" in preflight.headers.get("access-control-allow-methods", ""), preflight.headers
    assert post.status_code == 200 and post.json()["success"] is True, post.text


def _refused(read, preflight, post) -> None:
    assert read.status_code == 200  # reads are served (the browser withholds them without CORS headers)
    assert "access-control-allow-origin" not in read.headers, read.headers
    assert preflight.status_code == 400 and "access-control-allow-origin" not in preflight.headers, (
        preflight.status_code,
        preflight.headers,
    )
    assert (post.status_code, post.json()) == (403, {"detail": "Cross-origin request blocked"}), post.text


def test_cors_origins_is_a_comma_list_of_origins_that_may_call(cao_factory, tmp_path: Path):
    record = tmp_path / "rec.jsonl"
    listed = cao_factory("listed", CAO_CORS_ORIGINS=", ".join(LISTED_ORIGINS), CAO_MOCK_RECORD=str(record)).start()
    plain = cao_factory("plain").start()
    tid, plain_tid = listed.create_session()["id"], plain.create_session()["id"]
    for origin in LISTED_ORIGINS:
        _allowed(*_cors(listed, tid, origin), origin)
        _refused(*_cors(plain, plain_tid, origin))  # without the list: the list is what let it in
    # Not listed: another site, another scheme or port of a listed site, a look-alike, the raw list.
    for origin in (
        "https://evil.example",
        "http://ui.example",
        "https://ui.example:8443",
        "https://ui.example.evil.example",
        "http://tools.example",
        ", ".join(LISTED_ORIGINS),
    ):
        _refused(*_cors(listed, tid, origin))
    # The allowed calls reached the agent and did it no harm: it still takes a turn.
    listed.send(tid, "still here")
    listed.wait_status(tid, "completed")
    assert read_records(record) == ["still here"]


def test_cors_origins_star_lets_any_origin_call(cao_factory):
    server = cao_factory(CAO_CORS_ORIGINS="*").start()
    tid = server.create_session()["id"]
    for origin in ("https://evil.example", "http://anything.example:1234"):
        # With credentials allowed, the answer names the caller's origin rather than `*`.
        _allowed(*_cors(server, tid, origin), origin)
