#!/usr/bin/env python3
"""Run the "Combining Patterns" recipe on a running cao-server, with mock agents only.

A supervisor assigns two analysts (parallel, results come back through its inbox),
hands off to a reporter for a template, and, once both results are in, hands off
to a reporter again to fill it. Every agent is cao's mock CLI driven by the rules
in its profile (agents/*.md), so no model or account is needed.

    cao-server &                      # or any running server; CAO_API_PORT / CAO_HOME_DIR pick it
    python examples/combining-patterns/run_demo.py [--delay-ms 400]

The script copies the three profiles into <CAO_HOME_DIR>/agent-store/ (with the
requested thinking delay written into them: a profile's `mock:` values win over
the server's CAO_MOCK_* environment), starts the supervisor in session `cao-demo`,
prints how to watch it in tmux, sends the task, and follows every status change
until the supervisor answers "FINAL REPORT". Exit 0 on success, 1 on failure or
timeout. The session is left running for inspection unless --cleanup is given.

Needs only the standard library and httpx.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
PROFILES = ("supervisor", "analyst", "reporter")
TASK = "Run the quarterly report"
FINAL_MARK = "FINAL REPORT"
POLL_S = 0.2
DEFAULT_DELAY_MS = 400  # slow enough to watch the agents take turns
_DELAY_RE = re.compile(r"^(\s*delay_ms:\s*)\S+", re.M)


def base_url() -> str:
    host = os.environ.get("CAO_API_HOST") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{os.environ.get('CAO_API_PORT') or 9889}"


def home_dir() -> Path:
    return Path(os.environ.get("CAO_HOME_DIR") or "~/.aws/cli-agent-orchestrator").expanduser()


def install_profiles(store: Path, delay_ms: int) -> None:
    store.mkdir(parents=True, exist_ok=True)
    for name in PROFILES:
        text = (HERE / "agents" / f"{name}.md").read_text(encoding="utf-8")
        (store / f"{name}.md").write_text(_DELAY_RE.sub(rf"\g<1>{delay_ms}", text, count=1), encoding="utf-8")


def say(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.2f}s] {text}", flush=True)


def last_reply(client: httpx.Client, terminal_id: str) -> str | None:
    try:
        resp = client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    except httpx.HTTPError:
        return None
    return resp.json().get("output") if resp.status_code == 200 else None


def indent(text: str) -> str:
    return "\n".join("           | " + line for line in text.splitlines())


def inbox_changes(client: httpx.Client, terminal_id: str, known: dict[int, str]) -> list[str]:
    """Lines for inbox messages that are new or changed status since the last call."""
    resp = client.get(f"/terminals/{terminal_id}/inbox/messages", params={"limit": 100})
    if resp.status_code != 200:
        return []
    lines = []
    for msg in resp.json():
        if known.get(msg["id"]) != msg["status"]:
            known[msg["id"]] = msg["status"]
            first = msg["message"].split("\n", 1)[0]
            lines.append(f"inbox      {terminal_id} #{msg['id']} from {msg['sender_id']} {msg['status']}: {first}")
    return lines


def follow(client: httpx.Client, session: str, supervisor: str, timeout: float, started: float) -> str | None:
    """Print every status change in the session until the supervisor's final report (or None).

    The supervisor's inbox is shown too: a turn that only acknowledges a message can be
    shorter than one poll, but its message going pending -> delivered is always seen.
    """
    seen: dict[str, tuple[str, str]] = {}  # id -> (profile, status)
    inbox: dict[int, str] = {}  # message id -> status
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = client.get(f"/sessions/{session}")
        terminals = resp.json().get("terminals", []) if resp.status_code == 200 else []
        current = {t["id"]: t for t in terminals}
        for tid, term in current.items():
            before = seen.get(tid)
            if before is None or before[1] != term["status"]:
                caller = f" (caller {term['caller_id']})" if term.get("caller_id") and before is None else ""
                reason = f": {term['status_reason']}" if term["status"] == "error" and term.get("status_reason") else ""
                say(started, f"{term['agent_profile']:<10} {tid} {before[1] if before else 'new':>19} -> "
                             f"{term['status']}{caller}{reason}")
                if term["status"] == "completed" and (reply := last_reply(client, tid)):
                    print(indent(reply), flush=True)
            seen[tid] = (term["agent_profile"], term["status"])
        for tid in [t for t in seen if t not in current]:
            say(started, f"{seen[tid][0]:<10} {tid} removed")
            del seen[tid]
        for line in inbox_changes(client, supervisor, inbox):
            say(started, line)
        reply = last_reply(client, supervisor)
        if reply and reply.startswith(FINAL_MARK):
            return reply
        if seen.get(supervisor, ("", ""))[1] == "error":
            return None
        time.sleep(POLL_S)
    say(started, f"timed out after {timeout:.0f}s")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=int, default=int(os.environ.get("CAO_DEMO_DELAY_MS") or DEFAULT_DELAY_MS),
                        help="mock thinking time per turn (default %(default)s; env CAO_DEMO_DELAY_MS)")
    parser.add_argument("--session", default="demo", help="session name (cao- is prepended)")
    parser.add_argument("--working-directory", default=os.getcwd(), help="where the agents start")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the final report")
    parser.add_argument("--cleanup", action="store_true", help="delete the session at the end")
    args = parser.parse_args(argv)

    install_profiles(home_dir() / "agent-store", args.delay_ms)
    started = time.monotonic()
    with httpx.Client(base_url=base_url(), timeout=60, trust_env=False) as client:
        try:
            health = client.get("/health").json()
        except httpx.HTTPError as exc:
            print(f"cannot reach cao-server at {base_url()}: {exc}", file=sys.stderr)
            return 1
        session = args.session if args.session.startswith("cao-") else f"cao-{args.session}"
        if client.get(f"/sessions/{session}").status_code == 200:
            print(f"session {session} already exists; delete it (cao shutdown --session {session}) "
                  "or pass --session NAME", file=sys.stderr)
            return 1
        resp = client.post("/sessions", params={"agent_profile": "supervisor", "provider": "mock_cli",
                                                "session_name": session,
                                                "working_directory": args.working_directory})
        if resp.status_code != 201:
            print(f"cannot start the supervisor: {resp.status_code} {resp.text}", file=sys.stderr)
            return 1
        supervisor = resp.json()["id"]
        say(started, f"supervisor {supervisor} ready in session {session}")
        print(f"watch it:  tmux -L {health.get('tmux_socket', 'cao')} attach -t {session}", flush=True)

        resp = client.post(f"/terminals/{supervisor}/input", json={"message": TASK})
        if resp.status_code != 200:
            print(f"cannot send the task: {resp.status_code} {resp.text}", file=sys.stderr)
            return 1
        say(started, f"sent to supervisor: {TASK!r}")
        try:
            report = follow(client, session, supervisor, args.timeout, started)
        finally:
            if args.cleanup:
                client.delete(f"/sessions/{session}")
        if report is None:
            print("no final report", file=sys.stderr)
            return 1
        print("\n" + report, flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
