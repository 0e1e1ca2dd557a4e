"""`cao workflow ...`: validate, list and run workflow specs and inspect their runs.

Everything goes over cao-server's HTTP API; the specs live in the server's workflow
directory (`<cao home>/workflows/`). Ctrl-C while following or waiting detaches and
never cancels a run — `cao workflow cancel` does that.
"""
from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from ...workflows.inputs import coerce_cli_value
from ..client import ApiError, ServerUnavailable
from .common import json_option, print_json, print_table
from .workflow_output import (BLOCKING_TIMEOUT, WorkflowClient, event_line, finding_text, follow_events,
                              print_result, print_spec, print_status, run_path, state_text,
                              wf_client)

RUN_STATES = ("running", "completed", "failed", "cancelled")
WAIT_SLICE = 60.0  # one server long-poll
SPEC_SUFFIXES = {".py": "script", ".yaml": "yaml", ".yml": "yaml"}
ROUTE_NAMES = ("runs", "validate")


def _exit(code: int) -> None:
    click.get_current_context().exit(code)


def _detached(run_id: str) -> None:
    click.echo(f"\ndetached; the run goes on: cao workflow status {run_id}")
    _exit(0)


def _spec_path(name: str) -> str:
    if name in ROUTE_NAMES:  # the server matches /workflows/runs and /validate first
        raise click.ClickException(f"a workflow named {name!r} cannot be addressed by name over the API "
                                   f"(/workflows/{name} is another route); rename its file")
    return f"/workflows/{quote(name, safe='')}"


@click.group()
def workflow() -> None:
    """Workflows: scripts (.py) and YAML specs in cao-server's workflow directory, and their runs."""


# --- specs ----------------------------------------------------------------------------------
@workflow.command("validate")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@json_option
def validate(file: Path, as_json: bool) -> None:
    """Check a workflow FILE without running it.

    FILE is a .py script or a .yaml/.yml spec, anywhere on disk. Exit 0 when it is valid.
    """
    tier = SPEC_SUFFIXES.get(file.suffix.lower())
    if tier is None:
        raise click.ClickException(f"{file.name}: a workflow is a .py script or a .yaml/.yml spec")
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {file}: {exc}") from None
    with wf_client() as api:
        result = api.post("/workflows/validate", json={"source": source, "tier": tier})
    passed = result.get("status") in ("pass", "pass_reserved")
    if as_json:
        print_json(result)
    else:
        click.echo("valid" if passed else "invalid")
        for error in result.get("errors") or []:
            click.echo(f"  {error}")
        for note in result.get("reserved_notes") or []:
            click.echo(f"  note: {note}")
        for finding in result.get("findings") or []:
            if finding.get("severity") == "warning":
                click.echo(f"  warning: {finding_text(finding)}")
    _exit(0 if passed else 1)


@workflow.command("list")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Accepted for compatibility; must be the server's workflow directory.")
@json_option
def list_specs(directory: Path | None, as_json: bool) -> None:
    """List the workflows in the server's workflow directory."""
    with wf_client() as api:
        if directory is not None:
            spec_dir = Path(api.get("/health")["home_dir"]) / "workflows"
            if directory.expanduser().resolve() != spec_dir.resolve():
                raise click.ClickException(f"specs live in the server's workflow directory {spec_dir}, "
                                           f"not {directory}; put the files there")
        specs = api.get("/workflows")
    if as_json:
        print_json(specs)
        return
    print_table(specs, [("name", "NAME"), ("tier", "TIER"), ("mode", "MODE"), ("step_count", "STEPS"),
                        ("description", "DESCRIPTION")], empty="No workflows.")


@workflow.command("get")
@click.argument("name")
@json_option
def get_spec(name: str, as_json: bool) -> None:
    """Show workflow NAME: tier, path, inputs, findings and its source."""
    with wf_client() as api:
        spec = api.get(_spec_path(name))
    if as_json:
        print_json(spec)
    else:
        print_spec(spec)


@workflow.command("delete")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete_spec(name: str, yes: bool) -> None:
    """Delete workflow NAME (its file in the workflow directory)."""
    if not yes:
        click.confirm(f"Delete workflow {name}?", abort=True)
    with wf_client() as api:
        result = api.delete(_spec_path(name))
    click.echo(f"Deleted workflow {result.get('name', name)}.")


# --- running --------------------------------------------------------------------------------
def _parse_inputs(pairs: tuple[str, ...]) -> dict[str, str]:
    raw: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE", param_hint="--input")
        if key in raw:
            raise click.BadParameter(f"input {key!r} is given twice", param_hint="--input")
        raw[key] = value
    return raw


def _declared_types(api: WorkflowClient, name_or_path: str) -> dict[str, Any]:
    """The workflow's declared input types, to coerce `--input` text; {} if unknown."""
    try:
        name = name_or_path
        if "/" in name_or_path or Path(name_or_path).suffix in SPEC_SUFFIXES:
            file_name = Path(name_or_path).name
            matches = [s["name"] for s in api.get("/workflows") if Path(s["source_path"]).name == file_name]
            if len(matches) != 1:
                return {}
            name = matches[0]
        return api.get(_spec_path(name)).get("inputs") or {}
    except click.ClickException:
        return {}  # the run request reports what is wrong with the workflow


def _input_value(raw: str, declared_type: str | None) -> Any:
    """`--input` text typed by its declaration. A relative `path` means relative to where
    the user typed the command, not to wherever cao-server happens to run."""
    if declared_type == "path" and raw and not Path(raw).expanduser().is_absolute():
        return str(Path.cwd() / raw)
    return coerce_cli_value(raw, declared_type)


def _print_outcome(result: dict, as_json: bool) -> None:
    """A finished run (blocking run or resume); exit 0 iff it completed."""
    if as_json:
        print_json(result)
    else:
        print_result(result)
    _exit(0 if result.get("state") == "completed" else 1)


@workflow.command("run")
@click.argument("name_or_path")
@click.option("--input", "inputs", multiple=True, metavar="KEY=VALUE",
              help="An input of the workflow (repeatable); typed by its declaration.")
@click.option("--run-id", help="Choose the run id (1-64 of [A-Za-z0-9_-]).")
@click.option("--detach", is_flag=True, help="Start the run, print its id and return.")
@click.option("--wait", "block", is_flag=True, help="Block until the run ends and print its result.")
@json_option
def run(name_or_path: str, inputs: tuple[str, ...], run_id: str | None, detach: bool, block: bool,
        as_json: bool) -> None:
    """Run workflow NAME_OR_PATH and follow its events until it ends.

    Exit 0 iff the run completed (or when only started: --detach, --json, not a terminal).
    Ctrl-C stops following; the run goes on.
    """
    if detach and block:
        raise click.UsageError("--detach and --wait exclude each other")
    raw = _parse_inputs(inputs)
    with wf_client() as api:
        declared = _declared_types(api, name_or_path) if raw else {}
        values = {k: _input_value(v, (declared.get(k) or {}).get("type")) for k, v in raw.items()}
        if block:
            # Known up front, so that Ctrl-C can still say which run goes on.
            run_id = run_id or "run-" + secrets.token_hex(8)
            body = {"name_or_path": name_or_path, "inputs": values, "run_id": run_id}
            try:
                result = api.post("/workflows/runs", json=body, timeout=BLOCKING_TIMEOUT)
            except KeyboardInterrupt:
                _detached(run_id)
            _print_outcome(result, as_json)
            return
        body = {"name_or_path": name_or_path, "inputs": values, "run_id": run_id}
        started = api.post("/workflows/runs:submit", json=body)
        run_id = started["run_id"]
        if detach:
            if as_json:
                print_json(started)
            else:
                click.echo(f"{run_id} {started['state']}")
            return
        if as_json or not sys.stdout.isatty():
            click.echo(json.dumps({"run_id": run_id, "state": started["state"]}))
            return
        click.echo(f"Started {run_id}; following its events (Ctrl-C detaches).")
        _follow_to_end(api, run_id)


def _follow_to_end(api: WorkflowClient, run_id: str) -> None:
    lost = f"lost contact with cao-server; check with: cao workflow status {run_id}"
    try:
        outcome = follow_events(api, run_id, 0, lambda row: click.echo(event_line(row)))
        if outcome == "lost":
            click.echo(lost, err=True)
            _exit(0)
        result = api.get(run_path(run_id, "/result"))
    except KeyboardInterrupt:
        _detached(run_id)
    except ServerUnavailable:
        click.echo(lost, err=True)
        _exit(0)
    click.echo()
    print_result(result, short=True)
    if result["state"] != "completed":
        click.echo(f"details: cao workflow result {run_id}")
    _exit(0 if result["state"] == "completed" else 1)


# --- runs -----------------------------------------------------------------------------------
@workflow.command("status")
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


@workflow.command("runs")
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
    print_table(rows, [("run_id", "RUN_ID"), ("workflow_name", "WORKFLOW"), ("tier", "TIER"),
                       ("state", "STATE"), ("kind", "KIND"), ("started_at", "STARTED"),
                       ("finished_at", "FINISHED")], empty="No runs.")


@workflow.command("wait")
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
    _exit(0 if data["state"] == "completed" else 1)


@workflow.command("result")
@click.argument("run_id")
@json_option
def result(run_id: str, as_json: bool) -> None:
    """Show the result of run RUN_ID (and why it failed)."""
    with wf_client() as api:
        data = api.get(run_path(run_id, "/result"))
    if as_json:
        print_json(data)
    else:
        print_result(data)


@workflow.command("events")
@click.argument("run_id")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="Stream new events until the run's drive ends, or print one batch.")
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


def _parse_decisions(pairs: tuple[str, ...]) -> dict[str, str]:
    decisions: dict[str, str] = {}
    for pair in pairs:
        step, sep, value = pair.partition("=")
        if not sep or not step or value not in ("rerun", "skip"):
            raise click.BadParameter(f"{pair!r}: expected STEP=rerun or STEP=skip", param_hint="--decide")
        if step in decisions:
            raise click.BadParameter(f"step {step!r} is decided twice", param_hint="--decide")
        decisions[step] = value
    return decisions


@workflow.command("resume")
@click.argument("run_id")
@click.option("--decide", "decide", multiple=True, metavar="STEP=rerun|skip",
              help="Decide a halted step (repeatable): rerun executes it once, skip accepts its stored result.")
@json_option
def resume(run_id: str, decide: tuple[str, ...], as_json: bool) -> None:
    """Resume run RUN_ID and wait for it to end.

    The run is re-driven from the top: finished steps replay, halted steps need a
    --decide. Exit 0 iff it completed.
    """
    decisions = _parse_decisions(decide)
    with wf_client() as api:
        try:
            data = api.post(run_path(run_id, "/resume"), json={"decisions": decisions},
                            timeout=BLOCKING_TIMEOUT)
        except KeyboardInterrupt:
            _detached(run_id)
    _print_outcome(data, as_json)


@workflow.command("cancel")
@click.argument("run_id")
def cancel(run_id: str) -> None:
    """Cancel run RUN_ID (stops its script or YAML drive)."""
    with wf_client() as api:
        try:
            api.post(run_path(run_id, "/cancel"))
        except ApiError as exc:
            if exc.status_code == 404:
                raise click.ClickException(f"unknown run {run_id!r}") from None
            if exc.status_code == 409:
                raise click.ClickException(f"run is already finished ({run_id})") from None
            raise
    click.echo(f"Cancelled {run_id}.")

