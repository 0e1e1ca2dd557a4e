"""Gemini generateContent / streamGenerateContent shapes (Gemini CLI)."""

from __future__ import annotations

from collections.abc import Iterator

from .engine import Reply
from .sse import approx_tokens, chunks, event

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def error_body(status: int, message: str) -> dict:
    return {"error": {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}}


def _chunk(parts: list[dict], model: str, body: dict, final: bool) -> dict:
    candidate: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    if final:
        candidate["finishReason"] = "STOP"
    prompt, out = approx_tokens(body), approx_tokens(parts)
    return {
        "candidates": [candidate],
        "modelVersion": model,
        "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": out, "totalTokenCount": prompt + out},
    }


def _call_part(reply: Reply) -> dict:
    assert reply.call is not None
    return {"functionCall": {"name": reply.call.name, "args": reply.call.args, "id": reply.call_id}}


def generate(reply: Reply, model: str, body: dict) -> dict:
    parts: list[dict] = [{"text": reply.text}] if reply.text else []
    if reply.call:
        parts.append(_call_part(reply))
    return _chunk(parts, model, body, final=True)


def stream_chunks(reply: Reply, model: str, body: dict) -> list[dict]:
    pieces = [[{"text": piece}] for piece in chunks(reply.text)] or [[]]
    if reply.call:
        pieces[-1].append(_call_part(reply))
    # The finish reason rides on the last chunk; an empty chunk would read as "no answer".
    return [_chunk(parts, model, body, final=i == len(pieces) - 1) for i, parts in enumerate(pieces)]


def stream(reply: Reply, model: str, body: dict) -> Iterator[str]:
    for data in stream_chunks(reply, model, body):
        yield event(data)
