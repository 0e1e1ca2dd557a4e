"""Shared by the real-CLI benchmarks (bench/real_*_bench.py): the pinned CLI in a throw-away
home against the scripted model, the bare CLI in tmux as the baseline, cao's spawn and turn
timings, and the memory of each agent's processes."""

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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

# The CLIs are installed and confined the way the real-CLI tests do it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _harness import EventFollower, Server, report  # noqa: E402
from real_cli_support import isolated_home_env, npm_binary  # noqa: E402

from cao_testkit.scripted_model.harness import ScriptedModelServer  # noqa: E402
from cli_agent_orchestrator.providers.base import LaunchContext  # noqa: E402

# As cao's input service (services/input.py): an Enter that shows no effect is pressed again.
ENTER_RETRY_S = 1.5
ENTER_RETRIES = 3


def bench_parser(doc: str, spawns: int = 5, turns: int = 10, agents: int | None = None) -> argparse.ArgumentParser:
    """--spawns, --turns and, where the bench runs several agents at once, --agents."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--spawns", type=int, default=spawns)
    ap.add_argument("--turns", type=int, default=turns)
    ap.add_argument(
        "--gap",
        type=float,
        default=0.0,
        help="seconds of quiet before each timed turn (0: back to back; a CLI's own delayed redraws"
        " of one turn then land in the next)",
    )
    if agents is not None:
        ap.add_argument("--agents", type=int, default=agents)
    return ap


@contextmanager
def scripted_cli(
    package: str, version: str, binary: str, prefix: str, reply: str, **env: str
) -> Iterator[tuple[Path, Path]]:
    """The pinned CLI on PATH, this process's HOME/XDG/TMPDIR in a temporary root (cao-servers
    started from here inherit them), and the scripted model answering "say hello" with `reply`;
    `env` is added to the environment too. Yields the root and an empty work directory in it."""
    cli = npm_binary(package, version, binary)
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with ScriptedModelServer() as model:
            model.set_script("bench", [{"match": "say hello", "reply": reply}])
            os.environ.update(
                {
                    **isolated_home_env(root),
                    **model.cli_env("bench"),
                    **env,
                    "PATH": f"{cli.parent}{os.pathsep}{os.environ['PATH']}",
                }
            )
            work = root / "work"
            work.mkdir()
            yield root, work
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bare_context(root: Path, workdir: Path) -> LaunchContext:
    """What the bare CLI is launched with: cao's launch for a yolo agent, in its own cao home."""
    return LaunchContext(
        terminal_id="00000000",
        profile_name="bench",
        system_prompt="",
        working_directory=str(workdir),
        home_dir=root / "bare",
        yolo=True,
        environ=dict(os.environ),
    )


def drop_hooks(settings_path: Path) -> None:
    """Take cao's hooks out of a launch's settings file: the bare CLI's own time has no cao-hook runs."""
    settings = json.loads(settings_path.read_text())
    settings.pop("hooks")
    settings_path.write_text(json.dumps(settings))


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


class BarePane:
    """The CLI alone in tmux (the same binary, flags and settings, no cao, no hooks), its screen
    polled every 10 ms: the baseline for cao's figures. A subclass says, from the screen, when
    the CLI is ready and when a turn is done."""

    enter_pause = 0.0  # between the prompt showing as typed and its Enter
    wait_on_kill = False  # wait for the CLI's processes to end after killing the tmux server
    remove_socket = False  # unlink the socket file at kill (tmux 3.3 leaves it behind)

    def __init__(self, name: str, env: dict[str, str], argv: list[str], workdir: Path):
        self.socket, self.workdir = f"cao-bench-{name}-{os.getpid()}", workdir
        self.command = f"exec env {shlex.join(f'{k}={v}' for k, v in env.items())} {shlex.join(argv)}"

    def ready(self, screen: str) -> bool:
        raise NotImplementedError

    def done(self, screen: str, prompt: str) -> bool:
        raise NotImplementedError

    def tmux(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        return subprocess.run(["tmux", "-L", self.socket, *args], env=env, capture_output=True, text=True).stdout

    def until(self, predicate: Callable[[str], bool], timeout: float = 60) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            screen = self.tmux("capture-pane", "-p", "-t", "b")
            if predicate(screen):
                return time.perf_counter()
            time.sleep(0.01)
        raise SystemExit(f"the bare CLI did not reach the expected screen:\n{screen}")

    def kill(self) -> None:
        pids = self.tmux("list-panes", "-a", "-F", "#{pane_pid}").split() if self.wait_on_kill else []
        path = self.tmux("display-message", "-p", "#{socket_path}").strip() if self.remove_socket else ""
        self.tmux("kill-server")
        if path:
            Path(path).unlink(missing_ok=True)
        psutil.wait_procs([p for p in map(_process, map(int, pids)) if p], timeout=15)

    def spawn(self) -> float:
        self.kill()
        self.socket += "+"  # a fresh tmux server: the one just told to exit may still hold the name
        t0 = time.perf_counter()
        self.tmux("new-session", "-d", "-s", "b", "-x", "220", "-y", "50", "-c", str(self.workdir), self.command)
        return self.until(self.ready) - t0

    def turn(self, n: int) -> tuple[float, float]:
        """A typed turn: (from Enter, from the first typed key) to the answer on screen. The
        second counts the time the CLI takes to draw the typed text, as cao's figure does."""
        prompt = f"say hello {n}"
        typed = time.perf_counter()
        self.tmux("send-keys", "-t", "b", "-l", prompt)
        self.until(lambda s: prompt in s)
        if self.enter_pause:
            time.sleep(self.enter_pause)
        t0 = time.perf_counter()
        self.tmux("send-keys", "-t", "b", "Enter")
        end = self.until(lambda s: self.done(s, prompt))
        return end - t0, end - typed - (self.enter_pause or 0.0)

    def turn_pasted(self, n: int, enter_delay: float = 0.0) -> float:
        """A turn given as cao gives it: a bracketed paste, then Enter (`enter_delay` later: the
        provider's quirk), pressed again after ENTER_RETRY_S while the turn has not ended, as
        cao's input service does. Timed from the paste: the bare CLI's share of cao's turn."""
        prompt = f"say hello {n}"
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        t0 = time.perf_counter()
        load = ["tmux", "-L", self.socket, "load-buffer", "-b", "bench", "-"]
        subprocess.run(load, input=prompt.encode(), env=env, check=True)
        self.tmux("paste-buffer", "-p", "-d", "-b", "bench", "-t", "b")
        if enter_delay:
            time.sleep(enter_delay)
        for _ in range(1 + ENTER_RETRIES):
            self.tmux("send-keys", "-t", "b", "Enter")
            deadline = time.perf_counter() + ENTER_RETRY_S
            while time.perf_counter() < deadline:
                if self.done(self.tmux("capture-pane", "-p", "-t", "b"), prompt):
                    return time.perf_counter() - t0
                time.sleep(0.01)
        raise SystemExit(f"the bare CLI did not finish the pasted turn {prompt!r}")

    def close(self) -> None:
        self.kill()


def answered(screen: str, echo: str, reply: str, busy: str) -> bool:
    """A turn is over on a Gemini CLI or Qwen Code screen: the prompt's `echo` row, the `reply`
    row below its last copy, and no `busy` marker (a spinner row) anywhere."""
    rows = [row.rstrip() for row in screen.splitlines()]
    echoes = [i for i, row in enumerate(rows) if row == echo]
    return bool(echoes) and reply in rows[echoes[-1] :] and busy not in screen


def bare_figures(
    bare: BarePane, spawns: int, turns: int, pause: float = 0.0, enter_delay: float = 0.0, gap: float = 0.0
) -> dict:
    """Spawn → ready `spawns` times, then `turns` turns, in ms; `pause` seconds between the two.
    Then `turns` more turns given as cao gives them (bare_pasted_turn_ms, see turn_pasted).
    `gap` seconds of quiet before each turn."""
    results: dict = {}
    try:
        results["bare_spawn_ms"] = [round(bare.spawn() * 1000) for _ in range(spawns)]
        if pause:
            time.sleep(pause)
        typed = [_after(gap, bare.turn, n) for n in range(1, turns + 1)]
        results["bare_turn_ms"] = [round(from_enter * 1000) for from_enter, _ in typed]
        results["bare_message_turn_ms"] = [round(from_typing * 1000) for _, from_typing in typed]
        pasted = range(turns + 1, 2 * turns + 1)
        results["bare_pasted_turn_ms"] = [round(_after(gap, bare.turn_pasted, n, enter_delay) * 1000) for n in pasted]
    finally:
        bare.close()
    return results


def _after(gap: float, turn: Callable, *args):
    time.sleep(gap)
    return turn(*args)


def agent_rss_mb(terminal_id: str, name_of: Callable[[psutil.Process], str]) -> dict[str, float]:
    """Resident memory (MB) of the processes started for the terminal, summed by `name_of`."""
    out: dict[str, float] = {}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CAO_TERMINAL_ID") != terminal_id:
                continue
            name = name_of(proc)
            out[name] = out.get(name, 0.0) + proc.memory_info().rss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


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


def cao_figures(
    provider: str,
    work: Path,
    spawns: int,
    turns: Iterable[int],
    name_of: Callable[[psutil.Process], str],
    wait_for_agents: bool = False,
    gap: float = 0.0,
) -> dict:
    """Under a private cao-server: `spawns` agents (POST /sessions → IDLE, ms), turns n in `turns`
    ("say hello n", input → `completed` event, ms) on the first, then the RSS of each agent.
    wait_for_agents: after the server stops, wait for its agents to end (they write into HOME while exiting).
    `gap` seconds of quiet before each turn."""
    results: dict = {}
    server = Server(0)
    try:
        spawn_ms, tids = [], []
        for _ in range(spawns):
            t0 = time.perf_counter()
            params = {
                "agent_profile": "developer",
                "provider": provider,
                "yolo": "true",
                "working_directory": str(work),
            }
            resp = server.http.post("/sessions", params=params)
            resp.raise_for_status()
            spawn_ms.append(round((time.perf_counter() - t0) * 1000))
            tids.append(resp.json()["id"])
        results["cao_spawn_to_idle_ms"] = spawn_ms
        turn_ms = []
        for n in turns:
            time.sleep(gap)
            server.drain()
            t0 = time.perf_counter()
            server.http.post(f"/terminals/{tids[0]}/input", json={"message": f"say hello {n}"}).raise_for_status()
            turn_ms.append(round((server.wait_event(tids[0], "completed", 60) - t0) * 1000))
        results["cao_turn_ms"] = turn_ms
        time.sleep(3)  # let the agents settle before reading memory
        results["rss_mb_per_agent"] = [{k: round(v, 1) for k, v in agent_rss_mb(t, name_of).items()} for t in tids]
    finally:
        agents = agent_processes(server.home) if wait_for_agents else []
        server.close()
        psutil.wait_procs(agents, timeout=15)
        shutil.rmtree(server.home, ignore_errors=True)
    return results


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report_against_bare(results: dict, name: str) -> None:
    """The table of cao's medians next to the bare CLI's, as in bench/results/<name>.json."""
    rss = [sum(r.values()) for r in results["rss_mb_per_agent"]]
    report(
        [
            ("bare spawn → idle, median ms", median(results["bare_spawn_ms"]), ""),
            ("cao spawn → idle, median ms", median(results["cao_spawn_to_idle_ms"]), ""),
            ("bare turn, median ms", median(results["bare_turn_ms"]), ""),
            ("bare turn given as cao gives it (paste, Enter), median ms", median(results["bare_pasted_turn_ms"]), ""),
            ("cao turn, median ms", median(results["cao_turn_ms"]), ""),
            ("cao turn overhead, median ms", median(results["cao_turn_ms"]) - median(results["bare_turn_ms"]), ""),
            ("bare turn from the first typed key, median ms", median(results["bare_message_turn_ms"]), ""),
            (
                "  cao turn over that (both include drawing the message), ms",
                median(results["cao_turn_ms"]) - median(results["bare_message_turn_ms"]),
                "",
            ),
            (
                "  over the bare turn given as cao gives it, ms",
                median(results["cao_turn_ms"]) - median(results["bare_pasted_turn_ms"]),
                "",
            ),
            ("RSS per agent (CLI + MCP server), MB", median(rss), ""),
        ],
        results,
        name,
    )


def timed_spawn(cao, params: dict, timeout: float = 60) -> tuple[float, dict]:
    """(ms, the terminal) of POST /sessions, which returns once the agent is IDLE."""
    t0 = time.perf_counter()
    resp = cao.client.post("/sessions", params=params, timeout=timeout)
    resp.raise_for_status()
    return (time.perf_counter() - t0) * 1000, resp.json()


def timed_turn(
    cao, events: EventFollower, tid: str, text: str, started: str, ended: str, timeout: float
) -> tuple[float, float]:
    """(total ms, the CLI's own ms) of one turn: total is POST input → `completed` event; the
    CLI's own time runs from its `started` to its `ended` event (without them: from the POST,
    to the `completed` event)."""
    events.drain()
    t0 = time.perf_counter()
    resp = cao.client.post(f"/terminals/{tid}/input", json={"message": text})
    resp.raise_for_status()
    end, seen = events.first_by_source(tid, "completed", timeout, turn=resp.json()["turn"])
    return (end - t0) * 1000, (seen.get(ended, end) - seen.get(started, t0)) * 1000


def fresh_agents(
    cao, spawn: Callable[[], tuple[float, dict]], first_turn: Callable[[str], tuple[float, float]], count: int
) -> tuple[list[float], list[float]]:
    """`count` times: spawn an agent, time its first turn, delete its session. The spawn times
    and the first turns' total times, in ms."""
    spawn_ms, first_ms = [], []
    for _ in range(count):
        elapsed, term = spawn()
        spawn_ms.append(elapsed)
        first_ms.append(first_turn(term["id"])[0])
        cao.client.delete(f"/sessions/{term['session_name']}")
    return spawn_ms, first_ms


def turn_figures(prefix: str, own: str, pairs: list[tuple[float, float]]) -> dict[str, list[float]]:
    """Timed turns' (total, the CLI's own) ms as `<prefix>_total_ms`, `<prefix>_<own>_ms` and
    `<prefix>_overhead_ms` (total − own), each to 0.1 ms."""
    return {
        f"{prefix}_total_ms": [round(t, 1) for t, _ in pairs],
        f"{prefix}_{own}_ms": [round(c, 1) for _, c in pairs],
        f"{prefix}_overhead_ms": [round(t - c, 1) for t, c in pairs],
    }
