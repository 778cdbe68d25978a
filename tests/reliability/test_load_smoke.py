"""CI smoke version of bench/load_bench.py (5 documents typed concurrently for 8 s against the real
server). Timings are the benchmark's business (they print as ratios in `python -m bench`); this test
asserts only what must hold on any machine: every burst end is followed by a publish of its version (or a later one),
every request is answered without an error, the rows are well formed, and the server is alive
with no internal error logged."""
from __future__ import annotations

from bench.load_bench import run


def test_load_smoke():
    rows = run(quick=True, raw=True)
    raw = rows[0]["_raw"]
    assert raw["keystrokes"] > 50 and raw["burst_ends"] >= 5
    assert raw["missing"] == 0, "a burst end was never published"
    assert raw["unanswered"] == 0 and not raw["request_errors"]
    assert raw["alive"] and not raw["errors"], raw["errors"]
    for r in rows:
        assert r["figure"] and r["value"] and r["target"] and r["pass"] is not None
