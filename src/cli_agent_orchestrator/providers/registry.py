"""Name → provider. One line per provider; the modules hold the details."""
from __future__ import annotations

import importlib

from ..errors import InvalidInput
from .base import Provider

# Provider name → module under cli_agent_orchestrator.providers exposing PROVIDER.
PROVIDER_MODULES: dict[str, str] = {
    "mock_cli": "mock_cli",
}
DEFAULT_PROVIDER = "kiro_cli"  # the seeds' default when neither request nor profile names one


def provider_names() -> list[str]:
    return sorted(PROVIDER_MODULES)


def get_provider(name: str) -> Provider:
    module = PROVIDER_MODULES.get(name)
    if module is None:
        raise InvalidInput(f"unknown provider {name!r}; available: {', '.join(provider_names())}")
    return importlib.import_module(f"{__package__}.{module}").PROVIDER
