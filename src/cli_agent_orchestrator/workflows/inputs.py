"""Run inputs: the declaration a workflow makes (`INPUTS` in a script, `inputs:` in YAML)
and the check of what a caller supplies against it.

A declaration maps each input name to `{type, required, default}`; the resolved inputs
(supplied value, else default) are delivered to the script as CAO_WORKFLOW_INPUTS.
Every problem is an InputError — a 400 with a one-line reason.
"""

from __future__ import annotations

import ast
import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from .specs import check_path_text

INPUT_TYPES = ("string", "int", "bool", "path")
SPEC_FIELDS = frozenset({"type", "required", "default"})
MAX_DECLARED_INPUTS = 64
# The resolved inputs travel in one environment variable; this keeps it far below any
# platform's limit on a single env entry.
MAX_INPUTS_BYTES = 32768
# A `path` input names a working area for agents; these are never one.
SYSTEM_DIRECTORIES = frozenset(
    {
        "/bin",
        "/sbin",
        "/usr/bin",
        "/usr/sbin",
        "/etc",
        "/var",
        "/tmp",
        "/dev",
        "/proc",
        "/sys",
        "/root",
        "/boot",
        "/lib",
        "/lib64",
        # macOS resolves /etc, /var and /tmp into /private
        "/private/etc",
        "/private/var",
        "/private/tmp",
    }
)


class InputError(InvalidInput, ValueError):
    """A declaration or a supplied input is invalid. Also an InvalidInput, so the API's one
    CaoError handler answers 400 with the message."""


def read_inputs_declaration(source: str | bytes) -> dict[str, dict[str, Any]]:
    """The script's module-level `INPUTS = {...}` literal, checked; `{}` when absent.

    Read from the AST, never executed: only top-level `INPUTS = ...` / `INPUTS: T = ...`
    statements count, and the first one wins.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename="<workflow script>")
    except (SyntaxError, ValueError, RecursionError) as exc:
        raise InputError(f"cannot read INPUTS: the script does not parse ({exc})") from None
    node = _first_inputs_assignment(tree)
    if node is None:
        return {}
    try:
        declared = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise InputError(
            f"INPUTS (line {node.lineno}) must be a literal dict — only strings, "
            "numbers, True/False/None, lists and dicts; no names, calls or "
            "expressions"
        ) from None
    check_declaration(declared)
    return declared


def _first_inputs_assignment(tree: ast.Module) -> ast.expr | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "INPUTS" for t in stmt.targets):
            return stmt.value
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id == "INPUTS"
            and stmt.value is not None
        ):
            return stmt.value
    return None


def check_declaration(declared: object) -> None:
    """Raise InputError unless `declared` is `{name: {type, required?, default?}}`."""
    if not isinstance(declared, Mapping):
        raise InputError(
            "INPUTS must be a dict mapping each input name to {'type': ..., 'required': ..., 'default': ...}"
        )
    if len(declared) > MAX_DECLARED_INPUTS:
        raise InputError(f"a workflow declares at most {MAX_DECLARED_INPUTS} inputs, not {len(declared)}")
    for name, spec in declared.items():
        if not isinstance(name, str) or not name:
            raise InputError(f"input names must be non-empty strings, not {name!r}")
        if not isinstance(spec, Mapping):
            raise InputError(f"input '{name}': its declaration must be a dict with a 'type'")
        unknown = sorted(str(key) for key in spec if key not in SPEC_FIELDS)
        if unknown:
            raise InputError(
                f"input '{name}': unknown field {', '.join(map(repr, unknown))} (allowed: type, required, default)"
            )
        if spec.get("type") not in INPUT_TYPES:
            raise InputError(f"input '{name}': type must be one of {', '.join(INPUT_TYPES)}")
        if not isinstance(spec.get("required", False), bool):
            raise InputError(f"input '{name}': required must be true or false")
        default = spec.get("default")
        if default is not None and not _has_type(default, spec["type"]):
            raise InputError(f"input '{name}': default must be of type {spec['type']}, got {_json_type(default)}")


def validate_inputs(
    declared: Mapping[str, Mapping[str, Any]], supplied: Mapping[str, Any] | None, *, base_dir: Path | None = None
) -> dict[str, Any]:
    """Resolve supplied inputs against a declaration: the supplied value, else the default,
    else an error (required) or nothing. `path` values come back absolute and canonical;
    relative ones are taken from `base_dir` (default: this process's working directory).
    """
    check_declaration(declared)
    supplied = {} if supplied is None else supplied
    if not isinstance(supplied, Mapping):
        raise InputError("workflow inputs must be an object of name → value")
    for name in supplied:
        if name not in declared:
            raise InputError(f"unknown input '{name}' (not declared by the workflow)")
    resolved: dict[str, Any] = {}
    for name, spec in declared.items():
        if name in supplied:
            value = supplied[name]
        elif spec.get("default") is not None:
            value = spec["default"]
        elif spec.get("required", False):
            raise InputError(f"missing required input '{name}'")
        else:
            continue
        if not _has_type(value, spec["type"]):
            raise InputError(f"input '{name}' must be of type {spec['type']}, got {_json_type(value)}")
        resolved[name] = _resolve_path(name, value, base_dir) if spec["type"] == "path" else value
    if inputs_size(resolved) > MAX_INPUTS_BYTES:
        raise InputError(f"workflow inputs exceed {MAX_INPUTS_BYTES} bytes")
    return resolved


def encode_inputs(resolved: Mapping[str, Any]) -> str:
    """The compact JSON carried in CAO_WORKFLOW_INPUTS — the same text the size cap measures."""
    return json.dumps(dict(resolved), separators=(",", ":"), ensure_ascii=False)


def inputs_size(inputs: Mapping[str, Any]) -> int:
    """UTF-8 bytes of `encode_inputs`: what the 32 KiB cap counts (and the API's cheap
    guard before resolving), so non-ASCII text counts as sent, not as \\u-escapes."""
    try:
        return len(encode_inputs(inputs).encode("utf-8"))
    except UnicodeEncodeError:
        raise InputError("workflow inputs hold text that is not valid Unicode (a lone surrogate)") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"workflow inputs must be JSON values: {exc}") from None


def coerce_cli_value(raw: str, declared_type: str | None) -> Any:
    """Turn a `--input k=v` text into a value, guided by the declared type when there is one.

    Without a declaration (or for int/bool) the generic rule applies: true/false (any case)
    → bool, an integer → int, else the text. A `string` or `path` input keeps the text, so
    `--input tag=123` stays "123" instead of becoming an int its declaration then refuses.
    """
    if declared_type in ("string", "path"):
        return raw
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        return int(raw)
    except ValueError:
        return raw


def _has_type(value: object, input_type: str) -> bool:
    if input_type == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if input_type == "bool":
        return isinstance(value, bool)
    return isinstance(value, str)  # string, path


def _json_type(value: object) -> str:
    for kind, name in (
        (bool, "bool"),
        (int, "int"),
        (float, "number"),
        (str, "string"),
        (list, "list"),
        (dict, "object"),
        (type(None), "null"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _resolve_path(name: str, value: str, base_dir: Path | None) -> str:
    if not value.strip():
        raise InputError(f"input '{name}' must be a directory path, got an empty string")
    try:
        check_path_text(value, f"input '{name}'")
    except InvalidInput as exc:
        raise InputError(str(exc)) from None
    try:
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        path = path.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, unreadable, `~user` unknown, or a symlink loop
        raise InputError(f"input '{name}': {value!r} is not an existing directory") from None
    if not path.is_dir():
        raise InputError(f"input '{name}': {value!r} is not an existing directory")
    if path == Path(path.anchor):
        raise InputError(f"input '{name}': {value!r} is the filesystem root")
    if str(path) in SYSTEM_DIRECTORIES:
        raise InputError(f"input '{name}': {value!r} is a system directory ({path})")
    return str(path)
