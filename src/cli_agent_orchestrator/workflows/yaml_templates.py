"""The `{{ ... }}` templates of YAML step prompts: which references a prompt makes (workflow
inputs, earlier steps' outputs) and rendering them in one pass. Anything else is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidInput
from .yaml_values import show

_PART = re.compile(r"[A-Za-z0-9_-]+")
_SUPPORTED = "{{ workflow.inputs.<name> }}, {{ steps.<id>.output }} or {{ steps.<id>.output.<field> }}"


class TemplateError(InvalidInput, ValueError):
    """A prompt template cannot be read or rendered (a 400 with a one-line reason)."""


def template_references(template: str) -> list[tuple[str, ...]]:
    """Each reference in the template, once, in order: ("workflow", "inputs", name),
    ("steps", id, "output") or ("steps", id, "output", field). TemplateError on any other
    `{{ ... }}`, so a caller never plans around a reference it misread."""
    references, problems = scan(template)
    if problems:
        raise TemplateError(problems[0])
    return references


def render(template: str, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> str:
    """Substitute every reference in one pass: text coming from inputs or outputs is never
    read as a template itself."""
    template_references(template)  # refuses unsupported expressions before any substitution
    pieces, at = [], 0
    for start, end in _spans(template)[0]:
        reference = _reference(template[start + 2 : end - 2]) or ()
        pieces += [template[at:start], _substitute(reference, inputs, outputs)]
        at = end
    return "".join(pieces) + template[at:]


def scan(template: str) -> tuple[list[tuple[str, ...]], list[str]]:
    """(each reference once, in order; a problem for each unsupported or unclosed `{{`)."""
    references: dict[tuple[str, ...], None] = {}  # a dict: ordered, and linear to dedupe
    problems: list[str] = []
    spans, unclosed = _spans(template)
    for start, end in spans:
        reference = _reference(template[start + 2 : end - 2])
        if reference is None:
            problems.append(f"unsupported template expression {show(template[start:end])} (use {_SUPPORTED})")
        else:
            references[reference] = None
    if unclosed is not None:
        problems.append(
            f"unsupported template expression {show(template[unclosed : unclosed + 200])} (no closing '}}}}')"
        )
    return list(references), problems


def _spans(template: str) -> tuple[list[tuple[int, int]], int | None]:
    """(start, end) of each `{{ ... }}`, and where an unclosed `{{` starts, if one does.
    str.find keeps this linear; a lazy regex, retried at every `{{`, was quadratic."""
    spans: list[tuple[int, int]] = []
    at = 0
    while (start := template.find("{{", at)) != -1:
        end = template.find("}}", start + 2)
        if end == -1:
            return spans, start
        spans.append((start, end + 2))
        at = end + 2
    return spans, None


def _reference(inner: str) -> tuple[str, ...] | None:
    parts = tuple(inner.strip().split("."))
    if not all(_PART.fullmatch(part) for part in parts):
        return None
    if len(parts) == 3 and parts[:2] == ("workflow", "inputs"):
        return parts
    if len(parts) in (3, 4) and parts[0] == "steps" and parts[2] == "output":
        return parts
    return None


def _substitute(reference: tuple[str, ...], inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> str:
    if reference[0] == "workflow":
        name = reference[2]
        if name not in inputs:
            raise TemplateError(f"input '{name}' has no value (not supplied and no default)")
        value = inputs[name]
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    step_id = reference[1]
    if step_id not in outputs:
        raise TemplateError(f"step '{step_id}' has no output to render (it has not run, or it failed)")
    output = outputs[step_id]
    if len(reference) == 3:
        return _as_text(output)
    name = reference[3]
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except (ValueError, RecursionError):
            pass
    if not isinstance(output, Mapping):
        raise TemplateError(
            f"{{{{ steps.{step_id}.output.{name} }}}} needs step '{step_id}' "
            "to output a JSON object, and its output is not one"
        )
    if name not in output:
        fields = ", ".join(map(str, output))
        raise TemplateError(f"step '{step_id}' output has no field '{name}' (its fields: {fields[:200] or 'none'})")
    return _as_text(output[name])


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
