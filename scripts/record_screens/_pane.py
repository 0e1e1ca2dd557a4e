"""Shared by the screen recorders: one tmux pane on a private socket, and the fixture files.

The recorders differ in how long a CLI needs to draw a still frame, how soon it takes an
Enter after typed text, and what it leaves behind on exit; those are the options here.
Waits key on literal screen text, never on the provider's read_status, so that after a
CLI upgrade a recording still completes and the screen tests show what broke.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # the CLIs are installed and confined as the real-CLI tests do it

from real_cli_support import isolated_home_env, npm_binary  # noqa: E402

from cli_agent_orchestrator.providers.base import LaunchContext  # noqa: E402

SESSION = "rec"


class Pane:
    """One tmux server on socket `socket` with one 220x50 session (a cao pane's size).

    settle: after the markers show, wait this long and capture again (0: return at once).
    enter_delay: pause between typed text and its Enter; None waits for the text to show.
    remove_socket: unlink the socket file at kill (tmux 3.3 leaves it behind).
    exit_wait: at kill, wait up to this long for the pane's processes to end.
    """

    def __init__(
        self,
        socket: str,
        env: dict[str, str],
        *,
        timeout: float = 40,
        settle: float = 0,
        enter_delay: float | None = 0.3,
        remove_socket: bool = False,
        exit_wait: float = 0,
    ):
        self.socket, self.env = socket, env
        self.timeout, self.settle_after, self.enter_delay = timeout, settle, enter_delay
        self.remove_socket, self.exit_wait = remove_socket, exit_wait

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], env=self.env, check=True, capture_output=True, text=True
        ).stdout

    def _ask(self, *args: str) -> str:
        """A tmux query that may fail (the server may be gone already)."""
        return subprocess.run(["tmux", "-L", self.socket, *args], env=self.env, capture_output=True, text=True).stdout

    def start(self, cwd: Path, command: str, remain_on_exit: bool = False) -> Pane:
        self.tmux("new-session", "-d", "-s", SESSION, "-x", "220", "-y", "50", "-c", str(cwd), command)
        if remain_on_exit:  # keep the last screen of a CLI that exits
            self.tmux("set-option", "-t", SESSION, "remain-on-exit", "on")
        return self

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", SESSION)

    def history(self) -> str:
        """The whole scrollback, wrapped rows joined, as cao captures it."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", SESSION)

    def cursor(self) -> list[int]:
        x, y = self.tmux("display-message", "-p", "-t", SESSION, "#{cursor_x} #{cursor_y}").split()
        return [int(y), int(x)]

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", SESSION, *keys)

    def type(self, text: str, enter: bool = True) -> None:
        self.keys("-l", text)
        if enter:
            if self.enter_delay is None:
                self.wait(text)  # an Enter that comes before the text is in can be lost
            else:
                time.sleep(self.enter_delay)
            self.keys("Enter")

    def wait(self, *markers: str, absent: tuple[str, ...] = (), timeout: float | None = None) -> str:
        """The screen once it shows every marker and none of `absent`; on timeout, what is there."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if all(m in text for m in markers) and not any(a in text for a in absent):
                if not self.settle_after:
                    return text
                time.sleep(self.settle_after)  # let the last frame settle
                return self.screen()
            if time.monotonic() > deadline:
                print(f"  ! timed out waiting for {markers} (absent {absent}); keeping what is there")
                return text
            time.sleep(0.1)

    def kill(self) -> None:
        pids = self._ask("list-panes", "-a", "-F", "#{pane_pid}").split() if self.exit_wait else []
        path = self._ask("display-message", "-p", "#{socket_path}").strip() if self.remove_socket else ""
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True)
        if path:
            Path(path).unlink(missing_ok=True)  # tmux 3.3 leaves the socket file behind
        deadline = time.monotonic() + self.exit_wait
        while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)


def save(out: Path, state: str, text: str, expect: dict, history: str | None = None, indent: int = 2) -> None:
    """`<state>.txt` (the screen), `<state>.history.txt` if given, `<state>.json` (what to read)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{state}.txt").write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    if history is not None:
        (out / f"{state}.history.txt").write_text(history.rstrip("\n") + "\n", encoding="utf-8")
    (out / f"{state}.json").write_text(json.dumps(expect, indent=indent) + "\n", encoding="utf-8")
    print(f"  {state}: {expect}")


def context(root: Path, name: str, yolo: bool, **more: object) -> LaunchContext:
    """A launch context for recorder terminal `name`: its id is the name's hex, its cao home root/cao-<name>."""
    return LaunchContext(
        terminal_id=name.encode().hex()[:8].ljust(8, "0"),
        profile_name="recorder",
        system_prompt="You are a recording fixture.",
        working_directory=str(root / "work"),
        home_dir=root / f"cao-{name}",
        yolo=yolo,
        environ=dict(os.environ),
        **more,
    )


@contextmanager
def recording(package: str, version: str, binary: str, prefix: str) -> Iterator[tuple[Path, list[Pane]]]:
    """A throw-away root whose home (HOME, XDG dirs, TMPDIR) this process and its CLIs use, with
    the pinned CLI on PATH; yields it and a list to append panes to. At the end every pane is
    killed and the root removed."""
    cli = npm_binary(package, version, binary)
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.update(isolated_home_env(root))
    os.environ["PATH"] = f"{cli.parent}{os.pathsep}{os.environ['PATH']}"
    panes: list[Pane] = []
    try:
        yield root, panes
    finally:
        for pane in panes:
            pane.kill()
        shutil.rmtree(root, ignore_errors=True)
