"""`agentqueue mcp`: the stdio plugin MCP clients launch. Stdlib only, so it starts in milliseconds.

It connects to the daemon of AGENTQUEUE_HOME (starting it detached if none answers) and copies bytes
both ways: client stdin -> daemon socket -> client stdout. The daemon serves the connection as a
full MCP session; this process only looks at messages to survive a daemon restart: it remembers
the client's `initialize` handshake and, when the daemon goes away while the client is still
there, reconnects (starting a daemon if needed), replays the handshake and swallows its answer,
so the client keeps its session across `restart_daemon` (only then: after `agentqueue stop` or a
crash the plugin exits like any server that went away).

Every client launch pays this module's imports, so it imports only what relaying needs: it holds the
home as a str (`paths.home_dir`), so `pathlib` is loaded only on the rare paths (starting a daemon,
a restart, an error), as is `subprocess`; `typing` only for type checkers. It uses the interpreter's
built-in `_socket` and `_thread` rather than `socket` (whose enum conversions and `selectors` cost a
launch ~2 ms) and `threading`, and reads JSON with `wire.loads` (no `json` package on a launch).
Tests check which modules a launch loads.
"""

from __future__ import annotations

import _signal
import _socket
import _thread
import os
import sys
import time

from .. import paths
from ..line_splitter import LineSplitter
from ..wire import dumps, loads, refusal

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read this name)
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

CONNECT_TIMEOUT_S = float(os.environ.get("AGENTQUEUE_CONNECT_TIMEOUT", "30"))
RESTART_WAIT_S = max(CONNECT_TIMEOUT_S, 300.0)  # how long a restarting daemon that still lives is waited for


def _connect(sock_path: str | Path) -> _socket.socket | None:
    """A connection to the daemon's socket, or None when nothing listens (a `_socket.socket`: for `makefile`
    and the like, wrap it with `socket.socket(fileno=sock.detach())`)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(str(sock_path))
    except OSError:
        sock.close()
        return None
    return sock


class DaemonStartError(RuntimeError):
    """The daemon could not be reached or died at start; the message says why and what to do."""


def start_daemon(home: str | Path) -> tuple[subprocess.Popen[bytes], int]:
    """Spawn `agentqueue serve` in its own session so it outlives this plugin and the client.

    It runs from the home directory with the caller's cwd kept off sys.path (`-P`): a project folder
    named like one of our packages can never shadow AgentQueue. Returns the process and where its
    output starts in `logs/daemon.out`, so a daemon that dies at start can be quoted at once.
    """
    import subprocess  # only when no daemon answers: most launches never need it

    log_dir = paths.logs_dir(home)
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path = log_dir / "daemon.out"
    with open(out_path, "ab") as out:
        offset = out.tell()
        process = subprocess.Popen(
            paths.self_command("serve"), cwd=home,
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True,
            env={**os.environ, "AGENTQUEUE_HOME": str(home)},
        )
    return process, offset


def _start_output(home: str | Path, offset: int) -> str:
    """What a daemon that died at start printed (its last lines, without a traceback's frames)."""
    try:
        with open(paths.logs_dir(home) / "daemon.out", "rb") as out:
            out.seek(offset)
            text = out.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if any(line.startswith("Traceback") for line in lines):
        lines = lines[-1:]  # an unexpected crash: its last line names the exception
    return "\n".join(lines[-5:])


def _marker_pid(home: str | Path) -> int | None:
    """The pid a restarting daemon wrote into its restart marker (re-executing keeps it)."""
    try:
        return int(paths.restart_marker(home).read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` runs: not gone, and not a zombie (a daemon this plugin started and never waited for)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill's answer stands


def connect_or_start(home: str | Path, timeout: float = CONNECT_TIMEOUT_S,
                     progress: Callable[[str], None] | None = None) -> _socket.socket:
    """A connection to the home's daemon, starting one if none answers (`progress` hears what happens)."""
    sock_path = paths.socket_file(home)
    sock = _connect(sock_path)
    if sock is not None:
        return sock
    if os.environ.get("AGENTQUEUE_NO_START"):
        # A task agent's own connection: it works for the daemon that runs it and never starts another.
        raise DaemonStartError(f"No AgentQueue daemon is running for {home}, and AGENTQUEUE_NO_START is set.")
    if progress:
        progress(f"Starting the AgentQueue daemon for {home}…")
    note(home, "no daemon answered: starting one")
    started = time.monotonic()
    process, offset = start_daemon(home)
    deadline = started + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        sock = _connect(sock_path)
        if sock is not None:
            if progress:
                progress(f"The daemon is up ({time.monotonic() - started:.1f} s).")
            return sock
        code = process.poll()
        # Losing a start race to another daemon is fine: keep trying to connect to the winner.
        if code is not None and code != paths.EXIT_ALREADY_RUNNING:
            said = _start_output(home, offset)
            raise DaemonStartError(
                f"The AgentQueue daemon for {home} exited at start (status {code})"
                + (f": {said}" if said else ".")
                + f" Full output: {paths.logs_dir(home) / 'daemon.out'}.")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.1)
    raise DaemonStartError(
        f"Could not reach the AgentQueue daemon for {home} within {timeout:.0f} s (socket {sock_path}). "
        f"See {paths.logs_dir(home) / 'daemon.out'} and agentqueue.log there."
    )


MODERN_KEY = b'"io.modelcontextprotocol/protocolVersion"'  # in `_meta` of every request of the 2026 era only


def _method(line: bytes) -> tuple[str | None, object]:
    if b'"method"' not in line:
        return None, None
    try:
        message = loads(line)
    except ValueError:
        return None, None
    return (message.get("method"), message.get("id")) if isinstance(message, dict) else (None, None)


def note(home: str | Path, message: str) -> None:
    """One line in logs/plugin.log (stdlib only; the plugin has no logging setup)."""
    try:
        with open(paths.logs_dir(home) / "plugin.log", "a", encoding="utf-8") as log:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {message}\n")
    except OSError:
        pass


def _say(message: str) -> None:
    """Progress while a client waits on the first start: stderr is what clients keep in their logs."""
    print(f"agentqueue: {message}", file=sys.stderr, flush=True)


class Flag:
    """A flag threads set and read (threading.Event's `set`/`is_set`/`wait` on a `_thread` lock, without
    importing `threading`)."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self) -> None:
        if self._lock.locked():
            try:
                self._lock.release()
            except RuntimeError:
                pass  # another thread set it first

    def is_set(self) -> bool:
        return not self._lock.locked()

    def wait(self, timeout: float) -> bool:
        """Whether the flag was set within `timeout` seconds."""
        if self._lock.acquire(timeout=timeout):
            self._lock.release()
            return True
        return False


def _thread_of(target: Callable[[], None]) -> None:
    """Run `target` in a daemon thread (every exit is `os._exit`, so nothing waits for it), with Ctrl-C and the
    stop signals blocked: the kernel may hand a signal to any thread that takes it, and one taken by this thread
    leaves the main thread asleep in `recv`, where Python never raises KeyboardInterrupt."""
    signals = {_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP}
    before = _signal.pthread_sigmask(_signal.SIG_BLOCK, signals)  # inherited by the new thread
    try:
        _thread.start_new_thread(target, ())
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, before)  # a signal that came meanwhile is the main thread's


class Pipe:
    def __init__(self, home: str | Path, options: dict[str, Any] | None = None) -> None:
        self.home = home
        # Sent first on every connection (restarts too): what this client limits itself to.
        if options:
            from ..server.toolsets import encode_preamble

            self.preamble = encode_preamble(options)
        else:
            self.preamble = b""
        self.sock = connect_or_start(home, progress=_say)
        self.connected_at = time.time()
        if self.preamble:
            self.sock.sendall(self.preamble)
        self.lock = _thread.allocate_lock()
        self.handshake: list[bytes] = []  # the client's initialize request and initialized notification
        # A client of the 2026 era carries its protocol version in every request and has no handshake to replay: a
        # replayed `initialize` (one it sent after its `server/discover` timed out on a slow start, refused then)
        # would make the new connection a handshake-era one that refuses its requests.
        self.modern = False
        self.client_gone = Flag()
        # While the daemon restarts, the client's messages wait here and go to the new daemon.
        self.backlog: list[bytes] | None = None
        # stdout is shared: the daemon's answers (whole lines only) and the plugin's own error answers.
        self.out_lock = _thread.allocate_lock()
        self.out_partial = False  # the last bytes written ended mid-line
        self.out_waiting: list[bytes] = []  # own answers held until the daemon's current line is complete

    def send(self, data: bytes) -> None:
        with self.lock:
            if self.backlog is not None:
                self.backlog.append(data)
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self.backlog = [data]  # the daemon is going away; the reader decides what happens next

    def pump_stdin(self) -> None:
        """Client -> daemon, a line at a time; at EOF half-close so the daemon answers and hangs up."""
        stdin = sys.stdin.buffer
        try:
            for line in iter(stdin.readline, b""):
                forward, answer = refusal(line)
                if answer is not None:
                    self.write_out(answer, own=True)
                if not forward:
                    continue
                if not self.modern and MODERN_KEY in line and _method(line)[0] not in (None, "initialize"):
                    self.modern = True
                method, _ = _method(line) if len(self.handshake) < 2 and not self.modern else (None, None)
                if method in ("initialize", "notifications/initialized"):
                    self.handshake.append(line if line.endswith(b"\n") else line + b"\n")
                self.send(line)
        except OSError:
            pass
        finally:
            self.client_gone.set()
            with self.lock:
                try:
                    self.sock.shutdown(_socket.SHUT_WR)
                except OSError:
                    pass

    def _daemon_restarting(self) -> bool:
        """Whether the lost connection is a restart (reconnect) rather than a stop or crash (end the session).

        The marker says a restart is under way; the record says one finished after this connection
        was made, for when this plugin noticed the drop only after the new daemon was already up.
        """
        if paths.restart_marker(self.home).exists():
            return True
        try:
            finished = float(paths.restart_record(self.home).read_text())
        except (OSError, ValueError):
            return False
        return finished >= self.connected_at

    def _await_restarted_daemon(self) -> _socket.socket:
        """The daemon that is re-executing itself, once it listens again.

        Starting another daemon meanwhile would race the restarting one for the lock; the loser
        could take the home over later with nobody left to stop it. So while the restarting process
        lives it is waited for (up to RESTART_WAIT_S, however slow the machine); only when the marker
        is gone, or its process died, and nothing listens (the restart failed) does the plugin start a
        daemon itself.
        """
        started = time.monotonic()
        while paths.restart_marker(self.home).exists():
            sock = _connect(paths.socket_file(self.home))
            if sock is not None:
                return sock
            waited = time.monotonic() - started
            restarting = _marker_pid(self.home)
            # A restarting daemon that still lives is waited for (a busy machine can take longer than a first
            # start's timeout to re-execute); one that died, or left no pid, only as long as a first start.
            if restarting is None or not alive(restarting):
                if waited >= CONNECT_TIMEOUT_S:
                    break
            elif waited >= RESTART_WAIT_S:
                raise DaemonStartError(
                    f"The AgentQueue daemon for {self.home} (pid {restarting}) has been restarting for "
                    f"{waited:.0f} s and does not answer. See {paths.logs_dir(self.home) / 'agentqueue.log'}; "
                    "`agentqueue status` tells whether it came up, then reconnect this client.")
            time.sleep(0.05)
        return connect_or_start(self.home)

    def reconnect(self) -> bytes | None:
        """A new connection with the handshake replayed, then the held messages; returns the id to swallow."""
        note(self.home, "daemon restarting: reconnecting")
        with self.lock:
            if self.backlog is None:
                self.backlog = []
        try:
            sock = self._await_restarted_daemon()
        except DaemonStartError as error:
            note(self.home, f"could not reconnect: {error}")
            raise SystemExit(1) from None
        swallow = None
        with self.lock:
            self.sock.close()
            self.sock = sock
            self.connected_at = time.time()
            if self.preamble:
                sock.sendall(self.preamble)
            replayed = [] if self.modern else self.handshake
            for line in replayed:
                method, message_id = _method(line)
                if method == "initialize":
                    swallow = dumps(message_id).encode()
                sock.sendall(line)
            held = [line for line in self.backlog or [] if line not in self.handshake]
            for line in held:
                sock.sendall(line)
            self.backlog = None
            if self.client_gone.is_set():
                sock.shutdown(_socket.SHUT_WR)
        note(self.home, f"reconnected ({'2026 era' if self.modern else 'handshake era'}); replayed {len(replayed)} "
                        f"handshake and {len(held)} held message(s)")
        return swallow

    def pump_daemon(self) -> None:
        swallow: bytes | None = None
        lines = LineSplitter()  # the daemon's lines, split only while an answer is to be swallowed
        while True:
            with self.lock:
                sock = self.sock
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.lock:
                    if self.backlog is None:
                        self.backlog = []  # hold what the client sends from now on
                if self.client_gone.is_set() or not self._daemon_restarting():
                    return  # the client left, or the daemon stopped for good: end the session
                time.sleep(0.2)  # a restarting daemon needs a moment to let go of its lock
                swallow = self.reconnect()
                lines = LineSplitter()
                continue
            if swallow is not None:
                # Drop the daemon's answer to the replayed initialize; pass everything else through.
                kept = []
                for line in lines.feed(chunk):
                    if swallow is not None and b'"result"' in line and _answer_id(line) == swallow:
                        swallow = None
                        continue
                    kept.append(line + b"\n")
                chunk = b"".join(kept) + (lines.rest() if swallow is None else b"")
            if chunk:
                self.write_out(chunk)

    def write_out(self, data: bytes, own: bool = False) -> None:
        """Write to the client; an answer of our own never lands inside one of the daemon's lines."""
        stdout = sys.stdout.buffer
        with self.out_lock:
            if own and self.out_partial:
                self.out_waiting.append(data)
                return
            stdout.write(data)
            if not own:
                self.out_partial = not data.endswith(b"\n")
                if not self.out_partial and self.out_waiting:
                    stdout.write(b"".join(self.out_waiting))
                    self.out_waiting.clear()
            stdout.flush()


def _answer_id(line: bytes) -> bytes | None:
    try:
        return dumps(loads(line).get("id")).encode()
    except (ValueError, AttributeError):
        return None


TTY_HELP = """\
This is `agentqueue mcp`, AgentQueue's stdio MCP server: MCP clients (Claude Code, Claude Desktop,
Cursor, VS Code) launch it and speak JSON-RPC on its stdin and stdout. Nothing here is for typing.

  agentqueue install claude-code   add AgentQueue to a client (also claude-desktop, cursor, vscode)
  agentqueue status                see the queue
  agentqueue --help                every command

Connected to the daemon for {home}; waiting for JSON-RPC on stdin. Ctrl-C or Ctrl-D exits.
"""


def refuse_client(message: str) -> None:
    """Tell the client why we can't serve: on stderr (client logs) and as the error answer to its first request."""
    print(f"agentqueue: {message}", file=sys.stderr, flush=True)
    if sys.stdin.isatty():
        return
    ready = Flag()
    first: list[bytes] = []

    def read_first_request() -> None:
        for line in iter(sys.stdin.buffer.readline, b""):
            method, message_id = _method(line)
            if method is not None and message_id is not None:
                first.append(dumps(message_id).encode())
                break
        ready.set()

    _thread_of(read_first_request)
    if ready.wait(timeout=2) and first:
        answer = {"jsonrpc": "2.0", "id": loads(first[0]),
                  "error": {"code": -32603, "message": f"AgentQueue cannot start: {message}"}}
        try:
            sys.stdout.buffer.write(dumps(answer).encode() + b"\n")
            sys.stdout.flush()
        except OSError:
            pass


def cannot_use(home: str | Path, error: BaseException) -> str:
    """One sentence for a home or socket folder the plugin cannot use: which path, and how to fix it."""
    if not isinstance(error, OSError) or isinstance(error, paths.UnsafeRuntimeDir):
        return str(error)
    where = error.filename or home
    return (f"cannot use {where} ({error.strerror or error}): AgentQueue keeps its socket, database and logs in "
            f"AGENTQUEUE_HOME ({home}). Make that folder one this user can write, or set AGENTQUEUE_HOME to one.")


def main(options: dict[str, Any] | None = None) -> int:
    # Every exit goes through os._exit: the stdin thread may sit in a blocking read, and normal
    # interpreter shutdown would abort on its lock ("Fatal Python error").
    code = 0
    try:
        home = paths.home_dir()
        try:
            pipe = Pipe(home, options)
        except (DaemonStartError, paths.UnsafeRuntimeDir, OSError) as error:
            message = cannot_use(home, error)
            note(home, message)
            refuse_client(message)
            os._exit(1)
        if sys.stdin.isatty():
            print(TTY_HELP.format(home=home), file=sys.stderr, flush=True)
        _thread_of(pipe.pump_stdin)
        pipe.pump_daemon()
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    os._exit(code)
