"""DDP210 asks ``wrap_origins`` only where a wrap may be reached (``_wrap_reachable``: the
constructor's name or Accelerate's ``prepare`` in the file or a module its imports reach): a wrap
one import away is still found, and where none is reachable the files that answer rests on are
dependencies of the check (the cache re-checks the file when one of them changes)."""
from __future__ import annotations

import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source

SEL = Settings(select=["DDP210"])

READER = """
    import torch
    import torch.distributed as dist
    from .{mod} import build


    def run(net):
        model = build(net)
        return model.generate()
"""


def _write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def _check(path):
    res = check_source(path.read_text(), str(path), SEL)
    return [(f.code, f.range.start.line + 1) for f in res.findings], res


def test_wrap_in_an_imported_helper_is_found(tmp_path):
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/wrapper.py", """
        from torch.nn.parallel import DistributedDataParallel as DDP


        def build(m):
            return DDP(m.cuda())
    """)
    main = _write(tmp_path, "pkg/train.py", READER.format(mod="wrapper"))
    codes, _res = _check(main)
    assert codes == [("DDP210", 9)]


def test_no_reachable_wrap_is_clean_and_depends_on_what_it_read(tmp_path):
    # the read's value never comes from ``plain``: only the reach answer read it, and a wrap added
    # there later (``plain.build`` returning ``DDP(m)``, ``net`` rebound to it) must re-check this file
    _write(tmp_path, "pkg/__init__.py", "")
    plain = _write(tmp_path, "pkg/plain.py", """
        def build(m):
            return m.cuda()
    """)
    main = _write(tmp_path, "pkg/train.py", """
        import torch
        import torch.distributed as dist
        from .plain import build


        def run(net):
            return net.generate(), build
    """)
    codes, res = _check(main)
    assert codes == []
    assert str(plain) in [p for p, _h in res.dependencies]
