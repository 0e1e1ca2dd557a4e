"""The YAML tier's spec grammar: parse and check a declarative spec (a name, declared inputs,
steps run in order, each checked by `yaml_steps`) into a YamlSpec, and say whether it can run
yet. Pure: it reads only the text it is handed, so the server, the CLI and tests share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import InvalidInput
from .inputs import InputError, check_declaration
from .yaml_steps import YamlStep, check_step
from .yaml_values import given, is_name, kind, show

MAX_SPEC_BYTES = 256 * 1024
MAX_STEPS = 100
MODES, RUNNABLE_MODE = ("sequential", "parallel", "pipeline", "loop"), "sequential"
ROOT_FIELDS = ("name", "description", "mode", "inputs", "steps")
# Enough to fix a spec by; a hostile one could otherwise yield megabytes of messages.
MAX_REPORTED_ERRORS = 50


class SpecError(InvalidInput, ValueError):
    """The spec breaks the grammar: the message joins every problem with "; "; `errors` lists them."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = list(errors)


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
    notes = [
        f"construct '{construct}' is reserved (not built yet; a spec using it validates but does not run)"
        for construct in reserved
    ]
    return {
        "status": "fail" if errors else "pass_reserved" if reserved else "pass",
        "reserved_notes": notes,
        "errors": errors,
        "tier": "yaml",
        "name": name,
    }


def runnable_problem(spec: YamlSpec) -> str | None:
    """Why this valid spec cannot run yet, else None. Reserved fields are refused, never
    ignored: running a step without its `when` or `until` would do something else than written."""
    if spec.mode != RUNNABLE_MODE:
        return f"mode '{spec.mode}' is reserved and cannot run yet; only '{RUNNABLE_MODE}' runs"
    for step in spec.steps:
        for name in step.reserved:
            return f"step '{step.id}' uses reserved field '{name}', which is not built yet; remove it to run this spec"
    return None


class _StrictLoader(yaml.SafeLoader):
    # Duplicate keys are refused: plain YAML keeps the last one silently, dropping half a step.
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key_node.value!r}",
                        key_node.start_mark,
                    )
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
        errors = [f"the spec's root must be a mapping (name, steps, ...), not {kind(data)}"]
    if errors:
        return None, errors, None, []
    reserved: list[str] = []
    errors.extend(
        f"unknown field {show(key)} at the root (allowed: {', '.join(ROOT_FIELDS)})"
        for key in data
        if key not in ROOT_FIELDS
    )

    name = data.get("name")
    if not is_name(name):
        errors.append(
            "name is required" if name is None else f"name must be 1-64 letters, digits, '_' or '-', not {show(name)}"
        )
        name = None
    # An empty field (`description:`) is YAML null and means "not given"; other falsy values
    # (0, false, []) are type errors, not defaults.
    description = given(data, "description", "")
    if not isinstance(description, str):
        errors.append(f"description must be a string, not {kind(description)}")
    mode = given(data, "mode", RUNNABLE_MODE)
    if mode not in MODES:
        errors.append(f"mode must be one of {', '.join(MODES)}, not {show(mode)}")
    elif mode != RUNNABLE_MODE:
        reserved.append(f"mode: {mode}")

    inputs = given(data, "inputs", {})
    declared: Mapping[str, Any] | None = None  # None: unreadable, so references go unchecked
    if not isinstance(inputs, dict):
        errors.append(f"inputs must be a mapping of input name to {{type, required, default}}, not {kind(inputs)}")
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
        errors.append(f"steps must be a list, not {kind(raw_steps)}")
    elif not raw_steps:
        errors.append("steps must list at least one step")
    elif len(raw_steps) > MAX_STEPS:
        # Not checked one by one: a huge list would bury this error under thousands of others.
        errors.append(f"a spec has at most {MAX_STEPS} steps, not {len(raw_steps)}")
    else:
        first_at: dict[str, int] = {}
        for index, raw in enumerate(raw_steps):
            if isinstance(raw, dict) and is_name(raw.get("id")):
                first_at.setdefault(raw["id"], index)
        for index, raw in enumerate(raw_steps):
            step = check_step(index, raw, first_at, declared, errors, reserved)
            if step is not None:
                steps.append(step)

    if len(errors) > MAX_REPORTED_ERRORS:
        errors[MAX_REPORTED_ERRORS:] = [f"... and {len(errors) - MAX_REPORTED_ERRORS} more problems"]
    spec = (
        None
        if errors
        else YamlSpec(
            name=name,
            description=description,
            mode=mode,
            inputs={key: dict(value) for key, value in inputs.items()},
            steps=tuple(steps),
            reserved=tuple(reserved),
        )
    )
    return spec, errors, name, reserved
