"""Target 5: the language server's memory.

The real server process (``python -m lsp_server``) is driven over stdio by a small JSON-RPC client
(below; no editor, no pygls on the client side): it opens 50 documents of 2,000 lines each, waits
until every one has its diagnostics, then runs 1,000 edit cycles (an incremental ``didChange`` on one
document, round robin, alternately inserting and removing a line, each waiting for the
``publishDiagnostics`` of that version). The debounce is set to 0 through ``initializationOptions``
so that every cycle is analysed. RSS (``/proc/PID/status`` VmRSS) is read after the opens, after
100 warm-up cycles and at the end.
"""
from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import CACHE, row
from .gen import training_script

RSS_LIMIT_MB = 400.0
GROWTH_LIMIT = 0.05  # RSS over the last third of the cycles at most 5% (at least 4 MB) above the start


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for ln in fh:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1]) / 1024
    except OSError:
        return None
    return None


class LspClient:
    """Minimal LSP client over a child's stdio: Content-Length framing, a reader thread, replies
    to the server's own requests (configuration, registrations, progress)."""

    def __init__(self, cmd: list[str], env: dict, cwd: str):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        self.inbox: queue.Queue = queue.Queue()
        self.responses: dict[int, dict] = {}
        self.published: dict[str, dict] = {}  # uri -> the latest publishDiagnostics params
        self._id = 0
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            headers = {}
            while True:
                line = out.readline()
                if not line:
                    self.inbox.put(None)
                    return
                line = line.strip()
                if not line:
                    break
                k, _, v = line.decode("ascii", "replace").partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0"))
            body = out.read(n)
            try:
                msg = json.loads(body)
            except ValueError:
                continue
            self.inbox.put(msg)

    def send(self, msg: dict) -> None:
        data = json.dumps(msg).encode("utf-8")
        with self._lock:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
            self.proc.stdin.flush()

    def notify(self, method: str, params) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params, timeout: float = 60.0):
        self._id += 1
        rid = self._id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while rid not in self.responses:
            self._pump(deadline)
        return self.responses.pop(rid)

    def _answer(self, msg: dict) -> None:
        method = msg.get("method")
        result = None
        if method == "workspace/configuration":
            result = [{} for _ in (msg.get("params") or {}).get("items", [])]
        self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

    def _pump(self, deadline: float):
        """Handle one incoming message; return it when it is a notification."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the server did not answer in time")
        try:
            msg = self.inbox.get(timeout=left)
        except queue.Empty:
            raise TimeoutError("the server did not answer in time") from None
        if msg is None:
            raise ConnectionError("the server exited")
        if "id" in msg and "method" in msg:
            self._answer(msg)
            return None
        if "id" in msg:
            self.responses[msg["id"]] = msg
            return None
        return msg

    def wait_publish(self, uri: str, version: int | None, timeout: float = 60.0) -> dict:
        """The publishDiagnostics for ``uri`` at ``version`` (or a later one), including one that
        arrived while the client was waiting for another document."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.published.get(uri)
            if p is not None and (version is None or p.get("version") is None or p["version"] >= version):
                return p
            msg = self._pump(deadline)
            if msg and msg.get("method") == "textDocument/publishDiagnostics":
                p = msg.get("params") or {}
                self.published[p.get("uri")] = p

    def close(self) -> None:
        try:
            self.request("shutdown", None, timeout=10)
            self.notify("exit", None)
            self.proc.wait(10)
        except Exception:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def server_cmd() -> list[str]:
    return [sys.executable, "-m", "ddp_lint.lsp_server"]


def run(quick: bool = False) -> list[dict]:
    try:
        import ddp_lint.lsp_server.server  # noqa: F401  (is the server in this tree?)
    except ImportError as e:
        return [row("server memory", f"language server not importable: {e}", ok=None)]
    from .cli_bench import _env

    n_docs, n_lines, cycles, warm = (5, 300, 40, 10) if quick else (50, 2000, 1000, 100)
    work = CACHE / "memory"
    work.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parent.parent
    env = _env()
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    client = LspClient(server_cmd(), env, str(work))
    pid = client.proc.pid
    rows: list[dict] = []
    try:
        init = client.request("initialize", {
            "processId": os.getpid(), "rootUri": work.as_uri(), "workspaceFolders": [{"uri": work.as_uri(), "name": "bench"}],
            "capabilities": {"textDocument": {"publishDiagnostics": {"versionSupport": True, "relatedInformation": True}},
                             "workspace": {"configuration": True}},
            "initializationOptions": {"debounce": 0, "logLevel": "error"},
        })
        sync = (init.get("result") or {}).get("capabilities", {}).get("textDocumentSync", 2)
        sync_kind = sync.get("change", 2) if isinstance(sync, dict) else sync
        client.notify("initialized", {})
        rss0 = rss_mb(pid)
        docs = []
        t0 = time.perf_counter()
        for i in range(n_docs):
            text = training_script(n_lines, seed=1000 + i)
            uri = (work / f"doc_{i:02d}.py").as_uri()
            docs.append([uri, text, 1, False])
            client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python",
                                                                    "version": 1, "text": text}})
        for d in docs:
            client.wait_publish(d[0], 1, timeout=120)
        t_open = time.perf_counter() - t0
        rss_open = rss_mb(pid)
        samples = []
        rss_warm = None
        t0 = time.perf_counter()
        for c in range(cycles):
            d = docs[c % n_docs]
            uri, text, version, inserted = d
            version += 1
            line = "# edited by bench\n"
            if sync_kind == 1:  # full sync
                lines = text.split("\n")
                if inserted:
                    del lines[5]
                else:
                    lines.insert(5, line[:-1])
                text = "\n".join(lines)
                changes = [{"text": text}]
            elif inserted:
                changes = [{"range": {"start": {"line": 5, "character": 0}, "end": {"line": 6, "character": 0}}, "text": ""}]
            else:
                changes = [{"range": {"start": {"line": 5, "character": 0}, "end": {"line": 5, "character": 0}}, "text": line}]
            d[1], d[2], d[3] = text, version, not inserted
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                     "contentChanges": changes})
            client.wait_publish(uri, version, timeout=60)
            if c + 1 == warm:
                rss_warm = rss_mb(pid)
            if (c + 1) % max(1, cycles // 10) == 0:
                samples.append(round(rss_mb(pid) or 0, 1))
        t_cycles = time.perf_counter() - t0
        rss_end = rss_mb(pid)
    except (TimeoutError, ConnectionError, OSError) as e:
        client.close()
        return [row(f"server memory, {n_docs} docs x {n_lines} lines", f"failed: {type(e).__name__}: {e}", ok=False)]
    client.close()
    peak = max(x for x in (rss_open, rss_warm, rss_end, *samples) if x is not None)
    rows.append(row(f"server RSS with {n_docs} open documents x {n_lines:,} lines", f"{rss_open:.0f} MB",
                    f"idle after initialize {rss0:.0f} MB", None, f"< {RSS_LIMIT_MB:.0f} MB",
                    peak < RSS_LIMIT_MB,
                    note=f"opened and analysed in {t_open:.1f} s; peak sampled RSS {peak:.0f} MB"))
    # a leak grows steadily; the allocator's and the collector's ups and downs do not: compare the
    # median of the last third of the samples with the warmed-up RSS and the first third's median
    third = max(1, len(samples) // 3)
    start = statistics.median([rss_warm, *samples[:third]])
    end = statistics.median(samples[-third:])
    growth = end - start
    limit = max(GROWTH_LIMIT * start, 4.0)
    rows.append(row(f"server RSS growth over {cycles:,} edit cycles", f"{end:.0f} MB (last third, median)",
                    f"{start:.0f} MB (after {warm} cycles)", end / start,
                    f"<= +{GROWTH_LIMIT:.0%} (+{limit:.0f} MB)", growth <= limit,
                    note=f"{cycles} cycles in {t_cycles:.1f} s ({t_cycles / cycles * 1e3:.0f} ms per edit, "
                         f"analysis included); RSS (MB) every {max(1, cycles // 10)} cycles: {samples}; "
                         f"at the very end {rss_end:.0f} MB"))
    return rows


if __name__ == "__main__":  # pragma: no cover
    from .__main__ import print_table

    print_table(run("--quick" in sys.argv))
