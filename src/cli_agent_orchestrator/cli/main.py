"""`cao`: the command-line client of cao-server.

The CLI talks to the server over HTTP only; it reads settings and profiles
locally for file work (`cao init`, `cao install`, `cao profile validate`, `cao env`)
but never touches the store, the services or tmux state directly.
"""

from __future__ import annotations

import click

from .. import __version__
from .commands.admin import init, mcp_server, ops_mcp_server, shutdown
from .commands.agent import agent
from .commands.attach import attach
from .commands.env import env
from .commands.flow import flow, schedule
from .commands.host import host
from .commands.info import info
from .commands.install import install
from .commands.launch import launch
from .commands.memory import memory
from .commands.profile import profile
from .commands.sessions import session
from .commands.skills import skills
from .commands.terminals import terminal
from .commands.ui import ui
from .commands.workflow import workflow


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="cao")
def cli() -> None:
    """Run coding-agent CLIs in tmux and orchestrate them (client of cao-server)."""


for command in (
    launch,
    ui,
    attach,
    info,
    session,
    terminal,
    agent,
    workflow,
    flow,
    schedule,
    host,
    shutdown,
    init,
    install,
    mcp_server,
    ops_mcp_server,
    profile,
    env,
    memory,
    skills,
):
    cli.add_command(command)


if __name__ == "__main__":
    cli()
