"""What an agent knows of skills: the ones its profile lets it see (`skills:` — absent: all,
`[]`: none), listed by name and one-line description at the end of its system prompt, and the
text `load_skill` gives it for one of them.

Invariant: the catalogue an agent is shown and the skills it may load are the same set, both
decided by `allowed_skills`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import Forbidden
from .skill_file import SKILL_FILE, Skill
from .store import find_skill, list_skills, skill_files

MAX_CATALOGUE_ENTRIES = 100  # a prompt lists at most this many; load_skill still finds the others
CATALOGUE_HEADING = "## Skills"
CATALOGUE_INTRO = (
    "cao keeps the skills below: instructions for particular kinds of task. When a task matches "
    "one, call cao's `load_skill` tool with its name and follow what it returns."
)


def allowed_skills(name: str, profile_skills: Sequence[str] | None) -> bool:
    """Whether an agent whose profile says `skills: profile_skills` may see and load `name`."""
    return profile_skills is None or name in profile_skills


def visible_skills(home: Path, profile_skills: Sequence[str] | None) -> list[Skill]:
    """The loadable skills an agent of this profile sees, by name."""
    if profile_skills is not None and not profile_skills:
        return []  # `skills: []` reads nothing at all
    return [e.skill for e in list_skills(home) if e.skill is not None and allowed_skills(e.name, profile_skills)]


def catalogue_text(skills: Sequence[Skill]) -> str:
    """The catalogue section: a heading, how to use it, one line per skill; "" for none."""
    if not skills:
        return ""
    lines = [f"- {s.name}: {s.description or '(no description)'}" for s in skills[:MAX_CATALOGUE_ENTRIES]]
    if len(skills) > MAX_CATALOGUE_ENTRIES:
        lines.append(f"- … and {len(skills) - MAX_CATALOGUE_ENTRIES} more (`load_skill` takes any of them by name)")
    return "\n".join([CATALOGUE_HEADING, "", CATALOGUE_INTRO, "", *lines])


def with_skill_catalogue(system_prompt: str, home: Path, profile_skills: Sequence[str] | None) -> str:
    """The system prompt an agent is launched with: the profile's, then its skill catalogue."""
    section = catalogue_text(visible_skills(home, profile_skills))
    if not section:
        return system_prompt
    return f"{system_prompt.rstrip()}\n\n{section}" if system_prompt.strip() else section


def skill_for_agent(home: Path, name: str, profile: str, profile_skills: Sequence[str] | None) -> Skill:
    """Skill `name` as an agent of `profile` may load it; Forbidden when its `skills:` leaves it out."""
    if not allowed_skills(name, profile_skills):
        shown = ", ".join(profile_skills or []) or "none"
        raise Forbidden(f"skill {name!r} is not one profile {profile!r} may use (its `skills:` allows: {shown})")
    return find_skill(home, name)


def skill_document(skill: Skill) -> dict:
    """What `load_skill` and GET /skills/{name} answer: the instructions (`text`: SKILL.md's
    body, then the skill's other files by absolute path, to read when the text points to them)."""
    files = [str(p) for p in skill_files(skill)]
    text = skill.body
    if files:
        listing = "\n".join(f"- {f}" for f in files)
        text += (
            f"\n\n---\nThis skill's folder is {skill.directory}. Besides {SKILL_FILE} it holds these files; "
            f"read or run them from there when the instructions above refer to them:\n{listing}"
        )
    return {
        "name": skill.name,
        "description": skill.description,
        "directory": str(skill.directory),
        "text": text,
        "files": files,
    }
