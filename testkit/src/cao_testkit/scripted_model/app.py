"""The HTTP face of the scripted model: Anthropic, OpenAI (Responses + Chat) and Gemini routes.

Every route also answers under ``/s/<script>/``: an agent session picks its
script just through the base URL it is given, with no header or prompt marker
needed. Without the prefix the script is ``default``.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from . import wire_anthropic, wire_chat, wire_gemini, wire_responses
from .conversation import Conversation, from_anthropic, from_chat, from_gemini, from_responses
from .engine import ErrorCounter, Reply, decide
from .script import ScriptError
from .store import RequestLog, ScriptStore

SCRIPT_KEY = "scripted_model.script"
_PREFIX = re.compile(r"^/s/([^/]+)(/.*)?$")
_SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"}
MODELS = ("claude-opus-4-8", "claude-sonnet-4-6", "fake-model", "gemini-2.5-flash", "gpt-5")


class ScriptPrefix:
    """ASGI wrapper: ``/s/<name>/rest`` is served as ``/rest`` with the script name kept in the scope."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            match = _PREFIX.match(scope["path"])
            if match:
                rest = match.group(2) or "/"
                scope = dict(scope, path=rest, raw_path=rest.encode())
                scope[SCRIPT_KEY] = match.group(1)
        await self.app(scope, receive, send)


def _script_name(request: Request) -> str:
    return request.scope.get(SCRIPT_KEY, "default")


async def _json_body(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        raise HTTPException(400, "request body is not JSON") from None
    if not isinstance(body, dict):
        raise HTTPException(400, "request body must be a JSON object")
    return body


def create_app(scripts: Path | None = None) -> FastAPI:
    app = FastAPI(title="cao scripted model", docs_url=None, redoc_url=None, openapi_url=None)
    store, log, errors = ScriptStore(scripts), RequestLog(), ErrorCounter()
    app.state.store, app.state.log, app.state.errors = store, log, errors

    def play(request: Request, api: str, body: dict, conv: Conversation) -> Reply:
        name = _script_name(request)
        reply = decide(name, store.get(name), conv, errors)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SECRET_HEADERS}
        log.add(
            name,
            {
                "api": api,
                "method": request.method,
                "path": request.url.path,
                "query": dict(request.query_params),
                "headers": headers,
                "body": body,
                "side": conv.is_side_request,
                "user_text": conv.user_text,
                "tool_result": conv.tool_result,
                "reply": reply.summary(),
            },
        )
        return reply

    async def respond(
        reply: Reply,
        stream: bool,
        error_body: Callable[[int, str], dict],
        events: Callable[[], Iterator[str]],
        whole: Callable[[], Any],
    ) -> Response:
        if reply.error is not None or not stream:
            await asyncio.sleep(reply.delay_ms / 1000)
            if reply.error is not None:
                return JSONResponse(error_body(reply.error.status, reply.error.message), reply.error.status)
            return JSONResponse(whole())

        async def body() -> Any:
            # Headers go out at once and the body waits, like a model that is thinking.
            await asyncio.sleep(reply.delay_ms / 1000)
            for chunk in events():
                yield chunk

        return StreamingResponse(body(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    @app.api_route("/", methods=["GET", "HEAD"])
    async def root() -> dict:
        # Claude Code's HEAD / connectivity check lands here.
        return {"service": "cao scripted model", "scripts": store.file_names()}

    @app.get("/v1/models")
    @app.get("/models")
    @app.get("/v1beta/models")
    async def models() -> dict:
        # One list readable both as Anthropic's and as OpenAI's (and Gemini's) model listing.
        data = [
            {
                "id": m,
                "object": "model",
                "type": "model",
                "display_name": m,
                "name": f"models/{m}",
                "created": 0,
                "created_at": "2025-01-01T00:00:00Z",
                "owned_by": "cao",
            }
            for m in MODELS
        ]
        return {
            "object": "list",
            "data": data,
            "models": [],
            "has_more": False,
            "first_id": MODELS[0],
            "last_id": MODELS[-1],
        }

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body = await _json_body(request)
        conv = from_anthropic(body)
        reply = play(request, "anthropic", body, conv)
        return await respond(
            reply,
            conv.stream,
            wire_anthropic.error_body,
            lambda: wire_anthropic.stream(reply, conv.model, body),
            lambda: wire_anthropic.message(reply, conv.model, body),
        )

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> dict:
        body = await _json_body(request)
        return {"input_tokens": max(1, len(str(body)) // 4)}

    @app.post("/v1/responses")
    @app.post("/responses")
    async def responses(request: Request) -> Response:
        body = await _json_body(request)
        conv = from_responses(body)
        reply = play(request, "responses", body, conv)
        return await respond(
            reply,
            conv.stream,
            wire_responses.error_body,
            lambda: wire_responses.stream(reply, conv.model, body),
            lambda: wire_responses.response(reply, conv.model, body),
        )

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat(request: Request) -> Response:
        body = await _json_body(request)
        conv = from_chat(body)
        reply = play(request, "chat", body, conv)
        return await respond(
            reply,
            conv.stream,
            wire_chat.error_body,
            lambda: wire_chat.stream(reply, conv.model, body),
            lambda: wire_chat.completion(reply, conv.model, body),
        )

    @app.post("/v1beta/models/{model_action}")
    @app.post("/v1/models/{model_action}")
    async def gemini(model_action: str, request: Request) -> Response:
        model, _, action = model_action.partition(":")
        body = await _json_body(request)
        if action == "countTokens":
            return JSONResponse({"totalTokens": max(1, len(str(body)) // 4)})
        if action not in ("generateContent", "streamGenerateContent"):
            return JSONResponse(wire_gemini.error_body(404, f"unknown method {action!r}"), 404)
        streaming = action == "streamGenerateContent"
        conv = from_gemini(body, model, streaming)
        reply = play(request, "gemini", body, conv)
        if streaming and request.query_params.get("alt") != "sse":
            # Without alt=sse the streaming method returns one JSON array of chunks.
            return await respond(
                reply,
                False,
                wire_gemini.error_body,
                lambda: iter(()),
                lambda: wire_gemini.stream_chunks(reply, model, body),
            )
        return await respond(
            reply,
            streaming,
            wire_gemini.error_body,
            lambda: wire_gemini.stream(reply, model, body),
            lambda: wire_gemini.generate(reply, model, body),
        )

    @app.post("/_scripts/{name}")
    async def set_script(name: str, request: Request) -> dict:
        try:
            data = await request.json()
            script = store.set(name, data)
        except (ValueError, ScriptError) as exc:
            raise HTTPException(400, str(exc)) from None
        errors.reset(name)
        return {"name": name, "rules": len(script.rules), "at": time.time()}

    @app.get("/_requests/{name}")
    async def get_requests(name: str) -> list[dict]:
        return log.get(name)

    @app.delete("/_requests/{name}")
    async def clear_requests(name: str) -> dict:
        log.clear(name)
        return {"cleared": name}

    return app


def asgi_app(scripts: Path | None = None) -> ScriptPrefix:
    """The app wrapped with the ``/s/<script>`` prefix handling: what servers should run."""
    return ScriptPrefix(create_app(scripts))
