"""Fetching an agent profile from a URL for `cao install`: only from hosts on an allow-list,
only as text, and never run.

Invariant: every request this module makes (the first and each redirect) goes to a host on
the allow-list over https — plain http only to a loopback host that is itself allow-listed —
and what comes back is at most MAX_PROFILE_BYTES of UTF-8 text, returned as data, all of it
within one deadline (a server that drips bytes cannot keep an install open).
"""

from __future__ import annotations

import asyncio
import ipaddress

import httpx

from ..errors import InvalidInput

DEFAULT_ALLOWED_HOSTS = ("github.com", "raw.githubusercontent.com")
# A profile is a prompt and some frontmatter; the validate route takes 262144 characters.
MAX_PROFILE_BYTES = 262_144
FETCH_TIMEOUT_S = 15.0  # each connect, read or write
# The whole fetch: connect, headers, body and every redirect (CAO_PROFILE_FETCH_TIMEOUT).
# A 256 KiB profile takes well under a second on any working link.
FETCH_DEADLINE_S = 30.0
MAX_REDIRECTS = 3  # github.com/…/raw/… → raw.githubusercontent.com is one
_LOOPBACK_NAMES = {"localhost"}


def allowed_hosts(configured: tuple[str, ...]) -> tuple[str, ...]:
    """The hosts CAO_PROFILE_ALLOWED_HOSTS names (Settings.profile_allowed_hosts), else
    github.com and its raw host."""
    return configured or DEFAULT_ALLOWED_HOSTS


def is_url(source: str) -> bool:
    return "://" in source


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str | httpx.URL, hosts: tuple[str, ...]) -> httpx.URL:
    """The URL when cao may fetch it, else InvalidInput saying why (the allowed hosts included)."""
    try:
        parsed = httpx.URL(url) if isinstance(url, str) else url
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise InvalidInput(f"invalid profile URL: {exc}") from None
    host = (parsed.host or "").lower()
    if parsed.scheme not in ("https", "http") or not host:
        raise InvalidInput(f"profile URL {str(url)!r}: only https URLs can be installed")
    if parsed.userinfo:
        raise InvalidInput("profile URL: credentials in the URL are not accepted")
    if host not in hosts:
        raise InvalidInput(
            f"profile URL host {host!r} is not allowed (allowed: {', '.join(hosts)}; "
            "CAO_PROFILE_ALLOWED_HOSTS sets the list)"
        )
    if parsed.scheme == "http" and not _is_loopback(host):
        raise InvalidInput(f"profile URL {str(url)!r}: only https URLs can be installed (http only on loopback)")
    return parsed


def _raw_github(url: httpx.URL) -> httpx.URL:
    """github.com/OWNER/REPO/blob/REF/PATH is a web page; /raw/ is the file it shows."""
    parts = url.path.split("/")
    if url.host == "github.com" and len(parts) > 4 and parts[3] == "blob":
        return url.copy_with(path="/".join([*parts[:3], "raw", *parts[4:]]))
    return url


def url_file_stem(url: str) -> str:
    """The name a profile without a frontmatter `name` gets: the URL's last path part, less `.md`."""
    last = httpx.URL(url).path.rstrip("/").rsplit("/", 1)[-1]
    return last[:-3] if last.endswith(".md") else last


def fetch_profile_text(
    url: str,
    hosts: tuple[str, ...],
    transport: httpx.AsyncBaseTransport | None = None,
    deadline: float = FETCH_DEADLINE_S,
) -> str:
    """The text at `url`, following at most MAX_REDIRECTS redirects, each to an allowed host,
    all within `deadline` seconds. For synchronous callers (the CLI, a threadpool route): the
    fetch runs on an event loop of its own, where the deadline can cancel a read mid-way."""
    check_url(url, hosts)  # a refused URL is refused before anything starts
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_fetch_within(url, hosts, transport, deadline))
    finally:
        # Not asyncio.run: at the end it waits for the loop's threads, and a name lookup
        # still running in one would hold the caller past the deadline.
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _fetch_within(
    url: str, hosts: tuple[str, ...], transport: httpx.AsyncBaseTransport | None, deadline: float
) -> str:
    try:
        async with asyncio.timeout(deadline):
            return await _fetch(url, hosts, transport)
    except TimeoutError:
        raise InvalidInput(
            f"fetching {url} took longer than {deadline:g} s, the limit for the whole download "
            "(CAO_PROFILE_FETCH_TIMEOUT); nothing was installed"
        ) from None


async def _fetch(url: str, hosts: tuple[str, ...], transport: httpx.AsyncBaseTransport | None) -> str:
    target = _raw_github(check_url(url, hosts))
    async with httpx.AsyncClient(
        timeout=FETCH_TIMEOUT_S, follow_redirects=False, transport=transport, trust_env=False
    ) as client:
        for _ in range(MAX_REDIRECTS + 1):
            try:
                async with client.stream("GET", target, headers={"Accept": "text/plain, text/markdown, */*"}) as resp:
                    if resp.is_redirect and "location" in resp.headers:
                        target = check_url(target.join(resp.headers["location"]), hosts)
                        continue
                    if resp.status_code != 200:
                        raise InvalidInput(f"fetching {target}: HTTP {resp.status_code}")
                    body = await _read_limited(resp)
            except httpx.HTTPError as exc:
                raise InvalidInput(f"cannot fetch {target}: {exc or type(exc).__name__}") from None
            return _as_text(body, target)
    raise InvalidInput(f"fetching {url}: more than {MAX_REDIRECTS} redirects")


async def _read_limited(resp: httpx.Response) -> bytes:
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_PROFILE_BYTES:
        raise InvalidInput(f"the profile at {resp.url} is larger than {MAX_PROFILE_BYTES} bytes")
    body = bytearray()
    async for chunk in resp.aiter_bytes():
        body += chunk
        if len(body) > MAX_PROFILE_BYTES:
            raise InvalidInput(f"the profile at {resp.url} is larger than {MAX_PROFILE_BYTES} bytes")
    return bytes(body)


def _as_text(body: bytes, url: httpx.URL) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"the file at {url} is not UTF-8 text, so not a profile") from None
    if "\0" in text:
        raise InvalidInput(f"the file at {url} is binary, not a profile")
    return text
