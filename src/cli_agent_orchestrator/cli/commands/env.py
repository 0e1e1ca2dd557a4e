"""`cao env set|get|list|unset`: the `<home>/.env` values that profiles' `${VAR}` read.

These edit the local file directly (no server needed; it reads the file at each start of
an agent). Values are secrets: nothing prints one unless `get --show` asks for it.
"""

from __future__ import annotations

import sys

import click

from ...errors import CaoError
from ...profiles.env_file import env_path, read_env_values, set_env_value, unset_env_value
from ...settings import Settings
from .common import json_option, print_json


def _home():
    return Settings.from_env().home_dir


@click.group()
def env() -> None:
    """Manage the values profiles read as ${VAR} (<home>/.env, mode 0600)."""


@env.command("set")
@click.argument("name")
@click.argument("value", required=False)
def set_value(name: str, value: str | None) -> None:
    """Set NAME to VALUE. Without VALUE it is read from stdin (one line), or asked for
    without echo on a terminal, so that it stays out of the shell history."""
    if value is None:
        if sys.stdin.isatty():
            value = click.prompt(f"Value of {name}", hide_input=True, default="", show_default=False)
        else:
            value = sys.stdin.readline().rstrip("\r\n")
    home = _home()
    try:
        existed = set_env_value(home, name, value)
    except CaoError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{'Updated' if existed else 'Set'} {name} in {env_path(home)}")


@env.command("get")
@click.argument("name")
@click.option("--show", is_flag=True, help="Print the value itself (it is a secret, so not by default).")
@json_option
def get_value(name: str, show: bool, as_json: bool) -> None:
    """Say whether NAME is set (exit 1 if not); --show prints its value."""
    values = read_env_values(_home())
    present = name in values
    if as_json:
        print_json({"name": name, "set": present, **({"value": values[name]} if present and show else {})})
    elif present and show:
        click.echo(values[name])
    elif present:
        click.echo(f"{name} is set ({len(values[name])} characters); add --show to print it")
    else:
        click.echo(f"{name} is not set", err=True)
    if not present:
        raise click.exceptions.Exit(1)


@env.command("list")
@json_option
def list_names(as_json: bool) -> None:
    """The names that are set (never their values)."""
    names = sorted(read_env_values(_home()))
    if as_json:
        print_json(names)
    else:
        for name in names:
            click.echo(name)


@env.command("unset")
@click.argument("name")
def unset_value(name: str) -> None:
    """Remove NAME (every line that sets it); other lines are kept."""
    home = _home()
    try:
        removed = unset_env_value(home, name)
    except CaoError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Removed {name} from {env_path(home)}" if removed else f"{name} was not set")
