"""`<home>/settings.json`: settings a user edits by hand, read at each use (no restart).

Keys: `extra_profile_dirs` (directories searched for agent profiles after the agent store
and before the built-ins), `roles` (user-defined roles: `{name: [tool, …]}`) and `plugins`
(which plugins run and their settings; read once, at server start: see plugins/manager.py). A broken
file is an error that names the file, never a silent fallback to defaults.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InvalidInput

SETTINGS_FILE_NAME = "settings.json"


def settings_path(home: Path) -> Path:
    return home / SETTINGS_FILE_NAME


def _read(home: Path) -> dict:
    path = settings_path(home)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidInput(f"settings file {path}: cannot read it as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"settings file {path}: must be a JSON object")
    return data


def extra_profile_dirs(home: Path) -> list[Path]:
    """`extra_profile_dirs` in order; `~` is expanded and a relative path is under the home."""
    raw = _read(home).get("extra_profile_dirs", [])
    if not isinstance(raw, list) or not all(isinstance(item, str) and item for item in raw):
        raise InvalidInput(f"settings file {settings_path(home)}: extra_profile_dirs must be a list of paths")
    return [home / Path(item).expanduser() for item in raw]


def user_roles(home: Path) -> dict[str, list[str]]:
    """`roles`: `{name: [tool, …]}`, user-defined roles (checked against the vocabulary by
    `profiles/roles.py`); a role named like a built-in one replaces it."""
    raw = _read(home).get("roles", {})
    if not isinstance(raw, dict) or not all(
        isinstance(name, str) and name and isinstance(tools, list) and all(isinstance(t, str) for t in tools)
        for name, tools in raw.items()
    ):
        raise InvalidInput(f"settings file {settings_path(home)}: roles must map a role name to a list of tools")
    return raw


def plugin_settings(home: Path) -> dict:
    """`plugins`: `{"enabled": [name, …], "modules": {name: "module[:attr]"}, name: {…}}`."""
    raw = _read(home).get("plugins", {})
    if not isinstance(raw, dict):
        raise InvalidInput(f"settings file {settings_path(home)}: plugins must be a JSON object")
    return raw
