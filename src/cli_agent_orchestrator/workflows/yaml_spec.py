"""The YAML tier of cao workflows: parse and check a declarative spec (a name, declared inputs
and steps run in order) into a YamlSpec, and render step prompts from `{{ ... }}` templates.
Pure: it reads only the text it is handed, so the server, the CLI and tests share one grammar.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from ..errors import InvalidInput
from .inputs import InputError, check_declaration

NAME_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
MAX_SPEC_BYTES = 256 * 1024
MAX_STEPS = 100
MAX_RETRIES, MAX_TIMEOUT_SECONDS, MAX_AGENT_CHARS = 10, 86400, 64
MODES, RUNNABLE_MODE = ("sequential", "parallel", "pipeline", "loop"), "sequential"
ON_FAILURE, ENGINES = ("halt", "continue"), ("v2", "kas")
ROOT_FIELDS = ("name", "description", "mode", "inputs", "steps")
STEP_FIELDS = ("id", "provider", "agent", "prompt", "retries", "on_failure", "timeout", "model",
               "engine")
# Accepted by the grammar now so specs can be written against them; refused at run time.
RESERVED_STEP_FIELDS = ("when", "until", "max_iterations", "on_stall", "on_no_progress",
                        "output_schema")
# Enough to fix a spec by; a hostile one could otherwise yield megabytes of messages.
MAX_REPORTED_ERRORS = 50
LOOP_FIELDS = ("until", "max_iterations", "on_stall", "on_no_progress")
# Required together on any loop step, even before loops run, so no spec written today can
# describe a loop without a way out.
LOOP_GUARDS = ("max_iterations", "on_stall", "on_no_progress")

_PART = re.compile(r"[A-Za-z0-9_-]+")
_SUPPORTED = ("{{ workflow.inputs.<name> }}, {{ steps.<id>.output }} or "
              "{{ steps.<id>.output.<field> }}")


class SpecError(InvalidInput, ValueError):
    """The spec breaks the grammar: the message joins every problem with "; "; `errors` lists them."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = list(errors)


class TemplateError(InvalidInput, ValueError):
    """A prompt template cannot be read or rendered (a 400 with a one-line reason)."""


@dataclass(frozen=True)
class YamlStep:
    id: str
    provider: str | None  # None -> server default provider
    agent: str
    prompt: str  # template text, not rendered
    retries: int = 3
    on_failure: str = "halt"
    timeout: float | None = None
    model: str | None = None
    engine: str | None = None
    # reserved fields as written (name → raw value): runnable_problem names the step by them
    reserved: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class YamlSpec:
    name: str
    description: str
    mode: str
    inputs: dict[str, dict]
    steps: tuple[YamlStep, ...]
    reserved: tuple[str, ...]  # reserved constructs used, in order found


def parse_spec(text: str | bytes) -> YamlSpec:
    """The spec, checked; SpecError listing every grammar problem otherwise."""
    spec, errors, _, _ = _check(text)
    if spec is None:
        raise SpecError(errors)
    return spec


def validate_spec(text: str | bytes) -> dict[str, Any]:
    """The yaml-tier validation result; a bad spec is a `fail`, never an exception."""
    _, errors, name, reserved = _check(text)
    notes = [f"construct '{construct}' is reserved (not built yet; a spec using it validates "
             "but does not run)" for construct in reserved]
    return {"status": "fail" if errors else "pass_reserved" if reserved else "pass",
            "reserved_notes": notes, "errors": errors, "tier": "yaml", "name": name}


def runnable_problem(spec: YamlSpec) -> str | None:
    """Why this valid spec cannot run yet, else None. Reserved fields are refused, never
    ignored: running a step without its `when` or `until` would do something else than written."""
    if spec.mode != RUNNABLE_MODE:
        return f"mode '{spec.mode}' is reserved and cannot run yet; only '{RUNNABLE_MODE}' runs"
    for step in spec.steps:
        for name in step.reserved:
            return (f"step '{step.id}' uses reserved field '{name}', which is not built yet; "
                    "remove it to run this spec")
    return None


def template_references(template: str) -> list[tuple[str, ...]]:
    """Each reference in the template, once, in order: ("workflow", "inputs", name),
    ("steps", id, "output") or ("steps", id, "output", field). TemplateError on any other
    `{{ ... }}`, so a caller never plans around a reference it misread."""
    references, problems = _scan(template)
    if problems:
        raise TemplateError(problems[0])
    return references


def render(template: str, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> str:
    """Substitute every reference in one pass: text coming from inputs or outputs is never
    read as a template itself."""
    template_references(template)  # refuses unsupported expressions before any substitution
    pieces, at = [], 0
    for start, end in _spans(template)[0]:
        reference = _reference(template[start + 2:end - 2]) or ()
        pieces += [template[at:start], _substitute(reference, inputs, outputs)]
        at = end
    return "".join(pieces) + template[at:]


class _StrictLoader(yaml.SafeLoader):
    # Duplicate keys are refused: plain YAML keeps the last one silently, dropping half a step.
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key_node.value!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _load(text: object) -> tuple[Any, list[str]]:
    if not isinstance(text, (str, bytes)):
        return None, [f"spec must be text, not {type(text).__name__}"]
    # surrogatepass: a str holding lone surrogates then fails the UTF-8 decode below, as bad bytes do
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    # Measured before decoding or parsing, so an oversized upload costs nothing more.
    if len(raw) > MAX_SPEC_BYTES:
        return None, [f"spec is {len(raw)} bytes; the limit is {MAX_SPEC_BYTES} (256 KiB)"]
    try:
        decoded = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, [f"spec is not valid UTF-8 (bad byte at offset {exc.start})"]
    try:
        return yaml.load(decoded, Loader=_StrictLoader), []  # noqa: S506 — a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:  # one line, not PyYAML's multi-line snippet
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return None, [f"spec is not valid YAML: {exc.problem or exc.context}{where}"]
    except RecursionError:
        return None, ["spec is not valid YAML: it is nested too deeply"]
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: e.g. a date like 2024-13-01
        return None, [f"spec is not valid YAML: {str(exc) or type(exc).__name__}"]


def _check(text: object) -> tuple[YamlSpec | None, list[str], str | None, list[str]]:
    """(spec or None, grammar errors, valid name or None, reserved constructs found)."""
    data, errors = _load(text)
    if not errors and not isinstance(data, dict):
        errors = [f"the spec's root must be a mapping (name, steps, ...), not {_kind(data)}"]
    if errors:
        return None, errors, None, []
    reserved: list[str] = []
    errors.extend(f"unknown field {_show(key)} at the root (allowed: {', '.join(ROOT_FIELDS)})"
                  for key in data if key not in ROOT_FIELDS)

    name = data.get("name")
    if not _is_name(name):
        errors.append("name is required" if name is None else
                      f"name must be 1-64 letters, digits, '_' or '-', not {_show(name)}")
        name = None
    # An empty field (`description:`) is YAML null and means "not given"; other falsy values
    # (0, false, []) are type errors, not defaults.
    description = _given(data, "description", "")
    if not isinstance(description, str):
        errors.append(f"description must be a string, not {_kind(description)}")
    mode = _given(data, "mode", RUNNABLE_MODE)
    if mode not in MODES:
        errors.append(f"mode must be one of {', '.join(MODES)}, not {_show(mode)}")
    elif mode != RUNNABLE_MODE:
        reserved.append(f"mode: {mode}")

    inputs = _given(data, "inputs", {})
    declared: Mapping[str, Any] | None = None  # None: unreadable, so references go unchecked
    if not isinstance(inputs, dict):
        errors.append(f"inputs must be a mapping of input name to {{type, required, default}}, "
                      f"not {_kind(inputs)}")
    else:
        try:
            check_declaration(inputs)
            declared = inputs
        except InputError as exc:
            errors.append(f"inputs: {exc}")

    steps: list[YamlStep] = []
    raw_steps = data.get("steps")
    if raw_steps is None:
        errors.append(f"steps is required: a list of 1..{MAX_STEPS} steps")
    elif not isinstance(raw_steps, list):
        errors.append(f"steps must be a list, not {_kind(raw_steps)}")
    elif not raw_steps:
        errors.append("steps must list at least one step")
    elif len(raw_steps) > MAX_STEPS:
        # Not checked one by one: a huge list would bury this error under thousands of others.
        errors.append(f"a spec has at most {MAX_STEPS} steps, not {len(raw_steps)}")
    else:
        first_at: dict[str, int] = {}
        for index, raw in enumerate(raw_steps):
            if isinstance(raw, dict) and _is_name(raw.get("id")):
                first_at.setdefault(raw["id"], index)
        for index, raw in enumerate(raw_steps):
            step = _check_step(index, raw, first_at, declared, errors, reserved)
            if step is not None:
                steps.append(step)

    if len(errors) > MAX_REPORTED_ERRORS:
        errors[MAX_REPORTED_ERRORS:] = [f"... and {len(errors) - MAX_REPORTED_ERRORS} more problems"]
    spec = None if errors else YamlSpec(
        name=name, description=description, mode=mode,
        inputs={key: dict(value) for key, value in inputs.items()}, steps=tuple(steps),
        reserved=tuple(reserved))
    return spec, errors, name, reserved


def _check_step(index: int, raw: object, first_at: Mapping[str, int],
                declared: Mapping[str, Any] | None, errors: list[str],
                reserved: list[str]) -> YamlStep | None:
    """The step, or None after appending its problems to `errors`."""
    if not isinstance(raw, dict):
        errors.append(f"steps[{index}] must be a mapping (id, agent, prompt, ...), not {_kind(raw)}")
        return None
    before = len(errors)
    step_id = raw.get("id")
    where = f"steps[{index}] (id '{step_id}')" if _is_name(step_id) else f"steps[{index}]"
    errors.extend(f"{where}: unknown field {_show(key)} (allowed: "
                  f"{', '.join(STEP_FIELDS + RESERVED_STEP_FIELDS)})"
                  for key in raw if key not in STEP_FIELDS + RESERVED_STEP_FIELDS)

    if not _is_name(step_id):
        errors.append(f"{where}: id is required" if step_id is None else
                      f"{where}: id must be 1-64 letters, digits, '_' or '-', not {_show(step_id)}")
    elif first_at[step_id] != index:
        errors.append(f"{where}: duplicate step id '{step_id}' (first used by "
                      f"steps[{first_at[step_id]}])")
    agent = raw.get("agent")
    if not (isinstance(agent, str) and agent.strip() and len(agent) <= MAX_AGENT_CHARS):
        errors.append(f"{where}: agent must be a non-empty string of at most {MAX_AGENT_CHARS} "
                      "characters")
    prompt = raw.get("prompt")
    if not (isinstance(prompt, str) and prompt.strip()):
        errors.append(f"{where}: prompt must be a non-empty string")
    else:
        errors.extend(f"{where}: {problem}"
                      for problem in _reference_problems(prompt, index, first_at, declared))
    for optional in ("provider", "model"):
        value = raw.get(optional)
        if value is not None and not (isinstance(value, str) and value.strip()):
            errors.append(f"{where}: {optional} must be a non-empty string when given")
    retries = _given(raw, "retries", 3)
    if not (isinstance(retries, int) and not isinstance(retries, bool)
            and 0 <= retries <= MAX_RETRIES):
        errors.append(f"{where}: retries must be an integer 0..{MAX_RETRIES}")
    on_failure = _given(raw, "on_failure", "halt")
    if on_failure not in ON_FAILURE:
        errors.append(f"{where}: on_failure must be halt or continue, not {_show(on_failure)}")
    timeout = raw.get("timeout")
    # `not 0 < t <= max` also refuses NaN, which compares false both ways.
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= MAX_TIMEOUT_SECONDS):
        errors.append(f"{where}: timeout must be a number of seconds above 0 and at most "
                      f"{MAX_TIMEOUT_SECONDS}")
    engine = raw.get("engine")
    if engine is not None and engine not in ENGINES:
        errors.append(f"{where}: engine must be v2 or kas, not {_show(engine)}")

    used = {key: raw[key] for key in raw if key in RESERVED_STEP_FIELDS}
    for key in used:
        if key not in reserved:
            reserved.append(key)
    if any(key in used for key in LOOP_FIELDS):
        missing = [guard for guard in LOOP_GUARDS if guard not in used]
        if missing:
            errors.append(f"{where}: a loop step must declare all of {', '.join(LOOP_GUARDS)}; "
                          f"missing {', '.join(missing)}")

    if len(errors) > before:
        return None
    return YamlStep(id=step_id, provider=raw.get("provider"), agent=agent, prompt=prompt,
                    retries=retries, on_failure=on_failure,
                    timeout=None if timeout is None else float(timeout), model=raw.get("model"),
                    engine=engine, reserved=MappingProxyType(used))


def _reference_problems(prompt: str, index: int, first_at: Mapping[str, int],
                        declared: Mapping[str, Any] | None) -> list[str]:
    references, problems = _scan(prompt)
    for reference in references:
        if reference[0] == "workflow":
            if declared is not None and reference[2] not in declared:
                problems.append(f"prompt references undeclared input '{reference[2]}'")
        elif reference[1] not in first_at:
            problems.append(f"prompt references unknown step '{reference[1]}'")
        elif first_at[reference[1]] >= index:
            # Steps run in order: only an earlier step has an output to read.
            problems.append(f"prompt references step '{reference[1]}', which does not run "
                            "before this step")
    return problems


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


def _scan(template: str) -> tuple[list[tuple[str, ...]], list[str]]:
    references: dict[tuple[str, ...], None] = {}  # a dict: ordered, and linear to dedupe
    problems: list[str] = []
    spans, unclosed = _spans(template)
    for start, end in spans:
        reference = _reference(template[start + 2:end - 2])
        if reference is None:
            problems.append(f"unsupported template expression {_show(template[start:end])} "
                            f"(use {_SUPPORTED})")
        else:
            references[reference] = None
    if unclosed is not None:
        problems.append(f"unsupported template expression {_show(template[unclosed:unclosed + 200])} "
                        "(no closing '}}')")
    return list(references), problems


def _reference(inner: str) -> tuple[str, ...] | None:
    parts = tuple(inner.strip().split("."))
    if not all(_PART.fullmatch(part) for part in parts):
        return None
    if len(parts) == 3 and parts[:2] == ("workflow", "inputs"):
        return parts
    if len(parts) in (3, 4) and parts[0] == "steps" and parts[2] == "output":
        return parts
    return None


def _substitute(reference: tuple[str, ...], inputs: Mapping[str, Any],
                outputs: Mapping[str, Any]) -> str:
    if reference[0] == "workflow":
        name = reference[2]
        if name not in inputs:
            raise TemplateError(f"input '{name}' has no value (not supplied and no default)")
        value = inputs[name]
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    step_id = reference[1]
    if step_id not in outputs:
        raise TemplateError(f"step '{step_id}' has no output to render (it has not run, "
                            "or it failed)")
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
        raise TemplateError(f"{{{{ steps.{step_id}.output.{name} }}}} needs step '{step_id}' "
                            "to output a JSON object, and its output is not one")
    if name not in output:
        fields = ", ".join(map(str, output))
        raise TemplateError(f"step '{step_id}' output has no field '{name}' (its fields: "
                            f"{fields[:200] or 'none'})")
    return _as_text(output[name])


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _given(data: Mapping[str, Any], key: str, default: Any) -> Any:
    value = data.get(key)
    return default if value is None else value


def _is_name(value: object) -> bool:
    # fullmatch: NAME_RE's `$` alone would also accept a trailing newline
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None


def _kind(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping", type(None): "empty (null)"}.get(type(value), type(value).__name__)


def _show(value: object, limit: int = 80) -> str:
    """A value for an error message: quoted, on one line, cut short."""
    if isinstance(value, (list, dict, set)):
        return _kind(value)  # never str() a container: YAML aliases can make it astronomically big
    text = " ".join(value.split()) if isinstance(value, str) else str(value)
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return f"'{text}'"
