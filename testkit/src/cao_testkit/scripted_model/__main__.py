"""``python -m cao_testkit.scripted_model --port N --scripts DIR_OR_FILE``.

Prints ``scripted model listening on http://HOST:PORT`` as its first stdout line
once the socket listens (port 0 picks a free one), so scripts and the test
harness can read the URL back.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn

from .app import asgi_app
from .harness import listening_socket
from .script import ScriptError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cao_testkit.scripted_model",
        description="Scripted stand-in for the Anthropic, OpenAI and Gemini APIs.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument(
        "--scripts",
        type=Path,
        help="a directory of <name>.yaml|.yml|.json scripts, or one file used as the 'default' script",
    )
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    try:
        app = asgi_app(args.scripts)
    except (OSError, ScriptError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sock = listening_socket(args.host, args.port)
    host, port = sock.getsockname()[:2]
    print(f"scripted model listening on http://{host}:{port}", flush=True)
    config = uvicorn.Config(app, log_level=args.log_level, lifespan="off", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
