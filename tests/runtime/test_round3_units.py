"""Issue 28 (``ddp-lint run``, round 3), from synthetic rank logs: no process is started."""
from __future__ import annotations

import json

from ddp_lint.analysis.runtime.findings import analyse
from ddp_lint.analysis.runtime.launcher import SHIM_PATH
from ddp_lint.analysis.runtime.logs import LogReader
from ddp_lint.analysis.runtime.states import UserCode

KILLED = "import torch\nx = 1\nfor step in range(9):\n    y = step * 2\n    dist.all_reduce(t)\n    z = grow()\n"


def _killed_run(tmp_path, *, seen_line, seen_t, call_t, ret_t, gone_at):
    """Rank 1 killed by SIGKILL; rank 0 stopped by torchrun (its stack at line 5)."""
    script = tmp_path / "train.py"
    script.write_text(KILLED)
    for r in (0, 1):
        with open(tmp_path / f"rank-{r}.jsonl", "w") as f:
            f.write(json.dumps({"kind": "start", "rank": r, "t": 1.0, "pid": 10 + r, "main_thread": 7,
                                "script": str(script)}) + "\n")
            f.write(json.dumps({"kind": "ready", "rank": r, "t": 1.1, "pid": 10 + r}) + "\n")
            if r == 1:
                site = {"file": str(script), "line": 5, "function": "<module>"}
                f.write(json.dumps({"kind": "call", "rank": 1, "t": call_t, "seq": 3, "op": "all_reduce",
                                    **site}) + "\n")
                if ret_t is not None:
                    f.write(json.dumps({"kind": "return", "rank": 1, "t": ret_t, "seq": 3, "op": "all_reduce"}) + "\n")
    (tmp_path / "seen-1").write_text(json.dumps({"file": str(script), "line": seen_line, "function": "<module>",
                                                 "t": seen_t}))
    (tmp_path / "stack-0.term").write_text(
        f'Current thread 0x0000000000000007 (most recent call first):\n  File "{script}", line 5 in <module>\n')
    reader = LogReader(str(tmp_path), 2)
    reader.poll()
    reader.read_stacks()
    reader.ranks[1].gone_at = gone_at
    banner = "[1]:\n  time : x\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 11)\n"
    return analyse(reader.ranks, user=UserCode([str(tmp_path)], [], SHIM_PATH), timed_out=False, timeout=30.0,
                   emulated=False, output=banner)


def _where(a):
    assert [f.code for f in a.findings] == ["DDP904"], [(f.code, f.message) for f in a.findings]
    f = a.findings[0]
    return f, f.range.start.line + 1


def test_a_killed_rank_is_placed_at_its_latest_collective_when_that_is_fresher_than_the_sample(tmp_path):
    # the sampler last saw it at line 2 (before the loop); the log shows it returned from the
    # all_reduce of line 5 later: that is where it was last seen, 0.4 s before it died
    a = _killed_run(tmp_path, seen_line=2, seen_t=2.0, call_t=2.3, ret_t=2.35, gone_at=2.75)
    f, ln = _where(a)
    assert ln == 5 and f.ranks == (1,)
    assert "last seen here, returning from all_reduce(), 0.4 s before it was killed" in f.message, f.message
    assert f.details["last_seen"]["source"] == "return" and abs(f.details["last_seen"]["age"] - 0.4) < 1e-6
    (st,) = [s for r, s in a.states.items() if r == 1]
    assert "last seen at train.py:5 0.4 s before it died" in st.summary()


def test_a_killed_rank_entering_a_collective_says_so(tmp_path):
    a = _killed_run(tmp_path, seen_line=2, seen_t=2.0, call_t=2.3, ret_t=None, gone_at=3.3)
    f, ln = _where(a)
    assert ln == 5 and "entering all_reduce(), 1.0 s before it was killed" in f.message, f.message


def test_a_killed_rank_is_placed_at_the_sample_when_that_is_fresher(tmp_path):
    a = _killed_run(tmp_path, seen_line=6, seen_t=2.6, call_t=2.3, ret_t=2.35, gone_at=2.7)
    f, ln = _where(a)
    assert ln == 6 and "last seen here, 0.1 s before it was killed" in f.message, f.message
    assert f.details["last_seen"]["source"] == "sample"


def test_without_a_death_time_no_age_is_claimed(tmp_path):
    a = _killed_run(tmp_path, seen_line=6, seen_t=2.6, call_t=2.3, ret_t=2.35, gone_at=None)
    f, ln = _where(a)
    assert ln == 6 and "last seen here" in f.message and " s before" not in f.message, f.message


def test_the_evidence_survives_a_report_round_trip(tmp_path):
    from ddp_lint.analysis.runtime.logs import raw_ranks
    from ddp_lint.analysis.runtime.merge import load_ranks

    script = tmp_path / "t.py"
    script.write_text("x = 1\n")
    with open(tmp_path / "rank-0.jsonl", "w") as f:
        f.write(json.dumps({"kind": "start", "rank": 0, "t": 1.0, "pid": 10, "main_thread": 7,
                            "script": str(script)}) + "\n")
        f.write(json.dumps({"kind": "call", "rank": 0, "t": 2.0, "seq": 1, "op": "barrier", "file": str(script),
                            "line": 1, "function": "<module>"}) + "\n")
    reader = LogReader(str(tmp_path), 1)
    reader.poll()
    reader.ranks[0].gone_at = 2.5
    back = load_ranks(json.loads(json.dumps(raw_ranks(reader.ranks, roots=[], lib_dirs=[]))))
    assert back[0].gone_at == 2.5 and back[0].last_coll["line"] == 1 and back[0].last_coll["phase"] == "call"
