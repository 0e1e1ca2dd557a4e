"""Record how a real CLI shows a *pasted* message, before and after Enter, as fixtures:
`tests/fixtures/paste/<provider>/<state>.{visible,history,rows}.txt` and `<state>.mark.json`.

    .venv/bin/python scripts/record_screens/paste_screens.py --provider NAME [--out DIR]

NAME: claude_code, codex, gemini_cli, qwen_cli or opencode_cli. The CLI starts as its own
recorder (scripts/record_screens/NAME.py) starts it: the pinned version, a private tmux socket,
a 220x50 pane, a throw-away HOME, the provider's build_launch, the scripted model (which answers
every message with REPLY). Text goes in as cao pastes it (load-buffer from stdin, then
paste-buffer -p -d, one tmux command), Enter is pressed separately.

States: short_composer / long_composer (pasted, no Enter yet), short_submitted / long_submitted
(after Enter and the finished turn), short_twice_submitted (the same short message again, pasted
and entered at once, as cao does). Per state: `visible` = capture-pane -p, `history` =
capture-pane -p -J -S - (what cao reads), `rows` = capture-pane -p -S - (one line per absolute
row, so line i is row i and the mark's row is history_size + cursor_y), `before.visible` (the
screen the mark was taken on) and `mark.json`:
the mark before the paste and after, the rows (relative to the mark before) where each
needle shows up, and what the model received.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _pane
from _pane import REPO, Pane
from real_cli_support import isolated_home_env

from cao_testkit.scripted_model.harness import ScriptedModelServer

REPLY = "Scripted reply for the paste check."
SCRIPT = {"rules": [{"reply": REPLY}], "default": "Paste check"}  # no match: every message
SHORT = "please run the tests again"
LONG_END = "END-OF-LONG-PASTE-7f3a"
LONG = "\n".join(
    [
        f"line {i:02d} of the long paste: lorem ipsum dolor sit amet, consectetur adipiscing elit"[:75]
        for i in range(1, 40)
    ]
    + [LONG_END]
)
NEEDLES = [SHORT, "line 01 of the long paste", "line 39 of the long paste", LONG_END, "Pasted", "pasted", REPLY]
MARK = "#{history_size} #{cursor_y} #{cursor_x} #{pane_height} #{alternate_on} #{cursor_flag}"

# provider: (npm package, binary, idle marker, busy marker)
CLIS = {
    "claude_code": ("@anthropic-ai/claude-code", "claude", "? for shortcuts", "esc to interrupt"),
    "codex": ("@openai/codex", "codex", "for shortcuts", "esc to interrupt"),
    "gemini_cli": ("@google/gemini-cli", "gemini", "Type your message", "esc to cancel"),
    "qwen_cli": ("@qwen-code/qwen-code", "qwen", "Type your message", "esc to cancel"),
    "opencode_cli": ("opencode-ai", "opencode", "ctrl+p cmd", "esc interrupt"),
}


def start(provider: str, rec, root: Path, model: ScriptedModelServer, panes: list[Pane]) -> Pane:
    """The CLI on its idle screen, launched as rec (its recorder module) launches it."""
    pane = launch(provider, rec, root, model)
    panes.append(pane)  # killed at the end whatever happens
    pane.remove_socket = True  # and its socket file removed (tmux 3.3 leaves it behind)
    if provider == "claude_code":
        for marker in ("Choose the text style", "Press Enter to continue", "Yes, I trust this folder"):
            pane.wait(marker, timeout=60)
            pane.keys("Enter")
        pane.wait("? for shortcuts")
    elif provider == "codex":
        pane.settle(rec.READY, "·", timeout=60)
    elif provider == "opencode_cli":
        pane.settle("Ask anything", rec.FOOTER)
    else:
        pane.wait(rec.PLACEHOLDER, absent=getattr(rec, "STARTING", ()), timeout=60)
    return pane


def launch(provider: str, rec, root: Path, model: ScriptedModelServer) -> Pane:
    (root / "work").mkdir(exist_ok=True)
    if provider == "claude_code":
        env = {
            "PATH": os.environ["PATH"],
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "CAO_API_PORT": "9",
            **isolated_home_env(root),
            **model.cli_env("rec"),
        }
        return rec.new_pane("-paste", env).start(root / "work", rec.launch_command(root, env, "0000c1a0", False))
    if provider == "codex":
        os.environ.update(
            {"CAO_API_PORT": "9", "OPENAI_BASE_URL": model.base_url("rec", "/v1"), "OPENAI_API_KEY": "scripted"}
        )
        subprocess.run(["git", "init", "-q", str(root / "work")], check=True)
        return rec.launch(root, "main", yolo=False)
    if provider == "opencode_cli":
        os.environ["CAO_API_PORT"] = "9"
        rec.write_scripted_config(model)
        return rec.launch(root, "main", yolo=False)
    return rec.launch(root, "main", model, yolo=False)  # gemini_cli, qwen_cli


class Recorder:
    def __init__(self, pane: Pane, model: ScriptedModelServer, out: Path, idle: str, busy: str, enter_delay: float):
        self.pane, self.model, self.out = pane, model, out
        self.idle, self.busy, self.enter_delay = idle, busy, enter_delay
        self.paste_no = 0

    def mark(self) -> dict:
        """The mark, and the screen it was taken on (kept for save as `<state>.before.visible.txt`)."""
        mark, rows = self._marked_rows()
        self.before_screen = "\n".join(rows[mark["history_size"] :])
        return mark

    def _marked_rows(self) -> tuple[dict, list[str]]:
        """The mark and the unjoined scrollback, read by one tmux command (no scroll in between)."""
        out = self.pane.tmux(
            "display-message",
            "-p",
            "-t",
            _pane.SESSION,
            MARK,
            ";",
            "capture-pane",
            "-p",
            "-S",
            "-",
            "-t",
            _pane.SESSION,
        )
        first, _, rows = out.partition("\n")
        keys = ("history_size", "cursor_y", "cursor_x", "pane_height", "alternate_on", "cursor_flag")
        mark = dict(zip(keys, map(int, first.split())))
        mark["row"] = mark["history_size"] + mark["cursor_y"]
        return mark, rows.removesuffix("\n").split("\n")

    def paste(self, text: str) -> None:
        self.paste_no += 1
        subprocess.run(
            [
                "tmux",
                "-L",
                self.pane.socket,
                "load-buffer",
                "-b",
                f"paste-{self.paste_no}",
                "-",
                ";",
                "paste-buffer",
                "-p",
                "-d",
                "-b",
                f"paste-{self.paste_no}",
                "-t",
                _pane.SESSION,
            ],
            input=text,
            text=True,
            env=self.pane.env,
            check=True,
            capture_output=True,
        )

    def still(self, at_least: float = 1.0, limit: float = 6.0) -> None:
        """Wait at_least seconds, then until two captures 0.5 s apart agree (or limit)."""
        time.sleep(at_least)
        deadline, last = time.monotonic() + limit, self.pane.screen()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = self.pane.screen()
            if now == last:
                return
            last = now

    def main_requests(self) -> list[dict]:
        return [r for r in self.model.requests("rec") if not r["side"]]

    def submit(self, sent: int) -> int:
        """Enter, then wait for the turn to end (a new main model request, then an idle screen
        with the reply). Presses Enter again, as cao does, if no request comes; returns the presses."""
        presses = 0
        while presses < 3:
            self.pane.keys("Enter")
            presses += 1
            deadline = time.monotonic() + 8
            while len(self.main_requests()) <= sent and time.monotonic() < deadline:
                time.sleep(0.2)
            if len(self.main_requests()) > sent:
                break
            print(f"  ! no model request after Enter #{presses}")
        self.pane.wait(REPLY, self.idle, absent=(self.busy,), timeout=90)
        self.still(1.5)
        return presses

    def save(self, state: str, before: dict, **more: object) -> None:
        after, rows = self._marked_rows()
        self.out.mkdir(parents=True, exist_ok=True)
        for kind, text in (
            ("before.visible", self.before_screen),
            ("visible", self.pane.screen()),
            ("history", self.pane.history()),
            ("rows", "\n".join(rows)),
        ):
            (self.out / f"{state}.{kind}.txt").write_text(text.removesuffix("\n") + "\n", encoding="utf-8")
        found = {n: [i - before["row"] for i, line in enumerate(rows) if n in line] for n in NEEDLES}
        record = {
            "before": before,
            "after": after,
            "rows_captured": len(rows),
            "found_rows_relative_to_before": {n: r for n, r in found.items() if r},
            **more,
        }
        (self.out / f"{state}.mark.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"  {state}: before {before} after {after}\n    found {record['found_rows_relative_to_before']}")

    def model_saw(self) -> dict:
        text = self.main_requests()[-1]["user_text"] or ""
        return {"chars": len(text), "has_end_marker": LONG_END in text, "head": text[:80], "tail": text[-80:]}

    def run(self) -> None:
        sent = len(self.main_requests())
        before = self.mark()
        self.paste(SHORT)
        self.still()
        self.save("short_composer", before)
        presses = self.submit(sent)
        self.save("short_submitted", before, enter_presses=presses, model_saw=self.model_saw())

        sent, before = len(self.main_requests()), self.mark()
        self.paste(SHORT)
        time.sleep(self.enter_delay)
        presses = self.submit(sent)
        self.save("short_twice_submitted", before, enter_presses=presses, model_saw=self.model_saw())

        sent, before = len(self.main_requests()), self.mark()
        self.paste(LONG)
        self.still()
        self.save("long_composer", before)
        presses = self.submit(sent)
        self.save("long_submitted", before, enter_presses=presses, model_saw=self.model_saw())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", required=True, choices=sorted(CLIS))
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--idle-wait",
        type=float,
        default=0,
        help="seconds on the idle screen before the first paste (cao pastes at once)",
    )
    args = parser.parse_args()
    out = args.out or REPO / "tests" / "fixtures" / "paste" / args.provider
    package, binary, idle, busy = CLIS[args.provider]
    rec = importlib.import_module(args.provider)  # this directory's recorder for the provider
    provider = importlib.import_module(f"cli_agent_orchestrator.providers.{args.provider}").PROVIDER
    with (
        ScriptedModelServer() as model,
        _pane.recording(package, rec.VERSION, binary, f"cao-paste-{args.provider}-") as (root, panes),
    ):
        model.set_script("rec", SCRIPT)
        pane = start(args.provider, rec, root, model, panes)
        time.sleep(args.idle_wait)
        Recorder(pane, model, out, idle, busy, provider.enter_delay_s or 0.3).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
