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


# -- early hang verdicts (launcher.deadlock) ------------------------------------------------------
def _reader(tmp_path, calls: dict, *, world=2, ended=()):
    """A LogReader over synthetic logs: ``calls`` maps a rank to its pending call (or None)."""
    import os

    for r in range(world):
        with open(tmp_path / f"rank-{r}.jsonl", "w") as f:
            f.write(json.dumps({"kind": "start", "rank": r, "t": 1.0, "pid": os.getpid(), "main_thread": 7,
                                "world_size": str(world), "script": "x.py"}) + "\n")
            f.write(json.dumps({"kind": "ready", "rank": r, "t": 1.1, "pid": os.getpid()}) + "\n")
            if calls.get(r) is not None:
                f.write(json.dumps({"kind": "call", "rank": r, "seq": 5, "file": "x.py", "line": 10 + r,
                                    "function": "<module>", "async": False, **calls[r]}) + "\n")
            if r in ended:
                f.write(json.dumps({"kind": "exit", "rank": r, "t": 2.0, "code": 0, "via": "return"}) + "\n")
    reader = LogReader(str(tmp_path), world)
    reader.poll()
    return reader


def test_ranks_in_different_collectives_on_different_groups_are_a_hang_at_once(tmp_path):
    from ddp_lint.analysis.runtime.launcher import deadlock

    g01 = {"ranks": [0, 1], "name": "1"}
    reader = _reader(tmp_path, {0: {"op": "all_reduce", "t": 2.0, "group": g01}, 1: {"op": "barrier", "t": 2.0}})
    why = deadlock(reader, 1.0, now=3.5)
    assert why == {0: "rank 1 is in barrier() at line 11",
                   1: "rank 0 is in all_reduce() on the group of ranks 0, 1 at line 10"}
    assert deadlock(reader, 1.0, now=2.5) is None  # not yet blocked for longer than the grace


def test_the_same_op_on_two_groups_and_different_roots_cannot_complete(tmp_path):
    from ddp_lint.analysis.runtime.launcher import deadlock

    reader = _reader(tmp_path, {0: {"op": "broadcast", "t": 2.0, "root": 0, "root_arg": "src"},
                                1: {"op": "broadcast", "t": 2.0, "root": 1, "root_arg": "src"}})
    assert deadlock(reader, 1.0, now=4.0) == {0: "rank 1 is in broadcast() (src=1) at line 11",
                                             1: "rank 0 is in broadcast() (src=0) at line 10"}
    a, b = {"ranks": [0, 1], "name": "1"}, {"ranks": [0, 1], "name": "2"}
    reader = _reader(tmp_path, {0: {"op": "all_reduce", "t": 2.0, "group": a},
                                1: {"op": "all_reduce", "t": 2.0, "group": b}})
    assert set(deadlock(reader, 1.0, now=4.0)) == {0, 1}


def test_no_early_verdict_while_a_collective_can_still_complete_or_nothing_is_known(tmp_path):
    from ddp_lint.analysis.runtime.launcher import deadlock

    def verdict(calls, **kw):
        return deadlock(_reader(tmp_path, calls, **kw), 1.0, now=9.0)

    # the same collective on both ranks: it is running (a slow one, or an NCCL device clash)
    assert verdict({0: {"op": "all_reduce", "t": 2.0}, 1: {"op": "all_reduce", "t": 2.0}}) is None
    # aliases of one collective
    assert verdict({0: {"op": "_all_gather_base", "t": 2.0}, 1: {"op": "all_gather_into_tensor", "t": 2.0}}) is None
    # a rank outside any recorded collective (busy, or in something the shim does not record)
    assert verdict({0: {"op": "barrier", "t": 2.0}, 1: None}) is None
    # point-to-point calls pair different ops by design
    assert verdict({0: {"op": "recv", "t": 2.0}, 1: {"op": "barrier", "t": 2.0}}) is None
    # an asynchronous call does not block its rank
    assert verdict({0: {"op": "all_reduce", "t": 2.0, "async": True}, 1: {"op": "barrier", "t": 2.0}}) is None
    # ranks 0 and 1 can finish their subgroup's all_reduce, rank 2 waits for them: not yet a deadlock
    g01 = {"ranks": [0, 1], "name": "1"}
    assert verdict({0: {"op": "all_reduce", "t": 2.0, "group": g01}, 1: {"op": "all_reduce", "t": 2.0, "group": g01},
                    2: {"op": "barrier", "t": 2.0}}, world=3) is None
    # a rank of another node is not visible here (its WORLD_SIZE is larger than the ranks seen)
    r = _reader(tmp_path, {0: {"op": "all_reduce", "t": 2.0}, 1: {"op": "barrier", "t": 2.0}})
    for rd in r.ranks.values():
        rd.events[0]["world_size"] = "4"
    assert deadlock(r, 1.0, now=9.0) is None
    # a self-spawning script's ranks do not know WORLD_SIZE at start: no verdict either
    for rd in r.ranks.values():
        rd.events[0]["world_size"] = None
    assert deadlock(r, 1.0, now=9.0) is None


def test_a_rank_that_ended_blocks_its_peers_collective(tmp_path):
    from ddp_lint.analysis.runtime.launcher import deadlock

    reader = _reader(tmp_path, {0: {"op": "barrier", "t": 2.0}}, ended=(1,))
    assert deadlock(reader, 1.0, now=4.0) == {0: "rank 1 has ended"}
