"""DDP009 (issue 25 point 4, class env-rank-not-int): a rank read from the environment is a string;
used as a number it breaks. The use is found by value flow: in the function, through a namespace
attribute that argparse declares ``type=int``, and in a caller of another module."""
from __future__ import annotations

import textwrap

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_file, check_source

SEL = Settings(select=["DDP009"])
HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def _lines(body: str) -> list[int]:
    src = HEAD + textwrap.dedent(body)
    return sorted(f.range.start.line + 1 - 3 for f in check_source(src, "<t>.py", SEL).findings)


@pytest.mark.parametrize("body,lines", [
    # used as a device, in init_process_group, compared with a rank, in arithmetic
    ('r = os.environ["LOCAL_RANK"]\ntorch.cuda.set_device(r)\n', [1]),
    ('r = os.environ.get("RANK", "0")\ndist.init_process_group("nccl", rank=r)\n', [1]),
    ('r = os.getenv("RANK")\nif r == 0:\n    pass\n', [1]),
    ('w = os.environ["WORLD_SIZE"]\nn = w * 8\n', [1]),
    # tuple unpacking and a conditional expression carry the string
    ('a, b = os.environ["LOCAL_RANK"], 1\nm = torch.nn.Linear(2, 2).to(a)\n', [1]),
    ('r = os.environ["SLURM_LOCALID"] if x else os.environ["LOCAL_RANK"]\ntorch.cuda.set_device(r)\n', [1, 1]),
    # converted, a text use, or the unset sentinel: nothing
    ('r = int(os.environ["LOCAL_RANK"])\ntorch.cuda.set_device(r)\n', []),
    ('r = os.environ["LOCAL_RANK"]\nd = torch.device(f"cuda:{r}")\n', []),
    ('r = os.environ.get("LOCAL_RANK", -1)\nif r != -1:\n    pass\n', []),
    ('r = os.environ["LOCAL_RANK"]\nr = int(r)\ntorch.cuda.set_device(r)\n', []),
    ('r = os.environ["LOCAL_RANK"]\nos.environ["X"] = r\nprint("rank " + r)\n', []),
    # the read used in place
    ('torch.cuda.set_device(os.environ["LOCAL_RANK"])\n', [1]),
    ('if os.environ.get("RANK", "0") == 0:\n    pass\n', [1]),
    ('torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n', []),
    # a variable that is not a launcher's number
    ('r = os.environ["MASTER_PORT"]\nif r == 0:\n    pass\n', []),
])
def test_uses(body, lines):
    assert sorted(set(_lines(body))) == sorted(set(lines))


def test_namespace_declared_int_by_argparse():
    body = '''
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--local_rank", type=int, default=0)
    args = p.parse_args()
    args.local_rank = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
    '''
    assert _lines(body) == [6]
    # a store that converts it elsewhere in the module: no finding
    assert _lines(body + 'args.local_rank = int(args.local_rank)\n') == []


def _write(tmp_path, files: dict):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


def test_caller_in_another_module(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/arguments.py": '''
            import os

            import torch


            def configure(args):
                if args.launcher == "mpi":
                    args.local_rank = os.environ["LOCAL_RANK"] = os.environ["OMPI_COMM_WORLD_NODE_RANK"]
                return args
            ''',
        "pkg/setup.py": '''
            import torch

            from pkg.arguments import configure


            def init(args):
                args = configure(args)
                torch.cuda.set_device(args.local_rank)
            ''',
    })
    found = check_file(str(tmp_path / "pkg" / "arguments.py"), SEL).findings
    assert [f.range.start.line + 1 for f in found] == [9]
    f = found[0]
    assert f.fix is None  # the same statement stores the value into the environment
    assert any((r.filename or "").endswith("setup.py") for r in f.related)


def test_torch_free_module_alone_reports_nothing(tmp_path):
    # no caller uses it: a module that imports no torch (it only names it) reports no local use
    _write(tmp_path, {"tool.py": 'import os  # for torch jobs\nr = os.environ["RANK"]\nif r == 0:\n    pass\n'})
    assert check_file(str(tmp_path / "tool.py"), SEL).findings == []


def test_returned_read_used_by_a_caller_in_another_module(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/env.py": '''
            import os

            import torch


            def env_rank():
                return os.environ.get("RANK", 0)
            ''',
        "pkg/main.py": '''
            import torch

            from pkg.env import env_rank


            def main():
                rank = env_rank()
                if rank == 0:
                    torch.save({}, "ckpt.pt")


            def other():
                rank = env_rank()
                rank = int(rank)
                return rank == 0
            ''',
    })
    found = check_file(str(tmp_path / "pkg" / "env.py"), SEL).findings
    assert [f.range.start.line + 1 for f in found] == [8]
    assert len([r for r in found[0].related if (r.filename or "").endswith("main.py")]) == 1
