"""Roles and the tool vocabulary (issue 11): one table, role defaults, user roles, bad input.

Units run against the tool vocabulary (providers/tool_names.py), the roles (profiles/roles.py) and the providers' build_launch (mock_cli ignores tools); the API
tests run a real cao-server: a bad role or tool is a 400 naming it, with nothing created.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cao_support import CaoServer

from cli_agent_orchestrator.errors import InvalidInput
from cli_agent_orchestrator.profiles import roles
from cli_agent_orchestrator.profiles.loading import parse_profile
from cli_agent_orchestrator.providers import claude_code, codex, kiro_cli, opencode_cli, tool_names
from cli_agent_orchestrator.providers.base import LaunchContext

DEVELOPER = ["@builtin", "fs_*", "execute_bash", "web_fetch", "@cao-mcp-server"]


# --- the table ------------------------------------------------------------------------------
def test_every_vocabulary_entry_maps_for_every_provider_or_says_it_cannot():
    for entry, row in tool_names.TABLE.items():
        assert set(row) == set(tool_names.PROVIDERS), entry
        for provider, cell in row.items():
            assert cell is None or (isinstance(cell, tuple) and cell and all(cell)), (entry, provider)
    assert set(tool_names.ENFORCEMENT) == set(tool_names.PROVIDERS)
    assert set(tool_names.ENFORCEMENT.values()) <= {"hard", "partial", "none"}


def test_names_in_each_cli():
    assert tool_names.names("claude_code", ["fs_read", "@docs", "@docs/search", "*"]) == [
        "Read",
        "Grep",
        "mcp__docs",
        "mcp__docs__search",
    ]
    assert tool_names.names("codex", ["fs_read", "fs_list"]) == ["read-only"]
    assert "workspace-write" in tool_names.names("codex", ["execute_bash"])
    assert tool_names.names("gemini_cli", ["fs_write"]) == ["write_file", "replace"]
    assert tool_names.names("qwen_cli", ["fs_write"]) == ["write_file", "edit"]
    assert tool_names.names("opencode_cli", ["execute_bash", "@docs"]) == ["bash", "docs_*"]
    assert tool_names.names("kiro_cli", ["fs_*", "@docs", "discovery"]) == ["fs_read", "fs_write", "@docs"]
    with pytest.raises(InvalidInput, match="'Bash'"):
        tool_names.names("claude_code", ["Bash"])


def test_refused_builtins_are_what_the_set_leaves_out():
    refused = tool_names.refused_builtins("claude_code", ["fs_read", "fs_list", "@cao-mcp-server"])
    assert {"Bash", "Write", "Edit", "WebFetch"} <= set(refused) and not {"Read", "Grep", "Glob", "LS"} & set(refused)
    assert tool_names.refused_builtins("claude_code", DEVELOPER) == []
    assert tool_names.refused_builtins("gemini_cli", ["*"]) == []


# --- resolution -----------------------------------------------------------------------------
def test_resolution_explicit_then_role_then_developer(tmp_path: Path):
    resolve = roles.resolve_tools
    explicit = resolve(tmp_path, "p", ["fs_read"], "supervisor")
    assert (explicit.tools, explicit.source) == (["fs_read"], "allowedTools")
    assert resolve(tmp_path, "p", None, "supervisor").tools == ["@cao-mcp-server", "fs_read", "fs_list"]
    assert resolve(tmp_path, "p", None, "reviewer").tools == ["@builtin", "fs_read", "fs_list", "@cao-mcp-server"]
    plain = resolve(tmp_path, "p", None, None, {"docs": {}, "cao-mcp-server": {}})
    assert plain.tools == [*DEVELOPER, "@docs"] and plain.source.startswith("role developer")


def test_user_defined_roles_come_from_settings_json(tmp_path: Path):
    (tmp_path / "settings.json").write_text(json.dumps({"roles": {"auditor": ["fs_read", "@cao-mcp-server"]}}))
    assert roles.resolve_tools(tmp_path, "p", None, "auditor").tools == ["fs_read", "@cao-mcp-server"]
    (tmp_path / "settings.json").write_text(json.dumps({"roles": {"auditor": ["fs_read", "rm_rf"]}}))
    with pytest.raises(InvalidInput, match="role 'auditor' in settings.json: unknown tool 'rm_rf'"):
        roles.resolve_tools(tmp_path, "p", None, "auditor")
    (tmp_path / "settings.json").write_text(json.dumps({"roles": ["auditor"]}))
    with pytest.raises(InvalidInput, match="roles must map"):
        roles.resolve_tools(tmp_path, "p", None, "auditor")


def test_unknown_role_and_tool_are_named(tmp_path: Path):
    with pytest.raises(InvalidInput, match="profile 'p': unknown role 'boss'"):
        roles.resolve_tools(tmp_path, "p", None, "boss")
    with pytest.raises(InvalidInput, match="profile 'p': unknown tool 'shell'"):
        roles.resolve_tools(tmp_path, "p", ["fs_read", "shell"], None)
    with pytest.raises(InvalidInput, match="role must be a string"):
        roles.resolve_tools(tmp_path, "p", None, parse_profile("---\nrole: [a]\n---\n", "p", "t").role)
    assert parse_profile("---\nrole: reviewer\n---\n", "p", "t").role == "reviewer"


# --- what the CLIs get ----------------------------------------------------------------------
def _ctx(tmp_path: Path, tools: list[str] | None, **kw) -> LaunchContext:
    return LaunchContext(
        terminal_id="abcd1234",
        profile_name="p",
        system_prompt="",
        working_directory=str(tmp_path),
        home_dir=tmp_path / "cao",
        allowed_tools=tools,
        **kw,
    )


def test_no_role_no_tools_gets_developer_in_claude_code_and_codex(tmp_path: Path):
    profile = parse_profile("---\nname: plain\n---\nHi.\n", "plain", "t")
    tools = roles.resolve_tools(tmp_path, profile.name, profile.allowed_tools, profile.role)
    ctx = _ctx(tmp_path, tools.tools)
    # Claude: the developer set runs without asking, nothing of the builtins is refused.
    rules = claude_code.permissions(ctx)
    assert "deny" not in rules and {"Bash", "Write", "Edit", "Read", "WebFetch"} <= set(rules["allow"])
    over = dict(codex.overrides(ctx))
    assert over["sandbox_mode"] == "workspace-write" and over["approval_policy"] == "never"


def test_supervisor_role_is_refused_writes_and_shell(tmp_path: Path):
    tools = roles.resolve_tools(tmp_path, "s", None, "supervisor")
    extra = {"mcpServers": {"docs": {"command": "docs"}}}
    rules = claude_code.permissions(_ctx(tmp_path, tools.tools, profile_extra=extra))
    assert rules["allow"] == ["mcp__cao-mcp-server", "Read", "Grep", "Glob", "LS"]
    assert {"Bash", "Write", "Edit", "WebFetch", "mcp__docs"} <= set(rules["deny"]) and "Read" not in rules["deny"]
    over = dict(codex.overrides(_ctx(tmp_path, tools.tools, profile_extra=extra)))
    assert over["sandbox_mode"] == "read-only" and "mcp_servers.docs" not in over


def test_the_set_runs_without_asking_and_yolo_is_unrestricted(tmp_path: Path):
    rules = claude_code.permissions(_ctx(tmp_path, ["fs_read", "execute_bash"]))
    assert rules["allow"] == ["mcp__cao-mcp-server", "Read", "Grep", "Bash", "BashOutput", "KillShell"]
    assert "Write" in rules["deny"]
    assert claude_code.permissions(_ctx(tmp_path, ["fs_read"], yolo=True)) == {"allow": ["mcp__cao-mcp-server"]}
    assert "sandbox_mode" not in dict(codex.overrides(_ctx(tmp_path, ["fs_read"], yolo=True)))
    assert kiro_cli.agent_tools(["fs_read", "@docs"]) == {"tools": ["fs_read", "@docs"]}


def test_yolo_is_unrestricted_whatever_the_set(tmp_path: Path):
    """--yolo means unrestricted: neither a role's defaults nor a set the profile names narrow it."""
    developer = list(roles.ROLE_DEFAULTS["developer"])
    for tools in (developer, ["fs_read"]):
        rules = opencode_cli._permissions(_ctx(tmp_path, tools, yolo=True))
        assert rules["*"] == "allow" and "bash" not in rules
        assert claude_code.permissions(_ctx(tmp_path, tools, yolo=True)) == {"allow": ["mcp__cao-mcp-server"]}
    unattended = opencode_cli._permissions(_ctx(tmp_path, developer))
    assert unattended["*"] == "deny" and unattended["bash"] == "allow" and unattended["edit"] == "allow"
    reviewer = opencode_cli._permissions(_ctx(tmp_path, ["fs_read", "fs_list", "@cao-mcp-server"]))
    assert reviewer["*"] == "deny" and "bash" not in reviewer and "edit" not in reviewer


# --- the API --------------------------------------------------------------------------------
BAD = {
    "bad_role": "---\nname: bad_role\nprovider: mock_cli\nrole: overlord\n---\nx\n",
    "bad_tool": "---\nname: bad_tool\nprovider: mock_cli\nallowedTools: [fs_read, rm_everything]\n---\nx\n",
    "custom_role": "---\nname: custom_role\nprovider: mock_cli\nrole: auditor\n---\nx\n",
    "plain": "---\nname: plain\nprovider: mock_cli\n---\nNeither role nor allowedTools.\n",
}


@pytest.mark.parametrize(
    ("profile", "named"), [("bad_role", "unknown role 'overlord'"), ("bad_tool", "unknown tool 'rm_everything'")]
)
def test_bad_role_or_tool_is_400_and_nothing_is_created(cao: CaoServer, profile: str, named: str):
    store = cao.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    (store / f"{profile}.md").write_text(BAD[profile])
    windows_before = cao.tmux("list-windows", "-a", "-F", "#{window_id}").stdout
    resp = cao.client.post("/sessions", params={"agent_profile": profile})
    assert resp.status_code == 400, resp.text
    assert named in resp.json()["detail"]
    assert cao.client.get("/terminals").json() == [] and cao.client.get("/sessions").json() == []
    assert cao.tmux("list-windows", "-a", "-F", "#{window_id}").stdout == windows_before


def test_request_tools_are_checked_too_and_a_user_role_works(cao: CaoServer):
    store = cao.home / "agent-store"
    store.mkdir(parents=True, exist_ok=True)
    for name in ("custom_role", "plain"):
        (store / f"{name}.md").write_text(BAD[name])
    (cao.home / "settings.json").write_text(json.dumps({"roles": {"auditor": ["fs_read", "@cao-mcp-server"]}}))
    resp = cao.client.post("/sessions", params={"agent_profile": "plain", "allowed_tools": "fs_read,nope"})
    assert resp.status_code == 400 and "unknown tool 'nope'" in resp.json()["detail"], resp.text
    assert cao.client.get("/terminals").json() == []
    term = cao.create_session("custom_role")
    assert term["allowed_tools"] == ["fs_read", "@cao-mcp-server"]
    assert cao.create_session("plain")["allowed_tools"] == DEVELOPER  # neither role nor tools: developer
