"""docs/rules/ is generated from the rules' docstrings; it must be in sync (run
`python -m ddp_lint.analysis.ruledocs` after changing a rule)."""
from ddp_lint.analysis.ruledocs import expected_files
from tests.conftest import ROOT


def test_rule_docs_pages_in_sync():
    folder = ROOT / "docs" / "rules"
    stale = []
    for name, text in expected_files().items():
        p = folder / name
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            stale.append(name)
    assert not stale, f"docs/rules out of date for {stale}: run `python -m ddp_lint.analysis.ruledocs`"
