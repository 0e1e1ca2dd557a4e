"""`cao profile validate`: every problem of one profile text, as errors (the profile cannot
be used) and warnings (it can, but probably not as meant).

The checks read the text as written; variable values are only tested for presence.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InvalidInput
from ..models import SAFE_NAME_RE
from ..providers.tool_names import check_tool
from .catalog import referenced_variables
from .loading import parse_profile
from .roles import ROLE_DEFAULTS

_STRING_LISTS = ("capabilities", "tags")
_STRINGS = ("description", "provider", "model", "role")


@dataclass(frozen=True)
class Problem:
    severity: str  # "error" | "warning"
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_profile_text(
    text: str, file_stem: str, providers: Collection[str], known_variables: Collection[str]
) -> list[Problem]:
    """Problems of a profile stored as `<file_stem>.md`; `providers` are the usable provider
    names, `known_variables` the names set in `<home>/.env` or the environment."""
    problems: list[Problem] = []
    if not SAFE_NAME_RE.match(file_stem):
        problems.append(Problem("error", f"file name {file_stem!r} is not a profile name: use 1-64 of [A-Za-z0-9_-]"))
    try:
        profile = parse_profile(text, file_stem, "file")
    except InvalidInput as exc:
        return [*problems, Problem("error", str(exc))]
    meta = profile.frontmatter
    for key in _STRINGS:
        if key in meta and meta[key] is not None and not isinstance(meta[key], str):
            problems.append(Problem("error", f"{key} must be a string"))
    for tool in profile.allowed_tools or []:
        try:
            check_tool(tool, "allowedTools")
        except InvalidInput as exc:
            problems.append(Problem("error", str(exc)))
    if isinstance(profile.role, str) and profile.role not in ROLE_DEFAULTS:
        problems.append(Problem("warning", f"role {profile.role!r} is not built in: it must be in settings.json roles"))
    for key in _STRING_LISTS:
        value = meta.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            problems.append(Problem("error", f"{key} must be a list of strings"))
    if "name" in meta and str(meta["name"]) != file_stem:
        problems.append(
            Problem(
                "warning",
                f"frontmatter name {meta['name']!r} differs from the file name; it is looked up as {file_stem!r}",
            )
        )
    if isinstance(profile.provider, str) and profile.provider not in providers:
        problems.append(
            Problem("warning", f"unknown provider {profile.provider!r} (known: {', '.join(sorted(providers))})")
        )
    for variable in referenced_variables(profile):
        if variable not in known_variables:
            problems.append(
                Problem("warning", f"${{{variable}}} is set neither in the cao .env nor in the environment")
            )
    if not profile.system_prompt:
        problems.append(Problem("warning", "the body (the system prompt) is empty"))
    return problems


def is_valid(problems: Collection[Problem]) -> bool:
    return not any(p.severity == "error" for p in problems)
