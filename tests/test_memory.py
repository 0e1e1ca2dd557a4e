"""Memories (issue 29) through the public surfaces of a real cao-server, on SQLite and on
PostgreSQL: agents' MCP tools (the official SDK through `cao-mcp-server`, with each agent's own
credential), the user's `cao memory` and HTTP routes, and the first message a mock agent
receives. Scope isolation between projects, upsert as dated entries, full-text ranking, redaction,
the memory block within its budget, kill -9 in the middle of stores, export/import round trips
(across engines too), and bad input refused with its reason while nothing changes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from cao_support import CaoServer, cli, read_records, wait_until
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_support import agent_env, call, mcp_session
from sse_support import EventStream

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


@pytest.fixture(params=["sqlite", "postgresql"])
def make_server(request, cao_factory) -> Callable[..., CaoServer]:
    """A cao_factory on each engine: SQLite in the home, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return cao_factory
    return request.getfixturevalue("pg_cao_factory")


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path.resolve()


def agent_in(server: CaoServer, directory: Path, profile: str = "developer") -> dict:
    return server.create_session(profile, working_directory=str(directory))


def memories(server: CaoServer, *args: str) -> list[dict]:
    return json.loads(cli(server, "memory", "list", "--json", "--limit", "100", *args, check=True).stdout)


# --- scopes -----------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_an_agent_reads_and_writes_only_its_own_project_session_profile_and_global(
    make_server, tmp_path: Path
) -> None:
    server = make_server().start()
    alpha, beta = git_repo(tmp_path / "alpha"), git_repo(tmp_path / "béta ünïcode")  # (scope ids are UTF-8)
    (alpha / "src").mkdir()
    a = agent_in(server, alpha / "src")  # a subdirectory: still project alpha
    b = agent_in(server, beta)
    async with mcp_session(agent_env(server, a["id"])) as session:
        stored = await call(session, "memory_store", content="alpha builds with make release", key="build")
        assert stored["success"] and stored["created"], stored
        await call(session, "memory_store", content="alpha's session note", scope="session", key="note")
        await call(session, "memory_store", content="everyone: UTC timestamps", scope="global", key="time")
    async with mcp_session(agent_env(server, b["id"])) as session:
        seen = await call(session, "memory_recall", limit=100)
        assert [m["key"] for m in seen["memories"]] == ["time"], seen
        found = await call(session, "memory_recall", query="alpha builds make release", sort_by="score")
        assert found["count"] == 0, found
        refused = await call(session, "memory_forget", key="build", scope="project")
        assert not refused["success"] and "no memory with key 'build'" in refused["error"], refused
        await call(session, "memory_store", content="beta builds with cargo", key="build")
    async with mcp_session(agent_env(server, a["id"])) as session:
        mine = await call(session, "memory_recall", limit=100)
        # Narrowest scope first: session, then project, then global.
        assert [(m["key"], m["scope"]) for m in mine["memories"]] == [
            ("note", "session"),
            ("build", "project"),
            ("time", "global"),
        ], mine
        assert mine["memories"][1]["content"] == "alpha builds with make release"
        # Ranked by the engine, still only its own: beta's "builds" is not among them.
        ranked = await call(session, "memory_recall", query="builds cargo", sort_by="score")
        assert [(m["key"], m["content"]) for m in ranked["memories"]] == [("build", "alpha builds with make release")]
    async with mcp_session(agent_env(server, b["id"])) as session:
        ranked = await call(session, "memory_recall", query="builds cargo", sort_by="score")
        assert [(m["key"], m["content"]) for m in ranked["memories"]] == [("build", "beta builds with cargo")], ranked
    # The user sees every memory, each project's under its own id.
    listed = {(m["key"], m["scope_id"]) for m in memories(server, "--scope", "project")}
    assert listed == {("build", str(alpha)), ("build", str(beta))}
    here = json.loads(cli(server, "memory", "search", "cargo", "--json", cwd=beta, check=True).stdout)
    assert [m["scope_id"] for m in here] == [str(beta)]


# --- upsert -----------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_the_same_key_and_scope_appends_dated_entries(cao: CaoServer, tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    agent = agent_in(cao, repo)
    with EventStream(cao, "memory.#") as events:
        async with mcp_session(agent_env(cao, agent["id"])) as session:
            first = await call(session, "memory_store", content="run tests with pytest -q", key="tests", tags=["ci"])
            again = await call(session, "memory_store", content="and -p no:xdist locally", key="tests", tags=["dev"])
        assert (first["created"], first["entries"]) == (True, 1)
        assert (again["created"], again["entries"]) == (False, 2)
        stored = events.until(lambda f: f.data.get("created") is False, message="the second MemoryStored")
        assert stored.data["key"] == "tests" and stored.data["terminal_id"] == agent["id"]
    [memory] = memories(cao)
    shown = json.loads(cli(cao, "memory", "show", str(memory["id"]), "--json", check=True).stdout)
    assert [e["text"] for e in shown["entries"]] == ["run tests with pytest -q", "and -p no:xdist locally"]
    assert shown["entries"][0]["at"] < shown["entries"][1]["at"]
    assert all(e["terminal_id"] == agent["id"] and e["agent_profile"] == "developer" for e in shown["entries"])
    assert shown["tags"] == ["ci", "dev"] and shown["scope_id"] == str(repo)
    # Without a key, the same content is the same memory.
    for _ in range(2):
        cli(cao, "memory", "add", "prefer small commits", "--scope", "global", check=True)
    assert len(memories(cao, "--scope", "global")) == 1


# --- ranking ----------------------------------------------------------------------------------
def test_a_relevant_memory_outranks_a_recent_irrelevant_one_in_score_mode(make_server) -> None:
    server = make_server().start()

    def add(key: str, text: str) -> None:
        resp = server.client.post("/memories", json={"content": text, "scope": "global", "key": key})
        assert resp.status_code == 201, resp.text

    add("migrations", "Database migrations: append a new function, never edit a shipped migration")
    for n in range(30):
        add(f"filler-{n}", f"note {n} about the weekly meeting and the lunch menu")
    add("coffee", "the coffee machine on floor three was repaired")  # the most recent
    params = {"query": "how do I write a database migration", "limit": 5}
    by_score = server.client.get("/memories", params={**params, "sort_by": "score"}).json()
    assert by_score[0]["key"] == "migrations", [m["key"] for m in by_score]
    assert by_score[0]["score"] > 0
    newest = server.client.get("/memories", params={"limit": 1}).json()
    assert newest[0]["key"] == "coffee"


# --- redaction --------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_secrets_are_redacted_before_storing_and_mostly_secret_content_is_refused(
    cao: CaoServer, tmp_path: Path
) -> None:
    agent = agent_in(cao, git_repo(tmp_path / "repo"))
    aws, password = "AKIAABCDEFGHIJKLMNOP", "hunter2hunter2"
    async with mcp_session(agent_env(cao, agent["id"])) as session:
        stored = await call(
            session,
            "memory_store",
            content=f"staging uses key {aws} and postgres://app:{password}@db.internal:5432/app for the app",
            key="staging",
        )
        assert stored["success"] and stored["redacted"] == ["aws-access-key", "url-password"], stored
        refused = await call(
            session, "memory_store", content="sk-ant-api03-" + "x" * 60, key="only-a-key", scope="global"
        )
        assert not refused["success"] and "mostly a secret" in refused["error"], refused
    exported = cli(cao, "memory", "export", check=True).stdout
    assert aws not in exported and password not in exported
    assert "[REDACTED:aws-access-key]" in exported and "postgres://app:[REDACTED:url-password]@db" in exported
    # Nowhere in the database either (the full-text index included).
    dump = json.dumps(cao.sql("SELECT * FROM memories")) + json.dumps(cao.sql("SELECT * FROM memories_fts"))
    assert aws not in dump and password not in dump
    assert [m["key"] for m in memories(cao)] == ["staging"]


# --- injection --------------------------------------------------------------------------------
BUDGET = 700


def test_a_new_agents_first_message_carries_its_memories_within_the_budget(cao_factory, tmp_path: Path) -> None:
    record = tmp_path / "received.jsonl"
    server = cao_factory(CAO_MEMORY_INJECT_CHARS=str(BUDGET), CAO_MOCK_RECORD=str(record)).start()
    repo = git_repo(tmp_path / "repo")
    add = ["memory", "add", "--scope", "project"]
    cli(server, *add, "The flaky deploy test needs DEPLOY_TIMEOUT=60", "--key", "deploy-test", cwd=repo, check=True)
    cli(server, *add, "unrelated: the wiki moved " + "long text " * 60, "--key", "wiki", cwd=repo, check=True)
    cli(server, "memory", "add", "--scope", "global", "Answer in English", "--key", "language", check=True)
    other = git_repo(tmp_path / "other")
    cli(server, *add, "other project's secret plan", "--key", "other-plan", cwd=other, check=True)
    (server.home / "agent-store").mkdir(exist_ok=True)
    (server.home / "agent-store" / "quiet.md").write_text("---\nname: quiet\nmemory: false\n---\nA quiet agent.\n")

    task = "Fix the flaky deploy test"
    for profile in ("developer", "quiet"):
        resp = server.client.post(
            "/sessions",
            params={"agent_profile": profile, "provider": "mock_cli", "working_directory": str(repo)},
            json={"initial_message": task},
        )
        assert resp.status_code == 201, resp.text
        before = len(read_records(record))
        wait_until(lambda b=before: len(read_records(record)) > b, 60, message=f"{profile}'s first message")
    with_memory, bare = read_records(record)[:2]
    assert bare == task  # memory: false in its profile
    block, _, rest = with_memory.partition("</cao-memory>")
    assert with_memory.startswith("<cao-memory>") and rest.strip() == task, with_memory
    assert len(block + "</cao-memory>") <= BUDGET
    assert block.index("deploy-test") < block.index("language")  # the relevant one first
    assert "DEPLOY_TIMEOUT=60" in block and "other project's" not in block
    assert "wiki" not in block  # too long for what was left of the budget
    # What went into the block counts as recalled (written just after the message, in the background).
    counts = lambda: {m["key"]: m["recall_count"] for m in memories(server)}  # noqa: E731
    wait_until(lambda: counts()["deploy-test"] == 1, 30, message="the injected memory counted as recalled")
    assert counts()["wiki"] == 0 and counts()["other-plan"] == 0


# --- crash safety -----------------------------------------------------------------------------
def test_kill9_during_stores_leaves_no_memory_half_written(make_server) -> None:
    server = make_server().start()
    acknowledged: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for n in range(100_000):
                if stop.is_set():
                    return
                marker = f"marker{n}x"
                body = {"content": f"{marker} " + "payload " * 200, "scope": "global", "key": f"k{n % 40}"}
                try:
                    if client.post("/memories", json=body).status_code == 201:
                        acknowledged.append(marker)
                except httpx.HTTPError:
                    return

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: len(acknowledged) >= 60, 60, message="stores under way")
    server.kill9()
    stop.set()
    thread.join(30)
    server.start()
    listed = memories(server)
    assert len(listed) == 40
    for memory in listed:
        # Every entry of every memory is whole, and the search index has exactly what the row has.
        assert all(e["text"].endswith("payload") for e in memory["entries"])
        newest = memory["entries"][-1]["text"].split()[0]
        found = server.client.get("/memories", params={"query": newest, "sort_by": "score"}).json()
        assert [m["id"] for m in found] == [memory["id"]], (newest, found)
    # What was acknowledged before the kill is there: the newest acknowledged entry of each key.
    last_of_key = {int(m.removeprefix("marker").removesuffix("x")) % 40: m for m in acknowledged}
    texts = {e["text"].split()[0] for m in listed for e in m["entries"]}
    assert set(last_of_key.values()) <= texts
    if "CAO_DATABASE_URL" not in server.env:
        server.sql("INSERT INTO memories_fts(memories_fts) VALUES('integrity-check')")


# --- export and import ------------------------------------------------------------------------
@pytest.mark.anyio
async def test_export_then_import_round_trips_exactly_across_engines(cao_factory, pg_cao_factory, tmp_path) -> None:
    source = cao_factory().start()
    agent = agent_in(source, git_repo(tmp_path / "repo"))
    async with mcp_session(agent_env(source, agent["id"])) as session:
        await call(session, "memory_store", content="first", key="k", tags=["a", "b"], memory_type="feedback")
        await call(session, "memory_store", content='second, with ünïcödé and "quotes"\nand a newline', key="k")
        await call(session, "memory_store", content="session fact", scope="session")
        await call(session, "memory_recall", query="fact")  # a recall count to carry over
    cli(
        source, "memory", "add", "--scope", "agent", "--scope-id", "reviewer", "be strict", "--type", "user", check=True
    )
    dump = tmp_path / "memories.jsonl"
    cli(source, "memory", "export", str(dump), check=True)
    lines = dump.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["entries"][1]["text"].endswith("and a newline")
    target = pg_cao_factory("pg").start()
    imported = json.loads(cli(target, "memory", "import", str(dump), "--json", check=True).stdout)
    assert imported == {"imported": 3, "replaced": 0}
    assert cli(target, "memory", "export", check=True).stdout == dump.read_text(encoding="utf-8")
    # Again: each line replaces its memory, nothing doubles.
    again = json.loads(cli(target, "memory", "import", str(dump), "--json", check=True).stdout)
    assert again == {"imported": 3, "replaced": 3}
    assert cli(target, "memory", "export", check=True).stdout == dump.read_text(encoding="utf-8")
    assert json.loads(cli(target, "memory", "stats", "--json", check=True).stdout)["total"] == 3


# --- bad input --------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_bad_input_is_refused_with_its_reason_and_nothing_is_stored(cao: CaoServer, tmp_path: Path) -> None:
    post = lambda **body: cao.client.post("/memories", json={"content": "x", "scope": "global", **body})  # noqa: E731
    cases = [
        (post(scope="planet"), "invalid scope 'planet'"),
        (post(memory_type="gossip"), "invalid memory_type 'gossip'"),
        (post(content="   "), "content must be a non-empty string"),
        (post(content="y" * 8001), "content too long: 8001 characters (limit 8000)"),
        (post(key="two\nlines"), "key must not contain control characters"),
        (post(tags=[f"t{n}" for n in range(17)]), "too many tags: 17 (limit 16)"),
        (post(tags=["has space"]), "invalid tag 'has space'"),
        (post(scope="project"), "the project scope needs a scope id"),
        (cao.client.get("/memories", params={"limit": 0}), "limit must be an integer from 1 to 100"),
        (cao.client.get("/memories", params={"sort_by": "mood"}), "invalid sort_by 'mood'"),
        (cao.client.post("/memories/import", json={"jsonl": '{"scope": "global"}\n'}), "line 1: missing scope_id"),
        (cao.client.post("/memories/import", json={"jsonl": "not json"}), "line 1: not JSON"),
        (cao.client.delete("/memories/99"), "memory 99 not found"),
    ]
    for resp, reason in cases:
        assert resp.status_code in (400, 404) and reason in resp.json()["detail"], (reason, resp.text)
    agent = agent_in(cao, git_repo(tmp_path / "repo"))
    async with mcp_session(agent_env(cao, agent["id"])) as session:
        bad = await call(session, "memory_store", content="x", scope="galaxy")
        assert not bad["success"] and "invalid scope 'galaxy'" in bad["error"]
        bad = await call(session, "memory_recall", sort_by="vibes")
        assert not bad["success"] and "invalid sort_by 'vibes'" in bad["error"]
    assert json.loads(cli(cao, "memory", "stats", "--json", check=True).stdout)["total"] == 0


# --- the ops MCP server: the user's tools, outside any agent -------------------------------------
@pytest.mark.anyio
async def test_the_ops_server_stores_in_the_project_it_runs_in_and_reads_every_scope(
    cao: CaoServer, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "repo")
    agent = agent_in(cao, git_repo(tmp_path / "elsewhere"))
    async with mcp_session(agent_env(cao, agent["id"])) as session:
        await call(session, "memory_store", content="elsewhere uses tabs", key="indent")
    env = {k: v for k, v in cao.env.items() if k not in ("CAO_TERMINAL_ID", "CAO_MCP_TOKEN")}
    command = str(Path(sys.executable).parent / "cao-ops-mcp-server")
    params = StdioServerParameters(command=command, args=[], env=env, cwd=str(repo))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        stored = await call(session, "memory_store", content="this repo uses spaces", key="indent")
        assert stored["success"] and stored["memory"]["scope_id"] == str(repo), stored
        found = await call(session, "memory_recall", query="indent tabs spaces", sort_by="score")
        assert {m["scope_id"] for m in found["memories"]} == {str(repo), str(tmp_path / "elsewhere")}
        gone = await call(session, "memory_forget", key="indent", scope="project")
        assert gone["success"] and gone["forgotten"]["scope_id"] == str(repo), gone
    assert [m["content"] for m in memories(cao)] == ["elsewhere uses tabs"]
