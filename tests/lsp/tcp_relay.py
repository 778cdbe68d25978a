"""Start the real language server on a TCP port and relay this process's stdio to it, so that a
pytest-lsp client (which speaks stdio) talks to a server in TCP mode.

``python tcp_relay.py [server options...]``: runs ``python -m ddp_lint.lsp_server --tcp
127.0.0.1:<free port> [options]``, connects once the server listens, then copies stdin to the
socket and the socket to stdout until either side closes. The server's stderr passes through.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "ddp_lint.lsp_server", "--tcp", f"127.0.0.1:{port}",
                               *sys.argv[1:]], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                print("tcp_relay: the server did not listen", file=sys.stderr)
                return 2
            time.sleep(0.1)
    conn.settimeout(None)

    def upstream():
        fd = sys.stdin.buffer.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            conn.sendall(data)
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.buffer
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            out.write(data)
            out.flush()
    except OSError:
        pass
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
