"""The YAML workflow tier: the spec grammar (every error class), reserved constructs, static
template checks and prompt rendering. Pure parsing — no server."""

from __future__ import annotations

import textwrap

import pytest

from cli_agent_orchestrator.errors import InvalidInput
from cli_agent_orchestrator.workflows.yaml_spec import (
    MAX_REPORTED_ERRORS,
    MAX_SPEC_BYTES,
    MAX_STEPS,
    SpecError,
    YamlSpec,
    parse_spec,
    runnable_problem,
    validate_spec,
)
from cli_agent_orchestrator.workflows.yaml_steps import YamlStep
from cli_agent_orchestrator.workflows.yaml_templates import TemplateError, render, template_references

VALID = """\
name: review-pr
description: Review a pull request
inputs:
  pr: {type: string, required: true}
  strict: {type: bool, default: false}
steps:
  - id: read
    agent: reader
    prompt: "Read PR {{ workflow.inputs.pr }} (strict={{workflow.inputs.strict}})"
  - id: review
    provider: kiro_cli
    agent: reviewer
    prompt: |
      Review this: {{ steps.read.output }}
      Focus on {{ steps.read.output.risk }}
    retries: 0
    on_failure: continue
    timeout: 90
    model: big-model
    engine: kas
"""


def spec_with(*steps: str, head: str = "name: demo\n") -> str:
    """A spec of `head` plus the given step bodies (YAML mapping text, dedented)."""
    body = "".join("  - " + textwrap.indent(textwrap.dedent(step).strip(), "    ")[4:] + "\n" for step in steps)
    return head + "steps:\n" + body


STEP = "id: {id}\nagent: a\nprompt: p"


def errors_of(text: str | bytes) -> list[str]:
    result = validate_spec(text)
    assert result["status"] == "fail", result
    return result["errors"]


def only_error(text: str | bytes) -> str:
    errors = errors_of(text)
    assert len(errors) == 1, errors
    return errors[0]


# --- a valid spec --------------------------------------------------------------------


def test_valid_spec_parses_into_typed_steps_with_defaults() -> None:
    spec = parse_spec(VALID)
    assert isinstance(spec, YamlSpec)
    assert (spec.name, spec.description, spec.mode, spec.reserved) == (
        "review-pr",
        "Review a pull request",
        "sequential",
        (),
    )
    assert spec.inputs == {"pr": {"type": "string", "required": True}, "strict": {"type": "bool", "default": False}}
    read, review = spec.steps
    assert read == YamlStep(
        id="read",
        provider=None,
        agent="reader",
        prompt="Read PR {{ workflow.inputs.pr }} (strict={{workflow.inputs.strict}})",
    )
    assert (read.retries, read.on_failure, read.timeout, read.model, read.engine) == (3, "halt", None, None, None)
    assert (review.provider, review.retries, review.on_failure, review.timeout, review.model, review.engine) == (
        "kiro_cli",
        0,
        "continue",
        90.0,
        "big-model",
        "kas",
    )
    assert isinstance(review.timeout, float)
    assert review.prompt.startswith("Review this: {{ steps.read.output }}")  # kept unrendered
    assert runnable_problem(spec) is None


def test_valid_spec_validates_as_pass_with_the_yaml_tier_shape() -> None:
    assert validate_spec(VALID) == {
        "status": "pass",
        "reserved_notes": [],
        "errors": [],
        "tier": "yaml",
        "name": "review-pr",
    }


def test_bytes_and_a_utf8_bom_are_accepted_and_optional_blocks_may_be_empty() -> None:
    spec = parse_spec(("\ufeff" + spec_with(STEP.format(id="only"))).encode("utf-8"))
    assert spec.name == "demo" and [s.id for s in spec.steps] == ["only"]
    # `description:` / `inputs:` / `provider:` left empty are YAML null: "not given"
    spec = parse_spec(spec_with(STEP.format(id="x") + "\nprovider:", head="name: demo\ndescription:\ninputs:\n"))
    assert (spec.description, spec.inputs, spec.steps[0].provider) == ("", {}, None)


def test_spec_error_is_an_invalid_input_carrying_each_error() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("steps: []\n")
    assert isinstance(caught.value, InvalidInput) and caught.value.http_status == 400
    assert caught.value.errors == ["name is required", "steps must list at least one step"]


# --- whole-file errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text, kind",
    [
        ("- a\n- b\n", "a list"),
        ("just text\n", "a string"),
        ("", "empty (null)"),
        ("42", "an integer"),
    ],
)
def test_root_must_be_a_mapping(text: str, kind: str) -> None:
    assert only_error(text) == f"the spec's root must be a mapping (name, steps, ...), not {kind}"


def test_spec_over_256_kib_is_refused_before_parsing() -> None:
    base = spec_with(STEP.format(id="a"))
    big = base + "#" * (MAX_SPEC_BYTES - len(base) + 1)
    assert only_error(big) == f"spec is {MAX_SPEC_BYTES + 1} bytes; the limit is {MAX_SPEC_BYTES} (256 KiB)"
    assert only_error(big.encode()).startswith("spec is 262145 bytes")
    assert validate_spec(big[:MAX_SPEC_BYTES])["status"] == "pass"  # exactly at the limit is fine


def test_non_utf8_bytes_and_lone_surrogates_are_refused() -> None:
    assert only_error(b"name: caf\xe9\n") == "spec is not valid UTF-8 (bad byte at offset 9)"
    assert only_error("name: \udc80\n").startswith("spec is not valid UTF-8")


def test_invalid_yaml_is_one_line_with_its_position() -> None:
    error = only_error("name: x\nsteps: [1\nfoo: 2\n")
    assert error.startswith("spec is not valid YAML: ") and "(line 3, column 4)" in error
    assert "\n" not in error


def test_duplicate_keys_are_refused_rather_than_silently_overwritten() -> None:
    error = only_error(spec_with("id: a\nagent: a\nprompt: first\nprompt: second"))
    assert "found duplicate key 'prompt'" in error and "line 6" in error


def test_unsafe_yaml_tags_are_refused() -> None:
    assert only_error("name: !!python/object/apply:os.system ['true']\n").startswith(
        "spec is not valid YAML: could not determine a constructor"
    )


def test_absurd_nesting_is_a_yaml_error_not_a_crash() -> None:
    assert only_error("name: " + "[" * 50000) == "spec is not valid YAML: it is nested too deeply"


def test_error_list_is_capped_so_a_hostile_spec_cannot_flood_the_response() -> None:
    text = "name: d\n" + "".join(f"k{n}: 1\n" for n in range(80)) + spec_with(STEP.format(id="a"), head="")
    errors = errors_of(text)
    assert len(errors) == MAX_REPORTED_ERRORS + 1
    assert errors[0].startswith("unknown field 'k0' at the root")
    assert errors[-1] == f"... and {80 - MAX_REPORTED_ERRORS} more problems"


@pytest.mark.timeout(60)
def test_template_scanning_stays_linear_on_pathological_prompts() -> None:
    # A lazy `{{(.*?)}}` regex took minutes here: it rescanned to the end from every `{{`. The
    # deadline above fails such a regression; the time this takes is bench/workflow_bench.py's
    # "validate a spec whose prompt is 100,000 `{{`".
    error = only_error(spec_with('id: a\nagent: a\nprompt: "' + "{{" * 100_000 + '"'))
    assert error.endswith("(no closing '}}')") and len(error) < 300


def test_alias_bombs_are_never_expanded_into_messages() -> None:
    # 9**10 leaves if anything str()-ed it; messages must name the kind instead.
    bomb = "l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 10)
    )
    errors = errors_of(bomb + "name: *l9\nmode: *l9\nsteps: [{id: a, agent: a, prompt: p}]\n")
    assert "name must be 1-64 letters, digits, '_' or '-', not a list" in errors
    assert "mode must be one of sequential, parallel, pipeline, loop, not a list" in errors
    assert sum(len(e) for e in errors) < 2000


def test_non_text_input_fails_instead_of_raising() -> None:
    assert validate_spec(None)["errors"] == ["spec must be text, not NoneType"]  # type: ignore[arg-type]


# --- root fields ---------------------------------------------------------------------


def test_missing_name_and_missing_steps() -> None:
    assert errors_of("description: hi\n") == ["name is required", f"steps is required: a list of 1..{MAX_STEPS} steps"]


@pytest.mark.parametrize("bad", ["'has space'", "'x/y'", "''", "123", "'" + "a" * 65 + "'", '"ok\\n"'])
def test_name_must_match_the_name_pattern(bad: str) -> None:
    result = validate_spec(spec_with(STEP.format(id="a"), head=f"name: {bad}\n"))
    assert result["status"] == "fail" and result["name"] is None
    assert len(result["errors"]) == 1
    assert result["errors"][0].startswith("name must be 1-64 letters, digits, '_' or '-', not ")


def test_unknown_root_key_is_named() -> None:
    assert only_error(spec_with(STEP.format(id="a"), head="name: d\nversion: 2\n")) == (
        "unknown field 'version' at the root (allowed: name, description, mode, inputs, steps)"
    )


def test_description_and_mode_values() -> None:
    assert only_error(spec_with(STEP.format(id="a"), head="name: d\ndescription: [x]\n")) == (
        "description must be a string, not a list"
    )
    assert only_error(spec_with(STEP.format(id="a"), head="name: d\nmode: batch\n")) == (
        "mode must be one of sequential, parallel, pipeline, loop, not 'batch'"
    )


def test_inputs_block_is_checked_by_the_shared_declaration_rules() -> None:
    assert only_error(spec_with(STEP.format(id="a"), head="name: d\ninputs: [pr]\n")).startswith(
        "inputs must be a mapping of input name to {type, required, default}, not a list"
    )
    assert only_error(spec_with(STEP.format(id="a"), head="name: d\ninputs:\n  pr: {type: str}\n")) == (
        "inputs: input 'pr': type must be one of string, int, bool, path"
    )
    assert only_error(spec_with(STEP.format(id="a"), head="name: d\ninputs:\n  n: {type: int, default: x}\n")) == (
        "inputs: input 'n': default must be of type int, got string"
    )
    many = "".join(f"  i{n}: {{type: string}}\n" for n in range(65))
    assert only_error(spec_with(STEP.format(id="a"), head="name: d\ninputs:\n" + many)) == (
        "inputs: a workflow declares at most 64 inputs, not 65"
    )


@pytest.mark.parametrize(
    "steps, error",
    [
        ("steps: []\n", "steps must list at least one step"),
        ("steps: {a: 1}\n", "steps must be a list, not a mapping"),
        ("steps:\n", f"steps is required: a list of 1..{MAX_STEPS} steps"),
    ],
)
def test_steps_must_be_a_non_empty_list(steps: str, error: str) -> None:
    assert only_error("name: d\n" + steps) == error


def test_at_most_100_steps() -> None:
    assert validate_spec(spec_with(*(STEP.format(id=f"s{n}") for n in range(MAX_STEPS))))["status"] == "pass"
    assert only_error(spec_with(*(STEP.format(id=f"s{n}") for n in range(MAX_STEPS + 1)))) == (
        "a spec has at most 100 steps, not 101"
    )


# --- step fields ---------------------------------------------------------------------


def test_step_must_be_a_mapping() -> None:
    assert only_error("name: d\nsteps:\n  - just a string\n") == (
        "steps[0] must be a mapping (id, agent, prompt, ...), not a string"
    )


@pytest.mark.parametrize(
    "bad, error",
    [
        ("", "steps[0]: id is required"),
        ("id: 'a b'", "steps[0]: id must be 1-64 letters, digits, '_' or '-', not 'a b'"),
        ("id: 7", "steps[0]: id must be 1-64 letters, digits, '_' or '-', not '7'"),
        ("id: " + "x" * 65, "steps[0]: id must be 1-64 letters, digits, '_' or '-', not '" + "x" * 65 + "'"),
    ],
)
def test_step_id_is_required_and_must_match_the_name_pattern(bad: str, error: str) -> None:
    assert only_error(spec_with(bad + "\nagent: a\nprompt: p")) == error


def test_duplicate_step_ids_name_the_first_use() -> None:
    assert only_error(spec_with(STEP.format(id="a"), STEP.format(id="b"), STEP.format(id="a"))) == (
        "steps[2] (id 'a'): duplicate step id 'a' (first used by steps[0])"
    )


def test_unknown_step_key_is_named_with_its_step() -> None:
    error = only_error(spec_with(STEP.format(id="a"), STEP.format(id="review") + "\nretry: 2"))
    assert error.startswith("steps[1] (id 'review'): unknown field 'retry' (allowed: id, provider,")
    assert "output_schema" in error


@pytest.mark.parametrize(
    "field, error",
    [
        ("agent: ''", "agent must be a non-empty string of at most 64 characters"),
        ("agent: " + "a" * 65, "agent must be a non-empty string of at most 64 characters"),
        ("agent: [a]", "agent must be a non-empty string of at most 64 characters"),
        ("prompt: '   '", "prompt must be a non-empty string"),
        ("prompt: 5", "prompt must be a non-empty string"),
        ("provider: 3", "provider must be a non-empty string when given"),
        ("model: ''", "model must be a non-empty string when given"),
    ],
)
def test_agent_prompt_provider_and_model_types(field: str, error: str) -> None:
    key = field.split(":")[0]
    step = {"id": "id: x", "agent": "agent: a", "prompt": "prompt: p", key: field}
    assert only_error(spec_with("\n".join(step.values()))) == f"steps[0] (id 'x'): {error}"


@pytest.mark.parametrize("value", ["true", "false", "-1", "11", "2.5", "'3'"])
def test_retries_must_be_an_integer_0_to_10_and_not_a_bool(value: str) -> None:
    assert only_error(spec_with(STEP.format(id="review") + f"\nretries: {value}")) == (
        "steps[0] (id 'review'): retries must be an integer 0..10"
    )


@pytest.mark.parametrize("value", ["0", "10"])
def test_retries_bounds_are_inclusive(value: str) -> None:
    assert parse_spec(spec_with(STEP.format(id="a") + f"\nretries: {value}")).steps[0].retries == int(value)


def test_on_failure_must_be_halt_or_continue() -> None:
    assert only_error(spec_with(STEP.format(id="a") + "\non_failure: retry")) == (
        "steps[0] (id 'a'): on_failure must be halt or continue, not 'retry'"
    )


@pytest.mark.parametrize("value", ["0", "-5", "86401", "true", "'60'", ".nan", ".inf"])
def test_timeout_must_be_a_positive_number_up_to_a_day(value: str) -> None:
    assert only_error(spec_with(STEP.format(id="a") + f"\ntimeout: {value}")) == (
        "steps[0] (id 'a'): timeout must be a number of seconds above 0 and at most 86400"
    )


def test_timeout_accepts_floats_and_the_upper_bound() -> None:
    assert parse_spec(spec_with(STEP.format(id="a") + "\ntimeout: 0.5")).steps[0].timeout == 0.5
    assert parse_spec(spec_with(STEP.format(id="a") + "\ntimeout: 86400")).steps[0].timeout == 86400.0


def test_engine_must_be_v2_or_kas() -> None:
    assert parse_spec(spec_with(STEP.format(id="a") + "\nengine: v2")).steps[0].engine == "v2"
    assert only_error(spec_with(STEP.format(id="a") + "\nengine: v3")) == (
        "steps[0] (id 'a'): engine must be v2 or kas, not 'v3'"
    )


# --- loop guards ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, missing",
    [
        ("until: done", "max_iterations, on_stall, on_no_progress"),
        ("max_iterations: 5", "on_stall, on_no_progress"),
        ("until: done\nmax_iterations: 5\non_stall: halt", "on_no_progress"),
        ("on_no_progress: halt", "max_iterations, on_stall"),
    ],
)
def test_a_loop_step_must_declare_all_three_guards(fields: str, missing: str) -> None:
    assert only_error(spec_with(STEP.format(id="loop") + "\n" + fields)) == (
        "steps[0] (id 'loop'): a loop step must declare all of max_iterations, on_stall, "
        f"on_no_progress; missing {missing}"
    )


def test_a_fully_guarded_loop_step_validates_as_reserved() -> None:
    text = spec_with(STEP.format(id="loop") + "\nuntil: done\nmax_iterations: 5\non_stall: halt\non_no_progress: halt")
    result = validate_spec(text)
    assert result["status"] == "pass_reserved" and result["errors"] == []
    assert parse_spec(text).reserved == ("until", "max_iterations", "on_stall", "on_no_progress")


# --- every error at once -------------------------------------------------------------


def test_all_errors_are_collected_and_joined() -> None:
    text = spec_with(
        "id: a\nagent: a\nprompt: p\nretries: true",
        "id: a\nagent: ''\nprompt: p\non_failure: stop",
        head="name: bad name\ncolour: red\n",
    )
    expected = [
        "unknown field 'colour' at the root (allowed: name, description, mode, inputs, steps)",
        "name must be 1-64 letters, digits, '_' or '-', not 'bad name'",
        "steps[0] (id 'a'): retries must be an integer 0..10",
        "steps[1] (id 'a'): duplicate step id 'a' (first used by steps[0])",
        "steps[1] (id 'a'): agent must be a non-empty string of at most 64 characters",
        "steps[1] (id 'a'): on_failure must be halt or continue, not 'stop'",
    ]
    assert validate_spec(text)["errors"] == expected
    with pytest.raises(SpecError) as caught:
        parse_spec(text)
    assert str(caught.value) == "; ".join(expected)
    assert caught.value.errors == expected


# --- reserved constructs -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["parallel", "pipeline", "loop"])
def test_reserved_mode_validates_but_does_not_run(mode: str) -> None:
    text = spec_with(STEP.format(id="a"), head=f"name: d\nmode: {mode}\n")
    assert validate_spec(text) == {
        "status": "pass_reserved",
        "errors": [],
        "tier": "yaml",
        "name": "d",
        "reserved_notes": [
            f"construct 'mode: {mode}' is reserved (not built yet; a spec using it validates but does not run)"
        ],
    }
    spec = parse_spec(text)
    assert spec.mode == mode and spec.reserved == (f"mode: {mode}",)
    assert runnable_problem(spec) == (f"mode '{mode}' is reserved and cannot run yet; only 'sequential' runs")


def test_reserved_step_fields_are_listed_once_in_order_and_refused_at_run_time() -> None:
    text = spec_with(
        STEP.format(id="a"),
        STEP.format(id="b") + "\nwhen: x\nuntil: done\nmax_iterations: 3\non_stall: halt\non_no_progress: halt",
        STEP.format(id="c") + "\nwhen: y\noutput_schema: {type: object}",
        head="name: d\nmode: sequential\n",
    )
    result = validate_spec(text)
    assert result["status"] == "pass_reserved"
    assert result["reserved_notes"] == [
        f"construct '{name}' is reserved (not built yet; a spec using it validates but does not run)"
        for name in ("when", "until", "max_iterations", "on_stall", "on_no_progress")
    ]
    spec = parse_spec(text)
    assert spec.reserved == ("when", "until", "max_iterations", "on_stall", "on_no_progress")
    assert dict(spec.steps[2].reserved) == {"when": "y"}
    assert spec.steps[0].reserved == {}
    # output_schema is built: a field of the step, not a reserved construct.
    assert spec.steps[2].output_schema == {"type": "object"} and spec.steps[0].output_schema is None
    assert runnable_problem(spec) == (
        "step 'b' uses reserved field 'when', which is not built yet; remove it to run this spec"
    )


def test_reserved_mode_is_reported_before_reserved_fields() -> None:
    spec = parse_spec(spec_with(STEP.format(id="a") + "\nwhen: x", head="name: d\nmode: parallel\n"))
    assert spec.reserved == ("mode: parallel", "when")
    assert runnable_problem(spec).startswith("mode 'parallel' is reserved")  # type: ignore[union-attr]


def test_a_failing_spec_still_reports_reserved_notes_but_fails() -> None:
    result = validate_spec(spec_with(STEP.format(id="a") + "\nwhen: x\nretries: 99", head="name: d\nmode: loop\n"))
    assert result["status"] == "fail" and len(result["reserved_notes"]) == 2


# --- static template checks ----------------------------------------------------------


def test_template_references_lists_each_reference_once_in_order() -> None:
    template = "{{ workflow.inputs.x }} {{steps.a.output.f}} {{  steps.a.output  }} {{ workflow.inputs.x }}"
    assert template_references(template) == [
        ("workflow", "inputs", "x"),
        ("steps", "a", "output", "f"),
        ("steps", "a", "output"),
    ]
    assert template_references("no templates { here } }}") == []


@pytest.mark.parametrize(
    "expression",
    [
        "{{ workflow.inputs.x | upper }}",
        "{{ env.HOME }}",
        "{{ steps.a }}",
        "{{ steps.a.result }}",
        "{{ steps.a.output.f.g }}",
        "{{ workflow.inputs }}",
        "{{ }}",
        "{{ workflow.inputs.x\n}} {{ a",
    ],
)
def test_template_references_refuses_unsupported_expressions(expression: str) -> None:
    with pytest.raises(TemplateError, match="unsupported template expression"):
        template_references(expression)


def test_prompt_may_not_reference_an_undeclared_input() -> None:
    text = spec_with(
        "id: a\nagent: a\nprompt: 'Fix {{ workflow.inputs.issue }}'", head="name: d\ninputs:\n  pr: {type: string}\n"
    )
    assert only_error(text) == "steps[0] (id 'a'): prompt references undeclared input 'issue'"


def test_input_references_are_not_second_guessed_when_the_inputs_block_is_broken() -> None:
    text = spec_with(
        "id: a\nagent: a\nprompt: '{{ workflow.inputs.pr }}'", head="name: d\ninputs:\n  pr: {type: nope}\n"
    )
    assert only_error(text).startswith("inputs: input 'pr'")


def test_prompt_may_reference_only_earlier_steps() -> None:
    text = spec_with(
        "id: first\nagent: a\nprompt: 'after {{ steps.second.output }}'",
        "id: second\nagent: a\nprompt: 'me: {{ steps.second.output.x }}'",
        "id: third\nagent: a\nprompt: '{{ steps.first.output }} {{ steps.ghost.output }}'",
    )
    assert errors_of(text) == [
        "steps[0] (id 'first'): prompt references step 'second', which does not run before this step",
        "steps[1] (id 'second'): prompt references step 'second', which does not run before this step",
        "steps[2] (id 'third'): prompt references unknown step 'ghost'",
    ]


def test_prompt_with_an_unknown_root_or_filter_is_a_grammar_error() -> None:
    text = spec_with("id: a\nagent: a\nprompt: '{{ env.HOME }} and {{ x | upper }}'")
    errors = errors_of(text)
    assert [e.split(" (use ")[0] for e in errors] == [
        "steps[0] (id 'a'): unsupported template expression '{{ env.HOME }}'",
        "steps[0] (id 'a'): unsupported template expression '{{ x | upper }}'",
    ]
    assert all("{{ workflow.inputs.<name> }}" in e for e in errors)


def test_unclosed_template_is_a_grammar_error() -> None:
    assert only_error(spec_with("id: a\nagent: a\nprompt: 'see {{ workflow.inputs.x'")) == (
        "steps[0] (id 'a'): unsupported template expression '{{ workflow.inputs.x' (no closing '}}')"
    )


# --- rendering -----------------------------------------------------------------------


def test_render_substitutes_inputs_and_outputs() -> None:
    outputs = {
        "plan": {"risk": "high", "files": ["a.py"], "count": 2, "ok": True, "none": None},
        "text": "plain words",
        "raw": '{"risk": "low", "nested": {"k": 1}}',
        "list": [1, "x"],
    }
    inputs = {"pr": "42", "n": 7, "strict": True, "lax": False}
    template = (
        "pr={{ workflow.inputs.pr }} n={{workflow.inputs.n}} "
        "strict={{ workflow.inputs.strict }} lax={{ workflow.inputs.lax }} | "
        "{{ steps.text.output }} | {{ steps.plan.output }} | {{ steps.list.output }} | "
        "{{ steps.plan.output.risk }} {{ steps.plan.output.files }} "
        "{{ steps.plan.output.count }} {{ steps.plan.output.ok }} {{ steps.plan.output.none }} | "
        "{{ steps.raw.output.risk }} {{ steps.raw.output.nested }}"
    )
    assert render(template, inputs, outputs) == (
        "pr=42 n=7 strict=true lax=false | plain words | "
        '{"risk":"high","files":["a.py"],"count":2,"ok":true,"none":null} | [1,"x"] | '
        'high ["a.py"] 2 true null | low {"k":1}'
    )


def test_render_does_not_expand_templates_inside_substituted_values() -> None:
    assert (
        render("{{ steps.a.output }}", {"secret": "s3"}, {"a": "{{ workflow.inputs.secret }}"})
        == "{{ workflow.inputs.secret }}"
    )


def test_render_leaves_text_without_templates_alone() -> None:
    assert render("plain { braces } and }}", {}, {}) == "plain { braces } and }}"


@pytest.mark.parametrize(
    "template, outputs, message",
    [
        ("{{ workflow.inputs.missing }}", {}, "input 'missing' has no value (not supplied and no default)"),
        ("{{ steps.later.output }}", {}, "step 'later' has no output to render (it has not run, or it failed)"),
        (
            "{{ steps.a.output.f }}",
            {"a": "not json"},
            "{{ steps.a.output.f }} needs step 'a' to output a JSON object, and its output is not one",
        ),
        (
            "{{ steps.a.output.f }}",
            {"a": "[1, 2]"},
            "{{ steps.a.output.f }} needs step 'a' to output a JSON object, and its output is not one",
        ),
        (
            "{{ steps.a.output.f }}",
            {"a": ["f"]},
            "{{ steps.a.output.f }} needs step 'a' to output a JSON object, and its output is not one",
        ),
        ("{{ steps.a.output.f }}", {"a": {"g": 1, "h": 2}}, "step 'a' output has no field 'f' (its fields: g, h)"),
        ("{{ steps.a.output.f }}", {"a": '{"g": 1}'}, "step 'a' output has no field 'f' (its fields: g)"),
    ],
)
def test_render_errors_say_what_is_missing(template: str, outputs: dict, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render(template, {}, outputs)
    assert str(caught.value) == message
    assert isinstance(caught.value, InvalidInput)


def test_render_refuses_unsupported_expressions_before_substituting() -> None:
    with pytest.raises(TemplateError, match=r"unsupported template expression '\{\{ env.HOME \}\}'"):
        render("{{ workflow.inputs.x }} {{ env.HOME }}", {"x": 1}, {})
