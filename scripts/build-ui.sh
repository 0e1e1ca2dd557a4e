#!/usr/bin/env bash
# Build the browser UI into src/cli_agent_orchestrator/web/assets (app.js, app.css, index.html).
# Needs Node 20+ and npm; the built files are committed, so installing cao needs no Node.
# Deterministic: the same inputs give byte-identical outputs.
set -euo pipefail
cd "$(dirname "$0")/../ui"
npm ci --no-audit --no-fund
node build.mjs
ls -l ../src/cli_agent_orchestrator/web/assets
