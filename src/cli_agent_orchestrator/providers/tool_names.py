"""The tool vocabulary, and what each entry is in each CLI's own terms: said once for every CLI.

A profile names its tools in cao's vocabulary (`allowedTools`, a role's defaults: profiles/roles.py);
`TABLE` says, for each entry, what it is in each CLI's own names. Providers read their column of
the table (`names`, `refused_builtins`) and never keep a mapping of their own; `ENFORCEMENT` says
how far each CLI can refuse what is outside a set.

Semantics of a resolved set (whether the profile named it or its role gave it):
- a tool inside the set runs without asking: an agent started by cao works unattended;
- a tool outside the set is refused by the CLI itself where the CLI can enforce it
  (`ENFORCEMENT` says where it cannot), never silently allowed;
- `*` (or `--yolo`) is unrestricted: no prompts, nothing refused, whatever the set says;
- a profile that says `permissionMode: default` keeps the CLI's own prompts for the tools
  inside its set (`keeps_prompts`); what is outside is still refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import InvalidInput

CAO_SERVER = "cao-mcp-server"
PROVIDERS: tuple[str, ...] = ("claude_code", "codex", "gemini_cli", "qwen_cli", "opencode_cli", "kiro_cli")
MCP = "@<mcp server>"  # the table row for `@name` (or `@name/tool`): `{server}`, `{tool}` in its cells
UNRESTRICTED = "*"
MARKERS = frozenset({"discovery"})  # accepted, carry no tool

# Each cell: the CLI's own names for the entry (for codex: the sandbox level it needs),
# or None where that CLI cannot express the entry ("cannot enforce").
_CLAUDE_READ, _CLAUDE_LIST = ("Read", "Grep"), ("Glob", "LS")
_CLAUDE_WRITE = ("Write", "Edit", "MultiEdit", "NotebookEdit")
_CLAUDE_WEB = ("WebFetch", "WebSearch")
_GEMINI_READ, _GEMINI_LIST = ("read_file", "read_many_files", "grep_search"), ("list_directory", "glob")
_OPENCODE_READ, _OPENCODE_LIST = ("read", "grep"), ("list", "glob")
TABLE: dict[str, dict[str, tuple[str, ...] | None]] = {
    "execute_bash": {
        "claude_code": ("Bash", "BashOutput", "KillShell"),
        "codex": ("workspace-write",),
        "gemini_cli": ("run_shell_command",),
        "qwen_cli": ("run_shell_command",),
        "opencode_cli": ("bash",),
        "kiro_cli": ("execute_bash",),
    },
    "fs_read": {
        "claude_code": _CLAUDE_READ,
        "codex": ("read-only",),
        "gemini_cli": _GEMINI_READ,
        "qwen_cli": _GEMINI_READ,
        "opencode_cli": _OPENCODE_READ,
        "kiro_cli": ("fs_read",),
    },
    "fs_list": {
        "claude_code": _CLAUDE_LIST,
        "codex": ("read-only",),
        "gemini_cli": _GEMINI_LIST,
        "qwen_cli": _GEMINI_LIST,
        "opencode_cli": _OPENCODE_LIST,
        "kiro_cli": ("fs_read",),
    },
    "fs_write": {
        "claude_code": _CLAUDE_WRITE,
        "codex": ("workspace-write",),
        "gemini_cli": ("write_file", "replace"),
        "qwen_cli": ("write_file", "edit"),
        "opencode_cli": ("edit",),
        "kiro_cli": ("fs_write",),
    },
    "fs_*": {
        "claude_code": _CLAUDE_READ + _CLAUDE_LIST + _CLAUDE_WRITE,
        "codex": ("workspace-write",),
        "gemini_cli": _GEMINI_READ + _GEMINI_LIST + ("write_file", "replace"),
        "qwen_cli": _GEMINI_READ + _GEMINI_LIST + ("write_file", "edit"),
        "opencode_cli": _OPENCODE_READ + _OPENCODE_LIST + ("edit",),
        "kiro_cli": ("fs_read", "fs_write"),
    },
    "web_fetch": {
        "claude_code": _CLAUDE_WEB,
        "codex": ("read-only",),  # Codex cannot switch its web tools per terminal: the sandbox is the limit
        "gemini_cli": ("web_fetch", "google_web_search"),
        "qwen_cli": ("web_fetch", "web_search"),
        "opencode_cli": ("webfetch", "websearch"),
        "kiro_cli": ("web_fetch", "web_search"),
    },
    # The CLI's own helpers: planning, to-do lists, sub-tasks, skills. Tools with effects
    # (shell, writes, the web) are named by their own entries, so `@builtin` never widens a
    # read-only set: a reviewer's `@builtin, fs_read, fs_list` cannot write.
    "@builtin": {
        "claude_code": ("Task", "TodoWrite", "Skill", "SlashCommand", "ExitPlanMode"),
        "codex": ("read-only",),
        "gemini_cli": ("save_memory", "write_todos"),
        "qwen_cli": ("save_memory", "todo_write", "task"),
        "opencode_cli": ("task", "skill", "lsp", "codesearch"),
        "kiro_cli": ("introspect", "thinking", "todo_list", "knowledge"),
    },
    MCP: {
        "claude_code": ("mcp__{server}{tool}",),  # `@server/tool` → mcp__server__tool
        "codex": ("mcp_servers.{server}",),  # a server outside the set is not configured
        "gemini_cli": ("{server}",),  # a policy rule on mcpName; excluded via mcp.excluded
        "qwen_cli": ("{server}",),  # trusted server (settings); excluded via mcp.excluded
        "opencode_cli": ("{server}_*",),
        "kiro_cli": ("@{server}",),
    },
}
# The columns of the CLIs added after the first six, one block per CLI (the same entries as a row
# of TABLE has: every entry of TABLE, each cell the CLI's own names or None); merged into TABLE
# below, so the rest of this module and its readers see one table.
LATER_COLUMNS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "copilot_cli": {
        "execute_bash": ("bash", "read_bash", "write_bash", "stop_bash", "list_bash"),
        "fs_read": ("view", "grep"),
        "fs_list": ("glob",),
        "fs_write": ("create", "edit"),
        "fs_*": ("view", "grep", "glob", "create", "edit"),
        "web_fetch": ("web_fetch",),
        "@builtin": ("task", "skill", "read_agent", "list_agents", "write_agent", "sql"),
        MCP: ("{server}",),  # a server outside the set is not configured; --allow-tool=<server> for cao's
    },
    "hermes": {  # Hermes toolsets (`-t`), not single tools: `file` reads and writes alike
        "execute_bash": ("terminal", "code_execution"),  # execute_code runs Python: a shell by another name
        "fs_read": ("file",),
        "fs_list": ("file",),
        "fs_write": ("file",),
        "fs_*": ("file",),
        "web_fetch": ("web", "browser"),
        "@builtin": ("todo", "memory", "skills", "clarify", "session_search"),
        MCP: ("mcp-{server}",),  # each MCP server is a toolset of its own
    },
    "omp": {  # refused by cao's extension in omp (tool_call → block); `--tools` when no MCP server is named
        "execute_bash": ("bash", "eval"),  # eval runs Python/JS cells: a shell by another name
        "fs_read": ("read", "grep"),
        "fs_list": ("glob",),
        "fs_write": ("edit", "write", "ast_edit"),
        "fs_*": ("read", "grep", "glob", "edit", "write", "ast_edit"),
        "web_fetch": ("web_search",),
        "@builtin": ("task", "todo", "ask", "lsp", "goal", "update_notes"),
        MCP: ("mcp__{server}_*",),  # omp's own names: mcp__<server, lowercased, _ for the rest>_<tool>
    },
    "grok_cli": {  # Grok has no web tool; search = grep/find over the tree
        "execute_bash": ("bash",),
        "fs_read": ("view_file", "search"),
        "fs_list": ("view_file", "search"),
        "fs_write": ("create_file", "str_replace_editor", "edit_file"),
        "fs_*": ("view_file", "search", "create_file", "str_replace_editor", "edit_file"),
        "web_fetch": None,
        "@builtin": ("create_todo_list", "update_todo_list"),
        MCP: ("mcp__{server}{tool}",),
    },
    # aider's model has no tools: it edits files and suggests shell commands in its reply; those two
    # switch off (--dry-run, --no-suggest-shell-commands), what aider reads is the user's choice.
    "aider": {
        "execute_bash": ("shell-commands",),
        "fs_read": None,
        "fs_list": None,
        "fs_write": ("file-edits",),
        "fs_*": ("file-edits",),
        "web_fetch": None,
        "@builtin": None,
        MCP: None,
    },
}
for _provider, _column in LATER_COLUMNS.items():
    for _entry, _row in TABLE.items():
        _row[_provider] = _column[_entry]
PROVIDERS = PROVIDERS + tuple(LATER_COLUMNS)
# The builtin names each CLI knows (every row but MCP's): what is outside a set is refused from these.
BUILTINS: dict[str, tuple[str, ...]] = {
    p: tuple(dict.fromkeys(name for entry, row in TABLE.items() if entry != MCP for name in row[p] or ()))
    for p in PROVIDERS
}
# How far each CLI enforces a set (docs/profiles.md, "Roles and tools").
ENFORCEMENT = {
    "claude_code": "hard",  # permissions.deny for builtins outside the set; only the set's MCP servers
    "codex": "partial",  # sandbox level (read-only / workspace-write) and MCP servers; no per-tool choice
    "gemini_cli": "hard",  # excludeTools + mcp.excluded; policy rules allow the set
    "qwen_cli": "hard",  # excludeTools + mcp.excluded; --allowed-tools for the set
    "opencode_cli": "hard",  # permission "*": deny, the set allowed
    "kiro_cli": "hard",  # the agent JSON `cao install` writes: Kiro offers only its `tools` (kiro_agent)
    "copilot_cli": "hard",  # --excluded-tools for builtins outside the set; only the set's MCP servers
    "hermes": "partial",  # toolsets outside the set are not offered; reading files allows writing them
    "omp": "hard",  # cao's extension blocks every call outside the set (MCP too); --tools hides builtins
    "grok_cli": "hard",  # cao's start-up shim: tools outside the set not offered, and refused if called
    "aider": "partial",  # edits (--dry-run) and shell commands off; no per-tool choice, no MCP
}


def keeps_prompts(profile_extra: Mapping) -> bool:
    """The profile asks for the CLI's own permission prompts inside its set."""
    return profile_extra.get("permissionMode") == "default"


def check_tool(name: object, where: str) -> str:
    if not isinstance(name, str) or not (
        name in TABLE or name in MARKERS or name == UNRESTRICTED or (name.startswith("@") and len(name) > 1)
    ):
        known = ", ".join([*[t for t in TABLE if t != MCP], "@<mcp server>", UNRESTRICTED, *sorted(MARKERS)])
        raise InvalidInput(f"{where}: unknown tool {name!r} (known: {known})")
    return name


def names(provider: str, tools: Iterable[str]) -> list[str]:
    """The CLI's own names for `tools` (vocabulary entries), in order, without repeats.
    `*` and markers carry none; an entry that CLI cannot express is left out."""
    out: list[str] = []
    for tool in tools:
        if tool == UNRESTRICTED or tool in MARKERS:
            continue
        if tool.startswith("@") and tool not in TABLE:
            server, _, one = tool[1:].partition("/")
            cells = [c.format(server=server, tool=f"__{one}" if one else "") for c in TABLE[MCP][provider] or ()]
        else:
            cells = list(TABLE[check_tool(tool, "allowed tools")][provider] or ())
        out += [c for c in cells if c not in out]
    return out


def servers(tools: Iterable[str]) -> set[str]:
    """The MCP servers a set names (`@name`, and `@name/tool`'s server)."""
    return {t[1:].partition("/")[0] for t in tools if t.startswith("@") and t not in TABLE}


def refused_builtins(provider: str, tools: list[str]) -> list[str]:
    """The CLI's builtin tools outside the set: what it must refuse."""
    if UNRESTRICTED in tools:
        return []
    inside = set(names(provider, tools))
    return [name for name in BUILTINS[provider] if name not in inside]
