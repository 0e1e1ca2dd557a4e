"""Configuration: one settings object, read from the environment.

Every process of cao (server, CLI, MCP server, workflow scripts) reads the same
variables, so an isolated instance is just a different CAO_HOME_DIR and port.
Invariant: a `CAO_*` variable that is unset or empty means its default; one that is set
either parses or stops start-up (SettingsError names every bad variable and what it
accepts), never silently becomes the default. Settings are read here and nowhere else;
NOT_SETTINGS and LIGHT_PROCESS_READS list the variables read elsewhere, and why.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click

from .auth_token import TOKEN_FILE_NAME
from .private_files import HomeRefused, private_dir, private_home

DEFAULT_HOME = Path("~/.aws/cli-agent-orchestrator").expanduser()
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9889
DEFAULT_PROVIDER = "kiro_cli"  # the seeds' default provider
# The largest request body cao-server reads: a 1,000,000-character message fits even
# when every character is JSON-escaped as \uXXXX (6 MB), with room for the envelope.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024

# What the word-valued settings accept (lower case; the value is matched case-insensitively).
OUTPUT_SOURCES = ("control", "pipe-pane")  # backends/tmux.py: tmux control mode, or the FIFO fallback
PLACEMENTS = ("local", "least-loaded")  # services/hosts/placement.py
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")  # logging's names (uvicorn's, less trace)
DATABASE_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")  # store/db.py's engine_url
BOOLEAN_WORDS = {**dict.fromkeys(("1", "true", "yes", "on"), True), **dict.fromkeys(("0", "false", "no", "off"), False)}
SHOWN_VALUE_CHARS = 40  # a refused value is quoted up to this length

# Variables read outside Settings, and why there. None of them is a setting a user chooses:
# each is an agent's (or a workflow step's) identity that cao hands to a child process, or
# plumbing between cao's own processes or from the system, so it is read where it is needed.
NOT_SETTINGS: dict[str, str] = {
    "CAO_TERMINAL_ID": "an agent's own terminal, set in its pane; read by its tools, hooks and `cao info`",
    "CAO_HOOK_SECRET": "an agent's hook secret, set in its pane; read by cao-hook",
    "CAO_MCP_TOKEN": "an agent's MCP credential; read by cao-mcp-server (agent_credentials.py)",
    "CAO_MCP_URL": "cao-server's /mcp address as handed to an agent; read by cao-mcp-server",
    "CAO_SUPERVISOR_READY_FD": "the watchdog's pipe to its child cao-server (cli/supervise.py)",
    "CAO_SUPERVISOR_PID": "the watchdog's pid, for its child cao-server (cli/supervise.py)",
    "CAO_WORKFLOW_RUN_ID": "a workflow script's run, set by its driver; read by the cao_workflow shim",
    "CAO_WORKFLOW_GENERATION": "a workflow script's generation; read by the cao_workflow shim",
    "CAO_WORKFLOW_STEP_ID": "a workflow step's identity; read by the cao_workflow shim",
    "CAO_WORKFLOW_INPUTS": "a workflow run's inputs; read by the cao_workflow shim",
    "CAO_API_BASE_URL": "cao-server's address as handed to a workflow script; read by the cao_workflow shim",
    # Not cao's: set by the system or the user's session.
    "NOTIFY_SOCKET": "systemd's notify socket (cli/supervise.py)",
    "INVOCATION_ID": "set by systemd for each unit it starts (cli/supervise.py)",
    "PATH": "where a child process finds its programs",
    "HOME": "the user's home, for a child process",
    "BROWSER": "the user's browser (`cao ui`)",
    "DISPLAY": "whether a browser can open (`cao ui`)",
    "WAYLAND_DISPLAY": "whether a browser can open (`cao ui`)",
    "XDG_RUNTIME_DIR": "a private directory for sockets (runtime_dir.py)",
}
# Also read elsewhere, by a name that is data: the variable a webhook's `secret_env` names in
# settings.json (plugins/webhook.py), and the environment cao-server passes on whole to its
# agents and flows (bootstrap.py), where profiles' ${VAR}s are filled.

# Settings that a light process parses itself, because importing this module (and click)
# would cost it about 3 MB and 30 ms: cao-mcp-server must answer `initialize` within
# 150 ms under 20 MB, cao-hook runs at every CLI event, and the cao_workflow shim never
# imports cao. Their parse refuses what this module refuses (cao-hook drops the event instead:
# a hook must never break its CLI). Paths are relative to src/.
LIGHT_PROCESS_READS: dict[str, frozenset[str]] = {
    "cli_agent_orchestrator/mcp_server/relay.py": frozenset(
        {"CAO_API_HOST", "CAO_API_PORT", "CAO_HOME_DIR", "CAO_AUTH_TOKEN", "CAO_MCP_RECONNECT_SECONDS"}
    ),
    "cli_agent_orchestrator/cli/cao_hook.py": frozenset(
        {"CAO_API_HOST", "CAO_API_PORT", "CAO_HOME_DIR", "CAO_AUTH_TOKEN"}
    ),
    "cao_workflow/_auth.py": frozenset({"CAO_HOME_DIR", "CAO_AUTH_TOKEN"}),
}


class SettingsError(click.ClickException, ValueError):
    """Set variables that cannot be read: `problems` holds one line per variable, each naming
    it, its value and what it accepts.

    A click exception with click's usage-error code (2), so that `cao` and `cao-server` stop
    with this one paragraph and no traceback wherever a command reads its settings (before
    cao-server binds a port or touches tmux); a ValueError for any other caller."""

    exit_code = 2

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(
            f"cao cannot read its settings: {'; '.join(problems)}. "
            "Correct the value, or unset the variable for its default."
        )


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= SHOWN_VALUE_CHARS else raw[:SHOWN_VALUE_CHARS] + "…")


class _EnvReader:
    """Parses variables of one environment strictly, keeping every problem rather than the
    first, so that one start-up names them all. A refused variable yields its default only
    to let the reading go on: `from_env` raises before anything uses it."""

    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ
        self.problems: list[str] = []

    def raw(self, name: str) -> str | None:
        value = self.environ.get(name, "").strip()
        return value or None

    def refuse(self, name: str, raw: str, accepts: str) -> None:
        self.problems.append(f"{name}={_shown(raw)} {accepts}")

    def text(self, name: str, default: str) -> str:
        return self.raw(name) or default

    def flag(self, name: str, default: bool) -> bool:
        raw = self.raw(name)
        if raw is None:
            return default
        if raw.lower() not in BOOLEAN_WORDS:
            self.refuse(name, raw, "must be one of 1/0, true/false, yes/no, on/off")
            return default
        return BOOLEAN_WORDS[raw.lower()]

    def number(self, name: str, default: float, minimum: float) -> float:
        raw = self.raw(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= minimum):
            self.refuse(name, raw, f"must be a number >= {minimum:g}")
            return default
        return value

    def whole(self, name: str, default: int, minimum: int, maximum: int | None = None) -> int:
        raw = self.raw(name)
        if raw is None:
            return default
        try:
            value: int | None = int(raw)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            span = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
            self.refuse(name, raw, f"must be a whole number {span}")
            return default
        return value

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        raw = self.raw(name)
        if raw is None:
            return default
        if raw.lower() not in choices:
            self.refuse(name, raw, f"is not one of: {', '.join(choices)}")
            return default
        return raw.lower()

    def words(self, name: str) -> list[str]:
        """A comma list; every item means something (an origin, a host), so nothing to refuse."""
        return [item.strip() for item in self.environ.get(name, "").split(",") if item.strip()]

    def database_url(self, name: str) -> str | None:
        raw = self.raw(name)
        if raw is None:
            return None
        scheme, sep, rest = raw.partition("://")
        if sep and scheme.lower() in DATABASE_SCHEMES and rest:
            return raw
        # The value is not quoted: a database URL may hold a password.
        said = f"scheme {scheme!r}" if sep else "no scheme"
        self.problems.append(
            f"{name} ({said}) must be a PostgreSQL URL, postgresql://user[:password]@host[:port]/db (or postgres://…)"
        )
        return None


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
    # How long an MCP `handoff` call waits for its worker before it answers `pending` with a job id
    # (the work goes on; get_handoff_result reads it); a call's own `wait` can be shorter or
    # longer. CAO_HANDOFF_WAIT_SECONDS.
    handoff_wait: float = 600.0
    # How long a durable handoff's result that nobody asked for is kept for get_handoff_result
    # before it goes to its caller's inbox; CAO_HANDOFF_UNCLAIMED_SECONDS.
    handoff_unclaimed: float = 60.0
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
    # cao-server's log level (uvicorn's names); the --log-level flag wins; CAO_LOG_LEVEL.
    log_level: str = "info"
    # The hosts `cao install URL` may download from (lower case); empty: github.com and its
    # raw host (profiles/fetch.py); CAO_PROFILE_ALLOWED_HOSTS.
    profile_allowed_hosts: tuple[str, ...] = ()
    # Where `cao install` writes Kiro agent files; None: ~/.kiro/agents; CAO_AGENTS_DIR.
    kiro_agents_dir: Path | None = None
    # How long an agent's tool call that cannot connect (cao-server restarting) is tried
    # again; nothing was sent, so trying again is safe; CAO_MCP_RECONNECT_SECONDS.
    mcp_reconnect_seconds: float = 60.0
    # Memory (memory/): whether a new agent's first task carries its memories in a
    # `<cao-memory>` block (a profile's `memory: false` turns it off for that profile; the
    # memory tools work either way); CAO_MEMORY_ENABLED. The block's budget in characters,
    # markers included; CAO_MEMORY_INJECT_CHARS.
    memory_enabled: bool = True
    memory_inject_chars: int = 4000
    # What the `project` memory scope means for every agent and `cao memory`; None: the git
    # repository of the working directory (or the directory itself); CAO_PROJECT_ID.
    project_id: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings in `environ` (default: this process's environment); SettingsError
        naming every variable that is set but cannot be read."""
        env = _EnvReader(os.environ if environ is None else environ)
        settings = cls(
            home_dir=Path(env.text("CAO_HOME_DIR", str(DEFAULT_HOME))).expanduser().resolve(),
            api_host=env.text("CAO_API_HOST", DEFAULT_HOST),
            api_port=env.whole("CAO_API_PORT", DEFAULT_PORT, 1, 65535),
            event_queue_size=env.whole("CAO_EVENT_BUS_MAX_QUEUE_SIZE", 1024, 1),
            eager_inbox_delivery=env.flag("CAO_EAGER_INBOX_DELIVERY", False),
            sender_id_injection=env.flag("CAO_ENABLE_SENDER_ID_INJECTION", True),
            working_directory_param=env.flag("CAO_ENABLE_WORKING_DIRECTORY", False),
            provider_init_timeout=env.number("CAO_PROVIDER_INIT_TIMEOUT", 60.0, 0.1),
            mcp_request_timeout=env.number("CAO_MCP_REQUEST_TIMEOUT", 30.0, 0.1),
            inbox_sweep_seconds=env.number("CAO_INBOX_SWEEP_SECONDS", 30.0, 0.1),
            cors_origins=env.words("CAO_CORS_ORIGINS"),
            allowed_hosts=env.words("CAO_ALLOWED_HOSTS"),
            output_source=env.choice("CAO_OUTPUT_SOURCE", "control", OUTPUT_SOURCES),
            workflow_script_timeout=env.number("CAO_WORKFLOW_SCRIPT_TIMEOUT", 8700.0, 0.1),
            client_auth_token=env.raw("CAO_AUTH_TOKEN"),
            max_body_bytes=env.whole("CAO_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1),
            db_busy_timeout=env.number("CAO_DB_BUSY_TIMEOUT", 10.0, 0.1),
            # Not checked against the provider registry here: that needs its entry-point scan.
            # A name no provider has is refused, naming this variable, at the first spawn.
            default_provider=env.text("CAO_DEFAULT_PROVIDER", DEFAULT_PROVIDER),
            profile_fetch_timeout=env.number("CAO_PROFILE_FETCH_TIMEOUT", 30.0, 0.1),
            handoff_grace=env.number("CAO_HANDOFF_GRACE_SECONDS", 300.0, 0.0),
            handoff_wait=min(env.number("CAO_HANDOFF_WAIT_SECONDS", 600.0, 0.0), 3600.0),
            handoff_unclaimed=min(env.number("CAO_HANDOFF_UNCLAIMED_SECONDS", 60.0, 0.0), 86400.0),
            ws_allowed_clients=env.words("CAO_WS_ALLOWED_CLIENTS"),
            database_url=env.database_url("CAO_DATABASE_URL"),
            ws_allowed_origins=env.words("CAO_WS_ALLOWED_ORIGINS"),
            placement=env.choice("CAO_PLACEMENT", "local", PLACEMENTS),
            host_dead_after=env.number("CAO_HOST_DEAD_AFTER_SECONDS", 600.0, 1.0),
            header_timeout=env.number("CAO_HEADER_TIMEOUT_SECONDS", 10.0, 0.1),
            body_timeout=env.number("CAO_BODY_TIMEOUT_SECONDS", 60.0, 0.1),
            max_connections_per_user=env.whole("CAO_MAX_CONNECTIONS_PER_USER", 64, 1),
            max_connections=env.whole("CAO_MAX_CONNECTIONS", 0, 0),
            log_level=env.choice("CAO_LOG_LEVEL", "info", LOG_LEVELS),
            mcp_reconnect_seconds=env.number("CAO_MCP_RECONNECT_SECONDS", 60.0, 0.0),
            profile_allowed_hosts=tuple(h.lower().strip("[]") for h in env.words("CAO_PROFILE_ALLOWED_HOSTS")),
            kiro_agents_dir=Path(raw).expanduser() if (raw := env.raw("CAO_AGENTS_DIR")) else None,
            memory_enabled=env.flag("CAO_MEMORY_ENABLED", True),
            memory_inject_chars=env.whole("CAO_MEMORY_INJECT_CHARS", 4000, 200, 100_000),
            project_id=env.raw("CAO_PROJECT_ID"),
        )
        if env.problems:
            raise SettingsError(env.problems)
        return settings

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
