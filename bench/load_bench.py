"""Load: 20 documents edited concurrently at typing speed for 60 s, against the real server.

The real server process (``python -m lsp_server``, default 150 ms debounce) is driven over stdio by
a small threaded JSON-RPC client. Each of 20 documents (generated ~300-line training scripts) has
its own "typist": bursts of 3-15 keystrokes 80-220 ms apart (a character typed, sometimes a
backspace, now and then a newline), then a pause of 0.4-2.5 s, during which the client asks for
code actions at the cursor as an editor does. Every keystroke is one incremental ``didChange``.

Figures:
* publish delay beyond the debounce: for every burst end (the last keystroke before a pause), the
  time from that ``didChange`` to the first ``publishDiagnostics`` of that version or a later one
  (when the next burst starts before the result is ready, the stale result is rightly never
  published), minus the debounce. Target: max <= 1 s; a burst end never followed by a publish
  counts as a failure;
* request round trip (``codeAction`` during the load): target max <= 1 s;
* memory: server RSS after a warm-up (a fifth of the run) and at the end. Target: growth <= 5%
  + 4 MB;
* the process is alive at the end and logged no internal error.

``python -m bench.load_bench [--quick]`` prints the rows; ``run(quick)`` returns them for
``python -m bench``. ``--quick`` (5 documents, 8 s) is the CI smoke version
(tests/reliability/test_load_smoke.py asserts its correctness parts, never its timings).
"""
from __future__ import annotations

import heapq
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import ROOT, fmt_s, p95, row
from .gen import training_script

DEBOUNCE_MS = 150
LIMIT_S = 1.0
GROWTH = 0.05
SLACK_MB = 4.0


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for ln in fh:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1]) / 1024
    except OSError:
        return None
    return None


class Client:
    """JSON-RPC over the server's stdio. A reader thread timestamps every publish and response."""

    def __init__(self, cwd: str):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = os.environ.get("DDP_LINT_LOAD_SERVER", "").split() or [sys.executable, "-m", "ddp_lint.lsp_server"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        self.lock = threading.Lock()
        self.cond = threading.Condition()
        self.published: dict[tuple[str, int], float] = {}  # (uri, version) -> arrival time
        self.by_uri: dict[str, list[tuple[int, float]]] = {}  # uri -> [(version, arrival time)]
        self.responses: dict[int, tuple[float, dict]] = {}
        self.errors: list[str] = []
        self.closed = False
        self._id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            n = 0
            while True:
                line = out.readline()
                if not line:
                    with self.cond:
                        self.closed = True
                        self.cond.notify_all()
                    return
                if not line.strip():
                    break
                k, _, v = line.decode("ascii", "replace").partition(":")
                if k.strip().lower() == "content-length":
                    n = int(v)
            msg = json.loads(out.read(n))
            now = time.perf_counter()
            method = msg.get("method")
            if "id" in msg and method:  # a request from the server: answer it
                result = [{} for _ in (msg.get("params") or {}).get("items", [])] \
                    if method == "workspace/configuration" else None
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
                continue
            with self.cond:
                if method == "textDocument/publishDiagnostics":
                    p = msg["params"]
                    self.published.setdefault((p["uri"], p.get("version")), now)
                    self.by_uri.setdefault(p["uri"], []).append((p.get("version") or 0, now))
                elif method == "window/logMessage":
                    text = msg["params"].get("message", "")
                    if "internal error" in text or "Traceback" in text:
                        self.errors.append(text)
                elif "id" in msg:
                    self.responses[msg["id"]] = (now, msg)
                self.cond.notify_all()

    def send(self, msg: dict) -> None:
        data = json.dumps(msg).encode("utf-8")
        with self.lock:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
            self.proc.stdin.flush()

    def notify(self, method: str, params) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params) -> int:
        with self.lock:
            self._id += 1
            rid = self._id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def wait(self, pred, timeout: float) -> bool:
        end = time.perf_counter() + timeout
        with self.cond:
            while not pred():
                left = end - time.perf_counter()
                if left <= 0 or self.closed:
                    return pred()
                self.cond.wait(left)
            return True

    def close(self) -> None:
        try:
            rid = self.request("shutdown", None)
            self.wait(lambda: rid in self.responses, 10)
            self.notify("exit", None)
            self.proc.wait(10)
        except Exception:
            self.proc.kill()


class Typist:
    """One document being typed into: the text is kept so that every position sent is valid."""

    def __init__(self, uri: str, text: str, rng: random.Random):
        self.uri = uri
        self.lines = text.split("\n")
        self.rng = rng
        self.version = 1
        self.left_in_burst = 0
        self.line = rng.randrange(len(self.lines) // 2, len(self.lines))
        self.col = len(self.lines[self.line])
        self.snippet = ""

    def keystroke(self) -> dict:
        """The next didChange params (one character typed, deleted or a newline)."""
        rng = self.rng
        self.version += 1
        ln, col = self.line, self.col
        if self.col > 0 and rng.random() < 0.12:  # backspace
            self.lines[ln] = self.lines[ln][:col - 1] + self.lines[ln][col:]
            self.col -= 1
            rng_ = {"start": {"line": ln, "character": col - 1}, "end": {"line": ln, "character": col}}
            text = ""
        else:
            if not self.snippet:
                self.snippet = rng.choice((
                    "dist.all_gather_object(out, {'loss': loss})", "out = [None] * 3", "x = model(batch)",
                    "torch.cuda.set_device(local_rank)", "if rank == 0: print(loss)", "total += loss.item()",
                    "dist.barrier()", "# note: é 中文 😀")) + "\n"
            ch, self.snippet = self.snippet[0], self.snippet[1:]
            rng_ = {"start": {"line": ln, "character": col}, "end": {"line": ln, "character": col}}
            text = ch
            if ch == "\n":
                indent = self.lines[ln][:len(self.lines[ln]) - len(self.lines[ln].lstrip())]
                text = "\n" + indent
                self.lines[ln:ln + 1] = [self.lines[ln][:col], indent + self.lines[ln][col:]]
                self.line, self.col = ln + 1, len(indent)
            else:
                self.lines[ln] = self.lines[ln][:col] + ch + self.lines[ln][col:]
                self.col += 1
        return {"textDocument": {"uri": self.uri, "version": self.version},
                "contentChanges": [{"range": rng_, "text": text}]}  # columns: code points (utf-32)


def run(quick: bool = False, docs: int | None = None, seconds: float | None = None, seed: int = 0,
        raw: bool = False) -> list[dict]:
    """The rows for ``python -m bench``; ``raw=True`` adds a ``_raw`` dict (every sample) to each."""
    n_docs = docs or (5 if quick else 20)
    duration = seconds or (8.0 if quick else 60.0)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="ddp-lint-load-") as ws:
        client = Client(ws)
        try:
            rows = _drive(client, ws, n_docs, duration, rng)
            if not raw:
                for r in rows:
                    r.pop("_raw", None)
            return rows
        finally:
            client.close()


def _drive(client: Client, ws: str, n_docs: int, duration: float, rng: random.Random) -> list[dict]:
    root = Path(ws).as_uri()
    rid = client.request("initialize", {"processId": os.getpid(), "rootUri": root, "capabilities": {
        "textDocument": {"publishDiagnostics": {"versionSupport": True}, "codeAction": {}},
        "general": {"positionEncodings": ["utf-32", "utf-16"]}},
        "initializationOptions": {"debounceMs": DEBOUNCE_MS},
        "workspaceFolders": [{"uri": root, "name": "ws"}]})
    if not client.wait(lambda: rid in client.responses, 60):
        raise RuntimeError("the server did not answer initialize")
    enc = client.responses[rid][1]["result"]["capabilities"].get("positionEncoding")
    if enc != "utf-32":  # the typists count columns in code points
        raise RuntimeError(f"the server did not accept utf-32 positions (got {enc!r})")
    client.notify("initialized", {})
    typists = []
    for i in range(n_docs):
        path = Path(ws) / f"doc_{i}.py"
        text = training_script(300, seed=i)
        path.write_text(text, encoding="utf-8")
        uri = path.as_uri()
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": text}})
        typists.append(Typist(uri, text, random.Random(rng.random())))
    if not client.wait(lambda: all((t.uri, 1) in client.published for t in typists), 60):
        raise RuntimeError("the server did not publish diagnostics for every opened document")

    pid = client.proc.pid
    sent: dict[tuple[str, int], float] = {}
    burst_ends: list[tuple[str, int]] = []
    requests: dict[int, float] = {}
    keystrokes = 0
    t0 = time.perf_counter()
    warm_at = t0 + duration / 5
    rss_warm = None
    samples: list[tuple[float, float | None]] = []
    next_sample = t0
    heap = [(t0 + rng.uniform(0, 0.5), i) for i in range(n_docs)]
    heapq.heapify(heap)
    while heap:
        at, i = heapq.heappop(heap)
        now = time.perf_counter()
        if at > now:
            time.sleep(at - now)
        now = time.perf_counter()
        if rss_warm is None and now >= warm_at:
            rss_warm = rss_mb(pid)
        if now >= next_sample:
            samples.append((round(now - t0, 1), rss_mb(pid)))
            next_sample = now + duration / 12
        if now - t0 >= duration:
            continue
        ty = typists[i]
        if ty.left_in_burst == 0:
            ty.left_in_burst = ty.rng.randint(3, 15)
        params = ty.keystroke()
        sent[(ty.uri, ty.version)] = time.perf_counter()
        client.notify("textDocument/didChange", params)
        keystrokes += 1
        ty.left_in_burst -= 1
        if ty.left_in_burst == 0:  # the burst ends: a pause; the editor asks for code actions
            burst_ends.append((ty.uri, ty.version))
            pos = {"line": ty.line, "character": ty.col}
            r = client.request("textDocument/codeAction", {
                "textDocument": {"uri": ty.uri}, "range": {"start": pos, "end": pos},
                "context": {"diagnostics": []}})
            requests[r] = time.perf_counter()
            heapq.heappush(heap, (time.perf_counter() + ty.rng.uniform(0.4, 2.5), i))
        else:
            heapq.heappush(heap, (time.perf_counter() + ty.rng.uniform(0.08, 0.22), i))
    def seen(uri: str, version: int) -> float | None:
        """When the client first had diagnostics for ``version`` or a later one (a burst end that
        the next burst overtook before its result was ready is, by design, never published)."""
        return min((at for v, at in client.by_uri.get(uri, ()) if v >= version), default=None)

    # let the last bursts be published and the last requests be answered
    client.wait(lambda: all(seen(*k) is not None for k in burst_ends) and
                all(r in client.responses for r in requests), 30)
    rss_end = rss_mb(pid)
    alive = client.proc.poll() is None

    delays, missing = [], 0
    with client.cond:
        for k in burst_ends:
            at = seen(*k)
            if at is not None:
                delays.append(max(0.0, at - sent[k] - DEBOUNCE_MS / 1000))
            else:
                missing += 1
    rtts = [client.responses[r][0] - t for r, t in requests.items() if r in client.responses]
    unanswered = sum(1 for r in requests if r not in client.responses)
    errors = [m for r in client.responses.values() if "error" in r[1] for m in [r[1]["error"].get("message", "")]]
    n_docs_label = f"{n_docs} documents typed concurrently for {duration:g} s"
    rows = [
        row(f"{n_docs_label}: publish delay beyond the {DEBOUNCE_MS} ms debounce (burst ends)",
            value=(f"p50 {fmt_s(sorted(delays)[len(delays) // 2])}, p95 {fmt_s(p95(delays))}, max {fmt_s(max(delays))}"
                   if delays else "none"),
            comparison=f"{len(burst_ends)} burst ends, {keystrokes} keystrokes, {missing} never answered",
            target=f"max <= {LIMIT_S:g} s", ok=bool(delays) and max(delays) <= LIMIT_S and missing == 0),
        row(f"{n_docs_label}: codeAction round trip during the load",
            value=(f"p50 {fmt_s(sorted(rtts)[len(rtts) // 2])}, p95 {fmt_s(p95(rtts))}, max {fmt_s(max(rtts))}"
                   if rtts else "none"),
            comparison=f"{len(requests)} requests, {unanswered} unanswered, {len(errors)} errors",
            target=f"max <= {LIMIT_S:g} s", ok=bool(rtts) and max(rtts) <= LIMIT_S and not unanswered and not errors),
    ]
    if rss_warm and rss_end:
        limit = rss_warm * (1 + GROWTH) + SLACK_MB
        rows.append(row(f"{n_docs_label}: server RSS after warm-up -> end",
                        value=f"{rss_warm:.1f} MB -> {rss_end:.1f} MB",
                        ratio=rss_end / rss_warm, target=f"<= +{GROWTH:.0%} + {SLACK_MB:g} MB",
                        ok=rss_end <= limit))
    rows.append(row(f"{n_docs_label}: server alive, internal errors logged",
                    value=f"{'alive' if alive else 'DEAD'}, {len(client.errors)} internal errors",
                    target="alive, 0", ok=alive and not client.errors,
                    note="; ".join(client.errors[:2]) if client.errors else ""))
    for r in rows:
        r["_raw"] = {"delays": delays, "rtts": rtts, "missing": missing, "unanswered": unanswered,
                     "keystrokes": keystrokes, "burst_ends": len(burst_ends), "alive": alive,
                     "errors": client.errors, "request_errors": errors, "rss_samples": samples}
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.load_bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="5 documents for 8 s (the CI smoke version)")
    p.add_argument("--docs", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None)
    args = p.parse_args(argv)
    rows = run(quick=args.quick, docs=args.docs, seconds=args.seconds)
    from .__main__ import print_table

    print_table(rows)
    return 0 if all(r.get("pass") is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
