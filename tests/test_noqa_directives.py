"""Issue 30, point 4: file-level ``# ddp-lint: noqa`` / ``# ddp-lint: noqa: CODE`` and DDP005
(unused-noqa, Ruff's RUF100) judged against the other rules' findings."""
from __future__ import annotations

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.fixes import fix_all
from ddp_lint.analysis.noqa import comments, file_exemption
from tests.conftest import EXAMPLES

SEED2 = (EXAMPLES / "seed_problem2_invalid_usage.py").read_text()
FOCUS = ["DDP001", "DDP101", "DDP103", "DDP004"]


def found(text, select=FOCUS):
    return {f.code for f in check_source(text, "t.py", Settings(select=list(select))).findings}


def test_file_level_noqa_all_and_codes():
    assert found(SEED2) == {"DDP001", "DDP101", "DDP103", "DDP004"}
    assert found("# ddp-lint: noqa\n" + SEED2) == set()
    assert found(SEED2 + "\n# ddp-lint: noqa: DDP001, DDP101\n") == {"DDP103", "DDP004"}
    assert found("#DDP-LINT:NOQA:ddp103\n" + SEED2) == {"DDP001", "DDP101", "DDP004"}
    # several directives add up
    assert found("# ddp-lint: noqa: DDP001\n# ddp-lint: noqa: DDP004\n" + SEED2) == {"DDP101", "DDP103"}


def test_file_level_noqa_only_in_real_comments():
    # in a string it is text, not a directive (a word in a string never decides a finding)
    assert found('NOTE = """\n# ddp-lint: noqa\n"""\n' + SEED2) == {"DDP001", "DDP101", "DDP103", "DDP004"}
    assert found("x = '# ddp-lint: noqa: DDP001'\n" + SEED2) == {"DDP001", "DDP101", "DDP103", "DDP004"}
    # a line-level noqa comment is not a file-level one
    assert file_exemption("import torch  # noqa\n") is None
    assert file_exemption("import torch\n# ddp-lint: noqa: DDP001\n") == {"DDP001"}


def test_syntax_error_is_not_exempted():
    assert found("# ddp-lint: noqa\n" + SEED2 + "def f(:\n") == {"DDP000"}


def test_comments_fall_back_on_untokenizable_text():
    got = comments("x = (\n  # ddp-lint: noqa\n")
    assert got and got[0][2] == "# ddp-lint: noqa"


def _line(text, needle):
    return next(i for i, l in enumerate(text.splitlines()) if needle in l)


def test_unused_noqa_against_the_other_rules_findings():
    lines = SEED2.splitlines()
    row_101 = _line(SEED2, "output = [None")
    row_init = _line(SEED2, "init_process_group")
    lines[row_101] += "  # noqa: DDP101"  # used: DDP101 is reported here
    lines[row_init] += "  # noqa: DDP101, DDP004, DDP004"  # DDP101 unused here; DDP004 used then duplicated
    text = "\n".join(lines) + "\n"
    res = check_source(text, "t.py", Settings(select=FOCUS + ["DDP005"])).findings
    got = [f for f in res if f.code == "DDP005"]
    assert [f.range.start.line for f in got] == [row_init]
    assert got[0].message == "Unused `noqa` directive (duplicated: `DDP004`; unused: `DDP101`)"
    # non-enabled: DDP004 is not selected
    res = check_source(text, "t.py", Settings(select=["DDP001", "DDP101", "DDP005"])).findings
    msg = [f.message for f in res if f.code == "DDP005"]
    assert msg == ["Unused `noqa` directive (duplicated: `DDP004`; unused: `DDP101`; non-enabled: `DDP004`)"]
    # off by default, as RUF100 is
    assert "DDP005" not in {f.code for f in check_source(text, "t.py").findings}
    # the fix removes the codes that suppress nothing; the used ones stay
    settings = Settings(select=FOCUS + ["DDP005"])
    new, _ = fix_all(text, lambda t: check_source(t, "t.py", settings).findings, unsafe=False)
    new_lines = new.splitlines()
    assert any(l.strip().startswith("output = [None") and l.endswith("# noqa: DDP101") for l in new_lines), new
    assert any("init_process_group" in l and l.endswith("# noqa: DDP004") for l in new_lines), new


def test_unused_noqa_after_a_fix_removes_the_stale_code():
    # `--fix` fixes DDP001 (set_device inserted); the noqa that silenced it is then stale and goes too
    row = _line(SEED2, "all_gather_object(output")
    lines = SEED2.splitlines()
    lines[row] += "  # noqa: DDP103"
    text = "\n".join(lines) + "\n"
    settings = Settings(select=["DDP103", "DDP005"])
    assert not check_source(text, "t.py", settings).findings
    lines[row] = lines[row].replace("gather_objects[dist.get_rank()]", "gather_objects[0]")
    text = "\n".join(lines) + "\n"
    res = check_source(text, "t.py", settings).findings
    assert [f.code for f in res] == ["DDP005"] and "unused: `DDP103`" in res[0].message
    new, _ = fix_all(text, lambda t: check_source(t, "t.py", settings).findings, unsafe=False)
    assert "noqa" not in new.splitlines()[row]
