#!/usr/bin/env python3
"""Claude Code under cao: spawn → IDLE and turn time, each next to the CLI's own time
(the same binary and flags in a bare tmux pane, no cao, no hooks), and RSS per agent.

Runs the pinned CLI (installed like the tests install it) against the scripted model,
with HOME/XDG/TMPDIR in a temporary directory, a private cao-server and tmux sockets.
Prints a table and writes bench/results/real_claude_code.json.

    python bench/real_claude_code_bench.py [--spawns 5] [--turns 10]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _harness import Server, report  # noqa: E402
from real_cli_support import isolated_home_env, npm_binary  # noqa: E402

from cli_agent_orchestrator.providers import claude_code  # noqa: E402
from cli_agent_orchestrator.providers.base import LaunchContext  # noqa: E402
from cli_agent_orchestrator.scripted_model.harness import ScriptedModelServer  # noqa: E402

VERSION = "2.1.197"
REPLY = "Benchmark reply."
IDLE_MARK = "bypass permissions on"


class BarePane:
    """The CLI alone in tmux, polled every 10 ms: the baseline cao's figures are compared to."""

    def __init__(self, root: Path, workdir: Path):
        self.socket, self.root, self.workdir = f"cao-bench-claude-{os.getpid()}", root, workdir
        ctx = LaunchContext(terminal_id="00000000", profile_name="bench", system_prompt="",
                            working_directory=str(workdir), home_dir=root / "bare", yolo=True)
        launch = claude_code.build_launch(ctx)
        settings = claude_code.settings(ctx)
        settings.pop("hooks")
        path = Path(launch.argv[launch.argv.index("--settings") + 1])
        path.write_text(json.dumps(settings))
        self.command = f"exec env {shlex.join(f'{k}={v}' for k, v in launch.env.items())} {shlex.join(launch.argv)}"

    def tmux(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        return subprocess.run(["tmux", "-L", self.socket, *args], env=env, capture_output=True, text=True).stdout

    def kill(self) -> None:
        pids = [int(p) for p in self.tmux("list-panes", "-a", "-F", "#{pane_pid}").split()]
        self.tmux("kill-server")
        psutil.wait_procs([p for p in map(_process, pids) if p], timeout=15)

    def until(self, predicate, timeout: float = 60) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if predicate(self.tmux("capture-pane", "-p", "-t", "b")):
                return time.perf_counter()
            time.sleep(0.01)
        raise SystemExit("bare CLI did not reach the expected screen")

    def spawn(self) -> float:
        self.kill()
        self.socket += "+"  # a new tmux server: one just told to exit may still hold the old name
        t0 = time.perf_counter()
        self.tmux("new-session", "-d", "-s", "b", "-x", "220", "-y", "50", "-c", str(self.workdir), self.command)
        return self.until(lambda s: IDLE_MARK in s) - t0

    def turn(self, n: int) -> float:
        self.tmux("send-keys", "-t", "b", "-l", f"say hello {n}")
        self.until(lambda s: f"say hello {n}" in s)
        t0 = time.perf_counter()
        self.tmux("send-keys", "-t", "b", "Enter")
        def done(screen: str) -> bool:  # this turn's echo, the reply below it, the footer idle again
            rows = [row.replace("\xa0", " ").rstrip() for row in screen.splitlines()]
            echo = [i for i, row in enumerate(rows) if row == f"❯ say hello {n}"]
            return bool(echo) and f"● {REPLY}" in rows[echo[0]:] and "esc to interrupt" not in screen
        return self.until(done) - t0

    def close(self) -> None:
        self.kill()


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def agent_processes(home: Path) -> list[psutil.Process]:
    """Every process of an agent of the cao-server whose home is `home`."""
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if env.get("CAO_HOME_DIR") == str(home) and "CAO_TERMINAL_ID" in env:
            found.append(proc)
    return found


def agent_rss_mb(terminal_id: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CAO_TERMINAL_ID") == terminal_id:
                name = "claude" if "claude" in proc.name() else "cao-mcp-server" if "mcp" in " ".join(
                    proc.cmdline()) else proc.name()
                out[name] = out.get(name, 0) + round(proc.memory_info().rss / 2**20, 1)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spawns", type=int, default=5)
    ap.add_argument("--turns", type=int, default=10)
    args = ap.parse_args()
    binary = npm_binary("@anthropic-ai/claude-code", VERSION, "claude")
    root = Path(tempfile.mkdtemp(prefix="cao-bench-claude-"))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}, "cli_version": VERSION}
    try:
        with ScriptedModelServer() as model:
            model.set_script("bench", [{"match": "say hello", "reply": REPLY}])
            os.environ.update({**isolated_home_env(root), **model.cli_env("bench"),
                               "PATH": f"{binary.parent}{os.pathsep}{os.environ['PATH']}"})
            work = root / "work"
            work.mkdir()
            # A user who has run Claude here before: onboarding done, folder trusted.
            Path(os.environ["HOME"], ".claude.json").write_text(json.dumps(
                {"hasCompletedOnboarding": True, "projects": {str(work): {"hasTrustDialogAccepted": True}}}))
            bare = BarePane(root, work)
            try:
                results["bare_spawn_ms"] = [round(bare.spawn() * 1000) for _ in range(args.spawns)]
                time.sleep(1.0)  # Claude drops an Enter pressed right after its prompt box appears
                results["bare_turn_ms"] = [round(bare.turn(n) * 1000) for n in range(1, args.turns + 1)]
            finally:
                bare.close()

            server = Server(0)
            try:
                spawns, tids = [], []
                for _ in range(args.spawns):
                    t0 = time.perf_counter()
                    params = {"agent_profile": "developer", "provider": "claude_code", "yolo": "true",
                              "working_directory": str(work)}
                    resp = server.http.post("/sessions", params=params)
                    resp.raise_for_status()
                    spawns.append(round((time.perf_counter() - t0) * 1000))
                    tids.append(resp.json()["id"])
                results["cao_spawn_to_idle_ms"] = spawns
                tid = tids[0]
                turns = []
                for n in range(args.turns):
                    server.drain()
                    t0 = time.perf_counter()
                    server.http.post(f"/terminals/{tid}/input", json={"message": f"say hello {n}"}).raise_for_status()
                    turns.append(round((server.wait_event(tid, "completed", 60) - t0) * 1000))
                results["cao_turn_ms"] = turns  # the first turn includes the Enter Claude drops at start-up
                time.sleep(3)  # let the agents settle before reading memory
                results["rss_mb_per_agent"] = [agent_rss_mb(t) for t in tids]
            finally:
                agents = agent_processes(server.home)
                server.close()
                psutil.wait_procs(agents, timeout=15)  # they write into HOME while exiting
                shutil.rmtree(server.home, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(key: str, skip: int = 0) -> float:
        return statistics.median(results[key][skip:])

    rss = [sum(r.values()) for r in results["rss_mb_per_agent"]]
    rows = [("bare CLI spawn → idle screen, median ms", med("bare_spawn_ms"), ""),
            ("cao spawn → IDLE, median ms", med("cao_spawn_to_idle_ms"), ""),
            ("  overhead over the bare CLI, ms", med("cao_spawn_to_idle_ms") - med("bare_spawn_ms"), ""),
            ("bare CLI turn, median ms", med("bare_turn_ms"), ""),
            ("cao turn → COMPLETED (2nd turn on), median ms", med("cao_turn_ms", 1), ""),
            ("  overhead over the bare CLI, ms", med("cao_turn_ms", 1) - med("bare_turn_ms"), ""),
            ("cao first turn of a fresh agent, ms", results["cao_turn_ms"][0], ""),
            ("RSS per agent (claude + cao-mcp-server), median MB", statistics.median(rss), "")]
    report(rows, results, "real_claude_code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
