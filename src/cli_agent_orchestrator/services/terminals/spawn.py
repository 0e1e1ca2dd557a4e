"""Spawning a terminal: the create request, the profile and provider it resolves to, and the
launch itself (launch file, row, tmux window). A failed launch leaves nothing behind, and a
launch file never outlives the start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...agent_credentials import ENV_VAR as MCP_TOKEN_ENV
from ...agent_credentials import credential_for
from ...auth_token import ensure_token
from ...backends.base import HostPlace, HostPlacement, TerminalBackend
from ...errors import InvalidInput, NotFound
from ...models import MODEL_RE, SAFE_NAME_RE, Terminal, Worktree
from ...profiles.loading import AgentProfile, load_profile
from ...profiles.roles import ToolSet, gives_cao_tools, needs_cao_tools, resolve_tools
from ...providers.base import RESUME_ID, Launch, LaunchContext, Provider
from ...providers.common import mcp_server_argv
from ...providers.registry import get_provider
from ...settings import DEFAULT_PROVIDER, Settings
from ...skills.catalogue import with_skill_catalogue
from ...store import Store
from ...store.hosts import HostTables
from ..hosts.placement import LOCAL, choose
from ..hosts.records import check_name
from ..status.monitor import StatusMonitor
from .engines import check_engine, requested_engine
from .launch_file import env_file, env_file_text, pane_command, write_env_file
from .names import check_not_flow_session, check_terminal_id, normalise_session_name
from .relocate import relocated
from .session_env import SessionEnvs

log = logging.getLogger(__name__)

MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: longer is never a directory
HOOK_SECRET_ENV = "CAO_HOOK_SECRET"
MCP_URL_ENV = "CAO_MCP_URL"  # cao's MCP endpoint as the agent reaches it (the stdio relay reads it)
MCP_PATH = "/mcp"
WORKFLOW_STEP_VARS = ("CAO_WORKFLOW_RUN_ID", "CAO_WORKFLOW_STEP_ID", "CAO_WORKFLOW_GENERATION")


@dataclass
class CreateRequest:
    agent_profile: str
    provider: str | None = None
    session_name: str | None = None
    new_session: bool = True
    working_directory: str | None = None
    caller_id: str | None = None
    model: str | None = None
    allowed_tools: list[str] | None = None
    yolo: bool = False
    wait_ready: bool = True
    use_worktree: bool = False  # the worker gets its own git worktree on a new branch (services/worktrees.py)
    engine: str | None = None  # Kiro CLI's agent engine; ignored, with a note, for other CLIs (engines.py)
    # Extra variables for the agent's pane (e.g. a workflow step's identity).
    env: dict[str, str] | None = None
    # The requester's variables for the agent (`env_vars`, `cao launch --env`): checked, never stored.
    env_vars: dict[str, str] | None = None
    # Where the agent runs: a registered host's name, "local", or None (the placement policy,
    # services/hosts/placement.py; a profile's `host` field comes before the policy).
    host: str | None = None
    # The new terminal's id, chosen by cao beforehand (a handoff records it before the worker
    # exists); None: a fresh one. Never taken from a client.
    terminal_id: str | None = None
    # Set only by a flow's run (flows/runner.py): the one creator of a session named cao-flow-*.
    flow_session: bool = False
    # The launch asks for memory (`cao launch --memory`, `memory_manager`): cao gives every agent
    # its memories already, so this only refuses a launch where memory is off.
    memory: bool = False
    # A conversation of the CLI's own to resume (`--resume-session-id`), for providers that can.
    resume_session_id: str | None = None
    # What workers know of each other (labels.py checks them before anything is created).
    description: str | None = None
    group: list[str] | None = None
    metadata: dict | None = None


MAX_ENV_VARS, MAX_ENV_VALUE = 64, 32 * 1024
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def checked_env_vars(env: Mapping[str, object] | None) -> dict[str, str]:
    """A request's variables for the agent, checked. Errors name the variable, never its value.
    `CAO_*` names are cao's own (the terminal's identity and secrets): refused."""
    out: dict[str, str] = {}
    if len(env or {}) > MAX_ENV_VARS:
        raise InvalidInput(f"env_vars: at most {MAX_ENV_VARS} variables")
    for key, value in (env or {}).items():
        shown = repr(str(key)[:64])
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise InvalidInput(f"env_vars: {shown} is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)")
        if key.upper().startswith("CAO_"):
            raise InvalidInput(f"env_vars: {shown} is reserved: CAO_* variables are set by cao itself")
        if not isinstance(value, str) or "\x00" in value or len(value) > MAX_ENV_VALUE:
            raise InvalidInput(f"env_vars: the value of {shown} must be text without NUL, at most {MAX_ENV_VALUE}")
        out[key] = value
    return out


def check_resume(provider: Provider, session_id: str) -> None:
    """A conversation to resume: only where the CLI can, and only an id (never an option)."""
    if not provider.resumes:
        raise InvalidInput(
            f"provider {provider.name} cannot resume a conversation of its own: --resume-session-id works "
            "with claude_code, codex, gemini_cli and qwen_cli"
        )
    if not RESUME_ID.fullmatch(session_id):
        raise InvalidInput(
            f"resume session id {session_id[:64]!r} is not a conversation id: up to 128 of [A-Za-z0-9._:-], "
            "starting with a letter or digit"
        )


def checked_working_directory(path: str | None) -> str:
    """The directory a request names, checked: absolute, existing, a directory."""
    if path is None:
        return os.getcwd()
    if len(path) > MAX_PATH_CHARS or "\x00" in path:
        raise InvalidInput(f"working directory is not a usable path (at most {MAX_PATH_CHARS} characters, no NUL)")
    try:
        resolved = Path(path).expanduser()
    except RuntimeError:  # ~user of a user that does not exist
        raise InvalidInput(f"working directory {path[:200]!r}: no such user's home") from None
    if not resolved.is_absolute():
        raise InvalidInput(f"working directory must be an absolute path, got {path[:200]!r}")
    try:
        is_dir = resolved.is_dir()
    except OSError as exc:  # e.g. a path component longer than NAME_MAX
        raise InvalidInput(f"working directory {path[:200]!r} is not usable: {exc.strerror}") from None
    if not is_dir:
        raise InvalidInput(f"working directory {path[:200]!r} does not exist or is not a directory")
    return str(resolved)


LAUNCH_FILE_NAME = "launch.env"


def host_environ(place: HostPlace) -> dict[str, str]:
    """What an agent on a host knows of cao: the server through the host's forward, and the
    host's cao home (which holds the token). Nothing of cao-server's own environment goes
    there: the host's login environment is the agent's."""
    return {"CAO_API_HOST": "127.0.0.1", "CAO_API_PORT": str(place.api_port), "CAO_HOME_DIR": place.cao_home}


def awaits_tools(provider: Provider, tools: list[str] | None, yolo: bool) -> bool:
    """An agent given cao's tools, whose CLI lists them as it starts, is ready only once it has."""
    return provider.mcp != "none" and provider.lists_tools_at_start and gives_cao_tools(tools, yolo)


def new_terminal_id() -> str:
    return secrets.token_hex(4)


class Spawner:
    """Starts agents; remembers which are still starting (their launch files are in use)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        backend: TerminalBackend,
        placement: HostPlacement,
        monitor: StatusMonitor,
        environ: Mapping[str, str],
    ):
        """`environ`: cao-server's environment, which every agent inherits."""
        self.settings = settings
        self.store = store
        self.backend = backend
        self.placement = placement
        self.monitor = monitor
        self.session_envs = SessionEnvs()
        self.environ = environ
        self.host_tables = HostTables(store.engine)
        self._session_lock = asyncio.Lock()
        # Until its agent is ready: what a terminal's fallback launch needs (its provider,
        # launch context and environment; secrets included, so kept in memory only).
        self._fallbacks: dict[str, tuple[Provider, LaunchContext, dict[str, str]]] = {}
        self.starting: set[str] = set()  # terminals whose launch file may still be read

    async def resolve(self, req: CreateRequest) -> tuple[AgentProfile, str, str | None]:
        """The profile; the provider: the request's, else the profile's, else the caller's
        (a worker runs where its supervisor runs: the server-wide default may be a CLI that is
        not installed), else the default (CAO_DEFAULT_PROVIDER); and the host (placement.py),
        None for this machine."""
        if req.new_session and req.session_name and not req.flow_session:
            check_not_flow_session(normalise_session_name(req.session_name))
        profile = load_profile(self.settings.home_dir, req.agent_profile, self.environ)
        provider = req.provider or profile.provider
        caller = None
        if req.caller_id is not None:
            caller = await self.store.run(self.store.get_terminal, check_terminal_id(req.caller_id))
        if not provider and caller is not None:
            provider = caller.provider
        host = await self.place(req.host or profile.host, caller.host if caller is not None else None)
        by_default = not provider
        provider = provider or self.settings.default_provider
        # Before the CLI's binary is looked for: a refused engine is the answer even where Kiro is absent.
        ignored = check_engine(requested_engine(req.engine, profile.frontmatter), provider)
        if ignored:
            log.info("%s", ignored)
        try:
            spec = get_provider(provider)  # unknown provider → 400 before anything is allocated
            if req.resume_session_id is not None:
                check_resume(spec, req.resume_session_id)
            if spec.mcp == "none":
                need = needs_cao_tools(profile.role, req.allowed_tools or profile.allowed_tools)
                if need:
                    raise InvalidInput(
                        f"provider {provider} has no MCP client, so its agents cannot have cao's tools "
                        f"(handoff, assign, send_message): it can be a worker, never a supervisor, and "
                        f"profile {profile.name!r} {need}; pick a provider with MCP (docs/providers.md)"
                    )
            if host is not None:  # its CLI is on the host (`cao host check` says), not here
                self.tool_set(req, profile)
                checked_env_vars(req.env_vars)
                return profile, provider, host
            # e.g. Kiro's agent file is missing; may run the CLI's --help, so off the event loop
            unready = await asyncio.to_thread(spec.preflight, profile.name, self.environ)
            if unready and not by_default:
                raise InvalidInput(unready)
            if not os.path.isabs(spec.binary) and shutil.which(spec.binary) is None:
                raise InvalidInput(
                    f"provider {provider}: its CLI `{spec.binary}` is not on cao-server's PATH; "
                    "install it (see docs/providers.md) or pick another provider"
                )
        except InvalidInput as exc:
            if not by_default:
                raise
            # Nobody asked for this provider: say where it came from and how to choose another.
            source = (
                f"{provider} (CAO_DEFAULT_PROVIDER is not set)"
                if provider == DEFAULT_PROVIDER
                else "CAO_DEFAULT_PROVIDER=" + provider
            )
            raise InvalidInput(
                f"no provider given (neither the request nor profile {profile.name!r} names one) "
                f"and cao-server's default, {source}, cannot be used: {exc}"
            ) from None
        if unready:
            raise InvalidInput(unready)
        if req.model is not None and not MODEL_RE.match(req.model):
            raise InvalidInput(f"invalid model {req.model!r}: up to 128 of [A-Za-z0-9._:/-]")
        self.tool_set(req, profile)  # an unknown role or tool → 400 before anything is allocated
        checked_env_vars(req.env_vars)
        if req.memory and not self.settings.memory_enabled:
            raise InvalidInput("memory is off on this cao-server (CAO_MEMORY_ENABLED=false): --memory cannot be given")
        if req.memory and profile.frontmatter.get("memory") is False:
            raise InvalidInput(f"profile {profile.name!r} turns memory off (memory: false): --memory cannot be given")
        return profile, provider, host

    async def place(self, requested: str | None, caller_host: str | None) -> str | None:
        if requested is not None and requested != LOCAL:
            check_name(requested)
        if requested == LOCAL or (requested is None and caller_host is None and self.settings.placement == LOCAL):
            return None  # the common case reads nothing
        hosts = await self.store.run(self.host_tables.list_hosts)
        live = [t.host for t in await self.store.run(self.store.list_terminals, None)]
        return choose(requested, caller_host, hosts, live, self.settings.placement)

    async def remote_workdir(self, path: str | None, host: str) -> str:
        """A working directory on the host: absolute and existing there; default the user's home."""
        if path is None:
            return (await self.placement.place(host)).home
        if len(path) > MAX_PATH_CHARS or "\x00" in path or not path.startswith("/"):
            raise InvalidInput(f"working directory on host {host} must be an absolute path, got {path[:200]!r}")
        if not await self.placement.is_dir(host, path):
            raise InvalidInput(f"working directory {path[:200]!r} does not exist on host {host}")
        return path

    def tool_set(self, req: CreateRequest, profile: AgentProfile) -> ToolSet:
        """The request's tools, else the profile's allowedTools, else its role's defaults."""
        tools = req.allowed_tools or profile.allowed_tools
        return resolve_tools(self.settings.home_dir, profile.name, tools, profile.role, profile.mcp_servers)

    async def spawn(
        self,
        req: CreateRequest,
        profile: AgentProfile,
        provider_name: str,
        workdir: str,
        terminal_id: str | None = None,
        worktree: Worktree | None = None,
        host: str | None = None,
    ) -> Terminal:
        """Launch the agent in a new tmux window, here or on `host`; the terminal is watched from
        its first byte. Its launch file stays until `launch_done` (the caller waits for the agent first)."""
        provider = get_provider(provider_name)
        tools = self.tool_set(req, profile)
        terminal_id = terminal_id or new_terminal_id()
        window_name = (
            f"{profile.name if SAFE_NAME_RE.match(profile.name) else req.agent_profile}-{secrets.token_hex(2)}"
        )
        place = await self.placement.place(host) if host is not None else None
        # On a host the agent reaches cao-server through the host's forward (host_environ).
        mcp_url = (self.settings.base_url if place is None else f"http://127.0.0.1:{place.api_port}") + MCP_PATH
        mcp_token = credential_for(ensure_token(self.settings.auth_token_path), terminal_id)
        # The profile's prompt plus the skills its agents may load (reads the skill folders).
        system_prompt = await asyncio.to_thread(
            with_skill_catalogue, profile.system_prompt, self.settings.home_dir, profile.skills
        )
        async with self._session_lock:
            session = normalise_session_name(req.session_name)
            exists = await self.backend.session_exists(session)
            if req.new_session and exists:
                raise InvalidInput(f"session {session!r} already exists")
            if not req.new_session and not exists:
                raise NotFound(f"session {session!r} not found")
            ctx = LaunchContext(
                terminal_id=terminal_id,
                profile_name=profile.name,
                system_prompt=system_prompt,
                working_directory=workdir,
                home_dir=self.settings.home_dir,
                model=req.model or profile.model,
                allowed_tools=tools.tools,
                yolo=req.yolo,
                # On a host: its own cao-mcp-server (on its PATH), and the host's view of cao.
                mcp_server_argv=mcp_server_argv() if place is None else ["cao-mcp-server"],
                profile_extra=profile.frontmatter,
                environ=self.environ if place is None else host_environ(place),
                hook_channel="fifo" if place is None else "http",
                on_host=place is not None,
                mcp_url=mcp_url,
                mcp_token=mcp_token,
                resume_session_id=req.resume_session_id,
            )
            hook_secret = secrets.token_urlsafe(24)
            launch_file = env_file(self.settings.tmp_dir, terminal_id)
            term = Terminal(
                id=terminal_id,
                session_name=session,
                window_name=window_name,
                provider=provider_name,
                agent_profile=profile.name,
                working_directory=workdir,
                caller_id=req.caller_id,
                model=ctx.model,
                allowed_tools=ctx.allowed_tools,
                worktree=worktree,
                host=host,
                workflow_step={k: v for k, v in (req.env or {}).items() if k in WORKFLOW_STEP_VARS} or None,
                description=req.description,
                group=req.group,
                metadata=req.metadata,
            )
            self.starting.add(terminal_id)
            created = False
            try:
                launch = provider.build_launch(ctx)
                if req.new_session:
                    self.session_envs.started(session, checked_env_vars(req.env_vars))
                agent_env = {
                    **self.session_envs.of(session),  # the session's, then the request's own
                    **checked_env_vars(req.env_vars),
                    **(req.env or {}),
                    "CAO_TERMINAL_ID": terminal_id,
                    HOOK_SECRET_ENV: hook_secret,
                    MCP_URL_ENV: mcp_url,
                    MCP_TOKEN_ENV: mcp_token,
                }
                if place is None:
                    write_env_file(launch_file, self.environ, {**agent_env, **launch.env})
                    command = pane_command(launch_file, launch)
                    if provider.fallback_launch is not None:
                        self._fallbacks[terminal_id] = (provider, ctx, agent_env)
                else:
                    assert host is not None
                    command = await self._stage_on_host(host, place, ctx, {**agent_env, **launch.env}, launch)
                await self.store.run(self.store.add_terminal, term, None, hook_secret)
                self.monitor.watch(terminal_id, provider, awaiting_tools=awaits_tools(provider, tools.tools, req.yolo))
                try:
                    ref = await self.backend.create_window(
                        terminal_id, session, window_name, workdir, command, req.new_session, host=host
                    )
                except BaseException:
                    self.monitor.forget(terminal_id)
                    await self.store.run(self.store.delete_terminal, terminal_id)
                    raise
                await self.store.run(self.store.set_window_id, terminal_id, ref.window_id)
                created = True
            finally:
                if not created:  # nothing of a failed start stays behind: not its secrets either
                    self.launch_done(terminal_id)
                    shutil.rmtree(self.settings.tmp_dir / terminal_id, ignore_errors=True)
                    if host is not None:
                        await self.placement.remove_files(host, f"tmp/{terminal_id}")
        return term

    async def _stage_on_host(
        self, host: str, place: HostPlace, ctx: LaunchContext, env: dict[str, str], launch: Launch
    ) -> str:
        """Carry what the provider wrote for the terminal (here, under the cao home) to the host's
        cao home, with every path into it rewritten; the launch file goes there too. The shell
        line that starts the agent there."""
        here = self.settings.tmp_dir / ctx.terminal_id
        there = f"{place.cao_home}/tmp/{ctx.terminal_id}"
        files, executable, moved = relocated(here, str(here), there, launch, {**host_environ(place), **env})
        files[LAUNCH_FILE_NAME] = env_file_text({}, moved.env_all).encode()
        where = await self.placement.put_files(host, f"tmp/{ctx.terminal_id}", files, executable)
        shutil.rmtree(here, ignore_errors=True)  # the host has them now; nothing stays here
        return pane_command(Path(f"{where}/{LAUNCH_FILE_NAME}"), moved.launch)

    async def fall_back(self, terminal_id: str, window_id: str, workdir: str) -> list[str] | None:
        """Start the provider's fallback launch in place of an agent that did not become ready
        (once per terminal): same window and pane, still watched, its status read afresh.
        The new argv, or None when there is no fallback (left)."""
        pending = self._fallbacks.pop(terminal_id, None)
        if pending is None:
            return None
        provider, ctx, agent_env = pending
        assert provider.fallback_launch is not None  # only such providers are kept
        launch = provider.fallback_launch(ctx)
        if launch is None:
            return None
        launch_file = env_file(self.settings.tmp_dir, terminal_id)
        write_env_file(launch_file, self.environ, {**agent_env, **launch.env})
        self.monitor.forget(terminal_id)
        self.monitor.watch(terminal_id, provider, awaiting_tools=awaits_tools(provider, ctx.allowed_tools, ctx.yolo))
        await self.backend.respawn(window_id, workdir, pane_command(launch_file, launch))
        return launch.argv

    def launch_done(self, terminal_id: str) -> None:
        """The pane has read its launch file (or never will): make sure it is gone."""
        self._fallbacks.pop(terminal_id, None)
        self.starting.discard(terminal_id)
        env_file(self.settings.tmp_dir, terminal_id).unlink(missing_ok=True)
