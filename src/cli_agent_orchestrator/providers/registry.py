"""Name → provider. One line per built-in provider; the modules hold the details.

Providers from other installed packages are found through the entry point group
``cli_agent_orchestrator.providers``. Writing a provider: build a
``cli_agent_orchestrator.providers.base.Provider`` (its ``name`` is the provider name) in
your own package and register it in that package's pyproject.toml::

    [project.entry-points."cli_agent_orchestrator.providers"]
    my_cli = "my_package.provider:PROVIDER"

Once the package is installed next to cao, ``--provider my_cli`` and profiles with
``provider: my_cli`` use it. The mock agent's ``mock_cli`` provider (``testkit/``,
``cao_testkit.provider``) is registered exactly this way and is the worked example.
A built-in name wins over an entry point of the same name. An entry point that fails to
load (an import error, not a Provider, a different name) only makes its own provider
unavailable: asking for it says why, and ``provider_names()`` leaves it out.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from ..errors import InvalidInput
from .base import Provider

ENTRY_POINT_GROUP = "cli_agent_orchestrator.providers"

# Built-in provider name → module under cli_agent_orchestrator.providers exposing PROVIDER.
PROVIDER_MODULES: dict[str, str] = {
    "claude_code": "claude_code",
    "codex": "codex",
    "gemini_cli": "gemini_cli",
    "qwen_cli": "qwen_cli",
    "opencode_cli": "opencode_cli",
    "kiro_cli": "kiro_cli",
    "copilot_cli": "copilot_cli",
    "hermes": "hermes",
    "omp": "omp",
    "aider": "aider",
    "grok_cli": "grok_cli",
}

# Names users of other orchestrators know, refused with the reason (docs/providers.md).
UNSUPPORTED: dict[str, str] = {
    "kimi_cli": "kimi-cli cannot run with cao's Python 3.11: every release needs Python 3.12 or later, "
    "and its last one (1.52.0) only prints a notice pointing to its successor, which is not on PyPI or npm",
}

_lock = threading.RLock()  # RLock: a plugin module may look providers up while it loads


@dataclass(frozen=True)
class _Unusable:
    reason: str


_loaded: dict[str, Provider | _Unusable] = {}  # entry point name → its Provider, or why not


@cache
def _builtin_names() -> frozenset[str]:
    """Built-ins whose module is present (a provider lands with its module)."""
    here = Path(__file__).resolve().parent
    return frozenset(name for name, module in PROVIDER_MODULES.items() if (here / f"{module}.py").exists())


@cache
def _plugins() -> dict[str, list[EntryPoint]]:
    """Entry points of installed distributions, by name (built-in names excluded). Scanned once."""
    found: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in PROVIDER_MODULES and all(ep.value != seen.value for seen in found.get(ep.name, [])):
            found.setdefault(ep.name, []).append(ep)
    return found


def _origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"entry point {ep.name} = {ep.value}" + (f" of {dist.name} {dist.version}" if dist else "")


def _check(name: str, ep: EntryPoint) -> Provider | _Unusable:
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
        return _Unusable(f"provider {name!r} failed to load ({_origin(ep)}): {type(exc).__name__}: {exc}")
    if not isinstance(obj, Provider):
        return _Unusable(f"provider {name!r} ({_origin(ep)}) is a {type(obj).__name__}, not a Provider")
    if obj.name != name:
        return _Unusable(f"provider {name!r} ({_origin(ep)}) is named {obj.name!r}; the names must match")
    return obj


def _load(name: str) -> Provider | _Unusable:
    """The plugin provider `name`, or why it cannot be used. Loaded once per name."""
    with _lock:
        if name not in _loaded:
            eps = _plugins().get(name, [])
            if len(eps) == 1:
                _loaded[name] = _check(name, eps[0])
            elif eps:
                _loaded[name] = _Unusable(f"provider {name!r} is registered twice: " + "; ".join(map(_origin, eps)))
            else:
                return _Unusable(f"provider {name!r} is no longer installed")
        return _loaded[name]


def refresh() -> None:
    """Forget discovered entry points and loaded plugins (after installing a package at run time)."""
    with _lock:
        _builtin_names.cache_clear()
        _plugins.cache_clear()
        _loaded.clear()


def provider_names() -> list[str]:
    """Every usable provider: the built-ins and the entry points that load."""
    plugins = [name for name in _plugins() if isinstance(_load(name), Provider)]
    return sorted({*_builtin_names(), *plugins})


def get_provider(name: str) -> Provider:
    if name in _builtin_names():
        return importlib.import_module(f"{__package__}.{PROVIDER_MODULES[name]}").PROVIDER
    if name in _plugins():
        found = _load(name)
        if isinstance(found, Provider):
            return found
        raise InvalidInput(f"{found.reason}; available: {', '.join(provider_names())}")
    if name in UNSUPPORTED:
        raise InvalidInput(f"provider {name!r} is not supported: {UNSUPPORTED[name]}")
    raise InvalidInput(f"unknown provider {name!r}; available: {', '.join(provider_names())}")
