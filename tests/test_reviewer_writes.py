"""A reviewer cannot write a file, under every real CLI that enforces a role's tools
(tool_names.ENFORCEMENT): the scripted model asks the CLI for its own write tool, and the file
never appears. A developer given the same call writes the file: the call is one the CLI takes,
so only the reviewer's tool set can stop it.

The pinned npm builds of Claude Code, Codex, Gemini CLI, Qwen Code and opencode, each in its own
temporary home with its own cao-server; the scripted model is the only stand-in. What each CLI
does with a tool outside the set differs: Claude, Gemini, Qwen and opencode do not offer it to
the model at all (the scripted model then says so in its reply); Codex has no per-tool switch:
its shell is offered, and its read-only sandbox refuses the write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import CaoServer, wait_until

# Autouse: without tmux every test here skips, or fails under CI (CAO_REQUIRE_REAL_CLIS).
from real_cli_support import (
    npm_binary,
    real_cli_prerequisites,  # noqa: F401
    real_cli_server,
    store_profiles,
)

from cao_testkit.scripted_model.harness import ScriptedModelServer

START_S, TURN_S = 120, 120  # two shared cores, other helpers' tests alongside
SCRIPT = "review"
CONTENT = "written by the agent\n"


def _shell_write(path: Path) -> dict:
    return {"command": f"printf '{CONTENT.rstrip()}\\n' > '{path}'"}


@dataclass(frozen=True)
class Cli:
    provider: str
    package: str
    version: str
    binary: str
    write_tool: str  # the CLI's own tool that writes a file
    write_args: Callable[[Path], dict]
    setup: Callable[[CaoServer, ScriptedModelServer], None] = lambda cao, model: None
    env: Callable[[ScriptedModelServer], dict[str, str]] = lambda model: model.cli_env(SCRIPT)
    model: str = ""  # the profile's model, where the CLI needs one named
    extra_env: dict[str, str] = field(default_factory=dict)


def _claude_setup(cao: CaoServer, model: ScriptedModelServer) -> None:
    (Path(cao.env["HOME"]) / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))


def _opencode_setup(cao: CaoServer, model: ScriptedModelServer) -> None:
    config = Path(cao.env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
    auth = Path(cao.env["XDG_DATA_HOME"]) / "opencode" / "auth.json"
    for path in (config, auth):
        path.parent.mkdir(parents=True, exist_ok=True)
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Scripted",
        "options": {"baseURL": model.base_url(SCRIPT, "/v1")},
        "models": {"fake-model": {"name": "Fake", "tool_call": True, "limit": {"context": 128000, "output": 8192}}},
    }
    config.write_text(json.dumps({"model": "scripted/fake-model", "provider": {"scripted": provider}}))
    auth.write_text(json.dumps({"scripted": {"type": "api", "key": "user-key"}}))


CLIS = [
    Cli(
        "claude_code",
        "@anthropic-ai/claude-code",
        "2.1.197",
        "claude",
        "Write",
        lambda path: {"file_path": str(path), "content": CONTENT},
        setup=_claude_setup,
    ),
    Cli(
        "codex",
        "@openai/codex",
        "0.171.0",
        "codex",
        "shell",  # with a model it does not know, Codex offers no apply_patch: its shell writes
        _shell_write,
        env=lambda model: {"OPENAI_BASE_URL": model.base_url(SCRIPT, "/v1"), "OPENAI_API_KEY": "scripted"},
        model="fake-model",
    ),
    Cli(
        "gemini_cli",
        "@google/gemini-cli",
        "0.61.0",
        "gemini",
        "write_file",
        lambda path: {"file_path": str(path), "content": CONTENT},
    ),
    Cli(
        "qwen_cli",
        "@qwen-code/qwen-code",
        "0.15.10",
        "qwen",
        "write_file",
        lambda path: {"file_path": str(path), "content": CONTENT},
        extra_env={"OPENAI_MODEL": "fake-model"},
    ),
    Cli(
        "opencode_cli",
        "opencode-ai",
        "1.18.33",
        "opencode",
        "write",
        lambda path: {"filePath": str(path), "content": CONTENT},
        setup=_opencode_setup,
        env=lambda model: {},
    ),
]


@pytest.fixture(scope="module", params=CLIS, ids=lambda c: c.provider)
def cli(request: pytest.FixtureRequest) -> Cli:
    return request.param


@pytest.fixture(scope="module")
def served(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CaoServer, ScriptedModelServer, Path]]:
    binary = npm_binary(cli.package, cli.version, cli.binary)
    root = tmp_path_factory.mktemp(cli.binary)
    work = root / "work"
    work.mkdir()
    rules = [
        {
            "match": r"write (?P<name>\S+\.txt)",
            "steps": [
                {"tool": cli.write_tool, "args": cli.write_args(work / "{name}")},
                {"text": "Tried to write: {tool_result}"},
            ],
        }
    ]
    with ScriptedModelServer() as model:
        model.set_script(SCRIPT, rules)
        cao = real_cli_server(root, [binary], {**cli.env(model), **cli.extra_env})
        cli.setup(cao, model)
        head = f"provider: {cli.provider}\n" + (f"model: {cli.model}\n" if cli.model else "")
        store_profiles(
            cao,
            {
                "rev": f"---\nname: rev\n{head}role: reviewer\n---\nYou review; you never change files.\n",
                "dev": f"---\nname: dev\n{head}role: developer\n---\nYou are a careful developer.\n",
            },
        )
        cao.start()
        try:
            yield cao, model, work
        finally:
            cao.cleanup()


def turn(cao: CaoServer, profile: str, work: Path, message: str) -> str:
    """Start `profile` (its role's tools, no --yolo), send one message, return its reply."""
    resp = cao.client.post(
        "/sessions", params={"agent_profile": profile, "working_directory": str(work)}, timeout=START_S + 30
    )
    assert resp.status_code == 201, resp.text
    tid = resp.json()["id"]
    try:
        cao.send(tid, message)
        cao.wait_status(tid, {"completed", "error", "waiting_user_answer"}, timeout=TURN_S)
        status = cao.status(tid)
        reply = cao.client.get(f"/terminals/{tid}/output", params={"mode": "last"}).json().get("output") or ""
        if status != "completed":
            screen = cao.client.get(f"/terminals/{tid}/output").json().get("output") or ""
            raise AssertionError(
                f"{profile} ended {status}: {reply!r}; screen:\n" + "\n".join(screen.splitlines()[-25:])
            )
        return reply
    finally:
        cao.client.delete(f"/terminals/{tid}")
        wait_until(lambda: cao.client.get(f"/terminals/{tid}").status_code == 404, 30, message="terminal removed")


def model_turn(model: ScriptedModelServer, name: str) -> tuple[list[str], list[dict]]:
    """What the scripted model was sent back (tool results) and answered, for `write <name>`."""
    records = [r for r in model.requests(SCRIPT) if not r["side"] and f"write {name}" in r["user_text"]]
    return [r["tool_result"] for r in records if r["tool_result"]], [r["reply"] for r in records]


def test_a_reviewer_asked_to_write_a_file_is_refused_by_its_cli(served, cli: Cli):
    cao, model, work = served
    reply = turn(cao, "rev", work, "write review.txt")
    assert not (work / "review.txt").exists(), reply
    results, answers = model_turn(model, "review.txt")
    if cli.provider == "codex":  # offered, and refused by the read-only sandbox
        assert results, (reply, answers)
        assert any(word in results[-1].lower() for word in ("read-only", "denied", "rejected", "not allowed")), results
    else:  # not offered: the model could not even ask for it, so no call was made
        unavailable = [a["text"] for a in answers if a["source"].endswith("tool unavailable")]
        assert unavailable and not results, (reply, answers, results)
        offered = unavailable[-1].split("(tools: ", 1)[-1].rstrip(")")
        assert cli.write_tool not in [t.strip() for t in offered.split(",")], unavailable


def test_a_developer_given_the_same_call_writes_the_file(served, cli: Cli):
    """The control: the scripted call is one this CLI carries out, unattended (the developer's
    set runs without asking; Gemini once asked here: its policy file failed Gemini's schema)."""
    cao, _, work = served
    reply = turn(cao, "dev", work, "write developed.txt")
    assert (work / "developed.txt").read_text() == CONTENT, reply
