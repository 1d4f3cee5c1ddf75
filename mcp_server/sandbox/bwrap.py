"""bubblewrap's arguments for a run, and a probe that it can start here.

The whole system is mounted read-only, with a private /tmp and /run (no host sockets: no ssh-agent,
no Docker; each a tmpfs, which is host RAM, capped at `[sandbox] tmp_size` where bubblewrap has `--size`, 0.8 on),
a private /dev and /proc, no capabilities (even as root), its own PID and IPC namespaces
and, unless the network is open, its own network namespace with only loopback. Then, in order, the
secrets are covered by empty folders, and the few writable places (the worktree, the CLI's state) and
the daemon's socket are bound back in. Binds follow the real paths, so a symlink in the repo cannot
lead a write or a read anywhere the sandbox does not already show. Last, every host socket the run would still see
gets /dev/null bound over it (a read-only mount does not stop connect(): host_sockets.py).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import host_sockets
from .rules import DEFAULT_TMP_SIZE, SandboxRules

INNER = Path(__file__).with_name("inner.py")
PROXY_PORT = 3128  # inside the sandbox's own network namespace: nothing else can be listening there
PRIVATE = (Path("/tmp"), Path("/var/tmp"), Path("/run"))  # empty inside: what a run needs there is bound back
MASKS_DIR = "masks"


class SandboxUnavailable(RuntimeError):
    """No sandbox can start on this machine; the message says why and what to do."""


def find_bwrap() -> str | None:
    """AGENTQUEUE_BWRAP (a path; one that does not exist means "none here"), else PATH, else the usual places."""
    chosen = os.environ.get("AGENTQUEUE_BWRAP", "").strip()
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    return shutil.which("bwrap") or next(
        (p for p in ("/usr/bin/bwrap", "/usr/local/bin/bwrap") if os.access(p, os.X_OK)), None)


def _base(bwrap: str, network: str, tmp_size: int = DEFAULT_TMP_SIZE) -> list[str]:
    # No --new-session: every caller starts bubblewrap in a session of its own (start_new_session), so nothing inside
    # has a controlling terminal to push keystrokes into (TIOCSTI), and that one session holds the whole run, whose CPU
    # priority is then lowered as one (services/cpu_priority.py; a second session inside would escape it).
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            *_tmpfs("/tmp", tmp_size), *_tmpfs("/run", tmp_size), *_tmpfs("/var/tmp", tmp_size)]
    if network != "open":
        argv.append("--unshare-net")
    elif os.path.isdir("/run/systemd/resolve"):  # /etc/resolv.conf often points there
        argv += ["--ro-bind", "/run/systemd/resolve", "/run/systemd/resolve"]
    return argv


def _tmpfs(target: str, size: int) -> list[str]:
    """A private tmpfs of at most `size` bytes: it is host RAM, so a run that fills it gets ENOSPC, not the host."""
    return ["--size", str(size), "--tmpfs", target] if sizes_tmpfs() else ["--tmpfs", target]


@functools.lru_cache(maxsize=1)
def sizes_tmpfs() -> bool:
    """Whether this bubblewrap caps a tmpfs (`--size`, since 0.8.0); asked once per process."""
    bwrap = find_bwrap()
    if bwrap is None:
        return False
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in done.stdout + done.stderr


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def build_argv(rules: SandboxRules, argv: list[str], bridge: Path | None) -> list[str]:
    """bubblewrap around `argv`; `bridge` is the run's private folder: the network gate's sockets, mask files."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise SandboxUnavailable(no_bwrap_message())
    out = _base(bwrap, rules.network, rules.tmp_size)
    for path in rules.readable:  # before the secrets are covered: a program folder never uncovers one
        if path.exists():
            out += ["--ro-bind", str(path), str(path)]
    for secret in rules.hidden:
        real = Path(os.path.realpath(secret))
        if real.is_dir():  # left writable: the worktree may be bound inside it; what is written there vanishes
            out += _tmpfs(str(real), rules.tmp_size)
        elif real.exists():
            out += ["--ro-bind", "/dev/null", str(real)]
    workdir = Path(os.path.realpath(rules.workdir))
    out += ["--bind" if rules.workdir_writable else "--ro-bind", str(workdir), str(workdir)]
    out += _state_binds(rules, workdir)
    for sock in rules.sockets:
        if _exists(sock):
            out += ["--bind", str(sock), str(sock)]
    if bridge is not None and rules.network == "allowlist":
        out += ["--bind", str(bridge), str(bridge)]
    for path in _host_sockets(rules, workdir, bridge):  # after every bind that shows the host's files, issue 33 L2
        out += ["--ro-bind", "/dev/null", path]
    for target, content in rules.masks.items():
        out += _mask(target, content, bridge)
    out += ["--chdir", str(workdir), "--"]
    if rules.network == "allowlist":
        assert bridge is not None, "an allowlist needs the gate's bridge folder"
        relay = [sys.executable, "-I", "-S", str(INNER), str(bridge), str(PROXY_PORT), *map(str, rules.forwards), "--"]
        return out + relay + argv
    return out + argv


def _state_binds(rules: SandboxRules, workdir: Path) -> list[str]:
    """The writable folders besides the worktree, then the frozen ones inside them (the later bind wins)."""
    out: list[str] = []
    for path in rules.writable:
        real = Path(os.path.realpath(path))
        if real.exists() and real != workdir:
            out += ["--bind", str(real), str(real)]
    for path in rules.frozen:
        real = Path(os.path.realpath(path))
        if real.exists():
            out += ["--ro-bind", str(real), str(real)]
    return out


def _host_sockets(rules: SandboxRules, workdir: Path, bridge: Path | None) -> list[str]:
    """The host's sockets this run would see (a read-only mount does not stop connect()), but the daemon's own when
    the run is given it and the run's bridge to the gate: each is closed with /dev/null bound over it."""
    shown = [workdir, *rules.writable, *rules.readable, *rules.frozen]
    reachable = [*rules.sockets, *([bridge] if bridge is not None else [])]
    return host_sockets.to_close(shown, [*PRIVATE, Path("/dev"), *rules.hidden], reachable)  # /dev: bwrap's own


def _mask(target: Path, content: bytes | None, bridge: Path | None) -> list[str]:
    """Show `target` with `content` (None: empty, as if absent from the default branch), read-only, for this run."""
    if target.is_symlink() or not _exists(target):
        return []  # a planted link is covered by the worktree's own rules; nothing there, nothing to cover
    if target.is_dir():
        return ["--tmpfs", str(target), "--remount-ro", str(target)]
    if bridge is None:
        raise SandboxUnavailable("A masked file needs the run's bridge folder.")
    folder = bridge / MASKS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    copy = folder / f"{len(list(folder.iterdir()))}"
    copy.write_bytes(content or b"")  # a regular file: a bound /dev/null is unreadable (bubblewrap mounts nodev)
    return ["--ro-bind", str(copy), str(target)]


def no_bwrap_message() -> str:
    return ("No sandbox can start: bubblewrap (`bwrap`) is not installed. Install it (Debian/Ubuntu: "
            "`sudo apt-get install bubblewrap`; Fedora: `sudo dnf install bubblewrap`), or set `[sandbox] "
            "required = false` in config.toml to run agents unsandboxed (doctor will warn).")


@functools.lru_cache(maxsize=1)
def probe() -> str | None:
    """None when bubblewrap starts a sandbox here (checked for real, once per process); else why not."""
    if not sys.platform.startswith("linux"):
        return (f"No sandbox can start: AgentQueue sandboxes runs with bubblewrap on Linux, and {sys.platform} has "
                "none yet (macOS sandbox-exec is designed, not built). Set `[sandbox] required = false` in "
                "config.toml to run agents unsandboxed.")
    bwrap = find_bwrap()
    if bwrap is None:
        return no_bwrap_message()
    probe = "touch /etc/.agentqueue-probe 2>/dev/null && exit 3; exit 0"
    argv = _base(bwrap, "allowlist") + ["--", "/bin/sh", "-c", probe]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"No sandbox can start: bubblewrap failed to run ({error})."
    if done.returncode == 3:
        return "No sandbox can start: bubblewrap ran, but the system was writable inside it."
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return (f"No sandbox can start: bubblewrap failed ({detail[0][:300]}). Unprivileged user namespaces may be "
                "off (`sysctl kernel.unprivileged_userns_clone=1`, or an AppArmor rule for bwrap on Ubuntu 24.04), "
                "or set `[sandbox] required = false` in config.toml to run agents unsandboxed.")
    return None
