"""cao-mcp-server: the MCP tools an agent uses to orchestrate other agents.

It is only an HTTP client of cao-server; everything stateful (terminals, inboxes,
waits) lives in the server, so this process can be started and killed freely by
whichever coding CLI hosts it.
"""
