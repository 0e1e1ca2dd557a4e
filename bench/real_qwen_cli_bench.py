#!/usr/bin/env python3
"""Qwen Code under cao: spawn → IDLE and turn time next to the CLI's own time (the same
binary, flags and settings in a bare tmux pane without cao and without hooks), and RSS
per agent (the CLI plus its cao-mcp-server).

Runs the pinned CLI (installed like the tests install it) against the scripted model,
HOME/XDG/TMPDIR in a temporary directory, a private cao-server and tmux sockets.
Prints a table and writes bench/results/real_qwen_cli.json.

    python bench/real_qwen_cli_bench.py [--spawns 5] [--turns 10]
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

from cli_agent_orchestrator.providers import qwen_cli  # noqa: E402
from cli_agent_orchestrator.providers.base import LaunchContext  # noqa: E402
from cli_agent_orchestrator.scripted_model.harness import ScriptedModelServer  # noqa: E402

VERSION = "0.15.10"
REPLY = "Benchmark reply."
PLACEHOLDER = "Type your message"
BUSY = "esc to cancel)"
STARTING = ("Initializing...", "Connecting to MCP servers")  # not ready for input yet


class BarePane:
    """The CLI alone in tmux, its screen polled every 10 ms: the baseline for cao's figures."""

    def __init__(self, root: Path, workdir: Path):
        self.socket, self.workdir = f"cao-bench-qwen-{os.getpid()}", workdir
        ctx = LaunchContext(terminal_id="00000000", profile_name="bench", system_prompt="",
                            working_directory=str(workdir), home_dir=root / "bare", yolo=True)
        launch = qwen_cli.build_launch(ctx)
        settings_path = Path(launch.env["QWEN_CODE_SYSTEM_SETTINGS_PATH"])
        settings = json.loads(settings_path.read_text())
        settings.pop("hooks")  # the CLI's own time: no cao-hook runs
        settings_path.write_text(json.dumps(settings))
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in launch.env.items())
        self.command = f"exec env {env} {shlex.join(launch.argv)}"

    def tmux(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        return subprocess.run(["tmux", "-L", self.socket, *args], env=env, capture_output=True, text=True).stdout

    def until(self, predicate, timeout: float = 60) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            screen = self.tmux("capture-pane", "-p", "-t", "b")
            if predicate(screen):
                return time.perf_counter()
            time.sleep(0.01)
        raise SystemExit(f"the bare CLI did not reach the expected screen:\n{screen}")

    def kill(self) -> None:
        path = self.tmux("display-message", "-p", "#{socket_path}").strip()
        self.tmux("kill-server")
        if path:
            Path(path).unlink(missing_ok=True)  # tmux 3.3 leaves the socket file behind

    def spawn(self) -> float:
        self.kill()
        self.socket += "+"  # a fresh tmux server: the one just told to exit may still hold the name
        t0 = time.perf_counter()
        self.tmux("new-session", "-d", "-s", "b", "-x", "220", "-y", "50", "-c", str(self.workdir), self.command)
        return self.until(lambda s: PLACEHOLDER in s and not any(cue in s for cue in STARTING)) - t0

    def turn(self, n: int) -> float:
        prompt = f"say hello {n}"
        self.tmux("send-keys", "-t", "b", "-l", prompt)
        self.until(lambda s: prompt in s)
        time.sleep(0.5)  # an Enter that follows typed text too closely reads as part of a paste
        t0 = time.perf_counter()
        self.tmux("send-keys", "-t", "b", "Enter")

        def done(screen: str) -> bool:  # this turn's echo, the reply below it, no spinner
            rows = [row.rstrip() for row in screen.splitlines()]
            echo = [i for i, row in enumerate(rows) if row == f"  > {prompt}"]
            return bool(echo) and f"  ✦ {REPLY}" in rows[echo[-1]:] and BUSY not in screen
        return self.until(done) - t0

    def close(self) -> None:
        self.kill()


def agent_rss_mb(terminal_id: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CAO_TERMINAL_ID") != terminal_id:
                continue
            cmdline = " ".join(proc.cmdline())
            name = "cao-mcp-server" if "mcp" in cmdline else "qwen" if "qwen" in cmdline else proc.name()
            out[name] = round(out.get(name, 0) + proc.memory_info().rss / 2**20, 1)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spawns", type=int, default=5)
    ap.add_argument("--turns", type=int, default=10)
    args = ap.parse_args()
    binary = npm_binary("@qwen-code/qwen-code", VERSION, "qwen")
    root = Path(tempfile.mkdtemp(prefix="cao-bench-qwen-"))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                     "cli_version": VERSION}
    try:
        with ScriptedModelServer() as model:
            model.set_script("bench", [{"match": "say hello", "reply": REPLY}])
            os.environ.update({**isolated_home_env(root), **model.cli_env("bench"), "OPENAI_MODEL": "fake-model",
                               "PATH": f"{binary.parent}{os.pathsep}{os.environ['PATH']}"})
            work = root / "work"
            work.mkdir()
            bare = BarePane(root, work)
            try:
                results["bare_spawn_ms"] = [round(bare.spawn() * 1000) for _ in range(args.spawns)]
                results["bare_turn_ms"] = [round(bare.turn(n) * 1000) for n in range(1, args.turns + 1)]
            finally:
                bare.close()

            server = Server(0)
            try:
                spawns, tids = [], []
                for _ in range(args.spawns):
                    t0 = time.perf_counter()
                    resp = server.http.post("/sessions", params={"agent_profile": "developer", "yolo": "true",
                                                                 "provider": "qwen_cli",
                                                                 "working_directory": str(work)})
                    resp.raise_for_status()
                    spawns.append(round((time.perf_counter() - t0) * 1000))
                    tids.append(resp.json()["id"])
                results["cao_spawn_to_idle_ms"] = spawns
                turns = []
                for n in range(1, args.turns + 1):
                    server.drain()
                    t0 = time.perf_counter()
                    server.http.post(f"/terminals/{tids[0]}/input",
                                     json={"message": f"say hello {n}"}).raise_for_status()
                    turns.append(round((server.wait_event(tids[0], "completed", 60) - t0) * 1000))
                results["cao_turn_ms"] = turns
                time.sleep(3)  # let the agents settle before reading memory
                results["rss_mb_per_agent"] = [agent_rss_mb(t) for t in tids]
            finally:
                server.close()
                shutil.rmtree(server.home, ignore_errors=True)  # the harness leaves its home behind
    finally:
        shutil.rmtree(root, ignore_errors=True)

    rss = [sum(r.values()) for r in results["rss_mb_per_agent"]]
    report([("bare spawn → idle, median ms", median(results["bare_spawn_ms"]), ""),
            ("cao spawn → idle, median ms", median(results["cao_spawn_to_idle_ms"]), ""),
            ("bare turn, median ms", median(results["bare_turn_ms"]), ""),
            ("cao turn, median ms", median(results["cao_turn_ms"]), ""),
            ("cao turn overhead, median ms", median(results["cao_turn_ms"]) - median(results["bare_turn_ms"]), ""),
            ("RSS per agent (CLI + MCP server), MB", median(rss), "")], results, "real_qwen_cli")
    return 0


if __name__ == "__main__":
    sys.exit(main())
