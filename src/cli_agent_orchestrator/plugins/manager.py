"""Which plugins run: the names `<home>/settings.json` enables, found as entry points of the
group `cao.plugins` (the built-ins `webhook` and `audit_log` are found the same way) or, for
development and tests, by import path. A plugin that is not installed, fails to import or
fails to start is logged and listed in GET /diagnostics with why; the server starts anyway.

    {"plugins": {
        "enabled": ["audit_log", "webhook", "slack"],       # what runs, in this order
        "modules": {"slack": "cao_slack_plugin:SlackPlugin"},  # optional: by import path
        "webhook": {"url": "https://…", "secret": "…"},      # each plugin's own settings
        "slack": {"url": "https://hooks.slack.com/…"}}}

An entry point (or import path) names a module of `@hookimpl` functions, or a factory (a
class, say) called with a `PluginContext` that returns an object with `@hookimpl` methods.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pluggy

from ..errors import InvalidInput
from ..user_settings import plugin_settings, settings_path
from .hookspecs import PROJECT, CaoHooks

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "cao.plugins"


@dataclass(frozen=True)
class PluginContext:
    """What a plugin factory is given: its name, its settings (`plugins.<name>`) and the cao home."""

    name: str
    config: dict[str, Any]
    home: Path


@dataclass
class PluginLoad:
    """One enabled plugin's start: `plugin` is set when it runs, `error` says why it does not."""

    name: str
    source: str
    state: str  # "loaded", "not installed", "import failed", "start failed", "invalid"
    plugin: object | None = None
    error: str | None = None


@dataclass
class Plugins:
    """The plugin manager with what it holds, and what could not be loaded and why."""

    pm: pluggy.PluginManager
    loads: list[PluginLoad] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the settings themselves are wrong

    @property
    def running(self) -> list[PluginLoad]:
        return [load for load in self.loads if load.plugin is not None]


def new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(CaoHooks)
    return pm


def load_plugins(home: Path, installed: dict[str, EntryPoint] | None = None) -> Plugins:
    """The plugins `<home>/settings.json` enables; never raises (problems are recorded).
    `installed`: the `cao.plugins` entry points by name (default: this environment's)."""
    plugins = Plugins(new_manager())
    try:
        conf = plugin_settings(home)
        enabled, modules = _enabled(conf, settings_path(home))
    except InvalidInput as exc:
        log.error("plugins: %s; no plugin runs", exc)
        plugins.problems.append(str(exc))
        return plugins
    if not enabled:
        return plugins
    if installed is None:
        installed = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name in enabled:
        load = _load_one(plugins.pm, name, conf.get(name, {}), modules, installed, home)
        if load.error:
            log.error("plugins: %s; cao-server runs without it", load.error)
        else:
            log.info("plugins: %s running (%s)", name, load.source)
        plugins.loads.append(load)
    return plugins


def _enabled(conf: dict, path: Path) -> tuple[list[str], dict[str, str]]:
    enabled = conf.get("enabled", [])
    if not isinstance(enabled, list) or not all(isinstance(n, str) and n for n in enabled):
        raise InvalidInput(f"settings file {path}: plugins.enabled must be a list of plugin names")
    modules = conf.get("modules", {})
    if not isinstance(modules, dict) or not all(isinstance(v, str) and v for v in modules.values()):
        raise InvalidInput(f"settings file {path}: plugins.modules must map a plugin name to 'module[:attribute]'")
    return list(dict.fromkeys(enabled)), modules


def _load_one(
    pm: pluggy.PluginManager,
    name: str,
    config: object,
    modules: dict[str, str],
    installed: dict[str, EntryPoint],
    home: Path,
) -> PluginLoad:
    if name in modules:
        source = f"module {modules[name]}"
    elif name in installed:
        source = f"entry point {installed[name].value}"
    else:
        known = ", ".join(sorted(installed)) or "none"
        return PluginLoad(
            name,
            "",
            "not installed",
            error=(
                f"plugin {name!r} is enabled but not installed: no entry point {name!r} in group "
                f"{ENTRY_POINT_GROUP!r} (installed: {known}) and no plugins.modules entry for it"
            ),
        )
    if not isinstance(config, dict):
        return PluginLoad(
            name, source, "invalid", error=f"plugin {name!r}: its settings plugins.{name} must be an object"
        )
    try:
        target = _import(modules[name]) if name in modules else installed[name].load()
    except Exception as exc:  # whatever its import raises, the server starts without it
        return PluginLoad(
            name, source, "import failed", error=f"plugin {name!r} ({source}) failed to import: {_describe(exc)}"
        )
    try:
        plugin = (
            target if inspect.ismodule(target) or not callable(target) else target(PluginContext(name, config, home))
        )
    except Exception as exc:
        return PluginLoad(
            name, source, "start failed", error=f"plugin {name!r} ({source}) failed to start: {_describe(exc)}"
        )
    try:
        pm.register(plugin, name=name)
        pm.check_pending()  # an @hookimpl whose name is no cao hook (a typo) is refused here
    except Exception as exc:
        if pm.has_plugin(name):
            pm.unregister(name=name)
        return PluginLoad(name, source, "invalid", error=f"plugin {name!r} ({source}) is not a valid cao plugin: {exc}")
    return PluginLoad(name, source, "loaded", plugin=plugin)


def _import(path: str) -> object:
    module_name, _, attribute = path.partition(":")
    target: object = importlib.import_module(module_name)
    for part in filter(None, attribute.split(".")):
        target = getattr(target, part)
    return target


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
