"""Start the real language server with a stand-in for ``analysis.runtime.api.run_script``.

The stand-in keeps the real contract (blocking call, ``progress(message, percent)``, a
``threading.Event`` to cancel) and is steered by ``FAKE_RUN_MODE``:

* ``findings``: reports progress, then findings in the script and in ``helper.py`` beside it
  (emulated on CPU), and records its arguments in ``FAKE_RUN_LOG``;
* ``wait``: blocks until cancelled (at most 30 s) and returns ``cancelled=True``;
* ``boom``: raises, as a bug in the runner would.
"""
from __future__ import annotations

import json
import os
import sys
import time
import types
from dataclasses import dataclass, field

from ddp_lint.analysis.model import Finding, Range, Related, Severity


@dataclass
class RunResult:
    findings: list = field(default_factory=list)
    exit_code: int = 0
    emulated: bool = False
    notes: list = field(default_factory=list)
    cancelled: bool = False
    error: str | None = None


def run_script(script_path, *, nproc=None, timeout=60.0, backend="auto", emulate="auto", python=None,
               script_args=(), cwd=None, progress=None, cancel=None):
    mode = os.environ.get("FAKE_RUN_MODE", "findings")
    log = os.environ.get("FAKE_RUN_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(json.dumps({"script": script_path, "nproc": nproc, "timeout": timeout, "emulate": emulate,
                                 "script_args": list(script_args), "cwd": cwd}) + "\n")
    for msg, pct in (("starting 2 ranks", 0), ("ranks up", 30), ("waiting", 60)):
        if progress:
            progress(msg, pct)
        time.sleep(0.05)
    if mode == "boom":
        raise RuntimeError("runner bug")
    if mode == "wait":
        cancel.wait(30)
        if log and cancel.is_set():
            with open(log, "a") as fh:
                fh.write(json.dumps({"cancelled": True}) + "\n")
        return RunResult(exit_code=130, cancelled=cancel.is_set())
    if progress:
        progress("collecting", 90)
    helper = os.path.join(os.path.dirname(script_path), "helper.py")
    f1 = Finding("DDP905", "nccl-device-clash", "rank 0 and rank 1 both use cuda:0 in all_gather_object()",
                 Severity.ERROR, Range.of(32, 4, 32, 67), script_path,
                 related=(Related(Range.of(27, 4, 27, 35), "process group created here"),),
                 url="https://example.invalid/DDP905.md", ranks=(0, 1), emulated=True)
    f2 = Finding("DDP901", "rank-exception", "ValueError: bad value", Severity.ERROR, Range.of(1, 4, 1, 20),
                 helper, related=(Related(Range.of(32, 4, 32, 67), "waiting in all_gather_object() here",
                                          script_path, (0,)),), ranks=(1,), emulated=True)
    return RunResult(findings=[f1, f2], exit_code=1, emulated=True, notes=["emulated: 2 ranks on CPU"])


def main():
    mod = types.ModuleType("ddp_lint.analysis.runtime.api")
    mod.run_script = run_script
    mod.RunResult = RunResult
    sys.modules["ddp_lint.analysis.runtime.api"] = mod
    from ddp_lint.lsp_server.server import start

    sys.exit(start())


if __name__ == "__main__":
    main()
