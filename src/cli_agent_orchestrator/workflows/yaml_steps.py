"""One step of a YAML spec: its fields, their limits, the reserved (not yet runnable) ones,
and the check that turns a raw mapping into a YamlStep or into messages saying what is wrong.
A step's `output_schema` is checked here as a schema (`output_schema.schema_problems`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..services.hosts.records import NAME_RE as HOST_NAME_RE
from .output_schema import schema_problems
from .yaml_templates import scan
from .yaml_values import given, is_name, kind, show

MAX_RETRIES, MAX_TIMEOUT_SECONDS, MAX_AGENT_CHARS = 10, 86400, 64
ON_FAILURE, ENGINES = ("halt", "continue"), ("v2", "kas")
STEP_FIELDS = (
    "id",
    "provider",
    "agent",
    "prompt",
    "retries",
    "on_failure",
    "timeout",
    "model",
    "engine",
    "host",
    "output_schema",
)
# Accepted by the grammar now so specs can be written against them; refused at run time.
RESERVED_STEP_FIELDS = ("when", "until", "max_iterations", "on_stall", "on_no_progress")
LOOP_FIELDS = ("until", "max_iterations", "on_stall", "on_no_progress")
# Required together on any loop step, even before loops run, so no spec written today can
# describe a loop without a way out.
LOOP_GUARDS = ("max_iterations", "on_stall", "on_no_progress")


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
    host: str | None = None  # None -> the placement policy
    # JSON Schema 2020-12 the step's structured output must match; None -> its reply text is its output
    output_schema: Mapping[str, Any] | None = None
    # reserved fields as written (name → raw value): runnable_problem names the step by them
    reserved: Mapping[str, Any] = field(default_factory=dict)


def check_step(
    index: int,
    raw: object,
    first_at: Mapping[str, int],
    declared: Mapping[str, Any] | None,
    errors: list[str],
    reserved: list[str],
) -> YamlStep | None:
    """The step, or None after appending its problems to `errors`. `first_at` maps each step
    id to the index of its first use; `declared` is the inputs, or None when unreadable (then
    input references go unchecked); reserved fields used are appended to `reserved`."""
    if not isinstance(raw, dict):
        errors.append(f"steps[{index}] must be a mapping (id, agent, prompt, ...), not {kind(raw)}")
        return None
    before = len(errors)
    step_id = raw.get("id")
    where = f"steps[{index}] (id '{step_id}')" if is_name(step_id) else f"steps[{index}]"
    errors.extend(
        f"{where}: unknown field {show(key)} (allowed: {', '.join(STEP_FIELDS + RESERVED_STEP_FIELDS)})"
        for key in raw
        if key not in STEP_FIELDS + RESERVED_STEP_FIELDS
    )

    if not is_name(step_id):
        errors.append(
            f"{where}: id is required"
            if step_id is None
            else f"{where}: id must be 1-64 letters, digits, '_' or '-', not {show(step_id)}"
        )
    elif first_at[str(step_id)] != index:
        errors.append(f"{where}: duplicate step id '{step_id}' (first used by steps[{first_at[str(step_id)]}])")
    agent = raw.get("agent")
    if not (isinstance(agent, str) and agent.strip() and len(agent) <= MAX_AGENT_CHARS):
        errors.append(f"{where}: agent must be a non-empty string of at most {MAX_AGENT_CHARS} characters")
    prompt = raw.get("prompt")
    if not (isinstance(prompt, str) and prompt.strip()):
        errors.append(f"{where}: prompt must be a non-empty string")
    else:
        errors.extend(f"{where}: {problem}" for problem in _reference_problems(prompt, index, first_at, declared))
    for optional in ("provider", "model"):
        value = raw.get(optional)
        if value is not None and not (isinstance(value, str) and value.strip()):
            errors.append(f"{where}: {optional} must be a non-empty string when given")
    retries = given(raw, "retries", 3)
    if not (isinstance(retries, int) and not isinstance(retries, bool) and 0 <= retries <= MAX_RETRIES):
        errors.append(f"{where}: retries must be an integer 0..{MAX_RETRIES}")
    on_failure = given(raw, "on_failure", "halt")
    if on_failure not in ON_FAILURE:
        errors.append(f"{where}: on_failure must be halt or continue, not {show(on_failure)}")
    timeout = raw.get("timeout")
    # `not 0 < t <= max` also refuses NaN, which compares false both ways.
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_SECONDS
    ):
        errors.append(f"{where}: timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECONDS}")
    engine = raw.get("engine")
    if engine is not None and engine not in ENGINES:
        errors.append(f"{where}: engine must be v2 or kas, not {show(engine)}")
    # A registered host's name or "local"; whether it is registered is the spawner's question,
    # asked when the step runs (its 400 fails the attempt).
    host = raw.get("host")
    if host is not None and not (isinstance(host, str) and HOST_NAME_RE.fullmatch(host)):
        errors.append(f"{where}: host must be a registered host's name (`cao host list`) or local, not {show(host)}")

    output_schema = raw.get("output_schema")
    if output_schema is not None:
        problems = schema_problems(output_schema)
        if problems:
            errors.append(f"{where}: " + "; ".join(problems))

    used = {key: raw[key] for key in raw if key in RESERVED_STEP_FIELDS}
    for key in used:
        if key not in reserved:
            reserved.append(key)
    if any(key in used for key in LOOP_FIELDS):
        missing = [guard for guard in LOOP_GUARDS if guard not in used]
        if missing:
            errors.append(
                f"{where}: a loop step must declare all of {', '.join(LOOP_GUARDS)}; missing {', '.join(missing)}"
            )

    if len(errors) > before:
        return None
    assert isinstance(step_id, str) and isinstance(agent, str) and isinstance(prompt, str)  # checked above
    return YamlStep(
        id=step_id,
        provider=raw.get("provider"),
        agent=agent,
        prompt=prompt,
        retries=retries,
        on_failure=on_failure,
        timeout=None if timeout is None else float(timeout),
        model=raw.get("model"),
        engine=engine,
        host=host,
        output_schema=output_schema,
        reserved=MappingProxyType(used),
    )


def _reference_problems(
    prompt: str, index: int, first_at: Mapping[str, int], declared: Mapping[str, Any] | None
) -> list[str]:
    references, problems = scan(prompt)
    for reference in references:
        if reference[0] == "workflow":
            if declared is not None and reference[2] not in declared:
                problems.append(f"prompt references undeclared input '{reference[2]}'")
        elif reference[1] not in first_at:
            problems.append(f"prompt references unknown step '{reference[1]}'")
        elif first_at[reference[1]] >= index:
            # Steps run in order: only an earlier step has an output to read.
            problems.append(f"prompt references step '{reference[1]}', which does not run before this step")
    return problems
