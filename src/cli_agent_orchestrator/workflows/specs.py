"""The workflow directory (`<cao home>/workflows/`): which specs exist, and which file a
name means. A script `<name>.py` is found by its stem, a YAML spec by its `name:` field
(or its stem when it has none); a name that means both is a tier collision.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from ..errors import Conflict, InvalidInput, NotFound
from .records import Tier

NAME_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
SCRIPT_SUFFIXES = (".py",)
YAML_SUFFIXES = (".yaml", ".yml")
MAX_SOURCE_BYTES = 256 * 1024
# `/workflows/runs` and `/workflows/validate` are routes; a spec by those names could be
# run but never fetched or deleted by name, so the names are refused.
RESERVED_NAMES = frozenset({"runs", "validate"})
# Linux's PATH_MAX and NAME_MAX: no file has a longer path or a longer name in it.
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


@dataclass(frozen=True)
class SpecFile:
    name: str
    path: Path
    tier: Tier

    def read(self) -> str:
        data = self.path.read_bytes()
        if len(data) > MAX_SOURCE_BYTES:
            raise InvalidInput(f"{self.path.name} is {len(data)} bytes; a workflow is at most {MAX_SOURCE_BYTES} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"{self.path.name} is not UTF-8 text") from None


def content_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def check_path_text(raw: str, what: str = "path") -> str:
    """Refuse, with a one-line reason, text that no file's path can be: the OS calls would
    raise ValueError or ENAMETOOLONG on it instead of answering "no such file"."""
    if "\0" in raw:
        raise InvalidInput(f"{what} contains a NUL character")
    try:
        encoded = os.fsencode(raw)
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} contains characters no file name can hold (lone surrogates)") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise InvalidInput(f"{what} is {len(encoded)} bytes long; a path is at most {MAX_PATH_BYTES} bytes")
    if any(len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
        raise InvalidInput(f"{what} has a name over {MAX_NAME_BYTES} bytes; no file can have it")
    return raw


def check_name(name: str, what: str = "workflow name") -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidInput(f"invalid {what} {name!r}: use 1-64 of [A-Za-z0-9_-]")
    if what == "workflow name" and name in RESERVED_NAMES:
        raise InvalidInput(f"{name!r} is a reserved name (an API route); rename the workflow")
    return name


class SpecDirectory:
    def __init__(self, root: Path):
        self.root = root

    def _yaml_name(self, path: Path) -> str:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return path.stem
        name = data.get("name") if isinstance(data, dict) else None
        return name if isinstance(name, str) and NAME_RE.fullmatch(name) else path.stem

    def files(self) -> list[SpecFile]:
        if not self.root.is_dir():
            return []
        out = []
        for path in sorted(self.root.iterdir()):
            if not path.is_file() or path.name.startswith("."):
                continue
            if path.suffix in SCRIPT_SUFFIXES and NAME_RE.fullmatch(path.stem):
                out.append(SpecFile(path.stem, path, Tier.SCRIPT))
            elif path.suffix in YAML_SUFFIXES:
                out.append(SpecFile(self._yaml_name(path), path, Tier.YAML))
        return out

    def inside(self, raw: str) -> Path:
        """A path the user gave, accepted only when it lies in the workflow directory."""
        check_path_text(raw)
        try:
            path = Path(raw).expanduser()
            if not path.is_absolute():
                path = self.root / path
            resolved = path.resolve()
        except RuntimeError as exc:  # `~user` with no such user, or a symlink loop
            raise InvalidInput(f"{raw!r}: {exc}") from None
        if resolved.parent != self.root.resolve():
            raise InvalidInput(
                f"{raw!r} is outside the workflow directory {self.root}; put the file there and run it by name"
            )
        return resolved

    def resolve(self, name_or_path: str) -> SpecFile:
        """The one spec a `cao workflow run` argument means."""
        if not isinstance(name_or_path, str) or not name_or_path:
            raise InvalidInput("name_or_path is required")
        if "/" in name_or_path or name_or_path.endswith(SCRIPT_SUFFIXES + YAML_SUFFIXES):
            path = self.inside(name_or_path)
            if not path.is_file():
                raise NotFound(f"no workflow file {path.name} in {self.root}")
            if path.suffix in SCRIPT_SUFFIXES:
                name, tier = path.stem, Tier.SCRIPT
            elif path.suffix in YAML_SUFFIXES:
                name, tier = self._yaml_name(path), Tier.YAML
            else:
                raise InvalidInput(f"{path.name}: a workflow is a .py script or a .yaml/.yml spec")
            check_name(name)
            self._refuse_collision(name)
            return SpecFile(name, path, tier)
        check_name(name_or_path)
        matches = self._refuse_collision(name_or_path)
        if not matches:
            raise NotFound(
                f"no workflow named {name_or_path!r} in {self.root} "
                f"(expected {name_or_path}.py or a YAML spec with name: {name_or_path})"
            )
        if len(matches) > 1:
            raise Conflict(
                f"workflow {name_or_path!r} is defined by several YAML files: "
                + ", ".join(m.path.name for m in matches)
            )
        return matches[0]

    def _refuse_collision(self, name: str) -> list[SpecFile]:
        files = self.files()
        matches = [f for f in files if f.name == name]
        # A same-stem pair (x.py beside x.yaml) is a collision too, whatever the YAML's name:
        # a reader of the directory cannot tell which one `x` means.
        stem_twins = [f for f in files if f.tier == Tier.YAML and f.path.stem == name and f not in matches]
        if any(f.tier == Tier.SCRIPT for f in matches) and stem_twins:
            matches += stem_twins
        if {f.tier for f in matches} == set(Tier):
            raise Conflict(
                f"tier collision: workflow {name!r} is both a script and a YAML spec ("
                + ", ".join(m.path.name for m in matches)
                + "); rename or remove one"
            )
        return matches


def indexed_at(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
