"""Target 4: quick fixes.

* One diagnostic's edit, from scratch: analyse the text with only that rule selected (the rule
  builds its fix while it reports: edits are plain text ranges computed from the ``ast`` tree and the
  source lines, never a concrete syntax tree) and apply the edit to get the new text. Compared with a
  bare ``libcst.parse_module`` of the same text: the least a libcst-based fixer (TorchFix, for one)
  pays before it can edit anything. In the editor the fix travels in ``Diagnostic.data``, so the
  code action itself is only the ``apply`` part (shown separately).
* Apply-all (``ddp-lint check --fix``): the number of parses per fix round, counted by wrapping the
  engine's parser, must be at most one per round.
"""
from __future__ import annotations

from . import fmt_s, interleaved, median, row
from .gen import training_script

TARGET = 1.5


def _libcst():
    try:
        import libcst
    except ImportError:
        return None
    return libcst


def run(quick: bool = False) -> list[dict]:
    from ddp_lint.analysis.config import Settings
    from ddp_lint.analysis.engine import check_source
    from ddp_lint.analysis.fixes import apply_edits

    rows: list[dict] = []
    cst = _libcst()
    reps = 5 if quick else 15
    sizes = (500,) if quick else (500, 2000)
    for n in sizes:
        text = training_script(n, seed=n)
        name = f"train_{n}.py"
        fixable = [f for f in check_source(text, name).findings if f.fix is not None]
        if not fixable:
            rows.append(row(f"quick fix, {n}-line script", "no fixable finding", ok=False))
            continue
        for target in fixable:
            code = frozenset({target.code})

            def one_fix(code=code, target=target):
                found = [f for f in check_source(text, name, codes=code).findings
                         if f.fix is not None and f.range == target.range]
                return apply_edits(text, found[0].fix.edits)

            assert one_fix() != text
            if cst is None:
                t = median(interleaved([one_fix], reps)[0])
                rows.append(row(f"quick fix {target.code}, {n}-line script", fmt_s(t), "libcst not installed",
                                None, f"<= {TARGET}x", None))
                continue
            ours, floor = interleaved([one_fix, lambda: cst.parse_module(text)], reps)
            r = median(ours) / median(floor)
            rows.append(row(f"quick fix {target.code}, {n}-line script (analyse + edit)", fmt_s(median(ours)),
                            f"libcst.parse_module {fmt_s(median(floor))}", r, f"<= {TARGET}x", r <= TARGET))
        fix = fixable[0].fix
        apply_t = median(interleaved([lambda: apply_edits(text, fix.edits)], reps * 4)[0])
        rows.append(row(f"code action from Diagnostic.data, {n}-line script (apply only)", fmt_s(apply_t),
                        "", None, "", None))

    # -- apply-all: parses per round ---------------------------------------------------------
    import ddp_lint.analysis.engine as engine
    import ddp_lint.analysis.fixes as fixes
    from ddp_lint.cli import _analyse_text

    text = training_script(800, seed=11)
    counts = {"parse": 0, "rounds": 0, "applied_rounds": 0}
    real_parse, real_round = engine.parse, fixes.apply_fix_round

    def counting_parse(*a, **k):
        counts["parse"] += 1
        return real_parse(*a, **k)

    def counting_round(*a, **k):
        counts["rounds"] += 1
        out = real_round(*a, **k)
        if out[1]:
            counts["applied_rounds"] += 1
        return out

    engine.parse, fixes.apply_fix_round = counting_parse, counting_round
    try:
        _, remaining, err, new_text, _ = _analyse_text(text, "fixall.py", Settings(), True, False)
    finally:
        engine.parse, fixes.apply_fix_round = real_parse, real_round
    rounds, parses = counts["rounds"], counts["parse"]
    ok = new_text is not None and parses <= rounds
    rows.append(row("apply-all (check --fix), 800-line script: parses per fix round",
                    f"{parses} parses", f"{rounds} rounds, {counts['applied_rounds']} of them applying fixes",
                    parses / max(rounds, 1), "<= 1.0 per round", ok))
    t_all = median(interleaved([lambda: _analyse_text(text, "fixall.py", Settings(), True, False)],
                               max(3, reps // 3))[0])
    if cst is not None:
        floor = median(interleaved([lambda: cst.parse_module(text)], max(3, reps // 3))[0])
        rows.append(row("apply-all (check --fix), 800-line script: time", fmt_s(t_all),
                        f"libcst.parse_module {fmt_s(floor)}", t_all / floor, "reported", None))
    return rows


if __name__ == "__main__":  # pragma: no cover
    import sys

    from .__main__ import print_table

    print_table(run("--quick" in sys.argv))
