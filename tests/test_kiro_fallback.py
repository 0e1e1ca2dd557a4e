"""Kiro's start-up fallback (core contract §11): a TUI that does not come up within the start-up
timeout is replaced, in the same window, by the same agent with `--legacy-ui`; once only.

kiro-cli cannot be installed here, so the program on PATH named `kiro-cli` is a stand-in
written from the contract: `chat --help` lists the launch line's flags; the TUI launch draws
Kiro's boot line and never becomes ready (the failure the fallback exists for); the
`--legacy-ui` launch shows the line UI's prompt and answers each line. Everything else is
real: cao-server, tmux, the kiro_cli provider's launch line, status reading and extraction.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import CaoServer

FAKE_KIRO = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys, time
    args = sys.argv[1:]
    if args[:2] == ["chat", "--help"]:
        print("Usage: kiro-cli chat [OPTIONS]\\n      --agent <AGENT>\\n      --agent-engine <ENGINE>")
        print("      --model <MODEL>\\n  -a, --trust-all-tools\\n      --legacy-ui\\n  -h, --help")
        sys.exit(0)
    with open(os.environ["FAKE_KIRO_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    agent = args[args.index("--agent") + 1]
    if "--legacy-ui" not in args or os.environ.get("FAKE_KIRO_LEGACY_HANGS"):
        sys.stdout.write(" " + agent + " · model · 0%\\r\\n Initializing · type to queue a message\\r\\n")
        sys.stdout.flush()
        time.sleep(3600)
    turn = 0
    while True:
        sys.stdout.write("[" + agent + "] " + str(turn) + "% > ")
        sys.stdout.flush()
        line = sys.stdin.readline()
        if not line or line.strip() == "/exit":
            break
        if line.strip():
            turn += 1
            time.sleep(0.3)
            sys.stdout.write("> Hello from the line UI.\\r\\n▸ Credits: 0.01 • Time: 1s\\r\\n")
    """
)


@pytest.fixture
def kiro_home(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kiro-cli"
    fake.write_text(FAKE_KIRO.format(python=sys.executable))
    fake.chmod(0o755)
    return bin_dir, tmp_path / "kiro-launches.jsonl"


def start(cao_factory, kiro_home, **env: str) -> CaoServer:
    bin_dir, log = kiro_home
    server = cao_factory(
        "home",
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        FAKE_KIRO_LOG=str(log),
        CAO_PROVIDER_INIT_TIMEOUT="4",
        **env,
    ).start()
    installed = server.client.post("/agents/profiles/install", json={"source": "developer", "provider": "kiro_cli"})
    assert installed.status_code == 200, installed.text
    return server


def launches(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_tui_that_does_not_come_up_is_started_again_in_the_line_ui(cao_factory, kiro_home):
    cao = start(cao_factory, kiro_home)
    t0 = time.monotonic()
    resp = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "kiro_cli"})
    assert resp.status_code == 201, resp.text
    term = resp.json()
    assert term["status"] == "idle" and time.monotonic() - t0 >= 4  # after the TUI's timeout
    first, second = launches(kiro_home[1])
    assert "--legacy-ui" not in first and "--legacy-ui" in second
    assert second == [
        *first[: first.index("--trust-all-tools")],
        "--legacy-ui",
        *first[first.index("--trust-all-tools") :],
    ]
    # The same terminal, window and session: nothing of the first try shows.
    windows = cao.tmux("list-windows", "-a", "-F", "#{session_name} #{window_name}").stdout.split("\n")
    assert f"{term['session_name']} {term['name']}" in windows
    assert "Initializing" not in cao.client.get(f"/terminals/{term['id']}/output").json()["output"]
    cao.send(term["id"], "please say hello")
    cao.wait_status(term["id"], "completed", timeout=20)
    last = cao.client.get(f"/terminals/{term['id']}/output", params={"mode": "last"}).json()["output"]
    assert last == "Hello from the line UI."


def test_the_fallback_is_tried_once_and_a_line_ui_start_has_none(cao_factory, kiro_home):
    cao = start(cao_factory, kiro_home, FAKE_KIRO_LEGACY_HANGS="1")
    resp = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "kiro_cli"})
    assert resp.status_code == 504, resp.text
    assert len(launches(kiro_home[1])) == 2  # TUI, then line UI, then it gives up
    assert cao.client.get("/terminals").json() == []  # nothing left behind
    kiro_home[1].unlink()
    yolo = cao.client.post("/sessions", params={"agent_profile": "developer", "provider": "kiro_cli", "yolo": "true"})
    assert yolo.status_code == 504, yolo.text
    [only] = launches(kiro_home[1])
    assert "--legacy-ui" in only  # unrestricted tools start in the line UI: no second try
