"""Where skills live and reading them: `<home>/skills/NAME/` (what `cao skills add` writes),
then each directory of `skills_dirs` in `<home>/settings.json` (a user's own collections, e.g.
`~/.claude/skills`, read in place and never written). The first folder of a name wins.

Invariant: every path handed out is a folder directly inside one of those directories whose
name is a valid skill name, and a file listed for a skill resolves inside the skill's folder
(a symlink leading out of it is never listed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidInput, NotFound
from ..user_settings import _read as read_user_settings  # settings.json's one reader
from ..user_settings import settings_path
from .skill_file import SKILL_FILE, SKILL_NAME_RE, Skill, check_skill_name, load_skill_dir

STORE_DIR_NAME = "skills"
SETTINGS_KEY = "skills_dirs"
MAX_LISTED_FILES = 200  # what load_skill names of a skill's other files


def store_dir(home: Path) -> Path:
    return home / STORE_DIR_NAME


def skill_dirs(home: Path) -> list[tuple[Path, str]]:
    """Where skills are looked up, first match wins, each with its source: `store` (cao's own)
    or `settings` (`skills_dirs`; `~` expanded, a relative path is under the home)."""
    raw = read_user_settings(home).get(SETTINGS_KEY, [])
    if not isinstance(raw, list) or not all(isinstance(item, str) and item for item in raw):
        raise InvalidInput(f"settings file {settings_path(home)}: {SETTINGS_KEY} must be a list of paths")
    return [(store_dir(home), "store"), *((home / Path(item).expanduser(), "settings") for item in raw)]


@dataclass(frozen=True)
class SkillEntry:
    """One skill as listed: the winner of its name, or why its folder cannot be read."""

    name: str
    directory: Path
    source: str  # store | settings
    skill: Skill | None
    error: str | None = None
    shadows: list[str] = field(default_factory=list)  # folders of the same name it hides

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.skill.description if self.skill else "",
            "directory": str(self.directory),
            "source": self.source,
            "loadable": self.skill is not None,
            "error": self.error,
            "shadows": self.shadows,
        }


def _candidates(directory: Path) -> list[Path]:
    try:
        children = sorted(directory.iterdir())
    except OSError:  # missing or unreadable: nothing from here
        return []
    return [c for c in children if SKILL_NAME_RE.match(c.name) and c.is_dir() and (c / SKILL_FILE).exists()]


def list_skills(home: Path) -> list[SkillEntry]:
    """Every skill by name (first folder wins), sorted; an unreadable one has `error`."""
    found: dict[str, SkillEntry] = {}
    for directory, source in skill_dirs(home):
        for folder in _candidates(directory):
            if folder.name in found:
                found[folder.name].shadows.append(str(folder))
                continue
            try:
                found[folder.name] = SkillEntry(folder.name, folder, source, load_skill_dir(folder))
            except InvalidInput as exc:
                found[folder.name] = SkillEntry(folder.name, folder, source, None, str(exc))
    return [found[name] for name in sorted(found)]


def find_skill(home: Path, name: str) -> Skill:
    """The skill `name` (the first folder of that name); NotFound says where cao looked."""
    check_skill_name(name)
    dirs = skill_dirs(home)
    for directory, _ in dirs:
        folder = directory / name
        if folder.is_dir() and (folder / SKILL_FILE).exists():
            return load_skill_dir(folder)
    looked = ", ".join(str(d) for d, _ in dirs)
    raise NotFound(f"skill {name!r} not found (looked in {looked}; add one with `cao skills add PATH|URL`)")


def skill_files(skill: Skill) -> list[Path]:
    """The skill's other files (not SKILL.md), sorted, at most MAX_LISTED_FILES; symlinked
    folders are not entered and a symlink that leads out of the folder is left out."""
    root = skill.directory.resolve()
    out: list[Path] = []
    for current, dirnames, filenames in os.walk(skill.directory):
        dirnames[:] = sorted(d for d in dirnames if not (Path(current) / d).is_symlink())
        for filename in sorted(filenames):
            path = Path(current) / filename
            if path == skill.directory / SKILL_FILE:
                continue
            if not path.resolve().is_relative_to(root):
                continue
            out.append(path)
            if len(out) >= MAX_LISTED_FILES:
                return out
    return out


def remove_skill(home: Path, name: str) -> Path:
    """Delete skill `name` from cao's store (its whole folder, gone at once); the folder removed.
    A skill only in a `skills_dirs` directory is the user's own collection: refused."""
    check_skill_name(name)
    folder = store_dir(home) / name
    if not folder.is_dir() or folder.is_symlink():
        for directory, source in skill_dirs(home):
            if source == "settings" and (directory / name / SKILL_FILE).exists():
                raise InvalidInput(
                    f"skill {name!r} is in {directory}, listed in settings.json's {SETTINGS_KEY}: "
                    "cao does not delete from your own skill directories"
                )
        raise NotFound(f"skill {name!r} is not in cao's skill store ({store_dir(home)})")
    # Renamed away first, so no reader ever sees a half-deleted skill.
    doomed = Path(tempfile.mkdtemp(prefix=f".{name}.removing-", dir=store_dir(home)))
    os.replace(folder, doomed / name)
    shutil.rmtree(doomed, ignore_errors=True)
    return folder
