"""tmux client processes (`tmux -L <socket> <command list>`), one per command list, for what
the control channel cannot carry: awaited on the loop, or blocking in a reader thread.
"""

from __future__ import annotations

import asyncio
import os
import subprocess

from .tmux_commands import Reply

# A tmux client process that takes this long is talking to a wedged server.
PROCESS_TIMEOUT_S = 10.0


def client_env() -> dict[str, str]:
    """The environment of a tmux client: we address our own server by -L, never the caller's."""
    env = dict(os.environ)
    env.pop("TMUX", None)
    return env


async def run_client(argv: list[str], args: tuple[str, ...], input_bytes: bytes | None = None) -> Reply:
    """Run one command list as a tmux client process; `input_bytes` is its stdin."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        *args,
        stdin=asyncio.subprocess.PIPE if input_bytes is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=client_env(),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(input_bytes), PROCESS_TIMEOUT_S)
    except TimeoutError:
        await _abandon(proc)
        return Reply(False, [], f"tmux did not answer within {PROCESS_TIMEOUT_S:.0f}s")
    except asyncio.CancelledError:
        # The caller is gone (a stopped backend, a dropped request, a deadline): so is its
        # client, not left running with open pipes that outlive the loop.
        await _abandon(proc)
        raise
    lines = out.decode("utf-8", errors="replace").splitlines()
    return Reply(proc.returncode == 0, [lines] if lines else [], err.decode(errors="replace"))


async def _abandon(proc: asyncio.subprocess.Process) -> None:
    """Kill a client and let go of its pipes now. Reading them to their end would wait as long
    as the server does: a tmux client hands its stdin and stdout to the server, and a stopped
    server (SIGSTOP) holds them open after the client is gone."""
    if proc.returncode is None:
        proc.kill()
    pipes = getattr(proc, "_transport", None)  # asyncio keeps the pipes there (not public)
    if pipes is not None:
        pipes.close()
    await proc.wait()


class BlockingTmux:
    """tmux client processes, run from reader threads (blocking is fine there)."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.env = client_env()

    def __call__(self, *args: str) -> tuple[bool, str]:
        try:
            proc = subprocess.run(
                [*self.argv, *args],
                env=self.env,
                capture_output=True,
                timeout=PROCESS_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, str(exc)
        if proc.returncode != 0:
            return False, proc.stderr.decode("utf-8", "replace")
        return True, proc.stdout.decode("utf-8", "replace")
