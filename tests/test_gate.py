"""The text gate (analysis/engine.py: ``admitted_codes``): exact, not a heuristic.

- every rule that fires on a fixture (run with the gate off: parse everything, run every rule) has
  its declared text in that file, so gating never loses a finding there;
- gated and ungated runs give identical findings on every fixture and on the bench corpus;
- a file no rule's gate admits is not parsed: no DDP000 either (documented in README).
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import admitted_codes, check_source, passes_gate
from ddp_lint.analysis.registry import NoCase, Rule, all_rules

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ALL = Settings(select=["ALL"])
STATIC = frozenset(c for c, r in all_rules().items() if r.static)


def _fixture_files():
    return sorted(p for p in FIXTURES.rglob("*.py") if p.is_file())


def _key(f):
    return (f.code, f.range.start.line, f.range.start.column, f.range.end.line, f.range.end.column, f.message)


def test_every_static_rule_declares_a_gate():
    for code, rule in all_rules().items():
        if not rule.static:
            continue
        groups = rule.gate_of()
        assert "torch" in groups[0]  # a rule may widen it (DDP210: Accelerate builds its wrapper)
        # a rule whose findings need nothing spelled in the file itself (DDP501: the optimizer and the
        # sharding may both come from helpers of other modules) has a reach gate instead
        own_reach = rule.reach.__func__ is not Rule.reach.__func__
        assert rule.requires_text or own_reach, f"{code} declares no requires_text: its gate would be 'torch' alone"
        assert all(g and all(isinstance(n, str) and n for n in g) for g in groups), code


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rules_fire_only_on_declared_text(path):
    text = path.read_text(encoding="utf-8")
    ungated = check_source(text, str(path), ALL, gate=False)
    fired = {f.code for f in ungated.findings} - {"DDP000"}
    admitted = set(admitted_codes(text, ALL.enabled_codes(str(path))))
    missing = fired - admitted
    assert not missing, f"{sorted(missing)} fired on text its requires_text does not admit"
    gated = check_source(text, str(path), ALL)
    if admitted:
        assert sorted(map(_key, gated.findings)) == sorted(map(_key, ungated.findings))
    else:
        assert gated.findings == [] and gated.gated_out


def test_every_rule_has_a_fixture_that_passes_its_gate():
    """Each rule's own bad fixtures pass the gate with only that rule selected."""
    for code in sorted(STATIC):
        bad = sorted((FIXTURES / code).glob("bad_*.py")) if (FIXTURES / code).is_dir() else []
        for p in bad:
            assert admitted_codes(p.read_text(encoding="utf-8"), frozenset({code})) == [code], p


def test_bench_corpus_gated_equals_ungated(tmp_path):
    """The generated bench tree (bench/gen.py: training scripts with findings, plain modules without)
    plus torch's distributed_c10d.py when installed: identical findings with and without the gate."""
    from bench.gen import plain_module, training_script

    rng = random.Random(7)
    texts = [training_script(rng.randint(50, 400), seed=i) for i in range(25)]
    texts += [plain_module(i, rng) for i in range(25)]
    texts.append("import torch\nx = torch.zeros(3)\n")  # torch but no gate text
    try:
        from bench import torch_file

        c10d = torch_file()
        if c10d is not None:
            texts.append(c10d.read_text(encoding="utf-8"))
    except Exception:  # pragma: no cover - bench helpers missing
        pass
    n_findings = n_gated_out = 0
    for i, text in enumerate(texts):
        name = f"corpus_{i}.py"
        ungated = check_source(text, name, ALL, gate=False)
        gated = check_source(text, name, ALL)
        assert sorted(map(_key, gated.findings)) == sorted(map(_key, ungated.findings)), name
        n_findings += len(gated.findings)
        n_gated_out += gated.gated_out
    assert n_findings > 0 and n_gated_out > 0  # the corpus exercises both sides


def test_syntax_error_only_behind_the_gate():
    assert check_source("import torch\ndef f(:\n", "t.py").findings == []
    assert check_source("def f(:\n", "t.py").findings == []
    res = check_source("import torch.distributed as dist\ndist.init_process_group()\ndef f(:\n", "t.py")
    assert [f.code for f in res.findings] == ["DDP000"]


def test_nocase_and_nfkc_needles():
    # DDP103 matches rank names case-insensitively: `Rank` must pass its gate
    text = "import torch\nnames = ['a', 'b']\ndef f(Rank):\n    return names[Rank]\n"
    assert admitted_codes(text, frozenset({"DDP103"})) == ["DDP103"]
    assert isinstance(next(n for n in all_rules()["DDP103"].requires_text), NoCase)
    # full-width letters are NFKC-normalised to the same identifier by the parser
    fw = "import ｔｏｒｃｈ.distributed as dist\ndist.init_process_group('nccl')\n"
    assert passes_gate(fw, frozenset({"DDP004"}))
    assert not passes_gate("import numpy\n", STATIC)


def test_gate_respects_the_selection():
    text = "import torch\nfrom torch.utils.data import DataLoader\nDataLoader(ds, shuffle=True, sampler=s)\n"
    assert passes_gate(text, frozenset({"DDP302"}))
    assert not passes_gate(text, frozenset({"DDP001", "DDP004"}))


@pytest.mark.parametrize("code,module,table", [
    ("DDP101", "ddp101_gather_list_size", "_OPS"),
    ("DDP102", "ddp102_aliased_output_list", "_OPS"),
    ("DDP104", "ddp104_collective_under_rank_guard", "_COLLECTIVES"),
    ("DDP105", "ddp105_cpu_tensor_with_nccl", "_OPS"),
    ("DDP106", "ddp106_tensor_through_object_collective", "_OPS"),
])
def test_every_collective_a_rule_checks_is_spelled_by_its_gate(code, module, table):
    """Audit: the torch.distributed functions a rule resolves all contain one of its needles (the
    call site spells the function's name), so the gate cannot hide a call the rule would report."""
    import importlib

    ops = list(getattr(importlib.import_module(f"ddp_lint.analysis.rules.{module}"), table))
    groups = all_rules()[code].gate_of()
    op_groups = [g for g in groups if all(any(n.lower() in op.lower() for n in g) for op in ops)]
    assert op_groups, f"{code}: no gate group is spelled by every one of {ops}"


def test_launch_text_covers_is_distributed_script():
    from ddp_lint.analysis.flow.models import _LAUNCH, LAUNCH_TEXT

    assert all(any(t in q.rsplit(".", 1)[1] for t in LAUNCH_TEXT) for q in _LAUNCH)


def test_rule_index_is_generated_from_the_rules():
    """analysis/rules/_index.py (what the check path gates with, before importing any rule) equals
    what the rule classes declare: regenerate with `python -m ddp_lint.analysis.ruledocs`."""
    from ddp_lint.analysis.registry import index_source

    path = Path(__file__).resolve().parent.parent / "analysis" / "rules" / "_index.py"
    assert path.read_text(encoding="utf-8") == index_source()


def test_a_gated_out_file_imports_no_rule(tmp_path):
    """Start-up (issue 31): checking a file no gate admits imports no rule or flow module."""
    import subprocess
    import sys

    code = ("import sys\nfrom ddp_lint.cli import main\n"
            "sys.argv = ['ddp-lint', 'check', '--no-cache', '--isolated', sys.argv[1]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(' '.join(m for m in sys.modules if m.startswith(('ddp_lint.analysis.rules.',"
            " 'ddp_lint.analysis.flow'))))\n")
    root = Path(__file__).resolve().parent.parent
    one = tmp_path / "one.py"
    one.write_text("print('hello')\n")
    out = subprocess.run([sys.executable, "-c", code, str(one)], capture_output=True, text=True, cwd=root,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].split() == ["ddp_lint.analysis.rules._index"]
