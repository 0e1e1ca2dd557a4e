"""A step's `output_schema`: the check of the schema itself (the linter's and the output
route's), the validation of a step's structured output against it, and how that output is
found in a reply. Pure, one validator for both tiers: JSON Schema 2020-12 through the
`jsonschema` library, with every problem named by the JSON path where it is.

A schema is bounded before it is used (depth, size), and `$ref`s are never fetched: an
unresolvable reference is a schema problem, not a network call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import referencing.exceptions
from jsonschema import Draft202012Validator

# The contract's limit: a schema nested deeper than this (objects and arrays, the schema's
# own mapping counting 1) is refused, so a hostile spec cannot make validation recurse.
MAX_SCHEMA_DEPTH = 8
MAX_SCHEMA_BYTES = 64 * 1024
# Enough to fix an output by; a huge output could otherwise yield thousands of messages.
MAX_REPORTED_VIOLATIONS = 20
MAX_MESSAGE_CHARS = 300
# How much of a long reply is searched for its JSON object (the end, where an answer sits).
MAX_REPLY_SCAN_CHARS = 256 * 1024
MAX_OBJECT_STARTS = 64
NO_OUTPUT = "no structured output: call workflow_return with a JSON object, or end the reply with one"
_FENCED = re.compile(r"```(?:json)?[ \t]*\n(.*?)\n[ \t]*```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Violation:
    """One way an output fails its schema: where (`$`, `$.items[0].name`) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def as_json(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


def schema_problems(schema: object) -> list[str]:
    """Why `schema` is not a usable output_schema (empty when it is): not an object, too
    deep or too big, or not valid JSON Schema 2020-12 (the library's own check)."""
    if not isinstance(schema, Mapping):
        return [f"output_schema must be a JSON Schema object (a mapping), not {_kind(schema)}"]
    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        return [f"output_schema is nested {depth} levels deep; the limit is {MAX_SCHEMA_DEPTH}"]
    try:
        size = len(json.dumps(schema, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:  # YAML can hold what JSON cannot (dates, .inf, non-string keys)
        return [f"output_schema is not JSON: {exc}"]
    if size > MAX_SCHEMA_BYTES:
        return [f"output_schema is {size} bytes; the limit is {MAX_SCHEMA_BYTES}"]
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = _path(exc.absolute_path)
        return [f"output_schema is not valid JSON Schema 2020-12 at {where}: {_short(exc.message)}"]
    return []


def violations(output: object, schema: Mapping[str, Any]) -> list[Violation]:
    """How `output` fails `schema` (a schema `schema_problems` accepted), ordered by path;
    empty when it matches. A `$ref` that cannot be resolved is reported at `$`."""
    validator = Draft202012Validator(schema)
    try:
        errors = sorted(validator.iter_errors(output), key=lambda e: [str(p) for p in e.absolute_path])
    except referencing.exceptions.Unresolvable as exc:
        return [Violation("$", f"output_schema has a $ref that cannot be resolved: {_short(str(exc))}")]
    found = [Violation(_where(e), _short(e.message)) for e in errors[:MAX_REPORTED_VIOLATIONS]]
    if len(errors) > MAX_REPORTED_VIOLATIONS:
        found.append(Violation("$", f"... and {len(errors) - MAX_REPORTED_VIOLATIONS} more problems"))
    return found


def object_in_reply(reply: str) -> dict[str, Any] | None:
    """The JSON object an agent ended its reply with, else None: the whole reply, else the
    last fenced ```json block, else the last object that starts a line. Only the reply's end
    is searched, and only so many starts are tried, so a long reply costs little."""
    text = reply[-MAX_REPLY_SCAN_CHARS:].strip()
    whole = _object(text)
    if whole is not None:
        return whole
    for block in reversed(_FENCED.findall(text)):
        fenced = _object(block.strip())
        if fenced is not None:
            return fenced
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"(?m)^[ \t]*\{", text)][-MAX_OBJECT_STARTS:]
    for start in reversed(starts):
        try:
            value, _ = decoder.raw_decode(text, text.index("{", start))
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def instructions(schema: Mapping[str, Any]) -> str:
    """What a step's prompt gains when the step declares an output_schema."""
    return (
        "\n\nReturn your result as structured output: call the MCP tool workflow_return with "
        "`output` set to a JSON object that matches this JSON Schema (or, without that tool, end "
        "your reply with that JSON object alone):\n" + json.dumps(schema, ensure_ascii=False)
    )


def correction(prompt: str, found: Iterable[Violation], previous: object) -> str:
    """The one reprompt after a missing or invalid output: the task again, with its
    `instructions` (a fresh agent knows nothing of the first), what was wrong, and what was
    returned."""
    problems = "\n".join(f"- {v}" for v in found)
    shown = "(nothing)" if previous is None else _short(json.dumps(previous, ensure_ascii=False), 2000)
    return (
        f"{prompt}\n\n"
        "A previous answer to this task did not match the output schema. Its output was:\n"
        f"{shown}\nProblems:\n{problems}\nReturn a corrected JSON object."
    )


def _object(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _depth(value: object) -> int:
    """Nesting of objects and arrays; iterative, so even a pathological value cannot recurse."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children: Iterable[object]
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_SCHEMA_DEPTH:  # deep enough to refuse; no need to walk further
            break
        stack.extend((child, level + 1) for child in children)
    return deepest


def _where(error: jsonschema.ValidationError) -> str:
    """The error's path; for a missing required key, the key's own path (`$.summary`), as
    that is what the author has to add."""
    where = _path(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        required = error.validator_value if isinstance(error.validator_value, list) else []
        for key in required:
            if isinstance(key, str) and key not in error.instance and repr(key) in error.message:
                return _path([*error.absolute_path, key])
    return where


def _path(parts: Iterable[object]) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _short(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
