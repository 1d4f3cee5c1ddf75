"""The OS sandbox around every process AgentQueue starts for a task (agents, run_command, hook shell
steps, verify commands): bubblewrap on Linux, with a network gate on the host side.

`rules.py` decides what a run may touch; `bwrap.py` turns that into bubblewrap's arguments and probes
that it works; `gate.py` is the host side of the network (an allowlisting proxy and loopback forwards
reached over Unix sockets); `inner.py` is the small stdlib relay that runs inside the sandbox.
"""
