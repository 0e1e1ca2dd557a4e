"""cao's MCP servers: `cao-mcp-server` (server.py), the tools an agent inside cao uses to
orchestrate other agents, and `cao-ops-mcp-server` (ops_server.py), the tools an agent outside
cao uses to drive it.

Both are only HTTP clients of cao-server; everything stateful (terminals, inboxes,
waits) lives in the server, so these processes can be started and killed freely by
whichever coding CLI hosts them.
"""
