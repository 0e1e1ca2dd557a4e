"""The one long-lived SSH connection to a host: an `ssh -M` master process cao owns, through
which every tmux command, the `tmux -C` client, file copies and the reverse forward travel
(each as a multiplexed session, so none pays a handshake).

The caller gives the ssh words that name the host (`destination`: options from the host
record, then `--` and the host); this module adds only multiplexing, keep-alive and its
own socket. Remote commands are lines of fixed words, each quoted (`shlex.join`): nothing
a client or agent sends becomes a remote shell word. When the master ends (network cut,
sshd restart, kill) every session on it ends too, which is how the backend learns of it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 20.0  # ConnectTimeout (10 s) plus the login
COMMAND_TIMEOUT_S = 30.0
# A dead peer is noticed after ALIVE_INTERVAL_S * ALIVE_COUNT seconds without an answer.
ALIVE_INTERVAL_S, ALIVE_COUNT = 5, 3
_PORT = re.compile(rb"\A\s*([0-9]{1,5})\s*\Z")


class LinkDown(ConnectionError):
    """The host cannot be reached now; the reason says why, in one line."""


@dataclass(frozen=True)
class LinkResult:
    exit_code: int | None  # None: killed after the timeout
    stdout: bytes
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class SshLink:
    def __init__(
        self,
        destination: Sequence[str],
        control_path: Path,
        env: Mapping[str, str] | None = None,
        describe_failure: Callable[[str], str] | None = None,
    ):
        """`destination`: ssh options naming the host, ending with `--` and the host.
        `describe_failure(stderr)`: ssh's stderr → a one-line reason (with what to do)."""
        self.destination = list(destination)
        self.control_path = control_path
        self.env = dict(env) if env is not None else None
        self.describe_failure = describe_failure or _last_line
        self.proc: asyncio.subprocess.Process | None = None
        self._stderr_task: asyncio.Task | None = None
        self._stderr = b""

    def _common(self) -> list[str]:
        return ["-o", f"ControlPath={self.control_path}", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.alive and self.proc is not None else None

    async def open(self) -> None:
        """Start the master and wait until it takes sessions; LinkDown with ssh's reason if not."""
        if self.alive:
            return
        if self.control_path.exists():  # a master of a server that was killed: end it, then its socket
            await self._control("exit", timeout=5)
            self.control_path.unlink(missing_ok=True)
        argv = [
            "ssh",
            "-M",
            "-N",
            "-T",
            *self._common(),
            "-o",
            "ControlPersist=no",
            "-o",
            f"ServerAliveInterval={ALIVE_INTERVAL_S}",
            "-o",
            f"ServerAliveCountMax={ALIVE_COUNT}",
            "-o",
            "ExitOnForwardFailure=yes",
            *self.destination,
        ]
        self._stderr = b""
        self.proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            start_new_session=True,  # a ^C to cao-server's terminal is not the host's
        )
        self._stderr_task = asyncio.get_running_loop().create_task(self._drain_stderr(self.proc))
        deadline = asyncio.get_running_loop().time() + OPEN_TIMEOUT_S
        while True:
            if self.proc.returncode is not None:
                await asyncio.gather(self._stderr_task, return_exceptions=True)
                raise LinkDown(self.describe_failure(self._stderr.decode("utf-8", "replace")))
            if self.control_path.exists() and (await self._control("check", timeout=5)).ok:
                return
            if asyncio.get_running_loop().time() > deadline:
                await self.close()
                raise LinkDown(f"the ssh connection did not come up within {OPEN_TIMEOUT_S:g}s")
            await asyncio.sleep(0.05)

    async def _drain_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(4096):
            self._stderr = (self._stderr + chunk)[-8192:]

    def last_error(self) -> str:
        text = self._stderr.decode("utf-8", "replace")
        return self.describe_failure(text) if text.strip() else "the ssh connection ended"

    async def check(self) -> bool:
        """The master lives and takes sessions (a session on a dead master would quietly make
        a connection of its own)."""
        return self.alive and self.control_path.exists() and (await self._control("check", timeout=5)).ok

    async def wait_closed(self) -> None:
        if self.proc is not None:
            await self.proc.wait()

    async def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._stderr_task is not None:
            await asyncio.gather(self._stderr_task, return_exceptions=True)
        self.control_path.unlink(missing_ok=True)

    # --- sessions over the master ----------------------------------------------------
    def argv(self, words: Sequence[str]) -> list[str]:
        """The argv of one session running `words` on the host (a mux client of the master)."""
        return ["ssh", "-T", *self._common(), "-o", "ControlMaster=no", *self.destination, shlex.join(words)]

    async def run(
        self, words: Sequence[str], input_bytes: bytes | None = None, timeout: float = COMMAND_TIMEOUT_S
    ) -> LinkResult:
        if not self.alive:
            raise LinkDown("not connected")
        return await _run(self.argv(words), input_bytes, timeout, self.env)

    async def forward(self, remote_port: int, local_socket: str) -> int:
        """A reverse forward from the host's 127.0.0.1:`remote_port` (0: any free one) to our
        Unix socket `local_socket`; the port it got."""
        spec = f"127.0.0.1:{int(remote_port)}:{local_socket}"
        result = await self._control("forward", "-R", spec)
        if not result.ok:
            raise LinkDown(f"the host refused the reverse forward to port {remote_port}: {result.stderr.strip()[:200]}")
        match = _PORT.match(result.stdout)
        return int(match[1]) if match else int(remote_port)

    async def _control(self, command: str, *extra: str, timeout: float = 10.0) -> LinkResult:
        argv = ["ssh", *self._common(), "-O", command, *extra, *self.destination]
        return await _run(argv, None, timeout, self.env)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "ssh failed and said nothing"


async def _run(argv: list[str], input_bytes: bytes | None, timeout: float, env) -> LinkResult:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if input_bytes is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(input_bytes), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return LinkResult(None, b"", f"no answer within {timeout:g}s")
    except asyncio.CancelledError:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    return LinkResult(proc.returncode, out, err.decode("utf-8", "replace"))
