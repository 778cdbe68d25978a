"""Issue 16: the rank that caused a failure is blamed, not the ones that waited for it, and torch's
own diagnosis is kept. Each test runs a real 2-rank gloo job and asserts lines, ranks and codes."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_torch
from tests.runtime.test_run import line, marks, rel

SCRIPTS = Path(__file__).resolve().parent / "scripts16"
TIMEOUT = 20.0  # an upper bound only: every case below ends by torch's own error or a rank's exit

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _torch():
    require_torch()


def run(name: str, timeout: float = TIMEOUT, **kw):
    from ddp_lint.analysis.runtime.api import run_script

    return run_script(str(SCRIPTS / name), nproc=2, timeout=timeout, emulate="off", **kw)


def codes(res):
    return [(f.code, line(f), f.ranks) for f in res.findings]


def only(res, code):
    assert [f.code for f in res.findings] == [code], [(f.code, f.message) for f in res.findings]
    return res.findings[0]


def test_uneven_inputs_blame_the_rank_that_finished():
    m = marks(SCRIPTS / "uneven_inputs.py")
    res = run("uneven_inputs.py")
    f = only(res, "DDP904")
    # the loop has no early exit: rank 1's loop ran out of items; the finding sits on the loop
    assert line(f) == m["loop"] and f.ranks == (1,), codes(res)
    assert rel(f) == [(m["wait"], (0,)), (m["last"], (1,))]
    assert "finished the script" in f.message and "backward()" in f.message and "DDP's gradient all-reduce" in f.message
    assert "ran out of items" in f.message and "join()" in f.message


def test_a_rank_local_break_is_the_root_cause():
    m = marks(SCRIPTS / "local_break.py")
    res = run("local_break.py")
    f = only(res, "DDP904")
    # placed on the `break` it took (the loop's only early exit), not on the script's last line
    assert f.ranks == (0,) and line(f) == m["brk"], codes(res)
    assert rel(f) == [(m["wait"], (1,)), (m["end"], (0,))]
    assert "`rank == 0 and step == 3` held on rank 0 only" in f.message, f.message
    assert f.details["static_rule"] == "DDP107" and "DDP107" in f.details["hint"]  # issue 28: the static rule


def test_a_conditional_continue_that_skips_a_helpers_collective_is_the_root_cause():
    """The peers wait in an all_reduce inside a helper of another file, called from the training
    loop; rank 1 skipped one call through a conditional `continue` (a NaN step): the finding is on
    that `continue`, not on the helper's loop over the parameters."""
    d = SCRIPTS / "helper_loops"
    m, g = marks(d / "nan_skip.py"), marks(d / "grads.py")
    res = run("helper_loops/nan_skip.py")
    f = only(res, "DDP904")
    assert f.ranks == (1,) and f.filename.endswith("nan_skip.py") and line(f) == m["skip"], codes(res)
    assert "`continue`" in f.message and "torch.isnan(out)" in f.message and f"grads.py:{g['wait']}" in f.message
    assert (g["wait"], (0,)) in rel(f)


def test_a_continue_in_the_except_of_a_failed_step_is_the_root_cause():
    """The `continue` is below the call in the source but runs when the step raised before its
    collective: it is the way rank 1 skipped it (the `raise` in the step is not: rank 1 finished)."""
    m = marks(SCRIPTS / "skipped" / "oom_skip.py")
    res = run("skipped/oom_skip.py")
    f = only(res, "DDP904")
    assert f.ranks == (1,) and line(f) == m["skip"], codes(res)
    assert "`continue`" in f.message and "an exception was raised" in f.message
    assert (m["bwd"], (0,)) in rel(f)


def test_a_rank_still_busy_outside_any_collective_when_another_failed_is_related():
    m = marks(SCRIPTS / "busy_peer.py")
    res = run("busy_peer.py")
    f = only(res, "DDP901")
    assert line(f) == m["raise"] and f.ranks == (1,), codes(res)
    assert rel(f) == [(m["busy"], (0,))]
    assert "outside any collective" in f.related[0].message and "rank 1 failed" in f.related[0].message


def test_a_send_and_a_recv_that_do_not_pair_are_not_blamed_on_a_rank_condition():
    m = marks(SCRIPTS / "p2p_tags.py")
    res = run("p2p_tags.py", timeout=4.0)
    f = only(res, "DDP902")
    assert {line(f)} | {ln for ln, _ in rel(f)} == {m["send"], m["recv"]}, codes(res)
    assert "send()" in f.message and "recv()" in f.message
    assert "tag" in f.details["hint"] and f.details.get("static_rule") is None


def test_an_error_turned_into_sys_exit_by_a_handler_is_still_the_error():
    """Both ranks end with sys.exit(2) from one catch-all handler: the root cause is rank 0's
    FileNotFoundError at its line; rank 1's exit came from the broadcast failing after rank 0 left."""
    m = marks(SCRIPTS / "catch_all_exit.py")
    res = run("catch_all_exit.py")
    f = only(res, "DDP901")
    assert line(f) == m["open"] and f.ranks == (0,), codes(res)
    assert "FileNotFoundError" in f.message
    assert rel(f) == [(m["bcast"], (1,)), (m["exit"], (0,))]
    assert "sys.exit(2)" in [x.message for x in f.related if x.ranks == (0,)][0]


def test_a_waiting_rank_that_wraps_the_peer_error_in_its_own_is_not_a_root_cause():
    m = marks(SCRIPTS / "rewrap.py")
    res = run("rewrap.py")
    f = only(res, "DDP901")
    assert line(f) == m["view"] and f.ranks == (0,), codes(res)
    assert rel(f) == [(m["reduce"], (1,))]


def test_a_rank_that_returned_early_from_a_helper_and_finished_is_blamed_at_the_return():
    d = SCRIPTS / "skipped"
    m, h = marks(d / "return_then_end.py"), marks(d / "helpers.py")
    res = run("skipped/return_then_end.py")
    f = only(res, "DDP904")
    assert f.ranks == (1,) and f.filename.endswith("helpers.py") and line(f) == h["ret"], codes(res)
    assert "returned early from total_count()" in f.message and "len(counts) == 0" in f.message
    assert rel(f) == [(h["reduce"], (0,)), (m["end"], (1,))]


def test_when_torchs_timeout_fires_first_the_busy_rank_is_the_hang():
    """Rank 0's barrier times out (torch's own process-group timeout, shorter than ddp-lint's):
    the finding is rank 1, busy outside any collective, not rank 0 that waited for it."""
    m = marks(SCRIPTS / "busy_past_pg_timeout.py")
    res = run("busy_past_pg_timeout.py")
    f = only(res, "DDP903")
    assert f.ranks == (1,) and line(f) in (m["busy"] - 1, m["busy"]), codes(res)  # the loop or its sleep
    assert rel(f) == [(m["barrier"], (0,))]
    assert "was still running here (in build_index())" in f.message and "torch's timeout" in f.message
    assert "monitoredBarrier" in f.message or "imed out" in f.message, f.message


def test_a_helpers_loop_over_the_parameters_is_not_the_loop_that_ran_short():
    d = SCRIPTS / "helper_loops"
    m = marks(d / "short_shard.py")
    res = run("helper_loops/short_shard.py")
    f = only(res, "DDP904")
    assert f.ranks == (1,) and f.filename.endswith("short_shard.py") and line(f) == m["loop"], codes(res)
    assert "ran out of items" in f.message


def test_a_mismatch_names_the_early_return_through_which_a_rank_skipped_a_helpers_collective():
    d = SCRIPTS / "skipped"
    m, h = marks(d / "early_return.py"), marks(d / "helpers.py")
    res = run("skipped/early_return.py")
    f = only(res, "DDP902")
    # the collective rank 1 went past leads; the `return` it took is a related location
    assert f.filename.endswith("helpers.py") and line(f) == h["reduce"] and f.ranks == (0, 1), codes(res)
    assert rel(f) == sorted([(h["ret"], (1,)), (m["barrier"], (1,))])
    assert f"rank 1 skipped all_reduce(): it returned early from total_count() at line {h['ret']}" in f.message
    assert "len(counts) == 0" in f.message and "all_reduce the flag" in f.details["hint"]
    assert "Detected mismatch" in f.details["torch_message"]


def test_a_mismatch_names_the_rank_condition_around_a_helper_that_runs_ddps_forward():
    d = SCRIPTS / "skipped"
    m, h = marks(d / "eval_on_rank0.py"), marks(d / "helpers.py")
    res = run("skipped/eval_on_rank0.py")
    f = only(res, "DDP902")
    assert f.filename.endswith("helpers.py") and line(f) == h["fwd"], codes(res)
    assert rel(f) == sorted([(m["guard"], (1,)), (m["barrier"], (1,))])
    assert "DDP's forward" in f.message and "`rank == 0` was false" in f.message
    assert "model.module" in f.details["hint"] and f.details["static_rule"] == "DDP104"


def test_a_mismatch_names_the_continue_that_skipped_ddps_backward():
    m = marks(SCRIPTS / "skipped" / "skip_step.py")
    res = run("skipped/skip_step.py")
    f = only(res, "DDP902")
    assert line(f) == m["bwd"] and f.ranks == (0, 1), codes(res)
    assert rel(f) == sorted([(m["skip"], (1,)), (m["metric"], (1,))])
    assert f"skipped the rest of a loop iteration at line {m['skip']}" in f.message
    assert "batch.numel() == 0" in f.message


def test_a_rank_that_left_through_one_of_several_exits_lists_them(tmp_path):
    """Two conditional exits in the loop: the run cannot tell which one rank 1 took, so the finding
    stays where the rank finished and names both exits as related locations."""
    script = tmp_path / "two_exits.py"
    script.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "\n"
        "dist.init_process_group('gloo')\n"
        "rank = dist.get_rank()\n"
        "model = DDP(torch.nn.Linear(4, 1))\n"
        "step = 0\n"
        "while True:\n"
        "    loss = model(torch.ones(2, 4)).sum()\n"
        "    if rank == 1 and step == 2:\n"
        "        break\n"
        "    if step > 1000:\n"
        "        break\n"
        "    loss.backward()\n"
        "    step += 1\n"
        "print('done')\n")
    from ddp_lint.analysis.runtime.api import run_script

    res = run_script(str(script), nproc=2, timeout=TIMEOUT, emulate="off")
    f = only(res, "DDP904")
    assert f.ranks == (1,) and line(f) == 17, codes(res)
    assert (12, (1,)) in rel(f) and (14, (1,)) in rel(f) and (15, (0,)) in rel(f)


def test_rank0_helper_with_a_barrier():
    m = marks(SCRIPTS / "rank0_helper_barrier.py")
    res = run("rank0_helper_barrier.py")
    f = only(res, "DDP904")
    # issue 28: on the guarded collective rank 0 waits in; the rank condition rank 1 did not enter
    # and where rank 1 finished are related (rank 1 did nothing early of its own)
    assert f.ranks == (1,) and line(f) == m["wait"], codes(res)
    assert rel(f) == [(m["guard"], (1,)), (m["last"], (1,))] and "barrier()" in f.message
    assert "did not enter this if (`rank == 0` was false)" in [x.message for x in f.related if x.ranks == (1,)][0]
    assert f"did not enter the if at line {m['guard']} around the call of save()" in f.message, f.message
    assert f.details["static_rule"] == "DDP104" and "DDP104" in f.details["hint"]
    assert "timeout" not in f.message  # no timing claim: nobody waited for ddp-lint's timeout


def test_a_rank_killed_by_sigkill():
    m = marks(SCRIPTS / "sigkill_rank.py")
    res = run("sigkill_rank.py")
    f = only(res, "DDP904")
    assert f.ranks == (1,) and m["killed"] - 3 <= line(f) <= m["killed"], codes(res)  # last seen inside grow()
    assert "killed (SIGKILL; likely the OOM killer)" in f.message
    assert [r for _, r in rel(f)] == [(0,)] and rel(f)[0][0] == m["wait"]
    (r1,) = [r for r in res.ranks if r.rank == 1]
    assert "SIGKILL" in r1.text


def test_a_dataloader_worker_error_is_at_the_worker_line():
    m = marks(SCRIPTS / "dataloader_keyerror.py")
    res = run("dataloader_keyerror.py")
    f = only(res, "DDP901")
    assert f.ranks == (1,) and line(f) == m["getitem"], codes(res)
    assert "KeyError: " in f.message and "DataLoader worker" in f.message
    assert (m["reduce"], (0,)) in rel(f) and (m["loop"], (1,)) in rel(f)


def test_a_mismatch_against_ddps_allreduce_is_one_ddp902():
    m = marks(SCRIPTS / "ddp_mismatch.py")
    res = run("ddp_mismatch.py")
    f = only(res, "DDP902")
    assert f.ranks == (0, 1) and line(f) == m["metric"], codes(res)
    assert rel(f) == [(m["backward"], (1,))]  # the rank condition is on the line above, in plain sight
    assert "backward() (DDP's gradient all-reduce)" in f.message and "all_reduce()" in f.message
    assert f.details["static_rule"] == "DDP104"
    assert "Detected mismatch" in f.details["torch_message"]


def test_a_shape_mismatch_says_the_shapes():
    m = marks(SCRIPTS / "shape_mismatch.py")
    res = run("shape_mismatch.py")
    f = only(res, "DDP902")
    assert f.ranks == (0, 1) and line(f) == m["reduce"], codes(res)
    assert "[5]" in f.message and "[4]" in f.message and "all_reduce()" in f.message


def test_an_unused_parameter_is_named():
    m = marks(SCRIPTS / "unused_param.py")
    res = run("unused_param.py")
    f = only(res, "DDP901")
    assert f.ranks == (0, 1) and line(f) == m["forward"], codes(res)
    assert "head_unused.bias" in f.message and "head_unused.weight" in f.message
    assert "find_unused_parameters=True" in f.details["hint"]
    assert "Expected to have finished reduction" in f.details["torch_message"]  # torch's text, whole


def test_a_required_local_rank_argument():
    m = marks(SCRIPTS / "local_rank_required.py")
    res = run("local_rank_required.py")
    f = only(res, "DDP901")
    # every rank that ran the parse is blamed; torchrun tears the others down once one rank failed, so
    # on a loaded machine a rank still starting its interpreter may never reach it (it is then not
    # blamed, and its status says it was stopped, not that it failed)
    states = [(r.rank, r.status, r.exit_code) for r in res.ranks]
    failed = tuple(sorted(r.rank for r in res.ranks if r.status == "exited" and r.exit_code == 2))
    assert f.ranks and f.ranks == failed and line(f) == m["parse"], (codes(res), states)
    assert all(r.status in ("terminated", "killed", "not-started") for r in res.ranks if r.rank not in failed), states
    assert len(res.ranks) == 2, states
    assert "the following arguments are required: --local_rank" in f.message
    assert "LOCAL_RANK" in f.details["hint"]


# -- every kind of script -----------------------------------------------------------------------------
def test_a_module_run_with_dash_m_keeps_its_relative_imports():
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    pkg = SCRIPTS / "mpkg"
    m = marks(pkg / "trainer" / "util.py")
    mm = marks(pkg / "trainer" / "main.py")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "ddp_lint", "run", "-m", "trainer.main", "--nproc", "2", "--timeout",
                        str(TIMEOUT), "--emulate", "off", "--output-format", "json"], cwd=pkg, env=env,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 1, (p.stdout, p.stderr[-2000:])
    import json

    (f,) = json.loads(p.stdout)
    assert f["code"] == "DDP901" and f["ranks"] == [1] and f["location"]["row"] == m["raise"]
    assert f["filename"].endswith(os.path.join("trainer", "util.py"))
    assert [(r["location"]["row"], r["ranks"]) for r in f["related"]] == [(mm["barrier"], [0])]
    t = subprocess.run([sys.executable, "-m", "ddp_lint", "run", "-m", "trainer.main", "--nproc", "2", "--timeout",
                        str(TIMEOUT), "--emulate", "off"], cwd=pkg, env=env, capture_output=True, text=True, timeout=180)
    assert t.stdout.splitlines()[0].startswith("ddp-lint run: -m trainer.main (trainer/main.py) on 2 ranks under torchrun")


def test_missing_numpy_for_object_collectives_is_an_error_before_launch(tmp_path):
    """torch's object collectives pickle through numpy: without it every rank would fail with a
    confusing error. ddp-lint says so before starting anything, with the install command."""
    import os
    import stat
    import sys

    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text("import sys\nsys.modules['numpy'] = None  # numpy is 'not installed'\n")
    py = tmp_path / "python-without-numpy"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={block}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} \"$@\"\n")
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    res = run("object_gather.py", python=str(py))
    assert res.exit_code == 2 and not res.findings, (res.error, res.notes)
    assert "numpy" in res.error and "-m pip install numpy" in res.error
    assert f"object_gather.py:{marks(SCRIPTS / 'object_gather.py')['gather']}" in res.error
    assert not res.argv  # nothing was launched
    assert os.path.exists(str(py))


# -- silent divergence (DDP906, DDP907) -----------------------------------------------------------------
def test_replicas_that_diverge_are_reported_where_the_model_was_wrapped():
    m = marks(SCRIPTS / "diverged.py")
    res = run("diverged.py")
    f = only(res, "DDP906")
    assert line(f) == m["ddp"] and f.ranks == (0, 1), codes(res)
    assert "'head.weight'" in f.message and "destroy_process_group" in f.message
    assert f.details["parameter"] == "head.weight"


def test_gradients_never_synchronised_when_the_wrapper_is_bypassed():
    m = marks(SCRIPTS / "never_synced.py")
    res = run("never_synced.py")
    f = only(res, "DDP907")
    assert line(f) == m["ddp"] and f.ranks == (0, 1), codes(res)
    assert "never synchronised its gradients" in f.message


def test_a_correct_ddp_loop_with_no_sync_accumulation_is_clean():
    res = run("clean_ddp.py")
    assert res.exit_code == 0 and not res.findings, codes(res)


def test_world_size_4_with_2_ranks_launched_says_so():
    m = marks(SCRIPTS / "world_size4.py")
    res = run("world_size4.py", timeout=4.0)
    f = only(res, "DDP903")
    assert line(f) == m["init"] and f.ranks == (0, 1), codes(res)
    assert "world_size=4" in f.details["hint"] and "2 ranks were launched" in f.details["hint"]


def test_a_self_spawning_script_runs_as_one_process_and_its_ranks_are_recorded():
    """mp.spawn in the script: ddp-lint runs it once (not under torchrun, where every rank would
    spawn a world of its own); each spawned child records itself like a rank."""
    import os

    m = marks(SCRIPTS / "spawn_buggy.py")
    from ddp_lint.analysis.runtime.nodes import free_port

    os.environ["SPAWN_PORT"] = str(free_port())  # a free port: pytest-xdist runs tests side by side
    try:
        res = run("spawn_buggy.py")
        f = only(res, "DDP901")
        assert f.ranks == (1,) and line(f) == m["raise"], codes(res)
        assert rel(f) == [(m["barrier"], (0,))] and "bad shard on rank 1" in f.message
        assert res.launched == "self-spawning" and res.nproc == 2 and len(res.argv) == 3  # python shim script
        assert "--standalone" not in res.argv

        os.environ["SPAWN_PORT"] = str(free_port())
        res = run("spawn_clean.py")
        assert res.exit_code == 0 and not res.findings, codes(res)
        assert res.output.count("TRAINED") == 2 and [r.status for r in res.ranks] == ["ok", "ok"]
    finally:
        os.environ.pop("SPAWN_PORT", None)


def test_text_output_hides_torchruns_banner_and_ends_with_the_report():
    """The ranks' own output stays (their tracebacks without shim frames); torchrun's ChildFailedError
    banner and its traceback are not shown; the report is last, its first line says how."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    p = subprocess.run([sys.executable, "-m", "ddp_lint", "run", str(SCRIPTS / "local_rank_required.py"), "--nproc",
                        "2", "--timeout", str(TIMEOUT), "--emulate", "off"], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    assert "the following arguments are required: --local_rank" in p.stderr  # the ranks' own output
    assert "ChildFailedError" not in p.stderr and "torch/distributed/run.py" not in p.stderr
    assert "shim.py" not in p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("ddp-lint run: ") and "under torchrun" in lines[0]
    assert lines[-1] == "Found 1 runtime problem."


@pytest.mark.parametrize("variant,mark", [("tensor", "bcast"), ("object", "obj")])
def test_ranks_with_different_broadcast_roots_are_named_with_ddp108(variant, mark):
    m = marks(SCRIPTS / "rank_varying_root.py")
    res = run("rank_varying_root.py", timeout=6.0, script_args=[variant])
    f = only(res, "DDP903")
    assert f.ranks == (0, 1) and line(f) == m[mark], codes(res)
    assert "different roots" in f.message and "rank 0 src=0" in f.message and "rank 1 src=1" in f.message, f.message
    assert f.details["static_rule"] == "DDP108" and "DDP108" in f.details["hint"] and "src=0" in f.details["hint"]


def test_text_output_prefixes_each_rank_line_and_json_mode_keeps_it_raw():
    """``ddp-lint run`` in text mode: every line a rank prints starts with ``[rank N] `` and stays whole
    while both ranks print at once; the API without rank_prefix (JSON mode, the language server) keeps
    the ranks' raw output."""
    import os
    import re
    import subprocess
    import sys

    from tests.conftest import ROOT

    p = subprocess.run([sys.executable, "-m", "ddp_lint", "run", str(SCRIPTS / "print_lines.py"), "--nproc", "2",
                        "--timeout", str(TIMEOUT), "--emulate", "off"], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    ranks = [ln for ln in p.stderr.splitlines() if ln.startswith("[rank ")]
    for r in (0, 1):
        mine = [ln for ln in ranks if ln.startswith(f"[rank {r}] ")]
        body = [f"[rank {r}] line {i} from rank {r} " + "x" * 60 for i in range(200)]
        assert [ln for ln in mine if " line " in ln and ln.endswith("x")] == body  # whole, in order
        assert f"[rank {r}] pieces {r} of one line" in mine
        assert f"[rank {r}] partial then the rest" in mine
        assert f"[rank {r}] on stderr from rank {r}" in mine
    assert not [ln for ln in p.stderr.splitlines() if re.search(r"\bline \d+ from rank", ln) and not ln.startswith("[rank ")]
    res = run("print_lines.py")
    assert not res.findings and "line 0 from rank 0 " in res.output and "[rank 0]" not in res.output
