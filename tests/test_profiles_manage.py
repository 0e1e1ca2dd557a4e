"""Profiles a user can manage: the catalogue over HTTP, `cao profile …`, `cao env …`, and
extra profile directories from `<home>/settings.json` — a real cao-server, real tmux, the mock agent."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
from cao_support import CaoServer, cli


def run(server: CaoServer, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return cli(server, *args, input=stdin, timeout=60)


def profile_text(description: str, provider: str = "mock_cli", body: str = "You help.", extra: str = "") -> str:
    return f"---\ndescription: {description}\nprovider: {provider}\n{extra}---\n{body}\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def homes(tmp_path: Path, cao_factory):
    """A server whose home has an agent-store profile, an extra directory (relative and
    absolute entries), a duplicate of a built-in, and a broken file."""
    extra_abs = tmp_path / "team-profiles"
    server = cao_factory("home", CAO_DEFAULT_PROVIDER="")  # unset: the control below needs kiro_cli
    home = server.home
    write(home / "agent-store" / "mine.md", profile_text("from the store", extra="tags: [a, b]\nrole: developer\n"))
    write(home / "agent-store" / "both.md", profile_text("store copy"))
    write(home / "agent-store" / "broken.md", "---\nname: [unclosed\n---\nbody\n")
    write(home / "agent-store" / "reviewer.md", profile_text("my reviewer"))
    write(home / "shared" / "teamdev.md", profile_text("from an extra dir"))
    write(extra_abs / "both.md", profile_text("extra copy", provider="no_such_provider"))
    write(extra_abs / "developer.md", profile_text("extra developer"))
    write(home / "settings.json", json.dumps({"extra_profile_dirs": ["shared", str(extra_abs)]}))
    server.start()
    return server, extra_abs


def test_listing_shows_sources_duplicates_and_broken_files(homes) -> None:
    server, extra_abs = homes
    rows = server.client.get("/agents/profiles").json()
    names = [row["name"] for row in rows]
    assert names == sorted(names)
    by_name = {row["name"]: row for row in rows}
    assert by_name["mine"]["source"] == "local" and by_name["mine"]["loadable"] is True
    assert by_name["mine"]["tags"] == ["a", "b"] and by_name["mine"]["role"] == "developer"
    assert by_name["teamdev"]["source"] == "custom" and by_name["teamdev"]["description"] == "from an extra dir"
    assert by_name["code_supervisor"]["source"] == "built-in" and "duplicated_in" not in by_name["code_supervisor"]
    # The agent store wins over an extra dir, which wins over a built-in; the losers are named.
    assert by_name["both"]["description"] == "store copy"
    assert by_name["both"]["duplicated_in"] == [{"source": "custom", "path": str(extra_abs / "both.md")}]
    assert by_name["developer"]["source"] == "custom"
    assert [d["source"] for d in by_name["developer"]["duplicated_in"]] == ["built-in"]
    assert [d["source"] for d in by_name["reviewer"]["duplicated_in"]] == ["built-in"]
    broken = by_name["broken"]
    assert broken["loadable"] is False and "invalid YAML" in broken["error"]


def test_show_profile_as_written_and_errors(homes) -> None:
    server, _ = homes
    write(server.home / "agent-store" / "secretive.md", profile_text("uses ${API_TOKEN}", body="Key: ${API_TOKEN}"))
    write(server.home / ".env", "API_TOKEN=s3cr3t-value\n")
    resp = server.client.get("/agents/profiles/secretive")
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["source"] == "local" and data["provider"] == "mock_cli"
    assert data["system_prompt"] == "Key: ${API_TOKEN}" and data["variables"] == ["API_TOKEN"]
    assert "s3cr3t-value" not in resp.text
    assert "model" not in data and "duplicated_in" not in data  # null fields omitted
    assert server.client.get("/agents/profiles/nobody").status_code == 404
    for bad in ("-dash", "a.b", "x" * 65):
        assert server.client.get(f"/agents/profiles/{bad}").status_code == 422, bad
    resp = server.client.get("/agents/profiles/broken")
    assert resp.status_code == 400 and "invalid YAML" in resp.json()["detail"]


def test_extra_dir_lookup_order_when_starting_agents(homes) -> None:
    server, _ = homes
    # No provider in the request: the profile that wins the lookup decides it. The built-in
    # developer names none (the default, kiro_cli, is not installed here); the extra dir's
    # copy says mock_cli, and the extra dir's `both` names a provider that does not exist.
    for name in ("teamdev", "developer", "both"):
        resp = server.client.post("/sessions", params={"agent_profile": name})
        assert resp.status_code == 201, (name, resp.text)
        assert resp.json()["agent_profile"] == name and resp.json()["provider"] == "mock_cli"
    control = server.client.post("/sessions", params={"agent_profile": "code_supervisor"})  # a plain built-in
    assert control.status_code == 400 and "kiro_cli" in control.text
    assert server.client.get("/agents/profiles/both").json()["description"] == "store copy"
    assert server.client.get("/agents/profiles/developer").json()["description"] == "extra developer"
    # A settings file that is not JSON is a 400 naming it, not a silent fallback.
    write(server.home / "settings.json", "{not json")
    resp = server.client.get("/agents/profiles")
    assert resp.status_code == 400 and "settings.json" in resp.json()["detail"]


def test_cao_profile_commands_and_exit_codes(homes, tmp_path: Path) -> None:
    server, _ = homes
    listed = run(server, "profile", "list")
    assert listed.returncode == 0, listed.stderr
    assert "teamdev" in listed.stdout and "custom" in listed.stdout and "invalid" in listed.stdout
    as_json = json.loads(run(server, "profile", "list", "--json").stdout)
    assert {"mine", "teamdev", "broken", "developer"} <= {row["name"] for row in as_json}

    shown = run(server, "profile", "show", "mine")
    assert shown.returncode == 0 and "from the store" in shown.stdout and "You help." in shown.stdout
    assert json.loads(run(server, "profile", "show", "mine", "--json").stdout)["source"] == "local"
    missing = run(server, "profile", "show", "nobody")
    assert missing.returncode == 1 and "not found" in missing.stderr

    assert run(server, "profile", "validate", "mine").returncode == 0
    bad = run(server, "profile", "validate", "broken")
    assert bad.returncode == 1 and "invalid YAML" in bad.stderr
    good_file = write(tmp_path / "new-agent.md", profile_text("draft", provider="nope", body="Hi ${UNSET_VAR_X}"))
    checked = json.loads(run(server, "profile", "validate", str(good_file), "--json").stdout)
    assert checked["valid"] is True
    warnings = " ".join(m["message"] for m in checked["messages"] if m["severity"] == "warning")
    assert "unknown provider 'nope'" in warnings and "UNSET_VAR_X" in warnings
    bad_file = write(tmp_path / "bad.md", "---\nallowedTools: fs_read\ntags: 3\n---\nx\n")
    result = run(server, "profile", "validate", str(bad_file), "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["valid"] is False
    assert run(server, "profile", "validate", str(tmp_path / "absent.md")).returncode == 1


def test_cao_env_round_trip_keeps_file_private_and_values_hidden(cao) -> None:
    env_file = cao.home / ".env"
    write(env_file, "# my notes\nKEEP=1\n\nexport OTHER='two words'\n")
    assert run(cao, "env", "set", "API_TOKEN", "s3cr3t").returncode == 0
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert run(cao, "env", "set", "SPACED", stdin=" padded \n").returncode == 0

    listed = run(cao, "env", "list")
    assert listed.stdout.split() == ["API_TOKEN", "KEEP", "OTHER", "SPACED"] and "s3cr3t" not in listed.stdout
    hidden = run(cao, "env", "get", "API_TOKEN")
    assert hidden.returncode == 0 and "s3cr3t" not in hidden.stdout and "is set" in hidden.stdout
    assert run(cao, "env", "get", "API_TOKEN", "--show").stdout == "s3cr3t\n"
    assert run(cao, "env", "get", "SPACED", "--show").stdout == " padded \n"
    assert run(cao, "env", "get", "OTHER", "--show").stdout == "two words\n"
    assert run(cao, "env", "get", "NOPE").returncode == 1

    assert run(cao, "env", "set", "API_TOKEN", "rotated").returncode == 0
    assert run(cao, "env", "unset", "KEEP").returncode == 0
    assert env_file.read_text() == "# my notes\n\nexport OTHER='two words'\nAPI_TOKEN=rotated\nSPACED=\" padded \"\n"

    for bad_key in ("1ABC", "A-B", "A B"):
        refused = run(cao, "env", "set", bad_key, "x")
        assert refused.returncode == 1 and "invalid variable name" in refused.stderr
    refused = run(cao, "env", "set", "MULTI", "a\nb")
    assert refused.returncode == 1 and "single line" in refused.stderr
    assert "MULTI" not in env_file.read_text()


def test_env_value_counts_for_validation_but_never_shows_in_the_catalogue(cao) -> None:
    write(
        cao.home / "agent-store" / "needs_token.md",
        profile_text("token user", body="Token is ${MY_TOKEN}"),
    )
    assert run(cao, "env", "set", "MY_TOKEN", "tok-123").returncode == 0
    shown = cao.client.get("/agents/profiles/needs_token")
    assert "tok-123" not in shown.text and "${MY_TOKEN}" in shown.text
    validated = json.loads(run(cao, "profile", "validate", "needs_token", "--json").stdout)
    assert not any("MY_TOKEN" in m["message"] for m in validated["messages"])  # set in .env
