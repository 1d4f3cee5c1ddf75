"""Issue 33, L1: a name on a wildcard allowlist entry that resolves to loopback reaches no loopback service. The
gate resolves once and refuses a loopback, link-local or private answer unless the entry names that host or address
literally (an explicit `127.0.0.1:PORT`, as a local model endpoint is, keeps working). The stand-in for DNS answers
only for `*.evil.example`; the real engine runs a `command` agent that asks the proxy for such a name."""

from __future__ import annotations

import json
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from agentqueue.sandbox import bwrap
from agentqueue.services import Services

from ..engine_runs import engine_for, run_until
from ..git_fixtures import git_env  # noqa: F401  (fixture)
from ..test_sandbox import Listener, git

pytestmark = [pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

ATTACK = r"""
import json, socket, sys, urllib.request
port = int(sys.argv[1])
report = {}
try:
    report["http"] = "ok:" + urllib.request.urlopen(f"http://internal.evil.example:{port}/", timeout=20).read().decode()
except Exception as error:
    report["http"] = "fail:" + str(getattr(error, "code", type(error).__name__))
with socket.create_connection(("127.0.0.1", 3128), timeout=20) as sock:
    sock.sendall(f"CONNECT internal.evil.example:{port} HTTP/1.1\r\n\r\n".encode())
    report["connect"] = sock.recv(200).decode(errors="replace").split("\r\n")[0]
open("report.json", "w").write(json.dumps(report))
"""


@pytest.fixture
def evil_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """`*.evil.example` resolves to 127.0.0.1 (what an attacker's own DNS for a listed wildcard can answer)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".evil.example"):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    from agentqueue.sandbox import gate
    monkeypatch.setattr(gate, "resolve", getaddrinfo, raising=False)


async def test_a_listed_wildcard_resolving_to_loopback_is_refused(services: Services, git_env: Path,  # noqa: F811
                                                                  evil_dns: None) -> None:
    listener = Listener()  # a loopback service no run may reach
    try:
        services.projects.create("Demo")
        repo = services.repos.add("demo", "init", name="app").checkout_path
        services.policies.edit(project_id="demo", preset="autonomous")
        (services.home / "policy.toml").write_text(
            (services.home / "policy.toml").read_text() + '\n[projects.demo.sandbox]\nhosts = ["*.evil.example"]\n')
        services.agents.create("attacker", "command",
                               command=shlex.join([sys.executable, "-c", ATTACK, str(listener.port)]))
        task = services.tasks.create("demo", "Rebind", "reach loopback", repo_id="app", max_retries=0)
        await run_until(engine_for(services), lambda: services.tasks.get(task.id).status in (
            "COMPLETED", "BLOCKED", "FAILED"))
        assert services.tasks.get(task.id).status == "COMPLETED", services.tasks.get(task.id).reason
        report = json.loads(git(repo, "show", "main:report.json"))
        assert report["http"] == "fail:403" and report["connect"].startswith("HTTP/1.1 403"), report
        assert listener.hits == 0
        log = (services.home / "logs" / "tasks" / f"{task.id}.log").read_text()
        assert f"refused a connection to internal.evil.example:{listener.port}: it resolves to 127.0.0.1" in log
    finally:
        listener.close()


def test_the_gate_keeps_literal_loopback_entries_and_refuses_private_answers(tmp_path: Path, evil_dns: None) -> None:
    """The gate alone: a literal `127.0.0.1:PORT` entry still reaches loopback; the same port by a wildcard name, or
    a name whose answer is private, is refused; a refusal says why."""
    from agentqueue.sandbox.gate import NetworkGate
    from agentqueue.sandbox.rules import Endpoint, SandboxRules

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    denied: list[tuple[str, int, str]] = []
    rules = SandboxRules(tmp_path, True, endpoints=(Endpoint.parse(f"127.0.0.1:{port}"),
                                                     Endpoint.parse("*.evil.example")))
    gate = NetworkGate(rules, lambda host, p, why: denied.append((host, p, why)))

    def ask(target: str) -> bytes:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(gate.folder / "proxy.sock"))
            sock.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            return sock.recv(200)
    try:
        assert ask(f"127.0.0.1:{port}").startswith(b"HTTP/1.1 200")
        assert ask(f"a.evil.example:{port}").startswith(b"HTTP/1.1 403")
        assert [d[:2] for d in denied] == [("a.evil.example", port)] and "127.0.0.1" in denied[0][2]
    finally:
        gate.close()
        listener.close()
