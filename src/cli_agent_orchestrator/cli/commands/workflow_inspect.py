"""`cao workflow status | runs | wait | result | events`: the commands that read runs and
never change one. Ctrl-C while following or waiting only stops this command.
"""

from __future__ import annotations

import json
import time

import click

from .common import json_option, print_json, print_table
from .workflow_output import event_line, follow_events, print_result, print_status, run_path, state_text, wf_client

RUN_STATES = ("running", "completed", "failed", "cancelled")
WAIT_SLICE = 60.0  # one server long-poll


@click.command("status")
@click.argument("run_id", required=False)
@json_option
def status(run_id: str | None, as_json: bool) -> None:
    """Show run RUN_ID (default: the newest run) and its steps."""
    with wf_client() as api:
        if run_id is None:
            newest = api.get("/workflows/runs", params={"limit": 1})
            if not newest:
                if as_json:
                    print_json(None)
                else:
                    click.echo("no runs found")
                return
            run_id = newest[0]["run_id"]
        data = api.get(run_path(run_id))
    if as_json:
        print_json(data)
    else:
        print_status(data)


@click.command("runs")
@click.option("--state", type=click.Choice(RUN_STATES), help="Only runs in this state.")
@click.option("--limit", type=click.IntRange(1, 500), help="At most this many (default 50), newest first.")
@json_option
def runs(state: str | None, limit: int | None, as_json: bool) -> None:
    """List workflow runs, newest first."""
    with wf_client() as api:
        rows = api.get("/workflows/runs", params={"state": state, "limit": limit})
    if as_json:
        print_json(rows)
        return
    print_table(
        rows,
        [
            ("run_id", "RUN_ID"),
            ("workflow_name", "WORKFLOW"),
            ("tier", "TIER"),
            ("state", "STATE"),
            ("kind", "KIND"),
            ("started_at", "STARTED"),
            ("finished_at", "FINISHED"),
        ],
        empty="No runs.",
    )


@click.command("wait")
@click.argument("run_id")
@click.option("--timeout", type=click.FloatRange(min=0), help="Give up after this many seconds (default: no limit).")
@json_option
def wait(run_id: str, timeout: float | None, as_json: bool) -> None:
    """Wait until run RUN_ID ends.

    Exit 0 iff it completed; 1 otherwise, also when --timeout runs out.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    path = run_path(run_id, "/wait")
    with wf_client() as api:
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
            data = api.get(path, params={"timeout": round(left, 3)}, timeout=left + 30)
            if data["finished"] or (deadline is not None and time.monotonic() >= deadline):
                break
    if as_json:
        print_json(data)
    elif data["finished"]:
        click.echo(f"{run_id} {state_text(data)}")
    else:
        click.echo(f"{run_id} still {data['state']} after {timeout:g}s")
    click.get_current_context().exit(0 if data["state"] == "completed" else 1)


@click.command("result")
@click.argument("run_id")
@json_option
def result(run_id: str, as_json: bool) -> None:
    """Show the result of run RUN_ID (and why it failed).

    Exit 1 when the run failed or was cancelled, else 0.
    """
    with wf_client() as api:
        data = api.get(run_path(run_id, "/result"))
    if as_json:
        print_json(data)
    else:
        print_result(data)
    click.get_current_context().exit(1 if data.get("state") in ("failed", "cancelled") else 0)


@click.command("events")
@click.argument("run_id")
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Stream new events until the run's drive ends, or print one batch.",
)
@click.option("--after-seq", type=click.IntRange(min=0), default=0, help="Only events after this sequence number.")
@json_option
def events(run_id: str, follow: bool, after_seq: int, as_json: bool) -> None:
    """Show the event timeline of run RUN_ID."""

    def show(row: dict) -> None:
        click.echo(json.dumps(row, ensure_ascii=False) if as_json else event_line(row))

    with wf_client() as api:
        if not follow:
            page = api.get(run_path(run_id, "/events"), params={"after_seq": after_seq})
            if page.get("run_absent"):
                raise click.ClickException(f"unknown run {run_id!r}")
            for row in page["events"]:
                show(row)
            return
        try:
            outcome = follow_events(api, run_id, after_seq, show)
        except KeyboardInterrupt:
            return
    if outcome == "absent":
        raise click.ClickException(f"unknown run {run_id!r}")
    if outcome == "lost":
        raise click.ClickException(f"lost contact with cao-server; check with: cao workflow status {run_id}")
