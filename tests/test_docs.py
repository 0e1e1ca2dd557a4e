"""Docs that cannot drift: what the code holds is what its documentation says."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

from cli_agent_orchestrator import errors
from cli_agent_orchestrator.plugins import hookspecs


def test_the_exception_tree_drawn_in_errors_py_is_the_one_in_the_code():
    drawn: dict[str, tuple[str | None, int]] = {}  # class -> (parent, http status)
    parents: list[tuple[int, str]] = []  # (indent, class) of the branch above
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^(\s*(?:[│ ]\s*)*(?:[├└]── )?)([A-Z]\w+)(?: \((\d{3})\))?", line)
        if not found or not hasattr(errors, found.group(2)):
            continue
        indent, name = len(found.group(1)), found.group(2)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        cls = getattr(errors, name)
        drawn[name] = (parents[-1][1] if parents else None, int(found.group(3) or cls.http_status))
        parents.append((indent, name))
    actual = {
        name: (cls.__base__.__name__ if cls is not errors.CaoError else None, cls.http_status)
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.CaoError) and cls.__module__ == errors.__name__
    }
    assert drawn == actual


# --- the documentation pages ----------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md")), REPO / "bench" / "README.md", REPO / "examples" / "README.md"]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _word(name: str, text: str) -> bool:
    return re.search(rf"(?<![A-Z0-9_]){re.escape(name)}(?![A-Z0-9_])", text) is not None


def test_every_setting_variable_is_documented_in_the_configuration_page():
    source = (REPO / "src" / "cli_agent_orchestrator" / "settings.py").read_text(encoding="utf-8")
    # A name ending in "_" is a prefix the code matches on, not a variable.
    names = {name for name in re.findall(r"CAO_[A-Z0-9_]+", source) if not name.endswith("_")}
    assert names, "settings.py names no CAO_* variable: has it moved?"
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    missing = sorted(name for name in names if not _word(name, page))
    assert not missing, f"settings.py reads {missing}, which docs/configuration.md does not document"


def test_every_plugin_hook_is_named_in_the_plugins_page():
    marker = f"{hookspecs.PROJECT}_spec"  # the attribute pluggy's HookspecMarker sets
    hooks = {
        name
        for _, cls in inspect.getmembers(hookspecs, inspect.isclass)
        for name, function in inspect.getmembers(cls, inspect.isfunction)
        if hasattr(function, marker)
    }
    assert len(hooks) >= 10, f"found only {sorted(hooks)} in hookspecs.py"
    page = (DOCS / "plugins.md").read_text(encoding="utf-8")
    missing = sorted(hook for hook in hooks if f"`{hook}`" not in page)
    assert not missing, f"hookspecs.py declares {missing}, which docs/plugins.md does not name"


def test_the_cli_reference_in_the_cli_page_is_what_help_prints():
    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "scripts" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    cli_reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli_reference)
    documented = cli_reference.documented_reference()
    assert documented == cli_reference.render_reference() + "\n", (
        "docs/cli.md's reference differs from --help: run `python scripts/cli_reference.py` to regenerate it"
    )
    assert "#### `cao launch`" in documented and "### `cao-server`" in documented


def _anchors(page: Path) -> set[str]:
    """The heading anchors a Markdown renderer makes for `page` (GitHub's rule, without the
    numbering of repeated headings)."""
    headings = re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_in_the_readme_docs_bench_and_examples_leads_somewhere():
    broken = []
    for page in PAGES:
        for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto: — not ours to check offline
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme_and_the_index():
    for index in (REPO / "README.md", DOCS / "README.md"):
        linked = {(index.parent / target.partition("#")[0]).resolve() for target in LINK.findall(index.read_text())}
        unlinked = [page.name for page in DOCS.glob("*.md") if page.name != "README.md" and page not in linked]
        assert not unlinked, f"{index.relative_to(REPO)} does not link {unlinked}"
