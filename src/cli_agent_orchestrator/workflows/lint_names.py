"""What a workflow script's names mean to the linter: which callee is the shim's `step`,
an import-by-name, a Thread, `asyncio.to_thread` or `functools.partial`. Resolved per file,
not per scope (the limit the `lint` docstring states), from the AST alone.
"""

from __future__ import annotations

import ast

SHIM_PACKAGE = "cao_workflow"


class ScriptNames:
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
    def collect(cls, tree: ast.AST) -> ScriptNames:
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
        {SHIM_PACKAGE: self.shim_modules, "importlib": self.importlib_modules, "builtins": self.builtins_modules}.get(
            module, self.other_bindings
        ).add(bound)

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
        """ "step"/"run_step" if this callee is the shim's function, else None."""
        if isinstance(func, ast.Name):
            if func.id in self.shim_functions:
                return self.shim_functions[func.id]
            if func.id in ("step", "run_step") and func.id not in self.other_bindings:
                return func.id
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in ("step", "run_step")
            and isinstance(func.value, ast.Name)
            and func.value.id in self.shim_modules
        ):
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


def callee_name(func: ast.expr) -> str | None:
    """The bare name a call is made by (`f` in `f()` and `obj.f()`), matched by name only."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def call_keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)
