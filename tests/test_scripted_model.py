"""The scripted model server, driven over HTTP the way each real CLI drives its vendor API.

Every turn streams SSE and parses the events back into what the CLI would
build from them (text, tool calls, stop reason), then sends the follow-up
request in that CLI's own history format. No CLI binaries are needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cao_support import wait_until

from cao_testkit.scripted_model import ScriptedModelServer, ScriptError, parse_script

HANDOFF_SCHEMA = {
    "type": "object",
    "properties": {"agent_profile": {"type": "string"}, "message": {"type": "string"}, "timeout": {"type": "integer"}},
    "required": ["agent_profile", "message"],
}
REMINDER = "<system-reminder>\nAs you answer, use the context below.\n</system-reminder>"


def obj(props: dict[str, str], required: list[str]) -> dict:
    return {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}, "required": required}


# ---------------------------------------------------------------- per-API clients (what each CLI does)
def sse_events(resp: httpx.Response) -> list[tuple[str | None, Any]]:
    if resp.status_code != 200:  # surface HTTP errors the way the vendor SDKs do
        resp.read()
        resp.raise_for_status()
    assert resp.headers["content-type"].startswith("text/event-stream")
    events, name = [], None
    for line in resp.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
            events.append((name, data if data == "[DONE]" else json.loads(data)))
            name = None
    return events


class Claude:
    """Anthropic Messages, as Claude Code sends it (?beta=true, system reminders, stream)."""

    tools = [
        {
            "name": "Bash",
            "input_schema": obj({"command": "string", "description": "string", "timeout": "number"}, ["command"]),
        },
        {"name": "Read", "input_schema": obj({"file_path": "string"}, ["file_path"])},
        {"name": "mcp__cao-mcp-server__handoff", "input_schema": HANDOFF_SCHEMA},
    ]

    def __init__(self, client: httpx.Client, base: str) -> None:
        self.client, self.base, self.messages = client, base, []

    def user(self, text: str) -> None:
        self.messages.append(
            {"role": "user", "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": text}]}
        )

    def turn(self, tools: bool = True) -> dict:
        body = {
            "model": "claude-opus-4-8",
            "max_tokens": 32000,
            "stream": True,
            "system": "You are Claude Code.",
            "messages": self.messages + [{"role": "system", "content": "mid-conversation note"}],
        }
        if tools:
            body["tools"] = self.tools
        with self.client.stream("POST", f"{self.base}/v1/messages?beta=true", json=body) as resp:
            events = sse_events(resp)
        assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
        blocks: dict[int, dict] = {}
        stop = None
        for name, data in events:
            if name == "content_block_start":
                blocks[data["index"]] = dict(data["content_block"], _json="")
            elif name == "content_block_delta":
                block, delta = blocks[data["index"]], data["delta"]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                else:
                    block["_json"] += delta["partial_json"]
            elif name == "message_delta":
                stop = data["delta"]["stop_reason"]
        content = []
        for _, block in sorted(blocks.items()):
            raw = block.pop("_json")
            if block["type"] == "tool_use":
                block["input"] = json.loads(raw)
            content.append(block)
        self.messages.append({"role": "assistant", "content": content})
        text = "".join(b.get("text", "") for b in content if b["type"] == "text")
        calls = [{"name": b["name"], "args": b["input"], "id": b["id"]} for b in content if b["type"] == "tool_use"]
        return {"text": text, "calls": calls, "stop": stop}

    def tool_result(self, call: dict, output: str) -> None:
        self.messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call["id"], "content": [{"type": "text", "text": output}]},
                    {"type": "text", "text": REMINDER},
                ],
            }
        )


class Codex:
    """OpenAI Responses, as Codex sends it: developer + environment_context items, namespaced MCP tools."""

    tools = [
        {
            "type": "function",
            "name": "exec_command",
            "parameters": obj({"cmd": "string", "workdir": "string", "yield_time_ms": "number"}, ["cmd"]),
        },
        {
            "type": "namespace",
            "name": "mcp__cao-mcp-server",
            "tools": [{"type": "function", "name": "handoff", "parameters": HANDOFF_SCHEMA}],
        },
    ]

    def __init__(self, client: httpx.Client, base: str) -> None:
        self.client, self.base = client, base
        self.input: list[dict] = [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions/>"}]},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"}
                ],
            },
        ]

    def user(self, text: str) -> None:
        self.input.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})

    def turn(self, tools: bool = True) -> dict:
        body = {
            "model": "fake-model",
            "instructions": "You are Codex.",
            "input": self.input,
            "tools": self.tools if tools else [],
            "stream": True,
            "store": False,
        }
        with self.client.stream("POST", f"{self.base}/v1/responses", json=body) as resp:
            events = sse_events(resp)
        kinds = [name for name, _ in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert all(name == data["type"] for name, data in events)
        items = [data["item"] for name, data in events if name == "response.output_item.done"]
        assert [i["id"] for i in events[-1][1]["response"]["output"]] == [i["id"] for i in items]
        self.input += items
        deltas = "".join(d["delta"] for name, d in events if name == "response.output_text.delta")
        text = "".join(c["text"] for i in items if i["type"] == "message" for c in i["content"])
        assert deltas == text
        calls = [
            {"name": i["name"], "namespace": i.get("namespace"), "args": json.loads(i["arguments"]), "id": i["call_id"]}
            for i in items
            if i["type"] == "function_call"
        ]
        return {"text": text, "calls": calls}

    def tool_result(self, call: dict, output: str) -> None:
        self.input.append({"type": "function_call_output", "call_id": call["id"], "output": output})


class ChatCli:
    """OpenAI Chat Completions, as qwen-code and opencode send it."""

    tools: list[dict] = []

    def __init__(self, client: httpx.Client, base: str) -> None:
        self.client, self.base = client, base
        self.messages: list[dict] = [{"role": "system", "content": "You are a coding agent."}]

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def turn(self, tools: bool = True) -> dict:
        body = {
            "model": "fake-model",
            "messages": self.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = [{"type": "function", "function": f} for f in self.tools]
        with self.client.stream("POST", f"{self.base}/v1/chat/completions", json=body) as resp:
            events = sse_events(resp)
        assert events[-1][1] == "[DONE]"
        text, calls, finish = "", {}, None
        for _, data in events[:-1]:
            for choice in data["choices"]:
                delta = choice["delta"]
                text += delta.get("content") or ""
                for tc in delta.get("tool_calls") or []:
                    slot = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.get("id") or slot["id"]
                    slot["name"] += (tc.get("function") or {}).get("name") or ""
                    slot["arguments"] += (tc.get("function") or {}).get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        assert "usage" in events[-2][1]
        found = [{"name": c["name"], "args": json.loads(c["arguments"]), "id": c["id"]} for c in calls.values()]
        msg: dict = {"role": "assistant", "content": text or None}
        if found:
            msg["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls.values()
            ]
        self.messages.append(msg)
        return {"text": text, "calls": found, "stop": finish}

    def tool_result(self, call: dict, output: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})


class Qwen(ChatCli):
    tools = [
        {
            "name": "run_shell_command",
            "parameters": obj({"command": "string", "is_background": "boolean"}, ["command", "is_background"]),
        },
        {"name": "tool_search", "parameters": obj({"query": "string"}, ["query"])},
    ]


class OpenCode(ChatCli):
    tools = [
        {"name": "bash", "parameters": obj({"command": "string", "description": "string"}, ["command", "description"])},
        {"name": "cao-mcp-server_handoff", "parameters": HANDOFF_SCHEMA},
    ]


class Gemini:
    """Gemini streamGenerateContent?alt=sse, as Gemini CLI sends it."""

    tools = [
        {
            "functionDeclarations": [
                {
                    "name": "run_shell_command",
                    "parametersJsonSchema": obj({"command": "string", "description": "string"}, ["command"]),
                },
                {"name": "handoff", "parametersJsonSchema": HANDOFF_SCHEMA},
            ]
        }
    ]

    def __init__(self, client: httpx.Client, base: str) -> None:
        self.client, self.base = client, base
        self.contents: list[dict] = [
            {"role": "user", "parts": [{"text": "This is the Gemini CLI. Context..."}]},
            {"role": "model", "parts": [{"text": "Got it."}]},
        ]

    def user(self, text: str) -> None:
        self.contents.append({"role": "user", "parts": [{"text": text}]})

    def turn(self, tools: bool = True) -> dict:
        body: dict = {"contents": self.contents, "systemInstruction": {"parts": [{"text": "You are Gemini CLI."}]}}
        if tools:
            body["tools"] = self.tools
        url = f"{self.base}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        with self.client.stream("POST", url, json=body) as resp:
            events = sse_events(resp)
        parts = [p for _, d in events for p in d["candidates"][0]["content"]["parts"]]
        assert events[-1][1]["candidates"][0]["finishReason"] == "STOP"
        self.contents.append({"role": "model", "parts": parts})
        calls = [
            {"name": p["functionCall"]["name"], "args": p["functionCall"]["args"], "id": p["functionCall"]["id"]}
            for p in parts
            if "functionCall" in p
        ]
        return {"text": "".join(p.get("text", "") for p in parts), "calls": calls}

    def tool_result(self, call: dict, output: str) -> None:
        self.contents.append(
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": call["id"], "name": call["name"], "response": {"output": output}}}
                ],
            }
        )


CLIS = {"claude": Claude, "codex": Codex, "qwen": Qwen, "opencode": OpenCode, "gemini": Gemini}
SHELL = {
    "claude": ("Bash", {"command": "ls -la"}),
    "codex": ("exec_command", {"cmd": "ls -la"}),
    "qwen": ("run_shell_command", {"command": "ls -la", "is_background": False}),
    "opencode": ("bash", {"command": "ls -la", "description": "Run: ls -la"}),
    "gemini": ("run_shell_command", {"command": "ls -la"}),
}

SCRIPT = [
    {"match": "^say hello$", "reply": "Hello from the script."},
    {"match": "^poem", "steps": [{"text": "line one\nline two\n\nline four"}]},
    {
        "match": r"^list (\S+)",
        "steps": [
            {"text": "Listing {g1}.", "tool": "shell", "args": {"command": "ls {g1}"}},
            {"text": "Listing said: {tool_result}"},
        ],
    },
    {
        "match": r"^delegate to (\w+): (.*)",
        "steps": [
            {"tool": "mcp:cao-mcp-server:handoff", "args": {"agent_profile": "{g1}", "message": "{g2}"}},
            {"text": "Worker answered: {tool_result}"},
        ],
    },
    {"match": "^slow", "steps": [{"delay_ms": 400}, {"text": "finally"}]},
    {"match": "^flaky", "steps": [{"error": 529, "message": "Overloaded", "times": 2}, {"text": "recovered"}]},
    {"match": "^broken", "steps": [{"error": 429, "message": "quota gone"}]},
    {"match": "^title please", "when": "side", "reply": "A Scripted Title"},
]


@pytest.fixture(scope="module")
def model():
    with ScriptedModelServer() as server:
        server.set_script("t", SCRIPT)
        yield server


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c


def make(cli: str, model: ScriptedModelServer, client: httpx.Client, script: str = "t"):
    return CLIS[cli](client, model.base_url(script))


# ---------------------------------------------------------------- behaviour, for every API
@pytest.mark.parametrize("cli", CLIS)
def test_plain_and_multiline_text(cli, model, client):
    agent = make(cli, model, client)
    agent.user("say hello")
    assert agent.turn() == _plain("Hello from the script.", cli)
    agent.user("poem please")
    assert agent.turn()["text"] == "line one\nline two\n\nline four"
    agent.user("something unscripted " + "x" * 100)
    assert agent.turn()["text"] == "OK: " + ("something unscripted " + "x" * 100)[:80]


def _plain(text: str, cli: str) -> dict:
    out: dict = {"text": text, "calls": []}
    if cli in ("claude",):
        out["stop"] = "end_turn"
    if cli in ("qwen", "opencode"):
        out["stop"] = "stop"
    return out


@pytest.mark.parametrize("cli", CLIS)
def test_shell_tool_loop(cli, model, client):
    agent = make(cli, model, client)
    agent.user("list /tmp")
    first = agent.turn()
    name, args = SHELL[cli]
    args = {k: v.replace("ls -la", "ls /tmp") if isinstance(v, str) else v for k, v in args.items()}
    assert [(c["name"], c["args"]) for c in first["calls"]] == [(name, args)]
    assert first["text"] == "Listing /tmp."
    assert first.get("stop", "tool") in ("tool_use", "tool_calls", "tool")
    agent.tool_result(first["calls"][0], "a.txt\nb.txt")
    second = agent.turn()
    assert second["calls"] == [] and second["text"] == "Listing said: a.txt\nb.txt"
    # The next user message starts over at the first step.
    agent.user("list /var")
    assert agent.turn()["calls"][0]["name"] == name


@pytest.mark.parametrize("cli", ["claude", "codex", "opencode", "gemini"])
def test_mcp_tool_call(cli, model, client):
    agent = make(cli, model, client)
    agent.user("delegate to analyst: count the rows")
    first = agent.turn()
    expected = {
        "claude": ("mcp__cao-mcp-server__handoff", None),
        "codex": ("handoff", "mcp__cao-mcp-server"),
        "opencode": ("cao-mcp-server_handoff", None),
        "gemini": ("handoff", None),
    }[cli]
    (call,) = first["calls"]
    assert (call["name"], call.get("namespace")) == expected
    assert call["args"] == {"agent_profile": "analyst", "message": "count the rows"}
    agent.tool_result(call, '{"success": true, "output": "42 rows"}')
    assert agent.turn()["text"] == 'Worker answered: {"success": true, "output": "42 rows"}'


def test_qwen_loads_deferred_mcp_tool_with_tool_search(model, client):
    agent = make("qwen", model, client)
    agent.user("delegate to analyst: count the rows")
    first = agent.turn()
    assert [(c["name"], c["args"]) for c in first["calls"]] == [("tool_search", {"query": "handoff"})]
    agent.tool_result(first["calls"][0], "Loaded 1 tool: mcp__cao-mcp-server__handoff")
    # Like qwen: the found tool now appears in the request's tools.
    agent.tools = Qwen.tools + [{"name": "mcp__cao-mcp-server__handoff", "parameters": HANDOFF_SCHEMA}]
    second = agent.turn()
    assert [(c["name"], c["args"]) for c in second["calls"]] == [
        ("mcp__cao-mcp-server__handoff", {"agent_profile": "analyst", "message": "count the rows"})
    ]
    agent.tool_result(second["calls"][0], "done")
    assert agent.turn()["text"] == "Worker answered: done"


def test_missing_tool_is_reported_not_called(model, client):
    agent = make("qwen", model, client)
    agent.user("delegate to analyst: x")
    first = agent.turn()
    agent.tool_result(first["calls"][0], "No tools found")  # tool_search found nothing
    second = agent.turn()
    assert second["calls"] == [] and "not offered" in second["text"]


@pytest.mark.parametrize("cli", CLIS)
def test_side_request_without_tools_gets_plain_text(cli, model, client):
    agent = make(cli, model, client)
    agent.user("list /tmp")  # the main rule would call a tool
    side = agent.turn(tools=False)
    assert side == _plain("OK: list /tmp", cli)
    agent.user("title please")
    assert agent.turn(tools=False)["text"] == "A Scripted Title"
    log = [r for r in model.requests("t") if r["side"]]
    assert log and log[-1]["user_text"] == "title please"


@pytest.mark.parametrize("cli", CLIS)
def test_slow_reply(cli, model, client):
    """A `delay_ms` step holds that reply back while the model goes on answering others: the
    slow conversation is still waiting after another one got its whole answer."""
    script = f"slow-{cli}"
    model.set_script(
        script,
        [
            {"match": "^slow", "steps": [{"delay_ms": 2000}, {"text": "finally"}]},
            {"match": "^say hello$", "reply": "Hello from the script."},
        ],
    )
    slow, answers = make(cli, model, client, script), {}
    slow.user("slow one")
    thread = threading.Thread(target=lambda: answers.update(slow=slow.turn()))
    thread.start()
    try:
        wait_until(lambda: model.requests(script), message="the slow request received")  # logged, then held
        with httpx.Client(timeout=10) as other_client:
            other = make(cli, model, other_client, script)
            other.user("say hello")
            assert other.turn()["text"] == "Hello from the script."
        assert "slow" not in answers  # still held back
    finally:
        thread.join(15)
    assert answers["slow"]["text"] == "finally"


@pytest.mark.parametrize(
    "cli,status,path",
    [
        ("claude", 529, ("error", "type")),
        ("codex", 529, ("error", "code")),
        ("qwen", 529, ("error", "message")),
        ("gemini", 529, ("error", "status")),
    ],
)
def test_error_then_recovery(cli, status, path, model, client):
    agent = make(cli, model, client)
    agent.user(f"flaky for {cli}")
    for _ in range(2):
        with pytest.raises(httpx.HTTPStatusError) as info:
            agent.turn()
        assert info.value.response.status_code == status
    assert agent.turn()["text"] == "recovered"


def test_error_bodies_are_vendor_shaped(model, client):
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "broken"}],
        "tools": [{"name": "Bash", "input_schema": {}}],
    }
    resp = client.post(model.base_url("t", "/v1/messages"), json=body)
    assert resp.status_code == 429
    assert resp.json() == {"type": "error", "error": {"type": "rate_limit_error", "message": "quota gone"}}
    resp = client.post(
        model.base_url("t", "/v1/responses"),
        json={"model": "m", "input": "broken", "stream": True, "tools": Codex.tools},
    )
    assert resp.status_code == 429 and resp.json()["error"]["code"] == "rate_limit_exceeded"
    resp = client.post(
        model.base_url("t", "/v1beta/models/g:generateContent"),
        json={"contents": [{"role": "user", "parts": [{"text": "broken"}]}], "tools": Gemini.tools},
    )
    assert resp.json() == {"error": {"code": 429, "message": "quota gone", "status": "RESOURCE_EXHAUSTED"}}
    # A trailing error keeps failing.
    assert client.post(model.base_url("t", "/v1/messages"), json=body).status_code == 429


# ---------------------------------------------------------------- HTTP surface and plumbing
def test_non_streaming_and_misc_routes(model, client):
    assert client.head(model.url + "/").status_code == 200
    assert client.head(model.base_url("t") + "/").status_code == 200
    for path in ("/v1/models", "/s/t/v1/models"):
        data = client.get(model.url + path).json()
        assert data["object"] == "list" and data["data"][0]["type"] == "model"
    msg = client.post(
        model.base_url("t", "/v1/messages"),
        json={"model": "m", "messages": [{"role": "user", "content": "say hello"}], "tools": Claude.tools},
    ).json()
    assert msg["content"] == [{"type": "text", "text": "Hello from the script."}]
    gen = client.post(
        model.base_url("t", "/v1beta/models/gemini-2.5-flash:generateContent"),
        json={"contents": [{"role": "user", "parts": [{"text": "say hello"}]}], "tools": Gemini.tools},
    ).json()
    assert gen["candidates"][0]["content"]["parts"] == [{"text": "Hello from the script."}]
    chunks = client.post(
        model.base_url("t", "/v1beta/models/g:streamGenerateContent"),
        json={"contents": [{"role": "user", "parts": [{"text": "say hello"}]}], "tools": Gemini.tools},
    ).json()
    assert (
        "".join(p["text"] for c in chunks for p in c["candidates"][0]["content"]["parts"]) == "Hello from the script."
    )
    resp = client.post(
        model.base_url("t", "/v1/responses"), json={"model": "m", "input": "say hello", "tools": Codex.tools}
    ).json()
    assert resp["status"] == "completed" and resp["output"][0]["content"][0]["text"] == "Hello from the script."


def test_script_namespaces_and_request_log(model, client):
    model.set_script("other", {"rules": [{"reply": "other script"}], "default": "unused"})
    for script, expected in (("other", "other script"), ("nobody", "OK: say hello")):
        agent = make("claude", model, client, script)
        agent.user("say hello")
        assert agent.turn()["text"] == expected
    # No prefix: the "default" script.
    agent = Claude(client, model.url)
    agent.user("say hello")
    assert agent.turn()["text"] == "OK: say hello"
    (record,) = model.requests("other")
    assert record["api"] == "anthropic" and record["path"] == "/v1/messages"
    assert record["user_text"] == "say hello" and record["reply"]["text"] == "other script"
    assert "authorization" not in record["headers"]
    model.clear_requests("other")
    assert model.requests("other") == []


def test_bad_scripts_are_rejected(model):
    for bad in ([{"match": "("}], [{"steps": [{"tool": "x", "args": "no"}]}], [{"when": "never"}], "text"):
        with pytest.raises(ValueError):
            model.set_script("bad", bad)
    with pytest.raises(ScriptError, match="rule 1 step 1: unknown keys"):
        parse_script([{"steps": [{"txt": "typo"}]}])


def test_entry_point_serves_a_scripts_directory(tmp_path: Path):
    (tmp_path / "worker.yaml").write_text("- match: 'ping (\\d+)'\n  reply: 'pong {g1}'\n", encoding="utf-8")
    with ScriptedModelServer(tmp_path, subprocess_mode=True) as server, httpx.Client(timeout=10) as c:
        agent = Codex(c, server.base_url("worker"))
        agent.user("ping 7")
        assert agent.turn()["text"] == "pong 7"
        # Files are re-read when they change.
        time.sleep(0.01)
        (tmp_path / "worker.yaml").write_text("- reply: 'changed'\n", encoding="utf-8")
        agent.user("ping 8")
        assert agent.turn()["text"] == "changed"
    proc = subprocess.run(
        [sys.executable, "-m", "cao_testkit.scripted_model", "--port", "0", "--scripts", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "not found" in proc.stderr
