"""The mock agent's scripted brain: rule matching, templates, collect/until, tool results
(with a fake tool caller), and one brain step going through the real cao-mcp-server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cao_support import CaoServer, wait_until

from cao_testkit.mock.brain import (
    Brain,
    BrainError,
    brain_from_env,
    load_rules,
    parse_rules,
    render,
)
from cao_testkit.mock.mcp_caller import mcp_command
from cao_testkit.provider import build_launch
from cli_agent_orchestrator.providers.base import LaunchContext


class FakeTools:
    """Records calls and answers from a per-tool script (a dict, or a function of the args)."""

    def __init__(self, **answers: Any):
        self.answers = answers
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, args))
        answer = self.answers.get(name, {"success": True})
        return answer(args) if callable(answer) else answer


def brain(rules: list[dict], tools: FakeTools | None = None) -> Brain:
    return Brain(parse_rules(rules), tools or FakeTools())


# --- matching and templates ---------------------------------------------------------------
def test_first_matching_rule_wins_and_unmatched_input_gets_the_usual_echo():
    b = brain(
        [
            {"match": "hello", "reply": "first"},
            {"match": "hel+o", "reply": "second"},
            {"match": "other", "reply": "third"},
        ]
    )
    assert b.reply("say hello") == "first"
    assert b.reply("helllo") == "second"
    assert b.reply("nothing here") == "MOCK: nothing here"


def test_rule_without_reply_uses_the_fallback_and_a_missing_match_matches_everything():
    tools = FakeTools()
    b = Brain(parse_rules([{"steps": [{"tool": "ping"}]}]), tools, fallback=lambda m: f"echo<{m}>")
    assert b.reply("anything") == "echo<anything>"
    assert tools.calls == [("ping", {})]


def test_template_variables_groups_and_unknown_names():
    b = brain([{"match": r"Analyze (\w+) (data)", "reply": "{g1}/{g2}/{g3}|{match}|{nope}|{message}|{ not a name }"}])
    assert (
        b.reply("please Analyze sales data\nnow")
        == "sales/data/{g3}|Analyze sales data|{nope}|please Analyze sales data\nnow|{ not a name }"
    )


def test_match_is_dotall_search():
    b = brain([{"match": "start(.*)end", "reply": "[{g1}]"}])
    assert b.reply("xx start\nmiddle\nend yy") == "[\nmiddle\n]"


def test_render_lists_counts_and_non_strings():
    variables = {"results": ["a", "b"], "n": 3, "empty": []}
    assert render("{results}|{results_count}|{n}|{empty_count}|{n_count}", variables) == "a\nb|2|3|0|{n_count}"


# --- collect / until ------------------------------------------------------------------------
def test_collect_until_waits_then_runs_steps_once_enough_arrived():
    tools = FakeTools(handoff={"success": True, "output": "the report", "terminal_id": "aaaaaaaa"})
    b = brain(
        [
            {
                "match": r"Analysis result: ([^\n]*)",
                "collect": "results",
                "until": {"results": 2},
                "waiting": "Got {results_count} of 2",
                "steps": [
                    {
                        "tool": "handoff",
                        "args": {"agent_profile": "reporter", "message": "Fill with: {results}"},
                        "save": "report",
                    }
                ],
                "reply": "FINAL REPORT:\n{report}",
            }
        ],
        tools,
    )
    assert b.reply("Analysis result: sales up\n\n[Message from terminal 11111111.]") == "Got 1 of 2"
    assert tools.calls == []
    assert b.reply("Analysis result: users up\n\n[Message from terminal 22222222.]") == "FINAL REPORT:\nthe report"
    assert tools.calls == [("handoff", {"agent_profile": "reporter", "message": "Fill with: sales up\nusers up"})]
    assert b.variables["results"] == ["sales up", "users up"]


def test_collect_without_group_keeps_the_whole_message_and_waiting_defaults():
    b = brain([{"match": "item", "collect": "items", "until": {"items": 3}, "reply": "{items_count}: {items}"}])
    assert b.reply("item one") == "waiting"
    assert b.reply("item two") == "waiting"
    assert b.reply("item three") == "3: item one\nitem two\nitem three"


def test_until_on_a_list_nobody_filled_yet_waits():
    b = brain([{"match": "go", "until": {"later": 1}, "waiting": "have {later_count}"}])
    assert b.reply("go") == "have {later_count}"  # no such list yet: the name stays literal


# --- steps and results --------------------------------------------------------------------------
def test_saved_main_values_per_tool_and_state_across_turns():
    tools = FakeTools(
        assign=lambda a: {"success": True, "terminal_id": "w-" + a["message"][-1], "message": "ok"},
        handoff={"success": True, "output": "TEMPLATE", "terminal_id": "bbbbbbbb"},
        send_message={"success": True, "message_id": 7, "receiver_id": "cccccccc"},
        other={"success": True, "value": [1, 2]},
    )
    b = brain(
        [
            {
                "match": "start",
                "steps": [
                    {"tool": "assign", "args": {"agent_profile": "analyst", "message": "job A"}, "save": "a"},
                    {"tool": "assign", "args": {"agent_profile": "analyst", "message": "job B"}, "save": "b"},
                    {
                        "tool": "handoff",
                        "args": {"agent_profile": "reporter", "message": "for {a} and {b}"},
                        "save": "template",
                    },
                    {"tool": "send_message", "args": {"message": "hi", "receiver_id": "{a}"}, "save": "mid"},
                    {"tool": "other", "args": {"n": 1, "flag": True, "nested": ["{a}", {"k": "{b}"}]}, "save": "raw"},
                ],
                "reply": "{a} {b} {template} {mid} {raw}",
            },
            {"match": "later", "reply": "still {template}"},
        ],
        tools,
    )
    assert b.reply("start") == 'w-A w-B TEMPLATE 7 {"success": true, "value": [1, 2]}'
    assert tools.calls[2] == ("handoff", {"agent_profile": "reporter", "message": "for w-A and w-B"})
    assert tools.calls[3] == ("send_message", {"message": "hi", "receiver_id": "w-A"})
    assert tools.calls[4] == ("other", {"n": 1, "flag": True, "nested": ["w-A", {"k": "w-B"}]})
    assert b.reply("later") == "still TEMPLATE"


def test_failed_tool_ends_the_turn_with_an_error_unless_allowed():
    tools = FakeTools(
        send_message={"success": False, "error": "no caller to reply to"},
        handoff={"success": False, "message": "Handoff timed out after 5 seconds", "output": None},
    )
    b = brain(
        [
            {
                "match": "strict",
                "steps": [{"tool": "send_message", "args": {"message": "x"}}, {"tool": "never"}],
                "reply": "not reached",
            },
            {
                "match": "lenient",
                "steps": [
                    {
                        "tool": "handoff",
                        "args": {"agent_profile": "r", "message": "m"},
                        "save": "out",
                        "allow_failure": True,
                    }
                ],
                "reply": "went on: {out}",
            },
        ],
        tools,
    )
    with pytest.raises(BrainError) as err:
        b.reply("strict")
    assert err.value.error_text == "send_message failed: no caller to reply to"
    assert [c[0] for c in tools.calls] == ["send_message"]
    assert b.reply("lenient") == "went on: Handoff timed out after 5 seconds"


# --- configuration ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rules, words",
    [
        ([{"match": "x", "stesp": []}], "unknown key"),
        ([{"match": "("}], "bad `match` regex"),
        ([{"match": "x", "steps": [{"args": {}}]}], "`tool`"),
        ([{"match": "x", "steps": [{"tool": "t", "save": "bad name"}]}], "`save`"),
        ([{"match": "x", "until": {"r": "two"}}], "`until`"),
        ({"not": "a list"}, "must be a list"),
    ],
)
def test_bad_rules_are_reported_with_their_place(rules: Any, words: str):
    with pytest.raises(ValueError, match=words):
        parse_rules(rules)


def test_load_rules_from_env_json_and_from_a_yaml_file(tmp_path: Path):
    assert load_rules({}) is None
    path = tmp_path / "brain.yaml"
    path.write_text("rules:\n  - match: 'Analyze (\\w+) data'\n    reply: \"got {g1}\"\n", encoding="utf-8")
    rules = load_rules(
        {"CAO_MOCK_RULES": json.dumps([{"match": "first", "reply": "inline"}]), "CAO_MOCK_BRAIN": str(path)}
    )
    assert rules is not None
    b = Brain(rules, FakeTools())
    assert b.reply("first Analyze x data") == "inline"  # inline rules are tried first
    assert b.reply("Analyze sales data") == "got sales"


def test_no_rules_means_no_brain_and_broken_rules_fail_every_turn_visibly():
    assert brain_from_env({}) is None
    reply = brain_from_env({"CAO_MOCK_RULES": '[{"match": "("}]'})
    assert reply is not None
    with pytest.raises(BrainError, match="mock brain: CAO_MOCK_RULES, rule 1: bad `match` regex"):
        reply("hello")


def test_mcp_command_from_env():
    assert mcp_command({"CAO_MOCK_MCP_COMMAND": json.dumps(["/x/cao-mcp-server", "--flag"])}) == [
        "/x/cao-mcp-server",
        "--flag",
    ]
    assert mcp_command({}) == ["cao-mcp-server"]
    with pytest.raises(ValueError):
        mcp_command({"CAO_MOCK_MCP_COMMAND": "[1, 2]"})


def test_provider_passes_rules_as_json_and_the_mcp_command(tmp_path: Path):
    rules = [{"match": "a", "reply": "b", "steps": [{"tool": "assign", "args": {"n": 1}}]}]
    ctx = LaunchContext(
        terminal_id="abcdef12",
        profile_name="sup",
        system_prompt="",
        working_directory="/",
        home_dir=tmp_path,
        mcp_server_argv=["/bin/cao-mcp-server"],
        profile_extra={"mock": {"rules": rules, "brain": "b.yaml", "delay_ms": 20}},
    )
    env = build_launch(ctx).env
    assert json.loads(env["CAO_MOCK_RULES"]) == rules
    assert env["CAO_MOCK_BRAIN"] == "b.yaml" and env["CAO_MOCK_DELAY_MS"] == "20"
    assert json.loads(env["CAO_MOCK_MCP_COMMAND"]) == ["/bin/cao-mcp-server"]


# --- through the real cao-mcp-server --------------------------------------------------------------
SENDER_PROFILE = """---
name: brainsender
provider: mock_cli
mcpServers:
  cao-mcp-server:
    type: stdio
    command: cao-mcp-server
mock:
  delay_ms: 20
  rules:
    - match: 'tell ([0-9a-f]{8}): (.*)'
      steps:
        - tool: send_message
          args: {receiver_id: "{g1}", message: "{g2}"}
          save: mid
      reply: "sent message {mid} to {g1}"
---
Test sender.
"""


def _inbox(cao: CaoServer, tid: str) -> list[dict]:
    return cao.client.get(f"/terminals/{tid}/inbox/messages", params={"limit": 100}).json()


def _last(cao: CaoServer, tid: str) -> str:
    """The last reply, or "" while the agent has none yet (409: it is still working on it)."""
    resp = cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"})
    if resp.status_code == 409:
        return ""
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_brain_step_goes_through_cao_mcp_server_into_another_inbox(cao: CaoServer):
    (cao.home / "agent-store").mkdir(parents=True, exist_ok=True)
    (cao.home / "agent-store" / "brainsender.md").write_text(SENDER_PROFILE, encoding="utf-8")
    receiver = cao.create_session(profile="developer")["id"]
    session = cao.client.get(f"/terminals/{receiver}").json()["session_name"]
    resp = cao.client.post(f"/sessions/{session}/terminals", params={"agent_profile": "brainsender"})
    assert resp.status_code == 201, resp.text
    sender = resp.json()["id"]

    cao.send(sender, f"tell {receiver}: hello through MCP")
    cao.wait_status(sender, "completed", timeout=30)
    messages = wait_until(
        lambda: [m for m in _inbox(cao, receiver) if m["status"] == "delivered"],
        timeout=15,
        message="delivered inbox message",
    )
    assert len(messages) == 1
    msg = messages[0]
    assert msg["sender_id"] == sender
    assert msg["message"].startswith("hello through MCP\n\n[Message from terminal " + sender)
    assert _last(cao, sender) == f"sent message {msg['id']} to {receiver}"
    wait_until(lambda: _last(cao, receiver).startswith("MOCK: hello through MCP"), message="receiver's reply")

    # A failing tool result is an agent error (status error), and the session survives it.
    cao.send(sender, "tell 0badc0de: nobody is there")
    assert cao.wait_status(sender, "error", timeout=30) == "error"
    reason = cao.client.get(f"/terminals/{sender}").json()["status_reason"]
    assert reason.startswith("✗ Error: send_message failed:") and "0badc0de" in reason
    cao.send(sender, f"tell {receiver}: second")
    cao.wait_status(sender, "completed", timeout=30)
    assert sorted(m["message"].split("\n")[0] for m in _inbox(cao, receiver)) == ["hello through MCP", "second"]
