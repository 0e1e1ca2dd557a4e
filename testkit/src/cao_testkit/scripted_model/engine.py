"""Decide the reply to one request: which rule, which step of its tool loop, which tool spelling.

The position in the tool loop is read from the conversation itself (tool calls
since the user's message), so retries, restarts of the server and concurrent
sessions all behave. The only state is how many times each scripted error was
served, since an error leaves no trace in the conversation.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from dataclasses import dataclass

from .conversation import Conversation
from .script import ErrorStep, Response, Rule, Script, render, template_values
from .tools import Call, resolve


@dataclass
class Reply:
    text: str = ""
    call: Call | None = None
    call_id: str = ""
    error: ErrorStep | None = None
    delay_ms: int = 0
    source: str = "default"  # "rule 2 response 1", for request logs and assertions

    def summary(self) -> dict:
        out: dict = {"source": self.source}
        if self.error:
            out["error"] = {"status": self.error.status, "message": self.error.message}
        if self.text:
            out["text"] = self.text
        if self.call:
            out["tool"] = {"name": self.call.name, "namespace": self.call.namespace, "args": self.call.args}
        return out


_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    return f"{prefix}{next(_ids):04d}{uuid.uuid4().hex[:12]}"


class ErrorCounter:
    """Counts served errors per (script, rule, user text, loop position)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._served: dict[tuple, int] = {}

    def take(self, key: tuple, errors: list[ErrorStep], final: bool) -> ErrorStep | None:
        with self._lock:
            n = self._served.get(key, 0)
            budget = 0
            for err in errors:
                budget += err.times
                if n < budget:
                    self._served[key] = n + 1
                    return err
            # A script that ends in an error keeps failing: that is the point of writing it last.
            return errors[-1] if final and errors else None

    def reset(self, script: str) -> None:
        with self._lock:
            for key in [k for k in self._served if k[0] == script]:
                del self._served[key]


def _pick_rule(script: Script, conv: Conversation) -> tuple[int, Rule, object] | None:
    for i, rule in enumerate(script.rules):
        if not rule.applies(conv.is_side_request):
            continue
        if rule.pattern is None:
            return i, rule, None
        match = rule.pattern.search(conv.user_text)
        if match:
            return i, rule, match
    return None


def decide(script_name: str, script: Script, conv: Conversation, errors: ErrorCounter) -> Reply:
    picked = _pick_rule(script, conv)
    if picked is None:
        values = template_values(conv.user_text, conv.tool_result, None)
        return Reply(text=render(script.default, values))
    index, rule, match = picked
    values = template_values(conv.user_text, conv.tool_result, match)  # type: ignore[arg-type]
    position = len(conv.step_calls)
    source = f"rule {index + 1} response {position + 1}"
    if position >= len(rule.responses):
        # The script ran out of steps (it ended with a tool call): close the turn politely.
        return Reply(text=render(script.default, values), source=f"rule {index + 1} past end")
    response: Response = rule.responses[position]
    key = (script_name, index, conv.user_text, position)
    error = errors.take(key, response.errors, response.final)
    if error is not None:
        return Reply(error=error, delay_ms=response.delay_ms, source=source)
    text = render(response.text, values)
    if response.tool is None:
        return Reply(text=text or render(script.default, values), delay_ms=response.delay_ms, source=source)
    call = (
        None
        if conv.is_side_request
        else resolve(response.tool.name, render(response.tool.args, values), conv.tools, conv.trailing_search_calls > 0)
    )
    if call is None:
        # Only emit tools the request offers; say so in plain text instead.
        offered = ", ".join(t.full_name for t in conv.tools[:40]) or "none"
        note = f"[scripted-model] tool {response.tool.name!r} is not offered by this request (tools: {offered})"
        return Reply(
            text=note if not conv.is_side_request else render(script.default, values),
            delay_ms=response.delay_ms,
            source=source + " tool unavailable",
        )
    if call.auxiliary:
        text = ""  # the preamble belongs with the real call
    return Reply(text=text, call=call, call_id=new_id("call_"), delay_ms=response.delay_ms, source=source)
