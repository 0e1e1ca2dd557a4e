"""Where a workflow script calls the shim's `step`/`run_step`, with which keywords, and
whether the call runs on a worker thread (pools, Thread/Timer targets, to_thread, executors,
Thread subclasses' `run`, and what those call by name) — the facts the step rules judge.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .lint_names import ScriptNames, call_keyword, callee_name

# Pool methods whose first argument runs on a worker thread. `submit`-like ones forward their
# keyword arguments to it; `map`-like ones cannot pass keywords at all.
_SUBMIT_METHODS = frozenset({"submit"})
_MAP_METHODS = frozenset({"map", "starmap", "imap", "imap_unordered", "map_async", "starmap_async"})


@dataclass(frozen=True)
class StepUse:
    """One place a shim function gets called: a direct call, or the function handed to a pool."""

    function: str  # "step" | "run_step"
    shown_as: str  # as written in the script, for messages
    line: int
    keywords: frozenset[str]  # explicit keyword names it receives
    has_double_star: bool  # also receives **mapping (unknown keys)
    thread_context: str | None  # why we think it runs on a thread, or None

    @classmethod
    def build(
        cls,
        function: str,
        callee: ast.expr,
        line: int,
        keywords: list[ast.keyword],
        double_star: bool,
        thread_context: str | None,
    ) -> StepUse:
        named = {k.arg: k.value for k in keywords if k.arg is not None}
        # step_id=None is the counter again, so it does not count as a stable key
        if "step_id" in named and _is_none(named["step_id"]):
            del named["step_id"]
        return cls(
            function,
            ast.unparse(callee),
            line,
            frozenset(named),
            double_star or any(k.arg is None for k in keywords),
            thread_context,
        )


class StepScanner:
    """Finds every use of step/run_step and whether it runs on a worker thread."""

    def __init__(self, tree: ast.AST, names: ScriptNames) -> None:
        self.tree = tree
        self.names = names
        self.defs: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defs.setdefault(node.name, []).append(node)
        # id(call node) → why it runs on a thread
        self.threaded_calls: dict[int, str] = {}
        self.dispatched: list[StepUse] = []

    def uses(self) -> list[StepUse]:
        entries: dict[int, tuple[ast.AST, str]] = {}  # id(def) → (def, context)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef) and any(
                callee_name(base) in self.names.thread_classes for base in node.bases
            ):
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
        name = callee_name(func)
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
            target = call_keyword(call, target_key) or (args[1] if len(args) > 1 else None)
            if target is None:
                return None
            kwargs = call_keyword(call, "kwargs") or (args[kwargs_slot] if len(args) > kwargs_slot else None)
            keywords, unknown = _literal_kwargs(kwargs)
            return target, keywords, unknown, f"in a thread ({real}({target_key}=...))"
        return None

    def _mark_target(
        self,
        call: ast.Call,
        target: ast.expr,
        keywords: list[ast.keyword],
        double_star: bool,
        context: str,
        entries: dict[int, tuple[ast.AST, str]],
    ) -> None:
        if isinstance(target, ast.Call) and callee_name(target.func) in self.names.partial_names and target.args:
            # partial(fn, ..., kw=...) — the partial's keywords reach fn too
            keywords = [*target.keywords, *keywords]
            target = target.args[0]
        if isinstance(target, ast.Lambda):
            for inner in ast.walk(target.body):
                if isinstance(inner, ast.Call):
                    self.threaded_calls.setdefault(id(inner), context)
                    for fn_node in self.defs.get(callee_name(inner.func) or "", []):
                        entries.setdefault(id(fn_node), (fn_node, context))
            return
        function = self.names.shim_function(target)
        if function is not None:
            self.dispatched.append(StepUse.build(function, target, call.lineno, keywords, double_star, context))
            return
        for fn_node in self.defs.get(callee_name(target) or "", []):
            entries.setdefault(id(fn_node), (fn_node, f"{context} via {callee_name(target)}()"))

    def _close_over_calls(self, entries: dict[int, tuple[ast.AST, str]]) -> None:
        """Functions called (by plain name or self.name) from threaded functions run threaded too."""
        pending = list(entries.values())
        while pending:
            fn_node, context = pending.pop()
            for inner in ast.walk(fn_node):
                if not isinstance(inner, ast.Call):
                    continue
                func = inner.func
                local = (
                    func.id
                    if isinstance(func, ast.Name)
                    else (
                        func.attr
                        if isinstance(func, ast.Attribute)
                        and isinstance(func.value, ast.Name)
                        and func.value.id in ("self", "cls")
                        else None
                    )
                )
                for callee in self.defs.get(local or "", []):
                    if id(callee) not in entries:
                        entries[id(callee)] = (callee, context)
                        pending.append((callee, context))

    def _mark_calls_within(self, fn_node: ast.AST, context: str) -> None:
        for inner in ast.walk(fn_node):
            if isinstance(inner, ast.Call):
                self.threaded_calls.setdefault(id(inner), context)

    def _direct_use(self, call: ast.Call) -> StepUse | None:
        function = self.names.shim_function(call.func)
        if function is None:
            return None
        return StepUse.build(function, call.func, call.lineno, call.keywords, False, self.threaded_calls.get(id(call)))


def _is_none(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value is None


def _literal_kwargs(node: ast.expr | None) -> tuple[list[ast.keyword], bool]:
    """Thread(kwargs={...}) as keywords; a non-literal mapping means "unknown keywords"."""
    if node is None:
        return [], False
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
        return [
            ast.keyword(arg=k.value, value=v)  # type: ignore[union-attr]  # all keys checked above
            for k, v in zip(node.keys, node.values)
        ], False
    return [], True
