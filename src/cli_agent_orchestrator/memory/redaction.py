"""Secrets are taken out of a text before it is stored: each is replaced by `[REDACTED:<kind>]`.

What counts as a secret is the table below: provider keys and tokens by their documented shapes,
private key blocks, JSON web tokens, bearer credentials, the password part of a URL, and the
value of an assignment to a secret-sounding name (`password=`, `api_key:` ...). Redaction is
idempotent (a marker is never a secret), so an exported memory imports unchanged. Content that is
mostly secret (MOSTLY_SECRET of its non-blank characters) is refused rather than kept as markers:
a memory is not the place for credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidInput

MOSTLY_SECRET = 0.5

# (kind, pattern, the group to replace: 0 = the whole match)
_PATTERNS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    (
        "private-key",
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.DOTALL),
        0,
    ),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b"), 0),
    ("api-key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"), 0),
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), 0),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), 0),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    ("bearer-token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{16,})"), 1),
    ("url-password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:([^@\s/]+)@"), 1),
    (
        "secret",
        re.compile(
            r"(?i)\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|client[_-]?secret|auth)"
            r"\s*[:=]\s*[\"']?([^\s\"',;]{6,})"
        ),
        1,
    ),
)
_MARKER = re.compile(r"\[REDACTED:[a-z-]+\]")


@dataclass(frozen=True)
class Redacted:
    text: str
    kinds: tuple[str, ...]  # what was found, in the table's order, each once
    secret_chars: int  # how many characters of the original were secret


def redact(text: str) -> Redacted:
    kinds: list[str] = []
    secret = 0
    for kind, pattern, group in _PATTERNS:

        def replace(match: re.Match[str], kind: str = kind, group: int = group) -> str:
            nonlocal secret
            value = match.group(group)
            if _MARKER.fullmatch(value):
                return match.group(0)
            secret += len(value)
            if kind not in kinds:
                kinds.append(kind)
            start, end = match.start(group) - match.start(0), match.end(group) - match.start(0)
            whole = match.group(0)
            return whole[:start] + f"[REDACTED:{kind}]" + whole[end:]

        text = pattern.sub(replace, text)
    return Redacted(text, tuple(kinds), secret)


def redact_or_refuse(text: str) -> Redacted:
    """`redact(text)`, or InvalidInput when most of it was secret."""
    result = redact(text)
    visible = len("".join(text.split()))
    if result.secret_chars and visible and result.secret_chars / visible >= MOSTLY_SECRET:
        raise InvalidInput(
            f"refused: the content is mostly a secret ({', '.join(result.kinds)}); memories must not "
            "hold credentials. Store what the secret is for, and where it is kept, instead"
        )
    return result
