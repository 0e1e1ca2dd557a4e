"""Clients of cao-server's HTTP API, shared by everything that calls it: `aio.py` (the async
client cao's MCP tools use) and `edge.py` (what every client reads from an answer the same way:
an error's one-line detail, Server-Sent Events). The CLI's synchronous client is cli/client.py.
"""
