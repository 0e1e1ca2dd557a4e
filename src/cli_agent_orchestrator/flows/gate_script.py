"""A flow's gate script: run (an argument list of one, no shell, no arguments) in the flow
file's directory, with a time limit and a bound on what it may print, off the event loop (an
asyncio subprocess). It must print one JSON object with `execute` (true or false) and `output`
(an object whose keys fill the prompt's placeholders). Every way it can fail becomes a
GateFailed whose message says what to fix. Nothing it starts outlives it: it runs as a process
tree (process_tree.py), ended whole at its limit, at its exit, or when cao-server stops.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import CaoError
from ..process_tree import kill_tree, start_tree

GATE_TIMEOUT_S = 30.0
MAX_GATE_STDOUT = 1024 * 1024  # a gate decides and passes a few values, not a data set
STDERR_TAIL = 2000  # the end of stderr quoted in a failure
_CHUNK = 65536
REAP_S = 5.0  # how long a killed script's pipes may take to close
log = logging.getLogger(__name__)


class GateFailed(CaoError):
    """The gate script could not decide: missing, crashed, too slow, or printed no decision."""

    http_status = 400


@dataclass(frozen=True)
class GateDecision:
    execute: bool
    output: dict[str, Any] = field(default_factory=dict)


async def run_gate(script: str, cwd: str, env: Mapping[str, str], timeout: float = GATE_TIMEOUT_S) -> GateDecision:
    try:
        proc = await start_tree(
            [script],
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError:
        if os.path.exists(script):
            raise GateFailed(
                f"gate script {script} cannot be run: the interpreter its #! line names is missing"
            ) from None
        raise GateFailed(f"gate script {script} does not exist") from None
    except PermissionError:
        raise GateFailed(f"gate script {script} is not executable (chmod +x it)") from None
    except OSError as exc:
        hint = " (does it start with a #! line?)" if exc.errno == errno.ENOEXEC else ""
        raise GateFailed(f"gate script {script} cannot be run: {exc.strerror}{hint}") from None
    assert proc.stdout is not None and proc.stderr is not None
    stderr_tail = asyncio.ensure_future(_read_tail(proc.stderr))
    failure = None
    try:
        async with asyncio.timeout(timeout):  # one deadline for reading and for the exit
            stdout = await _read_capped(proc.stdout)
            if stdout is not None:
                stderr = await stderr_tail
                code = await proc.wait()
            else:
                failure = f"printed more than {MAX_GATE_STDOUT // 1024} KiB"
    except TimeoutError:
        failure = f"did not finish within {timeout:.0f}s"
    except BaseException:  # cancelled (the server is stopping): leave nothing behind
        stderr_tail.cancel()
        _kill(proc)
        raise
    if failure is not None:
        stderr_tail.cancel()
        await asyncio.wait([stderr_tail])  # a stream takes one reader at a time; _reap reads next
        await _reap(proc)
        raise GateFailed(f"gate script {script} {failure}; it was stopped")
    assert stdout is not None
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = stderr.decode("utf-8", "replace").strip()
        raise GateFailed(f"gate script {script} {how}" + (f": {tail}" if tail else ""))
    return parse_decision(stdout.decode("utf-8", "replace"), script)


def parse_decision(text: str, script: str) -> GateDecision:
    shape = 'print one JSON object: {"execute": true|false, "output": {...}}'
    try:
        data = json.loads(text)
    except ValueError:
        shown = text.strip()[:200] or "nothing"
        raise GateFailed(f"gate script {script} must {shape}; it printed {shown!r}") from None
    if not isinstance(data, dict) or "execute" not in data or "output" not in data:
        raise GateFailed(f"gate script {script} must {shape}; it printed {text.strip()[:200]!r}")
    if not isinstance(data["execute"], bool):
        raise GateFailed(f"gate script {script}: `execute` must be true or false, not {data['execute']!r:.80}")
    output = data["output"]
    if data["execute"] and not isinstance(output, dict):
        raise GateFailed(f"gate script {script}: `output` must be an object when `execute` is true")
    return GateDecision(data["execute"], output if isinstance(output, dict) else {"value": output})


async def _read_capped(stream: asyncio.StreamReader) -> bytes | None:
    """What the script printed; None once it passes MAX_GATE_STDOUT."""
    data = bytearray()
    while chunk := await stream.read(_CHUNK):
        data += chunk
        if len(data) > MAX_GATE_STDOUT:
            return None
    return bytes(data)


async def _read_tail(stream: asyncio.StreamReader) -> bytes:
    tail = b""
    while chunk := await stream.read(_CHUNK):
        tail = (tail + chunk)[-STDERR_TAIL:]
    return tail


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill the script and everything it started, and collect it. Its pipes are drained to their
    end first: asyncio reports the exit only once both are closed, and a full pipe stays open."""
    await asyncio.to_thread(_kill, proc)  # reads /proc: off the event loop
    try:
        async with asyncio.timeout(REAP_S):
            assert proc.stdout is not None and proc.stderr is not None
            await asyncio.gather(_drain(proc.stdout), _drain(proc.stderr))
            await proc.wait()
    except TimeoutError:  # a descendant escaped the tree (no subreaper here) and holds a pipe open
        log.warning("gate script (pid %d) was killed, but its output pipes stayed open", proc.pid)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(_CHUNK):
        pass


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:  # else its pid may be another process's by now
        kill_tree(proc.pid)
