"""Where an agent's MCP credential (agent_credentials.py) may be found, for the real-CLI tests:
the credential itself, the command lines that hold it, and the files that do. The credential
must be in no argv and in no file but a 0600 one of the terminal's own directory."""

from __future__ import annotations

from pathlib import Path

import psutil
from cao_support import CaoServer

from cli_agent_orchestrator.agent_credentials import credential_for

_LARGEST_FILE = 64 * 2**20  # a CLI's binaries and caches beyond this are not where a secret lands


def agent_credential(cao: CaoServer, terminal_id: str) -> str:
    """What the terminal's CAO_MCP_TOKEN holds (derived from the server's token, as cao does)."""
    return credential_for((cao.home / "auth-token").read_text().strip(), terminal_id)


def argv_holding(secret: str, procs: list[psutil.Process]) -> list[list[str]]:
    """The command lines among `procs` that contain `secret`."""
    found = []
    for proc in procs:
        try:
            argv = proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if any(secret in arg for arg in argv):
            found.append(argv)
    return found


def files_holding(secret: str, *roots: Path) -> list[Path]:
    """Regular files under `roots` whose bytes contain `secret` (FIFOs, sockets and huge files skipped)."""
    needle = secret.encode()
    found = []
    for root in roots:
        for path in root.rglob("*"):
            try:
                if path.is_symlink() or not path.is_file() or path.stat().st_size > _LARGEST_FILE:
                    continue
                if needle in path.read_bytes():
                    found.append(path)
            except OSError:
                continue  # gone meanwhile, or not ours to read
    return found
