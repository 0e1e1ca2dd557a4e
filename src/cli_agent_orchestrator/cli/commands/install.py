"""`cao install SOURCE`: a profile (NAME, local FILE or allow-listed URL) into the agent
store, plus the file its provider needs (for Kiro, the agent JSON with cao's tools).

It runs here, on the local files, like `cao env` and `cao profile validate`: the CLI and
cao-server share the cao home, it works without a server, and no local path ever travels
over HTTP (the server's POST /agents/profiles/install takes names and URLs only).
"""

from __future__ import annotations

import click

from ...errors import CaoError
from ...profiles.install import InstallConfig, install_profile
from ...providers.common import mcp_server_argv
from ...settings import Settings
from .common import env_pairs, json_option, print_fields, print_json


@click.command()
@click.argument("source")
@click.option("--provider", default=None, help="Install for this provider (default: the profile's, else the default).")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE", help="Set a ${VAR} value in the cao .env (repeat).")
@json_option
def install(source: str, provider: str | None, env: tuple[str, ...], as_json: bool) -> None:
    """Install agent profile SOURCE: a profile NAME, a local .md FILE, or an https URL whose
    host is in CAO_PROFILE_ALLOWED_HOSTS (default github.com, raw.githubusercontent.com).

    Writes <home>/agent-store/NAME.md and, for kiro_cli, the Kiro agent
    $CAO_AGENTS_DIR/NAME.json (default ~/.kiro/agents) with the profile's tools and
    cao-mcp-server. Other providers are configured per terminal at launch and need no file.
    A URL's whole download must end within CAO_PROFILE_FETCH_TIMEOUT seconds (default 30).
    """
    settings = Settings.from_env()
    config = InstallConfig.from_settings(settings, mcp_server_argv())
    try:
        result = install_profile(source, config, provider=provider, env_vars=env_pairs(env), allow_files=True)
    except CaoError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        print_json(result.as_dict())
        return
    click.echo(f"Installed profile {result.agent_name!r} ({result.source_kind}) for {result.provider}")
    print_fields(
        [
            ("Context file", result.context_file),
            ("Agent file", result.agent_file or "none needed: configured per terminal at launch"),
            ("Not set in .env", result.unresolved_vars),
        ]
    )
    click.echo(f"Launch it with: cao launch --agents {result.agent_name} --provider {result.provider}")
