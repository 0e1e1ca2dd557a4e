"""The profile catalogue a user reads: every profile file in every lookup directory, with
where it comes from, whether it loads, and which other files it shadows.

Profiles are shown as written: `${VAR}` stays a reference and no `.env` value is ever
filled in here (the variables a profile refers to are listed by name only). Expansion
happens only when an agent is started (profiles.load_profile).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NotFound
from ..models import SAFE_NAME_RE
from .loading import VARIABLE_RE, AgentProfile, parse_profile, profile_dirs, profile_paths


@dataclass(frozen=True)
class ProfileFile:
    """One `NAME.md` in one lookup directory, parsed as written (or why it does not parse)."""

    name: str
    source: str
    path: Path
    profile: AgentProfile | None
    error: str | None


@dataclass(frozen=True)
class CatalogEntry:
    """The file that wins the lookup for `name`, and the files it shadows (lookup order)."""

    winner: ProfileFile
    shadowed: list[ProfileFile] = field(default_factory=list)


def read_profile_file(path: Path, name: str, source: str) -> ProfileFile:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return ProfileFile(name, source, path, None, f"cannot read {path}: {exc.strerror or exc}")
    if not SAFE_NAME_RE.match(name):
        return ProfileFile(name, source, path, None, f"file name {path.name!r} is not a valid profile name")
    try:
        return ProfileFile(name, source, path, parse_profile(text, name, source), None)
    except InvalidInput as exc:
        return ProfileFile(name, source, path, None, str(exc))


def catalog(home: Path) -> list[CatalogEntry]:
    """Every profile name found, sorted; the first directory in lookup order wins."""
    found: dict[str, list[ProfileFile]] = {}
    for directory, source in profile_dirs(home):
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.md")):
            if path.name.startswith(".") or not path.is_file():
                continue  # editor and atomic-write leftovers; what the lookup would skip too
            found.setdefault(path.stem, []).append(read_profile_file(path, path.stem, source))
    return [CatalogEntry(files[0], files[1:]) for _, files in sorted(found.items())]


def find_entry(home: Path, name: str) -> CatalogEntry:
    if not SAFE_NAME_RE.match(name or ""):
        raise InvalidInput(f"invalid agent profile name {name!r}: use 1-64 of [A-Za-z0-9_-]")
    files = [read_profile_file(path, name, source) for path, source in profile_paths(home, name) if path.is_file()]
    if not files:
        raise NotFound(f"agent profile {name!r} not found")
    return CatalogEntry(files[0], files[1:])


def _shadowed(entry: CatalogEntry) -> list[dict[str, str]]:
    return [{"source": f.source, "path": str(f.path)} for f in entry.shadowed]


def _string_list(value: Any) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def summary(entry: CatalogEntry) -> dict[str, Any]:
    """One row of `GET /agents/profiles`."""
    file, profile = entry.winner, entry.winner.profile
    meta = profile.frontmatter if profile else {}
    row: dict[str, Any] = {
        "name": file.name,
        "source": file.source,
        "path": str(file.path),
        "loadable": profile is not None,
        "description": profile.description if profile else "",
        "provider": profile.provider if profile else None,
        "role": meta.get("role"),
        "capabilities": _string_list(meta.get("capabilities")),
        "tags": _string_list(meta.get("tags")),
    }
    if file.error:
        row["error"] = file.error
    if entry.shadowed:
        row["duplicated_in"] = _shadowed(entry)
    return row


def referenced_variables(profile: AgentProfile) -> list[str]:
    text = f"{profile.frontmatter!r}\n{profile.system_prompt}"
    return sorted({match.group(1) for match in VARIABLE_RE.finditer(text)})


def details(entry: CatalogEntry) -> dict[str, Any]:
    """`GET /agents/profiles/{name}`: the profile as written, null fields omitted."""
    file, profile = entry.winner, entry.winner.profile
    if profile is None:
        raise InvalidInput(f"agent profile {file.name!r} ({file.path}) is invalid: {file.error}")
    body: dict[str, Any] = {
        "name": file.name,
        "source": file.source,
        "path": str(file.path),
        "description": profile.description,
        "provider": profile.provider,
        "model": profile.model,
        "role": profile.frontmatter.get("role"),
        "allowed_tools": profile.allowed_tools,
        "mcp_servers": profile.mcp_servers or None,
        "frontmatter": profile.frontmatter or None,
        "system_prompt": profile.system_prompt,
        "variables": referenced_variables(profile) or None,
        "duplicated_in": _shadowed(entry) or None,
    }
    return {key: value for key, value in body.items() if value is not None}
