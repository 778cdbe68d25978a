"""Target 2: editor latency, from a ``didChange`` sent by a real LSP client process to the
matching ``publishDiagnostics``.

The real server (``python -m lsp_server``) runs as a child process and is driven over stdio by a
small JSON-RPC client (``bench.memory_bench.LspClient``: Content-Length framing, a reader thread).
The debounce is set to 0 through ``initializationOptions``, so the figure excludes it (in an
editor, add the configured ``debounceMs``, 150 ms by default).

For each input (a generated 500-line training script, and torch's own ``distributed_c10d.py``) the
client opens the document, then sends a burst of 50 incremental edits (inserting, then removing, a
comment line in the middle of the file), each sent as soon as the previous version's diagnostics
arrived, and times every ``didChange`` -> ``publishDiagnostics`` (that version) round trip with the
wall clock. Side by side, in the same process and the same loop, it times ``ast.parse`` of the very
text the server has just analysed: the parser's floor. Targets: median <= 3x, p95 <= 5x of the
median ``ast.parse``.

``run(quick=False) -> list[dict]`` returns rows for ``python -m bench``; ``python -m
bench.lsp_latency`` prints them.
"""
from __future__ import annotations

import ast
import os
import sys
import time
from pathlib import Path

from . import CACHE, c10d_text, fmt_s, median, p95, row
from .gen import training_script

MEDIAN_TARGET = 3.0
P95_TARGET = 5.0


def _client(work: Path):
    from .memory_bench import LspClient

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    c = LspClient([sys.executable, "-m", "ddp_lint.lsp_server"], env, str(work))
    c.request("initialize", {
        "processId": os.getpid(), "rootUri": work.as_uri(),
        "workspaceFolders": [{"uri": work.as_uri(), "name": "bench"}],
        "capabilities": {"textDocument": {"publishDiagnostics": {"versionSupport": True, "relatedInformation": True}},
                         "general": {"positionEncodings": ["utf-16"]}},
        "initializationOptions": {"debounceMs": 0, "logLevel": "error"},
    }, timeout=120)
    c.notify("initialized", {})
    return c


def measure(client, uri: str, text: str, edits: int) -> tuple[list[float], list[float], int]:
    """(latencies, ast.parse times, findings at the end) for ``edits`` edits of ``text``."""
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": text}})
    client.wait_publish(uri, 1, timeout=120)
    lines = text.split("\n")
    mid = len(lines) // 2
    comment = "# edited by the latency bench\n"
    cur = text
    lat: list[float] = []
    parse: list[float] = []
    n_diags = 0
    version = 1
    for i in range(edits):
        version += 1
        if i % 2 == 0:
            change = {"range": {"start": {"line": mid, "character": 0}, "end": {"line": mid, "character": 0}},
                      "text": comment}
            cur_lines = cur.split("\n")
            cur = "\n".join(cur_lines[:mid] + [comment[:-1]] + cur_lines[mid:])
        else:
            change = {"range": {"start": {"line": mid, "character": 0}, "end": {"line": mid + 1, "character": 0}},
                      "text": ""}
            cur_lines = cur.split("\n")
            cur = "\n".join(cur_lines[:mid] + cur_lines[mid + 1:])
        t0 = time.perf_counter()
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                 "contentChanges": [change]})
        p = client.wait_publish(uri, version, timeout=120)
        lat.append(time.perf_counter() - t0)
        if p.get("version") != version:
            raise RuntimeError(f"published version {p.get('version')} for the edit of version {version}")
        n_diags = len(p.get("diagnostics") or [])
        t0 = time.perf_counter()
        ast.parse(cur)
        parse.append(time.perf_counter() - t0)
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return lat, parse, n_diags


def run(quick: bool = False) -> list[dict]:
    try:
        import ddp_lint.lsp_server.server  # noqa: F401
    except ImportError as e:
        return [row("editor latency", f"language server not importable: {e}", ok=None)]
    edits = 10 if quick else 50
    work = CACHE / "lsp_latency"
    work.mkdir(parents=True, exist_ok=True)
    inputs = [("500-line training script", "train_500.py", training_script(500, seed=500))]
    got = c10d_text()
    if got is not None:
        inputs.append((f"torch distributed_c10d.py ({got[1].count(chr(10)):,} lines)", "distributed_c10d.py", got[1]))
    rows: list[dict] = []
    client = _client(work)
    try:
        for label, name, text in inputs:
            uri = (work / name).as_uri()
            lat, parse, nd = measure(client, uri, text, edits)
            floor = median(parse)
            m, p = median(lat), p95(lat)
            rows.append(row(f"didChange -> publishDiagnostics, median of {edits}, {label} ({nd} diagnostics)",
                            fmt_s(m), f"ast.parse {fmt_s(floor)}", m / floor, f"<= {MEDIAN_TARGET}x",
                            m / floor <= MEDIAN_TARGET, note="debounce set to 0 (excluded); wall clock"))
            rows.append(row(f"didChange -> publishDiagnostics, p95 of {edits}, {label}", fmt_s(p),
                            f"ast.parse {fmt_s(floor)}", p / floor, f"<= {P95_TARGET}x", p / floor <= P95_TARGET))
    finally:
        client.close()
    if got is None:
        rows.append(row("didChange -> publishDiagnostics, torch distributed_c10d.py", "torch not installed", ok=None))
    return rows


if __name__ == "__main__":  # pragma: no cover
    from .__main__ import print_table

    print_table(run(quick="--quick" in sys.argv))
