"""The trackers (``fs_effects`` kind ``track``, DDP217) and the check-then-create races
(``flow.fs_races``, DDP218): the flow queries and the rules' decisions on the shapes that the real
bug fixes showed (timm/nanoGPT trackers, Accelerate's exists-then-raise, ClassyVision's
exists-then-makedirs in an options module)."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import Analysis, project
from ddp_lint.analysis.flow.fs_effects import MKDIR, TRACK, call_effects, view_ctx
from ddp_lint.analysis.flow.fs_races import check_then_create, exists_tested
from ddp_lint.analysis.semantic import Semantic


def _analysis(src: str) -> Analysis:
    src = textwrap.dedent(src)
    return Analysis("<test>", Semantic(ast.parse(src)), src)


def _lines(src: str, code: str, filename: str = "<test>.py") -> list[int]:
    res = check_source(textwrap.dedent(src), filename, Settings(select=[code]))
    assert not res.errors, res.errors
    return [f.range.start.line + 1 for f in res.findings if f.code == code]


def test_tracker_calls_are_track_effects():
    an = _analysis("""
        import wandb, mlflow
        from torch.utils.tensorboard import SummaryWriter as SW
        wandb.init(project="p")
        mlflow.start_run()
        SW("runs/x")
        SW()
    """)
    v = view_ctx(an.main)
    effs = [call_effects(v, c) for c in an.main.sem.calls]
    kinds = [[e.kind for e in es] for es in effs]
    assert kinds == [[TRACK], [TRACK], [TRACK], [TRACK]]
    assert effs[2][0].path is not None and effs[3][0].path is None and effs[3][0].cache


def test_mkdir_records_exist_ok():
    an = _analysis("""
        import os
        from pathlib import Path
        def f(p, flag):
            os.makedirs(p)
            os.makedirs(p, exist_ok=True)
            os.makedirs(p, 0o777, True)
            os.makedirs(p, exist_ok=flag)
            os.mkdir(p)
            Path(p).mkdir(parents=True)
            Path(p).mkdir(exist_ok=True)
    """)
    v = view_ctx(an.main)
    got = [e.exist_ok for c in an.main.sem.calls for e in call_effects(v, c) if e.kind == MKDIR]
    assert got == [False, True, True, None, False, False, True]


def test_exists_tests_and_races():
    an = _analysis("""
        import os
        from pathlib import Path
        def f(root, name):
            d = os.path.join(root, name)
            if not os.path.isdir(d):
                os.makedirs(d)
            q = Path(root) / "logs"
            if q.exists():
                pass
            else:
                q.mkdir()
            out = os.path.join(root, "run")
            assert not os.path.exists(out), out
            os.makedirs(out, exist_ok=True)
    """)
    v = view_ctx(an.main)
    fn = an.main.sem.functions["f"][0]
    checks = [c for c in an.main.sem.calls if exists_tested(v, c) is not None]
    assert len(checks) == 3
    races = check_then_create(v, an, fn)
    assert [(r.kind, r.call.lineno) for r in races] == [
        ("create-if-missing", 7), ("create-if-missing", 12), ("fail-if-present", 15)]


def test_no_race_when_the_paths_differ_or_the_error_is_caught():
    an = _analysis("""
        import os
        def f(root):
            if not os.path.exists(root):
                os.makedirs(os.path.join(root, "x"))
            if not os.path.exists(root):
                try:
                    os.makedirs(root)
                except FileExistsError:
                    pass
            if os.path.exists(root):
                print("reusing", root)
            os.makedirs(root, exist_ok=True)
    """)
    fn = an.main.sem.functions["f"][0]
    assert check_then_create(view_ctx(an.main), an, fn) == []


_DIST = """
    import os
    import torch
    import torch.distributed as dist
    import wandb

    def main(args):
        {body}

    if __name__ == "__main__":
        main(None)
"""


def _dist(body: str) -> str:
    return _DIST.format(body=textwrap.indent(textwrap.dedent(body), " " * 8).lstrip())


def test_ddp217_before_setup_and_after_guard():
    src = _dist("""
        wandb.init(project="p")
        dist.init_process_group("nccl")
        if dist.get_rank() == 0:
            wandb.init(project="p")
    """)
    assert _lines(src, "DDP217") == [8]


def test_ddp217_one_run_per_rank_on_purpose_is_not_flagged():
    src = _dist("""
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        wandb.init(project="p", group="job")
        wandb.init(project="p", name=f"worker-{rank}")
    """)
    assert _lines(src, "DDP217") == []


def test_ddp218_exists_then_raise_needs_no_barrier_to_be_flagged():
    bad = _dist("""
        dist.init_process_group("nccl")
        out = os.path.join("runs", "exp")
        if os.path.exists(out):
            raise SystemExit(f"{out} exists")
        os.makedirs(out, exist_ok=True)
    """)
    assert _lines(bad, "DDP218") == [12]
    good = bad.replace("        os.makedirs(out, exist_ok=True)", "        dist.barrier()\n        os.makedirs(out, exist_ok=True)")
    assert _lines(good, "DDP218") == []


def test_ddp218_not_for_the_main_rank_only():
    src = _dist("""
        dist.init_process_group("nccl")
        if dist.get_rank() != 0:
            return
        if not os.path.exists("out"):
            os.makedirs("out")
    """)
    assert _lines(src, "DDP218") == []


def test_ddp218_in_a_module_a_distributed_file_calls(tmp_path):
    # the options module itself launches nothing: its caller in another file runs it on every rank
    project.clear()
    (tmp_path / "opts.py").write_text(textwrap.dedent("""
        import os
        import torch

        def prepare(folder):
            if not os.path.exists(folder):
                os.makedirs(folder)
            return torch.device("cuda")

        def parse(folder):
            return prepare(folder)
    """), encoding="utf-8")
    train = tmp_path / "train.py"
    train.write_text(textwrap.dedent("""
        import torch.distributed as dist
        from opts import parse

        def main():
            dist.init_process_group("nccl")
            parse("ckpt")

        if __name__ == "__main__":
            main()
    """), encoding="utf-8")
    opts = tmp_path / "opts.py"
    assert _lines(opts.read_text(encoding="utf-8"), "DDP218", str(opts)) == [7]
    # the caller tests the rank first: only the main rank prepares the folder
    train.write_text(train.read_text(encoding="utf-8").replace('    parse("ckpt")', '    if dist.get_rank() == 0:\n        parse("ckpt")'),
                     encoding="utf-8")
    project.clear()
    assert _lines(opts.read_text(encoding="utf-8"), "DDP218", str(opts)) == []
    project.clear()


def test_ddp218_caller_that_starts_the_group_through_a_trainer(tmp_path):
    # ClassyVision's shape: the entry script launches nothing itself; its ``main`` builds a trainer
    # (another module) whose constructor calls ``init_process_group``; it parses the options (a
    # third module, with the check-then-create) at module level, on every process
    project.clear()
    (tmp_path / "trainer.py").write_text(textwrap.dedent("""
        import torch.distributed as dist

        class DistTrainer:
            def __init__(self):
                dist.init_process_group("nccl", init_method="env://")
    """), encoding="utf-8")
    opts = tmp_path / "opts.py"
    opts.write_text(textwrap.dedent("""
        import os
        import torch

        def parse(folder):
            if folder and not os.path.exists(folder):
                os.makedirs(folder)
            return torch.device("cpu")
    """), encoding="utf-8")
    entry = tmp_path / "run.py"
    src = textwrap.dedent("""
        from opts import parse
        from trainer import DistTrainer

        def main():
            return DistTrainer()

        if __name__ == "__main__":
            parse("ckpt")
            main()
    """)
    entry.write_text(src, encoding="utf-8")
    assert _lines(opts.read_text(encoding="utf-8"), "DDP218", str(opts)) == [7]
    # the same entry without the trainer: one process, no race
    entry.write_text(src.replace("return DistTrainer()", "return None"), encoding="utf-8")
    project.clear()
    assert _lines(opts.read_text(encoding="utf-8"), "DDP218", str(opts)) == []
    project.clear()


def test_ddp218_existence_tested_outside_the_file_lock_only():
    # allennlp's extraction cache: the fast path tests the folder, the lock is taken, the folder is
    # removed and extracted again without a second test; a project class derived from filelock's
    bad = """
        import os
        import shutil
        import torch
        from filelock import FileLock as _Lock

        class Lock(_Lock):
            pass

        def cached(archive, target):
            if os.path.isdir(target):
                return target
            with Lock(target + ".lock"):
                shutil.rmtree(target, ignore_errors=True)
                shutil.unpack_archive(archive, target)
            return target
    """
    assert _lines(bad, "DDP218") == [13]
    good = bad.replace("                shutil.rmtree(target, ignore_errors=True)",
                       "                if os.path.isdir(target):\n                    return target\n"
                       "                shutil.rmtree(target, ignore_errors=True)")
    assert _lines(good, "DDP218") == []
    # an ordinary context manager is no inter-process lock
    assert _lines(bad.replace("with Lock(target", "with open(target"), "DDP218") == []


def test_ddp218_a_rank_name_alone_does_not_make_code_run_on_every_rank():
    src = """
        import os
        import torch

        class Exporter:
            def save(self, folder, is_main_process=True):
                if is_main_process:
                    torch.save({}, os.path.join(folder, "x.pt"))

            def offload(self, folder):
                if not os.path.exists(folder):
                    os.makedirs(folder)
    """
    assert _lines(src, "DDP218") == []
    synced = src.replace("class Exporter:", "class Exporter:\n            def wait(self):\n"
                         "                torch.distributed.barrier()\n")
    assert _lines(synced, "DDP218") == [15]


def test_module_level_code_of_a_notebook_launcher_file_runs_once():
    src = """
        import os
        import torch
        import wandb
        from accelerate import Accelerator, notebook_launcher

        save_path = "./concept"
        if not os.path.exists(save_path):
            os.mkdir(save_path)
        wandb.init(project="once")

        def training_function():
            accelerator = Accelerator()
            if not os.path.exists("out"):
                os.makedirs("out")
            return accelerator

        notebook_launcher(training_function, num_processes=2)
    """
    # (the launched function itself is not known to run on every rank: no call of it in the file)
    assert _lines(src, "DDP218") == []
    assert _lines(src, "DDP217") == []
    # without the launcher, the same module-level code runs in every process of the Accelerate job
    once = src.replace("notebook_launcher(training_function, num_processes=2)", "training_function()")
    once = once.replace("from accelerate import Accelerator, notebook_launcher",
                        "from accelerate import Accelerator\n        acc = Accelerator()")
    assert _lines(once, "DDP218") == [10, 16]
    assert _lines(once, "DDP217") == [11]


def test_main_rank_test_on_a_variable_read_by_value_flow():
    # ``v4_`` holds the rank (one assignment from ``dist.get_rank()``): ``v4_ == 0`` is a main-rank
    # test whatever the name (rank_tests.polarity)
    src = _dist("""
        dist.init_process_group("nccl")
        v4_ = dist.get_rank()
        if v4_ == 0 and not os.path.exists("out"):
            os.makedirs("out")
    """)
    assert _lines(src, "DDP218") == []
    assert _lines(src.replace("v4_ = dist.get_rank()", "v4_ = len(os.listdir('.'))"), "DDP218") == [11]
