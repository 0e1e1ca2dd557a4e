"""Static linter for workflow scripts (`cao workflow validate` on a .py, and the run gate).

It reads the AST only — the script is never imported or executed. Its rules mirror, one to
one, the "Rules for a resumable script" table in the `cao_workflow` docstring; a test pins
the two together. Any error-severity finding fails the script (and blocks a run).
This module holds the rule table and turns facts into findings; `lint_names` (what names
mean) and `lint_steps` (where step calls are, on which thread) read those facts.

Limits, on purpose (a linter that guesses is worse than one that says what it checks):
- Names are resolved per file, not per scope: `step` is the shim's `step` if it is imported
  from cao_workflow, or if the script binds no other `step` at all.
- Thread context (`unstable-step-id`) is found from calls handed to `.submit`/`.map`-style
  pool methods, `Thread`/`Timer` targets, `asyncio.to_thread`, `run_in_executor`, `run`
  methods of Thread subclasses, and functions those call by plain name or `self.name` —
  matched by name only. Threads started some other way, or a `step_id` hidden in `**kwargs`,
  are not seen.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .lint_names import ScriptNames, call_keyword
from .lint_steps import StepScanner, StepUse

SERVER_PACKAGE = "cli_agent_orchestrator"
# Modules whose values differ between two runs of the same script (RNG, ids, the clock).
NONDETERMINISTIC_MODULES = frozenset({"random", "secrets", "uuid", "time", "datetime"})

# rule id → severity, in report order for findings on the same line.
RULES: dict[str, str] = {
    "syntax": "error",
    "disallowed-import": "error",
    "dynamic-import": "warning",
    "nondeterminism": "warning",
    "missing-recovery-policy": "error",
    "unverifiable-recovery-policy": "warning",
    "unenforced-recovery-policy": "warning",
    "unstable-step-id": "warning",
}


@dataclass(frozen=True)
class Finding:
    rule_id: str
    line: int
    message: str

    @property
    def severity(self) -> str:
        return RULES[self.rule_id]

    def as_dict(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "severity": self.severity, "line": self.line, "message": self.message}


def lint_script(source: str | bytes) -> dict[str, Any]:
    """Lint a workflow script's source; returns the script-tier validation result."""
    return build_result(find_problems(source))


def build_result(findings: Iterable[Finding]) -> dict[str, Any]:
    ordered = sorted(findings, key=lambda f: (f.line, list(RULES).index(f.rule_id), f.message))
    errors = [f"line {f.line}: [{f.rule_id}] {f.message}" for f in ordered if f.severity == "error"]
    return {
        "status": "fail" if errors else "pass",
        "reserved_notes": [],
        "errors": errors,
        "tier": "script",
        "findings": [f.as_dict() for f in ordered],
    }


def find_problems(source: str | bytes) -> list[Finding]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings are the interpreter's business
            tree = ast.parse(source, filename="<workflow script>")
    except SyntaxError as exc:
        return [Finding("syntax", exc.lineno or 1, exc.msg)]
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
        return [Finding("syntax", 1, f"source cannot be parsed: {exc or type(exc).__name__}")]
    names = ScriptNames.collect(tree)
    findings = _import_findings(tree, names)
    for use in StepScanner(tree, names).uses():
        findings.extend(_step_findings(use))
    return findings


def _module_findings(module: str, line: int, how: str) -> list[Finding]:
    top = module.split(".")[0]
    if top == SERVER_PACKAGE:
        return [
            Finding(
                "disallowed-import",
                line,
                f"{how} {module!r}: a workflow script must not import the server package; "
                "talk to the server through cao_workflow (HTTP)",
            )
        ]
    if top in NONDETERMINISTIC_MODULES:
        return [
            Finding(
                "nondeterminism",
                line,
                f"{how} {module!r}: its values (random numbers, ids, the clock) differ between "
                "runs, so a resume can diverge if they reach a prompt, a step id or a branch; "
                "derive them from get_inputs() or earlier step outputs",
            )
        ]
    return []


def _import_findings(tree: ast.AST, names: ScriptNames) -> list[Finding]:
    findings: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                findings += _module_findings(alias.name, node.lineno, "imports")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            findings += _module_findings(node.module, node.lineno, "imports from")
        elif isinstance(node, ast.Call) and (shown := names.dynamic_import_name(node.func)):
            findings += _dynamic_import_findings(node, shown)
    return findings


def _dynamic_import_findings(call: ast.Call, shown: str) -> list[Finding]:
    module = call.args[0] if call.args else call_keyword(call, "name")
    if module is None:
        return []
    package = call_keyword(call, "package")
    if isinstance(module, ast.Constant) and isinstance(module.value, str):
        if not module.value.startswith("."):
            return _module_findings(module.value, call.lineno, f"{shown}() imports")
        # relative name: what it reaches depends on package=
        if isinstance(package, ast.Constant) and isinstance(package.value, str):
            return _module_findings(package.value, call.lineno, f"{shown}() imports from package")
    return [
        Finding(
            "dynamic-import",
            call.lineno,
            f"{shown}() with a computed module name cannot be checked for disallowed or "
            "nondeterministic imports; use a plain import statement",
        )
    ]


def _step_findings(use: StepUse) -> list[Finding]:
    findings: list[Finding] = []
    if use.function == "step" and "recovery" not in use.keywords:
        if use.has_double_star:
            findings.append(
                Finding(
                    "unverifiable-recovery-policy",
                    use.line,
                    f"{use.shown_as}(...) passes ** keyword arguments and no explicit recovery=, so its "
                    "recovery policy cannot be checked; write recovery= at the call",
                )
            )
        else:
            findings.append(
                Finding(
                    "missing-recovery-policy",
                    use.line,
                    f'{use.shown_as}(...) declares no recovery policy; pass recovery="idempotent", '
                    '"reconcile" or "manual", or call run_step() to declare none',
                )
            )
    if use.function == "run_step" and "recovery" in use.keywords:
        findings.append(
            Finding(
                "unenforced-recovery-policy",
                use.line,
                f"{use.shown_as}(...) passes recovery=, which run_step() does not check: a bad value "
                "fails this step mid-run (422); declare policies with step(..., recovery=...)",
            )
        )
    if use.thread_context and "step_id" not in use.keywords and not use.has_double_star:
        findings.append(
            Finding(
                "unstable-step-id",
                use.line,
                f"{use.shown_as}(...) runs {use.thread_context} without an explicit step_id; the default "
                "call-N key then follows thread scheduling and a resume can replay another call's "
                "result; pass a stable step_id= per call",
            )
        )
    return findings
