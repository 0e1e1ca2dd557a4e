"""`cao info`: where things are, whether the server is up, and which agent pane we are in."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ...settings import Settings
from ..client import ServerUnavailable
from .attach import attach_text
from .common import client, json_option, print_fields, print_json, terminal_path


def _collect() -> dict[str, Any]:
    settings = Settings.from_env()
    info: dict[str, Any] = {
        "server_url": settings.base_url,
        "server": None,
        "server_error": None,
        "cao_home": str(settings.home_dir),
        "db_path": str(settings.db_path),
        "tmux_socket": settings.tmux_socket_name,
        "terminal_id": os.environ.get("CAO_TERMINAL_ID"),
        "terminal": None,
    }
    with client() as api:
        try:
            health = api.get("/health")
        except ServerUnavailable as exc:
            # info is a diagnostic: a stopped server is a finding, not a failure.
            info["server_error"] = exc.message
            return info
        info["server"] = health
        # The server's own view wins: it may run with another home than this shell.
        info["tmux_socket"] = health.get("tmux_socket", info["tmux_socket"])
        if health.get("home_dir"):
            info["cao_home"] = health["home_dir"]
            info["db_path"] = str(replace(settings, home_dir=Path(health["home_dir"])).db_path)
        if info["terminal_id"]:
            try:
                info["terminal"] = api.get(terminal_path(info["terminal_id"]))
            except click.ClickException as exc:
                info["server_error"] = f"current terminal: {exc.message}"
    return info


def _supervised(health: dict[str, Any] | None) -> str:
    """Whether something starts the server again if it dies (cli/supervise.py)."""
    if not health:
        return "-"
    supervisor = health.get("supervisor")
    if not supervisor:
        return "no (run `cao-server --supervise`, or under systemd, to have it started again if it dies)"
    if supervisor.get("kind") == "watchdog":
        return f"yes, by its watchdog (pid {supervisor.get('pid')})"
    return f"yes, by {supervisor.get('kind')}"


def _attach_command(info: dict[str, Any]) -> str:
    term = info["terminal"]
    if term:
        return attach_text(info["tmux_socket"], term["session_name"], term["name"])
    # SESSION is a placeholder: `cao session list` names them.
    return attach_text(info["tmux_socket"], "SESSION").replace("=SESSION", "SESSION")


@click.command()
@json_option
def info(as_json: bool) -> None:
    """Show the server URL and health, the cao home, the current agent terminal and how to attach."""
    data = _collect()
    data["attach"] = _attach_command(data)
    if as_json:
        print_json(data)
        return
    health = data["server"]
    status = (
        f"{health.get('status', '?')} (version {health.get('version', '?')}, "
        f"backend {health.get('terminal_backend', '?')})"
        if health
        else data["server_error"]
    )
    pairs: list[tuple[str, Any]] = [
        ("Server", data["server_url"]),
        ("Health", status),
        ("Supervised", _supervised(health)),
        ("cao home", data["cao_home"]),
        ("Database", data["db_path"]),
        ("tmux socket", data["tmux_socket"]),
    ]
    term = data["terminal"]
    if term:
        pairs += [
            ("Terminal", f"{term['id']} ({term['agent_profile']}, {term['provider']}, {term['status']})"),
            ("Session", term["session_name"]),
        ]
    elif data["terminal_id"]:
        pairs.append(("Terminal", f"{data['terminal_id']} ({data['server_error']})"))
    else:
        pairs.append(("Terminal", "(not inside an agent pane)"))
    attach_hint = "" if term else "  (or: cao attach SESSION|TERMINAL)"
    pairs.append(("Attach", data["attach"] + attach_hint))
    print_fields(pairs)
