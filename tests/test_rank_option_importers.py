"""DDP006 across the modules that call the function declaring a ``--local_rank`` option (the
Megatron shape: ``arguments.py`` adds the option in a helper of ``parse_args``, ``initialize.py``
calls ``parse_args`` and uses ``args.local_rank``)."""
from __future__ import annotations

import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_file

SEL = Settings(select=["DDP006"])

ARGUMENTS = '''
    import argparse

    import torch


    def _add_distributed_args(parser):
        group = parser.add_argument_group("distributed")
        group.add_argument("--local_rank", type=int, default=None)
        return parser


    def parse_args():
        parser = argparse.ArgumentParser()
        parser = _add_distributed_args(parser)
        return parser.parse_args()
    '''

INITIALIZE = '''
    import torch

    from pkg.arguments import parse_args


    def initialize():
        args = parse_args()
        device = args.rank % torch.cuda.device_count()
        if args.local_rank is not None:
            assert args.local_rank == device
        torch.cuda.set_device(device)
    '''


def _write(tmp_path, files: dict):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


def test_use_in_the_module_that_calls_parse_args(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/arguments.py": ARGUMENTS, "pkg/initialize.py": INITIALIZE})
    found = check_file(str(tmp_path / "pkg" / "arguments.py"), SEL).findings
    assert [f.range.start.line + 1 for f in found] == [9]
    assert "initialize.py" in found[0].message


def test_local_rank_read_in_the_caller_clears_it(tmp_path):
    init = INITIALIZE.replace("        args = parse_args()\n",
                              "        args = parse_args()\n        args.local_rank = int(os.environ['LOCAL_RANK'])\n")
    init = init.replace("    import torch\n", "    import os\n\n    import torch\n", 1)
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/arguments.py": ARGUMENTS, "pkg/initialize.py": init})
    assert check_file(str(tmp_path / "pkg" / "arguments.py"), SEL).findings == []


def test_no_caller_no_finding(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/arguments.py": ARGUMENTS})
    assert check_file(str(tmp_path / "pkg" / "arguments.py"), SEL).findings == []
