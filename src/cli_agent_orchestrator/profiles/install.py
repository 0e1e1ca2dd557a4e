"""`cao install` (and POST /agents/profiles/install): put a profile where cao launches it
from, and write the one file its provider needs to find cao's tools.

SOURCE is a profile name (the lookup order, built-ins included), a local `.md` file (only
when the caller allows files: the CLI, never HTTP) or a URL on the allow-list
(profile_fetch). What is written: the profile as given, to `<home>/agent-store/NAME.md`
(`context_file`); `--env` values, to `<home>/.env`; for kiro_cli the agent JSON
(`agent_file`, providers/kiro_agent.py). The other providers get their configuration per
terminal at launch, so they need no artefact, and no user's own CLI configuration is written.
Invariant: everything is checked before the first write, and the files are replaced
together (temp file + rename each, 0600) or, on any error, left exactly as they were; the
`.env` is read and replaced under its write lock (env_file), as `cao env` does.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import InvalidInput, NotFound
from ..models import SAFE_NAME_RE
from ..private_files import DIR_MODE, FILE_MODE, private_home, replace_private
from ..providers.registry import provider_names
from ..settings import Settings
from .catalog import referenced_variables
from .env_file import check_values, env_path, env_text_with, env_write_lock, read_env_values
from .fetch import FETCH_DEADLINE_S, allowed_hosts, fetch_profile_text, is_url, url_file_stem
from .kiro_agent import agent_document
from .loading import AgentProfile, parse_profile, profile_dirs, profile_paths
from .roles import resolve_tools

KIRO = "kiro_cli"
PROFILE_ONLY = (
    "{provider} needs no file of its own: cao gives it the profile's prompt, tools and "
    "cao-mcp-server in per-terminal settings at launch"
)


class InstallFailed(InvalidInput):
    """The install was refused; nothing was written."""


@dataclass(frozen=True)
class InstallConfig:
    """Where install reads and writes, passed in by the entry point (CLI or server)."""

    home: Path
    default_provider: str
    kiro_agents_dir: Path  # CAO_AGENTS_DIR, else ~/.kiro/agents
    allowed_hosts: tuple[str, ...]  # CAO_PROFILE_ALLOWED_HOSTS
    mcp_server_argv: list[str]  # how this installation starts cao-mcp-server
    fetch_timeout: float = FETCH_DEADLINE_S  # the whole download of a URL; CAO_PROFILE_FETCH_TIMEOUT

    @classmethod
    def from_settings(cls, settings: Settings, mcp_server_argv: list[str]) -> InstallConfig:
        return cls(
            settings.home_dir,
            settings.default_provider,
            settings.kiro_agents_dir or Path.home() / ".kiro" / "agents",
            allowed_hosts(settings.profile_allowed_hosts),
            mcp_server_argv,
            settings.profile_fetch_timeout,
        )


@dataclass(frozen=True)
class InstallResult:
    success: bool
    message: str
    agent_name: str
    context_file: str
    agent_file: str | None
    unresolved_vars: list[str] = field(default_factory=list)
    source_kind: str = "name"  # name | file | url
    provider: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Source:
    text: str
    fallback_name: str
    kind: str


def _read_source(source: str, config: InstallConfig, allow_files: bool, fetch: Callable[[str], str]) -> _Source:
    if is_url(source):
        return _Source(fetch(source), url_file_stem(source), "url")
    path = Path(source).expanduser()
    looks_like_path = path.suffix == ".md" or "/" in source or os.sep in source or source.startswith(".")
    if looks_like_path or (allow_files and path.is_file()):
        if not allow_files:
            raise InstallFailed(
                f"source {source!r} is a path: only a profile name or an allow-listed https URL can be "
                "installed over HTTP (install a local file with `cao install FILE`)"
            )
        if not path.is_file():
            raise InstallFailed(f"profile file {source!r} not found")
        try:
            return _Source(path.read_text(encoding="utf-8"), path.stem, "file")
        except (OSError, UnicodeDecodeError) as exc:
            raise InstallFailed(f"cannot read {path}: {exc}") from None
    if not SAFE_NAME_RE.match(source):
        raise InstallFailed(f"invalid profile name {source!r}: use 1-64 of [A-Za-z0-9_-], not starting with '-'")
    for candidate, _ in profile_paths(config.home, source):
        if candidate.is_file():
            return _Source(candidate.read_text(encoding="utf-8", errors="replace"), source, "name")
    looked = ", ".join(str(d) for d, kind in profile_dirs(config.home) if kind != "built-in")
    what = (
        "a profile file nor a built-in or installed profile" if allow_files else "a built-in nor an installed profile"
    )
    raise InstallFailed(f"{source!r} is neither {what} (looked in {looked} and the built-ins)")


def _check_profile_text(src: _Source) -> AgentProfile:
    if not src.text.lstrip("\ufeff").startswith("---"):
        raise InstallFailed(
            f"the {src.kind} {src.fallback_name!r} is not an agent profile: it must start with YAML "
            "frontmatter between '---' lines (for GitHub, use the file's raw URL)"
        )
    profile = parse_profile(src.text, src.fallback_name, src.kind)
    if not SAFE_NAME_RE.match(profile.name):
        raise InstallFailed(f"invalid profile name {profile.name!r}: use 1-64 of [A-Za-z0-9_-], not starting with '-'")
    return profile


def _provider(requested: str | None, profile: AgentProfile, config: InstallConfig) -> str:
    provider = requested or profile.provider or config.default_provider
    known = provider_names()
    if not isinstance(provider, str) or provider not in known:
        raise InstallFailed(f"unknown provider {provider!r} (known: {', '.join(sorted(known))})")
    return provider


def install_profile(
    source: str,
    config: InstallConfig,
    *,
    provider: str | None = None,
    env_vars: Mapping[str, str] | None = None,
    allow_files: bool,
    fetch: Callable[[str], str] | None = None,
) -> InstallResult:
    """Install `source` for `provider` (else the profile's, else the default); InstallFailed
    (a 400) names the problem, and then nothing has been written."""
    try:
        return _install(source, config, provider, dict(env_vars or {}), allow_files, fetch)
    except InstallFailed:
        raise
    except (InvalidInput, NotFound) as exc:
        raise InstallFailed(str(exc)) from None


def _install(
    source: str,
    config: InstallConfig,
    requested_provider: str | None,
    env_vars: dict[str, str],
    allow_files: bool,
    fetch: Callable[[str], str] | None,
) -> InstallResult:
    fetcher = fetch or (lambda url: fetch_profile_text(url, config.allowed_hosts, deadline=config.fetch_timeout))
    src = _read_source(source.strip(), config, allow_files, fetcher)
    written = _check_profile_text(src)
    provider = _provider(requested_provider, written, config)
    check_values(env_vars)
    values = {**read_env_values(config.home), **env_vars}
    unresolved = [v for v in referenced_variables(written) if v not in values]
    profile = parse_profile(src.text, src.fallback_name, src.kind, values)  # what the agent gets
    tools = resolve_tools(config.home, profile.name, profile.allowed_tools, profile.role, profile.mcp_servers)

    context_file = config.home / "agent-store" / f"{written.name}.md"
    writes: list[tuple[Path, str]] = [(context_file, src.text)]
    agent_file: Path | None = None
    if provider == KIRO:
        document = agent_document(profile, tools.tools, config.mcp_server_argv)
        agent_file = config.kiro_agents_dir / f"{written.name}.json"
        writes.append((agent_file, json.dumps(document, indent=2, ensure_ascii=False) + "\n"))
    try:
        private_home(config.home)
        with env_write_lock(config.home) if env_vars else nullcontext():
            if env_vars:
                writes.append((env_path(config.home), env_text_with(config.home, env_vars)))
            _replace_all(writes, private_dirs={context_file.parent})
    except OSError as exc:
        raise InstallFailed(f"cannot write {exc.filename or 'the profile files'}: {exc.strerror or exc}") from None

    message = f"Installed profile {written.name!r} for {provider}"
    message += f"; Kiro agent written to {agent_file}" if agent_file else f"; {PROFILE_ONLY.format(provider=provider)}"
    if unresolved:
        where = "left as written in the agent file" if agent_file else "looked up at launch in cao-server's environment"
        message += (
            f". Not set in {env_path(config.home)}: {', '.join(unresolved)} ({where}; set with --env or `cao env set`)"
        )
    return InstallResult(
        success=True,
        message=message,
        agent_name=written.name,
        context_file=str(context_file),
        agent_file=str(agent_file) if agent_file else None,
        unresolved_vars=unresolved,
        source_kind=src.kind,
        provider=provider,
    )


def _make_dirs(directory: Path, private: bool, created: list[Path]) -> None:
    missing = []
    for parent in [directory, *directory.parents]:
        if parent.exists():
            break
        missing.append(parent)
    for path in reversed(missing):
        path.mkdir(mode=DIR_MODE)
        created.append(path)
    if private:
        os.chmod(directory, DIR_MODE)  # cao's own directories; a user's ~/.kiro keeps its mode


def _replace_all(writes: list[tuple[Path, str]], private_dirs: set[Path]) -> None:
    """Write every file or none: each goes to a temp file beside its target first; only when
    all are written are they renamed into place, and a failure restores what was there."""
    created: list[Path] = []
    staged: list[tuple[Path, Path]] = []
    done: list[tuple[Path, bytes | None]] = []
    try:
        for target, text in writes:
            _make_dirs(target.parent, target.parent in private_dirs, created)
            fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            staged.append((Path(tmp_name), target))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                os.fchmod(fh.fileno(), FILE_MODE)
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())  # on disk before the rename makes it the file
        for staged_file, target in staged:
            before = target.read_bytes() if target.is_file() else None
            os.replace(staged_file, target)
            done.append((target, before))
    except BaseException:
        for target, before in reversed(done):
            if before is None:
                target.unlink(missing_ok=True)
            else:
                replace_private(target, before)
        for staged_file, _ in staged:
            staged_file.unlink(missing_ok=True)
        for directory in reversed(created):
            try:
                directory.rmdir()
            except OSError:
                pass
        raise
