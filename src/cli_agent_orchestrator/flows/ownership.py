"""Is the session holding a flow's name the flow's own? It is when its agents are the agent of
the flow's newest agent-starting run (whose id that run recorded) and agents started under it (a
worker joins its caller's session): at least one of them, and no other live one. Only then may a
run replace it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..models import Terminal


def not_own_reason(session: str, terminals: Sequence[Terminal], own_agent: str | None) -> str | None:
    """Why `session` (which exists, holding `terminals`) is not the flow's to replace; None
    when it is. `own_agent`: the terminal the flow's newest agent-starting run recorded."""
    owned = {own_agent} if own_agent else set()
    grown = True
    while grown:  # a worker of a worker: follow the caller links to their end
        grown = False
        for term in terminals:
            if term.id not in owned and term.caller_id in owned:
                owned.add(term.id)
                grown = True
    fix = f"the flow starts no agent while it is there; delete it (cao session delete {session}) if it is not needed"
    strangers = [t.id for t in terminals if not t.gone and t.id not in owned]
    if strangers:
        return f"session {session} holds agents this flow did not start ({', '.join(strangers)}); {fix}"
    if not any(t.id in owned for t in terminals):
        return f"session {session} exists but holds no agent this flow started; {fix}"
    return None
