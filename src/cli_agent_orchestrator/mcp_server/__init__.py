"""cao's MCP servers. The agent tools (server.py: handoff, assign, send_message, ..., the workflow
tools) are served by cao-server itself at /mcp (endpoint.py), bound to the calling agent by its
credential; `cao-mcp-server` (relay.py) carries stdio to that endpoint for CLIs that cannot reach
it over HTTP. `cao-ops-mcp-server` (ops_server.py) holds the tools an agent outside cao uses to
drive it, as an HTTP client of cao-server.

The tool code (tools.py, workflow_tools.py) only ever talks to cao-server's HTTP API (in-process
at /mcp), so it answers the same wherever it runs.
"""
