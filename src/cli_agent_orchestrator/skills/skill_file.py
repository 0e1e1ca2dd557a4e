"""The skill format: a folder holding `SKILL.md`, whose YAML frontmatter names the skill
(`name`) and says when to use it (`description`), and whose body is the instructions.

Invariant: a skill's name is its folder's name and matches SKILL_NAME_RE, so a name is always
safe as one path component; the frontmatter `name` is checked against the same rule and only
chooses the folder name when a skill is added.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import InvalidInput

SKILL_FILE = "SKILL.md"
# Claude Code's skills use lowercase letters, digits and hyphens; underscores and capitals are
# accepted too (cao's profile names allow them). Never a dot, a slash or a leading hyphen.
SKILL_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
MAX_SKILL_FILE_BYTES = 262_144  # SKILL.md itself: instructions, not data
MAX_DESCRIPTION_CHARS = 300  # one line of the catalogue
_FRONTMATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", re.S)


@dataclass(frozen=True)
class Skill:
    name: str  # the folder's name
    description: str  # one line, for the catalogue
    directory: Path
    body: str  # SKILL.md without its frontmatter
    frontmatter: dict = field(default_factory=dict)


def check_skill_name(name: object, what: str = "skill name") -> str:
    """`name` when it is a usable skill name, else InvalidInput saying the rule."""
    if not isinstance(name, str) or not SKILL_NAME_RE.match(name):
        shown = str(name)[:80]
        raise InvalidInput(f"invalid {what} {shown!r}: use 1-64 of [A-Za-z0-9_-], starting with a letter or digit")
    return name


def one_line(text: str) -> str:
    """A description as one catalogue line: whitespace collapsed, at most MAX_DESCRIPTION_CHARS."""
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_DESCRIPTION_CHARS else flat[: MAX_DESCRIPTION_CHARS - 1] + "…"


def parse_skill_text(text: str, where: str) -> tuple[dict, str]:
    """SKILL.md's frontmatter (a mapping, possibly empty) and body; InvalidInput names `where`
    when the frontmatter is not YAML or not a mapping, or `name`/`description` are not text."""
    match = _FRONTMATTER.match(text)
    if not match:
        return {}, text.strip()
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput(f"{where}: invalid YAML frontmatter: {reason}") from None
    if not isinstance(meta, dict):
        raise InvalidInput(f"{where}: the frontmatter must be a mapping (name: ..., description: ...)")
    for key in ("name", "description"):
        if key in meta and not isinstance(meta[key], str):
            raise InvalidInput(f"{where}: frontmatter {key!r} must be text")
    if "name" in meta:
        check_skill_name(meta["name"], f"skill name in {where}")
    return meta, match.group(2).strip()


def read_skill_file(path: Path) -> str:
    """SKILL.md's text: a regular file of at most MAX_SKILL_FILE_BYTES of UTF-8."""
    try:
        size = path.stat().st_size
        if size > MAX_SKILL_FILE_BYTES:
            raise InvalidInput(f"{path} is larger than {MAX_SKILL_FILE_BYTES} bytes")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None


def load_skill_dir(directory: Path) -> Skill:
    """The skill in `directory` (named after it); InvalidInput when it has no readable SKILL.md."""
    name = check_skill_name(directory.name)
    path = directory / SKILL_FILE
    if not path.is_file():
        raise InvalidInput(f"skill folder {directory} has no {SKILL_FILE}")
    meta, body = parse_skill_text(read_skill_file(path), str(path))
    return Skill(name, one_line(meta.get("description") or ""), directory, body, meta)
