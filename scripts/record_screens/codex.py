"""Record the Codex CLI's screens as fixtures: `tests/fixtures/screens/codex/<state>.txt` (the
visible 220x50 screen), `<state>.json` (the cursor and what the provider must read from it) and,
for finished turns, `<state>.history.txt` (tmux's joined scrollback, for extract_reply).

    .venv/bin/python scripts/record_screens/codex.py [--out DIR]

Drives the pinned real CLI (installed as the tests install it) in tmux on a private socket,
launched by the provider's own build_launch, against the scripted model, in a throw-away HOME.
Waits key on plain text, not on the provider's read_status, so after a CLI upgrade the
recording still completes and tests/test_screens_codex.py shows what no longer reads right.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import _pane
from _pane import REPO, Pane

from cao_testkit.scripted_model.harness import ScriptedModelServer
from cli_agent_orchestrator.providers import codex

VERSION = "0.171.0"
HELLO = "Hello from the scripted model.\nSecond line here."
SCRIPT = [
    {"match": "say hello", "reply": HELLO},
    {"match": "take your time", "steps": [{"delay_ms": 8000}, {"text": "Done after a pause."}]},
    {
        "match": "print the marker",
        "steps": [
            {"tool": "shell", "args": {"command": "echo marker-42"}},
            {"text": "The command printed the marker."},
        ],
    },
    {
        "match": "touch the file",
        "steps": [
            {
                "tool": "shell",
                "args": {
                    "command": "touch created.txt",
                    "sandbox_permissions": "require_escalated",
                    "justification": "create created.txt",
                },
            },
            {"text": "Created it."},
        ],
    },
    {"match": "break now", "steps": [{"error": 500, "message": "scripted failure", "times": 99}]},
]
FAST_FAILURE = {"model_providers.cao_openai.stream_max_retries": 0, "model_providers.cao_openai.request_max_retries": 0}
READY = "for shortcuts"  # in the footer once the session is configured (with " · " parts)


class CodexPane(Pane):
    def settle(self, *markers: str, absent: tuple[str, ...] = (), timeout: float = 40) -> str:
        """Wait for the markers, then for the screen to stop changing (no spinner is on a still frame)."""
        text = self.wait(*markers, absent=absent, timeout=timeout)
        time.sleep(0.5)
        return self.screen() if all(m in self.screen() for m in markers) else text


def save(out: Path, state: str, pane: Pane, expect: dict, text: str | None = None, history: bool = False) -> None:
    expect = {**expect, "cursor": pane.cursor()}
    _pane.save(out, state, text or pane.screen(), expect, history=pane.history() if history else None)


def slow_mcp_server(root: Path) -> list[str]:
    """cao-mcp-server started 3 s late, so a first prompt is seen queued until it is up."""
    script = root / "slow-mcp-server.sh"
    real = Path(sys.executable).parent / "cao-mcp-server"
    script.write_text(f'#!/bin/sh\nsleep 3\nexec {shlex.quote(str(real))} "$@"\n')
    script.chmod(0o755)
    return [str(script)]


def launch(
    root: Path,
    name: str,
    yolo: bool,
    cwd: Path | None = None,
    hook_trust: bool = True,
    extra: dict | None = None,
    mcp: list[str] | None = None,
) -> CodexPane:
    workdir = root / "work"
    ctx = _pane.context(
        root, name, yolo, model="fake-model", mcp_server_argv=mcp or [], profile_extra={"codexConfig": extra or {}}
    )
    argv = codex.build_launch(ctx).argv
    if not hook_trust:  # show the hook-review screen the provider normally skips
        script = Path(argv[-1])
        script.write_text(script.read_text().replace(" --dangerously-bypass-hook-trust", ""))
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "CAO_TERMINAL_ID")}
    return CodexPane(f"cao-rec-codex-{os.getpid()}-{name}", env).start(
        cwd or workdir, shlex.join(argv), remain_on_exit=True
    )


def record(root: Path, out: Path, panes: list[CodexPane]) -> None:
    for repo in (root / "work", root / "other"):
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)  # git dirs: the trust screen's trigger
    pane = launch(root, "main", yolo=False, extra=FAST_FAILURE, mcp=slow_mcp_server(root))
    panes.append(pane)
    first = pane.wait("›", timeout=60)
    if READY not in first or "·" not in first.split("›")[-1]:
        save(out, "starting", pane, {"status": "unknown"}, text=first)
    save(out, "idle", pane, {"status": "idle", "composer_has_text": False}, pane.settle(READY, "·", timeout=60))
    pane.type("please say hello", enter=False)
    save(out, "composer", pane, {"status": "idle", "composer_has_text": True}, pane.settle("› please say hello"))
    pane.keys("Enter")
    save(out, "queued", pane, {"status": "processing"}, pane.wait("Queued follow-up inputs", timeout=5))
    save(
        out,
        "done",
        pane,
        {"status": "completed", "reply": HELLO},
        pane.settle("Second line here.", "Worked"),
        history=True,
    )
    pane.type("please take your time")
    save(out, "working", pane, {"status": "processing"}, pane.wait("esc to interrupt"))
    pane.type("a queued follow-up", enter=False)
    save(
        out,
        "working_composer",
        pane,
        {"status": "processing", "composer_has_text": True},
        pane.wait("a queued follow-up", "esc to interrupt"),
    )
    pane.keys("C-u")
    pane.wait("Done after a pause.", timeout=30)
    pane.type("please print the marker")
    save(
        out,
        "tool_done",
        pane,
        {"status": "completed", "reply": "The command printed the marker."},
        pane.settle("The command printed the marker.", READY),
        history=True,
    )
    pane.type("please touch the file")
    save(out, "permission", pane, {"status": "waiting_user_answer"}, pane.settle("Would you like to run"))
    pane.keys("Enter")
    save(
        out,
        "permission_answered",
        pane,
        {"status": "completed", "reply": "Created it."},
        pane.settle("Created it.", READY),
        history=True,
    )
    pane.type("please take your time")
    pane.wait("esc to interrupt")
    pane.keys("Escape")
    save(out, "interrupted", pane, {"status": "idle"}, pane.settle("interrupted", READY))
    pane.type("please break now")
    save(out, "error", pane, {"status": "error"}, pane.settle("■ ", READY, absent=("esc to interrupt",), timeout=90))
    pane.type("/quit")
    save(out, "exited", pane, {"status": "unknown"}, pane.settle("codex resume", timeout=20))

    yolo = launch(root, "yolo", yolo=True)
    panes.append(yolo)
    save(
        out,
        "idle_yolo",
        yolo,
        {"status": "idle", "composer_has_text": False},
        yolo.settle("YOLO", READY, "·", timeout=60),
    )

    trust = launch(root, "trust", yolo=False, cwd=root / "other")  # trusted: work, not other
    panes.append(trust)
    save(out, "trust", trust, {"status": "waiting_user_answer"}, trust.settle("Trust this folder?", timeout=60))

    hooks = launch(root, "hooks", yolo=True, hook_trust=False)
    panes.append(hooks)
    save(out, "hook_review", hooks, {"status": "waiting_user_answer"}, hooks.settle("Hooks need review", timeout=60))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "screens" / "codex")
    args = parser.parse_args()
    with _pane.recording("@openai/codex", VERSION, "codex", "cao-rec-codex-") as (root, panes):
        os.environ["CAO_API_PORT"] = "9"  # hooks and cao-mcp-server must not reach any real cao-server
        with ScriptedModelServer() as model:
            model.set_script("rec", SCRIPT)
            os.environ.update({"OPENAI_BASE_URL": model.base_url("rec", "/v1"), "OPENAI_API_KEY": "scripted"})
            record(root, args.out, panes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
