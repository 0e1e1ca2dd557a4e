"""One vendor-neutral view of a model request, so the script engine never sees wire formats.

Each coding CLI speaks a different API, but the engine only needs four facts:
the latest thing the *user* typed (not wrapper text the CLI injects), the tool
calls the assistant already made since then (how far the scripted tool loop
has progressed), the text of the last tool result, and the tools on offer.
Each ``from_*`` function extracts those from one API's request body.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Tags the CLIs wrap around injected context. Removing them leaves what the user
# actually typed, which is what rules are written against.
WRAPPER_TAGS = (
    "system-reminder",
    "environment_context",
    "user_instructions",
    "INSTRUCTIONS",
    "user_shell_command",
    "turn_aborted",
    "local-command-stdout",
    "local-command-caveat",
)
_TAG_ALTERNATIVES = "|".join(re.escape(t) for t in WRAPPER_TAGS)
_BLOCK = re.compile(rf"<({_TAG_ALTERNATIVES})\b[^>]*>.*?</\1>", re.DOTALL)
# Codex sends AGENTS.md as its own user message with this heading.
_AGENTS_MD = re.compile(r"^# AGENTS\.md instructions for ", re.MULTILINE)

# Deferred-tool loaders (qwen's tool_search, Claude's ToolSearch). Calls to them are
# bookkeeping the engine inserts on its own, so they never count as script steps.
SEARCH_TOOLS = ("tool_search", "ToolSearch")


@dataclass(frozen=True)
class ToolDef:
    """A tool offered by the request; ``namespace`` is set only for Codex's namespaced MCP tools."""

    name: str
    namespace: str | None = None
    properties: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    types: tuple[tuple[str, str], ...] = ()  # (property, JSON type) pairs, for filling required args
    description: str = ""

    @property
    def full_name(self) -> str:
        return f"{self.namespace}__{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class PastCall:
    name: str
    call_id: str = ""


@dataclass
class Conversation:
    api: str
    model: str = ""
    stream: bool = False
    user_text: str = ""
    calls: list[PastCall] = field(default_factory=list)  # assistant tool calls since user_text
    tool_result: str = ""  # text of the latest tool result
    tools: list[ToolDef] = field(default_factory=list)

    @property
    def is_side_request(self) -> bool:
        # Title generation, memory extraction, routers: the CLIs send these without tools.
        return not self.tools

    @property
    def step_calls(self) -> list[PastCall]:
        return [c for c in self.calls if c.name not in SEARCH_TOOLS]

    @property
    def trailing_search_calls(self) -> int:
        n = 0
        for c in reversed(self.calls):
            if c.name not in SEARCH_TOOLS:
                break
            n += 1
        return n

    def new_user_turn(self, text: str) -> None:
        self.user_text = text
        self.calls = []
        self.tool_result = ""


def strip_wrappers(text: str) -> str:
    if _AGENTS_MD.match(text.lstrip()):
        return ""
    return _BLOCK.sub("", text).strip()


def _user_text(parts: list[str]) -> str:
    return "\n".join(t for t in (strip_wrappers(p) for p in parts) if t)


def _as_text(value: Any) -> str:
    """Flatten a tool result (string, list of content parts, or object) to text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_as_text(v.get("text", v.get("content")) if isinstance(v, dict) else v) for v in value)
    if isinstance(value, dict):
        for key in ("output", "content", "text", "result"):
            if key in value and len(value) <= 2:
                return _as_text(value[key])
    return json.dumps(value, ensure_ascii=False)


def _tool_def(name: str, schema: dict | None, namespace: str | None = None, description: str = "") -> ToolDef:
    schema = schema if isinstance(schema, dict) else {}
    found = schema.get("properties")
    props: dict = found if isinstance(found, dict) else {}
    types = tuple((k, str(v.get("type", ""))) for k, v in props.items() if isinstance(v, dict))
    return ToolDef(
        name=name,
        namespace=namespace,
        properties=tuple(props),
        types=types,
        required=tuple(schema.get("required") or ()),
        description=description or "",
    )


def _parts(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [p for p in content or [] if isinstance(p, dict)]


def from_anthropic(body: dict) -> Conversation:
    conv = Conversation(api="anthropic", model=str(body.get("model", "")), stream=bool(body.get("stream")))
    conv.tools = [
        _tool_def(t["name"], t.get("input_schema"), description=t.get("description", ""))
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("name")
    ]
    for msg in body.get("messages") or []:
        role, parts = msg.get("role"), _parts(msg.get("content"))
        if role == "assistant":
            conv.calls += [PastCall(p.get("name", ""), p.get("id", "")) for p in parts if p.get("type") == "tool_use"]
        elif role == "user":
            results = [p for p in parts if p.get("type") == "tool_result"]
            if results:
                conv.tool_result = _as_text(results[-1].get("content"))
                continue
            text = _user_text([p.get("text", "") for p in parts if p.get("type") == "text"])
            if text:
                conv.new_user_turn(text)
        # role "system" (Claude's mid-conversation system messages) carries no user intent.
    return conv


def from_responses(body: dict) -> Conversation:
    conv = Conversation(api="responses", model=str(body.get("model", "")), stream=bool(body.get("stream")))
    for t in body.get("tools") or []:
        if t.get("type") == "namespace":
            conv.tools += [
                _tool_def(s.get("name", ""), s.get("parameters"), t.get("name"), s.get("description", ""))
                for s in t.get("tools") or []
                if isinstance(s, dict)
            ]
        elif t.get("name"):
            conv.tools.append(_tool_def(t["name"], t.get("parameters"), description=t.get("description", "")))
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user":
            text = _user_text(
                [p.get("text", "") for p in _parts(item.get("content")) if p.get("type") in ("input_text", "text")]
            )
            if text:
                conv.new_user_turn(text)
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            conv.calls.append(PastCall(item.get("name", kind), item.get("call_id", "")))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            conv.tool_result = _as_text(item.get("output"))
    return conv


def from_chat(body: dict) -> Conversation:
    conv = Conversation(api="chat", model=str(body.get("model", "")), stream=bool(body.get("stream")))
    conv.tools = [
        _tool_def(f["name"], f.get("parameters"), description=f.get("description", ""))
        for f in (t.get("function") for t in body.get("tools") or [])
        if isinstance(f, dict) and f.get("name")
    ]
    for msg in body.get("messages") or []:
        role = msg.get("role")
        if role == "user":
            text = _user_text([p.get("text", "") for p in _parts(msg.get("content")) if p.get("type") == "text"])
            if text:
                conv.new_user_turn(text)
        elif role == "assistant":
            conv.calls += [
                PastCall((c.get("function") or {}).get("name", ""), c.get("id", ""))
                for c in msg.get("tool_calls") or []
            ]
        elif role == "tool":
            conv.tool_result = _as_text(msg.get("content"))
    return conv


def from_gemini(body: dict, model: str, stream: bool) -> Conversation:
    conv = Conversation(api="gemini", model=model, stream=stream)
    for group in body.get("tools") or []:
        for f in group.get("functionDeclarations") or group.get("function_declarations") or []:
            schema = f.get("parametersJsonSchema") or f.get("parameters")
            conv.tools.append(_tool_def(f.get("name", ""), schema, description=f.get("description", "")))
    for msg in body.get("contents") or []:
        parts = [p for p in msg.get("parts") or [] if isinstance(p, dict)]
        if msg.get("role") == "model":
            conv.calls += [
                PastCall(p["functionCall"].get("name", ""), p["functionCall"].get("id", ""))
                for p in parts
                if "functionCall" in p
            ]
            continue
        responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if responses:
            conv.tool_result = _as_text(responses[-1].get("response"))
            continue
        text = _user_text([p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")])
        if text:
            conv.new_user_turn(text)
    return conv
