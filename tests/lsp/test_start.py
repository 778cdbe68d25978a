"""Starting the server: ``ddp-lint server`` (stdio), ``--tcp HOST:PORT``, ``python -m lsp_server``."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from lsp_helpers import ROOT

from tests.conftest import scaled


def frame(obj) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_message(stream) -> dict:
    headers = {}
    while True:
        line = stream.readline()
        if not line:
            raise EOFError("server closed the stream")
        line = line.strip()
        if not line:
            break
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    return json.loads(stream.read(int(headers["content-length"])))


def initialize_over(wfile, rfile) -> dict:
    wfile.write(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"processId": None, "rootUri": None, "capabilities": {}}}))
    wfile.flush()
    while True:
        msg = read_message(rfile)
        if msg.get("id") == 1:
            return msg


def shutdown_over(wfile, rfile) -> None:
    wfile.write(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
    wfile.flush()
    while read_message(rfile).get("id") != 2:
        pass
    wfile.write(frame({"jsonrpc": "2.0", "method": "exit"}))
    wfile.flush()


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    return e


@pytest.mark.parametrize("cmd", [[sys.executable, "-m", "ddp_lint", "server"], [sys.executable, "-m", "ddp_lint.lsp_server"]],
                         ids=["ddp-lint server", "python -m lsp_server"])
def test_stdio(cmd):
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    try:
        res = initialize_over(p.stdin, p.stdout)
        assert res["result"]["serverInfo"]["name"] == "ddp-lint"
        caps = res["result"]["capabilities"]
        assert caps["textDocumentSync"]["change"] == 2  # incremental
        assert caps["positionEncoding"] == "utf-16"
        assert "diagnosticProvider" not in caps  # this client cannot pull
        assert set(caps["executeCommandProvider"]["commands"]) == {"ddp-lint.run", "ddp-lint.fixAll", "ddp-lint.explain"}
        assert "source.fixAll.ddp-lint" in caps["codeActionProvider"]["codeActionKinds"]
        shutdown_over(p.stdin, p.stdout)
        assert p.wait(20) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_tcp():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "ddp_lint", "server", "--tcp", f"127.0.0.1:{port}"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    try:
        deadline = time.monotonic() + scaled(30)
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline or p.poll() is not None:
                    raise AssertionError(f"no TCP server: {p.stderr.read().decode() if p.poll() is not None else ''}")
                time.sleep(0.1)
        with conn:
            rf, wf = conn.makefile("rb"), conn.makefile("wb")
            res = initialize_over(wf, rf)
            assert res["result"]["serverInfo"]["name"] == "ddp-lint"
            shutdown_over(wf, rf)
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("args,msg", [(["--tcp", "localhost:http"], "HOST:PORT"), (["--log-level", "loud"], "log-level")])
def test_bad_arguments_are_clear(args, msg):
    r = subprocess.run([sys.executable, "-m", "ddp_lint", "server", *args], capture_output=True, text=True,
                       timeout=60, env=env(), stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
