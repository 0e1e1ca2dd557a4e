"""`cao install` and POST /agents/profiles/install: each provider gets exactly the documented
files and nothing in the user's own CLI configuration; bad input is a clear error with nothing
written. The real `cao` console script in a temporary HOME and cao home, a real local HTTP
server for URL installs, and a real cao-server for the route.

Kiro cannot run here, so its agent JSON is checked against Kiro's documented agent format
(CLI 2.x configuration reference: field names and types, written out below).
"""

from __future__ import annotations

import http.server
import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cao_support import CAO, CaoServer, cli

from cli_agent_orchestrator.profiles.env_file import ENV_LOCK_NAME
from cli_agent_orchestrator.profiles.fetch import MAX_PROFILE_BYTES, _raw_github

PROVIDERS = ("kiro_cli", "claude_code", "codex", "gemini_cli", "qwen_cli", "opencode_cli", "mock_cli")

# Kiro's agent configuration reference (kiro.dev/docs/cli/custom-agents/configuration-reference):
# the fields an agent file may hold, and the JSON type of each.
KIRO_AGENT_FORMAT: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "description": (str,),
    "prompt": (str, type(None)),
    "mcpServers": (dict,),
    "tools": (list,),
    "toolAliases": (dict,),
    "allowedTools": (list,),
    "toolsSettings": (dict,),
    "resources": (list,),
    "hooks": (dict,),
    "useLegacyMcpJson": (bool,),
    "model": (str, type(None)),
    "keyboardShortcut": (str,),
    "welcomeMessage": (str,),
}
KIRO_MCP_SERVER_FORMAT: dict[str, tuple[type, ...]] = {
    "type": (str,),
    "command": (str,),
    "args": (list,),
    "env": (dict,),
    "timeout": (int,),
    "url": (str,),
    "headers": (dict,),
    "disabled": (bool,),
}

SUPERVISOR = """---
name: lead
description: Leads the work.
role: supervisor
mcpServers:
  cao-mcp-server:
    type: stdio
    command: cao-mcp-server
---
You lead. Hand work off with the cao tools.
"""


class Homes:
    """A user's HOME (with their own CLI configuration in it) and a cao home, both temporary."""

    def __init__(self, root: Path):
        self.user = root / "user"
        self.cao = root / "cao"
        self.root = root
        own = {
            ".claude/settings.json": '{"theme": "dark"}\n',
            ".codex/config.toml": 'model = "o3"\n',
            ".gemini/settings.json": "{}\n",
            ".qwen/settings.json": "{}\n",
            ".config/opencode/opencode.json": "{}\n",
            ".aws/opencode/opencode.json": "{}\n",
        }
        for rel, text in own.items():
            path = self.user / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        self.cao.mkdir(mode=0o700)  # cao refuses a home others can open
        (self.cao / ".env").write_text("# mine\nKEEP=1\n", encoding="utf-8")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAO_") and k != "HOME"}
        return {**env, "HOME": str(self.user), "CAO_HOME_DIR": str(self.cao), **extra}

    def files(self) -> dict[str, bytes]:
        """Every file under both homes, by path relative to the test's root, with its bytes."""
        return {
            str(p.relative_to(self.root)): p.read_bytes()
            for base in (self.user, self.cao)
            for p in sorted(base.rglob("*"))
            if p.is_file() and p.name != ENV_LOCK_NAME  # the .env writers' lock file holds nothing
        }

    def install(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [CAO, "install", *args], env=self.env(**env), capture_output=True, text=True, timeout=60, cwd=self.root
        )

    def install_json(self, *args: str, **env: str) -> dict:
        proc = self.install(*args, "--json", **env)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def homes(tmp_path: Path) -> Homes:
    return Homes(tmp_path)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {path for path in after if before.get(path) != after[path]} | (before.keys() - after.keys())


# --- what each provider's install writes ------------------------------------------------------
@pytest.mark.parametrize("provider", PROVIDERS)
def test_install_writes_exactly_the_documented_files_per_provider(homes: Homes, provider: str):
    source = write(homes.root / "src" / "lead.md", SUPERVISOR)
    before = homes.files()
    result = homes.install_json(str(source), "--provider", provider)
    after = homes.files()

    expected = {"cao/agent-store/lead.md"} | ({"user/.kiro/agents/lead.json"} if provider == "kiro_cli" else set())
    assert changed(before, after) == expected  # nothing in ~/.claude, ~/.codex, ~/.gemini, … nor the .env
    assert after["cao/agent-store/lead.md"] == SUPERVISOR.encode()
    for rel in expected:
        assert stat.S_IMODE((homes.root / rel).stat().st_mode) == 0o600, rel
    assert result["success"] is True and result["agent_name"] == "lead" and result["provider"] == provider
    assert result["source_kind"] == "file" and result["context_file"] == str(homes.cao / "agent-store" / "lead.md")
    if provider == "kiro_cli":
        assert result["agent_file"] == str(homes.user / ".kiro" / "agents" / "lead.json")
    else:
        assert result["agent_file"] is None and "needs no file of its own" in result["message"]
    assert not [p for p in homes.root.rglob(".*.tmp")]  # no staging leftovers


def test_kiro_agent_dir_follows_cao_agents_dir_and_the_default_provider_is_kiro(homes: Homes):
    agents = homes.root / "agents"
    before = homes.files()
    result = homes.install_json("code_supervisor", CAO_AGENTS_DIR=str(agents))
    assert result["provider"] == "kiro_cli" and result["source_kind"] == "name"
    assert result["agent_file"] == str(agents / "code_supervisor.json") and (agents / "code_supervisor.json").is_file()
    assert changed(before, homes.files()) == {"cao/agent-store/code_supervisor.md"}  # nothing under ~/.kiro


# --- the Kiro agent file ------------------------------------------------------------------------
def check_kiro_format(document: dict) -> None:
    assert set(document) <= set(KIRO_AGENT_FORMAT), set(document) - set(KIRO_AGENT_FORMAT)
    for key, value in document.items():
        assert isinstance(value, KIRO_AGENT_FORMAT[key]), (key, value)
    for key in ("tools", "allowedTools", "resources"):
        assert all(isinstance(item, str) for item in document.get(key, [])), key
    assert all(isinstance(v, str) for v in document.get("toolAliases", {}).values())
    for name, server in document["mcpServers"].items():
        assert set(server) <= set(KIRO_MCP_SERVER_FORMAT), (name, server)
        for key, value in server.items():
            typed = isinstance(value, KIRO_MCP_SERVER_FORMAT[key])
            assert typed and (key == "disabled" or not isinstance(value, bool)), (name, key, value)
        assert all(isinstance(arg, str) for arg in server.get("args", [])), name


def test_kiro_supervisor_agent_has_cao_tools_in_the_documented_format(homes: Homes):
    result = homes.install_json("code_supervisor", "--provider", "kiro_cli")
    document = json.loads(Path(result["agent_file"]).read_text(encoding="utf-8"))
    check_kiro_format(document)
    assert document["name"] == "code_supervisor" and document["description"].startswith("Plans work")
    assert document["prompt"].startswith("You are a supervisor.") and "---" not in document["prompt"]
    # The supervisor role: cao's tools and reading, nothing that writes or runs commands.
    assert document["tools"] == ["@cao-mcp-server", "fs_read"] == document["allowedTools"]
    cao = document["mcpServers"]["cao-mcp-server"]
    assert cao["timeout"] == 1_200_000
    command = Path(cao["command"])
    assert command.is_absolute() and os.access(command, os.X_OK)  # not left to Kiro's PATH
    assert document["resources"] == []


def test_kiro_agent_carries_the_profile_fields_and_only_the_servers_its_tools_name(homes: Homes):
    source = write(
        homes.root / "docs_writer.md",
        """---
name: docs_writer
description: Writes docs.
model: claude-sonnet-4.5
allowedTools: [fs_read, fs_write, "@docs"]
mcpServers:
  docs:
    command: docs-server
    args: [--token, "${DOCS_TOKEN}"]
  unused:
    command: unused-server
  cao-mcp-server:
    command: cao-mcp-server
resources: ["file://README.md"]
toolAliases: {"@docs/search": find}
toolsSettings: {fs_write: {allowedPaths: ["docs/**"]}}
hooks: {agentSpawn: [{command: "git status"}]}
useLegacyMcpJson: false
---
Write docs. Ask ${OWNER}.
""",
    )
    result = homes.install_json(str(source), "--provider", "kiro_cli", "--env", "DOCS_TOKEN=s3cret")
    document = json.loads(Path(result["agent_file"]).read_text(encoding="utf-8"))
    check_kiro_format(document)
    assert document["tools"] == ["fs_read", "fs_write", "@docs"] == document["allowedTools"]
    # Explicit allowedTools without @cao-mcp-server: neither it nor `unused` is configured.
    assert set(document["mcpServers"]) == {"docs"}
    assert document["mcpServers"]["docs"]["args"] == ["--token", "s3cret"]  # from --env, via the .env
    assert document["prompt"] == "Write docs. Ask ${OWNER}."  # unset: left as written, and reported
    assert result["unresolved_vars"] == ["OWNER"] and "OWNER" in result["message"]
    assert document["resources"] == ["file://README.md"] and document["model"] == "claude-sonnet-4.5"
    assert document["toolAliases"] == {"@docs/search": "find"} and document["useLegacyMcpJson"] is False
    assert document["toolsSettings"] == {"fs_write": {"allowedPaths": ["docs/**"]}}
    assert document["hooks"] == {"agentSpawn": [{"command": "git status"}]}
    # The .env keeps its other lines; the context file keeps the reference, not the secret.
    assert (homes.cao / ".env").read_text(encoding="utf-8") == "# mine\nKEEP=1\nDOCS_TOKEN=s3cret\n"
    assert "${DOCS_TOKEN}" in (homes.cao / "agent-store" / "docs_writer.md").read_text(encoding="utf-8")


def test_unrestricted_kiro_agent_offers_everything(homes: Homes):
    source = write(homes.root / "free.md", "---\nname: free\nallowedTools: ['*']\n---\nAnything goes.\n")
    document = json.loads(Path(homes.install_json(str(source), "--provider", "kiro_cli")["agent_file"]).read_text())
    check_kiro_format(document)
    assert document["tools"] == ["*"] and document["allowedTools"] == ["@builtin", "@cao-mcp-server"]
    assert document["mcpServers"]["cao-mcp-server"]["timeout"] == 1_200_000


# --- bad input: a clear error, nothing written ---------------------------------------------------
BAD_PROFILES = {
    "path name": ("---\nname: ../evil\n---\nx\n", "invalid profile name '../evil'"),
    "bad role": ("---\nname: r\nrole: overlord\n---\nx\n", "unknown role 'overlord'"),
    "bad tool": ("---\nname: t\nallowedTools: [fs_read, rm_everything]\n---\nx\n", "unknown tool 'rm_everything'"),
    "bad yaml": ("---\nname: [unclosed\n---\nx\n", "invalid YAML frontmatter"),
    "no frontmatter": ("<html>not a profile</html>\n", "is not an agent profile"),
    "wider tools": ("---\nname: w\nrole: supervisor\ntools: [execute_bash]\n---\nx\n", "outside its tool set"),
    "bad hooks": ("---\nname: h\nhooks: [1]\n---\nx\n", "hooks must be a mapping"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_bad_profile_is_a_clear_error_and_nothing_is_written(homes: Homes, case: str):
    text, error = BAD_PROFILES[case]
    source = write(homes.root / "src" / "bad.md", text)
    before = homes.files()
    proc = homes.install(str(source), "--provider", "kiro_cli", "--env", "NEW=1")
    assert proc.returncode == 1 and error in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert homes.files() == before
    assert not (homes.user / ".kiro").exists()  # not even an empty directory


def test_a_write_failing_midway_leaves_every_file_as_it_was(homes: Homes):
    agents = homes.root / "agents"
    (agents / "lead.json").mkdir(parents=True)  # the agent file cannot replace a directory
    (homes.cao / "agent-store").mkdir()
    write(homes.cao / "agent-store" / "lead.md", "---\nname: lead\n---\nmy older lead\n")
    source = write(homes.root / "src" / "lead.md", SUPERVISOR)
    before = homes.files()
    proc = homes.install(str(source), "--provider", "kiro_cli", "--env", "NEW=1", CAO_AGENTS_DIR=str(agents))
    assert proc.returncode == 1 and "cannot write" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert homes.files() == before  # the profile and the .env were put back
    assert [p.name for p in agents.iterdir()] == ["lead.json"] and not list(homes.root.rglob(".*.tmp"))


@pytest.mark.parametrize(
    ("args", "env", "error"),
    [
        (["https://evil.example.com/p.md"], {}, "host 'evil.example.com' is not allowed"),
        (["https://user:pw@github.com/o/r/raw/main/p.md"], {}, "credentials in the URL"),
        (["http://example.com/p.md"], {"CAO_PROFILE_ALLOWED_HOSTS": "example.com"}, "only https"),
        (["file:///etc/passwd"], {}, "only https"),
        (["bad name!"], {}, "invalid profile name 'bad name!'"),
        (["no_such_profile"], {}, "neither a profile file nor a built-in"),
        (["developer", "--provider", "nope_cli"], {}, "unknown provider 'nope_cli'"),
        (["developer", "--env", "1BAD=x"], {}, "invalid variable name '1BAD'"),
        (["developer", "--env", "NOEQUALS"], {}, "use KEY=VALUE"),
    ],
)
def test_bad_source_or_option_is_a_clear_error_and_nothing_is_written(
    homes: Homes, args: list[str], env: dict, error: str
):
    before = homes.files()
    proc = homes.install(*args, **env)
    assert proc.returncode in (1, 2) and error in proc.stderr, proc.stderr
    assert homes.files() == before and not (homes.user / ".kiro").exists()


# --- URLs -----------------------------------------------------------------------------------------
class _Handler(http.server.BaseHTTPRequestHandler):
    pages: dict[str, tuple[int, dict[str, str], bytes]] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        status, headers, body = self.pages.get(self.path, (404, {}, b"missing"))
        self.send_response(status)
        for key, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def profile_site(tmp_path: Path) -> Iterator[str]:
    """A local HTTP server (loopback: the one place plain http is accepted, when allow-listed)."""
    marker = tmp_path / "executed"
    profile = f"---\ndescription: fetched\nrole: reviewer\n---\nReview. $(touch {marker}) `touch {marker}`\n"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port = server.server_address[1]
    _Handler.pages = {
        "/p/fetched.md": (200, {}, profile.encode()),
        "/moved.md": (302, {"Location": "/p/fetched.md"}, b""),
        "/away.md": (302, {"Location": f"http://localhost:{port}/p/fetched.md"}, b""),
        "/big.md": (200, {}, b"---\nname: big\n---\n" + b"x" * MAX_PROFILE_BYTES),
        "/page.md": (200, {}, b"<!doctype html><html>GitHub</html>"),
        "/binary.md": (200, {}, b"---\nname: b\n---\n\xff\xfe"),
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        assert not marker.exists(), "install ran something it fetched"


def test_url_install_fetches_from_an_allowed_host_and_never_runs_it(homes: Homes, profile_site: str):
    allowed = {"CAO_PROFILE_ALLOWED_HOSTS": "127.0.0.1"}
    result = homes.install_json(f"{profile_site}/p/fetched.md", "--provider", "kiro_cli", **allowed)
    assert result["source_kind"] == "url" and result["agent_name"] == "fetched"  # the URL's file name
    document = json.loads(Path(result["agent_file"]).read_text(encoding="utf-8"))
    check_kiro_format(document)
    assert document["tools"] == [
        "introspect",
        "thinking",
        "todo_list",
        "knowledge",
        "fs_read",
        "@cao-mcp-server",
    ]  # reviewer
    assert "$(touch" in document["prompt"]  # kept as text
    # A redirect within the allowed hosts is followed; the name is still the one the user asked for.
    moved = homes.install_json(f"{profile_site}/moved.md", "--provider", "mock_cli", **allowed)
    assert moved["agent_name"] == "moved" and "description: fetched" in Path(moved["context_file"]).read_text()


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/away.md", "host 'localhost' is not allowed"),  # a redirect to another host
        ("/big.md", f"larger than {MAX_PROFILE_BYTES} bytes"),
        ("/page.md", "is not an agent profile"),
        ("/binary.md", "not UTF-8 text"),
        ("/gone.md", "HTTP 404"),
    ],
)
def test_url_install_refuses_what_is_not_a_small_profile_from_an_allowed_host(
    homes: Homes, profile_site: str, path: str, error: str
):
    before = homes.files()
    proc = homes.install(f"{profile_site}{path}", CAO_PROFILE_ALLOWED_HOSTS="127.0.0.1")
    assert proc.returncode == 1 and error in proc.stderr, proc.stderr
    assert homes.files() == before


def test_github_page_urls_are_fetched_as_the_raw_file():
    page = httpx.URL("https://github.com/o/r/blob/main/agents/dev.md")
    assert str(_raw_github(page)) == "https://github.com/o/r/raw/main/agents/dev.md"
    raw = httpx.URL("https://raw.githubusercontent.com/o/r/main/dev.md")
    assert _raw_github(raw) == raw


# --- over HTTP ------------------------------------------------------------------------------------
def test_install_route_takes_names_and_urls_but_never_local_paths(tmp_path: Path, cao_factory):
    user = tmp_path / "user"
    user.mkdir()
    server: CaoServer = cao_factory("srv", HOME=str(user), CAO_AGENTS_DIR="", CAO_DEFAULT_PROVIDER="")
    server.start()
    resp = server.client.post(
        "/agents/profiles/install", json={"source": "code_supervisor", "env_vars": {"TEAM": "core"}}
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert set(body) == {
        "success",
        "message",
        "agent_name",
        "context_file",
        "agent_file",
        "unresolved_vars",
        "source_kind",
        "provider",
    }
    assert body["provider"] == "kiro_cli" and body["agent_file"] == str(
        user / ".kiro" / "agents" / "code_supervisor.json"
    )
    check_kiro_format(json.loads(Path(body["agent_file"]).read_text(encoding="utf-8")))
    assert "TEAM=core" in (server.home / ".env").read_text(encoding="utf-8")
    listed = {row["name"]: row for row in server.client.get("/agents/profiles").json()}
    assert listed["code_supervisor"]["source"] == "local"

    secret_file = write(tmp_path / "mine.md", "---\nname: mine\n---\nx\n")
    for source, error in [
        (str(secret_file), "is a path"),
        ("./mine.md", "is a path"),
        ("mine.md", "is a path"),
        ("../etc/passwd", "is a path"),
        ("https://evil.example.com/p.md", "is not allowed"),
        ("bad name", "invalid profile name"),
    ]:
        before = sorted(str(p) for p in server.home.rglob("*.md"))
        resp = server.client.post("/agents/profiles/install", json={"source": source})
        assert resp.status_code == 400 and error in resp.json()["detail"], (source, resp.text)
        assert sorted(str(p) for p in server.home.rglob("*.md")) == before
    refused = server.client.post("/agents/profiles/install", json={"source": "developer", "env_vars": {"1X": "hush"}})
    assert refused.status_code == 400 and "hush" not in refused.text
    typed = server.client.post("/agents/profiles/install", json={"source": "developer", "env_vars": {"K": 12345}})
    assert typed.status_code == 422 and "12345" not in typed.text
    assert server.client.post("/agents/profiles/install", json={"source": "x", "path": "/etc"}).status_code == 422


def test_a_kiro_launch_without_the_agent_file_says_to_install_it_first(cao: CaoServer):
    """Kiro reads the agent's tools and cao-mcp-server from its agent file only: without it the
    request is a 400 that names the command, before anything is created (Kiro is not installed
    here, so after `cao install` the next refusal is the missing binary)."""
    params = {"agent_profile": "developer", "provider": "kiro_cli"}
    resp = cao.client.post("/sessions", params=params)
    assert resp.status_code == 400, resp.text
    assert "run `cao install developer --provider kiro_cli` first" in resp.json()["detail"]
    assert cao.client.get("/terminals").json() == [] and cao.client.get("/sessions").json() == []
    done = cli(cao, "install", "developer", "--provider", "kiro_cli")
    assert done.returncode == 0, done.stderr
    assert (Path(cao.env["CAO_AGENTS_DIR"]) / "developer.json").is_file()
    resp = cao.client.post("/sessions", params=params)
    assert resp.status_code == 400 and "`kiro-cli` is not on cao-server's PATH" in resp.json()["detail"], resp.text
    assert cao.client.get("/terminals").json() == []
