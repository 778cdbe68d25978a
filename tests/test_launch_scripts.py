"""DDP701 (issue 27): launch scripts that turn the Flight Recorder on but leave its dumps on each
node's local disk (analysis/launch_scripts.py), and `ddp-lint explain` reading them among its inputs."""
from __future__ import annotations

import pytest

from analysis.launch_scripts import check_launch_script, looks_like_launch_script
from analysis.runtime.explain import explain

HEAD = "#!/bin/bash\n#SBATCH --nodes=4\n"
RUN = "srun torchrun --nnodes 4 --nproc-per-node 8 train.py\n"


def codes(text):
    return [(f.code, f.range.start.line + 1) for f in check_launch_script(text, "job.sh")]


@pytest.mark.parametrize("body,expected", [
    ("export TORCH_FR_BUFFER_SIZE=2000\n" + RUN, [("DDP701", 3)]),  # default /tmp/nccl_trace_rank_
    ("export TORCH_FR_BUFFER_SIZE=2000\nexport TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/trace_\n" + RUN, [("DDP701", 4)]),
    ("export TORCH_FR_BUFFER_SIZE=2000\nexport TORCH_FR_DUMP_TEMP_FILE=$SLURM_TMPDIR/t_\n" + RUN, [("DDP701", 4)]),
    ("export TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=/dev/shm/t_\n" + RUN, [("DDP701", 3)]),
    ("TORCH_NCCL_TRACE_BUFFER_SIZE=100 python -m torch.distributed.run --nproc-per-node 8 \\\n    train.py\n",
     [("DDP701", 3)]),  # the older name, on the command line itself, a continued line
    ("#SBATCH --export=ALL,TORCH_FR_BUFFER_SIZE=2000\n" + RUN, [("DDP701", 3)]),
    # no finding:
    ("export TORCH_FR_BUFFER_SIZE=2000\nexport TORCH_FR_DUMP_TEMP_FILE=$HOME/fr/$SLURM_JOB_ID/t_\n" + RUN, []),
    ("export TORCH_FR_BUFFER_SIZE=2000\nexport TORCH_FR_DUMP_TEMP_FILE=/shared/fr/t_\n" + RUN, []),
    ("export TORCH_FR_BUFFER_SIZE=0\n" + RUN, []),  # recorder off
    (RUN, []),
    ("export TORCH_FR_BUFFER_SIZE=2000\npython train.py\n", []),  # not a distributed launch
    # a comment or a string never decides
    ("# export TORCH_FR_BUFFER_SIZE=2000\n" + RUN, []),
    ("echo 'export TORCH_FR_BUFFER_SIZE=2000'\n" + RUN, []),
    ("export TORCH_FR_BUFFER_SIZE=2000\n# export TORCH_FR_DUMP_TEMP_FILE=/shared/t_\n" + RUN, [("DDP701", 3)]),
])
def test_rule(body, expected):
    assert codes(HEAD + body) == expected


def test_unclosed_quote_and_garbage_do_not_raise():
    assert codes(HEAD + "export TORCH_FR_BUFFER_SIZE=2000 'oops\n" + RUN) == [("DDP701", 3)]
    assert codes("\x00\x01 not a script") == []


def test_only_shell_scripts_are_read():
    assert looks_like_launch_script(HEAD) and looks_like_launch_script("#!/usr/bin/env bash\n")
    assert not looks_like_launch_script("#!/usr/bin/env python\nimport torch\n")
    assert not looks_like_launch_script("export TORCH_FR_BUFFER_SIZE=2\n")


def test_explain_reports_the_launch_script_among_its_inputs(tmp_path):
    (tmp_path / "job.sbatch").write_text(HEAD + "export TORCH_FR_BUFFER_SIZE=2000\n" + RUN)
    res = explain([str(tmp_path)], root=str(tmp_path))
    assert [(f.code, f.filename, f.range.start.line + 1) for f in res.findings] == [
        ("DDP701", str(tmp_path / "job.sbatch"), 3)]
    assert res.exit_code == 1


def _check(*args, cwd):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "ddp_lint", "check", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(root)})


def test_check_reads_a_named_launch_script(tmp_path):
    job = tmp_path / "job.sbatch"
    job.write_text(HEAD + "export TORCH_FR_BUFFER_SIZE=2000\n" + RUN)
    p = _check(job, "--no-cache", cwd=tmp_path)
    assert p.returncode == 1 and f"{job}:3:8: DDP701" in p.stdout
    p = _check(job, "--ignore", "DDP701", cwd=tmp_path)
    assert p.returncode == 0
    script = tmp_path / "tool"  # an extensionless Python script is still checked as Python
    script.write_text("#!/usr/bin/env python\nimport torch.distributed as dist\nimport torch\n"
                      "dist.init_process_group('nccl')\nx = torch.ones(1).cuda()\n")
    p = _check(script, "--select", "DDP701", cwd=tmp_path)
    assert p.returncode == 0 and "DDP701" not in p.stdout
