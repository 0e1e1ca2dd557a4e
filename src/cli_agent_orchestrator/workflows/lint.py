"""Static linter for workflow scripts (`cao workflow validate` on a .py, and the run gate).

It reads the AST only — the script is never imported or executed. Its rules mirror, one to
one, the "Rules for a resumable script" table in the `cao_workflow` docstring; a test pins
the two together. Any error-severity finding fails the script (and blocks a run).

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
from dataclasses import dataclass
from typing import Any, Iterable

SERVER_PACKAGE = "cli_agent_orchestrator"
SHIM_PACKAGE = "cao_workflow"
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

# Pool methods whose first argument runs on a worker thread. `submit`-like ones forward their
# keyword arguments to it; `map`-like ones cannot pass keywords at all.
_SUBMIT_METHODS = frozenset({"submit"})
_MAP_METHODS = frozenset({"map", "starmap", "imap", "imap_unordered", "map_async", "starmap_async"})


@dataclass(frozen=True)
class Finding:
    rule_id: str
    line: int
    message: str

    @property
    def severity(self) -> str:
        return RULES[self.rule_id]

    def as_dict(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "severity": self.severity, "line": self.line,
                "message": self.message}


@dataclass(frozen=True)
class _StepUse:
    """One place a shim function gets called: a direct call, or the function handed to a pool."""

    function: str  # "step" | "run_step"
    shown_as: str  # as written in the script, for messages
    line: int
    keywords: frozenset[str]  # explicit keyword names it receives
    has_double_star: bool  # also receives **mapping (unknown keys)
    thread_context: str | None  # why we think it runs on a thread, or None

    @classmethod
    def build(cls, function: str, callee: ast.expr, line: int, keywords: list[ast.keyword],
              double_star: bool, thread_context: str | None) -> "_StepUse":
        named = {k.arg: k.value for k in keywords if k.arg is not None}
        # step_id=None is the counter again, so it does not count as a stable key
        if "step_id" in named and _is_none(named["step_id"]):
            del named["step_id"]
        return cls(function, ast.unparse(callee), line, frozenset(named),
                   double_star or any(k.arg is None for k in keywords), thread_context)


def lint_script(source: str | bytes) -> dict[str, Any]:
    """Lint a workflow script's source; returns the script-tier validation result."""
    return build_result(find_problems(source))


def build_result(findings: Iterable[Finding]) -> dict[str, Any]:
    ordered = sorted(findings, key=lambda f: (f.line, list(RULES).index(f.rule_id), f.message))
    errors = [f"line {f.line}: [{f.rule_id}] {f.message}" for f in ordered if f.severity == "error"]
    return {"status": "fail" if errors else "pass", "reserved_notes": [], "errors": errors,
            "tier": "script", "findings": [f.as_dict() for f in ordered]}


def find_problems(source: str | bytes) -> list[Finding]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings are the interpreter's business
            tree = ast.parse(source, filename="<workflow script>")
    except SyntaxError as exc:
        return [Finding("syntax", exc.lineno or 1, exc.msg)]
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
        return [Finding("syntax", 1, f"source cannot be parsed: {exc or type(exc).__name__}")]
    names = _Names.collect(tree)
    findings = _import_findings(tree, names)
    for use in _StepScanner(tree, names).uses():
        findings.extend(_step_findings(use))
    return findings


class _Names:
    """What the script's imports (and other bindings) make of a few names we care about."""

    def __init__(self) -> None:
        self.shim_functions: dict[str, str] = {}  # local name → "step" | "run_step"
        self.shim_modules: set[str] = {SHIM_PACKAGE}
        self.importlib_modules: set[str] = {"importlib"}
        self.builtins_modules: set[str] = {"builtins"}
        self.import_module_names: set[str] = {"import_module", "__import__"}
        self.thread_classes: dict[str, str] = {"Thread": "Thread", "Timer": "Timer"}  # local → real
        self.to_thread_names: set[str] = {"to_thread"}
        self.partial_names: set[str] = {"partial"}
        self.other_bindings: set[str] = set()  # defs, assignments, other imports

    @classmethod
    def collect(cls, tree: ast.AST) -> "_Names":
        names = cls()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    names._bind_import(alias)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    names._bind_from(node.module, alias)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.other_bindings.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.other_bindings.add(node.id)
            elif isinstance(node, ast.arg):
                names.other_bindings.add(node.arg)
        return names

    def _bind_import(self, alias: ast.alias) -> None:
        top = alias.name.split(".")[0]
        if alias.asname is None:
            bound, module = top, top
        else:
            bound, module = alias.asname, alias.name
        {SHIM_PACKAGE: self.shim_modules, "importlib": self.importlib_modules,
         "builtins": self.builtins_modules}.get(module, self.other_bindings).add(bound)

    def _bind_from(self, module: str, alias: ast.alias) -> None:
        bound = alias.asname or alias.name
        if module == SHIM_PACKAGE and alias.name in ("step", "run_step"):
            self.shim_functions[bound] = alias.name
        elif module == SHIM_PACKAGE and alias.name == "*":
            pass  # the bare names then mean the shim's, which is the default reading anyway
        elif module == "importlib" and alias.name == "import_module":
            self.import_module_names.add(bound)
        elif module == "threading" and alias.name in ("Thread", "Timer"):
            self.thread_classes[bound] = alias.name
        elif module == "asyncio" and alias.name == "to_thread":
            self.to_thread_names.add(bound)
        elif module == "functools" and alias.name == "partial":
            self.partial_names.add(bound)
        else:
            self.other_bindings.add(bound)

    def shim_function(self, func: ast.expr) -> str | None:
        """"step"/"run_step" if this callee is the shim's function, else None."""
        if isinstance(func, ast.Name):
            if func.id in self.shim_functions:
                return self.shim_functions[func.id]
            if func.id in ("step", "run_step") and func.id not in self.other_bindings:
                return func.id
        elif (isinstance(func, ast.Attribute) and func.attr in ("step", "run_step")
              and isinstance(func.value, ast.Name) and func.value.id in self.shim_modules):
            return func.attr
        return None

    def dynamic_import_name(self, func: ast.expr) -> str | None:
        """The name to show if this callee imports a module by name at run time."""
        if isinstance(func, ast.Name) and func.id in self.import_module_names:
            return func.id
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.attr == "import_module" and func.value.id in self.importlib_modules:
                return f"{func.value.id}.import_module"
            if func.attr == "__import__" and func.value.id in self.builtins_modules:
                return f"{func.value.id}.__import__"
        return None


def _callee_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _module_findings(module: str, line: int, how: str) -> list[Finding]:
    top = module.split(".")[0]
    if top == SERVER_PACKAGE:
        return [Finding("disallowed-import", line,
                        f"{how} {module!r}: a workflow script must not import the server package; "
                        "talk to the server through cao_workflow (HTTP)")]
    if top in NONDETERMINISTIC_MODULES:
        return [Finding("nondeterminism", line,
                        f"{how} {module!r}: its values (random numbers, ids, the clock) differ between "
                        "runs, so a resume can diverge if they reach a prompt, a step id or a branch; "
                        "derive them from get_inputs() or earlier step outputs")]
    return []


def _import_findings(tree: ast.AST, names: _Names) -> list[Finding]:
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
    module = call.args[0] if call.args else _keyword(call, "name")
    if module is None:
        return []
    package = _keyword(call, "package")
    if isinstance(module, ast.Constant) and isinstance(module.value, str):
        if not module.value.startswith("."):
            return _module_findings(module.value, call.lineno, f"{shown}() imports")
        # relative name: what it reaches depends on package=
        if isinstance(package, ast.Constant) and isinstance(package.value, str):
            return _module_findings(package.value, call.lineno, f"{shown}() imports from package")
    return [Finding("dynamic-import", call.lineno,
                    f"{shown}() with a computed module name cannot be checked for disallowed or "
                    "nondeterministic imports; use a plain import statement")]


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def _step_findings(use: _StepUse) -> list[Finding]:
    findings: list[Finding] = []
    if use.function == "step" and "recovery" not in use.keywords:
        if use.has_double_star:
            findings.append(Finding(
                "unverifiable-recovery-policy", use.line,
                f"{use.shown_as}(...) passes ** keyword arguments and no explicit recovery=, so its "
                "recovery policy cannot be checked; write recovery= at the call"))
        else:
            findings.append(Finding(
                "missing-recovery-policy", use.line,
                f"{use.shown_as}(...) declares no recovery policy; pass recovery=\"idempotent\", "
                "\"reconcile\" or \"manual\", or call run_step() to declare none"))
    if use.function == "run_step" and "recovery" in use.keywords:
        findings.append(Finding(
            "unenforced-recovery-policy", use.line,
            f"{use.shown_as}(...) passes recovery=, which run_step() does not check: a bad value "
            "fails this step mid-run (422); declare policies with step(..., recovery=...)"))
    if use.thread_context and "step_id" not in use.keywords and not use.has_double_star:
        findings.append(Finding(
            "unstable-step-id", use.line,
            f"{use.shown_as}(...) runs {use.thread_context} without an explicit step_id; the default "
            "call-N key then follows thread scheduling and a resume can replay another call's "
            "result; pass a stable step_id= per call"))
    return findings


class _StepScanner:
    """Finds every use of step/run_step and whether it runs on a worker thread."""

    def __init__(self, tree: ast.AST, names: _Names) -> None:
        self.tree = tree
        self.names = names
        self.defs: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs.setdefault(node.name, []).append(node)
        # id(call node) → why it runs on a thread
        self.threaded_calls: dict[int, str] = {}
        self.dispatched: list[_StepUse] = []

    def uses(self) -> list[_StepUse]:
        entries: dict[int, tuple[ast.AST, str]] = {}  # id(def) → (def, context)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef) and any(
                    _callee_name(base) in self.names.thread_classes for base in node.bases):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "run":
                        entries[id(item)] = (item, f"in {node.name}.run() (a Thread subclass)")
            elif isinstance(node, ast.Call):
                dispatch = self._dispatch(node)
                if dispatch is not None:
                    target, keywords, double_star, context = dispatch
                    self._mark_target(node, target, keywords, double_star, context, entries)
        self._close_over_calls(entries)
        for fn_node, context in entries.values():
            self._mark_calls_within(fn_node, context)
        direct = [self._direct_use(node) for node in ast.walk(self.tree) if isinstance(node, ast.Call)]
        return [use for use in direct if use is not None] + self.dispatched

    def _dispatch(self, call: ast.Call) -> tuple[ast.expr, list[ast.keyword], bool, str] | None:
        """(callable, keywords it receives, unknown keywords?, context) if `call` hands a
        callable to another thread."""
        func, args = call.func, call.args
        method = func.attr if isinstance(func, ast.Attribute) else None
        name = _callee_name(func)
        if method in _SUBMIT_METHODS and args:
            return args[0], call.keywords, False, f"in a thread pool (.{method}())"
        if method in _MAP_METHODS and args:
            return args[0], [], False, f"in a thread pool (.{method}())"
        if method == "run_in_executor" and len(args) >= 2:
            return args[1], [], False, "in an executor (run_in_executor())"
        if name in self.names.to_thread_names and args:
            return args[0], call.keywords, False, "in a thread (asyncio.to_thread())"
        real = self.names.thread_classes.get(name or "")
        if real is not None:
            # Thread(group, target, name, args, kwargs) / Timer(interval, function, args, kwargs)
            target_key, kwargs_slot = ("target", 4) if real == "Thread" else ("function", 3)
            target = _keyword(call, target_key) or (args[1] if len(args) > 1 else None)
            if target is None:
                return None
            kwargs = _keyword(call, "kwargs") or (args[kwargs_slot] if len(args) > kwargs_slot else None)
            keywords, unknown = _literal_kwargs(kwargs)
            return target, keywords, unknown, f"in a thread ({real}({target_key}=...))"
        return None

    def _mark_target(self, call: ast.Call, target: ast.expr, keywords: list[ast.keyword],
                     double_star: bool, context: str, entries: dict[int, tuple[ast.AST, str]]) -> None:
        if (isinstance(target, ast.Call) and _callee_name(target.func) in self.names.partial_names
                and target.args):
            # partial(fn, ..., kw=...) — the partial's keywords reach fn too
            keywords = [*target.keywords, *keywords]
            target = target.args[0]
        if isinstance(target, ast.Lambda):
            for inner in ast.walk(target.body):
                if isinstance(inner, ast.Call):
                    self.threaded_calls.setdefault(id(inner), context)
                    for fn_node in self.defs.get(_callee_name(inner.func) or "", []):
                        entries.setdefault(id(fn_node), (fn_node, context))
            return
        function = self.names.shim_function(target)
        if function is not None:
            self.dispatched.append(_StepUse.build(function, target, call.lineno, keywords,
                                                  double_star, context))
            return
        for fn_node in self.defs.get(_callee_name(target) or "", []):
            entries.setdefault(id(fn_node), (fn_node, f"{context} via {_callee_name(target)}()"))

    def _close_over_calls(self, entries: dict[int, tuple[ast.AST, str]]) -> None:
        """Functions called (by plain name or self.name) from threaded functions run threaded too."""
        pending = list(entries.values())
        while pending:
            fn_node, context = pending.pop()
            for inner in ast.walk(fn_node):
                if not isinstance(inner, ast.Call):
                    continue
                func = inner.func
                local = func.id if isinstance(func, ast.Name) else (
                    func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.value.id in ("self", "cls") else None)
                for callee in self.defs.get(local or "", []):
                    if id(callee) not in entries:
                        entries[id(callee)] = (callee, context)
                        pending.append((callee, context))

    def _mark_calls_within(self, fn_node: ast.AST, context: str) -> None:
        for inner in ast.walk(fn_node):
            if isinstance(inner, ast.Call):
                self.threaded_calls.setdefault(id(inner), context)

    def _direct_use(self, call: ast.Call) -> _StepUse | None:
        function = self.names.shim_function(call.func)
        if function is None:
            return None
        return _StepUse.build(function, call.func, call.lineno, call.keywords, False,
                              self.threaded_calls.get(id(call)))


def _is_none(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value is None


def _literal_kwargs(node: ast.expr | None) -> tuple[list[ast.keyword], bool]:
    """Thread(kwargs={...}) as keywords; a non-literal mapping means "unknown keywords"."""
    if node is None:
        return [], False
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                          for k in node.keys):
        return [ast.keyword(arg=k.value, value=v) for k, v in zip(node.keys, node.values)], False
    return [], True
