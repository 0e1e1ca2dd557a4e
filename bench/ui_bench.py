#!/usr/bin/env python3
"""Web UI benchmark, in real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright) against a private cao-server with mock agents:

- status change -> visible on the board: from the StatusChanged event's arrival at an SSE
  follower beside the page to the row's status text changing in the page (both on this
  machine's wall clock; noise of a few ms either way, so a median can read below 0), median
  over turns, with 1 and with 100 agents on the page; and from the input's POST to the page
  showing `processing`, for scale;
- agent output -> visible in the terminal view: from the output event's arrival at the
  follower to the text appearing in xterm.js's rows, median, with 1 and 100 agents;
- a CLI printing fast: one reply of --flood-lines lines, from the input to its last line in
  the terminal view, beside the same line's output event;
- page load: navigation to the board (load event), and to every row drawn, with 100 agents;
- server CPU (% of one core) while 10 browser pages watch 50 agents, idle and while the
  agents take turns, against the same without any page.

    python bench/ui_bench.py [--agents 100] [--turns 10] [--watchers 10] [--watched 50]

Prints a table and writes JSON to bench/results/ui.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _harness import EventFollower, Server, machine, report  # noqa: E402
from browser_support import CHROMIUM  # noqa: E402  (the tests' browser, started the same way)
from browser_support import CHROMIUM_ARGS as ARGS  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

# In the page: the wall-clock time at which a row's status text becomes each value.
WATCH_STATUS = """([id]) => {
  window.__seen = window.__seen || {};
  const el = document.querySelector(`[data-terminal-id='${id}'] [data-field=status]`);
  const note = () => { (window.__seen[id] = window.__seen[id] || []).push([el.textContent, Date.now()]); };
  new MutationObserver(note).observe(el, {childList: true, characterData: true, subtree: true});
}"""
# In the page: the wall-clock time at which the terminal view first shows `needle`.
WATCH_TEXT = """([needle]) => {
  window.__shown = null;
  const rows = document.querySelector('#terminal .xterm-rows');
  const check = () => {
    if (window.__shown === null && rows.textContent.includes(needle)) { window.__shown = Date.now(); obs.disconnect(); }
  };
  const obs = new MutationObserver(check);
  obs.observe(rows, {childList: true, characterData: true, subtree: true});
}"""


def spawn_many(server: Server, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        resp = server.http.post("/sessions", params={"agent_profile": "developer", "provider": "mock_cli"})
        resp.raise_for_status()
        ids.append(resp.json()["id"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        statuses = {t["id"]: t["status"] for t in server.http.get("/terminals").json()}
        if all(statuses.get(i) == "idle" for i in ids):
            return ids
        time.sleep(0.2)
    raise SystemExit("agents did not all reach idle")


def signed_in_page(server: Server, browser, path: str = "/"):
    ticket = server.http.post("/ui/tickets").json()
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.goto(f"{server.url}{ticket['path']}")
    page.wait_for_selector("[data-page=board]")
    if path != "/":
        page.goto(f"{server.url}/{path}")
    return context, page


def status_latency(server: Server, page, terminal_id: str, turns: int) -> tuple[list[float], list[float]]:
    """ms from the `processing`/`completed` events reaching the follower (an SSE client beside
    the page: the moment the status changed, give or take a millisecond) to the page showing
    them; and ms from the input's POST to the page showing `processing`."""
    page.wait_for_selector(f"[data-terminal-id='{terminal_id}'] [data-field=status]")
    page.evaluate(WATCH_STATUS, [terminal_id])
    out: list[float] = []
    from_input: list[float] = []
    for n in range(turns):
        server.drain()
        posted = time.time()
        server.http.post(f"/terminals/{terminal_id}/input", json={"message": f"board turn {n}"}).raise_for_status()
        arrivals = {}
        for status in ("processing", "completed"):
            arrivals[status] = follower_epoch(server.wait_event(terminal_id, status))
        time.sleep(0.3)
        seen = page.evaluate("([id]) => window.__seen[id] || []", [terminal_id])
        for status, arrived in arrivals.items():
            shown = [t for text, t in seen if text == status and t / 1000 >= arrived - 0.05]
            if shown:
                out.append(shown[0] - arrived * 1000)
                if status == "processing":
                    from_input.append(shown[0] - posted * 1000)
        page.evaluate("([id]) => { window.__seen[id] = []; }", [terminal_id])
    return out, from_input


_OFFSET = time.time() - time.perf_counter()


def follower_epoch(perf_t: float) -> float:
    """The follower stamps arrivals with perf_counter; the page with Date.now()."""
    return perf_t + _OFFSET


def output_latency(server: Server, browser, terminal_id: str, turns: int) -> list[float]:
    context, page = signed_in_page(server, browser, f"#/terminal/{terminal_id}")
    out_events = EventFollower(server.url, f"terminal.{terminal_id}.output")
    try:
        page.wait_for_selector("#terminal .xterm-rows")
        time.sleep(0.5)
        samples: list[float] = []
        for n in range(turns):
            needle = f"xq{n}z"
            out_events.drain()
            page.evaluate(WATCH_TEXT, [f"MOCK: {needle}"])
            server.http.post(f"/terminals/{terminal_id}/input", json={"message": needle}).raise_for_status()
            arrived, _ = out_events.wait_for(lambda ev, mark=f"MOCK: {needle}": mark in ev.get("data", ""), 20)
            shown = page.wait_for_function("() => window.__shown").json_value()
            samples.append(shown - follower_epoch(arrived) * 1000)
            server.wait_event(terminal_id, "completed")
        return samples
    finally:
        context.close()


def flood(server: Server, browser, terminal_id: str, lines: int) -> dict:
    """A CLI printing fast: `lines` lines in one reply; from the input to its last line shown in
    the terminal view, beside the same reply's last output event at the follower."""
    context, page = signed_in_page(server, browser, f"#/terminal/{terminal_id}")
    out_events = EventFollower(server.url, f"terminal.{terminal_id}.output")
    try:
        page.wait_for_selector("#terminal .xterm-rows")
        time.sleep(0.5)
        last = f"line {lines} of {lines}"
        page.evaluate(WATCH_TEXT, [last])
        t0 = time.time()
        server.http.post(f"/terminals/{terminal_id}/input", json={"message": f"__mock_long_{lines}"}).raise_for_status()
        arrived, _ = out_events.wait_for(lambda ev: last in ev.get("data", ""), 120)
        shown = page.wait_for_function("() => window.__shown", timeout=120000).json_value()
        server.wait_event(terminal_id, "completed", timeout=120)
        return {
            "input_to_last_line_event_ms": (follower_epoch(arrived) - t0) * 1000,
            "input_to_last_line_shown_ms": shown - t0 * 1000,
        }
    finally:
        context.close()


def cpu_percent(proc: psutil.Process, seconds: float) -> float:
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    return 100.0 * ((after.user - before.user) + (after.system - before.system)) / seconds


def churn(server: Server, ids: list[str], stop: threading.Event, per_second: float) -> None:
    """Turns spread over the agents at `per_second`, until stopped."""
    n = 0
    while not stop.is_set():
        tid = ids[n % len(ids)]
        server.http.post(f"/terminals/{tid}/input", json={"message": f"churn {n}"})
        n += 1
        stop.wait(1.0 / per_second)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--watchers", type=int, default=10)
    ap.add_argument("--watched", type=int, default=50)
    ap.add_argument("--cpu-seconds", type=float, default=20.0)
    ap.add_argument("--flood-lines", type=int, default=20000)
    args = ap.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")

    results: dict = {"machine": machine(), "args": vars(args)}
    rows: list[tuple[str, float, str]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            # 1 agent, then 100 agents on the page.
            server = Server(think_ms=200)
            try:
                proc = psutil.Process(server.proc.pid)
                [one] = spawn_many(server, 1)
                context, page = signed_in_page(server, browser)
                status_1, input_1 = status_latency(server, page, one, args.turns)
                context.close()
                output_1 = output_latency(server, browser, one, args.turns)
                flooded = flood(server, browser, one, args.flood_lines)
                more = spawn_many(server, args.agents - 1)
                t0 = time.perf_counter()
                context, page = signed_in_page(server, browser)
                loaded = page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")
                page.wait_for_function(f"() => document.querySelectorAll('[data-terminal-id]').length >= {args.agents}")
                all_rows_ms = (time.perf_counter() - t0) * 1000
                # The login page redirects to the board: time a plain reload of the board too.
                t1 = time.perf_counter()
                page.reload()
                page.wait_for_function(f"() => document.querySelectorAll('[data-terminal-id]').length >= {args.agents}")
                reload_ms = (time.perf_counter() - t1) * 1000
                reload_load = page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")
                status_n, input_n = status_latency(server, page, more[-1], args.turns)
                context.close()
                output_n = output_latency(server, browser, more[-1], args.turns)

                # Server CPU: 50 agents, idle then churning, without and with 10 watching pages.
                watched = ([one, *more])[: args.watched]
                for tid in [one, *more][args.watched :]:
                    server.http.delete(f"/terminals/{tid}")
                time.sleep(2)
                cpu = {}
                cpu["idle, no page"] = cpu_percent(proc, args.cpu_seconds)
                stop = threading.Event()
                threading.Thread(target=churn, args=(server, watched, stop, 2.0), daemon=True).start()
                time.sleep(2)
                cpu["2 turns/s, no page"] = cpu_percent(proc, args.cpu_seconds)
                stop.set()
                time.sleep(3)
                pages = [signed_in_page(server, browser) for _ in range(args.watchers)]
                for _, p in pages:
                    p.wait_for_function(
                        f"() => document.querySelectorAll('[data-terminal-id]').length >= {len(watched)}"
                    )
                time.sleep(2)
                cpu[f"idle, {args.watchers} pages"] = cpu_percent(proc, args.cpu_seconds)
                stop = threading.Event()
                threading.Thread(target=churn, args=(server, watched, stop, 2.0), daemon=True).start()
                time.sleep(2)
                cpu[f"2 turns/s, {args.watchers} pages"] = cpu_percent(proc, args.cpu_seconds)
                stop.set()
                for ctx, _ in pages:
                    ctx.close()
            finally:
                server.close()
        finally:
            browser.close()

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    results.update(
        status_ms_1=status_1,
        status_ms_n=status_n,
        input_to_processing_shown_ms_1=input_1,
        input_to_processing_shown_ms_n=input_n,
        output_ms_1=output_1,
        output_ms_n=output_n,
        load_event_ms=loaded,
        all_rows_ms=all_rows_ms,
        reload_ms=reload_ms,
        reload_load_event_ms=reload_load,
        server_cpu_percent=cpu,
        flood=flooded,
    )
    rows += [
        ("status change -> on the board, 1 agent (median ms)", med(status_1), "< 100"),
        (f"status change -> on the board, {args.agents} agents (median ms)", med(status_n), "< 100"),
        ("input POST -> 'processing' on the board, 1 agent (median ms)", med(input_1), ""),
        (f"input POST -> 'processing' on the board, {args.agents} agents (median ms)", med(input_n), ""),
        ("output -> in the terminal view, 1 agent (median ms)", med(output_1), ""),
        (f"output -> in the terminal view, {args.agents} agents (median ms)", med(output_n), ""),
        (
            f"{args.flood_lines} lines: input -> last line's output event (ms)",
            flooded["input_to_last_line_event_ms"],
            "",
        ),
        (f"{args.flood_lines} lines: input -> last line shown (ms)", flooded["input_to_last_line_shown_ms"], ""),
        (f"page load via login link -> {args.agents} rows drawn (ms)", all_rows_ms, ""),
        (f"board reload -> {args.agents} rows drawn (ms)", reload_ms, ""),
        ("board reload: load event (ms)", reload_load, ""),
    ]
    rows += [(f"server CPU, {args.watched} agents, {k} (% of a core)", v, "") for k, v in cpu.items()]
    report(rows, results, "ui")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
