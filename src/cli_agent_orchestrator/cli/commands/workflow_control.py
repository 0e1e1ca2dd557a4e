"""`cao workflow run | resume | cancel`: the commands that start, resume or stop a run.
`--input` text is typed by the workflow's declaration; Ctrl-C while following or waiting
detaches and never cancels a run.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import click

from ...workflows.inputs import coerce_cli_value
from ..client import ApiError, ServerUnavailable
from .common import json_option, print_json
from .workflow_output import (
    BLOCKING_TIMEOUT,
    WorkflowClient,
    event_line,
    follow_events,
    print_result,
    run_path,
    wf_client,
)
from .workflow_specs import SPEC_SUFFIXES, spec_path


def _exit(code: int) -> None:
    click.get_current_context().exit(code)


def _detached(run_id: str) -> None:
    click.echo(f"\ndetached; the run goes on: cao workflow status {run_id}")
    _exit(0)


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
        return api.get(spec_path(name)).get("inputs") or {}
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


@click.command("run")
@click.argument("name_or_path")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="KEY=VALUE",
    help="An input of the workflow (repeatable); typed by its declaration.",
)
@click.option("--run-id", help="Choose the run id (1-64 of [A-Za-z0-9_-]).")
@click.option("--detach", is_flag=True, help="Start the run, print its id and return.")
@click.option("--wait", "block", is_flag=True, help="Block until the run ends and print its result.")
@json_option
def run(
    name_or_path: str, inputs: tuple[str, ...], run_id: str | None, detach: bool, block: bool, as_json: bool
) -> None:
    """Run workflow NAME_OR_PATH and follow its events until it ends.

    Also when stdout is not a terminal, it follows until the run ends. Exit 0 iff the run
    completed (or when only started: --detach, --json).
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
            body: dict[str, Any] = {"name_or_path": name_or_path, "inputs": values, "run_id": run_id}
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
        if as_json:
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


@click.command("resume")
@click.argument("run_id")
@click.option(
    "--decide",
    "decide",
    multiple=True,
    metavar="STEP=rerun|skip",
    help="Decide a halted step (repeatable): rerun executes it once, skip accepts its stored result.",
)
@json_option
def resume(run_id: str, decide: tuple[str, ...], as_json: bool) -> None:
    """Resume run RUN_ID and wait for it to end.

    The run is re-driven from the top: finished steps replay, halted steps need a
    --decide. Exit 0 iff it completed.
    """
    decisions = _parse_decisions(decide)
    with wf_client() as api:
        try:
            data = api.post(run_path(run_id, "/resume"), json={"decisions": decisions}, timeout=BLOCKING_TIMEOUT)
        except KeyboardInterrupt:
            _detached(run_id)
    _print_outcome(data, as_json)


@click.command("cancel")
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
