"""Record opencode's screens as fixtures for tests/test_screens_opencode_cli.py.

    .venv/bin/python scripts/record_screens/opencode_cli.py [--out DIR]

Writes into tests/fixtures/screens/opencode_cli/: `<state>.txt` (the visible 220x50
screen), `<state>.json` (cursor, and the status / reply the provider must read) and,
for finished turns, `<state>.history.txt` (tmux's joined scrollback as cao captures
it, trailing blanks kept: extract_reply is tested on it both as is and stripped).

The pinned CLI (installed the way the tests install it) runs in tmux on a private
socket, started by the provider's own build_launch, against the scripted model, in
a throw-away home. Waits key on plain text, never on the provider's read_status, so
after a CLI upgrade the recording still completes and the screen tests show what
no longer reads right.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import _pane
from _pane import REPO, Pane

from cao_testkit.scripted_model.harness import ScriptedModelServer
from cli_agent_orchestrator.providers import opencode_cli

VERSION = "1.18.33"
HELLO = "Hello from the scripted model.\n\nA second paragraph, after a blank line."
RULES = [
    {"match": "say hello", "reply": HELLO},
    {"match": "take your time", "steps": [{"delay_ms": 6000}, {"text": "Done after a pause."}]},
    {
        "match": "print the marker",
        "steps": [
            {"tool": "shell", "args": {"command": "echo marker-$((6*7))"}},
            {"text": "The command printed marker-42."},
        ],
    },
    {"match": "break now", "steps": [{"error": 400, "message": "scripted refusal", "times": 99}]},
    {
        "match": "use the tools",
        "steps": [  # every other kind of tool block above a reply
            {"tool": "write", "args": {"filePath": "notes.txt", "content": "alpha\n\nbeta\n"}},
            {"tool": "edit", "args": {"filePath": "notes.txt", "oldString": "beta", "newString": "gamma"}},
            {"tool": "read", "args": {"filePath": "notes.txt"}},
            {
                "tool": "todowrite",
                "args": {"todos": [{"id": "1", "content": "check", "status": "pending", "priority": "high"}]},
            },
            {"tool": "mcp:cao-mcp-server:send_message", "args": {"receiver_id": "0badc0de", "message": "hi"}},
            {"text": "Used every tool."},
        ],
    },
]
FOOTER = "ctrl+p cmd"


class OpencodePane(Pane):
    def settle(self, *markers: str, absent: tuple[str, ...] = (), timeout: float = 60) -> str:
        """The markers, then a still screen (the progress dots move every frame)."""
        self.wait(*markers, absent=absent, timeout=timeout)
        time.sleep(0.6)
        return self.wait(*markers, absent=absent, timeout=5)


def save(out: Path, state: str, pane: Pane, expect: dict, text: str, history: bool = False) -> None:
    expect = {**expect, "cursor": pane.cursor()}
    _pane.save(out, state, text, expect, history=pane.history() if history else None)


def launch(root: Path, name: str, yolo: bool) -> OpencodePane:
    ctx = _pane.context(root, name, yolo)
    launch = opencode_cli.build_launch(ctx)
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(launch.env, CAO_TERMINAL_ID=ctx.terminal_id)
    pane = OpencodePane(f"cao-rec-opencode-{os.getpid()}-{name}", env, timeout=60, enter_delay=0.4)
    return pane.start(root / "work", shlex.join(launch.argv), remain_on_exit=True)


def record(root: Path, out: Path, panes: list[OpencodePane]) -> None:
    (root / "work").mkdir()
    pane = launch(root, "main", yolo=False)
    panes.append(pane)
    first = pane.wait("OpenCode", timeout=60)
    if FOOTER not in first:
        save(out, "starting", pane, {"status": "unknown"}, first)
    save(out, "idle", pane, {"status": "idle", "composer_has_text": False}, pane.settle("Ask anything", FOOTER))
    pane.type("please say hello", enter=False)
    save(
        out,
        "composer",
        pane,
        {"status": "idle", "composer_has_text": True},
        pane.settle("please say hello", FOOTER, absent=("Ask anything",)),
    )
    pane.keys("Enter")
    save(
        out,
        "done",
        pane,
        {"status": "completed", "reply": HELLO},
        pane.settle("A second paragraph", "▣ ", FOOTER, absent=("esc interrupt",)),
        history=True,
    )
    pane.type("please take your time")
    save(out, "working", pane, {"status": "processing"}, pane.wait("esc interrupt", "› please take"))
    pane.type("a draft for later", enter=False)
    save(
        out,
        "working_composer",
        pane,
        {"status": "processing", "composer_has_text": True},
        pane.wait("a draft for later", "esc interrupt"),
    )
    pane.keys("C-u")
    pane.settle("Done after a pause.", FOOTER, absent=("esc interrupt",), timeout=30)
    pane.type("please print the marker")
    save(out, "permission", pane, {"status": "waiting_user_answer"}, pane.settle("Permission required", "Allow once"))
    pane.keys("Enter")  # "Allow once" is preselected
    save(
        out,
        "permission_answered",
        pane,
        {"status": "completed", "reply": "The command printed marker-42."},
        pane.settle("The command printed marker-42.", FOOTER, absent=("esc interrupt",)),
        history=True,
    )
    pane.type("please take your time again")
    pane.wait("esc interrupt", "again")
    pane.keys("Escape")  # the first Escape only arms the interrupt
    save(out, "interrupt_armed", pane, {"status": "processing"}, pane.wait("esc again to interrupt"))
    pane.keys("Escape")
    save(
        out,
        "interrupted",
        pane,
        {"status": "idle"},
        pane.settle(FOOTER, absent=("interrupt",), timeout=20),
        history=True,
    )
    pane.type("please break now")
    save(
        out,
        "error",
        pane,
        {"status": "error"},
        pane.settle("scripted refusal", FOOTER, absent=("esc interrupt",), timeout=60),
    )
    pane.type("please say hello once more")
    save(
        out,
        "done_after_error",
        pane,
        {"status": "completed", "reply": HELLO},
        pane.settle("once more", FOOTER, absent=("esc interrupt",), timeout=60),
        history=True,
    )
    pane.type("/exit")
    save(out, "exited", pane, {"status": "unknown"}, pane.settle("Continue", absent=(FOOTER,), timeout=20))
    pane.kill()

    yolo = launch(root, "yolo", yolo=True)
    panes.append(yolo)
    yolo.settle("Ask anything", FOOTER)
    yolo.type("please print the marker")
    save(
        out,
        "tool_done",
        yolo,
        {"status": "completed", "reply": "The command printed marker-42."},
        yolo.settle("The command printed marker-42.", FOOTER, absent=("esc interrupt",)),
        history=True,
    )
    yolo.type("please use the tools")
    save(
        out,
        "many_tools",
        yolo,
        {"status": "completed", "reply": "Used every tool."},
        yolo.settle("Used every tool.", FOOTER, absent=("esc interrupt",)),
        history=True,
    )
    multi = "first paragraph of the task\n\nplease say hello"
    yolo.tmux("set-buffer", "-b", "multi", multi)
    yolo.tmux("paste-buffer", "-p", "-b", "multi", "-t", "rec")
    time.sleep(0.4)
    yolo.keys("Enter")
    save(
        out,
        "paragraph_prompt",
        yolo,
        {"status": "completed", "reply": HELLO, "stripped_reply_known_wrong": True},
        yolo.settle("first paragraph of the task", "A second paragraph", FOOTER, absent=("esc interrupt",)),
        history=True,
    )


def write_scripted_config(model: ScriptedModelServer) -> None:
    """The user's opencode.json (under the confined XDG_CONFIG_HOME): the scripted model only."""
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        json.dumps(
            {
                "$schema": "https://opencode.ai/config.json",
                "model": "scripted/fake-model",
                "small_model": "scripted/fake-model",
                "provider": {
                    "scripted": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Scripted",
                        "options": {"baseURL": model.base_url("rec", "/v1"), "apiKey": "x"},
                        "models": {"fake-model": {"name": "Fake Model", "tool_call": True}},
                    }
                },
            }
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "screens" / "opencode_cli")
    args = parser.parse_args()
    with _pane.recording("opencode-ai", VERSION, "opencode", "cao-rec-opencode-") as (root, panes):
        os.environ["CAO_API_PORT"] = "9"  # the status plugin and cao-mcp-server must not reach a real cao-server
        args.out.mkdir(parents=True, exist_ok=True)
        with ScriptedModelServer() as model:
            model.set_script("rec", RULES)
            write_scripted_config(model)
            record(root, args.out, panes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
