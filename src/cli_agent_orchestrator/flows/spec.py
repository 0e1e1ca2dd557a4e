"""A flow file: Markdown with YAML frontmatter; the body is the prompt.

Frontmatter: `name`, `schedule` (5-field cron) and `agent_profile` are required; `provider`,
`timezone` (IANA; default the server's local zone), `script` (a gate, relative to the flow
file), `engine` (Kiro), `host` (a registered host's name or `local`; default: the placement
policy), `timeout` (seconds the agent may take; default 3600) and `description` are optional.
Anything else is refused, so a typo never goes unnoticed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import InvalidInput, NotFound
from ..profiles.loading import load_profile
from ..providers.registry import get_provider
from ..services.hosts.records import NAME_RE as HOST_NAME_RE
from ..services.terminals.names import FLOW_SESSION_PREFIX
from .records import FlowSpec
from .schedule import Schedule
from .template import placeholders

# The session is `cao-flow-<name>`, and a session name has at most 64 characters.
FLOW_NAME_RE = re.compile(r"\A[A-Za-z0-9_-]{1,55}\Z")
DEFAULT_TIMEOUT_S = 3600.0
MAX_TIMEOUT_S = 86400.0
MAX_FLOW_FILE_BYTES = 256 * 1024
KNOWN_KEYS = (
    "name",
    "schedule",
    "agent_profile",
    "provider",
    "timezone",
    "script",
    "engine",
    "host",
    "timeout",
    "description",
)
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", re.S)


def check_name(name: object) -> str:
    if not isinstance(name, str) or not FLOW_NAME_RE.match(name):
        raise InvalidInput(f"invalid flow name {str(name)[:80]!r}: use 1-55 of [A-Za-z0-9_-]")
    return name


def session_name(flow_name: str) -> str:
    return FLOW_SESSION_PREFIX + flow_name  # a namespace where nobody else may create a session


def read_flow_file(path: Path) -> str:
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise InvalidInput(f"{path} is not a file")
        if size > MAX_FLOW_FILE_BYTES:
            raise InvalidInput(f"{path} is larger than {MAX_FLOW_FILE_BYTES // 1024} KiB")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"flow file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read flow file {path}: {exc}") from None


def parse_flow(text: str, file_path: Path, server_zone: str) -> FlowSpec:
    """The flow a file describes, checked on its own (profiles and scripts: `check_references`)."""
    where = file_path.name
    match = _FRONTMATTER.match(text)
    if not match:
        raise InvalidInput(f"{where}: a flow file starts with YAML frontmatter between '---' lines")
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{where}: invalid YAML frontmatter: {str(exc).splitlines()[0]}") from None
    if not isinstance(meta, dict):
        raise InvalidInput(f"{where}: the frontmatter must be a mapping of keys to values")
    unknown = sorted(str(k) for k in meta if k not in KNOWN_KEYS)
    if unknown:
        raise InvalidInput(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(KNOWN_KEYS)})")
    for key in ("name", "schedule", "agent_profile"):
        if meta.get(key) in (None, ""):
            raise InvalidInput(f"{where}: `{key}` is required")
    name = check_name(meta["name"])
    timezone = _optional_text(meta, "timezone", where)
    schedule = Schedule.parse(meta["schedule"], timezone or server_zone)
    script = _optional_text(meta, "script", where)
    if script is not None:
        script = os.path.normpath(file_path.parent / Path(script).expanduser())
    prompt = match.group(2).strip()
    if not prompt:
        raise InvalidInput(f"{where}: the prompt (the text after the frontmatter) is empty")
    if placeholders(prompt) and script is None:
        raise InvalidInput(
            f"{where}: the prompt uses {', '.join(f'[[{p}]]' for p in placeholders(prompt))} "
            "but there is no gate `script` to fill them"
        )
    return FlowSpec(
        name=name,
        schedule=schedule.expression,
        timezone=timezone,
        agent_profile=_required_text(meta, "agent_profile", where),
        provider=_optional_text(meta, "provider", where),
        script=script,
        engine=_optional_text(meta, "engine", where),
        timeout=_timeout(meta.get("timeout"), where),
        prompt_template=prompt,
        file_path=str(file_path),
        description=_optional_text(meta, "description", where) or "",
        host=_host(meta.get("host"), where),
    )


def check_references(spec: FlowSpec, home: Path) -> None:
    """What the flow names must exist now: its profile, its provider and its gate script."""
    try:
        load_profile(home, spec.agent_profile)
    except NotFound as exc:
        raise InvalidInput(f"flow {spec.name}: {exc}") from None
    if spec.provider is not None:
        get_provider(spec.provider)  # InvalidInput naming the available providers
    if spec.script is not None:
        script = Path(spec.script)
        if not script.is_file():
            raise InvalidInput(
                f"flow {spec.name}: gate script {script} does not exist (`script` is relative to the flow file)"
            )
        if not os.access(script, os.X_OK):
            raise InvalidInput(f"flow {spec.name}: gate script {script} is not executable (chmod +x it)")


def flow_file_text(meta: Mapping[str, Any], prompt: str) -> str:
    """The text of a flow file with this frontmatter and prompt (POST /flows with fields)."""
    return f"---\n{yaml.safe_dump(dict(meta), sort_keys=False, allow_unicode=True)}---\n\n{prompt.strip()}\n"


def _optional_text(meta: dict, key: str, where: str) -> str | None:
    value = meta.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 4096:
        raise InvalidInput(f"{where}: `{key}` must be text")
    return value


def _required_text(meta: dict, key: str, where: str) -> str:
    value = _optional_text(meta, key, where)
    assert value is not None  # checked as required above
    return value


def _host(value: object, where: str) -> str | None:
    """A registered host's name or "local". Whether it is registered is the spawner's question,
    asked when the flow runs: a host can be removed after the flow was added."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not HOST_NAME_RE.fullmatch(value):
        raise InvalidInput(
            f"{where}: `host` must be a registered host's name (`cao host list`: 1-32 of [a-z0-9-], "
            "starting with [a-z0-9]) or local"
        )
    return value


def _timeout(value: object, where: str) -> float:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_S:
        raise InvalidInput(f"{where}: `timeout` must be a number of seconds, above 0 and at most {MAX_TIMEOUT_S:.0f}")
    return float(value)
