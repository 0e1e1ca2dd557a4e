"""The provider registry: built-ins from its table, others through the entry point group.

The mock agent's provider lives in testkit/ (cao_testkit) and is found exactly as a
third-party provider would be; nothing in the product package imports the test doubles.
"""

from __future__ import annotations

import ast
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest

import cao_testkit.provider
import cli_agent_orchestrator
from cli_agent_orchestrator.errors import InvalidInput
from cli_agent_orchestrator.providers import registry
from cli_agent_orchestrator.providers.registry import ENTRY_POINT_GROUP, get_provider, provider_names

BUILT_INS = {
    *("claude_code", "codex", "gemini_cli", "qwen_cli", "opencode_cli", "kiro_cli"),
    *("copilot_cli", "hermes", "omp", "aider", "grok_cli"),  # issue 27
}


@pytest.fixture
def fresh_registry():
    registry.refresh()
    yield
    registry.refresh()


def test_mock_provider_is_found_through_its_entry_point(fresh_registry) -> None:
    eps = entry_points(group=ENTRY_POINT_GROUP)
    assert ("mock_cli", "cao_testkit.provider:PROVIDER") in {(ep.name, ep.value) for ep in eps}
    provider = get_provider("mock_cli")
    assert provider is cao_testkit.provider.PROVIDER and provider.name == "mock_cli"
    assert provider.build_launch.__module__ == "cao_testkit.provider"
    assert set(provider_names()) == BUILT_INS | {"mock_cli"}
    for name in BUILT_INS:  # built-ins come from the product package
        assert get_provider(name).build_launch.__module__.startswith("cli_agent_orchestrator.providers.")


def test_unknown_provider_names_the_available_ones(fresh_registry) -> None:
    with pytest.raises(InvalidInput) as err:
        get_provider("no_such_cli")
    assert str(err.value).startswith("unknown provider 'no_such_cli'; available: ")
    assert all(name in str(err.value) for name in BUILT_INS | {"mock_cli"})


def test_a_cli_that_cannot_run_here_is_refused_with_its_reason(fresh_registry) -> None:
    with pytest.raises(InvalidInput) as err:
        get_provider("kimi_cli")
    assert str(err.value).startswith("provider 'kimi_cli' is not supported: ")
    assert "Python 3.12" in str(err.value)
    assert "kimi_cli" not in provider_names()


def test_a_broken_entry_point_breaks_only_itself(fresh_registry, monkeypatch) -> None:
    real = list(entry_points(group=ENTRY_POINT_GROUP))
    fake = [
        EntryPoint("broken_cli", "cao_no_such_module.provider:PROVIDER", ENTRY_POINT_GROUP),
        EntryPoint("not_a_provider", "cao_testkit.provider:build_launch", ENTRY_POINT_GROUP),
        EntryPoint("misnamed_cli", "cao_testkit.provider:PROVIDER", ENTRY_POINT_GROUP),
        EntryPoint("codex", "cao_testkit.provider:PROVIDER", ENTRY_POINT_GROUP),
    ]  # a built-in's name
    monkeypatch.setattr(registry, "entry_points", lambda group: [*fake, *real] if group == ENTRY_POINT_GROUP else [])
    registry.refresh()

    assert set(provider_names()) == BUILT_INS | {"mock_cli"}
    assert get_provider("mock_cli") is cao_testkit.provider.PROVIDER
    assert get_provider("codex").name == "codex"  # the built-in wins over the entry point
    with pytest.raises(
        InvalidInput,
        match=r"provider 'broken_cli' failed to load .*"
        r"cao_no_such_module\.provider:PROVIDER.*ModuleNotFoundError",
    ) as err:
        get_provider("broken_cli")
    assert "available: " in str(err.value) and "mock_cli" in str(err.value)
    with pytest.raises(InvalidInput, match="'not_a_provider' .* is a function, not a Provider"):
        get_provider("not_a_provider")
    with pytest.raises(InvalidInput, match="'misnamed_cli' .* is named 'mock_cli'; the names must match"):
        get_provider("misnamed_cli")


def test_the_product_package_does_not_import_the_test_doubles() -> None:
    root = Path(cli_agent_orchestrator.__file__).resolve().parent
    assert not (root / "mock").exists() and not (root / "scripted_model").exists()
    assert not (root / "providers" / "mock_cli.py").exists()
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith("cao_testkit") else []  # importlib by name
            else:
                continue
            offenders += [
                f"{path.relative_to(root)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] == "cao_testkit"
            ]
    assert not offenders
