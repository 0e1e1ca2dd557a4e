"""ScriptedModelServer: run the scripted model for a test, in a thread or a subprocess.

    with ScriptedModelServer() as model:
        model.set_script("worker", [{"match": "hello", "reply": "hi there"}])
        env = {"ANTHROPIC_BASE_URL": model.base_url("worker")}
        ...
        assert model.requests("worker")[-1]["reply"]["text"] == "hi there"

Everything goes through the HTTP control routes, so both modes behave the same.
The socket is bound and listening before the URL is handed out: a client that
connects early waits in the backlog instead of being refused.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from .app import asgi_app


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


class ScriptedModelServer:
    def __init__(
        self,
        scripts: str | Path | None = None,
        *,
        subprocess_mode: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.scripts = Path(scripts) if scripts is not None else None
        self.subprocess_mode = subprocess_mode
        self.host, self.port = host, port
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._client: httpx.Client | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> ScriptedModelServer:
        if self.subprocess_mode:
            self._start_process()
        else:
            self._start_thread()
        self._client = httpx.Client(base_url=self.url, timeout=10)
        return self

    def _start_thread(self) -> None:
        sock = listening_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        self.url = f"http://{self.host}:{self.port}"
        config = uvicorn.Config(asgi_app(self.scripts), log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="scripted-model", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("scripted model server did not start")
            time.sleep(0.005)

    def _start_process(self) -> None:
        cmd = [sys.executable, "-m", "cao_testkit.scripted_model", "--host", self.host, "--port", str(self.port)]
        if self.scripts is not None:
            cmd += ["--scripts", str(self.scripts)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # the entry point prints its URL once listening
        found = re.search(r"http://\S+", line)
        if not found:
            self.stop()
            raise RuntimeError(f"scripted model did not start: {line!r}")
        self.url = found.group(0)
        self.port = int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = self._thread = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout:
                self._proc.stdout.close()
            self._proc = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- use -----------------------------------------------------------------------------------
    def base_url(self, script: str = "default", suffix: str = "") -> str:
        """Base URL that selects ``script``; add ``suffix="/v1"`` for OpenAI-style clients."""
        return f"{self.url}/s/{script}{suffix}"

    def cli_env(self, script: str = "default") -> dict[str, str]:
        """Endpoint variables for Claude Code, qwen-code and Gemini CLI (Codex and opencode take the
        base URL from their config files: use ``base_url(script, "/v1")`` there)."""
        return {
            "ANTHROPIC_BASE_URL": self.base_url(script),
            "ANTHROPIC_AUTH_TOKEN": "scripted",
            "OPENAI_BASE_URL": self.base_url(script, "/v1"),
            "OPENAI_API_KEY": "scripted",
            "GOOGLE_GEMINI_BASE_URL": self.base_url(script),
            "GEMINI_API_KEY": "scripted",
        }

    def _http(self) -> httpx.Client:
        if self._client is None:
            raise RuntimeError("server not started")
        return self._client

    def set_script(self, name: str, rules: Any) -> None:
        """Register (or replace) a script: a list of rules or ``{"rules": [...], "default": ...}``."""
        resp = self._http().post(f"/_scripts/{name}", json=rules)
        if resp.status_code != 200:
            raise ValueError(resp.json().get("detail", resp.text))

    def requests(self, script: str = "default") -> list[dict]:
        return self._http().get(f"/_requests/{script}").json()

    def clear_requests(self, script: str = "default") -> None:
        self._http().delete(f"/_requests/{script}")
