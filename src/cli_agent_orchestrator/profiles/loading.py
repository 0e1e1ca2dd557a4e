"""Agent profiles: Markdown files with YAML frontmatter; the body is the system prompt.

Lookup order for a name: the user's agent store (`<cao home>/agent-store/NAME.md`),
then each of `extra_profile_dirs` in `<cao home>/settings.json`, then the built-ins
shipped in `profiles/builtin/`. Dropping a file in the user's store is enough to add or
override a profile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from ..errors import InvalidInput, NotFound
from ..models import SAFE_NAME_RE
from ..user_settings import extra_profile_dirs
from .env_file import read_env_values

_FRONTMATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)(.*)\Z", re.S)
VARIABLE_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class AgentProfile:
    name: str
    description: str = ""
    provider: str | None = None
    model: str | None = None
    role: str | None = None  # supervisor | developer | reviewer | a role from settings.json
    mcp_servers: dict = field(default_factory=dict)
    allowed_tools: list[str] | None = None
    host: str | None = None  # where agents of this profile run (a registered host, or "local")
    skills: list[str] | None = None  # the skills its agents see (skills/catalogue.py); None: all
    system_prompt: str = ""
    frontmatter: dict = field(default_factory=dict)  # everything, for provider-specific keys
    source: str = "built-in"


def builtin_dir() -> Path:
    return Path(str(resources.files("cli_agent_orchestrator") / "profiles" / "builtin"))


def _yaml_reason(exc: yaml.YAMLError) -> str:
    """One line: YAML's own messages span several, with a caret drawing."""
    mark = getattr(exc, "problem_mark", None)
    reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    # +2: lines count from 0, and the frontmatter starts after the opening `---` line.
    return f"{reason} (line {mark.line + 2}, column {mark.column + 1})" if mark else reason


def parse_profile(text: str, fallback_name: str, source: str, env: dict[str, str] | None = None) -> AgentProfile:
    if env:
        text = VARIABLE_RE.sub(lambda m: env.get(m.group(1), m.group(0)), text)
    match = _FRONTMATTER.match(text)
    meta: dict = {}
    body = text
    if match:
        try:
            meta = yaml.safe_load(match.group(1)) or {}
        except yaml.YAMLError as exc:
            raise InvalidInput(f"profile {fallback_name!r}: invalid YAML frontmatter: {_yaml_reason(exc)}") from None
        if not isinstance(meta, dict):
            raise InvalidInput(f"profile {fallback_name!r}: frontmatter must be a mapping")
        body = match.group(2)
    tools = meta.get("allowedTools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, str) for t in tools)):
        raise InvalidInput(f"profile {fallback_name!r}: allowedTools must be a list of strings")
    servers = meta.get("mcpServers") or {}
    if not isinstance(servers, dict):
        raise InvalidInput(f"profile {fallback_name!r}: mcpServers must be a mapping")
    host = meta.get("host")
    if host is not None and not isinstance(host, str):
        raise InvalidInput(f"profile {fallback_name!r}: host must be a host's name (a string)")
    skills = meta.get("skills")
    if skills is not None and not (isinstance(skills, list) and all(isinstance(s, str) for s in skills)):
        raise InvalidInput(f"profile {fallback_name!r}: skills must be a list of skill names")
    return AgentProfile(
        name=str(meta.get("name") or fallback_name),
        description=str(meta.get("description") or ""),
        provider=meta.get("provider"),
        model=meta.get("model"),
        role=meta.get("role"),  # checked where it is used (roles.resolve_tools)
        mcp_servers=servers,
        allowed_tools=tools,
        host=host,
        skills=skills,
        system_prompt=body.strip(),
        frontmatter=meta,
        source=source,
    )


def profile_dirs(home: Path) -> list[tuple[Path, str]]:
    """Where profiles are looked up, first match wins, with the source each one is listed as."""
    return [
        (home / "agent-store", "local"),
        *((path, "custom") for path in extra_profile_dirs(home)),
        (builtin_dir(), "built-in"),
    ]


def profile_paths(home: Path, name: str) -> list[tuple[Path, str]]:
    return [(directory / f"{name}.md", source) for directory, source in profile_dirs(home)]


def load_profile(home: Path, name: str, environ: Mapping[str, str] | None = None) -> AgentProfile:
    """The profile `name`; `${VAR}` is filled from `environ` (the caller's environment,
    passed in by the entry point) and then `<home>/.env`, which wins."""
    if not SAFE_NAME_RE.match(name or ""):
        raise InvalidInput(f"invalid agent profile name {name!r}: use 1-64 of [A-Za-z0-9_-]")
    for path, source in profile_paths(home, name):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            return parse_profile(text, name, source, {**(environ or {}), **read_env_values(home)})
    looked = ", ".join(str(directory) for directory, source in profile_dirs(home) if source != "built-in")
    raise NotFound(f"agent profile {name!r} not found (looked in {looked} and the built-ins)")
