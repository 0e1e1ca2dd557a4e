"""Moving a terminal's launch to its host. Providers write a terminal's files here, under the
cao home (`<home>/tmp/<id>/`), and name them by that path in their argv, environment and
files. For an agent on another host, the same files go to the host's cao home, and every
mention of the directory is rewritten to the host's path: the 8-hex-digit terminal id in it
makes a mention unmistakable. Links (Gemini's shadow home links the user's own ~/.gemini
entries) name files of this machine and are not carried: on a host the CLI uses its own.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ...providers.base import Launch

MAX_FILE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Moved:
    launch: Launch
    env_all: dict[str, str]  # the agent's whole launch environment, rewritten


def relocated(
    directory: Path, here: str, there: str, launch: Launch, env: dict[str, str]
) -> tuple[dict[str, bytes], frozenset[str], Moved]:
    """(files by relative name, the executable ones, the launch and environment rewritten)."""
    swaps = [(here, there)]
    escaped_here, escaped_there = json.dumps(here)[1:-1], json.dumps(there)[1:-1]
    if escaped_here != here:
        swaps.append((escaped_here, escaped_there))

    def text(value: str) -> str:
        for old, new in swaps:
            value = value.replace(old, new)
        return value

    def data(value: bytes) -> bytes:
        for old, new in swaps:
            value = value.replace(old.encode(), new.encode())
        return value

    files: dict[str, bytes] = {}
    executable: set[str] = set()
    if directory.is_dir():
        for root, _dirs, names in os.walk(directory):
            for name in names:
                path = Path(root) / name
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
                    continue  # links, FIFOs (the hook ack of the FIFO channel), giant files
                rel = path.relative_to(directory).as_posix()
                files[rel] = data(path.read_bytes())
                if info.st_mode & stat.S_IXUSR:
                    executable.add(rel)
    moved = Moved(
        Launch([text(a) for a in launch.argv], {k: text(v) for k, v in launch.env.items()}),
        {k: text(v) for k, v in env.items()},
    )
    return files, frozenset(executable), moved
