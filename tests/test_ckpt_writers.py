"""Issue 25 (DDP202 on code nobody here wrote): how many ranks a main-rank test lets through
(``rank_sets.ranks_admitted``), the tests a node sits behind (``rank.main_guards``), the writers
beyond ``torch.save`` and the library reasons (a class that guards one write and not another, a
class that tells its main rank apart, an ``Accelerator`` script)."""
from __future__ import annotations

import ast

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.context import Context
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow.rank import main_guards
from ddp_lint.analysis.flow.rank_sets import ONE, SEVERAL, ranks_admitted
from ddp_lint.analysis.semantic import Semantic
from ddp_lint.analysis.source import SourceText


def _ctx(text: str) -> Context:
    return Context(SourceText(text), Semantic(ast.parse(text)), "m.py")


def _admitted(test: str, holds: bool = True):
    ctx = _ctx(f"import torch.distributed as dist\nrank = dist.get_rank()\nok = {test}\n")
    val = ctx.sem.tree.body[-1].value
    got = ranks_admitted(ctx, val, ctx.sem.tree, holds)
    return None if got is None else got[:2]


def test_ranks_admitted_counts_the_ranks_a_test_lets_through():
    assert _admitted("rank == 0") == (ONE, "rank 0")
    assert _admitted("rank < 1") == (ONE, "rank 0")
    assert _admitted("rank <= 0") == (ONE, "rank 0")
    assert _admitted("rank < 2") == (SEVERAL, "ranks 0 and 1")
    assert _admitted("rank <= 3") == (SEVERAL, "ranks 0 to 3")
    assert _admitted("rank in (0, 1)") == (SEVERAL, "ranks 0 and 1")
    assert _admitted("rank in [-1, 0]") == (ONE, "rank 0")  # -1: not distributed
    # negations, De Morgan, tests on other things left out
    assert _admitted("not (dist.is_initialized() and dist.get_rank() > 1)") == (SEVERAL, "ranks 0 and 1")
    assert _admitted("not (dist.is_initialized() and dist.get_rank() > 0)") == (ONE, "rank 0")
    assert _admitted("rank > 1", holds=False) == (SEVERAL, "ranks 0 and 1")
    assert _admitted("flag and rank < 2") == (SEVERAL, "ranks 0 and 1")
    assert _admitted("rank < 2 and rank == 0") == (ONE, "rank 0")
    # not a test for a few ranks
    assert _admitted("rank > 0") is None
    assert _admitted("rank != 0") is None
    assert _admitted("rank % 8 == 0") is None
    assert _admitted("rank < n") is None
    assert _admitted("flag") is None


def test_ranks_admitted_follows_a_name_bound_once():
    ctx = _ctx("import torch.distributed as dist\n"
               "def f():\n    r = dist.get_rank()\n    saver = r < 2\n    if saver:\n        pass\n")
    fn = ctx.sem.tree.body[1]
    test = fn.body[-1].test
    assert ranks_admitted(ctx, test, fn)[:2] == (SEVERAL, "ranks 0 and 1")


def test_main_guards_lists_ifs_exits_and_asserts():
    ctx = _ctx("import torch.distributed as dist\n"
               "def f(x):\n"
               "    if dist.get_rank() != 0:\n        return\n"
               "    if x:\n"
               "        if dist.get_rank() < 2:\n            g()\n")
    g = next(n for n in ast.walk(ctx.sem.tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "g")
    main = [(ast.unparse(t), h) for t, h in main_guards(ctx, g)]
    assert main == [("dist.get_rank() != 0", False)]  # `< 2` and `x` are no main-rank tests (polarity)
    every = [(ast.unparse(t), h) for t, h in main_guards(ctx, g, main_only=False)]
    assert every == [("dist.get_rank() < 2", True), ("x", True), ("dist.get_rank() != 0", False)]


def _lines(text: str, name: str = "lib.py") -> list[tuple[int, str]]:
    res = check_source(text, name, Settings(select=["DDP202"]))
    return [(f.range.start.line + 1, f.message) for f in res.findings if f.code == "DDP202"]


LOOSE = """import os
import torch
import torch.distributed


def save_checkpoint(state, args):
    if not (torch.distributed.is_initialized() and
            torch.distributed.get_rank() > {k}):
        torch.save(state, os.path.join(args.save, "iter.pt"))
        torch.save(state, os.path.join(args.save, "latest.pt"))
"""


def test_a_guard_that_lets_two_ranks_save_is_reported_once_at_the_comparison():
    got = _lines(LOOSE.format(k=1))
    assert [ln for ln, _ in got] == [8]
    assert "ranks 0 and 1" in got[0][1]
    assert _lines(LOOSE.format(k=0)) == []


def test_a_loose_guard_inside_a_function_its_callers_guard_is_not_reported():
    text = LOOSE.format(k=1) + "\n\ndef main(state, args):\n    if torch.distributed.get_rank() == 0:\n" \
                               "        save_checkpoint(state, args)\n"
    assert _lines(text) == []


CLASS = """import torch
import torch.distributed as dist


class Checkpoint:
    def __init__(self, model, path):
        self.model, self.path = model, path

    def save(self, step):
        if {guard}:
            return
        torch.save(self.model.state_dict(), self.path + ".last")

    def finalize(self):
        torch.save(self.model.state_dict(), self.path)
"""


def test_a_class_that_guards_one_save_and_not_another():
    got = _lines(CLASS.format(guard="dist.get_rank() != 0"))
    assert [ln for ln, _ in got] == [15] and "`Checkpoint.save` guards" in got[0][1]
    # no rank test in the class: nothing says it runs on every rank
    assert _lines(CLASS.format(guard="step % 10")) == []


def test_a_save_behind_a_flag_the_caller_passes_says_nothing_about_the_class():
    text = CLASS.replace("def save(self, step):", "def save(self, step, is_main_process=True):") \
        .format(guard="not is_main_process")
    assert _lines(text) == []


def test_a_test_file_is_left_alone():
    assert _lines(CLASS.format(guard="dist.get_rank() != 0"), "test_checkpoint.py") == []


def test_writers_beyond_torch_save_and_receivers_by_value_flow():
    text = """import torch
import torch.distributed as dist
from safetensors.torch import save_file


def main(model):
    dist.init_process_group("nccl")
    save_file(model.state_dict(), "m.safetensors")
    torch.jit.script(model).save("m_script.pt")
    prof: torch.profiler.profile = make_profiler()
    prof.export_chrome_trace("trace.json")
    other = make_profiler()
    other.export_chrome_trace("trace2.json")  # unknown receiver: not a writer we know
    other.save("x.pt")


main(None)
"""
    got = [ln for ln, _ in _lines(text, "train.py")]
    assert got == [8, 9, 11]


def test_an_accelerate_script_is_a_distributed_context():
    text = """import torch
from accelerate import Accelerator


def main(model):
    accelerator = Accelerator()
    model = accelerator.prepare(model)
    torch.save(model.state_dict(), "model.pt")
    if accelerator.is_main_process:
        torch.save(model.state_dict(), "model_main.pt")


if __name__ == "__main__":
    main(None)
"""
    assert [ln for ln, _ in _lines(text, "train.py")] == [8]
    assert _lines(text.replace("accelerator = Accelerator()", "accelerator = make()"), "train.py") == []


def test_a_helper_of_another_module_is_followed_whatever_its_name(tmp_path):
    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("")
    (tmp_path / "util" / "export.py").write_text(
        "import torch\n\n\ndef finish_run(model, out_dir):\n"
        "    torch.jit.save(torch.jit.script(model), out_dir + '/model.pt')\n")
    train = tmp_path / "train.py"
    train.write_text("import torch\nimport torch.distributed as dist\nfrom util.export import finish_run\n\n\n"
                     "def main():\n    dist.init_process_group('nccl')\n    model = torch.nn.Linear(2, 2)\n"
                     "    finish_run(model, 'out')\n    if dist.get_rank() == 0:\n        finish_run(model, 'out2')\n\n\n"
                     "if __name__ == '__main__':\n    main()\n")
    res = check_source(train.read_text(), str(train), Settings(select=["DDP202"]))
    got = [(f.range.start.line + 1, f.message) for f in res.findings if f.code == "DDP202"]
    assert [ln for ln, _ in got] == [9]
    assert "`finish_run()`" in got[0][1] and "`torch.jit.save`" in got[0][1]


def test_the_gate_asks_the_imported_modules_for_a_writer(tmp_path):
    from ddp_lint.analysis.flow.reach import reaches

    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("from .export import finish_run\n")
    (tmp_path / "util" / "export.py").write_text("import torch\n\n\ndef finish_run(m, d):\n    torch.save(m, d)\n")
    (tmp_path / "util" / "plain.py").write_text("def finish_run(m, d):\n    print(m, d)\n")
    train = tmp_path / "train.py"
    text = "from util import finish_run\n"  # through the package's re-export
    train.write_text(text)
    assert reaches(str(train), text, ("save",), fold=True)[0] is True
    other = "from util.plain import finish_run\n"
    assert reaches(str(train), other, ("save",), fold=True)[0] is False
    assert reaches(None, text, ("save",), fold=True) == (False, {})
    # the gated and ungated runs agree on a script that spells no writer itself
    script = ("import torch\nimport torch.distributed as dist\nfrom util import finish_run\n\n\n"
              "def main():\n    dist.init_process_group('nccl')\n    finish_run(torch.nn.Linear(2, 2), 'out')\n\n\n"
              "if __name__ == '__main__':\n    main()\n")
    train.write_text(script)
    gated = check_source(script, str(train), Settings(select=["DDP202"]))
    ungated = check_source(script, str(train), Settings(select=["DDP202"]), gate=False)
    assert [f.range for f in gated.findings] == [f.range for f in ungated.findings]
    assert len(gated.findings) == 1


def test_a_path_unique_to_the_process_is_not_shared():
    base = ("import os\nimport time\nimport uuid\nimport torch\nimport torch.distributed as dist\n\n\n"
            "def main(m):\n    dist.init_process_group('nccl')\n    tag = {tag}\n"
            "    torch.save(m, os.path.join('out', f'ckpt_{{tag}}.pt'))\n\n\nmain(None)\n")
    assert _lines(base.format(tag="uuid.uuid4().hex"), "train.py") == []
    assert _lines(base.format(tag="int(time.time())"), "train.py") == []
    assert [ln for ln, _ in _lines(base.format(tag="'last'"), "train.py")] == [11]


def test_a_save_after_the_function_starts_the_group_runs_on_every_rank():
    text = ("import torch\nimport torch.distributed as dist\n\n\nclass Job:\n    def worker(self, rank):\n"
            "        dist.init_process_group('gloo', rank=rank, world_size=2)\n"
            "        torch.save({}, 'model.pt')\n")
    # no call of `worker` in the file: the function that starts the group runs on every rank
    assert [ln for ln, _ in _lines(text, "job.py")] == [8]
    guarded = text.replace("        torch.save({}, 'model.pt')\n",
                           "        if dist.get_rank() == 0:\n            torch.save({}, 'model.pt')\n")
    assert _lines(guarded, "job.py") == []
