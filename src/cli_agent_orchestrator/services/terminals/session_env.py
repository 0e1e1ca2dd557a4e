"""A session's environment: the variables its launch was given (`cao launch --env`, `env_vars`
of POST /sessions and of the ops server's `launch_session`), for every agent later started in it.

Held in cao-server's memory only, never in the store, a log or an answer: a restarted server
has forgotten them (the agents already running keep theirs; workers started after the restart
get none), and a deleted session's are dropped at once. The names were checked when the session
was created (`checked_env_vars`: CAO_* and other names cao sets itself are refused).
"""

from __future__ import annotations

from collections.abc import Mapping

from ...events import Event, SessionKilled


class SessionEnvs:
    def __init__(self) -> None:
        self._by_session: dict[str, dict[str, str]] = {}

    def started(self, session: str, env: Mapping[str, str]) -> None:
        """A new session (a name may be reused: the old session's variables never carry over)."""
        if env:
            self._by_session[session] = dict(env)
        else:
            self._by_session.pop(session, None)

    def of(self, session: str) -> dict[str, str]:
        return dict(self._by_session.get(session, {}))

    def on_session_killed(self, event: Event) -> None:
        if isinstance(event, SessionKilled):
            self._by_session.pop(event.session_name, None)
