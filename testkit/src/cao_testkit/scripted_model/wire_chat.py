"""OpenAI Chat Completions shapes (qwen-code, opencode), streaming and not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from .engine import Reply, new_id
from .sse import approx_tokens, chunks, event
from .wire_responses import error_body  # same OpenAI error envelope

__all__ = ["completion", "error_body", "stream"]


def _tool_calls(reply: Reply) -> list[dict]:
    if not reply.call:
        return []
    return [
        {
            "id": reply.call_id,
            "type": "function",
            "function": {"name": reply.call.name, "arguments": json.dumps(reply.call.args, ensure_ascii=False)},
        }
    ]


def _usage(body: dict, reply: Reply) -> dict:
    prompt, done = approx_tokens(body), approx_tokens(reply.summary())
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


def completion(reply: Reply, model: str, body: dict) -> dict:
    msg: dict = {"role": "assistant", "content": reply.text or None}
    if reply.call:
        msg["tool_calls"] = _tool_calls(reply)
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if reply.call else "stop"}],
        "usage": _usage(body, reply),
    }


def stream(reply: Reply, model: str, body: dict) -> Iterator[str]:
    base = {"id": new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict, finish: str | None = None) -> str:
        return event(dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}]))

    yield chunk({"role": "assistant", "content": ""})
    for piece in chunks(reply.text):
        yield chunk({"content": piece})
    for call in _tool_calls(reply):
        args = call["function"]["arguments"]
        # The first delta names the call; the arguments follow in pieces, as real servers send them.
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                ]
            }
        )
        for piece in chunks(args):
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if reply.call else "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        yield event(dict(base, choices=[], usage=_usage(body, reply)))
    yield event("[DONE]")
