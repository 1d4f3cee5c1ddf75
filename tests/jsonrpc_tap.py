"""A stdio relay that writes every JSON-RPC line it passes to a log: `python jsonrpc_tap.py LOG command args...`.

Put in front of an MCP server in a client's config, it shows what a real client (Claude Code) sends and gets.
Stdlib only; each log line is {"dir": "c2s"|"s2c", "message": <the parsed line>}.
"""

import json
import subprocess
import sys
import threading


def pump(source, sink, direction: str, log) -> None:  # noqa: ANN001 (binary streams)
    for line in iter(source.readline, b""):
        try:
            message = json.loads(line)
        except ValueError:
            message = line.decode(errors="replace")
        log.write(json.dumps({"dir": direction, "message": message}) + "\n")
        sink.write(line)
        sink.flush()
    sink.close()


def main() -> None:
    log = open(sys.argv[1], "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    child = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    threading.Thread(target=pump, args=(sys.stdin.buffer, child.stdin, "c2s", log), daemon=True).start()
    pump(child.stdout, sys.stdout.buffer, "s2c", log)
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
