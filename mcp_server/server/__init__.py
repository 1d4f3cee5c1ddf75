"""The MCP surface: the server a connection talks to, and what shapes each connection's view of it.

    app.py          build / build_server: tools from tools/, resources, prompts, per-connection state, notifications
    resources.py    agentqueue:// resources, and telling subscribers when they change
    middleware.py   the connection's tool selection, the audit log, readable validation errors
    toolsets.py     tool groups a connection can be limited to, and its options (stdlib only: the relay imports it)
    selection.py    a connection's effective selection: what it may call and what its tools/list shows
    reference.py    docs/reference.md, generated from the live server (`python -m agentqueue.server.reference`)

This file imports nothing: every client launch loads the package for toolsets.py.
"""
