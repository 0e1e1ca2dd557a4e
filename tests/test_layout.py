"""The shape of the package, pinned (docs/architecture.md): a newcomer finds one concept per
module, the kernel alone at the root, and arrows that point down only."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import cli_agent_orchestrator
from cli_agent_orchestrator import events
from cli_agent_orchestrator.events import Event

PACKAGE = Path(cli_agent_orchestrator.__file__).resolve().parent
MAX_LINES = 450
# The root holds the kernel only: what every layer needs (settings, errors, the bus, the
# composition root, shared records and file rules). A feature belongs in a package.
KERNEL = {
    "__init__.py",
    "actor.py",
    "agent_credentials.py",
    "auth_token.py",
    "bootstrap.py",
    "bus.py",
    "errors.py",
    "models.py",
    "private_files.py",
    "process_tree.py",
    "runtime_dir.py",
    "settings.py",
    "tasks.py",
    "user_settings.py",
}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """The package-relative modules a file imports (`..flows.records` from store/ → `flows.records`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = path.relative_to(PACKAGE).parent.parts
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - (node.level - 1)]) if node.level > 1 else list(here)
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                found.add(target)
            elif node.module and node.module.startswith("cli_agent_orchestrator."):
                found.add(node.module.removeprefix("cli_agent_orchestrator."))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("cli_agent_orchestrator."):
                    found.add(alias.name.removeprefix("cli_agent_orchestrator."))
    return found


def test_no_module_is_over_the_line_limit():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (usually two concepts: split them): {long}"


def test_the_root_holds_the_kernel_only():
    root = {p.name for p in PACKAGE.glob("*.py")}
    assert root == KERNEL, (
        f"new at the root: {sorted(root - KERNEL)}; gone: {sorted(KERNEL - root)} "
        "(a feature goes in its package; change KERNEL only for what every layer needs)"
    )


def test_the_store_imports_records_not_features():
    """The store is an adapter below the services: it may know their records, never their
    parsers, services or providers (a flow-file parser pulled the profile loader in once)."""
    wrong = {}
    for path in (PACKAGE / "store").glob("*.py"):
        outside = {
            name
            for name in _imports(path)
            if not name.startswith("store") and name not in ("errors", "models") and not name.endswith(".records")
        }
        if outside:
            wrong[path.name] = sorted(outside)
    assert not wrong, f"store modules importing beyond records: {wrong}"


def test_the_cli_and_mcp_relay_never_import_the_service_layer():
    """Clients talk to the server over HTTP, like curl (STYLE.md): cao's CLI commands and the
    stdio relay import no service, store or backend module."""
    wrong = {}
    paths = [*(PACKAGE / "cli" / "commands").glob("*.py"), PACKAGE / "mcp_server" / "relay.py"]
    for path in paths:
        bad = {n for n in _imports(path) if n.split(".")[0] in ("services", "store", "backends")}
        if bad:
            wrong[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert not wrong, f"clients importing the service layer: {wrong}"


def test_every_event_is_exported_frozen_and_named_once():
    defined = {
        obj
        for module in (PACKAGE / "events").glob("*.py")
        if module.name != "__init__.py"
        for obj in vars(__import__(f"cli_agent_orchestrator.events.{module.stem}", fromlist=["x"])).values()
        if inspect.isclass(obj)
        and issubclass(obj, Event)
        and obj.__module__.startswith("cli_agent_orchestrator.events.")
    }
    exported = {getattr(events, name) for name in events.__all__}
    missing = sorted(cls.__name__ for cls in defined - exported)
    assert not missing, f"events not in cli_agent_orchestrator.events.__all__: {missing}"
    assert len(events.__all__) == len(set(events.__all__))
    for cls in defined:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, f"{cls.__name__} is not frozen"  # type: ignore[attr-defined]
