"""`agentqueue chat`: the real `claude` CLI as AgentQueue's terminal front end.

claude.py starts and talks to one long-lived `claude -p` (stream-json both ways); turns.py reads one
turn's events; render.py shows them; watcher.py follows the queue; state.py keeps the last session
id; repl.py is the prompt loop and the one-shot `-p` mode.
"""
