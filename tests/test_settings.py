"""Settings refuse what they cannot read: a `CAO_*` variable that is set but malformed stops
`cao-server`, `cao` and `cao-mcp-server` (exit code 2, every bad variable named with what it
accepts, no traceback) before anything listens or touches tmux; an unset or empty one means
its default. And no setting is read outside `Settings` but those settings.py lists."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest
from cao_support import CAO, CaoServer

import cli_agent_orchestrator
from cli_agent_orchestrator.settings import (
    LIGHT_PROCESS_READS,
    NOT_SETTINGS,
    Settings,
    SettingsError,
)

SRC = Path(cli_agent_orchestrator.__file__).resolve().parent.parent
SETTINGS_PY = SRC / "cli_agent_orchestrator" / "settings.py"
EXIT_WITHIN_S = 20  # "a few seconds", with room for a loaded 2-core machine


def refused(environ: dict[str, str]) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(environ)
    return caught.value


# --- each kind of variable ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("CAO_OUTPUT_SOURCE", "contrl", "CAO_OUTPUT_SOURCE='contrl' is not one of: control, pipe-pane"),
        ("CAO_PLACEMENT", "nowhere", "CAO_PLACEMENT='nowhere' is not one of: local, least-loaded"),
        ("CAO_LOG_LEVEL", "loud", "CAO_LOG_LEVEL='loud' is not one of: critical, error, warning, info, debug"),
        ("CAO_INBOX_SWEEP_SECONDS", "ten", "CAO_INBOX_SWEEP_SECONDS='ten' must be a number >= 0.1"),
        ("CAO_INBOX_SWEEP_SECONDS", "0", "CAO_INBOX_SWEEP_SECONDS='0' must be a number >= 0.1"),
        ("CAO_PROVIDER_INIT_TIMEOUT", "nan", "CAO_PROVIDER_INIT_TIMEOUT='nan' must be a number >= 0.1"),
        ("CAO_DB_BUSY_TIMEOUT", "inf", "CAO_DB_BUSY_TIMEOUT='inf' must be a number >= 0.1"),
        ("CAO_HANDOFF_GRACE_SECONDS", "-1", "CAO_HANDOFF_GRACE_SECONDS='-1' must be a number >= 0"),
        ("CAO_HOST_DEAD_AFTER_SECONDS", "0.5", "CAO_HOST_DEAD_AFTER_SECONDS='0.5' must be a number >= 1"),
        ("CAO_MCP_RECONNECT_SECONDS", "soon", "CAO_MCP_RECONNECT_SECONDS='soon' must be a number >= 0"),
        ("CAO_API_PORT", "http", "CAO_API_PORT='http' must be a whole number from 1 to 65535"),
        ("CAO_API_PORT", "0", "CAO_API_PORT='0' must be a whole number from 1 to 65535"),
        ("CAO_API_PORT", "65536", "CAO_API_PORT='65536' must be a whole number from 1 to 65535"),
        ("CAO_EVENT_BUS_MAX_QUEUE_SIZE", "0", "CAO_EVENT_BUS_MAX_QUEUE_SIZE='0' must be a whole number >= 1"),
        ("CAO_MAX_BODY_BYTES", "8MB", "CAO_MAX_BODY_BYTES='8MB' must be a whole number >= 1"),
        ("CAO_MAX_CONNECTIONS_PER_USER", "2.5", "CAO_MAX_CONNECTIONS_PER_USER='2.5' must be a whole number >= 1"),
        ("CAO_MAX_CONNECTIONS", "-1", "CAO_MAX_CONNECTIONS='-1' must be a whole number >= 0"),
        (
            "CAO_EAGER_INBOX_DELIVERY",
            "maybe",
            "CAO_EAGER_INBOX_DELIVERY='maybe' must be one of 1/0, true/false, yes/no, on/off",
        ),
        ("CAO_ENABLE_SENDER_ID_INJECTION", "nope", "CAO_ENABLE_SENDER_ID_INJECTION='nope' must be one of 1/0"),
        ("CAO_ENABLE_WORKING_DIRECTORY", "2", "CAO_ENABLE_WORKING_DIRECTORY='2' must be one of 1/0"),
    ],
)
def test_a_malformed_value_is_refused_naming_the_variable_and_what_it_accepts(name, value, says):
    error = refused({name: value})
    assert error.problems == [error.problems[0]] and error.problems[0].startswith(says)
    assert says in str(error)


def test_a_bad_database_url_is_refused_without_showing_its_password():
    error = refused({"CAO_DATABASE_URL": "mysql://cao:hunter2@db.example/cao"})
    assert "CAO_DATABASE_URL (scheme 'mysql') must be a PostgreSQL URL" in str(error)
    assert "hunter2" not in str(error)
    assert "no scheme" in str(refused({"CAO_DATABASE_URL": "db.example/cao"}))
    assert "scheme 'postgresql'" in str(refused({"CAO_DATABASE_URL": "postgresql://"}))


def test_a_long_value_is_quoted_truncated():
    error = refused({"CAO_PLACEMENT": "x" * 500})
    assert "CAO_PLACEMENT='" + "x" * 40 + "…'" in str(error) and "x" * 41 not in str(error)


def test_every_bad_variable_is_reported_together():
    error = refused(
        {
            "CAO_OUTPUT_SOURCE": "contrl",
            "CAO_PLACEMENT": "nowhere",
            "CAO_API_PORT": "99999",
            "CAO_EAGER_INBOX_DELIVERY": "maybe",
            "CAO_CORS_ORIGINS": "https://fine.example",  # good ones are not mentioned
        }
    )
    named = sorted(problem.split("=")[0] for problem in error.problems)
    assert named == ["CAO_API_PORT", "CAO_EAGER_INBOX_DELIVERY", "CAO_OUTPUT_SOURCE", "CAO_PLACEMENT"]
    assert "CAO_CORS_ORIGINS" not in str(error) and "\n" not in str(error)


def test_settings_error_is_a_value_error_and_a_usage_error_for_click():
    error = refused({"CAO_API_PORT": "x"})
    assert isinstance(error, ValueError) and isinstance(error, click.ClickException)
    assert error.exit_code == 2


# --- what parses ----------------------------------------------------------------------------


@pytest.mark.parametrize("word", ["1", "true", "TRUE", "Yes", "on", " on "])
def test_boolean_words_for_true(word):
    assert Settings.from_env({"CAO_EAGER_INBOX_DELIVERY": word}).eager_inbox_delivery is True


@pytest.mark.parametrize("word", ["0", "false", "False", "NO", "off"])
def test_boolean_words_for_false(word):
    assert Settings.from_env({"CAO_ENABLE_SENDER_ID_INJECTION": word}).sender_id_injection is False


def test_numbers_at_their_minimum_and_bounds_parse():
    s = Settings.from_env(
        {
            "CAO_INBOX_SWEEP_SECONDS": "0.1",
            "CAO_HANDOFF_GRACE_SECONDS": "0",
            "CAO_HOST_DEAD_AFTER_SECONDS": "1",
            "CAO_MCP_RECONNECT_SECONDS": "0",
            "CAO_API_PORT": "65535",
            "CAO_EVENT_BUS_MAX_QUEUE_SIZE": "1",
            "CAO_MAX_CONNECTIONS": "0",
            "CAO_MAX_BODY_BYTES": "1",
        }
    )
    assert (s.inbox_sweep_seconds, s.handoff_grace, s.host_dead_after, s.mcp_reconnect_seconds) == (0.1, 0, 1, 0)
    assert (s.api_port, s.event_queue_size, s.max_connections, s.max_body_bytes) == (65535, 1, 0, 1)
    assert Settings.from_env({"CAO_API_PORT": "1"}).api_port == 1


def test_words_are_matched_case_insensitively_and_kept_lower_case():
    s = Settings.from_env({"CAO_OUTPUT_SOURCE": "Pipe-Pane", "CAO_PLACEMENT": "LEAST-LOADED", "CAO_LOG_LEVEL": "DEBUG"})
    assert (s.output_source, s.placement, s.log_level) == ("pipe-pane", "least-loaded", "debug")


def test_postgres_urls_parse():
    for url in ("postgresql://cao@127.0.0.1:5432/cao", "postgres://cao@db/cao", "postgresql+psycopg://cao@db/cao"):
        assert Settings.from_env({"CAO_DATABASE_URL": url}).database_url == url


def test_unset_or_empty_means_the_default():
    blank = {
        name: "  "
        for name in ("CAO_API_PORT", "CAO_OUTPUT_SOURCE", "CAO_EAGER_INBOX_DELIVERY", "CAO_INBOX_SWEEP_SECONDS")
    }
    assert Settings.from_env(blank) == Settings.from_env({})
    s = Settings.from_env({})
    assert (s.api_port, s.output_source, s.placement, s.log_level, s.mcp_reconnect_seconds) == (
        9889,
        "control",
        "local",
        "info",
        60.0,
    )


# --- real processes refuse before they start ------------------------------------------------


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without its CAO_* variables (the runner's own must not
    count), in a private home."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAO_") and k != "TMUX"}
    return {**env, "CAO_HOME_DIR": str(home), "TMUX_TMPDIR": str(home), **extra}


def _nothing_accepts_on(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_cao_server_with_a_bad_setting_exits_2_naming_it_before_it_listens(tmp_path: Path):
    server = CaoServer(tmp_path / "home", {"CAO_OUTPUT_SOURCE": "contrl", "CAO_PLACEMENT": "nowhere"})
    before = set(server.home.rglob("*"))
    done = subprocess.run(
        server.start_argv,
        env=server.env,
        cwd=server.home,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN_S,
    )
    assert done.returncode == 2, done.stderr
    assert "CAO_OUTPUT_SOURCE='contrl' is not one of: control, pipe-pane" in done.stderr
    assert "CAO_PLACEMENT='nowhere' is not one of: local, least-loaded" in done.stderr
    assert "Traceback" not in done.stderr
    # It stopped before its first step: no home layout, no log, no tmux socket, no hosts'
    # socket, and nothing accepts on the port it was given.
    assert set(server.home.rglob("*")) == before
    assert _nothing_accepts_on(server.port)


def test_cao_server_port_flag_out_of_range_is_a_usage_error(tmp_path: Path):
    env = _clean_env(tmp_path / "home")
    argv = [sys.executable, "-m", "cli_agent_orchestrator.cli.server", "--port", "70000"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=EXIT_WITHIN_S)
    assert done.returncode == 2 and "--port" in done.stderr and "Traceback" not in done.stderr


def test_the_cao_cli_with_bad_settings_exits_2_naming_each(tmp_path: Path):
    env = _clean_env(tmp_path / "home", CAO_EAGER_INBOX_DELIVERY="maybe", CAO_API_PORT="99999")
    done = subprocess.run([CAO, "info"], env=env, capture_output=True, text=True, timeout=EXIT_WITHIN_S)
    assert done.returncode == 2, done.stderr
    assert "CAO_EAGER_INBOX_DELIVERY='maybe' must be one of 1/0, true/false, yes/no, on/off" in done.stderr
    assert "CAO_API_PORT='99999' must be a whole number from 1 to 65535" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_cao_mcp_server_with_a_bad_setting_exits_2_naming_it(tmp_path: Path):
    relay = str(Path(CAO).parent / "cao-mcp-server")
    env = _clean_env(tmp_path / "home", CAO_MCP_RECONNECT_SECONDS="soon", CAO_API_PORT="http")
    done = subprocess.run([relay], env=env, input="", capture_output=True, text=True, timeout=EXIT_WITHIN_S)
    assert done.returncode == 2, done.stderr
    assert "CAO_MCP_RECONNECT_SECONDS='soon' must be a number >= 0" in done.stderr
    assert "CAO_API_PORT='http' must be a whole number from 1 to 65535" in done.stderr


# --- no setting read outside Settings -------------------------------------------------------


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a string (`READY_FD_VAR = "CAO_…"`, tuple unpacking too)."""
    found: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = (
                zip(target.elts, node.value.elts, strict=False)
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                else [(target, node.value)]
            )
            for name, value in pairs:
                if isinstance(name, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found[name.id] = value.value
    return found


def _is_environ(node: ast.AST, os_only: bool) -> bool:
    """`os.environ`; with os_only=False also any other environment mapping passed around
    (`ctx.environ`, a parameter named `environ`)."""
    if isinstance(node, ast.Attribute) and node.attr == "environ":
        return not os_only or (isinstance(node.value, ast.Name) and node.value.id == "os")
    return not os_only and isinstance(node, ast.Name) and node.id == "environ"


def _env_keys(tree: ast.AST, os_only: bool) -> list[ast.AST]:
    """The key of each os.environ.get/pop/setdefault/[…]/in and os.getenv in `tree`."""
    keys: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "pop", "setdefault") and _is_environ(node.func.value, os_only):
                keys.append(node.args[0])
            elif node.func.attr == "getenv" and isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_environ(node.value, os_only) and isinstance(node.ctx, ast.Load):
            keys.append(node.slice)
        elif isinstance(node, ast.Compare) and any(_is_environ(c, os_only) for c in node.comparators):
            keys.append(node.left)
    return keys


def environment_reads(path: Path, os_only: bool = True) -> set[str]:
    """The variable names a module reads: the key of an environment read when it is a string
    or a module-level string constant, and the string a module's own reading helper is
    called with (`_setting("CAO_API_PORT", …)`, where the helper reads its parameter)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    strings = _module_strings(tree)

    def name_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return strings.get(node.id) if isinstance(node, ast.Name) else None

    found = {name for key in _env_keys(tree, os_only) if (name := name_of(key)) is not None}
    helpers: dict[str, tuple[int, str]] = {}  # function → (position, name) of the parameter it reads
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            params = [a.arg for a in fn.args.args]
            for key in _env_keys(fn, os_only):
                if isinstance(key, ast.Name) and key.id in params:
                    helpers[fn.name] = (params.index(key.id), key.id)
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in helpers:
            position, param = helpers[call.func.id]
            args = call.args[position : position + 1] + [k.value for k in call.keywords if k.arg == param]
            found.update(name for arg in args if (name := name_of(arg)) is not None)
    return found


def test_the_scan_finds_reads_it_must_judge(tmp_path: Path):
    """The scanner itself can fail: it sees each form of read."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\nVAR = 'CAO_C'\nA, B = 'CAO_D', 'CAO_E'\n"
        "os.environ.get('CAO_A')\nos.getenv('CAO_B')\nos.environ.pop(VAR, '')\n"
        "x = os.environ[B]\ny = 'CAO_F' in os.environ\nos.environ['CAO_G'] = '1'\n"
        "def read(default, name):\n    return os.environ.get(name, default)\n"
        "read(1, 'CAO_H')\nread(2, name='CAO_I')\n"
        "def f(ctx, environ):\n    return ctx.environ.get('CAO_J'), environ['CAO_K']\n"
    )
    assert environment_reads(sample) == {"CAO_A", "CAO_B", "CAO_C", "CAO_E", "CAO_F", "CAO_H", "CAO_I"}
    assert environment_reads(sample, os_only=False) - environment_reads(sample) == {"CAO_J", "CAO_K"}
    relay = SRC / "cli_agent_orchestrator" / "mcp_server" / "relay.py"
    assert "CAO_MCP_RECONNECT_SECONDS" in environment_reads(relay)


def test_no_cao_setting_is_read_outside_settings_unless_listed():
    stray: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if path == SETTINGS_PY:
            continue
        where = path.relative_to(SRC).as_posix()
        allowed = NOT_SETTINGS.keys() | LIGHT_PROCESS_READS.get(where, frozenset())
        unlisted = sorted(n for n in environment_reads(path) if n.startswith("CAO_") and n not in allowed)
        if unlisted:
            stray[where] = unlisted
    assert not stray, (
        f"CAO_* variables read outside settings.py: {stray}. A setting a user chooses belongs in "
        "Settings; an identity handed to a child goes in settings.NOT_SETTINGS, with why"
    )


# Settings still read from the environment cao-server passes on (not os.environ), each to move
# into Settings in its own lane: listed so that no new one appears meanwhile.
PASSED_ENVIRONMENT_READS = {
    "cli_agent_orchestrator/providers/common.py": {"CAO_API_HOST", "CAO_API_PORT"},
    "cli_agent_orchestrator/providers/kiro_cli.py": {"CAO_AGENTS_DIR"},
}


def test_no_new_setting_is_read_from_a_passed_environment():
    stray: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if path == SETTINGS_PY:
            continue
        where = path.relative_to(SRC).as_posix()
        allowed = (
            NOT_SETTINGS.keys()
            | LIGHT_PROCESS_READS.get(where, frozenset())
            | PASSED_ENVIRONMENT_READS.get(where, set())
        )
        unlisted = sorted(
            n for n in environment_reads(path, os_only=False) if n.startswith("CAO_") and n not in allowed
        )
        if unlisted:
            stray[where] = unlisted
    assert not stray, f"CAO_* settings read from a passed environment: {stray}; read them from Settings"


def test_the_light_process_list_names_files_that_exist():
    for where in LIGHT_PROCESS_READS:
        assert (SRC / where).is_file(), where
