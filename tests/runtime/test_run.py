"""``ddp-lint run`` on CPU over gloo: each failure lands on its exact line and ranks.

Each test runs a real 2-rank torchrun job (a few seconds each). Hang tests use a timeout of a few
seconds; it counts from the moment both ranks run the script.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import require_torch, scaled

SCRIPTS = Path(__file__).resolve().parent / "scripts"
HANG_TIMEOUT = float(os.environ.get("DDP_LINT_TEST_HANG_TIMEOUT", "3"))
# no test waits for this one: failures are detected by errors, not by the timeout
LONG_TIMEOUT = 45.0

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _torch():
    require_torch()


def marks(path: Path) -> dict[str, int]:
    """``# [name]`` markers in a script -> 1-based line numbers."""
    out = {}
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.search(r"#\s*\[(\w+)\]", line)
        if m:
            out[m.group(1)] = i
    return out


def run(name: str, timeout: float = LONG_TIMEOUT, **kw):
    from ddp_lint.analysis.runtime.api import run_script

    return run_script(str(SCRIPTS / name), nproc=2, timeout=timeout, emulate="off", **kw)


def by_code(res, code):
    return [f for f in res.findings if f.code == code]


def line(f) -> int:
    return f.range.start.line + 1


def rel(f) -> list[tuple[int, tuple[int, ...]]]:
    return sorted((r.range.start.line + 1, r.ranks) for r in f.related)


def marker_processes(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state not in (b"Z", b"X"):
            found.append(int(pid))
    return found


# -- the failure kinds -------------------------------------------------------------------------
def test_exception_on_one_rank_while_other_waits():
    res = run("exc_one_rank.py")
    m = marks(SCRIPTS / "exc_one_rank.py")
    assert res.exit_code == 1, res.notes
    assert [f.code for f in res.findings] == ["DDP901"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert f.filename == str(SCRIPTS / "exc_one_rank.py")
    assert line(f) == m["raise"] and f.ranks == (1,)
    assert "ValueError: bad batch on rank 1" in f.message
    assert rel(f) == [(m["barrier"], (0,))]
    assert "bad batch on rank 1" in f.details["tracebacks"]["1"]
    assert "Traceback (most recent call last)" in f.details["tracebacks"]["1"]
    assert not f.emulated
    statuses = {r.rank: r.status for r in res.ranks}
    assert statuses[1] == "exception"


def test_collective_under_rank_guard_is_a_mismatch():
    res = run("guard_mismatch.py")
    m = marks(SCRIPTS / "guard_mismatch.py")
    assert [f.code for f in res.findings] == ["DDP902"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert line(f) == m["barrier"] and f.ranks == (0, 1)
    assert f.message.startswith(f"rank 0 is in barrier() here, rank 1 is in all_gather_object() at line {m['gather']}")
    assert rel(f) == [(m["gather"], (1,))]
    assert f.details["static_rule"] == "DDP104"


def test_short_all_gather_object_list_indexerror_on_every_rank():
    res = run("short_gather.py")
    m = marks(SCRIPTS / "short_gather.py")
    assert [f.code for f in res.findings] == ["DDP901"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert line(f) == m["gather"] and f.ranks == (0, 1)
    assert "IndexError" in f.message and "all_gather_object()" in f.message
    assert f.details["static_rule"] == "DDP101"
    assert set(f.details["tracebacks"]) == {"0", "1"}


def test_rank_spinning_outside_any_collective_is_a_hang():
    t0 = time.monotonic()
    res = run("spin.py", timeout=HANG_TIMEOUT)
    m = marks(SCRIPTS / "spin.py")
    # one finding, on the rank that spins: the rank waiting for it is a related location, not a second finding
    assert [f.code for f in res.findings] == ["DDP903"], [(f.code, f.message) for f in res.findings]
    (spin,) = res.findings
    # the stack is sampled wherever the loop is: its body or its ``while`` line (the jump back)
    loop = {m["loop"], m["spin"]}
    assert line(spin) in loop and spin.ranks == (1,)
    assert "outside any collective" in spin.message and "busy()" in spin.message
    assert rel(spin) == [(m["barrier"], (0,))]
    assert f"rank 0 waits in barrier() at line {m['barrier']}" in spin.message
    assert sorted(spin.details["stacks"]) == ["0", "1"]
    assert res.timed_out
    assert "most recent call first" in spin.details["stacks"]["1"]
    assert time.monotonic() - t0 < scaled(60)


def test_rank_calling_sys_exit_early():
    res = run("early_exit.py", timeout=HANG_TIMEOUT)
    m = marks(SCRIPTS / "early_exit.py")
    assert [f.code for f in res.findings] == ["DDP904"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert line(f) == m["exit"] and f.ranks == (1,)
    assert "status 0" in f.message and "barrier()" in f.message
    assert rel(f) == [(m["barrier"], (0,))]


def test_clean_script_no_findings_exit_zero():
    res = run("clean.py")
    assert res.exit_code == 0, (res.notes, [(f.code, f.message) for f in res.findings], res.output[-2000:])
    assert res.findings == [] and not res.timed_out
    assert [r.status for r in res.ranks] == ["ok", "ok"]
    assert "rank 0: sum=[3.0, 3.0]" in res.output and "rank 1: sum=[3.0, 3.0]" in res.output


def test_acceptance_seed_problem1_gloo_points_at_both_lines():
    res = run("seed_problem1_gloo.py")
    m = marks(SCRIPTS / "seed_problem1_gloo.py")
    assert [f.code for f in res.findings] == ["DDP902"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert line(f) == m["barrier"] and f.ranks == (0, 1)
    assert rel(f) == [(m["gather"], (1,))]
    assert f"all_gather_object() at line {m['gather']}" in f.message


# -- nothing outlives the run ------------------------------------------------------------------
def test_children_ignoring_sigterm_do_not_survive():
    marker = f"ddp-lint-test-marker-{uuid.uuid4().hex}"
    res = run("sigterm_child.py", script_args=[marker])
    assert "children started" in res.output
    assert res.exit_code == 0, (res.notes, [(f.code, f.message) for f in res.findings])
    deadline = time.monotonic() + scaled(1.0)
    while marker_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker_processes(marker) == []


def test_cancel_kills_everything_within_two_seconds():
    marker = f"ddp-lint-cancel-{uuid.uuid4().hex}"
    cancel = threading.Event()
    up = threading.Event()
    box = {}

    def progress(msg, pct):
        if msg.startswith("ranks up"):
            up.set()

    def target():
        box["res"] = run("hang_both.py", timeout=120, cancel=cancel, progress=progress, script_args=[marker])

    th = threading.Thread(target=target)
    th.start()
    assert up.wait(90), "ranks never came up"
    time.sleep(0.5)
    assert marker_processes(marker), "the ranks should be running"
    t0 = time.monotonic()
    cancel.set()
    th.join(10)
    elapsed = time.monotonic() - t0
    assert not th.is_alive()
    assert box["res"].cancelled and elapsed < scaled(2.0), elapsed
    assert marker_processes(marker) == []


def test_fifty_megabytes_of_output_stay_bounded():
    res = run("print50mb.py")
    assert res.exit_code == 0, res.notes
    assert res.output_bytes >= 50 * 1024 * 1024
    assert len(res.output) < 256 * 1024
    assert "bytes of output omitted" in res.output
    assert any("only the first and last" in n for n in res.notes)


def test_private_temp_dir_mode_0700_and_removed():
    res = run("logdir_mode.py")
    found = re.findall(r"LOGDIR (\S+) MODE (0o\d+)", res.output)
    assert len(found) == 2, res.output[-2000:]
    for d, mode in found:
        assert mode == "0o700"
        assert not os.path.exists(d)


# -- the command line --------------------------------------------------------------------------
def cli(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "ddp_lint", "run", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


def test_cli_json_for_a_mismatch_and_exit_status():
    p = cli(str(SCRIPTS / "guard_mismatch.py"), "--output-format", "json", "--emulate", "off")
    assert p.returncode == 1, p.stderr[-3000:]
    data = json.loads(p.stdout)
    m = marks(SCRIPTS / "guard_mismatch.py")
    assert [d["code"] for d in data] == ["DDP902"]
    d = data[0]
    assert d["location"] == {"row": m["barrier"], "column": 5}
    assert d["end_location"]["row"] == m["barrier"]
    assert d["ranks"] == [0, 1] and d["emulated"] is False
    assert d["related"][0]["location"]["row"] == m["gather"] and d["related"][0]["ranks"] == [1]
    assert d["filename"] == str(SCRIPTS / "guard_mismatch.py")
    assert isinstance(d["details"], dict)


def test_cli_usage_errors(tmp_path):
    p = cli(str(tmp_path / "missing.py"))
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr
    script = tmp_path / "ok.py"
    script.write_text("print('hi')\n")
    fake = tmp_path / "python-without-torch"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -S -I \"$@\"\n")
    fake.chmod(0o755)
    p = cli(str(script), "--python", str(fake))
    assert p.returncode == 2 and "torch is not installed" in p.stderr and "Traceback" not in p.stderr
    p = cli(str(script), "--bogus")
    assert p.returncode == 2 and "unknown option" in p.stderr


def test_hostile_file_name_runs_and_runs_nothing_else(tmp_path):
    name = "-we ird 'q' \"d\" $(touch PWNED) `touch PWNED2`; touch PWNED3.py"
    script = tmp_path / name
    script.write_text((SCRIPTS / "clean.py").read_text())
    p = cli(f"./{name}", "--emulate", "off", "--", "--flag", "$(touch PWNED4)", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "All ranks finished cleanly." in p.stdout  # the clean script's text report
    assert "rank 0: finished cleanly" in p.stdout and "rank 1: finished cleanly" in p.stdout
    assert "rank 0: sum=[3.0, 3.0]" in p.stderr  # the script really ran (its output streams to stderr)
    assert sorted(os.listdir(tmp_path)) == [name]  # and nothing else did


def test_rank_abort_is_a_crash_at_its_line():
    res = run("abort_rank.py")
    m = marks(SCRIPTS / "abort_rank.py")
    assert [f.code for f in res.findings] == ["DDP901"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert line(f) == m["abort"] and f.ranks == (1,)
    assert "crashed: Aborted" in f.message
    assert rel(f) == [(m["barrier"], (0,))]


def test_closed_stdout_and_forked_child_leave_nothing_running():
    marker = f"ddp-lint-fork-{uuid.uuid4().hex}"
    t0 = time.monotonic()
    res = run("close_stdout.py", script_args=[marker])
    assert time.monotonic() - t0 < scaled(60)
    assert "closing" in res.output
    assert res.error is None
    deadline = time.monotonic() + scaled(1.0)
    while marker_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker_processes(marker) == []


def test_hang_deep_in_library_code_still_lands_on_the_users_line(tmp_path):
    """faulthandler keeps 100 frames; the shim's full Python stack (SIGUSR2) finds the user's line."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libdeep.py").write_text("def deep(n):\n    if n == 0:\n        while True:\n            pass\n"
                                    "    return deep(n - 1)\n")
    app = tmp_path / "app"
    app.mkdir()
    script = app / "deep_user.py"
    script.write_text(
        "import sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import libdeep\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    libdeep.deep(150)\n"
        "dist.barrier()\n")
    from ddp_lint.analysis.runtime.api import run_script

    res = run_script(str(script), nproc=2, timeout=HANG_TIMEOUT, emulate="off", script_args=[str(lib)])
    got = sorted((f.code, line(f), f.ranks) for f in res.findings)
    assert got == [("DDP903", 7, (1,))], [(f.code, f.message) for f in res.findings]
    assert rel(res.findings[0]) == [(8, (0,))]


def test_logs_stay_bounded_and_still_pin_the_hang(monkeypatch):
    """Past DDP_LINT_LOG_BUDGET bytes, quick collectives are counted instead of logged: 600
    all_reduces leave a small log, the clean count is exact, and a wait that never ends, or a loop
    that never stops, is still found at its line with its collective."""
    monkeypatch.setenv("DDP_LINT_LOG_BUDGET", "5000")
    m = marks(SCRIPTS / "many_collectives.py")
    res = run("many_collectives.py")
    assert res.exit_code == 0, (res.notes, [(f.code, f.message) for f in res.findings], res.output[-2000:])
    sizes = [int(n) for n in re.findall(r"LOGSIZE \d (\d+)", res.output)]
    assert len(sizes) == 2 and all(s < 12_000 for s in sizes), sizes  # unbounded: ~200 KB each
    assert [r.text for r in res.ranks] == [f"rank {r}: finished cleanly (600 collectives)" for r in (0, 1)], \
        [r.text for r in res.ranks]

    res = run("many_collectives.py", timeout=30, script_args=["exit"])
    assert [f.code for f in res.findings] == ["DDP904"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert line(f) == m["exit"] and f.ranks == (1,)
    assert rel(f) == [(m["barrier"], (0,))]

    # a loop that never ends: at the timeout each rank is sampled wherever it is in the loop (under
    # load one may be between two all_reduces), so the lines are the loop's and one is all_reduce's.
    # The loop starts at once (no 600 first) and passes a smaller budget within its first calls.
    monkeypatch.setenv("DDP_LINT_LOG_BUDGET", "2000")
    res = run("many_collectives.py", timeout=HANG_TIMEOUT, script_args=["forever"])
    found = [(f.code, line(f), f.ranks, f.message) for f in res.findings]
    assert found and all(c == "DDP903" and ln in (m["forever"], m["while"]) for c, ln, _, _ in found), found
    # no rank left out: a rank sampled between two all_reduces is still running, and the one in an
    # all_reduce waits for it (a related location of its finding)
    assert sorted({r for f in res.findings for r in f.ranks} | {r for f in res.findings for x in f.related
                                                                for r in x.ranks}) == [0, 1], found
    for f in res.findings:  # a collective is named as the user called it, never the shim's wrapper
        assert "wrapper()" not in f.message, f.message
        if f.details.get("state") == "in-collective":
            assert line(f) == m["forever"] and "all_reduce()" in f.message, f.message
