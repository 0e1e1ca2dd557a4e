"""`cao ui`: open the web UI. Prints a one-time login link (and opens it where there is a
graphical browser): the link's ticket works once, within two minutes, and the page then
keeps a cookie session. The server's token never reaches the browser.

The ticket never appears on a command line or in an environment, where every local user can
read it (/proc/*/cmdline): the browser is handed a file instead, 0600 in a 0700 directory of
the cao home, whose page sends it on to the link. That is also how Jupyter opens its browser.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import sys
import time
import webbrowser
from pathlib import Path

import click

from ...private_files import private_dir, write_private
from ...settings import Settings
from .common import client, json_option, print_json

# A redirect page older than this holds a ticket that has expired anyway (web/logins.py: 120 s).
STALE_AFTER_S = 300.0


def _graphical_browser() -> bool:
    """Whether opening a browser can work here: a desktop session, macOS, Windows, or a
    BROWSER the user chose. Elsewhere (ssh, CI) Python would pick a text browser in this
    terminal, which is not what anyone wants."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def redirect_page(directory: Path, url: str) -> Path:
    """A page (0600) that sends the browser on to `url`; its own name is random and secret-free."""
    private_dir(directory)
    now = time.time()
    for old in directory.glob("login-*.html"):
        try:
            if now - old.stat().st_mtime > STALE_AFTER_S:
                old.unlink()
        except OSError:
            pass
    page = directory / f"login-{secrets.token_hex(8)}.html"
    target = html.escape(url, quote=True)
    write_private(
        page,
        "<!doctype html><meta charset=utf-8><title>cao</title>"
        f'<meta http-equiv="refresh" content="0;url={target}">'
        f"<script>location.replace({json.dumps(url)})</script>"
        f'<a href="{target}">Open the cao web UI</a>\n',
    )
    return page


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
        page = redirect_page(Settings.from_env().tmp_dir / "ui-login", url)
        try:
            opened = webbrowser.open(page.as_uri(), new=2)
        except webbrowser.Error:
            opened = False
        if not opened:
            page.unlink(missing_ok=True)
    if as_json:
        print_json({"url": url, "expires_in": ticket["expires_in"], "opened": opened})
        return
    click.echo(f"Web UI login link (works once, for {int(ticket['expires_in'])} s):")
    click.echo(f"  {url}")
    if opened:
        click.echo("Opened in your browser.")
