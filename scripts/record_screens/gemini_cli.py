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
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from real_cli_support import isolated_home_env, npm_binary  # noqa: E402

from cli_agent_orchestrator.providers import gemini_cli  # noqa: E402
from cli_agent_orchestrator.providers.base import LaunchContext  # noqa: E402
from cli_agent_orchestrator.scripted_model.harness import ScriptedModelServer  # noqa: E402

VERSION = "0.61.0"
SCRIPT = [
    {"match": "say hello", "reply": "Hello from the scripted model.\nSecond line here."},
    {"match": "take your time", "steps": [{"delay_ms": 6000}, {"text": "Done after a pause."}]},
    {"match": "list the marker", "steps": [{"tool": "shell", "args": {"command": "echo marker-42"}},
                                           {"text": "The command printed the marker."}]},
    {"match": "create the file", "steps": [{"tool": "shell", "args": {"command": "touch created.txt"}},
                                           {"text": "Created it."}]},
    {"match": "make another", "steps": [{"tool": "shell", "args": {"command": "touch other.txt"}},
                                        {"text": "Made another."}]},
    {"match": "break now", "steps": [{"error": 400, "message": "scripted failure", "times": 99}]},
]
PLACEHOLDER = "Type your message"
BUSY = "esc to cancel"


class Pane:
    def __init__(self, socket: str, env: dict[str, str], workdir: Path, argv: list[str]):
        self.socket, self.env = socket, env
        self.tmux("new-session", "-d", "-s", "rec", "-x", "220", "-y", "50", "-c", str(workdir),
                  shlex.join(argv))

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], env=self.env, check=True,
                              capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "rec")

    def type(self, text: str, enter: bool = True) -> None:
        self.tmux("send-keys", "-t", "rec", "-l", text)
        if enter:
            time.sleep(0.3)
            self.tmux("send-keys", "-t", "rec", "Enter")

    def wait(self, *markers: str, absent: tuple[str, ...] = (), timeout: float = 40) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if all(m in text for m in markers) and not any(a in text for a in absent):
                time.sleep(0.4)  # let the last frame settle
                return self.screen()
            if time.monotonic() > deadline:
                print(f"  ! timed out waiting for {markers} (absent {absent}); keeping what is there")
                return text
            time.sleep(0.1)

    def kill(self) -> None:
        path = subprocess.run(["tmux", "-L", self.socket, "display-message", "-p", "#{socket_path}"], env=self.env,
                              capture_output=True, text=True).stdout.strip()
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True)
        if path:
            Path(path).unlink(missing_ok=True)  # tmux 3.3 leaves the socket file behind


def save(out: Path, state: str, text: str, expect: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{state}.txt").write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    (out / f"{state}.json").write_text(json.dumps(expect, indent=2) + "\n", encoding="utf-8")
    print(f"  {state}: {expect}")


def launch(root: Path, name: str, model: ScriptedModelServer, yolo: bool,
           patch: Callable[[dict], object] | None = None) -> Pane:
    """Start the CLI as the provider would; `patch` edits the generated settings first, to bring
    back a screen the provider's settings avoid (trust, sign-in)."""
    workdir = root / "work"
    workdir.mkdir(exist_ok=True)
    ctx = LaunchContext(terminal_id=name.encode().hex()[:8].ljust(8, "0"), profile_name="recorder",
                        system_prompt="You are a recording fixture.", working_directory=str(workdir),
                        home_dir=root / f"cao-{name}", yolo=yolo)
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
    return Pane(f"cao-rec-gemini-{os.getpid()}-{name}", env, workdir, launch_spec.argv)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "screens" / "gemini_cli")
    args = parser.parse_args()
    binary = npm_binary("@google/gemini-cli", VERSION, "gemini")
    root = Path(tempfile.mkdtemp(prefix="cao-rec-gemini-"))
    os.environ.update(isolated_home_env(root))
    os.environ["PATH"] = f"{binary.parent}{os.pathsep}{os.environ['PATH']}"
    panes: list[Pane] = []
    with ScriptedModelServer() as model:
        model.set_script("rec", SCRIPT)
        try:
            pane = launch(root, "main", model, yolo=False)
            panes.append(pane)
            save(args.out, "idle", pane.wait(PLACEHOLDER, timeout=60), {"status": "idle"})
            pane.type("please say hello", enter=False)
            save(args.out, "composer", pane.wait("please say hello", absent=(PLACEHOLDER,)),
                 {"status": "idle", "composer_has_text": True})
            pane.tmux("send-keys", "-t", "rec", "Enter")
            save(args.out, "done", pane.wait("Second line here.", PLACEHOLDER, absent=(BUSY,)),
                 {"status": "completed", "reply": "Hello from the scripted model.\nSecond line here."})
            pane.type("take your time")
            save(args.out, "working", pane.wait("esc to cancel"), {"status": "processing"})
            pane.wait("Done after a pause.", PLACEHOLDER, absent=(BUSY,))
            pane.type("list the marker")
            save(args.out, "tool_done", pane.wait("The command printed the marker.", PLACEHOLDER, absent=(BUSY,)),
                 {"status": "completed", "reply": "The command printed the marker."})
            pane.type("create the file")
            save(args.out, "permission", pane.wait("Allow execution"),
                 {"status": "waiting_user_answer", "reason": "Allow execution of [Shell]?"})
            pane.type("1", enter=False)
            save(args.out, "permission_answered", pane.wait("Created it.", PLACEHOLDER, absent=(BUSY,)),
                 {"status": "completed", "reply": "Created it."})
            pane.type("break now")
            save(args.out, "error", pane.wait("scripted failure", PLACEHOLDER, absent=(BUSY,)),
                 {"status": "error", "reason": "scripted failure"})
            pane.type("make another")
            pane.wait("Allow execution")
            pane.tmux("send-keys", "-t", "rec", "Escape")  # decline
            save(args.out, "cancelled", pane.wait("Request cancelled", PLACEHOLDER, absent=(BUSY,)),
                 {"status": "idle", "reason": "cancelled"})

            yolo = launch(root, "yolo", model, yolo=True)
            panes.append(yolo)
            save(args.out, "idle_yolo", yolo.wait(PLACEHOLDER, timeout=60), {"status": "idle"})

            trust = launch(root, "trust", model, yolo=False,
                           patch=lambda s: s["security"]["folderTrust"].update(enabled=True))
            panes.append(trust)
            save(args.out, "trust", trust.wait("Do you trust", timeout=60),
                 {"status": "waiting_user_answer", "reason": "Do you trust the files in this folder?"})

            sign_in = launch(root, "signin", model, yolo=False, patch=lambda s: s["security"].pop("auth"))
            panes.append(sign_in)
            save(args.out, "sign_in", sign_in.wait("How would you like to authenticate", timeout=60),
                 {"status": "error", "reason": "not signed in"})
        finally:
            for pane in panes:
                pane.kill()
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
