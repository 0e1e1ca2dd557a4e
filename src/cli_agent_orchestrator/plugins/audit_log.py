"""Built-in plugin `audit_log`: one JSON line per event, appended to `<home>/logs/audit.jsonl`
(0600): the event as every plugin sees it, `actor` included (a terminal id for what an agent
caused, the API client's name, "cli" or "api", for what a request caused).

Settings (`plugins.audit_log`, optional): `{"path": "<file>"}`, relative to the cao home.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ..private_files import append_private, private_dir
from .hookspecs import hookimpl
from .manager import PluginContext

DEFAULT_PATH = Path("logs") / "audit.jsonl"


class AuditLog:
    def __init__(self, context: PluginContext):
        raw = context.config.get("path", str(DEFAULT_PATH))
        if not isinstance(raw, str) or not raw:
            raise ValueError("plugins.audit_log.path must be a file path")
        self.path = context.home / Path(raw).expanduser()
        private_dir(self.path.parent)
        self._lock = threading.Lock()  # lines are whole even if calls ever overlap

    @hookimpl
    def post_event(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:
            append_private(self.path, line.encode("utf-8"))
