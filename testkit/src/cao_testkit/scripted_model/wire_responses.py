"""OpenAI Responses API shapes (the only API Codex speaks), streaming and not.

Codex builds its history from ``response.output_item.done`` items and ends the
turn on ``response.completed``; the text deltas are what its TUI shows live.
An MCP call must carry the ``namespace`` the tool was offered under.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from .engine import Reply, new_id
from .sse import approx_tokens, chunks, event

ERROR_CODES = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    403: "permission_denied",
    404: "model_not_found",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_is_overloaded",
}


def error_body(status: int, message: str) -> dict:
    kind = "invalid_request_error" if status < 500 and status != 429 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": ERROR_CODES.get(status, "server_error")}}


def _items(reply: Reply) -> list[dict]:
    items: list[dict] = []
    if reply.text:
        items.append(
            {
                "id": new_id("msg_"),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    if reply.call:
        item = {
            "id": new_id("fc_"),
            "type": "function_call",
            "status": "completed",
            "call_id": reply.call_id,
            "name": reply.call.name,
            "arguments": json.dumps(reply.call.args, ensure_ascii=False),
        }
        if reply.call.namespace:
            item["namespace"] = reply.call.namespace
        items.append(item)
    return items


def response(reply: Reply, model: str, body: dict, status: str = "completed", items: list[dict] | None = None) -> dict:
    output = _items(reply) if items is None else items
    usage_in, usage_out = approx_tokens(body), approx_tokens(output)
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "parallel_tool_calls": False,
        "error": None,
        "usage": {
            "input_tokens": usage_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage_in + usage_out,
        },
    }


def stream(reply: Reply, model: str, body: dict) -> Iterator[str]:
    seq = iter(range(1_000_000))

    def ev(kind: str, **fields: object) -> str:
        return event({"type": kind, "sequence_number": next(seq), **fields}, kind)

    items = _items(reply)
    final = response(reply, model, body, items=items)
    yield ev("response.created", response=dict(final, status="in_progress", output=[], usage=None))
    yield ev("response.in_progress", response=dict(final, status="in_progress", output=[], usage=None))
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield ev(
                "response.output_item.added", output_index=index, item=dict(item, status="in_progress", content=[])
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            yield ev("response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part)
            for piece in chunks(text):
                yield ev(
                    "response.output_text.delta", item_id=item["id"], output_index=index, content_index=0, delta=piece
                )
            yield ev("response.output_text.done", item_id=item["id"], output_index=index, content_index=0, text=text)
            yield ev(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=dict(part, text=text),
            )
        else:
            yield ev(
                "response.output_item.added", output_index=index, item=dict(item, status="in_progress", arguments="")
            )
            for piece in chunks(item["arguments"]):
                yield ev("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=piece)
            yield ev(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=item["arguments"],
            )
        yield ev("response.output_item.done", output_index=index, item=item)
    yield ev("response.completed", response=final)
