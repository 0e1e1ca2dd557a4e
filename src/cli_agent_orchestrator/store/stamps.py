"""Timestamps as the store writes them: UTC, ISO 8601, milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
