"""Anthropic Messages API shapes (what Claude Code reads), streaming and not."""

from __future__ import annotations

import json
from collections.abc import Iterator

from .engine import Reply, new_id
from .sse import approx_tokens, chunks, event

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def _blocks(reply: Reply) -> list[dict]:
    blocks: list[dict] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    if reply.call:
        blocks.append(
            {
                "type": "tool_use",
                "id": reply.call_id.replace("call_", "toolu_", 1),
                "name": reply.call.name,
                "input": reply.call.args,
            }
        )
    return blocks


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.call else "end_turn"


def message(reply: Reply, model: str, body: dict) -> dict:
    blocks = _blocks(reply)
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": {"input_tokens": approx_tokens(body), "output_tokens": approx_tokens(blocks)},
    }


def stream(reply: Reply, model: str, body: dict) -> Iterator[str]:
    full = message(reply, model, body)
    start = dict(full, content=[], stop_reason=None, usage=dict(full["usage"], output_tokens=1))
    yield event({"type": "message_start", "message": start}, "message_start")
    yield event({"type": "ping"}, "ping")
    for index, block in enumerate(full["content"]):
        if block["type"] == "text":
            yield event(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            )
            for piece in chunks(block["text"]):
                yield event(
                    {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
                    "content_block_delta",
                )
        else:
            yield event(
                {"type": "content_block_start", "index": index, "content_block": dict(block, input={})},
                "content_block_start",
            )
            for piece in chunks(json.dumps(block["input"], ensure_ascii=False)):
                yield event(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                    "content_block_delta",
                )
        yield event({"type": "content_block_stop", "index": index}, "content_block_stop")
    yield event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": full["usage"]["output_tokens"]},
        },
        "message_delta",
    )
    yield event({"type": "message_stop"}, "message_stop")
