"""Record Claude Code's screens as fixtures: `tests/fixtures/screens/claude_code/<state>.txt`
plus `<state>.json` holding what the provider must read from it (status, composer,
reply). `tests/test_screens_claude_code.py` replays them without tmux.

    .venv/bin/python scripts/record_screens/claude_code.py [--out DIR]

The pinned CLI (installed like the tests install it) runs in tmux on a private
socket, 220x50 like a cao pane, launched with the provider's own build_launch,
against the scripted model, from a brand-new HOME so the first-run and trust
screens show too. Waits use literal screen text, not the provider, so after a CLI
upgrade the recording still completes and the screen tests show what broke.
"""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
from pathlib import Path

import _pane
from _pane import REPO, Pane
from real_cli_support import isolated_home_env, npm_binary

from cao_testkit.scripted_model.harness import ScriptedModelServer
from cli_agent_orchestrator.providers import claude_code
from cli_agent_orchestrator.providers.base import LaunchContext

VERSION = "2.1.197"
HELLO = "Hello from the scripted model."
BYE = "Goodbye from the scripted model."
LONG = "First paragraph of the answer.\n\n- a bullet\n- another bullet\n\nLast line."
SCRIPT = [
    {"match": "say hello", "reply": HELLO},
    {"match": "say goodbye", "reply": BYE},
    {"match": "take your time", "steps": [{"delay_ms": 5000}, {"text": LONG}]},
    {
        "match": "list the marker",
        "steps": [
            {"tool": "shell", "args": {"command": "echo marker-42"}},
            {"text": "The command printed {tool_result}."},
        ],
    },
    {
        "match": "create the file",
        "steps": [{"tool": "shell", "args": {"command": "touch created.txt"}}, {"text": "Created it."}],
    },
    {"match": "break now", "steps": [{"error": 400, "message": "scripted failure", "times": 99}]},
]


def new_pane(suffix: str, env: dict[str, str]) -> Pane:
    # Claude can lose an Enter typed right behind the text, so type() waits for the text first;
    # and it writes its state files while it shuts down: kill() waits, or they land in a removed HOME.
    return Pane(f"cao-rec-claude-{os.getpid()}{suffix}", env, settle=0.3, enter_delay=None, exit_wait=15)


def save(out: Path, state: str, text: str, **expected: object) -> None:
    _pane.save(out, state, text, expected, indent=1)


def launch_command(root: Path, env: dict[str, str], terminal_id: str, yolo: bool) -> str:
    ctx = LaunchContext(
        terminal_id=terminal_id,
        profile_name="recorder",
        system_prompt="You are terse.",
        working_directory=str(root / "work"),
        home_dir=root / "cao-home",
        yolo=yolo,
        environ=dict(os.environ),
    )
    launch = claude_code.build_launch(ctx)
    env_file = root / f"{terminal_id}.env"
    full = {**env, **launch.env, "CAO_TERMINAL_ID": terminal_id}
    env_file.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in full.items()))
    return f". {shlex.quote(str(env_file))}; exec {shlex.join(launch.argv)}"


def record(out: Path) -> None:
    binary = npm_binary("@anthropic-ai/claude-code", VERSION, "claude")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cao-rec-claude-") as tmp, ScriptedModelServer() as model:
        root = Path(tmp)
        (root / "work").mkdir()
        model.set_script("rec", SCRIPT)
        env = {
            "PATH": f"{binary.parent}{os.pathsep}{os.environ['PATH']}",
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "CAO_API_PORT": "9",
            **isolated_home_env(root),
            **model.cli_env("rec"),
        }
        pane = first = new_pane("", env)
        try:
            # A brand-new HOME: first-run screens, then the trust dialog, all with permissions on.
            pane.start(root / "work", launch_command(root, env, "0000c1a0", yolo=False))
            save(
                out,
                "first_run_theme",
                pane.wait("Choose the text style"),
                status="waiting_user_answer",
                startup_keys=["Enter"],
            )
            pane.keys("Enter")
            save(
                out,
                "first_run_notes",
                pane.wait("Press Enter to continue"),
                status="waiting_user_answer",
                startup_keys=["Enter"],
            )
            pane.keys("Enter")
            save(
                out,
                "trust",
                pane.wait("Yes, I trust this folder"),
                status="waiting_user_answer",
                startup_keys=["Enter"],
            )
            pane.keys("Enter")
            save(out, "idle", pane.wait("? for shortcuts"), status="idle")
            pane.type("say hello", enter=False)
            save(out, "composer", pane.wait("say hello"), status="idle", composer_has_text=True)
            pane.keys("Enter")
            save(out, "done", pane.wait(HELLO, "? for shortcuts"), status="completed", reply=HELLO)
            pane.type("take your time")
            save(out, "working", pane.wait("esc to interrupt"), status="processing")
            pane.type("say goodbye")  # typed during the turn: Claude queues it
            save(out, "queued", pane.wait("Press up to edit queued messages"), status="processing")
            save(
                out,
                "queued_done",
                pane.wait(BYE, "? for shortcuts", absent=("esc to interrupt",)),
                status="completed",
                reply=BYE,
            )
            pane.type("list the marker")
            save(
                out,
                "tool_done",
                pane.wait("printed marker-42", "? for shortcuts"),
                status="completed",
                reply="The command printed marker-42.",
            )
            pane.type("/exit", enter=False)
            save(out, "slash_menu", pane.wait("Exit the CLI"), status="idle", composer_has_text=True)
            pane.keys("C-u")
            pane.wait("? for shortcuts")
            pane.type("break now")
            save(out, "error", pane.wait("API Error", "? for shortcuts", absent=("esc to interrupt",)), status="error")
            pane.type("create the file")
            save(out, "permission", pane.wait("Do you want to proceed?"), status="waiting_user_answer")
            pane.keys("3")  # "No": Claude interrupts the turn and asks what to do instead
            save(
                out,
                "interrupted",
                pane.wait("What should Claude do instead?", "? for shortcuts"),
                status="waiting_user_answer",
            )
            first.kill()

            # Bypass mode (the usual way cao runs it): its footer, a multi-paragraph reply, the history.
            pane = new_pane("-bypass", env)  # a fresh tmux server
            pane.start(root / "work", launch_command(root, env, "0000c1a1", yolo=True))
            save(out, "idle_bypass", pane.wait("bypass permissions on"), status="idle")
            pane.type("take your time")
            save(out, "working_bypass", pane.wait("esc to interrupt"), status="processing")
            save(
                out,
                "done_bypass",
                pane.wait("Last line.", "bypass permissions on", absent=("esc to interrupt",)),
                status="completed",
                reply=LONG,
            )
            pane.type("list the marker")
            pane.wait("printed marker-42", absent=("esc to interrupt",))
            save(out, "history", pane.history(), status="completed", reply="The command printed marker-42.")
        finally:
            first.kill()
            pane.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "screens" / "claude_code")
    record(parser.parse_args().out)


if __name__ == "__main__":
    main()
