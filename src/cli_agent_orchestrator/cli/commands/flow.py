"""`cao flow ...` (alias `cao schedule`): scheduled flows — agent sessions that cao-server
starts on a cron schedule, optionally behind a gate script. Everything goes over cao-server's
HTTP API; `add FILE` sends the file's absolute path, which the server reads.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from ...flows.records import MISSED_RUN_TEXT
from .common import client, json_option, print_fields, print_json, print_table

RUN_WAIT_MARGIN_S = 120.0  # beyond the flow's own timeout: the agent's start and the gate


def flow_path(name: str, suffix: str = "") -> str:
    return f"/flows/{quote(name, safe='')}{suffix}"


def _when(value: str | None) -> str | None:
    """An ISO time as `YYYY-MM-DD HH:MM` (it is already in the flow's zone)."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return value


def _zone(flow: dict[str, Any]) -> str:
    return flow["timezone"] + (" (server)" if flow.get("timezone_source") == "server" else "")


@click.command("add")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def add(file: Path, as_json: bool) -> None:
    """Add the flow in FILE (a .flow.md file), or replace the flow of its name; it is enabled."""
    with client() as api:
        flow = api.post("/flows", json={"path": str(file.expanduser().resolve())})
    if as_json:
        print_json(flow)
        return
    click.echo(f"Added flow {flow['name']}: next run {_when(flow['next_run'])} ({_zone(flow)}).")


@click.command("list")
@json_option
def list_flows(as_json: bool) -> None:
    """List the flows, the next due first."""
    with client() as api:
        flows = api.get("/flows")
    if as_json:
        print_json(flows)
        return
    rows = [
        {
            **f,
            "zone": _zone(f),
            "last": _when(f["last_run"]),
            "next": "error: " + f["error"] if f.get("error") else _when(f["next_run"]) if f["enabled"] else "disabled",
            "on": "yes" if f["enabled"] else "no",
        }
        for f in flows
    ]
    print_table(
        rows,
        [
            ("name", "NAME"),
            ("schedule", "SCHEDULE"),
            ("zone", "TIME ZONE"),
            ("agent_profile", "AGENT"),
            ("provider", "PROVIDER"),
            ("last", "LAST RUN"),
            ("on", "ENABLED"),
            ("next", "NEXT RUN"),
        ],
        empty="No flows.",
    )
    click.echo(f"Missed runs: {MISSED_RUN_TEXT}.")


@click.command("get")
@click.argument("name")
@json_option
def get(name: str, as_json: bool) -> None:
    """Show flow NAME and its last run."""
    with client() as api:
        flow = api.get(flow_path(name))
        runs = api.get(flow_path(name, "/runs"), params={"limit": 1})
    if as_json:
        print_json({**flow, "last_run_record": runs[0] if runs else None})
        return
    print_fields(
        [
            ("Name", flow["name"]),
            ("File", flow["file_path"]),
            ("Schedule", flow["schedule"]),
            ("Time zone", _zone(flow)),
            ("Agent", flow["agent_profile"]),
            ("Provider", flow["provider"] or "(the profile's, else the server's default)"),
            ("Host", flow.get("host") or "(the placement policy)"),
            ("Gate script", flow["script"]),
            ("Enabled", "yes" if flow["enabled"] else "no"),
            ("Last run", _when(flow["last_run"])),
            ("Next run", _when(flow["next_run"])),
            ("Session", flow["session_name"]),
            ("Missed runs", "run once at start-up"),
            ("Error", flow.get("error")),
        ]
    )
    if runs:
        run = runs[0]
        click.echo(f"\nLast run {run['id']} ({run['trigger']}): {run['state']}" + _why(run))
    click.echo("\n" + flow["prompt_template"])


@click.command("enable")
@click.argument("name")
@json_option
def enable(name: str, as_json: bool) -> None:
    """Enable flow NAME: its due times from now on run."""
    _switch(name, "enable", as_json)


@click.command("disable")
@click.argument("name")
@json_option
def disable(name: str, as_json: bool) -> None:
    """Disable flow NAME: it stays, but runs only when asked (`cao flow run`)."""
    _switch(name, "disable", as_json)


def _switch(name: str, action: str, as_json: bool) -> None:
    with client() as api:
        result = api.post(flow_path(name, f"/{action}"))
        flow = api.get(flow_path(name))
    if as_json:
        print_json({**result, "flow": flow})
    elif flow["enabled"]:
        click.echo(f"Enabled flow {name}: next run {_when(flow['next_run'])} ({_zone(flow)}).")
    else:
        click.echo(f"Disabled flow {name}.")


@click.command("remove")
@click.argument("name")
@json_option
def remove(name: str, as_json: bool) -> None:
    """Remove flow NAME and its runs (its file stays)."""
    with client() as api:
        result = api.delete(flow_path(name))
    if as_json:
        print_json(result)
    else:
        click.echo(f"Removed flow {name}.")


@click.command("run")
@click.argument("name")
@click.option("--wait", is_flag=True, help="Wait for the agent's reply and print it.")
@json_option
def run(name: str, wait: bool, as_json: bool) -> None:
    """Run flow NAME now (its gate first, if it has one); its schedule is unchanged.

    Exit 1 when the run failed."""
    with client() as api:
        timeout = None
        if wait:
            timeout = float(api.get(flow_path(name))["timeout"]) + RUN_WAIT_MARGIN_S
        answer = api.post(flow_path(name, "/run"), params={"wait": "true" if wait else None}, timeout=timeout)
    run = answer["run"]
    if as_json:
        print_json(answer)
    elif run["state"] == "skipped":
        label = "skipped (execute=false)" if run["execute"] is False else "skipped"
        click.echo(f"Flow {name} run {run['id']}: {label}" + _why(run))
    elif run["state"] in ("failed", "interrupted"):
        click.echo(f"Flow {name} run {run['id']}: {run['state']}" + _why(run), err=True)
    elif run["state"] == "completed":
        click.echo(f"Flow {name} run {run['id']} executed successfully; the agent replied:\n{run['reply']}")
    else:
        click.echo(
            f"Flow {name} run {run['id']} executed successfully: the agent works in session "
            f"{run['session_name']} (`cao flow runs {name}` shows its reply when it is done)."
        )
    if run["state"] in ("failed", "interrupted"):
        click.get_current_context().exit(1)


@click.command("runs")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 200), default=20, show_default=True)
@json_option
def runs(name: str, limit: int, as_json: bool) -> None:
    """The runs of flow NAME, newest first."""
    with client() as api:
        records = api.get(flow_path(name, "/runs"), params={"limit": limit})
    if as_json:
        print_json(records)
        return
    rows = [{**r, "started": r["started_at"], "detail": r["reason"] or _one_line(r["reply"])} for r in records]
    print_table(
        rows,
        [
            ("id", "RUN"),
            ("trigger", "TRIGGER"),
            ("started", "STARTED (UTC)"),
            ("state", "STATE"),
            ("terminal_id", "TERMINAL"),
            ("detail", "REASON / REPLY"),
        ],
        empty=f"Flow {name} has not run yet.",
    )


def _why(run: dict[str, Any]) -> str:
    return f": {run['reason']}" if run.get("reason") else ""


def _one_line(text: str | None, width: int = 80) -> str | None:
    if not text:
        return None
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


FLOW_COMMANDS = [add, list_flows, get, enable, disable, remove, run, runs]


@click.group(commands=FLOW_COMMANDS)
def flow() -> None:
    """Scheduled flows: agent sessions cao-server starts on a cron schedule (alias: `cao schedule`).

    A flow file is Markdown with YAML frontmatter (name, schedule, agent_profile; optional
    provider, timezone, script, engine, host, timeout); its body is the prompt, whose [[var]]
    placeholders the gate script's output fills. Times are in the flow's `timezone`, else the
    server's local zone.
    """


@click.group(commands=FLOW_COMMANDS)
def schedule() -> None:
    """Scheduled flows (the same commands as `cao flow`)."""
