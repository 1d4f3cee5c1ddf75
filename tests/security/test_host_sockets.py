"""L2 (issue 33): a host Unix socket in a folder the sandbox shows. A read-only mount does not stop connect(), so a
host process listening there (a dev server, a database, another tool's agent) took a run's connection. A hostile
`command` agent, run by the real engine inside the sandbox, tries every socket the test's host side listens on: in a
folder the sandbox shows read-only, in a folder it shows writable (the shared caches), a datagram socket; none may
take anything, while the daemon's own socket (which every agent is given for its toolset) still answers."""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentqueue import paths
from agentqueue.sandbox import bwrap, host_sockets
from agentqueue.sandbox.rules import SandboxRules
from agentqueue.services import Services

from ..engine_runs import engine_for, run_until
from ..git_fixtures import git_env  # noqa: F401  (fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

# Each target is tried as a stream connection (and a request read back) or a datagram; what happened is printed.
ATTACK = r"""
import errno, json, socket, sys
report = {}
for name, (path, kind) in json.loads(sys.argv[1]).items():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM if kind == "stream" else socket.SOCK_DGRAM)
    s.settimeout(10)
    try:
        if kind == "stream":
            s.connect(path)
            s.sendall(b"from the sandbox")
            report[name] = "connected:" + s.recv(64).decode(errors="replace")
        else:
            s.sendto(b"from the sandbox", path)
            report[name] = "sent"
    except OSError as error:
        report[name] = "refused:" + errno.errorcode.get(error.errno or 0, str(error))
    finally:
        s.close()
print(json.dumps(report), flush=True)
"""


class Host:
    """Unix sockets on the host side: stream listeners that count what they accept, datagram sockets that count what
    they receive."""

    def __init__(self) -> None:
        self.got: dict[str, list[bytes]] = {}
        self._sockets: list[tuple[socket.socket, str]] = []

    def listen(self, name: str, path: Path, kind: str = "stream") -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM if kind == "stream" else socket.SOCK_DGRAM)
        sock.bind(str(path))
        if kind == "stream":
            sock.listen(8)
        self.got[name] = []
        self._sockets.append((sock, str(path)))
        threading.Thread(target=self._serve, args=(name, sock, kind), daemon=True).start()

    def _serve(self, name: str, sock: socket.socket, kind: str) -> None:
        while True:
            try:
                if kind == "stream":
                    conn, _ = sock.accept()
                    with conn:
                        conn.settimeout(10)
                        self.got[name].append(conn.recv(64))
                        conn.sendall(b"host answered")
                else:
                    self.got[name].append(sock.recv(64))
            except OSError:
                return

    def close(self) -> None:
        """Listening stops; the files stay until the session ends (`shown_root`): a socket file removed while another
        sandbox is starting fails that start (docs/design.md, "Host sockets"), and tests run side by side."""
        for sock, _path in self._sockets:
            sock.close()


@pytest.fixture(scope="session")
def shown_root() -> Iterator[Path]:
    """A fresh folder the sandbox shows read-only: under the person's real home (the test's HOME is a temporary one)
    or the working folder, never under /tmp, /var/tmp or /run (private inside). Removed when the session ends."""
    for base in (Path(pwd.getpwuid(os.getuid()).pw_dir), Path.cwd()):
        real = Path(os.path.realpath(base))
        if (os.access(real, os.W_OK) and not any(real.is_relative_to(p) for p in bwrap.PRIVATE)
                and len(str(real)) < 60):
            folder = Path(tempfile.mkdtemp(prefix=".aq-l2-", dir=real))
            yield folder
            shutil.rmtree(folder, ignore_errors=True)
            return
    pytest.skip("no writable folder outside /tmp, /var/tmp and /run to listen in")


@pytest.fixture
def shown(shown_root: Path) -> Path:
    return Path(tempfile.mkdtemp(prefix="t", dir=shown_root))


@pytest.fixture
def host() -> Iterator[Host]:
    found = Host()
    yield found
    found.close()


def _report(services: Services, task_id: str) -> dict[str, str]:
    log = paths.task_log(services.home, task_id).read_text(errors="replace")
    line = next((line for line in log.splitlines() if line.startswith("{")), None)
    assert line is not None, log[-3000:]
    return json.loads(line)


async def test_a_host_socket_the_run_can_see_takes_no_connection(services: Services, git_env: Path,  # noqa: F811
                                                                 shown: Path, host: Host) -> None:
    cache = git_env / ".cache" / "l2"  # a shared cache every run may write: bound back writable
    cache.mkdir(parents=True)
    targets = {"readonly": (shown / "dev.sock", "stream"),
               "readonly_dgram": (shown / "log.sock", "dgram"),
               "writable": (cache / "tool.sock", "stream")}
    for name, (path, kind) in targets.items():
        host.listen(name, path, kind)
    # The daemon's socket, which the engine hands every agent for its toolset: a stand-in listens there.
    daemon = paths.socket_path(services.home)
    daemon.parent.mkdir(parents=True, exist_ok=True)
    host.listen("daemon", daemon)
    targets["daemon"] = (daemon, "stream")

    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.policies.edit(project_id="demo", preset="autonomous")
    argv = [sys.executable, "-c", ATTACK, json.dumps({k: (str(p), kind) for k, (p, kind) in targets.items()})]
    services.agents.create("attacker", "command", command=shlex.join(argv))
    task = services.tasks.create("demo", "Sockets", "connect to what you can", repo_id="app", max_retries=0)
    await run_until(engine_for(services), lambda: services.tasks.get(task.id).status in ("COMPLETED", "FAILED",
                                                                                          "BLOCKED"))
    report = _report(services, task.id)
    reached = {f"{name} ({targets[name][0]})": (report[name], host.got[name])
               for name in ("readonly", "readonly_dgram", "writable")
               if not report[name].startswith("refused:") or host.got[name]}
    assert not reached, f"the run reached host sockets (what it saw, what the host got): {reached}"
    assert report["daemon"] == "connected:host answered", report  # the toolset's socket is still the run's
    assert host.got["daemon"] == [b"from the sandbox"]


def test_the_sockets_closed_are_those_the_run_would_see(tmp_path: Path, shown: Path, host: Host,
                                                        request: pytest.FixtureRequest) -> None:
    """Unit level: which listening sockets build_argv covers with /dev/null; both ways of listing them agree."""
    private = Path(tempfile.mkdtemp(prefix="aq-l2-", dir="/tmp"))  # private inside: nothing to close
    request.addfinalizer(lambda: shutil.rmtree(private, ignore_errors=True))
    workdir = tmp_path / "wt"  # bound back (under /tmp too, most often): its sockets are the run's to see
    bridge = tmp_path / "br"
    for folder in (workdir, bridge):
        folder.mkdir()
    host.listen("shown", shown / "a.sock")
    host.listen("dgram", shown / "d.sock", "dgram")
    host.listen("private", private / "p.sock")
    host.listen("workdir", workdir / "w.sock")
    host.listen("bridge", bridge / "proxy.sock")
    host.listen("given", shown / "given.sock")
    with socket.socket(socket.AF_UNIX) as stale, socket.socket(socket.AF_UNIX) as abstract:
        stale.bind(str(shown / "stale.sock"))  # bound, never listening: takes nothing
        abstract.bind(b"\0aq-l2-abstract")
        abstract.listen(1)
        listed = host_sockets.bound()
        seen = {str(shown / "a.sock"), str(shown / "d.sock"), str(workdir / "w.sock")}
        assert seen <= listed
        assert not any("aq-l2-abstract" in p for p in listed) and str(shown / "stale.sock") not in listed
        assert seen <= host_sockets._table()  # the fallback where the kernel has no unix_diag: a superset

        rules = SandboxRules(workdir=workdir, workdir_writable=True, network="allowlist",
                             sockets=(shown / "given.sock",))
        argv = bwrap.build_argv(rules, ["true"], bridge)
    closed = {argv[i + 2] for i, a in enumerate(argv[:-2]) if a == "--ro-bind" and argv[i + 1] == "/dev/null"}
    assert seen <= closed, closed
    assert not closed & {str(private / "p.sock"), str(bridge / "proxy.sock"), str(shown / "given.sock"),
                         str(shown / "stale.sock")}, closed
    assert argv.index(str(workdir / "w.sock")) > argv.index(str(workdir)), "closed after the worktree's bind"


def test_a_socket_shown_through_a_second_mount_is_closed_there_too(tmp_path: Path) -> None:
    """A bind mount shows the same socket file under a second name; host_sockets finds it from mountinfo. Played in a
    mount namespace of bubblewrap's own (no root needed): the folder is bound at a second place, and the lookup runs
    inside."""
    folder = tmp_path / "real"
    folder.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "s.sock"))
    alias = tmp_path / "alias"
    probe = ("import os, json, sys; from agentqueue.sandbox import host_sockets as h; p = sys.argv[1]; "
             "print(json.dumps(h.names(p, os.lstat(p), h._mounts())))")
    argv = [bwrap.find_bwrap() or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--bind", str(tmp_path), str(tmp_path), "--bind", str(folder), str(alias),
            "--", sys.executable, "-c", probe, str(folder / "s.sock")]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    finally:
        sock.close()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [str(folder / "s.sock"), str(alias / "s.sock")]
