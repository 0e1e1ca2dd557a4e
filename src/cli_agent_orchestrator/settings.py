"""Configuration: one settings object, read from the environment.

Every process of cao (server, CLI, MCP server, workflow scripts) reads the same
variables, so an isolated instance is just a different CAO_HOME_DIR and port.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from .auth_token import TOKEN_FILE_NAME
from .private_files import HomeRefused, private_dir, private_home

DEFAULT_HOME = Path("~/.aws/cli-agent-orchestrator").expanduser()
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9889
DEFAULT_PROVIDER = "kiro_cli"  # the seeds' default provider
# The largest request body cao-server reads: a 1,000,000-character message fits even
# when every character is JSON-escaped as \uXXXX (6 MB), with room for the envelope.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def _env_max_body_bytes() -> int:
    raw = os.environ.get("CAO_MAX_BODY_BYTES", "").strip()
    try:
        return int(raw) if raw and int(raw) > 0 else DEFAULT_MAX_BODY_BYTES
    except ValueError:
        return DEFAULT_MAX_BODY_BYTES


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


@dataclass(frozen=True)
class Settings:
    home_dir: Path
    api_host: str
    api_port: int
    # Per-subscriber event queue bound (seed 003); output events beyond it are
    # dropped and logged, status events never are.
    event_queue_size: int
    eager_inbox_delivery: bool
    sender_id_injection: bool
    working_directory_param: bool
    provider_init_timeout: float
    mcp_request_timeout: float
    # Safety net only: delivery is driven by status events; this sweep catches
    # anything an event could not (e.g. a message posted during a restart).
    inbox_sweep_seconds: float
    cors_origins: list[str]
    allowed_hosts: list[str]
    output_source: str  # "control" (tmux -C) or "pipe-pane"
    # Wall-clock limit of one workflow-script drive; then SIGTERM, 5 s, SIGKILL.
    workflow_script_timeout: float = 8700.0
    # CAO_AUTH_TOKEN: the token a client sends instead of reading `auth_token_path` (a
    # client that cannot read the server's home). The server itself only trusts the file.
    client_auth_token: str | None = None
    # One limit for every request body (413 above it); CAO_MAX_BODY_BYTES.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # The provider of an agent when neither the request, its profile nor its caller names one.
    default_provider: str = "kiro_cli"
    # The whole of one `cao install URL` download (connect, headers, body, redirects), so a
    # server that drips bytes cannot hold an install open; CAO_PROFILE_FETCH_TIMEOUT.
    profile_fetch_timeout: float = 30.0
    # How long a statement keeps retrying a database another process holds locked before
    # the request is answered 503 (status changes are kept and written later, never lost).
    db_busy_timeout: float = 10.0
    # How long a handed-off worker that stopped at a question is kept for its caller to answer
    # (`answer_user_prompt`) before it is removed; CAO_HANDOFF_GRACE_SECONDS.
    handoff_grace: float = 300.0
    # The terminal WebSocket (/terminals/{id}/ws): client addresses beside loopback, and
    # origins beside the server's own and the CORS list (`*` = any, for each).
    ws_allowed_clients: list[str] = field(default_factory=list)
    # CAO_DATABASE_URL: a PostgreSQL database (postgresql://user@host:port/db) instead of
    # the home's SQLite file; same schema and migrations. None: SQLite.
    database_url: str | None = None
    ws_allowed_origins: list[str] = field(default_factory=list)
    # Where an agent that names no host runs (services/hosts/placement.py): "local" (this
    # machine) or "least-loaded" (the active host with room and the fewest agents); CAO_PLACEMENT.
    placement: str = "local"
    # A host unreachable this long has its agents marked gone; CAO_HOST_DEAD_AFTER_SECONDS.
    host_dead_after: float = 600.0
    # The connection layer (api/connections.py). A request's headers must arrive within
    # CAO_HEADER_TIMEOUT_SECONDS of its first byte (or of the connection), its body within
    # CAO_BODY_TIMEOUT_SECONDS of its headers; 408 / closed past them.
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    # Connections one other local user (or all peers of unknown user together) may hold at
    # once; the server's own user is bounded only by CAO_MAX_CONNECTIONS; CAO_MAX_CONNECTIONS_PER_USER.
    max_connections_per_user: int = 64
    # Every connection together; 0: the open-file limit less what cao-server keeps for its own
    # files, pipes and tmux clients (cli/server.py); CAO_MAX_CONNECTIONS.
    max_connections: int = 0

    @classmethod
    def from_env(cls) -> Settings:
        home = Path(os.environ.get("CAO_HOME_DIR") or DEFAULT_HOME).expanduser().resolve()
        port_raw = os.environ.get("CAO_API_PORT") or str(DEFAULT_PORT)
        try:
            port = int(port_raw)
        except ValueError:
            raise SystemExit(f"CAO_API_PORT must be a number, got {port_raw!r}") from None
        try:
            queue = max(1, int(os.environ.get("CAO_EVENT_BUS_MAX_QUEUE_SIZE", "1024")))
        except ValueError:
            queue = 1024
        return cls(
            home_dir=home,
            api_host=os.environ.get("CAO_API_HOST") or DEFAULT_HOST,
            api_port=port,
            event_queue_size=queue,
            eager_inbox_delivery=_env_bool("CAO_EAGER_INBOX_DELIVERY", False),
            sender_id_injection=_env_bool("CAO_ENABLE_SENDER_ID_INJECTION", True),
            working_directory_param=_env_bool("CAO_ENABLE_WORKING_DIRECTORY", False),
            provider_init_timeout=_env_float("CAO_PROVIDER_INIT_TIMEOUT", 60.0),
            mcp_request_timeout=_env_float("CAO_MCP_REQUEST_TIMEOUT", 30.0),
            inbox_sweep_seconds=_env_float("CAO_INBOX_SWEEP_SECONDS", 30.0),
            cors_origins=_env_list("CAO_CORS_ORIGINS"),
            allowed_hosts=_env_list("CAO_ALLOWED_HOSTS"),
            output_source=os.environ.get("CAO_OUTPUT_SOURCE", "control"),
            workflow_script_timeout=_env_float("CAO_WORKFLOW_SCRIPT_TIMEOUT", 8700.0),
            client_auth_token=os.environ.get("CAO_AUTH_TOKEN") or None,
            max_body_bytes=_env_max_body_bytes(),
            db_busy_timeout=max(0.1, _env_float("CAO_DB_BUSY_TIMEOUT", 10.0)),
            default_provider=os.environ.get("CAO_DEFAULT_PROVIDER", "").strip() or DEFAULT_PROVIDER,
            profile_fetch_timeout=max(0.1, _env_float("CAO_PROFILE_FETCH_TIMEOUT", 30.0)),
            handoff_grace=max(0.0, _env_float("CAO_HANDOFF_GRACE_SECONDS", 300.0)),
            ws_allowed_clients=_env_list("CAO_WS_ALLOWED_CLIENTS"),
            database_url=os.environ.get("CAO_DATABASE_URL", "").strip() or None,
            ws_allowed_origins=_env_list("CAO_WS_ALLOWED_ORIGINS"),
            placement=os.environ.get("CAO_PLACEMENT", "").strip().lower() or "local",
            host_dead_after=max(1.0, _env_float("CAO_HOST_DEAD_AFTER_SECONDS", 600.0)),
            header_timeout=max(0.1, _env_float("CAO_HEADER_TIMEOUT_SECONDS", 10.0)),
            body_timeout=max(0.1, _env_float("CAO_BODY_TIMEOUT_SECONDS", 60.0)),
            max_connections_per_user=max(1, int(_env_float("CAO_MAX_CONNECTIONS_PER_USER", 64))),
            max_connections=max(0, int(_env_float("CAO_MAX_CONNECTIONS", 0))),
        )

    @property
    def base_url_is_loopback(self) -> bool:
        """Clients on this machine reach the server over loopback (where it knows their user)."""
        host = self.api_host.strip("[]")
        if host in ("0.0.0.0", "::", "", "localhost"):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @property
    def base_url(self) -> str:
        host = self.api_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.api_port}"

    # --- the layout of the cao home -------------------------------------------------
    @property
    def db_path(self) -> Path:
        return self.home_dir / "db" / "cli-agent-orchestrator.db"

    @property
    def logs_dir(self) -> Path:
        return self.home_dir / "logs"

    @property
    def terminal_logs_dir(self) -> Path:
        return self.home_dir / "logs" / "terminal"

    @property
    def tmp_dir(self) -> Path:
        return self.home_dir / "tmp"

    @property
    def fifo_dir(self) -> Path:
        """FIFOs of the pipe-pane output source (CAO_OUTPUT_SOURCE=pipe-pane)."""
        return self.home_dir / "fifos"

    @property
    def agent_store_dir(self) -> Path:
        return self.home_dir / "agent-store"

    @property
    def workflows_dir(self) -> Path:
        return self.home_dir / "workflows"

    @property
    def workflow_runs_dir(self) -> Path:
        """Frozen script snapshots, one directory per run (the journal holds the source)."""
        return self.home_dir / "workflow-runs"

    @property
    def hosts_socket_path(self) -> Path:
        """The Unix socket (0600) where hosts' reverse forwards reach cao-server: beside the
        ssh control sockets, in a private directory short enough for a socket path."""
        from .runtime_dir import socket_dir

        return socket_dir(self.tmp_dir) / "api.sock"

    @property
    def auth_token_path(self) -> Path:
        """The bearer token that admits any client (0600, created by the server at start)."""
        return self.home_dir / TOKEN_FILE_NAME

    @property
    def tmux_socket_name(self) -> str:
        """One tmux server per cao home, so two instances never see each other's agents.

        The default home uses the plain name `cao` (easy to type: `tmux -L cao attach`).
        """
        if self.home_dir == DEFAULT_HOME.resolve():
            return "cao"
        digest = hashlib.sha1(str(self.home_dir).encode()).hexdigest()[:8]
        return f"cao-{digest}"

    def ensure_dirs(self) -> None:
        """The home and its directories, 0700. A home that exists must already be this user's
        alone: cao stops with the reason (SystemExit) rather than chmod someone's directory."""
        try:
            private_home(self.home_dir)
        except HomeRefused as exc:
            raise SystemExit(str(exc)) from None
        # Only this user may read what cao keeps: prompts, scrollbacks, secrets, the token.
        for path in (
            self.db_path.parent,
            self.logs_dir,
            self.terminal_logs_dir,
            self.tmp_dir,
            self.agent_store_dir,
            self.workflows_dir,
        ):
            private_dir(path)
