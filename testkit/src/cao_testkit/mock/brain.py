"""A scripted brain for cao-mock-agent: rules that call cao's MCP tools, no model needed.

With a brain the mock can play a supervisor and its workers: on a matching
input it calls cao's tools (mcp_caller.py: cao-server's MCP endpoint over HTTP, or the
cao-mcp-server relay over stdio) and folds the results into its reply.

Where rules come from (both optional; inline rules are tried first):

* ``CAO_MOCK_RULES`` - a JSON list of rules. The mock_cli provider fills it from
  the profile frontmatter ``mock: {rules: [...]}``.
* ``CAO_MOCK_BRAIN`` - path of a YAML or JSON file holding a list of rules (or a
  mapping with a ``rules`` key); relative paths resolve against the agent's
  working directory. Frontmatter ``mock: {brain: path}`` sets it.

Without rules the mock replies exactly as it always did.

Rule language - a list of rules, the first whose ``match`` hits wins::

    - match: "regex"            # re.search on the received message (DOTALL); omitted: always
      collect: results          # append the message (or group 1 if the regex has one) to list `results`
      until: {results: 2}       # run steps/reply only once len(results) >= 2 ...
      waiting: "Got {results_count} of 2"   # ... and reply this meanwhile (default "waiting")
      steps:                    # tool calls, in order
        - tool: assign          # any cao-mcp-server tool
          args: {agent_profile: analyst, message: "Analyze sales data"}
          save: sales_worker    # keep the result's main value in a variable
        - tool: handoff
          args: {agent_profile: reporter, message: "Fill {template} with {results}"}
          save: report
          allow_failure: false  # true: a failed call does not end the turn
      reply: "FINAL: {report}"  # default: the mock's usual "MOCK: <message>"

Templates (``reply``, ``waiting`` and every string inside ``args``) substitute
``{name}``: ``message`` (the whole input), ``match`` (the whole match),
``g1``..``g9`` (groups), saved results, collected lists (joined with newlines)
and ``<list>_count``. Unknown names stay as written. Saved results and lists
live as long as the agent process; lists are never cleared.

The main value of a result is ``output`` for handoff, ``terminal_id`` for
assign, ``message_id`` for send_message, otherwise the whole result as JSON.
A result with ``success: false`` ends the turn with ``✗ Error: <tool> failed:
<message>`` (cao then reports status ``error``), unless the step allows
failure; then the failure text is what gets saved.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .mcp_caller import BrainError, McpToolCaller

ToolCaller = Callable[[str, dict[str, Any]], dict[str, Any]]
Variables = dict[str, "str | list[str]"]

MAIN_VALUE = {"handoff": "output", "assign": "terminal_id", "send_message": "message_id"}
DEFAULT_WAITING = "waiting"
RULE_KEYS = {"match", "collect", "until", "waiting", "steps", "reply"}
STEP_KEYS = {"tool", "args", "save", "allow_failure"}
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME_RE = re.compile(_NAME)
_TEMPLATE_RE = re.compile(r"\{(" + _NAME + r")\}")
MAX_GROUPS = 9


# --- rules ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    tool: str
    args: dict[str, Any]
    save: str | None = None
    allow_failure: bool = False


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    collect: str | None = None
    until: tuple[tuple[str, int], ...] = ()
    waiting: str = DEFAULT_WAITING
    steps: tuple[Step, ...] = ()
    reply: str | None = None


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise ValueError(f"{where} must be a variable name ([A-Za-z_][A-Za-z0-9_]*), got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    # YAML turns `reply: 42` or `reply: yes` into non-strings; a rule author means the text.
    if isinstance(value, (dict, list)) or value is None:
        raise ValueError(f"{where} must be text, got {value!r}")
    return value if isinstance(value, str) else json.dumps(value)


def _parse_step(raw: Any, where: str) -> Step:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping with a `tool`, got {raw!r}")
    if unknown := set(raw) - STEP_KEYS:
        raise ValueError(f"{where}: unknown key(s) {sorted(map(str, unknown))}; allowed: {sorted(STEP_KEYS)}")
    tool = raw.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        raise ValueError(f"{where}: `tool` must be a tool name, got {tool!r}")
    args = raw.get("args") or {}
    if not isinstance(args, Mapping):
        raise ValueError(f"{where}: `args` must be a mapping, got {args!r}")
    save = _name(raw["save"], f"{where}: `save`") if raw.get("save") is not None else None
    allow = raw.get("allow_failure", False)
    if not isinstance(allow, bool):
        raise ValueError(f"{where}: `allow_failure` must be true or false, got {allow!r}")
    return Step(tool.strip(), {str(k): v for k, v in args.items()}, save, allow)


def _parse_rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping, got {raw!r}")
    if unknown := set(raw) - RULE_KEYS:
        raise ValueError(f"{where}: unknown key(s) {sorted(map(str, unknown))}; allowed: {sorted(RULE_KEYS)}")
    source = _text(raw.get("match", ""), f"{where}: `match`")
    try:
        pattern = re.compile(source, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"{where}: bad `match` regex {source!r}: {exc}") from None
    collect = _name(raw["collect"], f"{where}: `collect`") if raw.get("collect") is not None else None
    until_raw = raw.get("until") or {}
    if not isinstance(until_raw, Mapping):
        raise ValueError(f"{where}: `until` must map list names to counts, got {until_raw!r}")
    until = []
    for key, count in until_raw.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{where}: `until` count for {key!r} must be a whole number >= 0, got {count!r}")
        until.append((_name(key, f"{where}: `until` key"), count))
    steps_raw = raw.get("steps") or []
    if not isinstance(steps_raw, list):
        raise ValueError(f"{where}: `steps` must be a list, got {steps_raw!r}")
    steps = tuple(_parse_step(s, f"{where}, step {i + 1}") for i, s in enumerate(steps_raw))
    reply = _text(raw["reply"], f"{where}: `reply`") if raw.get("reply") is not None else None
    waiting = _text(raw.get("waiting", DEFAULT_WAITING), f"{where}: `waiting`")
    return Rule(pattern, collect, tuple(until), waiting, steps, reply)


def parse_rules(raw: Any, source: str = "rules") -> list[Rule]:
    """Validate a rule list; a ValueError names the rule and key that is wrong."""
    if isinstance(raw, Mapping) and set(raw) == {"rules"}:
        raw = raw["rules"]
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"{source} must be a list of rules, got {type(raw).__name__}")
    return [_parse_rule(r, f"{source}, rule {i + 1}") for i, r in enumerate(raw)]


def load_rules(env: Mapping[str, str]) -> list[Rule] | None:
    """Rules configured for this agent; None when no brain is configured at all."""
    inline, path = env.get("CAO_MOCK_RULES", "").strip(), env.get("CAO_MOCK_BRAIN", "").strip()
    if not inline and not path:
        return None
    rules: list[Rule] = []
    if inline:
        try:
            data = json.loads(inline)
        except json.JSONDecodeError as exc:
            raise ValueError(f"CAO_MOCK_RULES is not JSON: {exc}") from None
        rules += parse_rules(data, "CAO_MOCK_RULES")
    if path:
        import yaml  # only brains from files need it; JSON is valid YAML too

        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read CAO_MOCK_BRAIN file {path!r}: {exc}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"brain file {path!r} is not valid YAML/JSON: {exc}") from None
        rules += parse_rules(data, f"brain file {path}")
    return rules


# --- templates ----------------------------------------------------------------------------
def _lookup(name: str, variables: Mapping[str, Any]) -> str | None:
    if name in variables:
        value = variables[name]
        return "\n".join(value) if isinstance(value, list) else str(value)
    if name.endswith("_count") and isinstance(variables.get(name[:-6]), list):
        return str(len(variables[name[:-6]]))
    return None


def render(template: str, variables: Mapping[str, Any]) -> str:
    """Substitute {name}; unknown names stay literal so a stray brace never breaks a reply."""

    def sub(m: re.Match[str]) -> str:
        value = _lookup(m.group(1), variables)
        return m.group(0) if value is None else value

    return _TEMPLATE_RE.sub(sub, template)


def render_args(value: Any, variables: Mapping[str, Any]) -> Any:
    """Templates apply to strings anywhere inside args; numbers and booleans pass through."""
    if isinstance(value, str):
        return render(value, variables)
    if isinstance(value, Mapping):
        return {k: render_args(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [render_args(v, variables) for v in value]
    return value


def main_value(tool: str, result: dict[str, Any]) -> str:
    key = MAIN_VALUE.get(tool)
    if key is not None and key in result:
        value = result[key]
        return "" if value is None else str(value)
    return json.dumps(result, ensure_ascii=False)


def failure_text(result: dict[str, Any]) -> str:
    for key in ("message", "error"):
        if result.get(key):
            return str(result[key])
    return json.dumps(result, ensure_ascii=False)


# --- the brain --------------------------------------------------------------------------------
def echo_reply(message: str) -> str:
    return "MOCK: " + message


class Brain:
    """Turns one message into one reply, calling tools on the way; keeps state between turns."""

    def __init__(self, rules: list[Rule], call_tool: ToolCaller, fallback: Callable[[str], str] = echo_reply):
        self.rules = rules
        self.call_tool = call_tool
        self.fallback = fallback  # the mock's own reply, for unmatched input and rules without `reply`
        self.variables: Variables = {}

    def reply(self, message: str) -> str:
        for rule in self.rules:
            if m := rule.pattern.search(message):
                return self._run(rule, message, m)
        return self.fallback(message)

    def _run(self, rule: Rule, message: str, m: re.Match[str]) -> str:
        if rule.collect:
            item = m.group(1) if m.re.groups and m.group(1) is not None else message
            bucket = self.variables.get(rule.collect)
            if not isinstance(bucket, list):
                bucket = self.variables[rule.collect] = []
            bucket.append(item)
        # Turn-local names are layered over the lasting ones and vanish after the turn.
        turn: dict[str, Any] = {"message": message, "match": m.group(0)}
        for i in range(1, min(m.re.groups, MAX_GROUPS) + 1):
            turn[f"g{i}"] = m.group(i) or ""
        if not all(self._size(name) >= count for name, count in rule.until):
            return render(rule.waiting, self._scope(turn))
        for step in rule.steps:
            args = render_args(step.args, self._scope(turn))
            result = self.call_tool(step.tool, args)
            failed = result.get("success") is False
            if failed and not step.allow_failure:
                raise BrainError(f"{step.tool} failed: {failure_text(result)}")
            if step.save:
                self.variables[step.save] = failure_text(result) if failed else main_value(step.tool, result)
        if rule.reply is None:
            return self.fallback(message)
        return render(rule.reply, self._scope(turn))

    def _size(self, name: str) -> int:
        value = self.variables.get(name)
        return len(value) if isinstance(value, list) else 0

    def _scope(self, turn: dict[str, Any]) -> dict[str, Any]:
        return {**self.variables, **turn}


# --- wiring --------------------------------------------------------------------------------------
def brain_from_env(
    env: Mapping[str, str], fallback: Callable[[str], str] = echo_reply, heartbeat: Callable[[], None] | None = None
) -> Callable[[str], str] | None:
    """The reply function for a mock configured with rules; None when it has none.

    A broken configuration does not stop the agent from starting: every turn then
    fails with the reason, which is visible on screen and in cao's status reason.
    """
    try:
        rules = load_rules(env)
        if rules is None:
            return None
        caller = McpToolCaller(env, heartbeat)
    except ValueError as exc:
        reason = f"mock brain: {exc}"

        def broken(message: str) -> str:
            raise BrainError(reason)

        return broken
    return Brain(rules, caller, fallback).reply
