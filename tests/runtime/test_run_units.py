"""Pure-Python parts of the runner: no torch, no processes."""
from __future__ import annotations

import os

from ddp_lint.analysis.runtime.launcher import BoundedOutput
from ddp_lint.analysis.runtime.findings import condense
from ddp_lint.analysis.runtime.states import Frame, UserCode, parse_faulthandler


def test_bounded_output_keeps_head_and_tail():
    b = BoundedOutput(head=10, tail=10)
    for i in range(1000):
        b.write(f"{i:05d}\n".encode())
    text = b.text()
    assert text.startswith("00000\n0000")
    assert text.endswith("00999\n")
    assert "bytes of output omitted" in text
    assert b.total == 6000 and b.dropped == 6000 - 20
    small = BoundedOutput(head=100, tail=100)
    small.write(b"hello\n")
    assert small.text() == "hello\n" and small.dropped == 0


def test_condense_nccl_error_to_its_reason():
    msg = ("NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, invalid usage "
           "(run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\nncclInvalidUsage: This usually reflects "
           "invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA "
           "device 1000")
    assert condense("DistBackendError", msg) == (
        "DistBackendError: NCCL invalid usage: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000")
    assert condense("ValueError", "bad\nsecond line") == "ValueError: bad"
    assert condense("RuntimeError", "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer") \
        == "RuntimeError: Connection closed by peer"
    assert condense("KeyboardInterrupt", "") == "KeyboardInterrupt"
    assert len(condense("E", "x" * 5000)) < 320


def test_parse_faulthandler_all_threads():
    text = (
        'Thread 0x00007f0000000001 (most recent call first):\n'
        '  File "/usr/lib/python3.11/threading.py", line 324 in wait\n'
        '\n'
        'Current thread 0x00007f0000000002 (most recent call first):\n'
        '  File "/w/a.py", line 8 in busy\n'
        '  File "/w/a.py", line 13 in <module>\n'
        '  File "<frozen runpy>", line 88 in _run_code\n'
    )
    threads, current = parse_faulthandler(text)
    assert current == 0x7F0000000002
    assert threads[0x7F0000000002][0] == Frame("/w/a.py", 8, "busy")
    assert len(threads[0x7F0000000001]) == 1


def test_user_code_excludes_libraries_and_venvs(tmp_path):
    root = str(tmp_path)
    venv = os.path.join(root, ".venv", "lib", "python3.11", "site-packages")
    u = UserCode([root], [venv, "/usr/lib/python3.11"], "/x/shim.py")
    assert u.is_user(os.path.join(root, "train.py"))
    assert not u.is_user(os.path.join(venv, "torch", "x.py"))
    assert not u.is_user("/usr/lib/python3.11/threading.py")
    assert not u.is_user("/x/shim.py") and not u.is_user("<frozen runpy>")
    frames = [Frame(os.path.join(venv, "t.py"), 1), Frame(os.path.join(root, "train.py"), 7)]
    assert u.innermost(frames) == frames[1]


def test_ranks_sharing_one_pipe_never_interleave_mid_line(tmp_path):
    """Regression (CI, 2026-12-02): the runner streams unbuffered (PYTHONUNBUFFERED), and an
    unbuffered ``print("RAN", rank)`` is several writes, so two ranks came out as 'RANRAN 1 0'. The
    shim line-buffers stdout and stderr, so each line reaches the shared pipe in one write."""
    import re
    import subprocess
    import sys

    from ddp_lint.analysis.runtime.launcher import SHIM_PATH

    child = tmp_path / "child.py"
    child.write_text(
        "import os, sys\nr = os.environ['R']\n"
        "for i in range(2000):\n"
        "    print('RAN', r, 'line', i, 'end')\n"
        "    if i % 250 == 0:\n"
        "        print('ERR', r, i, file=sys.stderr)\n")
    r, w = os.pipe()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DDP_LINT_LOG_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, SHIM_PATH, str(child)], stdout=w, stderr=w, stdin=subprocess.DEVNULL,
                              env={**env, "R": str(k)}) for k in range(4)]
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read().decode()
    assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    lines = [ln for ln in data.splitlines() if not ln.startswith("ddp-lint shim")]
    bad = [ln for ln in lines if not re.fullmatch(r"RAN \d line \d+ end|ERR \d \d+", ln)]
    assert not bad, bad[:5]
    assert len(lines) == 4 * (2000 + 8)


def test_log_reader_memory_stays_bounded(tmp_path):
    """A rank that ran 200,000 collectives: the reader counts the ones that returned and keeps
    only what the analysis needs (the one still running, the ones that raised, the first and last
    records of each kind)."""
    import json

    from ddp_lint.analysis.runtime.logs import LogReader

    def line(**rec):
        return json.dumps({"rank": 0, "t": 1.0, "pid": 1, **rec}) + "\n"

    with open(tmp_path / "rank-0.jsonl", "w") as f:
        f.write(line(kind="start", main_thread=1))
        for seq in range(1, 200_001):
            f.write(line(kind="call", seq=seq, op="all_reduce", file="/w/t.py", line=9, function="step"))
            if seq == 7:
                f.write(line(kind="raise", seq=seq, op="all_reduce", error="RuntimeError: boom"))
            else:
                f.write(line(kind="return", seq=seq, op="all_reduce"))
            if seq % 10 == 0:
                f.write(line(kind="note", message=f"note {seq}"))
        f.write(line(kind="quiet", completed=1000))
        f.write(line(kind="call", seq=200_001, op="barrier", file="/w/t.py", line=12, function="main", t=9.0))
    reader = LogReader(str(tmp_path), 1)
    reader.poll()
    rd = reader.ranks[0]
    assert rd.completed == 199_999 + 1000
    assert list(rd.pending) == [200_001] and rd.pending[200_001]["op"] == "barrier"
    assert list(rd.raised) == [7] and rd.raised[7][1] == "RuntimeError: boom"
    assert len(rd.events) <= LogReader.MAX_EVENTS and rd.dropped > 0
    assert rd.first("start") is not None and rd.last_t == 9.0


def test_a_hung_rank_without_stack_or_logged_call_is_still_reported(tmp_path):
    """Past the log budget quick collectives are only counted; a rank that then did not answer the
    stack request in time (a loaded machine) used to vanish from the findings. Its latest
    collective's call site (carried by the "quiet" records) places it."""
    import json

    from ddp_lint.analysis.runtime.launcher import SHIM_PATH
    from ddp_lint.analysis.runtime.logs import LogReader
    from ddp_lint.analysis.runtime.findings import analyse
    from ddp_lint.analysis.runtime.states import UserCode

    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\nwhile True:\n    dist.all_reduce(t)\n")
    site = {"file": str(script), "line": 3, "function": "<module>"}
    for r in (0, 1):
        with open(tmp_path / f"rank-{r}.jsonl", "w") as f:
            for rec in ({"kind": "start", "main_thread": 1}, {"kind": "ready"},
                        {"kind": "quiet", "completed": 5000, "site": site}):
                f.write(json.dumps({"rank": r, "t": 1.0, "pid": 100 + r, **rec}) + "\n")
    reader = LogReader(str(tmp_path), 2)
    reader.poll()
    for rd in reader.ranks.values():
        rd.hung = True  # asked for its stack; no answer
    a = analyse(reader.ranks, user=UserCode([str(tmp_path)], [], SHIM_PATH), timed_out=True, timeout=3.0,
                emulated=False)
    assert [(f.code, f.range.start.line + 1, f.ranks) for f in a.findings] == [("DDP903", 3, (0, 1))]


def test_runtime_message_is_assembled_once_from_fields():
    """One formatter (analysis/output.py) serves the CLI text, the JSON and the editor: the finding's
    message holds only the text; see-rule, emulation and ranks come from its fields."""
    from ddp_lint.analysis.model import Finding, Range, Related, Severity
    from ddp_lint.analysis.output import display_message, finding_to_json, related_message
    from ddp_lint.analysis.runtime.findings import rule_meta

    name, url = rule_meta("DDP903")
    assert name == "hang" and url.endswith("DDP903.md")
    f = Finding("DDP903", name, "rank 1 hangs in barrier() here", Severity.ERROR, Range.of(2, 0, 2, 5), "/x/a.py",
                (Related(Range.of(4, 0, 4, 1), "waiting here", "/x/a.py", (0,)),), None, url, (1,), True,
                {"static_rule": "DDP001"})
    assert display_message(f) == "rank 1 hangs in barrier() here (see DDP001) (emulated on CPU) [rank 1]"
    j = finding_to_json(f)
    assert j["message"] == "rank 1 hangs in barrier() here (see DDP001) (emulated on CPU)"
    assert j["ranks"] == [1] and j["emulated"] is True and j["name"] == "hang" and j["related"][0]["ranks"] == [0]
    assert related_message(f.related[0]) == "waiting here [rank 0]"
    static = Finding("DDP001", "x", "plain", Severity.ERROR, Range.of(0, 0, 0, 1), "/x/a.py")
    assert display_message(static) == "plain" and "ranks" not in finding_to_json(static)


def test_runtime_sources_stay_small_and_the_shim_parts_stay_standalone():
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "analysis"
    for p in root.rglob("*.py"):
        assert len(p.read_text().splitlines()) <= 900, p
    for name in ("shim.py", "shim_emulation.py", "shim_emulation_dist.py", "shim_output.py"):
        tree = ast.parse((root / "runtime" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0 and not (node.module or "").startswith("ddp_lint"), (name, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("ddp_lint") for a in node.names), name


def test_a_rank_killed_by_sigkill_is_the_root_cause_even_when_the_others_show_no_collective(tmp_path):
    """torchrun tore rank 0 down right after rank 1 was SIGKILLed, before rank 0 showed what it waited
    in: rank 1 is still the finding (DDP904, "likely the OOM killer"), at the line it was last seen,
    with rank 0 where it was stopped; never a DDP901 for the innocent or an anonymous crash."""
    import json

    from ddp_lint.analysis.runtime.findings import analyse
    from ddp_lint.analysis.runtime.launcher import SHIM_PATH
    from ddp_lint.analysis.runtime.logs import LogReader
    from ddp_lint.analysis.runtime.states import UserCode

    script = tmp_path / "train.py"
    script.write_text("import torch\nx = 1\ny = compute(x)\nz = grow()\n")
    for r in (0, 1):
        with open(tmp_path / f"rank-{r}.jsonl", "w") as f:
            f.write(json.dumps({"kind": "start", "rank": r, "t": 1.0, "pid": 10 + r, "main_thread": 7,
                                "script": str(script)}) + "\n")
            f.write(json.dumps({"kind": "ready", "rank": r, "t": 1.1, "pid": 10 + r}) + "\n")
    (tmp_path / "seen-1").write_text(json.dumps({"file": str(script), "line": 4, "function": "<module>", "t": 2.0}))
    (tmp_path / "stack-0.term").write_text(
        f'Current thread 0x0000000000000007 (most recent call first):\n  File "{script}", line 3 in <module>\n')
    reader = LogReader(str(tmp_path), 2)
    reader.poll()
    reader.read_stacks()
    banner = "[1]:\n  time : x\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 11)\n"
    a = analyse(reader.ranks, user=UserCode([str(tmp_path)], [], SHIM_PATH), timed_out=False, timeout=30.0,
                emulated=False, output=banner)
    assert [(f.code, f.range.start.line + 1, f.ranks) for f in a.findings] == [("DDP904", 4, (1,))]
    f = a.findings[0]
    assert "killed (SIGKILL; likely the OOM killer)" in f.message
    assert [(r.range.start.line + 1, r.ranks) for r in f.related] == [(3, (0,))]


def test_counts_of_one_are_singular(tmp_path):
    from ddp_lint.analysis.runtime.emulate_policy import should_emulate
    from ddp_lint.analysis.runtime.findings import Sources, world_size_hint
    from ddp_lint.analysis.runtime.states import RankState, count

    assert count(1, "rank") == "1 rank" and count(2, "rank") == "2 ranks" and count(0, "GPU") == "0 GPUs"
    assert RankState(0, status="ok", collectives=1).summary() == "rank 0: finished cleanly (1 collective)"
    assert RankState(0, status="ok", collectives=3).summary() == "rank 0: finished cleanly (3 collectives)"
    _, why = should_emulate("x.py", 1, 0, "on")
    assert "1 rank on the CPU" in why and "1 emulated GPU " in why, why
    script = tmp_path / "s.py"
    script.write_text("import torch\ntorch.cuda.set_device(0)\nimport torch.distributed as dist\n"
                      "dist.init_process_group('nccl')\n")
    _, why = should_emulate(str(script), 1, 0, "auto")
    assert "0 GPUs for 1 rank;" in why and "running 1 rank on" in why and "1 emulated GPU " in why, why
    _, why = should_emulate(str(script), 1, 1, "auto")
    assert why.endswith("1 GPU for 1 rank"), why
    s = tmp_path / "w.py"
    s.write_text("dist.init_process_group('gloo', world_size=2)\n")
    hint = world_size_hint(Frame(str(s), 1), Sources(), 1)
    assert hint and "but 1 rank was launched" in hint, hint


def test_root_clash_names_each_ranks_root_and_ddp108():
    from ddp_lint.analysis.runtime.findings import root_clash
    from ddp_lint.analysis.runtime.states import RankState

    def st(r, root):
        return RankState(r, op="gather_object", op_root=root)

    states = {0: st(0, ("dst", 0)), 1: st(1, ("dst", 1)), 2: st(2, ("dst", 0))}
    text, hint = root_clash(states, [0, 1, 2])
    assert text == "the ranks passed different roots: rank 0 dst=0, rank 1 dst=1, rank 2 dst=0"
    assert "same dst to gather_object()" in hint and "(static rule DDP108)" in hint
    assert root_clash({0: st(0, ("dst", 0)), 1: st(1, ("dst", 0))}, [0, 1]) is None  # same root
    assert root_clash({0: st(0, None), 1: st(1, ("dst", 1))}, [0, 1]) is None  # unknown: nothing


# -- where a rank that finished early left its peers' loop (runtime/exits.py) -----------------------
def test_loop_exits_names_the_loops_own_conditional_exits():
    from ddp_lint.analysis.runtime.exits import loop_exits

    src = (
        "def train(loader, model):\n"          # 1
        "    for step, batch in enumerate(loader):\n"  # 2
        "        for p in model.parameters():\n"       # 3
        "            if p is None:\n"                  # 4
        "                break\n"                      # 5  inner loop's break: not a way out
        "        def cb():\n"                          # 6
        "            return 1\n"                       # 7  nested function: not a way out
        "        try:\n"                               # 8
        "            loss = model(batch)\n"            # 9
        "        except RuntimeError:\n"               # 10
        "            return None\n"                    # 11 only when this rank's step failed
        "        if not loss.isfinite():\n"            # 12
        "            sys.exit(1)\n"                    # 13
        "        loss.backward()\n"                    # 14
        "        break\n"                              # 15 unconditional: every rank takes it
    )
    found = loop_exits(src, 14)
    assert (found.loop_line, found.loop_kind, found.endless) == (2, "for", False)
    assert [(e.line, e.kind) for e in found.exits] == [(11, "return"), (13, "exit")]
    assert found.exits[0].condition == "an exception was raised"
    assert found.exits[1].condition == "not loss.isfinite()"


def test_loop_exits_stops_at_the_function_and_reads_while_true():
    from ddp_lint.analysis.runtime.exits import loop_exits

    src = (
        "for epoch in range(3):\n"                 # 1
        "    def step(model):\n"                   # 2
        "        model.sync()\n"                   # 3  in a function: the outer loop is not its loop
        "    while True:\n"                        # 4
        "        x = get()\n"                      # 5
        "        if x is None:\n"                  # 6
        "            break\n"                      # 7
        "        else:\n"                          # 8
        "            reduce(x)\n"                  # 9
    )
    assert loop_exits(src, 3) is None
    found = loop_exits(src, 9)
    assert (found.loop_line, found.loop_kind, found.endless) == (4, "while", True)
    assert [(e.line, e.kind, e.condition) for e in found.exits] == [(7, "break", "x is None")]
    assert loop_exits("def f(:\n", 1) is None  # does not parse: no answer
    assert loop_exits("x = 1\n", 1) is None  # not in a loop


def test_loops_around_reads_every_loop_with_its_skipping_continues():
    from ddp_lint.analysis.runtime.exits import loops_around

    src = (
        "for epoch in range(3):\n"           # 1
        "    for x in loader:\n"              # 2
        "        if bad(x):\n"                # 3
        "            continue\n"              # 4
        "        try:\n"                      # 5
        "            step(x)\n"               # 6
        "        except OSError:\n"           # 7
        "            continue\n"              # 8
        "        if late(x):\n"               # 9
        "            continue\n"              # 10
        "for p in model.parameters():\n"     # 11
        "    sync(p)\n"                       # 12
    )
    inner, outer = loops_around(src, 6)
    assert (inner.loop_line, inner.uniform, outer.loop_line, outer.uniform) == (2, False, 1, True)
    # the continue above the line and the one in the except of the try around it skip it; the one
    # below does not
    assert [(e.line, e.kind, e.condition) for e in inner.exits] == [
        (4, "continue", "bad(x)"), (8, "continue", "an exception was raised")]
    assert outer.exits == []
    (params,) = loops_around(src, 12)
    assert params.uniform and params.exits == []
    assert loops_around(src, 11) == [] and loops_around("def f(:\n", 1) == []


def test_a_rank_sampled_in_the_decorators_around_a_collective_is_in_that_collective(tmp_path):
    """The CI flake of stop 60: a rank sampled in torch's ``c10d_logger`` wrapper (or in the shim's
    recording wrapper) before it entered ``all_reduce`` was reported as being in ``wrapper()``. The
    shim's stack dump names the collective its wrapper frame records, and that is the rank's op."""
    import json
    from ddp_lint.analysis.runtime import shim as shim_mod
    from ddp_lint.analysis.runtime.states import RankState, _op_from_stack, _py_main_stack

    shim = os.path.abspath(shim_mod.__file__)
    user = UserCode([str(tmp_path)], ["/venv/lib/python3.11/site-packages"], shim)
    script = str(tmp_path / "loop.py")
    c10d = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
    outer = [{"file": script, "line": 22, "function": "<module>"},
             {"file": shim, "line": 334, "function": "wrapper", "op": "all_reduce"}]
    for inner in ([{"file": c10d, "line": 80, "function": "wrapper"}],  # torch's decorator, before the call
                  [],  # the shim's own wrapper frame
                  [{"file": shim, "line": 250, "function": "_collective_begin"}]):  # writing its record
        data = json.loads(json.dumps({"main_thread": 1, "threads": {"1": outer + inner}}))
        frames = _py_main_stack(data, 1)
        st = RankState(rank=0, site=Frame(script, 22, "<module>"))
        _op_from_stack(st, frames, user)
        assert (st.op, st.op_site) == ("all_reduce", st.site), inner

    # without the dump's name (faulthandler's text), the walk still ends at the function called
    frames = [Frame(c10d.replace("c10d_logger", "distributed_c10d"), 3245, "all_reduce"), Frame(c10d, 83, "wrapper"),
              Frame(shim, 334, "wrapper"), Frame(script, 22, "<module>")]
    st = RankState(rank=0, site=Frame(script, 22, "<module>"))
    _op_from_stack(st, frames, user)
    assert st.op == "all_reduce"

    # a rank in its own code under no collective is busy, not in one
    st = RankState(rank=0, site=Frame(script, 22, "<module>"))
    _op_from_stack(st, [Frame(script, 5, "helper"), Frame(script, 22, "<module>")], user)
    assert st.op is None


def test_the_shim_dump_names_the_collective_of_its_wrapper_frames(tmp_path, monkeypatch):
    """The SIGUSR2 dump, taken inside a recorded call, carries the op of the recording wrapper."""
    import json
    from ddp_lint.analysis.runtime import shim as shim_mod

    monkeypatch.setenv("DDP_LINT_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(shim_mod, "_PID", os.getpid())
    monkeypatch.setattr(shim_mod, "_RANK", 0)
    seen = {}

    def fake_all_reduce(*a, **k):
        shim_mod._dump_python_stacks()
        seen["data"] = json.loads((tmp_path / "stack-0.py").read_text())

    monkeypatch.setattr(shim_mod, "_collective_begin", lambda seq, rec: False)
    monkeypatch.setattr(shim_mod, "_collective_end", lambda *a, **k: None)
    monkeypatch.setattr(shim_mod, "_caller_site", lambda: None)
    shim_mod._wrap_collective("all_reduce", fake_all_reduce)()
    data = seen["data"]
    frames = data["threads"][str(data["main_thread"])]
    assert [f.get("op") for f in frames if f["function"] == "wrapper" and f["file"] == shim_mod.__file__] \
        == ["all_reduce"]
