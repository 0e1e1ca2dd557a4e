"""Agent engines: Kiro CLI runs its agents on an engine (`v2`, or the newer `kas`); no other CLI
has one. This module alone decides what a request's `engine` means: checked before anything is
allocated, ignored (with a note) for a CLI without engines, shown as the terminal's `engine`.
"""

from __future__ import annotations

from ...errors import InvalidInput

ENGINES = ("v2", "kas")
# provider → the one engine cao can run it on (kiro_cli's launch line passes `--agent-engine v2`;
# `kas`, `kiro-cli --v3 chat`, is refused).
ENGINE_OF_PROVIDER = {"kiro_cli": "v2"}


def requested_engine(engine: str | None, profile_frontmatter: dict) -> str | None:
    """The request's engine, else the profile's `engine:` key, else None."""
    if engine is not None:
        return engine
    from_profile = profile_frontmatter.get("engine")
    return None if from_profile is None else str(from_profile)


def check_engine(engine: str | None, provider: str) -> str | None:
    """Refuse an engine cao cannot run (InvalidInput, 400); return the note to give when the
    provider has no engines and `engine` is ignored, else None."""
    if engine is None:
        return None
    if engine not in ENGINES:
        raise InvalidInput(f"invalid engine {engine[:64]!r}: use v2 or kas (Kiro CLI only)")
    runs_on = ENGINE_OF_PROVIDER.get(provider)
    if runs_on is None:
        return f"engine {engine} ignored: provider {provider} has no engines (only Kiro CLI has)"
    if engine != runs_on:
        raise InvalidInput(f"engine {engine} is not supported; use {runs_on}")
    return None


def terminal_engine(provider: str) -> str | None:
    """The engine a terminal of `provider` runs on; None for a CLI without engines."""
    return ENGINE_OF_PROVIDER.get(provider)
