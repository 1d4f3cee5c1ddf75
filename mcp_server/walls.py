"""The walls this AgentQueue's code puts around the runs it starts, by name (stdlib only, no imports).

The daemon lists them in daemon.json (`walls`), so `doctor` and `status` say what the *running* daemon enforces,
not what the code installed since then would: a daemon started before an upgrade keeps its old code until it is
restarted, and one that predates this list says nothing of its walls (the AgentQueue of three weeks before issue 34
had no sandbox at all). A new wall is one more entry here; daemons of older code are then said to lack it.
"""

from __future__ import annotations

# name -> what it holds, in a few words (doctor prints the names of the walls a running daemon lacks).
WALLS: dict[str, str] = {
    "sandbox": "every process a task starts runs in bubblewrap, and none starts without it unless "
               "[sandbox] required = false",
    "network-allowlist": "a run reaches only the hosts allowed, through the daemon's network gate",
    "run-limits": "a run's processes, memory and /tmp are capped",
    "run-repository": "a run's git writes go to a repository of its own, read back as from an untrusted remote",
    "protected-paths": "a change to CI, git hooks or agent settings waits for a person before it lands",
    "policy": "every tool call and agent request passes policy.toml, and the risky ones ask a person",
}


def lacking(reported: object) -> list[str]:
    """The walls of this code that a daemon reporting `reported` (daemon.json's `walls`; None from a daemon older
    than the list) does not have, in WALLS' order."""
    have = set(reported) if isinstance(reported, list) else set()
    return [name for name in WALLS if name not in have]
