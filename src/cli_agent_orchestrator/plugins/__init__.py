"""Plugins: observers of what cao does, declared as pluggy hooks (`hookspecs`), found
through the entry-point group `cao.plugins` and enabled in `<home>/settings.json`
(`manager`), each fed from the event bus in its own task (`dispatch`). Built in: a
webhook (`webhook`) and a JSON-lines audit log (`audit_log`).
"""

from .hookspecs import hookimpl

__all__ = ["hookimpl"]
