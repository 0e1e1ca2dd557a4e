"""`cao workflow validate | list | get | delete`: the spec files in cao-server's workflow
directory, and how a spec name is addressed over the API.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import click

from .common import json_option, print_json, print_table
from .workflow_output import WorkflowClient, finding_text, print_spec, wf_client

SPEC_SUFFIXES = {".py": "script", ".yaml": "yaml", ".yml": "yaml"}
ROUTE_NAMES = ("runs", "validate")


def spec_path(name: str) -> str:
    if name in ROUTE_NAMES:  # the server matches /workflows/runs and /validate first
        raise click.ClickException(
            f"a workflow named {name!r} cannot be addressed by name over the API "
            f"(/workflows/{name} is another route); rename its file"
        )
    return f"/workflows/{quote(name, safe='')}"


@click.command("validate")
@click.argument("name_or_file", metavar="NAME_OR_FILE")
@json_option
def validate(name_or_file: str, as_json: bool) -> None:
    """Check a workflow without running it: NAME_OR_FILE is what `cao workflow run` takes.

    A file on disk (a .py script or a .yaml/.yml spec), or the name (or file name) of a
    workflow in the server's workflow directory. Exit 0 when it is valid.
    """
    file = Path(name_or_file).expanduser()
    with wf_client() as api:
        if file.is_file() or "/" in name_or_file:
            tier, source = _read_spec_file(file)
        else:
            spec = api.get(spec_path(_spec_name(api, name_or_file)))
            tier, source = spec["tier"], spec["source"]
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
    click.get_current_context().exit(0 if passed else 1)


def _read_spec_file(file: Path) -> tuple[str, str]:
    tier = SPEC_SUFFIXES.get(file.suffix.lower())
    if tier is None:
        raise click.ClickException(f"{file.name}: a workflow is a .py script or a .yaml/.yml spec")
    try:
        return tier, file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {file}: {exc}") from None


def _spec_name(api: WorkflowClient, name: str) -> str:
    """The workflow's name; a file name (`loop.py`) names the spec of that file, as in `run`."""
    if Path(name).suffix.lower() not in SPEC_SUFFIXES:
        return name
    matches = [s["name"] for s in api.get("/workflows") if Path(s["source_path"]).name == name]
    if len(matches) != 1:
        raise click.ClickException(f"cannot read {name}: no such file, and no workflow with that file name")
    return matches[0]


@click.command("list")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Accepted for compatibility; must be the server's workflow directory.",
)
@json_option
def list_specs(directory: Path | None, as_json: bool) -> None:
    """List the workflows in the server's workflow directory."""
    with wf_client() as api:
        if directory is not None:
            spec_dir = Path(api.get("/health")["home_dir"]) / "workflows"
            if directory.expanduser().resolve() != spec_dir.resolve():
                raise click.ClickException(
                    f"specs live in the server's workflow directory {spec_dir}, not {directory}; put the files there"
                )
        specs = api.get("/workflows")
    if as_json:
        print_json(specs)
        return
    print_table(
        specs,
        [("name", "NAME"), ("tier", "TIER"), ("mode", "MODE"), ("step_count", "STEPS"), ("description", "DESCRIPTION")],
        empty="No workflows.",
    )


@click.command("get")
@click.argument("name")
@json_option
def get_spec(name: str, as_json: bool) -> None:
    """Show workflow NAME: tier, path, inputs, findings and its source."""
    with wf_client() as api:
        spec = api.get(spec_path(name))
    if as_json:
        print_json(spec)
    else:
        print_spec(spec)


@click.command("delete")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def delete_spec(name: str, yes: bool) -> None:
    """Delete workflow NAME (its file in the workflow directory)."""
    if not yes:
        click.confirm(f"Delete workflow {name}?", abort=True)
    with wf_client() as api:
        result = api.delete(spec_path(name))
    click.echo(f"Deleted workflow {result.get('name', name)}.")
