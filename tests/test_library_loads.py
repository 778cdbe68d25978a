"""Issue 25 (generalization of DDP001/DDP203 to code nobody here wrote): the program-model pieces
they rest on (star imports, tuple-assigned values) and the library reasons of DDP203 across files."""
from __future__ import annotations

import ast
from pathlib import Path

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.context import Context
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow.assignments import reaching_value
from ddp_lint.analysis.semantic import Semantic
from ddp_lint.analysis.source import SourceText


def _ctx(text: str, name: str = "m.py") -> Context:
    tree = ast.parse(text)
    return Context(SourceText(text), Semantic(tree), name)


def _codes(path: Path, code: str) -> list[int]:
    res = check_source(path.read_text(encoding="utf-8"), str(path), Settings(select=[code]))
    return [f.range.start.line + 1 for f in res.findings if f.code == code]


def test_reaching_value_reads_tuple_assignments():
    ctx = _ctx("def f(d):\n    a, (b, c) = d + '/m.pt', ('x', d + '/train_state.pt')\n    use(c)\n")
    use = next(n for n in ast.walk(ctx.sem.tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "use")
    val = reaching_value(ctx, "c", use)
    assert val is not None and "train_state" in ast.unparse(val)
    assert reaching_value(ctx, "a", use) is not None
    # a starred target or an opaque right-hand side gives no value
    ctx2 = _ctx("def f(d):\n    a, *b = d\n    use(a)\n")
    use2 = next(n for n in ast.walk(ctx2.sem.tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "use")
    assert reaching_value(ctx2, "a", use2) is None


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


_EMA = (
    "import torch\n\n\nclass Ema:\n    def __init__(self, model, resume=''):\n        self.m = model\n"
    "        if resume:\n            self._load(resume)\n\n    def _load(self, path):\n"
    "        ckpt = torch.load(path)\n        self.m.load_state_dict(ckpt['ema'])\n"
)
_TRAIN = (
    "import os\nimport torch\nimport torch.distributed as dist\nfrom pkg.utils import *\n\n\ndef main():\n"
    "    rank = int(os.environ['LOCAL_RANK'])\n    torch.cuda.set_device(rank)\n    dist.init_process_group('nccl')\n"
    "    m = torch.nn.Linear(2, 2).cuda()\n    ema = {ctor}\n\n\nif __name__ == '__main__':\n    main()\n"
)


def test_a_star_imported_class_built_on_every_rank_is_followed(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": _EMA,
                      "train.py": _TRAIN.format(ctor="Ema(m, resume='last.pt')")})
    assert _codes(tmp_path / "pkg" / "utils.py", "DDP203") == [11]


def test_a_star_import_does_not_shadow_a_local_definition(tmp_path):
    # the script defines its own ``Ema``: the star import's class is not the one built
    train = _TRAIN.format(ctor="Ema(m, resume='last.pt')").replace(
        "\n\ndef main():", "\n\nclass Ema:\n    def __init__(self, model, resume=''):\n        pass\n\n\ndef main():")
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": _EMA, "train.py": train})
    assert _codes(tmp_path / "pkg" / "utils.py", "DDP203") == []


def test_library_reasons_yield_to_callers_that_run_on_one_rank(tmp_path):
    lib = ("import torch\n\n\ndef restore(model, ckpt, opt_ckpt, opt):\n"
           "    model.load_state_dict(torch.load(ckpt, map_location='cpu'))\n"
           "    opt.load_state_dict(torch.load(opt_ckpt))\n")
    export = ("import torch\nfrom lib import restore\n\n\ndef main():\n"
              "    restore(torch.nn.Linear(2, 2), 'a.pt', 'b.pt', None)\n\n\nif __name__ == '__main__':\n    main()\n")
    _write(tmp_path / "a", {"lib.py": lib})
    assert _codes(tmp_path / "a" / "lib.py", "DDP203") == [6]  # a mapping sibling, no caller known
    _write(tmp_path / "b", {"lib.py": lib, "export.py": export})
    assert _codes(tmp_path / "b" / "lib.py", "DDP203") == []  # its only caller is a one-process script


def test_a_lone_script_is_not_library_code(tmp_path):
    src = ("import torch\n\n\ndef convert(model, a, b):\n    x = torch.load(a, map_location='cpu')\n"
           "    model.load_state_dict(torch.load(b))\n    return x\n\n\nif __name__ == '__main__':\n"
           "    convert(torch.nn.Linear(2, 2), 'a.ckpt', 'b.ckpt')\n")
    _write(tmp_path, {"convert.py": src})
    assert _codes(tmp_path / "convert.py", "DDP203") == []
    # the same function in a module (no ``__main__``): the mapping sibling is a reason
    _write(tmp_path, {"convert2.py": src.split("\n\nif __name__")[0] + "\n"})
    assert _codes(tmp_path / "convert2.py", "DDP203") == [6]
