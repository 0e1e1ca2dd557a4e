"""The workflow-script linter (every rule, both ways) and run-input declarations."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import cao_workflow
from cli_agent_orchestrator.errors import InvalidInput
from cli_agent_orchestrator.workflows.inputs import (
    MAX_INPUTS_BYTES,
    InputError,
    coerce_cli_value,
    read_inputs_declaration,
    validate_inputs,
)
from cli_agent_orchestrator.workflows.lint import RULES, lint_script


def lint(source: str) -> dict:
    return lint_script(textwrap.dedent(source))


def rules(source: str) -> list[tuple[str, int]]:
    return [(f["rule_id"], f["line"]) for f in lint(source)["findings"]]


def rule_ids(source: str) -> set[str]:
    return {rule for rule, _ in rules(source)}


# --- result shape ------------------------------------------------------------------


def test_clean_script_passes_with_the_script_tier_shape() -> None:
    result = lint("""\
        from cao_workflow import step, run_step, emit_output, get_inputs
        inputs = get_inputs()
        review = step("kiro_cli", "reviewer", f"review {inputs['pr']}", recovery="idempotent")
        run_step("kiro_cli", "writer", review.output, step_id="summary")
        emit_output({"ok": True})
        """)
    assert result == {"status": "pass", "reserved_notes": [], "errors": [], "tier": "script", "findings": []}


def test_warnings_alone_pass_and_errors_are_listed_as_lines() -> None:
    result = lint("""\
        import random
        from cao_workflow import step
        step("kiro_cli", "reviewer", "x")
        """)
    assert result["status"] == "fail"
    assert result["errors"] == [f"line 3: [missing-recovery-policy] {result['findings'][1]['message']}"]
    assert result["findings"][0] == {
        "rule_id": "nondeterminism",
        "severity": "warning",
        "line": 1,
        "message": result["findings"][0]["message"],
    }
    assert lint("import random\n")["status"] == "pass"


def test_findings_are_ordered_by_line() -> None:
    found = rules("""\
        from cao_workflow import step
        step("p", "a", "x")
        import uuid
        import cli_agent_orchestrator
        """)
    assert found == [("missing-recovery-policy", 2), ("nondeterminism", 3), ("disallowed-import", 4)]


def test_linting_never_executes_the_script(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = lint_script(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n")
    assert result["status"] == "pass" and not marker.exists()


def test_rules_mirror_the_shims_determinism_table_one_to_one() -> None:
    table = re.findall(r"^\|.*\| `([a-z-]+)` \((error|warning)\) \|$", cao_workflow.__doc__ or "", re.M)
    assert dict(table) == RULES
    assert len(table) == len(RULES)  # one row per rule, none twice


# --- syntax ------------------------------------------------------------------------


def test_syntax_error_is_the_only_finding() -> None:
    result = lint("import cli_agent_orchestrator\nstep('p', 'a', 'x')\ndef broken(:\n")
    assert [(f["rule_id"], f["severity"], f["line"]) for f in result["findings"]] == [("syntax", "error", 3)]
    assert result["status"] == "fail" and result["errors"][0].startswith("line 3: [syntax] ")


def test_nul_byte_is_a_syntax_finding() -> None:
    assert rule_ids("x = 1\0\n") == {"syntax"}


# --- imports -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import cli_agent_orchestrator",
        "import cli_agent_orchestrator.models as m",
        "from cli_agent_orchestrator.services import orchestration",
        "def f():\n    from cli_agent_orchestrator import errors",
        "import importlib\nimportlib.import_module('cli_agent_orchestrator.api')",
        "import importlib as il\nil.import_module('cli_agent_orchestrator')",
        "from importlib import import_module as load\nload('cli_agent_orchestrator')",
        "__import__('cli_agent_orchestrator.store')",
        "import builtins\nbuiltins.__import__('cli_agent_orchestrator')",
        "import importlib\nimportlib.import_module('.models', package='cli_agent_orchestrator')",
    ],
)
def test_disallowed_import(source: str) -> None:
    result = lint(source)
    assert rule_ids(source) == {"disallowed-import"}
    assert result["status"] == "fail"


@pytest.mark.parametrize(
    "source",
    [
        "import cao_workflow",
        "import cli_agent_orchestrator_tools",
        "from . import helpers",
        "import importlib\nimportlib.import_module('json')",
        "import json, os.path",
    ],
)
def test_allowed_imports(source: str) -> None:
    assert rules(source) == []


@pytest.mark.parametrize(
    "source",
    [
        "__import__(name)",
        "import importlib\nimportlib.import_module(f'plugins.{name}')",
        "from importlib import import_module\nimport_module('cli_' + 'agent_orchestrator')",
        "import importlib\nimportlib.import_module(name='x' + y)",
        "import importlib\nimportlib.import_module('.x', package=pkg)",
    ],
)
def test_dynamic_import_with_a_computed_name_is_a_warning(source: str) -> None:
    assert rules(source) == [("dynamic-import", source.count("\n") + 1)]
    assert lint(source)["status"] == "pass"


@pytest.mark.parametrize("module", sorted(["random", "secrets", "uuid", "time", "datetime"]))
@pytest.mark.parametrize(
    "form",
    [
        "import {m}",
        "import {m} as alias",
        "from {m} import thing",
        "import os, {m}",
        "def f():\n    import {m}",
        "import importlib\nimportlib.import_module('{m}')",
    ],
)
def test_nondeterminism(module: str, form: str) -> None:
    source = form.format(m=module)
    assert rule_ids(source) == {"nondeterminism"}
    assert module in lint(source)["findings"][0]["message"]


@pytest.mark.parametrize(
    "source",
    ["import randomizer", "import timeit", "from os import path", "import json", "from my_time import datetime"],
)
def test_no_nondeterminism_for_lookalikes(source: str) -> None:
    assert rules(source) == []


# --- recovery policies --------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "from cao_workflow import step\nstep('p', 'a', 'x')",
        "from cao_workflow import *\nstep('p', 'a', 'x', step_id='k')",
        "import cao_workflow\ncao_workflow.step('p', 'a', 'x')",
        "import cao_workflow as cw\ncw.step('p', 'a', 'x', timeout=5)",
        "from cao_workflow import step as declare\ndeclare('p', 'a', 'x')",
        "from cao_workflow import step\nstep(*args)",
    ],
)
def test_missing_recovery_policy(source: str) -> None:
    assert rules(source) == [("missing-recovery-policy", 2)]
    assert lint(source)["status"] == "fail"


@pytest.mark.parametrize(
    "source",
    [
        "from cao_workflow import step\nstep('p', 'a', 'x', recovery='manual')",
        "from cao_workflow import step\nstep('p', 'a', 'x', recovery=policy)",  # value not checked
        "from cao_workflow import step\nstep('p', 'a', 'x', recovery='idempotant')",
        "from cao_workflow import run_step\nrun_step('p', 'a', 'x')",
        "def step(n):\n    return n\nstep(3)",  # the script's own step()
        "optimizer.step()",
        "import cao_workflow\nother.step('p', 'a', 'x')",
    ],
)
def test_no_missing_recovery_policy(source: str) -> None:
    assert rules(source) == []


def test_step_mapped_over_a_pool_cannot_receive_recovery() -> None:
    found = rules("""\
        from cao_workflow import step
        pool.map(step, prompts)
        """)
    assert ("missing-recovery-policy", 2) in found


def test_unverifiable_recovery_policy() -> None:
    source = "from cao_workflow import step\nstep('p', 'a', 'x', **opts)"
    assert rules(source) == [("unverifiable-recovery-policy", 2)]
    assert lint(source)["status"] == "pass"
    assert rules("from cao_workflow import step\nstep('p', 'a', 'x', recovery='manual', **opts)") == []


@pytest.mark.parametrize(
    "source",
    [
        "from cao_workflow import run_step\nrun_step('p', 'a', 'x', recovery='manual')",
        "import cao_workflow as cw\ncw.run_step('p', 'a', 'x', recovery=policy)",
    ],
)
def test_unenforced_recovery_policy(source: str) -> None:
    assert rules(source) == [("unenforced-recovery-policy", 2)]
    assert lint(source)["status"] == "pass"


# --- unstable-step-id ---------------------------------------------------------------

FANOUT_POSITIVE = {
    "submitted function": """\
        from concurrent.futures import ThreadPoolExecutor
        from cao_workflow import run_step
        def review(shard):
            return run_step("p", "a", f"review {shard}")
        with ThreadPoolExecutor() as pool:
            futures = [pool.submit(review, s) for s in ("alpha", "beta")]
        """,
    "helper called from a submitted function": """\
        from cao_workflow import run_step
        def review(shard):
            return helper(shard)
        def helper(shard):
            return run_step("p", "a", shard)
        pool.submit(review, "alpha")
        """,
    "lambda": """\
        import cao_workflow
        pool.submit(lambda: cao_workflow.run_step("p", "a", "x"))
        """,
    "shim function submitted directly": """\
        from cao_workflow import step
        pool.submit(step, "p", "a", "x", recovery="manual")
        """,
    "map": """\
        from cao_workflow import run_step
        def review(shard):
            return run_step("p", "a", shard)
        results = list(pool.map(review, shards))
        """,
    "Thread target": """\
        import threading
        from cao_workflow import run_step
        def review():
            run_step("p", "a", "x")
        threading.Thread(target=review).start()
        """,
    "Thread positional target": """\
        from threading import Thread as T
        from cao_workflow import run_step
        T(None, run_step, args=("p", "a", "x")).start()
        """,
    "Timer": """\
        import threading
        from cao_workflow import run_step
        threading.Timer(1.0, run_step, args=("p", "a", "x")).start()
        """,
    "Thread subclass": """\
        import threading
        from cao_workflow import run_step
        class Worker(threading.Thread):
            def run(self):
                self.work()
            def work(self):
                run_step("p", "a", "x")
        """,
    "asyncio.to_thread": """\
        import asyncio
        from cao_workflow import run_step
        async def main():
            await asyncio.to_thread(run_step, "p", "a", "x")
        """,
    "run_in_executor": """\
        from cao_workflow import run_step
        async def main(loop):
            await loop.run_in_executor(None, run_step, "p", "a", "x")
        """,
    "partial": """\
        from functools import partial
        from cao_workflow import run_step
        pool.submit(partial(run_step, "p", "a"), "x")
        """,
    "step_id=None is the counter again": """\
        from cao_workflow import run_step
        def review(shard):
            return run_step("p", "a", shard, step_id=None)
        pool.submit(review, "alpha")
        """,
}


@pytest.mark.parametrize("name", FANOUT_POSITIVE)
def test_unstable_step_id_in_threads(name: str) -> None:
    result = lint(FANOUT_POSITIVE[name])
    unstable = [f for f in result["findings"] if f["rule_id"] == "unstable-step-id"]
    assert len(unstable) == 1, result["findings"]
    assert unstable[0]["severity"] == "warning" and "step_id" in unstable[0]["message"]
    assert result["status"] == "pass"


def test_unstable_step_id_points_at_the_step_call() -> None:
    found = rules(FANOUT_POSITIVE["submitted function"])
    assert found == [("unstable-step-id", 4)]


FANOUT_NEGATIVE = {
    "explicit step_id": """\
        from cao_workflow import run_step
        def review(shard):
            return run_step("p", "a", shard, step_id=f"shard-{shard}")
        pool.submit(review, "alpha")
        """,
    "explicit step_id through submit": """\
        from cao_workflow import step
        pool.submit(step, "p", "a", "x", recovery="manual", step_id="shard-x")
        """,
    "explicit step_id through Thread kwargs": """\
        import threading
        from cao_workflow import run_step
        threading.Thread(target=run_step, args=("p", "a", "x"), kwargs={"step_id": "k"}).start()
        """,
    "explicit step_id through partial": """\
        from functools import partial
        from cao_workflow import run_step
        pool.submit(partial(run_step, step_id="k"), "p", "a", "x")
        """,
    "step_id possibly in **kwargs": """\
        from cao_workflow import run_step
        def review(shard, **kw):
            return run_step("p", "a", shard, **kw)
        pool.submit(review, "alpha")
        """,
    "sequential loop": """\
        from cao_workflow import run_step
        def review(shard):
            return run_step("p", "a", shard)
        for s in shards:
            review(s)
        results = list(map(review, shards))
        """,
    "result of a main-thread call handed to a pool": """\
        from cao_workflow import run_step
        pool.submit(print, run_step("p", "a", "x"))
        """,
}


@pytest.mark.parametrize("name", FANOUT_NEGATIVE)
def test_no_unstable_step_id(name: str) -> None:
    assert "unstable-step-id" not in rule_ids(FANOUT_NEGATIVE[name])


# --- inputs declaration (§9) ---------------------------------------------------------


def test_inputs_declaration_absent_is_empty() -> None:
    assert read_inputs_declaration("from cao_workflow import get_inputs\n") == {}


def test_inputs_declaration_is_read_from_the_ast() -> None:
    source = textwrap.dedent("""\
        import sys
        if True:
            INPUTS = {"ignored": {"type": "string"}}   # not module level
        def f():
            INPUTS = {"ignored": {"type": "string"}}
        INPUTS: dict = {"repo": {"type": "path", "required": True},
                        "rounds": {"type": "int", "default": 2}, "dry": {"type": "bool"}}
        INPUTS = {"second": {"type": "string"}}  # first wins
        sys.exit(1)
        """)
    assert read_inputs_declaration(source) == {
        "repo": {"type": "path", "required": True},
        "rounds": {"type": "int", "default": 2},
        "dry": {"type": "bool"},
    }


@pytest.mark.parametrize(
    "value", ['{"a": {"type": STRING}}', 'dict(a={"type": "string"})', '{"a": {"type": f"str{x}"}}', "{**base}"]
)
def test_non_literal_inputs_declaration_is_a_clear_error(value: str) -> None:
    with pytest.raises(InputError, match=r"INPUTS \(line 2\) must be a literal dict"):
        read_inputs_declaration(f"import os\nINPUTS = {value}\n")


@pytest.mark.parametrize(
    "value, message",
    [
        ('["a"]', "INPUTS must be a dict"),
        ('{"a": "string"}', "input 'a': its declaration must be a dict"),
        ('{"a": {"type": "float"}}', "input 'a': type must be one of string, int, bool, path"),
        ('{"a": {}}', "input 'a': type must be one of"),
        ('{"a": {"type": "int", "required": "yes"}}', "input 'a': required must be true or false"),
        ('{"a": {"type": "int", "default": True}}', "input 'a': default must be of type int, got bool"),
        ('{"a": {"type": "bool", "default": 0}}', "input 'a': default must be of type bool, got int"),
        ('{"a": {"type": "string", "help": "x"}}', "input 'a': unknown field 'help'"),
        ('{"": {"type": "string"}}', "input names must be non-empty strings"),
        ("{" + ", ".join(f'"i{n}": {{"type": "int"}}' for n in range(65)) + "}", "at most 64 inputs"),
    ],
)
def test_malformed_inputs_declaration(value: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        read_inputs_declaration(f"INPUTS = {value}\n")


def test_unparseable_script_has_no_readable_declaration() -> None:
    with pytest.raises(InputError, match="does not parse"):
        read_inputs_declaration("INPUTS = {\n")


# --- inputs validation (§9) ----------------------------------------------------------

DECLARED = {
    "tag": {"type": "string", "required": True},
    "rounds": {"type": "int", "default": 2},
    "dry": {"type": "bool"},
}


def test_supplied_else_default_else_omitted() -> None:
    assert validate_inputs(DECLARED, {"tag": "v1"}) == {"tag": "v1", "rounds": 2}
    assert validate_inputs(DECLARED, {"tag": "v1", "rounds": 5, "dry": False}) == {
        "tag": "v1",
        "rounds": 5,
        "dry": False,
    }
    assert validate_inputs({}, None) == {}


def test_input_errors_use_the_contract_messages_and_are_400s() -> None:
    with pytest.raises(InputError) as info:
        validate_inputs(DECLARED, {})
    assert str(info.value) == "missing required input 'tag'"
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidInput)
    assert info.value.http_status == 400
    with pytest.raises(InputError) as info:
        validate_inputs(DECLARED, {"tag": "v1", "colour": "red"})
    assert str(info.value) == "unknown input 'colour' (not declared by the workflow)"


@pytest.mark.parametrize(
    "name, value, got",
    [
        ("rounds", True, "bool"),
        ("rounds", "3", "string"),
        ("rounds", 2.5, "number"),
        ("dry", 1, "int"),
        ("dry", "true", "string"),
        ("tag", 123, "int"),
        ("tag", None, "null"),
    ],
)
def test_supplied_values_must_match_their_type(name: str, value: object, got: str) -> None:
    supplied = {"tag": "v1", name: value}
    with pytest.raises(
        InputError, match=re.escape(f"input '{name}' must be of type {DECLARED[name]['type']}, got {got}")
    ):
        validate_inputs(DECLARED, supplied)


def test_inputs_cap_counts_utf8_bytes_of_the_compact_json() -> None:
    declared = {"s": {"type": "string"}}
    room = MAX_INPUTS_BYTES - len('{"s":""}')
    assert validate_inputs(declared, {"s": "x" * room})
    with pytest.raises(InputError) as info:
        validate_inputs(declared, {"s": "x" * (room + 1)})
    assert str(info.value) == "workflow inputs exceed 32768 bytes"
    with pytest.raises(InputError, match="exceed"):
        validate_inputs(declared, {"s": "é" * (room // 2 + 1)})  # two bytes each


def test_path_input_is_made_absolute_and_canonical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(work)
    declared = {"repo": {"type": "path"}}
    canonical = str(work.resolve())
    assert validate_inputs(declared, {"repo": str(tmp_path / "link")}) == {"repo": canonical}
    assert validate_inputs(declared, {"repo": "work/sub/.."}, base_dir=tmp_path) == {"repo": canonical}
    monkeypatch.setenv("HOME", str(tmp_path))
    assert validate_inputs(declared, {"repo": "~/work"}) == {"repo": canonical}


def test_path_default_is_resolved_too(tmp_path: Path) -> None:
    declared = {"repo": {"type": "path", "default": str(tmp_path)}}
    assert validate_inputs(declared, {}) == {"repo": str(tmp_path.resolve())}


@pytest.mark.parametrize(
    "value, reason",
    [
        ("missing", "is not an existing directory"),
        ("afile", "is not an existing directory"),
        ("", "got an empty string"),
        ("/", "is the filesystem root"),
        ("/tmp", "is a system directory"),
        ("/usr/bin", "is a system directory"),
        ("/etc", "is a system directory"),
        ("/proc", "is a system directory"),
    ],
)
def test_path_input_rules(tmp_path: Path, value: str, reason: str) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match=re.escape(reason)):
        validate_inputs({"repo": {"type": "path"}}, {"repo": value}, base_dir=tmp_path)


def test_a_directory_inside_a_system_directory_is_allowed(tmp_path: Path) -> None:
    # tmp_path usually lives under /tmp: only the system directory itself is refused
    assert validate_inputs({"repo": {"type": "path"}}, {"repo": str(tmp_path)})


@pytest.mark.parametrize(
    "raw, declared_type, value",
    [
        ("true", None, True),
        ("FALSE", None, False),
        ("123", None, 123),
        ("-4", "int", -4),
        ("v1", None, "v1"),
        ("123", "string", "123"),
        ("true", "string", "true"),
        ("7", "path", "7"),
        ("True", "bool", True),
    ],
)
def test_cli_values_are_coerced_by_declared_type(raw: str, declared_type: str | None, value: object) -> None:
    assert coerce_cli_value(raw, declared_type) == value
    assert type(coerce_cli_value(raw, declared_type)) is type(value)
