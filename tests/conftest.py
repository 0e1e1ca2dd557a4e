"""Shared fixtures: a real cao-server process per test (`cao`, `cao_factory`) or per module
(`cao_module`), each with its own port, home (CAO_HOME_DIR) and tmux socket directory
(TMUX_TMPDIR); the harness itself (CaoServer, `cli`, `wait_until`, ...) is cao_support.py,
re-exported here for the modules that import it from conftest.

Markers (pyproject.toml) are applied here by file and by fixture, so a new test module is
marked without effort: real_cli, browser, hosts, postgres, and slow for every file the fast
set (`scripts/test.sh --fast`, FAST_FILES) leaves out.

Good citizenship: a fixture ends only the processes it started (by pid) and kills only the
tmux server on its own socket.
"""

from __future__ import annotations

import itertools
import re
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cao_support import (  # noqa: F401 (re-exported: `from conftest import CaoServer, wait_until`)
    CAO,
    REPO,
    CaoServer,
    cli,
    free_port,
    read_records,
    wait_until,
)
from stranger_support import stranger  # noqa: F401 (the `stranger` fixture, for every test module)


# --- servers ---------------------------------------------------------------------------------
@pytest.fixture
def cao(tmp_path: Path) -> Iterator[CaoServer]:
    server = CaoServer(tmp_path / "home").start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def cao_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CaoServer]:
    """One server for a whole module, for tests that do not disturb each other (each makes
    its own sessions and asserts only on them): a start-up saved per test."""
    server = CaoServer(tmp_path_factory.mktemp("home")).start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def cao_factory(tmp_path: Path) -> Iterator[Callable[..., CaoServer]]:
    servers: list[CaoServer] = []

    def make(name: str = "home", **env: str) -> CaoServer:
        server = CaoServer(tmp_path / name, env)
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.cleanup()


@pytest.fixture(scope="session")
def postgres():
    """One throwaway PostgreSQL server per session (per xdist worker; pg_support.py); skips without it."""
    from pg_support import Postgres

    server = Postgres().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_cao_factory(tmp_path: Path, postgres) -> Iterator[Callable[..., CaoServer]]:
    """Like cao_factory, each server's state in a fresh PostgreSQL database (CAO_DATABASE_URL)."""
    servers: list[CaoServer] = []

    def make(name: str = "home", **env: str) -> CaoServer:
        server = CaoServer(tmp_path / name, {"CAO_DATABASE_URL": postgres.new_database(), **env})
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.cleanup()


@pytest.fixture
def anyio_backend() -> str:
    """The anyio plugin's event loop for `@pytest.mark.anyio` tests: asyncio only."""
    return "asyncio"


# --- markers, applied by file and by fixture ---------------------------------------------------
BROWSER_FILES = {"test_web_ui.py"}
HOSTS_FILES = {"test_remote_hosts.py", "test_hosts.py", "test_host_placement_entry.py"}
POSTGRES_FILES = {"test_postgres.py"}
# The fast set (`scripts/test.sh --fast`, under a minute on a 2-core machine): the pure
# units (screens, workflow language, settings) and the cheapest files that drive a real
# server and the mock agent end to end. Every other file is marked `slow`, new ones too,
# so the fast set stays fast; move a file here only if `--durations` says it is cheap.
FAST_FILES = {
    # pure: no server
    "test_units.py",
    "test_docs.py",
    "test_layout.py",
    "test_settings.py",
    "test_provider_registry.py",
    "test_paste_recovery_screens.py",
    "test_screens_claude_code.py",
    "test_screens_codex.py",
    "test_screens_gemini_cli.py",
    "test_screens_kiro_cli.py",
    "test_screens_opencode_cli.py",
    "test_screens_qwen_cli.py",
    "test_workflow_gate.py",
    "test_workflow_lint.py",
    "test_workflow_shim.py",
    "test_workflow_yaml.py",
    "test_flow_offsets.py",
    "test_codex_dialog_race.py",
    # a real server, tmux and the mock agent
    "test_status_monitor.py",
    "test_tmux_channel.py",
    "test_mock_agent.py",
    "test_mock_brain.py",
    "test_tool_policy.py",
    "test_bad_input.py",
    "test_workflow_runs.py",
    "test_workflow_examples.py",
}


# A test needs a marker's prerequisite when its code, or a fixture's, uses one of these
# (module, names): resolved through the function's globals, so an unrelated `launch` is not one.
NEEDS = {
    "browser": ("browser_support", {"launch", "signed_in", "require_chromium"}),
    "hosts": ("ssh_support", {"sshd_running", "ssh_cao_running", "Sshd", "SshHomeServer", "Netns"}),
    "postgres": ("pg_support", {"Postgres"}),
}


def _code_refs(fn: object) -> tuple[set[str], set[str]]:
    """Names and string constants a function's code refers to, nested functions included."""
    code = getattr(fn, "__code__", None)
    names: set[str] = set()
    strings: set[str] = set()
    todo = [code] if code is not None else []
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                todo.append(const)
            elif isinstance(const, str):
                strings.add(const)
    return names, strings


def _uses(fn: object, module: str, wanted: set[str]) -> bool:
    """Whether fn uses one of module's `wanted` objects (or a subclass of one of them)."""
    names, _ = _code_refs(fn)
    if module in names and names & wanted:  # `from module import name` inside the function
        return True
    found = getattr(fn, "__globals__", {})
    for name in names:
        obj = found.get(name)
        bases = obj.__mro__ if isinstance(obj, type) else (obj,)
        if any(getattr(b, "__module__", None) == module and getattr(b, "__name__", None) in wanted for b in bases):
            return True
    return False


def _file_markers(name: str) -> set[str]:
    """The markers every test of the file named `name` gets."""
    marks: set[str] = set()
    if name.startswith("test_real_"):
        marks.add("real_cli")
    for mark, files in (
        ("browser", BROWSER_FILES),
        ("hosts", HOSTS_FILES),
        ("postgres", POSTGRES_FILES),
    ):
        if name in files:
            marks.add(mark)
    if name not in FAST_FILES:
        marks.add("slow")
    return marks


def _markers_for(item: pytest.Item) -> set[str]:
    marks = _file_markers(Path(str(item.fspath)).name)
    # A module that uses the real-CLI harness drives real CLIs, whatever its name.
    module = getattr(item, "module", None)
    if module is not None and any(getattr(v, "__module__", None) == "real_cli_support" for v in vars(module).values()):
        marks.add("real_cli")

    if set(getattr(item, "fixturenames", ())) & {"postgres", "pg_cao_factory"}:
        marks.add("postgres")
    # The test function and every fixture it uses.
    functions: list[object] = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        functions.extend(d.func for d in defs)
    params = getattr(getattr(item, "callspec", None), "params", {})
    for fn in functions:
        for mark, (module, wanted) in NEEDS.items():
            if _uses(fn, module, wanted):
                marks.add(mark)
        # `request.getfixturevalue("postgres")` in a fixture parametrized over the engines.
        names, strings = _code_refs(fn)
        if "getfixturevalue" in names and "postgres" in strings and any("postg" in str(v) for v in params.values()):
            marks.add("postgres")
    return marks


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in sorted(_markers_for(item)):
            item.add_marker(getattr(pytest.mark, name))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip importing a test file whose every test `-m` would deselect anyway (`--fast`
    leaves out most files: importing them costs each xdist worker seconds). Only for an
    expression over this file's markers; a test can gain browser, hosts or postgres from its
    fixtures, so the file is skipped only if no such gain would select it."""
    expression = config.getoption("markexpr", "")
    name = collection_path.name
    if not expression or not (name.startswith("test_") and name.endswith(".py")):
        return None
    ours = {"real_cli", "browser", "hosts", "postgres", "slow"}
    if set(re.findall(r"[A-Za-z_][\w.]*", expression)) - {"and", "or", "not"} - ours:
        return None  # names another marker (anyio, skipif, ...), which only the tests know
    from _pytest.mark.expression import Expression  # pytest's own `-m` parser

    compiled = Expression.compile(expression)
    marks = _file_markers(name)
    gained = ("real_cli", "browser", "hosts", "postgres")
    for extra in itertools.chain.from_iterable(itertools.combinations(gained, n) for n in range(5)):
        have = marks | set(extra)
        if compiled.evaluate(lambda mark, have=have, **_: mark in have):
            return None
    return True
