"""Survival of the fixtures under the metamorphic transformations, per rule and per transformation.

    python -m tests.metamorphic.report            # print the tables and write them into bench/RESULTS.md
    python -m tests.metamorphic.report --failures # also list every variant that did not survive
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from .run import run_all

RESULTS = Path(__file__).resolve().parent.parent.parent / "bench" / "RESULTS.md"
BEGIN, END = "<!-- metamorphic:begin -->", "<!-- metamorphic:end -->"


def tables(res) -> str:
    def table(key, title):
        tot, ok = Counter(), Counter()
        for o in res:
            for k in (key(o), "all"):
                tot[k] += 1
                ok[k] += o.survived
        rows = [f"| {title} | bad | good | survived |", "|---|---|---|---|"]
        for k in sorted(tot, key=lambda k: (k == "all", k)):
            b = [o for o in res if (k == "all" or key(o) == k) and o.kind == "bad"]
            g = [o for o in res if (k == "all" or key(o) == k) and o.kind == "good"]
            rows.append(f"| {k} | {sum(o.survived for o in b)}/{len(b)} | {sum(o.survived for o in g)}/{len(g)} "
                        f"| {100 * ok[k] / tot[k]:.1f}% |")
        return "\n".join(rows)
    return (f"{BEGIN}\n### Metamorphic survival (issue 25, point 3)\n\n`python -m tests.metamorphic.report`: "
            f"{len(res)} variants of the bad and good fixtures under "
            f"{len({o.transform for o in res})} semantics-preserving transformations (tests/metamorphic/).\n\n"
            f"{table(lambda o: o.code, 'rule')}\n\n{table(lambda o: o.transform, 'transformation')}\n{END}\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    res = run_all()
    out = tables(res)
    print(out)
    if "--failures" in argv:
        for o in res:
            if not o.survived:
                print(f"{o.code} {o.fixture} {o.transform}: {o.detail}")
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + out + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + out
    RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
