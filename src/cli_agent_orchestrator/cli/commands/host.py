"""`cao host ...`: the hosts agents may run on besides this machine — add one (its ssh
target, `[user@]host[:port]`), list them, check what one has and lacks, drain it, remove it.
Everything goes over cao-server's HTTP API; it is cao-server that connects with ssh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from .common import client, json_option, print_json, print_table

CHECK_WAIT_S = 90.0  # the server's own bound on a check is 30s; room for a busy server


def host_path(name: str, suffix: str = "") -> str:
    return f"/hosts/{quote(name, safe='')}{suffix}"


@click.command("add")
@click.argument("name")
@click.option("--ssh", "target", required=True, help="Where to connect: [user@]host[:port].")
@click.option(
    "--identity",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Private key file (default: what your ssh config and agent offer).",
)
@click.option("--max-agents", type=click.IntRange(1, 1000), help="At most this many agents there at once.")
@json_option
def add(name: str, target: str, identity: Path | None, max_agents: int | None, as_json: bool) -> None:
    """Register host NAME (1-32 of a-z, 0-9, -). Nothing connects yet: `cao host check NAME` does."""
    body: dict[str, Any] = {"name": name, "ssh": target, "max_agents": max_agents}
    if identity is not None:
        body["identity"] = str(identity.expanduser().resolve())
    with client() as api:
        host = api.post("/hosts", json=body)
    if as_json:
        print_json(host)
        return
    click.echo(f"Added host {host['name']} ({host['ssh']}). Next: cao host check {host['name']}")


@click.command("list")
@json_option
def list_hosts(as_json: bool) -> None:
    """List the hosts."""
    with client() as api:
        hosts = api.get("/hosts")
    if as_json:
        print_json(hosts)
        return
    for host in hosts:
        connection = host.get("connection") or {}
        host["link"] = connection.get("status", "?") + (f": {connection['reason']}" if connection.get("reason") else "")
    print_table(
        hosts,
        [
            ("name", "NAME"),
            ("ssh", "SSH"),
            ("state", "STATE"),
            ("agents", "AGENTS"),
            ("max_agents", "MAX AGENTS"),
            ("link", "CONNECTION"),
            ("identity", "IDENTITY"),
        ],
        empty="No hosts.",
    )


@click.command("check")
@click.argument("name")
@json_option
def check(name: str, as_json: bool) -> None:
    """Connect to host NAME and show what it has and what it lacks, with the commands that
    install what is missing. Exit 1 when cao cannot run agents there yet."""
    with client() as api:
        report = api.post(host_path(name, "/check"), timeout=CHECK_WAIT_S)
    if as_json:
        print_json(report)
    else:
        _print_report(report)
    if not report["ready"]:
        click.get_current_context().exit(1)


def _print_report(report: dict[str, Any]) -> None:
    rows = [
        {
            "name": item["name"] + (f" ({item['provider']})" if item.get("provider") else ""),
            "state": "ok" if item["ok"] else ("missing" if item["kind"] == "cli" else "NOT OK"),
            "detail": None if item["detail"] == "missing" else item["detail"],
        }
        for item in report["items"]
    ]
    click.echo(f"Host {report['host']} ({report['ssh']}):")
    print_table(rows, [("name", "ITEM"), ("state", "STATE"), ("detail", "DETAIL")], empty="Nothing to report.")
    fixes = [item for item in report["items"] if not item["ok"] and item.get("fix")]
    if fixes:
        click.echo("\nTo install what is missing on the host:")
        for item in fixes:
            click.echo(f"  {item['name']}: {item['fix']}")
    if report["ready"]:
        verdict = "ready: cao can run agents there."
    elif all(item["ok"] for item in report["items"] if item["kind"] != "cli"):
        verdict = "not ready yet: none of the agent CLIs cao runs is installed there."
    else:
        verdict = "not ready yet."
    click.echo(f"\nHost {report['host']} is {verdict}")


@click.command("remove")
@click.argument("name")
@json_option
def remove(name: str, as_json: bool) -> None:
    """Forget host NAME (and end cao's ssh connection to it)."""
    with client() as api:
        result = api.delete(host_path(name))
    if as_json:
        print_json(result)
    else:
        click.echo(f"Removed host {name}.")


@click.command("drain")
@click.argument("name")
@json_option
def drain(name: str, as_json: bool) -> None:
    """Send no new agents to host NAME; those there keep running."""
    with client() as api:
        host = api.post(host_path(name, "/drain"))
    if as_json:
        print_json(host)
    else:
        click.echo(f"Host {name} is draining: no new agents go there.")


@click.group(commands=[add, list_hosts, check, drain, remove])
def host() -> None:
    """The hosts agents may run on besides this machine, reached over ssh.

    cao-server connects with your own ssh config, agent and known_hosts, and never accepts
    a host key on its own: add a host's key to ~/.ssh/known_hosts first.
    """
