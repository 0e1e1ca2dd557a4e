"""Another local user for tests: `cao-stranger`, created once (the suite runs as root), whose
requests Debian's /usr/bin/python3 sends under setpriv. Elsewhere the fixture skips.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

STRANGER = "cao-stranger"
SYSTEM_PYTHON = "/usr/bin/python3"  # the stranger cannot execute the venv's Python under /root

# The stranger's client: standard library only, one request per item of a JSON list.
STRANGER_REQUESTS = r"""
import http.client, json, sys
host, port, items = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
results = []
for method, path, body, headers in items:
    conn = http.client.HTTPConnection(host, port, timeout=20)
    conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    # A 200 from /events would stream for ever: its status is the whole answer.
    text = "" if resp.status == 200 else resp.read().decode()
    results.append({"status": resp.status, "body": text,
                    "www_authenticate": resp.getheader("WWW-Authenticate")})
    conn.close()
print(json.dumps(results))
"""

# The stranger holds one connection open until its stdin closes.
STRANGER_CONNECTS = r"""
import socket, sys
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
print(sock.getsockname()[1], flush=True)
sys.stdin.read()
sock.close()
"""


@dataclass(frozen=True)
class Stranger:
    uid: int
    gid: int

    def argv(self, script: str, *args: str) -> list[str]:
        return [
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            SYSTEM_PYTHON,
            "-I",
            "-c",
            script,
            *args,
        ]

    def requests(self, port: int, items: list[tuple], host: str = "127.0.0.1") -> list[dict[str, Any]]:
        """Send (method, path, json body or None[, headers]) as the stranger; status and body of each."""
        wire = [[m, p, b, h[0] if h else {}] for m, p, b, *h in items]
        proc = subprocess.run(
            self.argv(STRANGER_REQUESTS, host, str(port), json.dumps(wire)),
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def connect(self, host: str, port: int) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(STRANGER_CONNECTS, host, str(port)),
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )


@pytest.fixture(scope="session")
def stranger() -> Stranger:
    if os.geteuid() != 0:
        pytest.skip("needs root to create and impersonate a second local user")
    for tool in ("useradd", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} (a Python the stranger may execute) is missing")
    try:
        entry = pwd.getpwnam(STRANGER)
    except KeyError:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", STRANGER],
            capture_output=True,
            text=True,
        )
        if made.returncode not in (0, 9):  # 9: created meanwhile by a parallel run
            pytest.skip(f"useradd {STRANGER} failed: {made.stderr.strip()}")
        entry = pwd.getpwnam(STRANGER)
    assert entry.pw_uid != os.geteuid()
    return Stranger(entry.pw_uid, entry.pw_gid)
