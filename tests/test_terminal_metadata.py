"""Workers that know each other (issue 28, item 3), through every public surface of a real
cao-server with mock agents: a terminal's description, group and metadata set at creation and
replaced over HTTP, the CLI and MCP (`update_metadata`), its siblings (`GET .../siblings`,
`list_siblings`), the `discovery` marker those tools need, and bad input answered with a 422 that
names the problem while nothing changes.
"""

from __future__ import annotations

import json
import shutil

import pytest
from cao_support import CaoServer, cli
from mcp_support import agent_env, call, mcp_session

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

DISCOVERY_TOOLS = "@cao-mcp-server,discovery,fs_read"


def new_session(cao: CaoServer, body: dict | None = None, **params: str) -> dict:
    resp = cao.client.post(
        "/sessions", params={"agent_profile": "developer", "provider": "mock_cli", **params}, json=body
    )
    assert resp.status_code == 201, resp.text
    return resp.json()


def new_terminal(cao: CaoServer, session: str, body: dict | None = None, **params: str) -> dict:
    resp = cao.client.post(
        f"/sessions/{session}/terminals",
        params={"agent_profile": "developer", "provider": "mock_cli", **params},
        json=body,
    )
    assert resp.status_code == 201, resp.text
    return resp.json()


def labels(term: dict) -> tuple:
    return term["description"], term["group"], term["metadata"]


# --- HTTP -------------------------------------------------------------------------------------
def test_labels_given_at_creation_read_back_everywhere_and_are_replaced_whole(cao: CaoServer):
    first = new_session(
        cao, {"description": "plans the work", "group": ["team-a"], "metadata": {"phase": "plan", "n": 1}}
    )
    assert labels(first) == ("plans the work", ["team-a"], {"phase": "plan", "n": 1})
    worker = new_terminal(cao, first["session_name"], {"description": "writes code", "group": ["team-a", "api"]})
    assert labels(worker) == ("writes code", ["team-a", "api"], None)
    listed = {t["id"]: t for t in cao.client.get(f"/sessions/{first['session_name']}/terminals").json()}
    assert labels(listed[worker["id"]]) == ("writes code", ["team-a", "api"], None)
    assert labels(cao.client.get(f"/terminals/{first['id']}").json()) == labels(first)

    # Metadata: the last write wins, whole (no merge); null clears.
    one = cao.client.patch(f"/terminals/{first['id']}/metadata", json={"metadata": {"phase": "review"}})
    assert one.status_code == 200 and one.json()["metadata"] == {"phase": "review"}, one.text
    assert cao.client.get(f"/terminals/{first['id']}").json()["metadata"] == {"phase": "review"}
    group = cao.client.patch(f"/terminals/{first['id']}/group", json={"group": ["team-b", "ops"]})
    assert group.status_code == 200 and group.json()["group"] == ["team-b", "ops"]
    desc = cao.client.patch(f"/terminals/{first['id']}/description", json={"description": "reviews"})
    assert desc.status_code == 200 and desc.json()["description"] == "reviews"
    for field in ("metadata", "group", "description"):
        cleared = cao.client.patch(f"/terminals/{first['id']}/{field}", json={field: None})
        assert cleared.status_code == 200 and cleared.json()[field] is None, cleared.text
    assert labels(cao.client.get(f"/terminals/{first['id']}").json()) == (None, None, None)


BAD_BODIES = [
    ("metadata", {"metadata": {"blob": "x" * (16 * 1024)}}, "too large"),
    ("metadata", {"metadata": ["not", "an", "object"]}, "metadata"),
    ("metadata", {"metadata": {"": 1}}, "key"),
    ("metadata", {"metadata": {"k" * 129: 1}}, "key"),
    ("metadata", {}, "metadata"),  # the key is required: a forgotten field never clears
    ("group", {"group": [f"g{i}" for i in range(17)]}, "17 elements"),
    ("group", {"group": ["x" * 129]}, "too long"),
    ("group", {"group": [""]}, "non-empty"),
    ("group", {"group": ["bad\x1b[31m"]}, "control"),
    ("group", {"group": "team-a"}, "group"),
    ("description", {"description": "d" * 1025}, "too long"),
    ("description", {"description": 42}, "description"),
]


@pytest.mark.parametrize(
    ("field", "body", "said"), BAD_BODIES, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD_BODIES)]
)
def test_bad_labels_are_422_with_the_reason_and_change_nothing(cao_module: CaoServer, field, body, said):
    cao = cao_module
    term = new_session(cao, {"description": "kept", "group": ["kept"], "metadata": {"kept": True}})
    resp = cao.client.patch(f"/terminals/{term['id']}/{field}", json=body)
    assert resp.status_code == 422, resp.text
    assert said in resp.text, resp.text
    assert labels(cao.client.get(f"/terminals/{term['id']}").json()) == ("kept", ["kept"], {"kept": True})
    cao.client.delete(f"/sessions/{term['session_name']}")


def test_a_create_with_bad_labels_is_422_and_creates_nothing(cao: CaoServer):
    resp = cao.client.post(
        "/sessions",
        params={"agent_profile": "developer", "provider": "mock_cli", "session_name": "labels-bad"},
        json={"metadata": {"blob": "x" * 20_000}},
    )
    assert resp.status_code == 422 and "too large" in resp.text, resp.text
    assert cao.client.get("/sessions/cao-labels-bad").status_code == 404
    assert cao.client.get("/terminals").json() == []


def test_unknown_and_malformed_terminal_ids(cao_module: CaoServer):
    cao = cao_module
    for path, body in (
        ("metadata", {"metadata": {}}),
        ("group", {"group": None}),
        ("description", {"description": ""}),
    ):
        assert cao.client.patch(f"/terminals/0badf00d/{path}", json=body).status_code == 404
        assert cao.client.patch(f"/terminals/NOT-AN-ID/{path}", json=body).status_code == 422
    assert cao.client.get("/terminals/0badf00d/siblings").status_code == 404


def test_siblings_share_the_first_depth_group_elements_and_stay_in_the_session(cao: CaoServer):
    lead = new_session(cao, {"group": ["team", "api"], "description": "lead"}, session_name="sib-a")
    api_dev = new_terminal(cao, "cao-sib-a", {"group": ["team", "api"], "description": "api dev"})
    web_dev = new_terminal(cao, "cao-sib-a", {"group": ["team", "web"]})
    loner = new_terminal(cao, "cao-sib-a")
    elsewhere = new_session(cao, {"group": ["team", "api"]}, session_name="sib-b")

    def ids(terminal_id: str, **params) -> set[str]:
        resp = cao.client.get(f"/terminals/{terminal_id}/siblings", params=params)
        assert resp.status_code == 200, resp.text
        return {s["id"] for s in resp.json()}

    assert ids(lead["id"]) == {api_dev["id"], web_dev["id"]}  # depth 1: "team"
    assert ids(lead["id"], depth=2) == {api_dev["id"]}
    assert ids(lead["id"], depth=2, cross_session="true") == {api_dev["id"], elsewhere["id"]}
    # Without a group: every other agent of the session, whatever their group.
    assert ids(loner["id"]) == {lead["id"], api_dev["id"], web_dev["id"]}
    assert ids(loner["id"], cross_session="true") == {lead["id"], api_dev["id"], web_dev["id"]}
    [item] = [s for s in cao.client.get(f"/terminals/{lead['id']}/siblings", params={"depth": 2}).json()]
    assert item == {
        "id": api_dev["id"],
        "session_name": "cao-sib-a",
        "agent_profile": "developer",
        "provider": "mock_cli",
        "status": item["status"],
        "description": "api dev",
        "group": ["team", "api"],
        "metadata": None,
    }
    assert item["status"] in {"idle", "completed", "processing"}
    assert cao.client.get(f"/terminals/{lead['id']}/siblings", params={"depth": 0}).status_code == 422


# --- MCP --------------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_list_siblings_update_metadata_and_described_workers_over_mcp(cao: CaoServer):
    sup = new_session(cao, {"group": ["crew"]}, allowed_tools=DISCOVERY_TOOLS, session_name="mcp-sib")
    peer = new_terminal(cao, "cao-mcp-sib", {"group": ["crew"], "description": "peer"})
    async with mcp_session(agent_env(cao, sup["id"])) as session:
        listed = await call(session, "list_siblings")
        assert listed["success"] is True and listed["group"] == ["crew"], listed
        assert [(s["id"], s["description"]) for s in listed["siblings"]] == [(peer["id"], "peer")]

        updated = await call(session, "update_metadata", metadata={"progress": 0.5, "files": ["a.py"]})
        assert updated == {"success": True, "terminal_id": sup["id"], "metadata": {"progress": 0.5, "files": ["a.py"]}}
        again = await call(session, "update_metadata", metadata={"progress": 1})
        assert again["metadata"] == {"progress": 1}  # replaced, not merged
        too_big = await call(session, "update_metadata", metadata={"blob": "x" * 20_000})
        assert too_big["success"] is False and "too large" in too_big["error"], too_big
        assert cao.client.get(f"/terminals/{sup['id']}").json()["metadata"] == {"progress": 1}

        assigned = await call(session, "assign", agent_profile="developer", message="index", description="indexer")
        assert assigned["success"] is True, assigned
        worker = cao.client.get(f"/terminals/{assigned['terminal_id']}").json()
        assert worker["description"] == "indexer" and worker["caller_id"] == sup["id"]

        before = {t["id"] for t in cao.client.get("/terminals").json()}
        refused = await call(session, "handoff", agent_profile="developer", message="x", description="d" * 1025)
        assert refused["success"] is False and "description too long" in refused["message"], refused
        assert {t["id"] for t in cao.client.get("/terminals").json()} == before  # no worker was made

    # A worker's description reaches it through a handoff as well (kept to read it back).
    step = cao.client.post(
        "/terminals/run-step",
        json={
            "agent": "developer",
            "provider": "mock_cli",
            "prompt": "hi",
            "description": "one-shot",
            "teardown": False,
        },
    )
    assert step.status_code == 200, step.text
    assert cao.client.get(f"/terminals/{step.json()['terminal_id']}").json()["description"] == "one-shot"


@pytest.mark.anyio
async def test_discovery_tools_need_the_discovery_marker(cao: CaoServer):
    plain = new_session(cao, {"metadata": {"mine": 1}}, allowed_tools="@cao-mcp-server,fs_read")
    async with mcp_session(agent_env(cao, plain["id"])) as session:
        for tool, args in (("list_siblings", {}), ("update_metadata", {"metadata": {"x": 1}})):
            result = await call(session, tool, **args)
            assert result["success"] is False and "`discovery` tool marker" in result["error"], result
    assert cao.client.get(f"/terminals/{plain['id']}").json()["metadata"] == {"mine": 1}
    # The user, outside any agent, has no terminal to speak for.
    async with mcp_session(agent_env(cao, None)) as session:
        result = await call(session, "list_siblings")
        assert result["success"] is False and "CAO_TERMINAL_ID" in result["error"], result


# --- the CLI ----------------------------------------------------------------------------------
def test_cao_terminal_meta_and_siblings(cao: CaoServer):
    term = new_session(cao, {"metadata": {"keep": "me", "drop": 1}}, session_name="cli-meta")
    other = new_terminal(cao, "cao-cli-meta", {"group": ["g1", "x"]})
    done = cli(
        cao,
        "terminal", "meta", term["id"],
        "--set", "phase=review", "--set", "count=3", "--unset", "drop",
        "--group", "g1", "--group", "y", "--description", "the reviewer", "--json",
        check=True,
    )  # fmt: skip
    shown = json.loads(done.stdout)
    assert shown == {
        "id": term["id"],
        "description": "the reviewer",
        "group": ["g1", "y"],
        "metadata": {"keep": "me", "phase": "review", "count": 3},
    }
    assert labels(cao.client.get(f"/terminals/{term['id']}").json()) == (
        "the reviewer",
        ["g1", "y"],
        {"keep": "me", "phase": "review", "count": 3},
    )
    sib = json.loads(cli(cao, "terminal", "siblings", term["id"], "--json", check=True).stdout)
    assert [s["id"] for s in sib] == [other["id"]]
    assert "No siblings." in cli(cao, "terminal", "siblings", term["id"], "--depth", "2", check=True).stdout
    plain = cli(cao, "terminal", "meta", term["id"], check=True).stdout
    assert "the reviewer" in plain and "g1/y" in plain

    bad = cli(cao, "terminal", "meta", term["id"], "--description", "d" * 1100)
    assert bad.returncode != 0 and "description too long" in bad.stderr, bad.stderr
    assert cao.client.get(f"/terminals/{term['id']}").json()["description"] == "the reviewer"
    cleared = json.loads(cli(cao, "terminal", "meta", term["id"], "--clear-group", "--clear-metadata", "--json").stdout)
    assert (cleared["group"], cleared["metadata"]) == (None, None)


# --- the web UI's board -------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_the_board_shows_a_terminals_description_and_group_as_text(cao: CaoServer):
    from browser_support import launch, signed_in
    from playwright.sync_api import expect, sync_playwright

    term = new_session(cao, {"description": "reviews <b>the</b> API", "group": ["team-a", "api"]})
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            with signed_in(browser, cao) as (page, errors):
                row = page.locator(f"[data-terminal-id='{term['id']}']").first
                expect(row.locator("[data-field=description]")).to_have_text("reviews <b>the</b> API", timeout=10000)
                expect(row.locator("[data-field=group]")).to_have_text("group: team-a / api")
                assert row.locator("[data-field=description] b").count() == 0  # text, never markup
                errors.assert_none()
        finally:
            browser.close()
