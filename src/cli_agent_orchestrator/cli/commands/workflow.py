"""`cao workflow ...`: validate, list and run workflow specs and inspect their runs.

Everything goes over cao-server's HTTP API; the specs live in the server's workflow
directory (`<cao home>/workflows/`). Ctrl-C while following or waiting detaches and
never cancels a run — `cao workflow cancel` does that. This module is the command group;
the commands live in workflow_specs (spec files), workflow_control (run, resume, cancel)
and workflow_inspect (reading runs).
"""

from __future__ import annotations

import click

from .workflow_control import cancel, resume, run
from .workflow_inspect import events, result, runs, status, wait
from .workflow_specs import delete_spec, get_spec, list_specs, validate


# The whole `cao workflow` surface in one place; click lists it sorted by name.
@click.group(
    commands=[validate, list_specs, get_spec, delete_spec, run, resume, cancel, status, runs, wait, result, events]
)
def workflow() -> None:
    """Workflows: scripts (.py) and YAML specs in cao-server's workflow directory, and their runs."""
