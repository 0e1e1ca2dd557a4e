"""`cao ui`: open the web UI. Prints a one-time login link (and opens it where there is a
graphical browser): the link's ticket works once, within two minutes, and the page then
keeps a cookie session. The server's token never reaches the browser."""

from __future__ import annotations

import os
import sys
import webbrowser

import click

from .common import client, json_option, print_json


def _graphical_browser() -> bool:
    """Whether opening a browser can work here: a desktop session, macOS, Windows, or a
    BROWSER the user chose. Elsewhere (ssh, CI) Python would pick a text browser in this
    terminal, which is not what anyone wants."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


@click.command()
@click.option("--no-browser", is_flag=True, help="Only print the link; do not open a browser.")
@json_option
def ui(no_browser: bool, as_json: bool) -> None:
    """Print (and open) a one-time login link to the web UI."""
    with client() as api:
        ticket = api.post("/ui/tickets")
        url = api.base_url.rstrip("/") + ticket["path"]
    opened = False
    if not no_browser and not as_json and _graphical_browser():
        try:
            opened = webbrowser.open(url, new=2)
        except webbrowser.Error:
            opened = False
    if as_json:
        print_json({"url": url, "expires_in": ticket["expires_in"], "opened": opened})
        return
    click.echo(f"Web UI login link (works once, for {int(ticket['expires_in'])} s):")
    click.echo(f"  {url}")
    if opened:
        click.echo("Opened in your browser.")
