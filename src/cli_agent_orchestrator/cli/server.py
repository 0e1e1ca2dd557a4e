"""`cao-server`: run the HTTP API and the agent runtime (or, with --supervise, a watchdog that
runs it and starts it again if it dies)."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import sys
from pathlib import Path

import click

from ..private_files import append_private
from ..settings import LOG_LEVELS, Settings

SHUTDOWN_GRACE_S = 3
# File descriptors cao-server keeps for itself beside its connections: the database, logs,
# the tmux control client and its pipes, hook FIFOs, ssh links. A quarter of the limit, at least
# this many.
RESERVED_FDS = 256
# The soft open-file limit is raised towards the hard one, to at most this: plenty of
# connections, and not a number that makes the agents' CLIs (which inherit it) slow to start.
WANTED_OPEN_FILES = 65536
# The largest request line plus headers h11 buffers before it answers 431.
MAX_HEADER_BYTES = 16 * 1024


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default=None, help="Bind address (default CAO_API_HOST or 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port (default CAO_API_PORT or 9889).")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default=None,
    help="Log level (default CAO_LOG_LEVEL or info).",
)
@click.option(
    "--supervise",
    is_flag=True,
    help="Run under a watchdog that starts cao-server again (and so re-adopts its agents) if it dies.",
)
def main(host: str | None, port: int | None, log_level: str | None, supervise: bool) -> None:
    """Start cao-server on 127.0.0.1:9889 (loopback only unless --host says otherwise)."""
    # The flags go into the environment, which the watchdog's child and the agents inherit.
    if host:
        os.environ["CAO_API_HOST"] = host
    if port:
        os.environ["CAO_API_PORT"] = str(port)
    # First, before any port or tmux: a setting that cannot be read stops here, exit code 2
    # with every bad variable named (SettingsError is a click exception).
    settings = Settings.from_env()
    log_level = (log_level or settings.log_level).lower()
    settings.ensure_dirs()
    if supervise:
        from .supervise import supervise as run_watchdog

        argv = [sys.executable, "-m", "cli_agent_orchestrator.cli.server", "--log-level", log_level]
        sys.exit(run_watchdog(argv, settings.logs_dir / "server.log"))
    serve(settings, log_level)


def serve(settings: Settings, log_level: str) -> None:
    import shutil

    import uvicorn

    from ..api.app import create_app
    from ..api.connections import ConnectionLimits, guarded_protocols, quiet_accept_pauses
    from ..backends.tmux import tmux_missing_message
    from .supervise import ReadyNotice

    class ReadyServer(uvicorn.Server):
        """Tells a watchdog (or systemd) that the server is up, once its runtime has started."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            quiet_accept_pauses(asyncio.get_running_loop())
            await super().startup(sockets=sockets)
            if not self.should_exit:
                notice.send()

    notice = ReadyNotice.take_from_env()  # before the runtime copies the environment
    open_files = raise_open_file_limit()
    _log_to(settings.logs_dir / "server.log", log_level)
    if shutil.which("tmux") is None:
        raise click.ClickException(tmux_missing_message())
    limits = ConnectionLimits(
        owner_uid=os.geteuid(),
        per_user=settings.max_connections_per_user,
        total=settings.max_connections or max(1, open_files - max(RESERVED_FDS, open_files // 4)),
        header_timeout=settings.header_timeout,
        body_timeout=settings.body_timeout,
    )
    http, ws = guarded_protocols(limits)
    app = create_app(settings)
    app.state.connections = limits
    app.state.supervision = notice.supervision
    # proxy_headers off: cao is never behind a proxy, and a forged X-Forwarded-For must not
    # change who a request seems to come from. Streams (SSE) are cut after a grace period
    # so that a connected UI never keeps the server from stopping. log_config=None: uvicorn
    # would otherwise reconfigure logging and close our handlers (see _log_to).
    config = uvicorn.Config(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_level=log_level.lower(),
        log_config=None,
        access_log=False,
        proxy_headers=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        http=http,
        ws=ws,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    # Two listeners: the API's TCP port, and a Unix socket (0600) that only hosts' reverse
    # forwards lead to. A request arriving there came from another machine through cao's own
    # ssh, so its socket's user says nothing: it is admitted by the token alone (api/auth.py).
    listeners = [no_delay(config.bind_socket()), bind_hosts_socket(settings.hosts_socket_path)]
    ReadyServer(config).run(sockets=listeners)


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit towards the hard one; the soft limit now in force.

    Why: 1,024 (a common default) is a few hundred held connections away from EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = WANTED_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, WANTED_OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else WANTED_OPEN_FILES


class _LogFile(logging.FileHandler):
    """The server log, which never raises: with no file descriptor left (EMFILE), a record that
    cannot be written is counted and the count written with the next one that can. A logging
    call that raised there used to end cao-server (the loop's exception handler logs)."""

    lost = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.lost:
                lost, self.lost = self.lost, 0
                note = logging.LogRecord(record.name, logging.WARNING, "", 0, "%d log records lost", (lost,), None)
                super().emit(note)
            super().emit(record)
        except OSError:
            self.lost += 1


def _log_to(path: Path, level: str) -> None:
    append_private(path, b"")  # created 0600 before the handler opens it
    root = logging.getLogger()
    root.setLevel(level.upper())
    form = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in (logging.StreamHandler(), _LogFile(path)):
        handler.setFormatter(form)
        root.addHandler(handler)


def no_delay(sock: socket.socket) -> socket.socket:
    """TCP_NODELAY on the listener, which Linux passes on to every accepted connection.

    Why: asyncio sets it only on sockets whose `proto` is IPPROTO_TCP, and uvicorn's
    bind_socket() makes them with proto 0. Without it, a response written in two pieces
    (headers, then body) waits for the client's delayed ACK: 40 ms on every request after
    the first on a kept-alive connection."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def bind_hosts_socket(path: Path) -> socket.socket:
    """The Unix socket hosts' reverse forwards lead to (a stale one from a crash is replaced)."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock


if __name__ == "__main__":
    main()
