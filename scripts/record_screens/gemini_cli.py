"""Record Gemini CLI's screens as test fixtures: `tests/fixtures/screens/gemini_cli/<state>.txt`
plus `<state>.json` with the status (and reply) the provider must read from it.

    .venv/bin/python scripts/record_screens/gemini_cli.py [--out DIR]

Drives the pinned real CLI (installed like the tests do) in tmux on a private
socket, 220x50 like a cao pane, launched exactly as the provider launches it,
against the scripted model. Waits use plain text markers, not the provider's
read_status, so after a CLI upgrade the recording still finishes and
tests/test_screens_gemini_cli.py shows what the provider no longer reads.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import _pane
from _pane import REPO, Pane, save

from cao_testkit.scripted_model.harness import ScriptedModelServer
from cli_agent_orchestrator.providers import gemini_cli

VERSION = "0.61.0"
SCRIPT = [
    {"match": "say hello", "reply": "Hello from the scripted model.\nSecond line here."},
    {"match": "take your time", "steps": [{"delay_ms": 6000}, {"text": "Done after a pause."}]},
    {
        "match": "list the marker",
        "steps": [
            {"tool": "shell", "args": {"command": "echo marker-42"}},
            {"text": "The command printed the marker."},
        ],
    },
    {
        "match": "create the file",
        "steps": [{"tool": "shell", "args": {"command": "touch created.txt"}}, {"text": "Created it."}],
    },
    {
        "match": "make another",
        "steps": [{"tool": "shell", "args": {"command": "touch other.txt"}}, {"text": "Made another."}],
    },
    {"match": "break now", "steps": [{"error": 400, "message": "scripted failure", "times": 99}]},
]
PLACEHOLDER = "Type your message"
BUSY = "esc to cancel"


def launch(
    root: Path, name: str, model: ScriptedModelServer, yolo: bool, patch: Callable[[dict], object] | None = None
) -> Pane:
    """Start the CLI as the provider would; `patch` edits the generated settings first, to bring
    back a screen the provider's settings avoid (trust, sign-in)."""
    workdir = root / "work"
    workdir.mkdir(exist_ok=True)
    ctx = _pane.context(root, name, yolo)
    os.environ.update(model.cli_env("rec"))  # cao-server's environment, as the provider sees it
    launch_spec = gemini_cli.build_launch(ctx)
    if patch is not None:
        path = Path(launch_spec.env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json"
        settings = json.loads(path.read_text())
        patch(settings)
        path.write_text(json.dumps(settings))
        launch_spec.env.pop("GEMINI_CLI_TRUST_WORKSPACE")
    env = {**os.environ, **launch_spec.env}
    env.pop("TMUX", None)
    pane = Pane(f"cao-rec-gemini-{os.getpid()}-{name}", env, settle=0.4, remove_socket=True)
    return pane.start(workdir, shlex.join(launch_spec.argv))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "screens" / "gemini_cli")
    args = parser.parse_args()
    # The model server outlives the panes, as it always has here: the CLIs are killed first.
    with (
        ScriptedModelServer() as model,
        _pane.recording("@google/gemini-cli", VERSION, "gemini", "cao-rec-gemini-") as (root, panes),
    ):
        model.set_script("rec", SCRIPT)
        pane = launch(root, "main", model, yolo=False)
        panes.append(pane)
        save(args.out, "idle", pane.wait(PLACEHOLDER, timeout=60), {"status": "idle"})
        pane.type("please say hello", enter=False)
        save(
            args.out,
            "composer",
            pane.wait("please say hello", absent=(PLACEHOLDER,)),
            {"status": "idle", "composer_has_text": True, "composer_rows": 2},
        )
        pane.keys("Enter")
        save(
            args.out,
            "done",
            pane.wait("Second line here.", PLACEHOLDER, absent=(BUSY,)),
            {"status": "completed", "reply": "Hello from the scripted model.\nSecond line here."},
        )
        pane.type("take your time")
        save(args.out, "working", pane.wait("esc to cancel"), {"status": "processing"})
        pane.wait("Done after a pause.", PLACEHOLDER, absent=(BUSY,))
        pane.type("list the marker")
        save(
            args.out,
            "tool_done",
            pane.wait("The command printed the marker.", PLACEHOLDER, absent=(BUSY,)),
            {"status": "completed", "reply": "The command printed the marker."},
        )
        pane.type("create the file")
        save(
            args.out,
            "permission",
            pane.wait("Allow execution"),
            {"status": "waiting_user_answer", "reason": "Allow execution of [Shell]?"},
        )
        pane.type("1", enter=False)
        save(
            args.out,
            "permission_answered",
            pane.wait("Created it.", PLACEHOLDER, absent=(BUSY,)),
            {"status": "completed", "reply": "Created it."},
        )
        pane.type("break now")
        save(
            args.out,
            "error",
            pane.wait("scripted failure", PLACEHOLDER, absent=(BUSY,)),
            {"status": "error", "reason": "scripted failure"},
        )
        pane.type("make another")
        pane.wait("Allow execution")
        pane.keys("Escape")  # decline
        save(
            args.out,
            "cancelled",
            pane.wait("Request cancelled", PLACEHOLDER, absent=(BUSY,)),
            {"status": "idle", "reason": "cancelled"},
        )

        yolo = launch(root, "yolo", model, yolo=True)
        panes.append(yolo)
        save(args.out, "idle_yolo", yolo.wait(PLACEHOLDER, timeout=60), {"status": "idle"})
        # An Enter within 30 ms of a typed key is a newline to Gemini: the composer grows a row.
        yolo.keys("-l", "say hello", ";", "send-keys", "-t", _pane.SESSION, "Enter")
        yolo.wait("say hello")
        time.sleep(1)  # nothing else follows (a submitted turn would show its answer by now)
        save(
            args.out,
            "composer_newline",
            yolo.wait("say hello", absent=(PLACEHOLDER, "✦")),
            {"status": "idle", "composer_has_text": True, "composer_rows": 3},
        )

        trust = launch(
            root, "trust", model, yolo=False, patch=lambda s: s["security"]["folderTrust"].update(enabled=True)
        )
        panes.append(trust)
        save(
            args.out,
            "trust",
            trust.wait("Do you trust", timeout=60),
            {"status": "waiting_user_answer", "reason": "Do you trust the files in this folder?"},
        )

        sign_in = launch(root, "signin", model, yolo=False, patch=lambda s: s["security"].pop("auth"))
        panes.append(sign_in)
        save(
            args.out,
            "sign_in",
            sign_in.wait("How would you like to authenticate", timeout=60),
            {"status": "error", "reason": "not signed in"},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
