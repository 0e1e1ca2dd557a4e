"""The start-up shim cao loads into Grok CLI (node `--import`, through NODE_OPTIONS).

Grok CLI 0.0.34 has no flag or variable for a settings file, a system prompt, auto-approval or a
tool set, and it writes its two settings files itself: `~/.grok/user-settings.json` (created when
missing, rewritten by a migration) and `<cwd>/.grok/settings.json` (created in the working
directory on every start; its `mcpServers` are the only MCP configuration Grok reads). The shim
runs inside Grok's node process before Grok's own code and, on Grok's singletons and classes:

* points both settings paths at cao's per-terminal copies (the user's files are only read, by cao);
* sets the confirmation service's session flags for what runs without asking (yolo, the tool set);
* removes the tools outside the set from what Grok offers its model, and refuses them anyway if the
  model calls one (Grok runs any tool name it knows, offered or not);
* appends the profile's system prompt to Grok's own, before the first request;
* gives the model a message's line breaks as newlines (a paste reaches Grok's composer with CRs).

Invariant: the shim applies all of this or Grok does not start. A Grok whose modules are not where
0.0.34 has them stops at once with the reason (exit 78), rather than run with the user's files
written and no tool policy. NODE_OPTIONS is given back to the user's value for Grok's children.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._node_settings import write_private

EXIT_SHIM_FAILED = 78  # EX_CONFIG: what a Grok that the shim cannot fit exits with

_SHIM = """\
// cao's start-up shim for Grok CLI (see cli_agent_orchestrator/providers/_grok_cli_shim.py).
import { readFileSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

const CONFIG = __CONFIG__;
if (CONFIG.nodeOptions) process.env.NODE_OPTIONS = CONFIG.nodeOptions;
else delete process.env.NODE_OPTIONS;

function fail(why) {
  process.stderr.write(`cao: cannot prepare Grok CLI: ${why}\\n`);
  process.exit(__EXIT__);
}

let dist = "";
try {
  dist = dirname(realpathSync(process.argv[1] || ""));
  const pkg = JSON.parse(readFileSync(join(dist, "..", "package.json"), "utf8"));
  if (pkg.name !== "@vibe-kit/grok-cli") fail(`${process.argv[1]} is ${pkg.name}, not @vibe-kit/grok-cli`);
} catch (error) {
  fail(`${process.argv[1]} is not Grok CLI's script (${error.message})`);
}
const load = (path) => import(pathToFileURL(join(dist, path)).href);

try {
  const { SettingsManager } = await load("utils/settings-manager.js");
  const settings = SettingsManager.getInstance();
  if (!("userSettingsPath" in settings && "projectSettingsPath" in settings)) fail("unknown settings manager");
  settings.userSettingsPath = CONFIG.userSettings;
  settings.projectSettingsPath = CONFIG.projectSettings;

  const { ConfirmationService } = await load("utils/confirmation-service.js");
  const confirmations = ConfirmationService.getInstance();
  for (const flag of CONFIG.approved) confirmations.setSessionFlag(flag, true);

  const { GROK_TOOLS } = await load("grok/tools.js");
  const { GrokAgent } = await load("agent/grok-agent.js");
  if (!Array.isArray(GROK_TOOLS) || typeof GrokAgent?.prototype?.executeTool !== "function") fail("unknown tool table");
  const refused = new Set(CONFIG.refused);
  const mcpAllowed = CONFIG.mcpAllowed === null ? null : new Set(CONFIG.mcpAllowed);
  const isRefused = (name) =>
    refused.has(name) ||
    (mcpAllowed !== null && name.startsWith("mcp__") && !mcpAllowed.has(name) &&
      !mcpAllowed.has(name.split("__").slice(0, 2).join("__")));
  for (let i = GROK_TOOLS.length - 1; i >= 0; i--) {
    if (isRefused(GROK_TOOLS[i]?.function?.name)) GROK_TOOLS.splice(i, 1);
  }
  const proto = GrokAgent.prototype;
  const execute = proto.executeTool;
  proto.executeTool = async function (call) {
    const name = String(call?.function?.name ?? "");
    if (isRefused(name)) {
      return { success: false, error: `${name} is not among this agent's tools (refused by cao's tool policy)` };
    }
    return execute.call(this, call);
  };

  const prompted = Symbol("cao system prompt");
  const withPrompt = (agent) => {
    if (!CONFIG.systemPrompt || agent[prompted] || !Array.isArray(agent.messages)) return;
    agent[prompted] = true;
    const first = agent.messages[0];
    if (first?.role === "system") first.content = `${first.content}\\n\\n${CONFIG.systemPrompt}`;
    else agent.messages.unshift({ role: "system", content: CONFIG.systemPrompt });
  };
  for (const method of ["processUserMessage", "processUserMessageStream"]) {
    const original = proto[method];
    if (typeof original !== "function") fail(`GrokAgent has no ${method}`);
    proto[method] = function (message, ...rest) {
      withPrompt(this);
      // A pasted line break reaches Grok's composer as a carriage return (tmux pastes LF as CR).
      const text = typeof message === "string" ? message.replace(/\\r\\n?/g, "\\n") : message;
      return original.call(this, text, ...rest);
    };
  }
} catch (error) {
  fail(error?.message ?? String(error));
}
"""


def shim_text(config: dict[str, Any]) -> str:
    """The shim with its configuration inlined (JSON is a JavaScript expression)."""
    return _SHIM.replace("__CONFIG__", json.dumps(config, ensure_ascii=False)).replace(
        "__EXIT__", str(EXIT_SHIM_FAILED)
    )


def write_shim(path: Path, config: dict[str, Any]) -> str:
    """Write the shim (0600) and return the NODE_OPTIONS that load it ahead of the user's own."""
    write_private(path, shim_text(config))
    load = f"--import={path.as_uri()}"
    return f"{load} {config['nodeOptions']}" if config.get("nodeOptions") else load
