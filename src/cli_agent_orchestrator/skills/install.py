"""`cao skills add` (and POST /skills): a skill into cao's store, `<home>/skills/NAME/`.

SOURCE is a folder holding SKILL.md (or the SKILL.md itself), copied in with its files — only
when the caller allows files: the CLI, never HTTP — or the URL of a SKILL.md on a host of
CAO_PROFILE_ALLOWED_HOSTS, fetched with the profile fetcher's rules (profiles/fetch.py: https,
allow-listed redirects, one deadline, a size bound). NAME is the frontmatter's `name`, else the
folder's (the URL's folder) name.
Invariant: everything is checked before the first write, and the skill appears whole or not at
all (copied into a temporary folder beside the store's, then renamed into place); a folder with
a symlink leading out of it, a special file, or more than the bounds below is refused.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from ..errors import InvalidInput
from ..private_files import DIR_MODE, FILE_MODE, private_dir, private_home
from ..profiles.fetch import FETCH_DEADLINE_S, check_url, fetch_profile_text, is_url
from .skill_file import SKILL_FILE, check_skill_name, parse_skill_text, read_skill_file
from .store import store_dir

MAX_FILES = 1000
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_TOTAL_BYTES = 32 * 1024 * 1024
SKIPPED_DIRS = {".git"}  # a skill kept in a git checkout: its history is not the skill


@dataclass(frozen=True)
class AddResult:
    name: str
    directory: str
    source_kind: str  # path | url
    files: int  # copied, SKILL.md included
    replaced: bool

    def as_dict(self) -> dict:
        return asdict(self)


def _control_free(name: str) -> bool:
    return name.isprintable()


def _plan_copy(root: Path) -> list[tuple[Path, Path]]:
    """(source file, path relative to the skill folder) of everything to copy, checked."""
    real_root = root.resolve()
    plan: list[tuple[Path, Path]] = []
    total = 0
    for current, dirnames, filenames in os.walk(root):
        here = Path(current)
        kept = []
        for d in sorted(dirnames):
            path = here / d
            if not _control_free(d):
                raise InvalidInput(f"skill folder {root}: the name {d!r} holds control characters")
            if path.is_symlink():
                if not path.resolve().is_relative_to(real_root):
                    raise InvalidInput(f"skill folder {root}: {path} is a symlink leading outside the folder")
                continue  # its files are copied where they really are
            if d not in SKIPPED_DIRS:
                kept.append(d)
        dirnames[:] = kept
        for filename in sorted(filenames):
            path = here / filename
            if not _control_free(filename):
                raise InvalidInput(f"skill folder {root}: the name {filename!r} holds control characters")
            if path.is_symlink() and not path.resolve().is_relative_to(real_root):
                raise InvalidInput(f"skill folder {root}: {path} is a symlink leading outside the folder")
            try:
                info = path.stat()
            except OSError as exc:
                raise InvalidInput(f"skill folder {root}: cannot read {path}: {exc.strerror or exc}") from None
            if stat.S_ISDIR(info.st_mode):
                continue  # a symlink to a folder inside: copied where it really is
            if not stat.S_ISREG(info.st_mode):
                raise InvalidInput(f"skill folder {root}: {path} is not a regular file")
            if info.st_size > MAX_FILE_BYTES:
                raise InvalidInput(f"skill folder {root}: {path} is larger than {MAX_FILE_BYTES} bytes")
            total += info.st_size
            plan.append((path, path.relative_to(root)))
            if len(plan) > MAX_FILES:
                raise InvalidInput(f"skill folder {root} has more than {MAX_FILES} files")
            if total > MAX_TOTAL_BYTES:
                raise InvalidInput(f"skill folder {root} holds more than {MAX_TOTAL_BYTES} bytes")
    return plan


def _from_path(source: str) -> tuple[str, list[tuple[Path, Path]], dict[Path, str]]:
    path = Path(source).expanduser()
    if path.name == SKILL_FILE and path.is_file():
        path = path.parent
    if not path.is_dir():
        raise InvalidInput(f"skill source {source!r} is not a folder (a skill is a folder holding {SKILL_FILE})")
    skill_md = path / SKILL_FILE
    if not skill_md.is_file():
        raise InvalidInput(f"skill folder {path} has no {SKILL_FILE}")
    meta, _ = parse_skill_text(read_skill_file(skill_md), str(skill_md))
    name = meta.get("name") or path.resolve().name
    return check_skill_name(name, f"skill name (from {skill_md})"), _plan_copy(path), {}


def _url_folder_name(url: str) -> str:
    parts = [p for p in httpx.URL(url).path.split("/") if p]
    if parts and parts[-1] == SKILL_FILE:
        parts.pop()
    return parts[-1] if parts else ""


def _from_url(url: str, fetch: Callable[[str], str]) -> tuple[str, list[tuple[Path, Path]], dict[Path, str]]:
    text = fetch(url)
    if not text.lstrip("\ufeff").startswith("---"):
        raise InvalidInput(
            f"the file at {url} is not a {SKILL_FILE}: it must start with YAML frontmatter between '---' lines "
            "(name, description); for GitHub, use the file's raw URL"
        )
    meta, _ = parse_skill_text(text, url)
    name = meta.get("name") or _url_folder_name(url)
    return check_skill_name(name, f"skill name (from {url})"), [], {Path(SKILL_FILE): text}


def add_skill(
    source: str,
    home: Path,
    allowed_hosts: tuple[str, ...],
    *,
    allow_files: bool,
    replace: bool = False,
    fetch_timeout: float = FETCH_DEADLINE_S,
    fetch: Callable[[str], str] | None = None,
) -> AddResult:
    """Add the skill at `source` to cao's store; InvalidInput names the problem, and then
    nothing was written. A skill of the same name is replaced only with `replace`."""
    source = source.strip()
    if is_url(source):
        check_url(source, allowed_hosts)  # refused before anything is fetched
        fetcher = fetch or (lambda url: fetch_profile_text(url, allowed_hosts, deadline=fetch_timeout))
        name, plan, texts = _from_url(source, fetcher)
        kind = "url"
    elif not allow_files:
        raise InvalidInput(
            f"skill source {source[:200]!r} is not a URL: only an allow-listed https URL of a {SKILL_FILE} can be "
            "added over HTTP (add a local folder with `cao skills add PATH`)"
        )
    else:
        name, plan, texts = _from_path(source)
        kind = "path"
    target = store_dir(home) / name
    if (target.exists() or target.is_symlink()) and not replace:
        raise InvalidInput(f"skill {name!r} is already in cao's skill store ({target}); --force replaces it")
    try:
        private_home(home)
        private_dir(store_dir(home))
        replaced = _write(target, plan, texts, replace)
    except OSError as exc:
        raise InvalidInput(f"cannot write skill {name!r}: {exc.strerror or exc}") from None
    return AddResult(name, str(target), kind, len(plan) + len(texts), replaced)


def _write(target: Path, plan: list[tuple[Path, Path]], texts: dict[Path, str], replace: bool) -> bool:
    """Copy into a temporary folder beside `target`, then rename it into place; True when a
    skill of that name was replaced."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.adding-", dir=target.parent))
    try:
        folder = staging / target.name
        folder.mkdir(mode=DIR_MODE)
        for src, rel in plan:
            dest = folder / rel
            dest.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            # Scripts a skill ships stay runnable for their owner; nothing is open to others.
            os.chmod(dest, DIR_MODE if os.access(src, os.X_OK) else FILE_MODE)
        for rel, text in texts.items():
            dest = folder / rel
            dest.write_text(text, encoding="utf-8")
            os.chmod(dest, FILE_MODE)
        replaced = target.exists() or target.is_symlink()
        if replaced:
            if not replace:  # appeared meanwhile
                raise InvalidInput(f"skill {target.name!r} was added meanwhile; --force replaces it")
            os.replace(target, staging / ".old")
        os.replace(folder, target)
        return replaced
    finally:
        shutil.rmtree(staging, ignore_errors=True)
