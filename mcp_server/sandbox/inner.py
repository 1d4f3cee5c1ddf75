"""Runs inside the sandbox, before the agent: the loopback end of the network gate (stdlib only; `python -I -S`).

    inner.py BRIDGE PROXY_PORT [FORWARD_PORT ...] -- COMMAND ...

The sandbox has its own network namespace with only loopback. This relay listens on 127.0.0.1:PROXY_PORT
(the agent's HTTP(S)_PROXY) and on each forwarded loopback port (a local model endpoint), and carries each
connection over a Unix socket in BRIDGE to the host side, which decides what may pass. It listens before
the command starts, passes signals on, and exits with the command's status.
"""

# The C modules under socket, threading and signal: importing those three (enum, selectors) costs this relay
# ~10 ms of CPU per run, paid before the agent starts (bench/sandbox_start.py), against ~8 ms for the whole
# interpreter.
import _signal
import _socket
import _thread
import os
import sys


def pump(source: _socket.socket, target: _socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock, how in ((target, _socket.SHUT_WR), (source, _socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def splice(client: _socket.socket, upstream: _socket.socket) -> None:
    """Copy both ways until both sides are done (the host's gate uses this too)."""
    back_done = _thread.allocate_lock()
    back_done.acquire()

    def back() -> None:
        try:
            pump(upstream, client)
        finally:
            back_done.release()

    _thread.start_new_thread(back, ())
    pump(client, upstream)
    back_done.acquire()  # the other direction is done too


def relay(client: _socket.socket, path: str) -> None:
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
        splice(client, upstream)
    except OSError:
        pass
    finally:
        client.close()
        upstream.close()


def serve(listener: _socket.socket, path: str) -> None:
    while True:
        try:
            fd, _ = listener._accept()  # the C socket's accept: a new descriptor (close-on-exec) and the address
        except OSError:
            return
        _thread.start_new_thread(relay, (_socket.socket(fileno=fd), path))


def listen(port: int) -> list[_socket.socket]:
    found = []
    for family, host in ((_socket.AF_INET, "127.0.0.1"), (_socket.AF_INET6, "::1")):
        sock = _socket.socket(family, _socket.SOCK_STREAM)
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            continue
        sock.listen(64)
        found.append(sock)
    return found


def main(argv: list[str]) -> int:
    split = argv.index("--")
    bridge, proxy_port, *forwards = argv[:split]
    command = argv[split + 1:]
    routes = [(int(proxy_port), os.path.join(bridge, "proxy.sock"))]
    routes += [(int(port), os.path.join(bridge, f"port-{port}.sock")) for port in forwards]
    for port, path in routes:
        for listener in listen(port):
            _thread.start_new_thread(serve, (listener, path))
    try:  # posix_spawnp, not subprocess: its imports cost this relay's start ~10 ms
        pid = os.posix_spawnp(command[0], command, dict(os.environ))
    except OSError as error:
        print(f"agentqueue sandbox: cannot start {command[0]}: {error}", file=sys.stderr)
        return 127
    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    return os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
