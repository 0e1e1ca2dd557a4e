"""`cao-server`: run the HTTP API and the agent runtime."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import click
import uvicorn

from ..private_files import append_private
from ..settings import Settings

SHUTDOWN_GRACE_S = 3


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default=None, help="Bind address (default CAO_API_HOST or 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default CAO_API_PORT or 9889).")
@click.option("--log-level", default=lambda: os.environ.get("CAO_LOG_LEVEL", "info"), show_default="info")
def main(host: str | None, port: int | None, log_level: str) -> None:
    """Start cao-server on 127.0.0.1:9889 (loopback only unless --host says otherwise)."""
    if host:
        os.environ["CAO_API_HOST"] = host
    if port:
        os.environ["CAO_API_PORT"] = str(port)
    settings = Settings.from_env()
    settings.ensure_dirs()
    server_log = settings.logs_dir / "server.log"
    append_private(server_log, b"")  # created 0600 before the handler opens it
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.StreamHandler(), logging.FileHandler(server_log)],
    )
    import shutil

    from ..api.app import create_app
    from ..backends.tmux import tmux_missing_message

    if shutil.which("tmux") is None:
        raise click.ClickException(tmux_missing_message())
    # proxy_headers off: cao is never behind a proxy, and a forged X-Forwarded-For must not
    # change who a request seems to come from. Streams (SSE) are cut after a grace period
    # so that a connected UI never keeps the server from stopping.
    config = uvicorn.Config(
        create_app(settings),
        host=settings.api_host,
        port=settings.api_port,
        log_level=log_level.lower(),
        access_log=False,
        proxy_headers=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    # Two listeners: the API's TCP port, and a Unix socket (0600) that only hosts' reverse
    # forwards lead to. A request arriving there came from another machine through cao's own
    # ssh, so its socket's user says nothing: it is admitted by the token alone (api/auth.py).
    listeners = [no_delay(config.bind_socket()), bind_hosts_socket(settings.hosts_socket_path)]
    uvicorn.Server(config).run(sockets=listeners)


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
