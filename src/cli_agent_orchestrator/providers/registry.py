"""Name → provider. One line per provider; the modules hold the details."""
from __future__ import annotations

import importlib
from pathlib import Path

from ..errors import InvalidInput
from .base import Provider

# Provider name → module under cli_agent_orchestrator.providers exposing PROVIDER.
PROVIDER_MODULES: dict[str, str] = {
    "mock_cli": "mock_cli",
    "claude_code": "claude_code",
    "codex": "codex",
    "gemini_cli": "gemini_cli",
    "qwen_cli": "qwen_cli",
    "opencode_cli": "opencode_cli",
    "kiro_cli": "kiro_cli",
}
DEFAULT_PROVIDER = "kiro_cli"  # the seeds' default when neither request nor profile names one


def provider_names() -> list[str]:
    """Providers whose module is present (a provider lands with its module)."""
    here = Path(__file__).resolve().parent
    return sorted(name for name, module in PROVIDER_MODULES.items() if (here / f"{module}.py").exists())


def get_provider(name: str) -> Provider:
    module = PROVIDER_MODULES.get(name)
    if module is None or name not in provider_names():
        raise InvalidInput(f"unknown provider {name!r}; available: {', '.join(provider_names())}")
    return importlib.import_module(f"{__package__}.{module}").PROVIDER
