"""Device pinning (issue 25, helper devpin): DDP001's use of the current device before the pin
(before the init too; a pin made by a project helper; a group that is NCCL where the call's own
test says so; a device taken from an argparse default or a config dict), DDP011 (model
parallelism of one process under several ranks) and the world-size reading they share
(``rank_tests.world_size_source`` / ``single_process_side``)."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import project


def _lines(code: str, src: str, filename: str = "train.py") -> list[int]:
    res = check_source(textwrap.dedent(src), filename, Settings(select=[code]))
    return sorted(f.range.start.line + 1 for f in res.findings if f.code == code)


# -- DDP001: a use of the current device before the pin --------------------------------------------

WARMUP = """
import os
import torch
import torch.distributed as dist

{warm}
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
{after}
dist.all_reduce(torch.ones(1, device=f"cuda:{{local_rank}}"))
"""


def test_warmup_tensor_before_init_and_pin_is_reported():
    src = WARMUP.format(warm='torch.empty(1, device="cuda", requires_grad=True).backward()', after="")
    assert _lines("DDP001", src) == [6]


def test_warmup_tensor_after_pin_or_on_cpu_is_not_reported():
    after = WARMUP.format(warm="", after='torch.empty(1, device="cuda", requires_grad=True).backward()')
    cpu = WARMUP.format(warm="torch.empty(1, requires_grad=True).backward()", after="")
    named = WARMUP.format(warm='torch.empty(1, device=f"cuda:{os.environ[\'LOCAL_RANK\']}").sum()', after="")
    assert _lines("DDP001", after) == []
    assert _lines("DDP001", cpu) == []
    assert _lines("DDP001", named) == []


def test_warmup_in_a_branch_before_the_pin_is_not_judged():
    # only the straight-line path to the init and the pin counts
    src = WARMUP.format(warm='if os.environ.get("WARM"):\n    torch.empty(1, device="cuda").sum()', after="")
    assert _lines("DDP001", src) == []


def test_collective_before_project_helper_pin(tmp_path):
    project.clear()
    (tmp_path / "devs.py").write_text("import torch\n\n\ndef pin_gpu(i):\n    torch.cuda.set_device(i)\n")
    main = tmp_path / "main_loop.py"
    src = textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist
        from devs import pin_gpu


        def setup(cfg):
            dist.init_process_group(backend=cfg.backend)
            if cfg.backend == "nccl":
                dist.all_reduce(torch.zeros(1).cuda())
            pin_gpu(int(os.environ["LOCAL_RANK"]))
    """)
    main.write_text(src)
    assert _lines("DDP001", src, str(main)) == [11]
    # the same with the pin first: nothing
    fixed = src.replace('            pin_gpu(int(os.environ["LOCAL_RANK"]))\n', "").replace(
        "    dist.init_process_group(backend=cfg.backend)\n",
        '    dist.init_process_group(backend=cfg.backend)\n    pin_gpu(int(os.environ["LOCAL_RANK"]))\n')
    main.write_text(fixed)
    project.clear()
    assert _lines("DDP001", fixed, str(main)) == []


def test_config_backend_not_tested_is_not_nccl(tmp_path):
    project.clear()
    (tmp_path / "devs.py").write_text("import torch\n\n\ndef pin_gpu(i):\n    torch.cuda.set_device(i)\n")
    main = tmp_path / "main_loop.py"
    src = textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist
        from devs import pin_gpu


        def setup(cfg):
            dist.init_process_group(backend=cfg.backend)
            if cfg.use_gpu:
                dist.all_reduce(torch.zeros(1).cuda())
            pin_gpu(int(os.environ["LOCAL_RANK"]))
    """)
    main.write_text(src)
    assert _lines("DDP001", src, str(main)) == []


def test_project_helper_pin_counts_as_a_pin(tmp_path):
    # before: `pin_gpu` (kind 0 by name) was not seen as a pin, and the file "never pinned"
    project.clear()
    (tmp_path / "devs.py").write_text("import torch\n\n\ndef pin_gpu(i):\n    torch.cuda.set_device(i)\n")
    main = tmp_path / "run.py"
    src = textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist
        from devs import pin_gpu

        local_rank = int(os.environ["LOCAL_RANK"])
        pin_gpu(local_rank)
        dist.init_process_group("nccl")
        dist.all_gather_object([None, None], local_rank)
    """)
    main.write_text(src)
    assert _lines("DDP001", src, str(main)) == []


def test_device_from_argparse_default_is_the_current_device():
    src = """
    import argparse
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    dist.init_process_group("nccl")
    x = torch.ones(1).to(args.device)
    dist.all_reduce(x)
    """
    assert _lines("DDP001", src) == [9]
    # a store of its own in the module (the per-rank device) wins over the default
    stored = src.replace('x = torch', 'args.device = torch.device("cuda", dist.get_rank() % 8)\nx = torch')
    assert _lines("DDP001", textwrap.dedent(stored).replace("\nargs.device", "\nargs.device")) == []


# -- DDP011 ------------------------------------------------------------------------------------------

FLAGS = """
import os
import torch
import transformers


def train(name):
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    ddp = world_size != 1
    model = transformers.AutoModelForCausalLM.from_pretrained(name)
    if {cond}:
        model.model_parallel = True
    return model
"""


def test_flags_reported_unless_single_process_only():
    assert _lines("DDP011", FLAGS.format(cond="torch.cuda.device_count() > 1")) == [12]
    assert _lines("DDP011", FLAGS.format(cond="not ddp and torch.cuda.device_count() > 1")) == []
    assert _lines("DDP011", FLAGS.format(cond="world_size == 1")) == []
    assert _lines("DDP011", FLAGS.format(cond="int(os.getenv('WORLD_SIZE', '1')) < 2")) == []


def test_device_map_auto_needs_sign_of_several_processes():
    src = """
    import torch
    from transformers import AutoModelForCausalLM

    def generate(name):
        return AutoModelForCausalLM.from_pretrained(name, device_map="auto")
    """
    assert _lines("DDP011", src) == []
    ranked = src.replace("def generate(name):\n", "def generate(name):\n        torch.cuda.set_device(int(__import__('os').environ['LOCAL_RANK']))\n")
    assert _lines("DDP011", ranked) == []  # not an environment read by value flow
    envd = src.replace("import torch\n", "import os\n    import torch\n").replace(
        "def generate(name):\n", "def generate(name):\n        local_rank = int(os.environ['LOCAL_RANK'])\n")
    assert _lines("DDP011", envd) == [8]


def test_device_map_on_the_main_rank_only_is_not_reported():
    src = """
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    def export(name):
        dist.init_process_group("nccl")
        if dist.get_rank() == 0:
            AutoModelForCausalLM.from_pretrained(name, device_map="balanced").save_pretrained("out")
    """
    assert _lines("DDP011", src) == []


def test_world_size_source_reads_environ_get_and_helpers():
    from ddp_lint.analysis.flow.rank_tests import single_process_side

    src = textwrap.dedent("""
        import os

        def get_world():
            return int(os.environ.get("WORLD_SIZE", 1))

        def f():
            a = int(os.environ.get("WORLD_SIZE", 1))
            b = get_world()
            ddp = a != 1
            if a > 1: pass
            if b == 1: pass
            if not ddp: pass
            if os.getenv("WORLD_SIZE") != "1": pass
    """)
    tree = ast.parse(src)

    class Ctx:
        pass

    from ddp_lint.analysis.semantic import Semantic

    ctx = Ctx()
    ctx.sem = Semantic(tree)
    ctx.qn = lambda n: ctx.sem.call_qualname(n) if isinstance(n, ast.Call) else ctx.sem.qualname(n)
    fn = ctx.sem.functions["f"][0]
    tests = [s.test for s in fn.body if isinstance(s, ast.If)]
    assert [single_process_side(ctx, t, fn) for t in tests] == ["orelse", "body", "body", "orelse"]


# -- DDP001: a spawned worker that joins through a helper and never pins ----------------------------

WORKER = """
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def setup(rank, world, backend="nccl"):
    dist.init_process_group(backend, rank=rank, world_size=world)


def worker(rank, world):
    setup(rank, world{backend})
{pin}    out = [None] * world
    dist.all_gather_object(out, rank)


def main():
    mp.spawn(worker, args=(2,), nprocs=2)
"""


def test_spawned_worker_without_pin_is_reported_at_its_join():
    assert _lines("DDP001", WORKER.format(backend="", pin="")) == [12]


def test_spawned_worker_that_pins_or_uses_gloo_is_not_reported():
    assert _lines("DDP001", WORKER.format(backend="", pin="    torch.cuda.set_device(rank)\n")) == []
    assert _lines("DDP001", WORKER.format(backend=', backend="gloo"', pin="")) == []
    # not a spawn target: its caller may have pinned
    assert _lines("DDP001", WORKER.format(backend="", pin="").replace("mp.spawn(worker, args=(2,), nprocs=2)",
                                                                      "worker(0, 1)")) == []


def test_helper_group_is_reported_where_the_rank_device_is_bound(tmp_path):
    project.clear()
    (tmp_path / "dutils.py").write_text(
        "import torch.distributed as dist\n\n\ndef init_distributed():\n    dist.init_process_group('nccl')\n")
    main = tmp_path / "shard.py"
    src = textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist
        from dutils import init_distributed


        class Sharder:
            def __init__(self):
                init_distributed()
                self.rank = dist.get_rank()
                self.dev = torch.device("cuda:{}".format(os.environ["LOCAL_RANK"]))

            def gather(self, x):
                out = [torch.empty_like(x).cuda() for _ in range(2)]
                dist.all_gather(out, x.cuda())
    """)
    main.write_text(src)
    # at the binding of the rank's device (where the pin belongs), not at the helper call (line 10)
    assert _lines("DDP001", src, str(main)) == [12]


def test_init_in_a_helper_with_the_backend_passed_in(tmp_path):
    project.clear()
    (tmp_path / "devs.py").write_text("import torch\n\n\ndef pin_gpu(i):\n    torch.cuda.set_device(i)\n")
    main = tmp_path / "runner.py"
    src = textwrap.dedent("""
        import os
        import torch
        import torch.distributed as dist
        from devs import pin_gpu


        def join(backend):
            dist.init_process_group(backend=backend)


        def run(backend):
            join(backend)
            if backend == "nccl":
                dist.all_reduce(torch.ones(1).cuda())
            pin_gpu(int(os.environ["LOCAL_RANK"]))
    """)
    main.write_text(src)
    assert _lines("DDP001", src, str(main)) == [15]
    gloo = src.replace('if backend == "nccl":', 'if backend == "gloo":')
    main.write_text(gloo)
    project.clear()
    assert _lines("DDP001", gloo, str(main)) == []
