"""Runs inside the sandbox, before the agent: the loopback end of the network gate (stdlib only; `python -I -S`).

    inner.py BRIDGE PROXY_PORT [FORWARD_PORT ...] -- COMMAND ...

The sandbox has its own network namespace with only loopback. This relay listens on 127.0.0.1:PROXY_PORT
(the agent's HTTP(S)_PROXY) and on each forwarded loopback port (a local model endpoint), and carries each
connection over a Unix socket in BRIDGE to the host side, which decides what may pass. It listens before
the command starts, passes signals on, and exits with the command's status.
"""

import os
import signal
import socket
import sys
import threading


def pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def splice(client: socket.socket, upstream: socket.socket) -> None:
    """Copy both ways until both sides are done (the host's gate uses this too)."""
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()


def relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
        splice(client, upstream)
    except OSError:
        pass
    finally:
        client.close()
        upstream.close()


def serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=relay, args=(client, path), daemon=True).start()


def listen(port: int) -> list[socket.socket]:
    found = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
            threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    try:  # posix_spawnp, not subprocess: its imports cost this relay's start ~10 ms
        pid = os.posix_spawnp(command[0], command, dict(os.environ))
    except OSError as error:
        print(f"agentqueue sandbox: cannot start {command[0]}: {error}", file=sys.stderr)
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    return os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
