"""Skills through their public surfaces: `cao skills add|list|show|remove` (local folders and
allow-listed URLs), the HTTP routes, the `load_skill` MCP tool over the real relay, and the
profile key `skills:` that decides what an agent sees and may load. (The catalogue in a real
agent's system prompt, and a real Claude Code agent loading a skill, are in
test_real_claude_code.py.)
"""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cao_support import CaoServer, cli
from mcp_support import agent_env, call, mcp_session

pytestmark = pytest.mark.anyio

REVIEW_SKILL = (
    "---\nname: pr-review\ndescription: >\n  Review a pull request the team's way:\n  checklist first.\n---\n"
    "# PR review\n\nRun scripts/check.sh, then walk CHECKLIST.md top to bottom. SKILL-BODY-7741\n"
)


def make_skill(root: Path, folder: str, text: str, files: dict[str, str] | None = None) -> Path:
    """A skill folder as a user keeps one (Claude Code's layout): SKILL.md and its files."""
    path = root / folder
    path.mkdir(parents=True)
    (path / "SKILL.md").write_text(text)
    for rel, content in (files or {}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(content)
    return path


def simple_skill(name: str, description: str = "", body: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description or 'About ' + name}\n---\n{body or 'Do ' + name}.\n"


def store_listing(server: CaoServer) -> list[str]:
    """Everything under the server's skill store, as relative paths (temporary folders included)."""
    root = server.home / "skills"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def skills_json(server: CaoServer, *args: str) -> list[dict]:
    done = cli(server, "skills", "list", "--json", *args, check=True)
    return json.loads(done.stdout)


def write_profiles(server: CaoServer, profiles: dict[str, str]) -> None:
    store = server.home / "agent-store"
    store.mkdir(exist_ok=True)
    for name, text in profiles.items():
        (store / f"{name}.md").write_text(text)


# --- the CLI and HTTP: add, list, show, remove ------------------------------------------------
def test_a_folder_added_with_the_cli_is_listed_shown_with_its_files_and_removed(cao: CaoServer, tmp_path: Path):
    source = make_skill(
        tmp_path,
        "review-folder",
        REVIEW_SKILL,
        {"scripts/check.sh": "#!/bin/sh\necho ok\n", "CHECKLIST.md": "- tests pass\n"},
    )
    os.chmod(source / "scripts" / "check.sh", 0o755)

    added = json.loads(cli(cao, "skills", "add", str(source), "--json", check=True).stdout)
    # Named by the frontmatter, not the folder; SKILL.md and both files copied.
    assert added["name"] == "pr-review" and added["files"] == 3 and added["replaced"] is False
    copied = cao.home / "skills" / "pr-review"
    assert (copied / "CHECKLIST.md").read_text() == "- tests pass\n"
    assert os.access(copied / "scripts" / "check.sh", os.X_OK)  # a shipped script stays runnable
    assert store_listing(cao) == ["pr-review", "pr-review/CHECKLIST.md", "pr-review/SKILL.md", "pr-review/scripts",
                                  "pr-review/scripts/check.sh"]  # fmt: skip

    [listed] = skills_json(cao)
    assert listed["name"] == "pr-review" and listed["source"] == "store" and listed["loadable"] is True
    # The folded YAML description becomes one catalogue line.
    assert listed["description"] == "Review a pull request the team's way: checklist first."
    assert cao.client.get("/skills").json() == [listed]

    shown = cao.client.get("/skills/pr-review")
    assert shown.status_code == 200, shown.text
    doc = shown.json()
    assert doc["text"].startswith("# PR review") and "SKILL-BODY-7741" in doc["text"]
    assert "name: pr-review" not in doc["text"]  # the body, without its frontmatter
    assert doc["files"] == [str(copied / "CHECKLIST.md"), str(copied / "scripts" / "check.sh")]
    assert all(f in doc["text"] for f in doc["files"])  # the agent is told where to read them
    assert json.loads(cli(cao, "skills", "show", "pr-review", "--json", check=True).stdout) == doc

    again = cli(cao, "skills", "add", str(source))
    assert again.returncode == 1 and "already in cao's skill store" in again.stderr and "--force" in again.stderr
    (source / "CHECKLIST.md").write_text("- tests pass\n- docs updated\n")
    replaced = json.loads(cli(cao, "skills", "add", str(source), "--force", "--json", check=True).stdout)
    assert replaced["replaced"] is True and "docs updated" in (copied / "CHECKLIST.md").read_text()

    removed = json.loads(cli(cao, "skills", "remove", "pr-review", "--json", check=True).stdout)
    assert removed == {"removed": "pr-review", "directory": str(copied)}
    assert store_listing(cao) == [] and skills_json(cao) == []
    assert cao.client.get("/skills/pr-review").status_code == 404
    gone = cli(cao, "skills", "remove", "pr-review")
    assert gone.returncode == 1 and "not in cao's skill store" in gone.stderr


def test_a_users_own_skill_directory_is_read_in_place_and_never_written(cao: CaoServer, tmp_path: Path):
    claude_skills = tmp_path / "dot-claude" / "skills"  # e.g. ~/.claude/skills, unchanged
    make_skill(claude_skills, "commit-style", simple_skill("commit-style", "How we write commit messages"))
    make_skill(claude_skills, "shadowed", simple_skill("shadowed", "the user's copy"))
    (claude_skills / "not-a-skill").mkdir()  # a folder without SKILL.md is not listed
    (cao.home / "settings.json").write_text(json.dumps({"skills_dirs": [str(claude_skills)]}))
    make_skill(tmp_path / "src", "shadowed", simple_skill("shadowed", "cao's copy"))
    cli(cao, "skills", "add", str(tmp_path / "src" / "shadowed"), check=True)

    listed = {s["name"]: s for s in cao.client.get("/skills").json()}
    assert set(listed) == {"commit-style", "shadowed"}
    assert listed["commit-style"]["source"] == "settings"
    assert listed["commit-style"]["directory"] == str(claude_skills / "commit-style")
    # cao's store comes first; the hidden folder is named.
    assert listed["shadowed"]["description"] == "cao's copy"
    assert listed["shadowed"]["shadows"] == [str(claude_skills / "shadowed")]

    refused = cao.client.delete("/skills/commit-style")
    assert refused.status_code == 400 and "does not delete from your own skill directories" in refused.json()["detail"]
    assert (claude_skills / "commit-style" / "SKILL.md").exists()

    (cao.home / "settings.json").write_text(json.dumps({"skills_dirs": "not a list"}))
    broken = cli(cao, "skills", "list")
    assert broken.returncode == 1 and "skills_dirs must be a list of paths" in broken.stderr


def test_a_skill_whose_skill_md_does_not_read_is_listed_as_unreadable(cao: CaoServer):
    make_skill(cao.home / "skills", "broken", "---\nname: [unclosed\n---\nbody\n")
    [entry] = cao.client.get("/skills").json()
    assert entry["loadable"] is False and "invalid YAML frontmatter" in entry["error"]
    shown = cao.client.get("/skills/broken")
    assert shown.status_code == 400 and "invalid YAML frontmatter" in shown.json()["detail"]
    assert "UNREADABLE" in cli(cao, "skills", "list", check=True).stdout


# --- bad input --------------------------------------------------------------------------------
def _hostile_sources(tmp_path: Path) -> list[tuple[str, str]]:
    """(source, the reason the refusal must give) for folders a skill must never come from."""
    outside = tmp_path / "secret.txt"
    outside.write_text("not for agents")
    no_md = tmp_path / "no-md"
    no_md.mkdir()
    (no_md / "README.md").write_text("hi")
    bad_name = make_skill(tmp_path, "bad-name", "---\nname: ../../escape\ndescription: x\n---\nbody\n")
    dotted = make_skill(tmp_path, "dotted", "---\nname: a.b\n---\nbody\n")
    leak = make_skill(tmp_path, "leak", simple_skill("leak"))
    (leak / "key").symlink_to(outside)
    leak_dir = make_skill(tmp_path, "leak-dir", simple_skill("leak-dir"))
    (leak_dir / "up").symlink_to(tmp_path)
    fifo = make_skill(tmp_path, "fifo", simple_skill("fifo"))
    os.mkfifo(fifo / "pipe")
    huge = make_skill(tmp_path, "huge", simple_skill("huge"))
    with open(huge / "blob.bin", "wb") as fh:
        fh.truncate(8 * 1024 * 1024 + 1)  # sparse: its size is what counts
    huge_md = make_skill(tmp_path, "huge-md", simple_skill("huge-md", body="x" * 300_000))
    not_yaml = make_skill(tmp_path, "not-yaml", "---\n- a list\n---\nbody\n")
    control = make_skill(tmp_path, "control", simple_skill("control"))
    (control / "evil\x1b]0;x\x07name").write_text("x")
    return [
        (str(tmp_path / "missing"), "is not a folder"),
        (str(no_md), "has no SKILL.md"),
        (str(bad_name), "invalid skill name"),
        (str(dotted), "invalid skill name"),
        (str(leak), "symlink leading outside the folder"),
        (str(leak_dir), "symlink leading outside the folder"),
        (str(fifo), "is not a regular file"),
        (str(huge), "larger than 8388608 bytes"),
        (str(huge_md), "larger than 262144 bytes"),
        (str(not_yaml), "frontmatter must be a mapping"),
        (str(control), "control characters"),
        ("https://example.com/skills/x/SKILL.md", "is not allowed"),
        ("ftp://github.com/x/SKILL.md", "only https"),
        ("https://user:pw@github.com/x/SKILL.md", "credentials in the URL"),
    ]


def test_hostile_or_broken_sources_are_refused_and_nothing_is_written(cao_factory, tmp_path: Path):
    cao = cao_factory()  # never started: `cao skills` works on the home's files, without a server
    for source, reason in _hostile_sources(tmp_path):
        done = cli(cao, "skills", "add", source)
        assert done.returncode == 1 and reason in done.stderr, (source, done.stderr)
        assert store_listing(cao) == [], source  # not even a temporary folder stays
    assert skills_json(cao) == []


def test_the_http_routes_take_no_local_path_and_no_hostile_name(cao: CaoServer, tmp_path: Path):
    source = make_skill(tmp_path, "local", simple_skill("local"))
    local = cao.client.post("/skills", json={"source": str(source)})
    assert local.status_code == 400 and "is not a URL" in local.json()["detail"]
    foreign = cao.client.post("/skills", json={"source": "https://example.com/a/SKILL.md"})
    assert foreign.status_code == 400 and "is not allowed" in foreign.json()["detail"]
    assert cao.client.post("/skills", json={"source": "x", "extra": 1}).status_code == 422
    for name in ("a.b", "-x", "x" * 65, "%2e%2e"):
        assert cao.client.get(f"/skills/{name}").status_code == 422, name
        assert cao.client.delete(f"/skills/{name}").status_code == 422, name
    assert cao.client.get("/skills/..%2F..%2Fetc").status_code in (404, 422)
    assert cao.client.get("/skills/nothing-here").status_code == 404
    assert cao.client.delete("/skills/nothing-here").status_code == 404
    assert store_listing(cao) == []


# --- URLs -------------------------------------------------------------------------------------
class _Pages(http.server.BaseHTTPRequestHandler):
    pages: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.pages.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def skill_site() -> Iterator[str]:
    """A local web server (loopback: the one place plain http is accepted, when allow-listed)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    _Pages.pages = {
        "/team/deploy-check/SKILL.md": b"---\ndescription: Check a deploy\n---\nLook at the dashboards.\n",
        "/team/named/SKILL.md": simple_skill("from-frontmatter").encode(),
        "/page.html": b"<!doctype html><html>not a skill</html>",
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_skill_md_from_an_allow_listed_url_is_added_by_cli_and_http(cao_factory, skill_site: str):
    server = cao_factory(CAO_PROFILE_ALLOWED_HOSTS="127.0.0.1").start()
    by_cli = json.loads(cli(server, "skills", "add", f"{skill_site}/team/deploy-check/SKILL.md", "--json",
                            check=True).stdout)  # fmt: skip
    # No frontmatter name: the URL's folder names it.
    assert by_cli["name"] == "deploy-check" and by_cli["source_kind"] == "url" and by_cli["files"] == 1
    by_http = server.client.post("/skills", json={"source": f"{skill_site}/team/named/SKILL.md"})
    assert by_http.status_code == 201, by_http.text
    assert by_http.json()["name"] == "from-frontmatter"
    assert {s["name"] for s in server.client.get("/skills").json()} == {"deploy-check", "from-frontmatter"}
    assert server.client.get("/skills/deploy-check").json()["text"] == "Look at the dashboards."

    page = server.client.post("/skills", json={"source": f"{skill_site}/page.html"})
    assert page.status_code == 400 and "is not a SKILL.md" in page.json()["detail"]
    missing = cli(server, "skills", "add", f"{skill_site}/nothing/SKILL.md")
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr
    twice = server.client.post("/skills", json={"source": f"{skill_site}/team/named/SKILL.md"})
    assert twice.status_code == 400 and "already in cao's skill store" in twice.json()["detail"]
    forced = server.client.post("/skills", json={"source": f"{skill_site}/team/named/SKILL.md", "force": True})
    assert forced.status_code == 201 and forced.json()["replaced"] is True
    assert store_listing(server) == [
        "deploy-check",
        "deploy-check/SKILL.md",
        "from-frontmatter",
        "from-frontmatter/SKILL.md",
    ]


# --- agents: load_skill and the profile's `skills:` ------------------------------------------
PROFILES = {
    "sees_alpha": "---\nname: sees_alpha\nprovider: mock_cli\nskills: [alpha]\n---\nOnly alpha.\n",
    "sees_none": "---\nname: sees_none\nprovider: mock_cli\nskills: []\n---\nNo skills.\n",
    "sees_all": "---\nname: sees_all\nprovider: mock_cli\n---\nEvery skill.\n",
    "bad_skills": "---\nname: bad_skills\nprovider: mock_cli\nskills: alpha\n---\nA string, not a list.\n",
}


async def test_load_skill_gives_an_agent_only_what_its_profile_allows(cao: CaoServer, tmp_path: Path):
    write_profiles(cao, PROFILES)
    for name in ("alpha", "beta"):
        source = make_skill(tmp_path, name, simple_skill(name, body=f"{name.upper()}-INSTRUCTIONS"), {"ref.md": "r"})
        cli(cao, "skills", "add", str(source), check=True)
    alpha, none, every = (cao.create_session(p)["id"] for p in ("sees_alpha", "sees_none", "sees_all"))

    # The catalogue each agent was given is the same set it may load.
    assert cao.client.get(f"/terminals/{alpha}/skills").json() == [{"name": "alpha", "description": "About alpha"}]
    assert cao.client.get(f"/terminals/{none}/skills").json() == []
    assert [s["name"] for s in cao.client.get(f"/terminals/{every}/skills").json()] == ["alpha", "beta"]
    assert [s["name"] for s in skills_json(cao, "--profile", "sees_alpha")] == ["alpha"]
    assert [s["name"] for s in cao.client.get("/skills", params={"profile": "sees_none"}).json()] == []

    async with mcp_session(agent_env(cao, alpha)) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert list(tools["load_skill"].input_schema["properties"]) == ["name"]
        loaded = await call(session, "load_skill", name="alpha")
        refused = await call(session, "load_skill", name="beta")
        hostile = await call(session, "load_skill", name="../../etc/passwd")
    assert loaded["success"] is True and loaded["name"] == "alpha"
    assert loaded["text"].startswith("ALPHA-INSTRUCTIONS")
    assert loaded["files"] == [str(cao.home / "skills" / "alpha" / "ref.md")] and loaded["files"][0] in loaded["text"]
    assert refused["success"] is False
    assert "'beta' is not one profile 'sees_alpha' may use" in refused["error"] and "allows: alpha" in refused["error"]
    assert hostile == {"success": False, "error": "invalid skill name '../../etc/passwd': use 1-64 of [A-Za-z0-9_-]"}

    async with mcp_session(agent_env(cao, none)) as session:
        nothing = await call(session, "load_skill", name="alpha")
    assert nothing["success"] is False and "allows: none" in nothing["error"]
    async with mcp_session(agent_env(cao, every)) as session:
        unknown = await call(session, "load_skill", name="gamma")
    assert unknown["success"] is False and "skill 'gamma' not found" in unknown["error"]
    async with mcp_session(agent_env(cao, None)) as session:  # the user, outside any agent
        beta = await call(session, "load_skill", name="beta")
    assert beta["success"] is True and beta["text"].startswith("BETA-INSTRUCTIONS")

    bad = cao.client.post("/sessions", params={"agent_profile": "bad_skills", "provider": "mock_cli"})
    assert bad.status_code == 400 and "skills must be a list of skill names" in bad.json()["detail"]
