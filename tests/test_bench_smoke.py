"""Smoke test for the benchmark suite: ``python -m bench --quick`` runs and prints a well-formed
table. No timing is asserted here (speed targets are reported by the bench itself); what is
asserted is structure, and the counts that are not timings (parses per fix round)."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def _run(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_quick_engine_and_fix_rows_are_well_formed():
    p = _run("--quick", "--only", "engine,fix", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert rows, "no rows"
    for r in rows:
        assert set(r) >= {"figure", "value", "comparison", "ratio", "target", "pass"}, r
        assert r["pass"] in (True, False, None), r
        assert not str(r["value"]).startswith("error"), r
        if isinstance(r["ratio"], (int, float)):
            assert r["ratio"] > 0, r
    figures = [r["figure"] for r in rows]
    assert any(f.startswith("[1] in-process analysis") for f in figures)
    assert any(f.startswith("[1] linearity") for f in figures)
    parses = [r for r in rows if "parses per fix round" in r["figure"]]
    assert len(parses) == 1 and parses[0]["pass"] is True, parses


def test_table_output_and_missing_module_row():
    sys.path.insert(0, str(ROOT))
    from bench.__main__ import format_markdown, format_table, run_module

    rows = run_module("x", "bench.no_such_module_here", "9 nothing", quick=True)
    assert rows[0]["value"] == "missing"
    rows.append({"figure": "a", "value": "1 ms", "comparison": "b 2 ms", "ratio": 0.5, "target": "<= 1x",
                 "pass": True})
    text = format_table(rows)
    assert "missing" in text and "0.50x" in text and "PASS" in text
    md = format_markdown(rows)
    assert md.startswith("| figure | value | comparison | ratio | target | pass |")


def test_unknown_module_is_a_usage_error():
    p = _run("--only", "nope", timeout=60)
    assert p.returncode == 2 and "unknown module" in p.stderr


def test_quick_project_rows_are_well_formed():
    p = _run("--quick", "--only", "project", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    figures = [r["figure"] for r in rows]
    assert all(not str(r["value"]).startswith("error") for r in rows), rows
    assert any("cold caches" in f for f in figures) and any("warm caches" in f for f in figures)
    assert any("editing the helper" in f for f in figures)
