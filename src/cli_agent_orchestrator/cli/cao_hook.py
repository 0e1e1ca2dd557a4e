"""`cao-hook EVENT [JSON]`: how a coding CLI's own hooks reach cao-server.

Providers configure each CLI's hooks (Claude Code, Gemini, Qwen settings;
Codex `notify`) to run this command. It reads the event's JSON from stdin (or
from its last argument, as Codex `notify` passes it), and posts it to
`POST /terminals/$CAO_TERMINAL_ID/hooks`. Standard library only, so it starts in
a few tens of milliseconds, and it always exits 0 at once: a hook must never slow
down or break the CLI that runs it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import sys

from ..auth_token import auth_headers

TIMEOUT_S = 2.0
MAX_PAYLOAD = 256 * 1024


def _read_payload(argv: list[str]) -> dict:
    raw = ""
    if len(argv) > 2:
        raw = argv[-1]
    elif not sys.stdin.isatty():
        # Some CLIs pass nothing on stdin: do not wait for it forever.
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if ready:
            raw = sys.stdin.read(MAX_PAYLOAD)
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        value = {"text": raw[:4096]}
    return value if isinstance(value, dict) else {"value": value}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    terminal_id = os.environ.get("CAO_TERMINAL_ID", "")
    if len(argv) < 2 or not re.fullmatch(r"[a-f0-9]{8}", terminal_id):
        return 0  # not inside a cao terminal: nothing to report
    event = argv[1][:64]
    body = json.dumps({"event": event, "payload": _read_payload(argv)}).encode()
    host = os.environ.get("CAO_API_HOST") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    # Parsed here, not through settings.py (LIGHT_PROCESS_READS says why). A CAO_API_PORT that
    # is not a port drops the event (int() raises below) rather than posting to the default
    # port: a hook must never break its CLI, and cao-server already refused such a value.
    port = os.environ.get("CAO_API_PORT") or "9889"
    # http.client, not urllib: it imports faster (CLIs wait for their hooks) and never
    # consults proxy settings, which must not see localhost traffic.
    try:
        conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
        # The token where this process can read it; on loopback the server also knows its owner without.
        headers = {
            "Content-Type": "application/json",
            **auth_headers(os.environ.get("CAO_HOME_DIR"), os.environ.get("CAO_AUTH_TOKEN")),
        }
        # The terminal's own secret: the server takes a hook only from the terminal it concerns.
        headers["X-CAO-Hook-Secret"] = os.environ.get("CAO_HOOK_SECRET", "")
        conn.request("POST", f"/terminals/{terminal_id}/hooks", body=body, headers=headers)
        conn.getresponse().read()
        conn.close()
    except Exception:  # noqa: BLE001 - a lost hook degrades to screen reading, never to a CLI error
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
