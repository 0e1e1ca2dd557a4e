"""Where scripts come from and where received requests are kept.

Scripts registered at runtime (``POST /_scripts/<name>``) win over files; files
in the scripts directory are re-read when they change, so a script can be
edited while CLI sessions keep running against the server.
"""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Any

from .script import Script, load_script_file, parse_script

SUFFIXES = (".yaml", ".yml", ".json")


class ScriptStore:
    def __init__(self, source: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._runtime: dict[str, Script] = {}
        self._files: dict[str, tuple[float, Script]] = {}
        self._dir: Path | None = None
        self._single: Path | None = None
        if source is not None:
            if source.is_dir():
                self._dir = source
            elif source.is_file():
                self._single = source  # one file: it is the "default" script (and its own name)
            else:
                raise FileNotFoundError(f"scripts path not found: {source}")
            for name in self.file_names():
                self.get(name)  # fail fast on a broken script at startup

    def file_names(self) -> list[str]:
        if self._single is not None:
            return ["default", self._single.stem]
        if self._dir is None:
            return []
        return sorted({p.stem for p in self._dir.iterdir() if p.suffix in SUFFIXES})

    def _path(self, name: str) -> Path | None:
        if self._single is not None:
            return self._single if name in ("default", self._single.stem) else None
        if self._dir is None or "/" in name or name.startswith("."):
            return None
        return next((p for p in (self._dir / f"{name}{s}" for s in SUFFIXES) if p.is_file()), None)

    def set(self, name: str, data: Any) -> Script:
        script = parse_script(data, name)
        with self._lock:
            self._runtime[name] = script
        return script

    def get(self, name: str) -> Script:
        with self._lock:
            if name in self._runtime:
                return self._runtime[name]
        path = self._path(name)
        if path is None:
            return Script()
        mtime = path.stat().st_mtime
        with self._lock:
            cached = self._files.get(name)
            if cached and cached[0] == mtime:
                return cached[1]
        script = load_script_file(path)
        with self._lock:
            self._files[name] = (mtime, script)
        return script


class RequestLog:
    """Every model request, per script name, for test assertions (``GET /_requests/<name>``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_script: dict[str, list[dict]] = {}

    def add(self, script: str, record: dict) -> None:
        record = dict(record, time=time.time())
        with self._lock:
            self._by_script.setdefault(script, []).append(record)

    def get(self, script: str) -> list[dict]:
        with self._lock:
            return copy.deepcopy(self._by_script.get(script, []))

    def clear(self, script: str) -> None:
        with self._lock:
            self._by_script.pop(script, None)
