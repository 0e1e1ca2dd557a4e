"""Built-in plugin `webhook`: POSTs each event, as JSON, to a URL; in event order, one at a
time, in this plugin's own task (the agents never wait for it).

Settings (`plugins.webhook`):
    url           where to POST (http or https; required)
    events        event types to send, bus-style patterns ("handoff.*", "workflow.#"); default all
    secret        signs each body: header `X-CAO-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`
    secret_env    or: the environment variable of cao-server that holds the secret
    max_attempts  tries per event (default 5); timeout_s per try (default 10)
    backoff_s     wait before the 2nd try (default 1), doubled for each next one, at most 60

A 5xx, 408, 429 or a network error is retried; any other answer >= 300 is not. A 408, 429
or 503 that says `Retry-After` (seconds or an HTTP date) is tried again after that long instead
of the backoff (at most 60 s; the endpoint knows when it can take more). Every event
it wants ends delivered or, once, in `<home>/logs/webhook-dead-letter.jsonl` (0600) with why:
its tries failed (also counted as a failure), cao-server's queue for it was full, or cao-server
stopped first (the try in flight is cut). Counts: `delivered`, `dead_lettered`, `skipped`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx

from ..bus import topic_matches
from ..private_files import append_private, private_dir
from .hookspecs import hookimpl
from .manager import PluginContext

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-CAO-Signature-256"
EVENT_HEADER = "X-CAO-Event"
DELIVERY_HEADER = "X-CAO-Delivery"  # the event id: the same on every try, for deduplication
DEAD_LETTER_PATH = Path("logs") / "webhook-dead-letter.jsonl"
MAX_BACKOFF_S = 60.0
RETRIED_STATUSES = frozenset({408, 429})
# Answers whose Retry-After header says when to try again (RFC 9110, section 10.2.3).
RETRY_AFTER_STATUSES = frozenset({408, 429, 503})
FAILED = "delivery failed"
# What the dispatcher's `reason` for a missed event means here (plugins/dispatch.py).
MISSED_REASONS = {
    "stopped": "cao-server stopped before it could be delivered",
    "queue full": "cao-server's queue for the webhook was full: never tried",
}


class DeliveryFailed(Exception):
    """An event was dead-lettered: every try failed."""


def signature(secret: str, body: bytes) -> str:
    """The value of `X-CAO-Signature-256` for `body`."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


class Webhook:
    def __init__(self, context: PluginContext):
        conf = context.config
        url = conf.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError("plugins.webhook.url must be an http:// or https:// URL")
        self.url: str = url
        self.patterns = conf.get("events", ["#"])
        if not isinstance(self.patterns, list) or not all(isinstance(p, str) and p for p in self.patterns):
            raise ValueError('plugins.webhook.events must be a list of event types or patterns ("handoff.*")')
        self.secret = _secret(conf)
        self.max_attempts = _number(conf, "max_attempts", 5, int, 1)
        self.backoff_s = _number(conf, "backoff_s", 1.0, float, 0)
        self.timeout_s = _number(conf, "timeout_s", 10.0, float, 0.1)
        self.dead_letter = context.home / DEAD_LETTER_PATH
        self._client: httpx.AsyncClient | None = None
        self.delivered = self.dead_lettered = self.skipped = 0
        # Event id → (tries started, last error) while it is being delivered: a delivery cut
        # at shutdown is dead-lettered with them.
        self._tries: dict[str, tuple[int, str | None]] = {}

    def wants(self, kind: str) -> bool:
        return any(topic_matches(pattern, kind) for pattern in self.patterns)

    @hookimpl
    async def post_event(self, event: dict[str, Any]) -> None:
        if self.wants(event["type"]):
            await self.deliver(event)
        else:
            self.skipped += 1

    @hookimpl
    async def cao_missed_events(self, events: list[dict[str, Any]], reason: str) -> None:
        letters = []
        for event in events:
            if not self.wants(event["type"]):
                self.skipped += 1
                continue
            attempts, error = self._tries.pop(event["id"], (0, None))
            letters.append(self._letter(event, MISSED_REASONS.get(reason, reason), attempts, error))
        self._bury(letters)

    @hookimpl
    def cao_stats(self) -> dict[str, int]:
        return {"delivered": self.delivered, "dead_lettered": self.dead_lettered, "skipped": self.skipped}

    @hookimpl
    async def cao_shutdown(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def deliver(self, event: dict[str, Any]) -> None:
        body = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", EVENT_HEADER: event["type"], DELIVERY_HEADER: event["id"]}
        if self.secret:
            headers[SIGNATURE_HEADER] = signature(self.secret, body)
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
        error: str | None = None
        wait_s: float | None = None  # what the endpoint asked for (Retry-After); None: the backoff
        for attempt in range(1, self.max_attempts + 1):
            self._tries[event["id"]] = (attempt, error)
            try:
                resp = await self._client.post(self.url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # not the network's doing (a bad header value): no retry
                error = f"{type(exc).__name__}: {exc}"
                break
            else:
                if resp.status_code < 300:
                    del self._tries[event["id"]]
                    self.delivered += 1
                    return
                error = f"HTTP {resp.status_code}"
                if resp.status_code < 500 and resp.status_code not in RETRIED_STATUSES:
                    break
                wait_s = retry_after(resp) if resp.status_code in RETRY_AFTER_STATUSES else None
            self._tries[event["id"]] = (attempt, error)
            if attempt < self.max_attempts:
                backoff = self.backoff_s * 2 ** (attempt - 1) if wait_s is None else wait_s
                await asyncio.sleep(min(MAX_BACKOFF_S, backoff))  # backoff, not a sync
                wait_s = None
        # A cancellation (shutdown) never gets here: the event stays in _tries for cao_missed_events.
        del self._tries[event["id"]]
        self._bury([self._letter(event, FAILED, attempt, error)])
        raise DeliveryFailed(f"event {event['id']} ({event['type']}) dead-lettered after {attempt} tries: {error}")

    def _letter(self, event: dict[str, Any], reason: str, attempts: int, error: str | None) -> bytes:
        at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        line = {"at": at, "url": self.url, "reason": reason, "attempts": attempts, "error": error, "event": event}
        return (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")

    def _bury(self, letters: list[bytes]) -> None:
        """Append dead letters in one write; counted once they are on disk."""
        if not letters:
            return
        private_dir(self.dead_letter.parent)
        append_private(self.dead_letter, b"".join(letters))
        self.dead_lettered += len(letters)


def retry_after(resp: httpx.Response) -> float | None:
    """The wait a `Retry-After` header asks for, in seconds (>= 0); None without a readable one."""
    value = resp.headers.get("Retry-After", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _secret(conf: dict[str, Any]) -> str | None:
    if "secret_env" in conf:
        name = conf["secret_env"]
        value = os.environ.get(name) if isinstance(name, str) else None
        if not value:
            raise ValueError(f"plugins.webhook.secret_env: environment variable {name!r} is not set")
        return value
    secret = conf.get("secret")
    if secret is not None and (not isinstance(secret, str) or not secret):
        raise ValueError("plugins.webhook.secret must be a non-empty string")
    return secret


def _number(conf: dict[str, Any], key: str, default: float, kind: type, minimum: float) -> Any:
    value = conf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ValueError(f"plugins.webhook.{key} must be a number >= {minimum}")
    return kind(value)
