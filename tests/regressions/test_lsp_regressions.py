"""Reproducers for language-server bugs found by tests/reliability (raw JSON-RPC over stdio, so the
exact bytes a misbehaving client sends are what the server sees)."""
from __future__ import annotations

import json
import re
import os
import select
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, scaled


class RawServer:
    def __init__(self):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.p = subprocess.Popen([sys.executable, "-m", "ddp_lint.lsp_server"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.buf = b""
        self.passed: list = []  # the raw frames response() read past on its way to the answer

    def send(self, obj) -> None:
        body = json.dumps(obj).encode()
        self.p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.p.stdin.flush()

    def response(self, msg_id, timeout: float = 10.0) -> dict:
        end = time.monotonic() + scaled(timeout)
        while time.monotonic() < end:
            while b"\r\n\r\n" in self.buf:
                head, rest = self.buf.split(b"\r\n\r\n", 1)
                n = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                if len(rest) < n:
                    break
                msg, self.buf = json.loads(rest[:n]), rest[n:]
                if msg.get("id") == msg_id and "method" not in msg:
                    return msg
                self.passed.append(head + b"\r\n\r\n" + rest[:n])
            r, _, _ = select.select([self.p.stdout], [], [], 0.1)
            if r:
                self.buf += os.read(self.p.stdout.fileno(), 1 << 16)
        raise AssertionError(f"no response to request {msg_id!r} within {timeout}s")

    def close(self) -> None:
        self.p.kill()
        self.p.wait(10)


@pytest.fixture
def server():
    s = RawServer()
    s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}})
    assert "result" in s.response(0)
    s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    yield s
    s.close()


@pytest.mark.parametrize("method,params", [
    ("textDocument/codeAction", {"textDocument": 5}),
    ("textDocument/hover", {"textDocument": {"uri": "file:///x.py"}, "position": {"line": 1e300, "character": 0}}),
    ("textDocument/hover", {"textDocument": {"uri": None}, "position": {"line": -1, "character": -5}}),
    ("workspace/executeCommand", {"command": 42}),
])
def test_request_with_malformed_params_is_answered(server, method, params):
    """pygls could not structure the params, logged it, and never answered: the client waited
    forever. Now the request gets an InvalidParams error and the server goes on."""
    server.send({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
    msg = server.response(7)
    assert msg["error"]["code"] == -32602, msg
    server.send({"jsonrpc": "2.0", "id": 8, "method": "textDocument/hover", "params": {
        "textDocument": {"uri": "file:///x.py"}, "position": {"line": 0, "character": 0}}})
    assert server.response(8)["result"] is None


PROBE = r"""
import os, signal, sys
sys.stdout = sys.stderr
from ddp_lint.lsp_server.server import create_server
srv = create_server()
def report(*_):
    os.write(2, b"FUTURES %d\n" % len(srv.protocol._request_futures))
signal.signal(signal.SIGUSR1, report)
srv.start_io(sys.stdin.buffer, os.fdopen(1, "wb"))
"""


def test_notifications_do_not_accumulate(tmp_path):
    """pygls 2.1 kept the future of every generator/coroutine notification handler (didOpen,
    didChange, didClose) in ``_request_futures`` forever: the server's memory grew ~2 KB per
    keystroke (found by bench/load_bench.py: +12 MB in 60 s of typing in 20 documents)."""
    import signal

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    s = RawServer.__new__(RawServer)
    s.p, s.buf, s.passed = p, b"", []
    try:
        s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}})
        s.response(0)
        s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        uri = (tmp_path / "a.py").as_uri()
        s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": "import torch\n"}}})
        for v in range(2, 302):
            s.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                "textDocument": {"uri": uri, "version": v}, "contentChanges": [{"range": {
                    "start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}}, "text": "x"}]}})
        s.send({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})
        s.send({"jsonrpc": "2.0", "id": 1, "method": "shutdown"})
        s.response(1)  # every notification before it has been handled
        p.send_signal(signal.SIGUSR1)
        end = time.monotonic() + scaled(30)
        err = b""
        while b"FUTURES" not in err and time.monotonic() < end:
            # the kernel may hand the signal to another thread; the handler then runs only once the
            # main thread wakes up from its event loop, so give it something to read
            s.send({"jsonrpc": "2.0", "method": "$/ddpLintPing", "params": {}})
            r, _, _ = select.select([p.stderr], [], [], 0.5)
            if r:
                err += os.read(p.stderr.fileno(), 1 << 16)
        assert b"FUTURES" in err, err[-2000:]
        n = int(err.split(b"FUTURES ")[1].split()[0])
        assert n <= 2, f"{n} futures kept after 302 notifications"
    finally:
        p.kill()
        p.wait(10)


def test_shutdown_while_the_client_has_not_answered_a_request():
    """CI, 2026-12-02: the client had not answered the server's ``workspace/configuration`` yet when
    it sent ``shutdown``. pygls cancels every pending future while iterating ``_request_futures``;
    cancelling the still-running ``initialized`` handler removed it from that dict (the cleanup in
    DdpProtocol._check_handler_result), so ``shutdown`` failed with "dictionary changed size during
    iteration", the client never sent ``exit``, and the server lived on. Now ``shutdown`` succeeds
    and ``exit`` ends the process with status 0."""
    s = RawServer()
    try:
        s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "capabilities": {"workspace": {"configuration": True}}}})
        assert "result" in s.response(0)
        s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        # wait until the server's workspace/configuration request is out (and never answer it)
        end = time.monotonic() + scaled(10)
        while b"workspace/configuration" not in s.buf and time.monotonic() < end:
            r, _, _ = select.select([s.p.stdout], [], [], 0.1)
            if r:
                s.buf += os.read(s.p.stdout.fileno(), 1 << 16)
        assert b"workspace/configuration" in s.buf
        s.send({"jsonrpc": "2.0", "id": 1, "method": "shutdown"})
        msg = s.response(1)
        assert "error" not in msg and msg["result"] is None, msg
        s.send({"jsonrpc": "2.0", "method": "exit"})
        assert s.p.wait(10) == 0
    finally:
        if s.p.poll() is None:
            s.close()


def test_sigterm_taken_by_another_thread_still_stops_the_server():
    """The kernel may deliver a process's SIGTERM to any of its threads. Taken by the stdin reader
    thread while the main thread slept in the event loop, the Python handler never ran until the
    client sent something else: the server ignored its editor's SIGTERM. Sent here to one
    particular non-main thread (tgkill)."""
    import ctypes
    import signal

    s = RawServer()
    try:
        s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}})
        assert "result" in s.response(0)
        s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        time.sleep(0.5)  # everything settles: the main thread waits in the event loop
        tids = [int(t) for t in os.listdir(f"/proc/{s.p.pid}/task") if int(t) != s.p.pid]
        assert tids, "the server has no other thread"
        import platform

        nr = {"x86_64": 234, "aarch64": 131}.get(platform.machine())  # SYS_tgkill
        if nr is None:
            pytest.skip(f"tgkill's syscall number is not known here ({platform.machine()})")
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(nr, s.p.pid, tids[0], int(signal.SIGTERM)) == 0
        try:
            code = s.p.wait(5)
        except subprocess.TimeoutExpired:
            raise AssertionError("the server did not stop within 5 s of SIGTERM") from None
        assert code == 0
    finally:
        if s.p.poll() is None:
            s.close()


# -- issue 12 item 11: LSP framing ----------------------------------------------------------------
class RawStdio(RawServer):
    """A RawServer whose stderr is kept (a MemoryError or a traceback must never appear there)."""

    def __init__(self, command=None, env=None):
        env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
        self.p = subprocess.Popen(command or [sys.executable, "-m", "ddp_lint.lsp_server"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.buf = b""
        self.passed = []

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r, _, _ = select.select([self.p.stdout], [], [], 0.05)
            if r:
                self.buf += os.read(self.p.stdout.fileno(), 1 << 16)

    def publish(self, uri: str, version=None, timeout: float = 15.0) -> list:
        """The diagnostics of the first publish for ``uri`` (at ``version``) still in the buffer."""
        end = time.monotonic() + scaled(timeout)
        while time.monotonic() < end:
            for chunk in self.buf.split(b"Content-Length: ")[1:]:
                try:
                    msg = json.loads(chunk.split(b"\r\n\r\n", 1)[-1])
                except ValueError:
                    continue
                p = msg.get("params") or {}
                if (msg.get("method") == "textDocument/publishDiagnostics" and p.get("uri") == uri
                        and (version is None or p.get("version") == version)):
                    return p["diagnostics"]
            self.pump(0.1)
        raise AssertionError(f"no publishDiagnostics for {uri} v{version}")

    def send_raw(self, data: bytes) -> None:
        self.p.stdin.write(data)
        self.p.stdin.flush()


def _frame(obj, header=b"Content-Length: %d\r\n\r\n") -> bytes:
    body = json.dumps(obj).encode()
    return header % len(body) + body


HOVER = {"textDocument": {"uri": "file:///x.py"}, "position": {"line": 0, "character": 0}}


@pytest.fixture
def raw():
    s = RawStdio()
    s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}})
    assert "result" in s.response(0)
    s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    yield s
    s.close()


@pytest.mark.parametrize("header", [
    b"content-length: %d\r\n\r\n",  # header names are case-insensitive
    b"CONTENT-LENGTH: %d\r\n\r\n",
    b"Content-Length: %d\n\n",  # LF-only line ends
    b"Content-Length:  %d  \r\n\r\n",  # extra spaces
    b"Content-Length:%d\r\n\r\n",
    b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: %d\r\n\r\n",
    b"\r\nContent-Length: %d\r\nX-Whatever: 1\n\r\n",
])
def test_lenient_headers(raw, header):
    """A header that was not byte-exact ``Content-Length: N\\r\\n`` left the server deaf to that
    message and to every later one."""
    raw.send_raw(_frame({"jsonrpc": "2.0", "id": 5, "method": "textDocument/hover", "params": HOVER}, header))
    assert raw.response(5)["result"] is None
    raw.send({"jsonrpc": "2.0", "id": 6, "method": "textDocument/hover", "params": HOVER})
    assert raw.response(6)["result"] is None


@pytest.mark.parametrize("junk", [
    b"garbage\r\n\r\n",  # no ':'
    b"Content-Length: twelve\r\n\r\n",
    b"Content-Length: -5\r\n\r\n",
    b"Content-Type: text/plain\r\n\r\n",  # no Content-Length at all
    b"Content-Length: 0\r\n\r\n",
    b"X" * 100_000 + b"\r\n\r\n",  # an over-long header line
])
def test_bad_header_block_is_skipped_and_the_server_resyncs(raw, junk):
    raw.send_raw(junk)
    raw.send({"jsonrpc": "2.0", "id": 9, "method": "textDocument/hover", "params": HOVER})
    assert raw.response(9)["result"] is None


def test_huge_content_length_is_refused_without_memory_error():
    """``Content-Length: 10^12`` killed the server with MemoryError."""
    s = RawStdio()
    try:
        s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}})
        s.response(0)
        s.send_raw(b"Content-Length: 1000000000000\r\n\r\n{\"jsonrpc\": \"2.0\", \"id\": 1}")
        err = s.response(None)["error"]
        assert err["code"] == -32600 and "1000000000000 bytes" in err["message"] and "limit" in err["message"]
        s.p.stdin.close()  # the rest of the announced body never comes
        assert s.p.wait(20) is not None
        stderr = s.p.stderr.read().decode(errors="replace")
        assert "MemoryError" not in stderr and "Traceback" not in stderr, stderr[-2000:]
    finally:
        s.close()


def test_oversize_message_is_skipped_and_the_next_one_answered(raw):
    from ddp_lint.lsp_server.framing import MAX_MESSAGE

    body = b" " * (MAX_MESSAGE + 1)
    raw.send_raw(b"Content-Length: %d\r\n\r\n" % len(body))
    for i in range(0, len(body), 1 << 20):
        raw.send_raw(body[i:i + (1 << 20)])
    raw.send({"jsonrpc": "2.0", "id": 11, "method": "textDocument/hover", "params": HOVER})
    assert "limit" in raw.response(None, timeout=60)["error"]["message"]
    assert raw.response(11, timeout=60)["result"] is None


@pytest.mark.parametrize("message", [
    {"id": 3, "method": "textDocument/hover", "params": HOVER},  # no "jsonrpc"
    {"jsonrpc": "1.0", "id": 3, "method": "textDocument/hover", "params": HOVER},
])
def test_request_without_jsonrpc_2_is_answered_with_an_error(raw, message):
    raw.send(message)
    assert raw.response(3)["error"]["code"] == -32600
    raw.send({"jsonrpc": "2.0", "id": 4, "method": "textDocument/hover", "params": HOVER})
    assert raw.response(4)["result"] is None


@pytest.mark.parametrize("payload", [[1, 2], 7, "x", None])
def test_non_object_message_is_answered_with_a_null_id_error(raw, payload):
    raw.send(payload)
    assert raw.response(None)["error"]["code"] == -32600
    raw.send({"jsonrpc": "2.0", "id": 4, "method": "textDocument/hover", "params": HOVER})
    assert raw.response(4)["result"] is None


def test_requests_after_shutdown_get_invalid_request(raw):
    raw.send({"jsonrpc": "2.0", "id": 1, "method": "shutdown"})
    assert raw.response(1)["result"] is None
    raw.send({"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover", "params": HOVER})
    assert raw.response(2)["error"]["code"] == -32600
    raw.send({"jsonrpc": "2.0", "method": "exit"})
    assert raw.p.wait(20) == 0


# -- issue 12 item 2: the socket transports ------------------------------------------------------
class SocketClient:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.seen: list[dict] = []

    def send(self, obj) -> None:
        self.sock.sendall(_frame(obj))

    def _pump(self, timeout: float) -> bool:
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return True
        data = self.sock.recv(1 << 16)
        if not data:
            return False
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, rest = self.buf.split(b"\r\n\r\n", 1)
            n = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            if len(rest) < n:
                break
            self.seen.append(json.loads(rest[:n]))
            self.buf = rest[n:]
        return True

    def response(self, msg_id, timeout: float = 15.0) -> dict:
        end = time.monotonic() + scaled(timeout)
        while time.monotonic() < end:
            for m in self.seen:
                if m.get("id") == msg_id and "method" not in m:
                    return m
            if not self._pump(0.1):
                raise AssertionError(f"connection closed before the answer to {msg_id!r}")
        raise AssertionError(f"no response to request {msg_id!r} within {timeout}s")

    def shown(self) -> list[str]:
        return [m["params"]["message"] for m in self.seen
                if m.get("method") in ("window/showMessage", "window/logMessage")]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "ddp_lint", "server", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def _connect(p, address, family=None) -> SocketClient:
    import socket

    deadline = time.monotonic() + scaled(30)
    while True:
        try:
            if family is None:
                sock = socket.create_connection(address, timeout=10)
            else:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.connect(address)
            return SocketClient(sock)
        except OSError:
            if time.monotonic() > deadline or p.poll() is not None:
                raise AssertionError(f"no server: {p.stderr.read().decode() if p.poll() is not None else ''}")
            time.sleep(0.1)


DIST_SCRIPT = "import torch.distributed as dist\nopen(__file__ + '.ran', 'w').write('ran')\n"


def _hostile_session(c: SocketClient, ws, evil) -> dict:
    """What a local user who connects does: sets run.python to their program, asks for a run."""
    script = ws / "train.py"
    script.write_text(DIST_SCRIPT)
    (ws / "pyproject.toml").write_text("[tool.ddp-lint\nbroken = \n")  # read only when trusted
    c.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "capabilities": {"window": {"showMessage": {}}}, "rootUri": ws.as_uri(),
        "workspaceFolders": [{"uri": ws.as_uri(), "name": "ws"}],
        "initializationOptions": {"run": {"python": str(evil), "timeoutSeconds": 5}}}})
    assert "result" in c.response(0)
    c.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    c.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": script.as_uri(), "languageId": "python", "version": 1, "text": DIST_SCRIPT}}})
    c.send({"jsonrpc": "2.0", "id": 1, "method": "textDocument/codeAction", "params": {
        "textDocument": {"uri": script.as_uri()}, "range": {"start": {"line": 0, "character": 0},
                                                           "end": {"line": 0, "character": 0}},
        "context": {"diagnostics": []}}})
    actions = c.response(1)["result"] or []
    c.send({"jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand", "params": {
        "command": "ddp-lint.run", "arguments": [script.as_uri()]}})
    return {"actions": [a["title"] for a in actions], "run": c.response(2, timeout=60)}


def _evil_program(tmp_path):
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    return evil, marker


def test_tcp_mode_runs_no_code_and_reads_no_project_file(tmp_path):
    """``server --tcp`` had no authentication: any local user who connected could set
    ``run.python`` to their program and call ``ddp-lint.run``, which ran it as the server's user."""
    ws = tmp_path / "ws"
    ws.mkdir()
    evil, marker = _evil_program(tmp_path)
    port = _free_port()
    p = _server("--tcp", f"127.0.0.1:{port}")
    try:
        c = _connect(p, ("127.0.0.1", port))
        got = _hostile_session(c, ws, evil)
        err = got["run"].get("error")
        assert err and err["code"] == -32602 and "--allow-run" in err["message"], got["run"]
        assert not any("torchrun" in a for a in got["actions"]), got["actions"]
        assert any("run.*` ignored" in m for m in c.shown()), c.shown()
        assert not any("pyproject" in m for m in c.shown()), c.shown()
        # a second local user cannot take over or end the session while the editor is connected
        other = _connect(p, ("127.0.0.1", port))
        assert not other._pump(5), "a second connection was served"
        c.send({"jsonrpc": "2.0", "id": 3, "method": "textDocument/hover", "params": HOVER})
        assert c.response(3)["result"] is None
        time.sleep(0.5)
        assert not marker.exists() and not (ws / "train.py.ran").exists()
        c.send({"jsonrpc": "2.0", "id": 4, "method": "shutdown"})
        c.response(4)
        c.send({"jsonrpc": "2.0", "method": "exit"})
        p.wait(20)
        assert "Traceback" not in p.stderr.read().decode(errors="replace")
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_tcp_allow_run_is_explicit(tmp_path):
    """With ``--allow-run`` the run is attempted (here refused for a missing file, not disabled)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    port = _free_port()
    p = _server("--tcp", f"127.0.0.1:{port}", "--allow-run")
    try:
        c = _connect(p, ("127.0.0.1", port))
        c.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}})
        c.response(0)
        c.send({"jsonrpc": "2.0", "id": 1, "method": "workspace/executeCommand", "params": {
            "command": "ddp-lint.run", "arguments": [(ws / "missing.py").as_uri()]}})
        msg = c.response(1)["error"]["message"]
        assert "does not exist" in msg and "disabled" not in msg
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(not hasattr(__import__("socket"), "AF_UNIX"), reason="no Unix sockets here")
def test_unix_socket_is_private_and_trusted(tmp_path):
    import socket
    import stat

    path = tmp_path / "ddp.sock"
    p = _server("--socket", str(path))
    try:
        c = _connect(p, str(path), socket.AF_UNIX)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        c.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}})
        c.response(0)
        c.send({"jsonrpc": "2.0", "id": 1, "method": "workspace/executeCommand", "params": {
            "command": "ddp-lint.run", "arguments": [(tmp_path / "missing.py").as_uri()]}})
        assert "does not exist" in c.response(1)["error"]["message"]
        c.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        c.response(2)
        c.send({"jsonrpc": "2.0", "method": "exit"})
        p.wait(20)
        assert not path.exists(), "the socket was left behind"
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    # an existing path is never replaced
    path.write_text("keep")
    r = subprocess.run([sys.executable, "-m", "ddp_lint", "server", "--socket", str(path)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "already exists" in r.stderr and path.read_text() == "keep"


def test_long_settings_key_is_capped(raw):
    key = "k" * 100_000
    raw.passed.clear()
    raw.send({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": {
        "settings": {"ddp-lint": {key: 1, "run": {"nproc": "x" * 100_000}}}}})
    raw.send({"jsonrpc": "2.0", "id": 5, "method": "textDocument/hover", "params": HOVER})
    raw.response(5)
    # the message may come before the hover answer (response() then reads past it) or after it
    shown = []
    end = time.monotonic() + scaled(5)
    while time.monotonic() < end and not shown:
        seen = b"".join(raw.passed) + raw.buf
        shown = re.findall(rb'"window/showMessage"', seen)
        if shown:
            break
        r, _, _ = select.select([raw.p.stdout], [], [], 0.2)
        if r:
            raw.buf += os.read(raw.p.stdout.fileno(), 1 << 20)
    assert shown, "no showMessage about the unknown key"
    for chunk in (b"".join(raw.passed) + raw.buf).split(b"Content-Length: ")[1:]:
        if b"window/showMessage" in chunk or b"window/logMessage" in chunk:
            assert len(chunk) < 5000, len(chunk)


# -- issue 12 item 8: $/cancelRequest of a running ddp-lint.run -------------------------------------
def test_cancel_request_stops_a_run(tmp_path):
    """pygls runs the command coroutine as an inner task: ``$/cancelRequest`` answered "cancelled"
    but the run went on until its timeout, and its result was still published."""
    log = tmp_path / "runs.jsonl"
    ws = tmp_path / "ws"
    ws.mkdir()
    script = ws / "train.py"
    script.write_text("import torch.distributed as dist\n")
    s = RawStdio([sys.executable, str(ROOT / "tests" / "lsp" / "fake_runtime.py")],
                 env={"FAKE_RUN_MODE": "wait", "FAKE_RUN_LOG": str(log)})
    try:
        s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "capabilities": {}, "rootUri": ws.as_uri(), "workspaceFolders": [{"uri": ws.as_uri(), "name": "ws"}]}})
        s.response(0)
        s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        s.send({"jsonrpc": "2.0", "id": "run-1", "method": "workspace/executeCommand", "params": {
            "command": "ddp-lint.run", "arguments": [script.as_uri()]}})
        end = time.monotonic() + scaled(30)
        while not (log.exists() and log.read_text()) and time.monotonic() < end:
            time.sleep(0.05)
        assert log.exists(), "the run never started"
        time.sleep(0.3)  # the runner is in its wait
        s.pump(0.2)
        s.buf = b""  # only what comes after the cancel counts
        t0 = time.monotonic()
        s.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "run-1"}})
        assert s.response("run-1", timeout=5)["error"]["code"] == -32800
        while '"cancelled": true' not in log.read_text() and time.monotonic() - t0 < 2:
            time.sleep(0.02)
        assert '"cancelled": true' in log.read_text(), "the runner never saw the cancel"
        assert time.monotonic() - t0 < 2.5
        s.pump(1.0)
        assert b"textDocument/publishDiagnostics" not in s.buf and b"ddp-lint run of" not in s.buf, s.buf[-2000:]
        # the file is no longer "already running"
        s.send({"jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand", "params": {
            "command": "ddp-lint.run", "arguments": [script.as_uri()]}})
        s.pump(0.5)
        s.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 2}})
        assert "already running" not in json.dumps(s.response(2, timeout=10))
    finally:
        s.close()


# -- issue 12 item 9 (server side): a symlink loop named *.py ---------------------------------------
def test_document_under_a_symlink_loop_gets_diagnostics_and_code_actions(tmp_path):
    """A document under ``loop.py -> loop.py`` got no diagnostics (pathlib's RuntimeError "Symlink
    loop" while looking for pyproject.toml) and its code actions answered InternalError."""
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink("loop.py", ws / "loop.py")
    text = (ROOT / "examples" / "seed_problem2_invalid_usage.py").read_text()
    s = RawStdio()
    try:
        s.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "capabilities": {}, "rootUri": ws.as_uri(), "workspaceFolders": [{"uri": ws.as_uri(), "name": "ws"}]}})
        s.response(0)
        s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        for i, uri in enumerate([(ws / "loop.py").as_uri(), (ws / "loop.py" / "inner.py").as_uri()]):
            s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": text}}})
            end = time.monotonic() + scaled(15)
            diags = None
            while diags is None and time.monotonic() < end:
                s.pump(0.1)
                for chunk in s.buf.split(b"Content-Length: ")[1:]:
                    body = chunk.split(b"\r\n\r\n", 1)[-1]
                    try:
                        msg = json.loads(body)
                    except ValueError:
                        continue
                    if msg.get("method") == "textDocument/publishDiagnostics" and msg["params"]["uri"] == uri:
                        diags = msg["params"]["diagnostics"]
            assert diags and any(d["code"] == "DDP001" for d in diags), (uri, diags)
            s.buf = b""
            s.send({"jsonrpc": "2.0", "id": 10 + i, "method": "textDocument/codeAction", "params": {
                "textDocument": {"uri": uri}, "range": diags[0]["range"], "context": {"diagnostics": diags}}})
            res = s.response(10 + i)
            assert "error" not in res and res["result"], res
    finally:
        s.close()


# -- issue 12, cosmetic ---------------------------------------------------------------------------
def _change(uri, version, sl, sc, el, ec, text):
    return {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": uri, "version": version}, "contentChanges": [{"range": {
            "start": {"line": sl, "character": sc}, "end": {"line": el, "character": ec}}, "text": text}]}}


def test_reversed_range_delete_during_a_syntax_error_drops_the_finding(raw, tmp_path):
    uri = (tmp_path / "m.py").as_uri()
    text = (ROOT / "tests" / "fixtures" / "DDP004" / "bad_module_level.py").read_text()
    raw.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}}})
    assert [d["range"]["start"]["line"] for d in raw.publish(uri, 1) if d["code"] == "DDP004"] == [2]
    n = text.count("\n")
    raw.send(_change(uri, 2, n, 0, n, 0, "x = (\n"))  # a syntax error at the end: findings are kept
    assert {d["code"] for d in raw.publish(uri, 2)} >= {"DDP000", "DDP004"}
    raw.send(_change(uri, 3, 3, 0, 2, 0, ""))  # delete line 2, the range given end first
    assert "DDP004" not in {d["code"] for d in raw.publish(uri, 3)}


def test_disable_for_this_line_beyond_the_end_of_the_file_offers_nothing(raw, tmp_path):
    uri = (tmp_path / "n.py").as_uri()
    text = "import torch\nx = 1\n"
    raw.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}}})
    raw.publish(uri, 1)
    far = {"start": {"line": 40, "character": 0}, "end": {"line": 40, "character": 5}}
    here = {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 5}}
    diags = [{"range": far, "message": "m", "code": "DDP004", "source": "ddp-lint"},
             {"range": here, "message": "m", "code": "DDP004", "source": "ddp-lint"}]
    raw.send({"jsonrpc": "2.0", "id": 30, "method": "textDocument/codeAction", "params": {
        "textDocument": {"uri": uri}, "range": far, "context": {"diagnostics": diags, "only": ["quickfix"]}}})
    actions = raw.response(30)["result"]
    disable = [a for a in actions if a["title"].startswith("Disable")]
    assert len(disable) == 1, actions  # only the diagnostic on an existing line
    (edit,) = disable[0]["edit"]["changes"][uri]
    assert edit["range"]["start"]["line"] == 1
