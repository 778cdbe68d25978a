"""Engine: import resolution, positions, syntax errors, noqa, fixes, seed scripts, import hygiene."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.fixes import apply_edits, fix_all
from ddp_lint.analysis.model import Applicability
from ddp_lint.analysis.semantic import Semantic
from tests.conftest import EXAMPLES, ROOT


def codes(text, **kw):
    return [f.code for f in check_source(textwrap.dedent(text), "t.py", **kw).findings]


@pytest.mark.parametrize("imports,call", [
    ("import torch.distributed as dist", "dist.all_gather_object"),
    ("import torch.distributed as tdist", "tdist.all_gather_object"),
    ("from torch import distributed as d", "d.all_gather_object"),
    ("from torch.distributed import all_gather_object as g", "g"),
    ("import torch.distributed", "torch.distributed.all_gather_object"),
    ("import torch", "torch.distributed.all_gather_object"),
    ("from torch.distributed.distributed_c10d import all_gather_object", "all_gather_object"),
])
def test_alias_resolution(imports, call):
    tree = ast.parse(f"{imports}\n{call}(out, x)\n")
    sem = Semantic(tree)
    assert sem.calls_to("torch.distributed.all_gather_object"), (imports, call)


def test_multiprocessing_alias():
    sem = Semantic(ast.parse("import torch.multiprocessing as mp\nmp.spawn(f, nprocs=2)\n"))
    assert sem.calls_to("torch.multiprocessing.spawn")


def test_not_fooled_by_unrelated_names():
    text = """
    import mylib as dist
    dist.init_process_group("nccl")
    dist.all_gather_object([None] * 3, 1)
    """
    assert codes(text) == []


def test_seed_problem1_reports_exactly_ddp001():
    text = (EXAMPLES / "seed_problem1_hang.py").read_text()
    found = {f.code for f in check_source(text, "p1.py").findings}
    assert "DDP001" in found and "DDP101" not in found


def test_seed_problem2_reports_ddp001_and_ddp101():
    text = (EXAMPLES / "seed_problem2_invalid_usage.py").read_text()
    found = check_source(text, "p2.py").findings
    by = {f.code: f for f in found}
    assert {"DDP001", "DDP101"} <= set(by)
    assert by["DDP001"].range.start.line + 1 == text.split("\n").index('    dist.init_process_group("nccl")') + 1
    assert by["DDP001"].related and "all_gather_object" in by["DDP001"].related[0].message
    assert by["DDP101"].fix.applicability is Applicability.SAFE


@pytest.mark.parametrize("name", ["seed_problem1_hang.py", "seed_problem2_invalid_usage.py"])
def test_fixed_seed_is_clean_keeps_comments_and_is_idempotent(name):
    text = (EXAMPLES / name).read_text()
    check = lambda t: check_source(t, name).findings  # noqa: E731
    fixed, applied = fix_all(text, check)
    assert applied
    ast.parse(fixed)
    assert not {f.code for f in check(fixed)} & {"DDP001", "DDP101"}
    # every original line survives (comments and blank lines included), in order
    it = iter(fixed.split("\n"))
    for line in text.split("\n"):
        if "for _ in gather_objects]" in line:  # the one replaced expression
            continue
        assert any(line == got for got in it), line
    again, applied2 = fix_all(fixed, check)
    assert again == fixed and not applied2
    # the bundled fixed example is exactly what the fixes produce
    assert (EXAMPLES / name.replace(".py", "_fixed.py")).read_text().split("\n")[1:] == fixed.split("\n")[1:]


@pytest.mark.parametrize("text,line,col", [
    ("import torch\nx = (\n", 2, None),
    ("import torch\ndef f(:\n    pass\n", 2, 6),
    ("import torch\nx = 1\n  y = 2\n", 3, None),
])
def test_syntax_error_is_one_finding(text, line, col):
    res = check_source(text, "t.py", gate=False)  # positions, whatever the text gate says
    assert [f.code for f in res.findings] == ["DDP000"]
    f = res.findings[0]
    assert f.message.startswith("syntax error: ")
    assert f.range.start.line + 1 == line
    if col is not None:
        assert f.range.start.column == col


def test_nul_bytes_and_deep_nesting_are_findings():
    assert codes("import torch.distributed as dist; dist.init_process_group\nx = 1\0\n") == ["DDP000"]
    deep = "import torch.distributed as dist; dist.init_process_group\nx = " + "(" * 1000 + "1" + ")" * 1000 + "\n"
    assert codes(deep) == ["DDP000"]


def test_non_ascii_columns_are_code_points():
    text = textwrap.dedent("""\
        import torch.distributed as dist
        # 中文注释 😀
        x = "数据"; dist.init_process_group("nccl")
        dist.all_gather_object([None] * 2, 1)
        """)
    res = check_source(text, "t.py")
    f = [f for f in res.findings if f.code == "DDP001"][0]
    line = text.split("\n")[2]
    assert f.range.start.column == line.index("dist.init")
    assert f.range.end.column == len(line)


def test_bom_and_crlf():
    text = "\ufeffimport torch.distributed as dist\r\ndist.init_process_group('nccl')\r\ndist.all_gather_object([None] * 2, 1)\r\n"
    res = check_source(text, "t.py")
    f = [f for f in res.findings if f.code == "DDP001"][0]
    assert f.range.start.line == 1 and f.range.start.column == 0
    fixed, _ = fix_all(text, lambda t: check_source(t, "t.py").findings, unsafe=True)
    assert fixed.startswith("\ufeff") and "\r\n" in fixed and "\n" not in fixed.replace("\r\n", "")
    ast.parse(fixed.lstrip("\ufeff"))


@pytest.mark.parametrize("comment,suppressed", [
    ("  # noqa", True),
    ("  # noqa: DDP001", True),
    ("  # NOQA:DDP001,DDP101", True),
    ("  # noqa: DDP101", False),
    ("", False),
])
def test_noqa(comment, suppressed):
    text = f"import torch.distributed as dist\ndist.init_process_group('nccl'){comment}\ndist.all_gather_object([None] * 2, 1)\n"
    assert ("DDP001" not in codes(text)) == suppressed


def test_select_ignore_prefixes():
    text = (EXAMPLES / "seed_problem2_invalid_usage.py").read_text()
    assert {"DDP101"} <= set(codes(text, settings=Settings(select=["DDP1"]))) <= {f"DDP1{i:02d}" for i in range(100)}
    assert "DDP001" not in codes(text, settings=Settings(ignore=["DDP00"]))


def test_apply_edits_rejects_overlap():
    from ddp_lint.analysis.model import Edit, Range
    with pytest.raises(ValueError):
        apply_edits("abcdef", [Edit(Range.of(0, 0, 0, 3), "x"), Edit(Range.of(0, 2, 0, 4), "y")])


def test_rule_bug_does_not_break_others(monkeypatch):
    from ddp_lint.analysis.rules.ddp101_gather_list_size import GatherListSize
    monkeypatch.setattr(GatherListSize, "finish", lambda self, ctx: 1 / 0)
    res = check_source((EXAMPLES / "seed_problem2_invalid_usage.py").read_text(), "p2.py")
    got = [f.code for f in res.findings]
    assert "DDP001" in got and "DDP101" not in got
    assert res.errors and "ZeroDivisionError" in res.errors[0]


def test_check_path_imports_no_torch_pygls_lsprotocol_libcst():
    code = (
        "import sys; from ddp_lint.cli import main; "
        "rc = main(['check', '-q', sys.argv[1]]); "
        "bad = [m for m in ('torch', 'pygls', 'lsprotocol', 'libcst') if m in sys.modules]; "
        "print(bad); sys.exit(0 if not bad else 3)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(EXAMPLES)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_analysis_never_imports_lsp_libraries():
    """analysis/ sits below lsp_server/ and the CLI: no import of either, at any depth or nesting."""
    for path in (ROOT / "analysis").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                # a relative import that climbs out of analysis/ reaches ddp_lint's other layers
                depth = len(path.relative_to(ROOT / "analysis").parts)  # 1 for analysis/x.py
                assert node.level <= depth, f"{path} imports from above analysis/ ({'.' * node.level}{node.module})"
                names = [node.module or ""]
            for n in names:
                assert n.split(".")[0] not in ("pygls", "lsprotocol", "lsp_server"), f"{path} imports {n}"
                assert not n.startswith(("ddp_lint.lsp_server", "ddp_lint.cli")), f"{path} imports {n}"
