"""Script format: rules that turn the user's latest message into a scripted tool loop.

A script is a list of rules (or a mapping ``{rules: [...], default: "..."}``)::

    - match: "deploy (\\w+)"        # re.search, DOTALL, on the latest user text; omitted: always
      when: main                    # main (default): requests with tools; side: tool-less
                                    # side requests (titles, memory, routers); any: both
      steps:
        - text: "Deploying {g1}."   # text before a tool call is sent with that call
        - tool: shell               # alias, exact tool name, or mcp:<server>:<tool>
          args: {command: "echo {g1}"}
        - text: "Result: {tool_result}"
    - match: "slow"
      steps: [{delay_ms: 1500}, {text: "finally"}]   # a bare delay slows the next reply
    - match: "flaky"
      steps:
        - error: 529                # HTTP status, vendor-shaped body; served `times` times
          message: "Overloaded"     # (default 1), then the script moves on; a trailing
          times: 2                  # error repeats forever
        - text: "recovered"
    - match: "hi"
      reply: "hello"                # shorthand for steps: [{text: hello}]

A turn only continues through tool calls, so the steps are grouped into
*responses*: each response ends with a tool call or with the final text. The
n-th response is played when the conversation holds n tool calls since the
user's message, which keeps the server stateless apart from error counters.

Templates: ``{user}``, ``{tool_result}``, ``{g0}``..``{g9}`` and named groups;
unknown ``{names}`` stay as written, so JSON in text is safe.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_REPLY = "OK: {user80}"
WHEN = ("main", "side", "any")


class ScriptError(ValueError):
    """A script that cannot be used; the message says which rule and step."""


@dataclass(frozen=True)
class ErrorStep:
    status: int
    message: str
    times: int = 1


@dataclass(frozen=True)
class ToolStep:
    name: str
    args: dict[str, Any]


@dataclass
class Response:
    """Everything played for one model request at one point of the tool loop."""

    text: str = ""
    tool: ToolStep | None = None
    delay_ms: int = 0
    errors: list[ErrorStep] = field(default_factory=list)
    final: bool = False  # True when built from trailing delay/error steps only


@dataclass
class Rule:
    pattern: re.Pattern[str] | None
    when: str
    responses: list[Response]

    def applies(self, side_request: bool) -> bool:
        return self.when == "any" or self.when == ("side" if side_request else "main")


@dataclass
class Script:
    rules: list[Rule] = field(default_factory=list)
    default: str = DEFAULT_REPLY


def _responses(steps: list[Any], where: str) -> list[Response]:
    out: list[Response] = []
    pending = Response()
    for i, step in enumerate(steps):
        at = f"{where} step {i + 1}"
        if isinstance(step, str):
            step = {"text": step}
        if not isinstance(step, dict):
            raise ScriptError(f"{at}: expected a mapping, got {type(step).__name__}")
        unknown = set(step) - {"text", "tool", "args", "delay_ms", "error", "message", "times"}
        if unknown:
            raise ScriptError(f"{at}: unknown keys {sorted(unknown)}")
        pending.delay_ms += int(step.get("delay_ms") or 0)
        if "error" in step:
            pending.errors.append(
                ErrorStep(
                    int(step["error"]), str(step.get("message") or "scripted error"), max(1, int(step.get("times", 1)))
                )
            )
            continue
        if "text" in step:
            text = str(step["text"])
            pending.text = f"{pending.text}\n\n{text}" if pending.text else text
        if "tool" in step:
            args = step.get("args") or {}
            if not isinstance(args, dict):
                raise ScriptError(f"{at}: args must be a mapping")
            pending.tool = ToolStep(str(step["tool"]), args)
        if pending.tool is not None:
            out.append(pending)
            pending = Response()
    if pending.text:
        out.append(pending)
    elif pending.errors or pending.delay_ms:
        pending.final = True
        out.append(pending)
    return out


def parse_script(data: Any, name: str = "script") -> Script:
    """Validate a decoded YAML/JSON script; raises ScriptError with a precise location."""
    if data is None:
        return Script()
    default = DEFAULT_REPLY
    if isinstance(data, dict):
        default = str(data.get("default", DEFAULT_REPLY))
        data = data.get("rules") or []
    if not isinstance(data, list):
        raise ScriptError(f"{name}: expected a list of rules or a mapping with 'rules'")
    rules: list[Rule] = []
    for i, raw in enumerate(data):
        where = f"{name} rule {i + 1}"
        if not isinstance(raw, dict):
            raise ScriptError(f"{where}: expected a mapping")
        unknown = set(raw) - {"match", "when", "steps", "reply"}
        if unknown:
            raise ScriptError(f"{where}: unknown keys {sorted(unknown)}")
        try:
            pattern = re.compile(str(raw["match"]), re.DOTALL) if raw.get("match") is not None else None
        except re.error as exc:
            raise ScriptError(f"{where}: bad regex: {exc}") from None
        when = str(raw.get("when", "main"))
        if when not in WHEN:
            raise ScriptError(f"{where}: when must be one of {WHEN}")
        steps = raw.get("steps")
        if steps is None:
            steps = [{"text": raw.get("reply", "")}] if "reply" in raw else []
        if not isinstance(steps, list):
            raise ScriptError(f"{where}: steps must be a list")
        rules.append(Rule(pattern, when, _responses(steps, where)))
    return Script(rules, default)


def load_script_file(path: Path) -> Script:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    return parse_script(data, path.name)


_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render(template: Any, values: dict[str, str]) -> Any:
    """Substitute known ``{names}`` in strings, recursing into lists and mappings."""
    if isinstance(template, str):
        return _FIELD.sub(lambda m: values.get(m.group(1), m.group(0)), template)
    if isinstance(template, list):
        return [render(v, values) for v in template]
    if isinstance(template, dict):
        return {k: render(v, values) for k, v in template.items()}
    return template


def template_values(user: str, tool_result: str, match: re.Match[str] | None) -> dict[str, str]:
    values = {"user": user, "user80": user[:80], "tool_result": tool_result}
    if match is not None:
        values.update({f"g{i}": g or "" for i, g in enumerate((match.group(0),) + match.groups())})
        values.update({k: v or "" for k, v in match.groupdict().items()})
    return values
