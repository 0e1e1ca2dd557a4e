"""`host` at every way an agent is created: the HTTP create routes, run-step, the MCP tools
(handoff, assign, the ops server's launch_session), a workflow step (the `cao_workflow` shim and
a YAML step), a scheduled flow and `cao launch`, against a real cao-server with mock agents.

The contract: a registered host's name or `local`. An unknown host is refused with a message
naming it (`unknown host 'nosuch'`) and leaves no terminal and no session behind; a malformed
one is refused before anything is created; `local` makes an ordinary agent on this machine,
whose terminal JSON says `"host": null`. No host is registered in these servers, so every
name but `local` is unknown.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import CaoServer, cli
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_support import agent_env, call, mcp_session
from workflow_support import Workflows

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

UNKNOWN = "nosuch"
UNKNOWN_MESSAGE = "unknown host 'nosuch'"
MALFORMED = "Bad Host;rm"
# Each is refused by the name's pattern ([a-z0-9][a-z0-9-]{0,31}), before any lookup.
MALFORMED_NAMES = (MALFORMED, "-oProxyCommand=x", "UPPER", "a" * 33, "host\n", "$(touch x)", "")
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def srv(tmp_path_factory) -> Iterator[CaoServer]:
    server = CaoServer(tmp_path_factory.mktemp("placement") / "home").start()
    try:
        yield server
    finally:
        server.cleanup()


# --- helpers --------------------------------------------------------------------------------
def terminal_ids(server: CaoServer) -> set[str]:
    resp = server.client.get("/terminals")
    assert resp.status_code == 200, resp.text
    return {t["id"] for t in resp.json()}


def session_names(server: CaoServer) -> set[str]:
    resp = server.client.get("/sessions")
    assert resp.status_code == 200, resp.text
    return {s["name"] for s in resp.json()}


def snapshot(server: CaoServer) -> tuple[set[str], set[str]]:
    return terminal_ids(server), session_names(server)


def detail_text(resp: httpx.Response) -> str:
    detail = resp.json().get("detail")
    if isinstance(detail, dict):
        return str(detail.get("message", detail))
    return detail if isinstance(detail, str) else json.dumps(detail)


def assert_unknown_host(resp: httpx.Response) -> None:
    assert resp.status_code == 400, resp.text
    assert UNKNOWN_MESSAGE in detail_text(resp), resp.text


def assert_refused_at_the_edge(resp: httpx.Response) -> None:
    assert resp.status_code == 422, resp.text
    assert MALFORMED not in resp.text  # a 422 never echoes what was sent
    assert any("host" in str(item.get("loc")) for item in resp.json()["detail"]), resp.text


def local_session(server: CaoServer, profile: str = "developer") -> dict:
    return server.create_session(profile, host="local")


def delete_session(server: CaoServer, name: str) -> None:
    assert server.client.delete(f"/sessions/{name}").status_code == 200


def mcp_env(server: CaoServer, terminal_id: str | None) -> dict[str, str]:
    return agent_env(server, terminal_id)


# --- HTTP: the create routes ----------------------------------------------------------------
def test_create_session_on_an_unknown_host_is_a_400_naming_it_and_creates_nothing(srv: CaoServer) -> None:
    before = snapshot(srv)
    resp = srv.client.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli", "host": UNKNOWN})
    assert_unknown_host(resp)
    # With an initial message the route answers before the agent is ready: still refused first.
    resp = srv.client.post(
        "/sessions",
        params={"agent_profile": "developer", "provider": "mock_cli", "host": UNKNOWN, "session_name": "cao-ghost"},
        json={"initial_message": "hello"},
    )
    assert_unknown_host(resp)
    assert snapshot(srv) == before
    assert srv.tmux("has-session", "-t", "cao-ghost").returncode != 0


def test_create_terminal_in_a_session_on_an_unknown_host_is_refused_and_the_session_unchanged(
    srv: CaoServer,
) -> None:
    conductor = local_session(srv)
    name = conductor["session_name"]
    try:
        before = snapshot(srv)
        params = {"agent_profile": "developer", "provider": "mock_cli", "host": UNKNOWN}
        assert_unknown_host(srv.client.post(f"/sessions/{name}/terminals", params=params))
        # The form `assign` uses: deferred start, the task in the body.
        deferred = {**params, "caller_id": conductor["id"], "defer_init": "true"}
        resp = srv.client.post(f"/sessions/{name}/terminals", params=deferred, json={"initial_message": "task"})
        assert_unknown_host(resp)
        assert snapshot(srv) == before
        listed = srv.client.get(f"/sessions/{name}/terminals").json()
        assert [t["id"] for t in listed] == [conductor["id"]]
    finally:
        delete_session(srv, name)


@pytest.mark.parametrize("bad", MALFORMED_NAMES)
def test_a_malformed_host_is_a_422_at_every_http_entry_and_creates_nothing(srv: CaoServer, bad: str) -> None:
    conductor = local_session(srv)
    name = conductor["session_name"]
    try:
        before = snapshot(srv)
        params = {"agent_profile": "developer", "provider": "mock_cli", "host": bad}
        assert_refused_at_the_edge(srv.client.post("/sessions", params=params))
        assert_refused_at_the_edge(srv.client.post(f"/sessions/{name}/terminals", params=params))
        step = {"agent": "developer", "provider": "mock_cli", "prompt": "x", "host": bad}
        assert_refused_at_the_edge(srv.client.post("/terminals/run-step", json=step))
        assert snapshot(srv) == before
    finally:
        delete_session(srv, name)


def test_host_local_makes_an_ordinary_local_agent_whose_json_says_host_null(srv: CaoServer) -> None:
    conductor = local_session(srv)
    name = conductor["session_name"]
    try:
        assert "host" in conductor and conductor["host"] is None
        assert srv.client.get(f"/terminals/{conductor['id']}").json()["host"] is None
        resp = srv.client.post(
            f"/sessions/{name}/terminals", params={"agent_profile": "reviewer", "provider": "mock_cli", "host": "local"}
        )
        assert resp.status_code == 201, resp.text
        worker = resp.json()
        assert worker["host"] is None and worker["session_name"] == name
        assert srv.wait_status(worker["id"], "idle") == "idle"
        srv.send(worker["id"], "ping")
        srv.wait_status(worker["id"], "completed")
        reply = srv.client.get(f"/terminals/{worker['id']}/output", params={"mode": "last"}).json()["output"]
        assert reply.strip() == "MOCK: ping"
        # Lists show it too, and an agent created without `host` is as local.
        listed = {t["id"]: t for t in srv.client.get("/terminals").json()}
        assert listed[worker["id"]]["host"] is None and listed[conductor["id"]]["host"] is None
        session = srv.client.get(f"/sessions/{name}").json()
        assert {t["id"]: t["host"] for t in session["terminals"]} == {conductor["id"]: None, worker["id"]: None}
        assert "host" in srv.client.get("/openapi.json").json()["components"]["schemas"]["TerminalOut"]["properties"]
    finally:
        delete_session(srv, name)


# --- HTTP: run-step ---------------------------------------------------------------------------
def test_run_step_on_an_unknown_host_is_a_400_naming_it_and_leaves_no_worker(srv: CaoServer) -> None:
    before = snapshot(srv)
    step = {"agent": "developer", "provider": "mock_cli", "prompt": "hello", "host": UNKNOWN, "timeout": 60}
    assert_unknown_host(srv.client.post("/terminals/run-step", json=step))
    assert snapshot(srv) == before
    # In a caller's session (as handoff calls it): the caller's session keeps only the caller.
    conductor = local_session(srv, "code_supervisor")
    try:
        before = snapshot(srv)
        resp = srv.client.post("/terminals/run-step", json={**step, "caller_id": conductor["id"]})
        assert_unknown_host(resp)
        assert snapshot(srv) == before
    finally:
        delete_session(srv, conductor["session_name"])


def test_run_step_on_host_local_runs_here_and_says_host_null(srv: CaoServer) -> None:
    before = snapshot(srv)
    step = {"agent": "developer", "provider": "mock_cli", "prompt": "hello there", "host": "local", "timeout": 60}
    resp = srv.client.post("/terminals/run-step", json=step)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["last_message"].strip() == "MOCK: hello there" and answer["host"] is None
    assert terminal_ids(srv) == before[0]  # the worker was torn down


def test_run_step_refuses_host_with_a_reused_terminal(srv: CaoServer) -> None:
    conductor = local_session(srv)
    try:
        step = {"agent": "developer", "prompt": "x", "host": "local", "reuse_terminal_id": conductor["id"]}
        resp = srv.client.post("/terminals/run-step", json=step)
        assert resp.status_code == 400 and "reuse_terminal_id" in detail_text(resp), resp.text
    finally:
        delete_session(srv, conductor["session_name"])


# --- MCP: handoff and assign (cao-mcp-server), launch_session (cao-ops-mcp-server) ------------
@pytest.mark.anyio
async def test_mcp_handoff_and_assign_take_host_and_refuse_an_unknown_one_creating_nothing(srv: CaoServer) -> None:
    sup = local_session(srv, "code_supervisor")
    try:
        async with mcp_session(mcp_env(srv, sup["id"])) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            for name in ("handoff", "assign"):
                prop = tools[name].input_schema["properties"]["host"]
                assert "registered host" in prop["description"] and "placement policy" in prop["description"]
                props = list(tools[name].input_schema["properties"])  # added after the older ones:
                assert props[props.index("host") + 1 :] in (["description"], ["description", "wait"])
                assert "host" not in tools[name].input_schema.get("required", [])

            before = snapshot(srv)
            handed = await call(session, "handoff", agent_profile="developer", message="hi", host=UNKNOWN)
            assert handed["success"] is False and UNKNOWN_MESSAGE in handed["message"], handed
            assigned = await call(session, "assign", agent_profile="developer", message="hi", host=UNKNOWN)
            assert assigned["success"] is False and UNKNOWN_MESSAGE in assigned["message"], assigned
            assert assigned["terminal_id"] is None
            assert snapshot(srv) == before

            for tool in ("handoff", "assign"):
                refused = await call(session, tool, agent_profile="developer", message="hi", host=MALFORMED)
                assert refused["success"] is False and "invalid host" in refused["message"], refused
            assert snapshot(srv) == before

            done = await call(session, "handoff", agent_profile="developer", message="on local", host="local")
            assert done["success"] is True and done["output"].strip() == "MOCK: on local", done
            assert " on host " not in done["message"]
            assert terminal_ids(srv) == before[0]
    finally:
        delete_session(srv, sup["session_name"])


@pytest.mark.anyio
async def test_ops_launch_session_takes_host_and_refuses_an_unknown_one(srv: CaoServer) -> None:
    params = StdioServerParameters(command=str(BIN / "cao-ops-mcp-server"), args=[], env=mcp_env(srv, None))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "placement policy" in tools["launch_session"].input_schema["properties"]["host"]["description"]
        before = snapshot(srv)
        unknown = await call(session, "launch_session", agent_profile="developer", provider="mock_cli", host=UNKNOWN)
        assert unknown["success"] is False and UNKNOWN_MESSAGE in unknown["message"], unknown
        bad = await call(session, "launch_session", agent_profile="developer", provider="mock_cli", host=MALFORMED)
        assert bad["success"] is False and "invalid host" in bad["message"], bad
        assert snapshot(srv) == before
        launched = await call(session, "launch_session", agent_profile="developer", provider="mock_cli", host="local")
        assert launched["success"] is True and launched["host"] is None, launched
        delete_session(srv, launched["session_name"])


# --- workflows: the cao_workflow shim and a YAML step ---------------------------------------
def test_a_workflow_step_passes_host_and_an_unknown_one_fails_the_step_naming_it(srv: CaoServer) -> None:
    wf = Workflows(srv)
    name = wf.write(
        "placed_steps.py",
        f"""
        from cao_workflow import run_step, step, emit_output, ShimError, ShimHTTPError
        out = {{}}
        try:
            step("mock_cli", "reviewer", "far away", recovery="idempotent", step_id="far", host={UNKNOWN!r})
        except ShimHTTPError as exc:
            if exc.status == 409:
                raise
            out["far"] = [exc.status, exc.body]
        try:
            run_step("mock_cli", "reviewer", "bad", step_id="bad", host={MALFORMED!r})
        except ShimHTTPError:
            raise
        except ShimError as exc:
            out["bad"] = str(exc)
        out["here"] = run_step("mock_cli", "reviewer", "right here", step_id="here", host="local").output
        emit_output(out)
        """,
    )
    before = snapshot(srv)
    result = wf.run_ok(name)
    assert result["state"] == "completed", result
    status, body = result["output"]["far"]
    assert status == 400 and UNKNOWN_MESSAGE in body
    assert "not a host name" in result["output"]["bad"]
    assert result["output"]["here"] == "MOCK: right here"
    steps = {s["id"]: s for s in result["steps"]}
    assert steps["far"]["state"] == "failed" and UNKNOWN_MESSAGE in (steps["far"]["error"] or "")
    assert steps["far"]["terminal_id"] is None
    assert "bad" not in steps  # refused by the shim: the server never saw it
    assert steps["here"]["state"] == "completed"
    assert snapshot(srv) == before


def test_a_yaml_step_names_host_checked_when_validated_and_when_run(srv: CaoServer) -> None:
    wf = Workflows(srv)
    wf.write(
        "placed.yaml",
        f"""
        name: placed_yaml
        steps:
          - id: here
            provider: mock_cli
            agent: reviewer
            prompt: "right here"
            host: local
          - id: far
            provider: mock_cli
            agent: reviewer
            prompt: "far away"
            host: {UNKNOWN}
            retries: 0
        """,
    )
    before = snapshot(srv)
    result = wf.run_ok("placed_yaml")
    steps = {s["id"]: s for s in result["steps"]}
    assert steps["here"]["state"] == "completed" and steps["here"]["output"] == "MOCK: right here"
    assert steps["far"]["state"] == "failed" and UNKNOWN_MESSAGE in (steps["far"]["error"] or ""), steps["far"]
    assert result["state"] == "failed"
    assert snapshot(srv) == before

    wf.write(
        "misplaced.yaml",
        """
        name: misplaced_yaml
        steps:
          - id: one
            agent: reviewer
            prompt: "x"
            host: "Bad Host;rm"
        """,
    )
    resp = wf.run("misplaced_yaml")
    assert resp.status_code in (400, 422) and "host must be" in resp.text, resp.text
    assert snapshot(srv) == before


# --- scheduled flows ----------------------------------------------------------------------------
def write_flow(directory: Path, name: str, host: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    meta = {
        "name": name,
        "schedule": "0 0 1 1 *",  # once a year: it runs when the test says so
        "agent_profile": "developer",
        "provider": "mock_cli",
        "host": host,
    }
    lines = "\n".join(f"{key}: {json.dumps(value)}" for key, value in meta.items())
    path = directory / f"{name}.flow.md"
    path.write_text(f"---\n{lines}\n---\n\nreport from {name}\n")
    return path


def test_a_flow_names_its_host_and_a_run_on_an_unknown_one_fails_naming_it(srv: CaoServer, tmp_path: Path) -> None:
    resp = srv.client.post("/flows", json={"path": str(write_flow(tmp_path, "faraway", UNKNOWN))})
    assert resp.status_code == 201, resp.text
    assert resp.json()["host"] == UNKNOWN
    assert srv.client.get("/flows/faraway").json()["host"] == UNKNOWN  # stored, not only parsed
    before = snapshot(srv)
    run = srv.client.post("/flows/faraway/run", params={"wait": "true"}, timeout=120).json()["run"]
    assert run["state"] == "failed" and UNKNOWN_MESSAGE in (run["reason"] or ""), run
    assert run["terminal_id"] is None
    assert snapshot(srv) == before
    assert srv.tmux("has-session", "-t", "cao-flow-faraway").returncode != 0


def test_a_flow_with_a_malformed_host_is_refused_when_added(srv: CaoServer, tmp_path: Path) -> None:
    resp = srv.client.post("/flows", json={"path": str(write_flow(tmp_path, "badplace", MALFORMED))})
    assert resp.status_code == 400 and "`host` must be" in resp.text, resp.text
    assert srv.client.get("/flows/badplace").status_code == 404
    fields = {
        "name": "badfields",
        "schedule": "0 0 1 1 *",
        "agent_profile": "developer",
        "prompt_template": "x",
        "host": MALFORMED,
    }
    resp = srv.client.post("/flows", json=fields)
    assert resp.status_code == 400 and "`host` must be" in resp.text, resp.text
    assert srv.client.get("/flows/badfields").status_code == 404


def test_a_flow_on_host_local_runs_here(srv: CaoServer, tmp_path: Path) -> None:
    resp = srv.client.post("/flows", json={"path": str(write_flow(tmp_path, "athome", "local"))})
    assert resp.status_code == 201, resp.text
    run = srv.client.post("/flows/athome/run", params={"wait": "true"}, timeout=120).json()["run"]
    assert run["state"] == "completed" and run["reply"] == "MOCK: report from athome", run
    assert srv.client.get(f"/terminals/{run['terminal_id']}").json()["host"] is None
    delete_session(srv, "cao-flow-athome")


# --- the CLI ------------------------------------------------------------------------------------
def test_cao_launch_host_refuses_an_unknown_host_and_tables_show_the_host_column(srv: CaoServer) -> None:
    launch = ("launch", "--agents", "developer", "--provider", "mock_cli", "--headless", "--yolo")
    before = snapshot(srv)
    proc = cli(srv, *launch, "--host", UNKNOWN)
    assert proc.returncode != 0 and UNKNOWN_MESSAGE in proc.stderr, (proc.stdout, proc.stderr)
    proc = cli(srv, *launch, "--host", MALFORMED)
    assert proc.returncode != 0 and "host" in proc.stderr, (proc.stdout, proc.stderr)
    assert snapshot(srv) == before

    proc = cli(srv, *launch, "--host", "local", "--json")
    assert proc.returncode == 0, proc.stderr
    term = json.loads(proc.stdout)
    assert term["host"] is None
    try:
        listing = cli(srv, "terminal", "list").stdout.splitlines()
        header = listing[0].split()
        assert "HOST" in header
        row = next(line for line in listing if line.startswith(term["id"]))
        assert row.split()[header.index("HOST")] == "local"
        session = cli(srv, "session", "get", term["session_name"]).stdout
        assert "HOST" in session and "local" in session
        status = cli(srv, "terminal", "status", term["id"]).stdout
        assert any(line.split() == ["Host:", "local"] for line in status.splitlines()), status
    finally:
        delete_session(srv, term["session_name"])
