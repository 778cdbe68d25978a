"""The fixtures survive semantics-preserving transformations (issue 25, point 3).

Floors below the measured survival (bench/RESULTS.md, `python -m tests.metamorphic.report`), so
that a regression of the analysis fails here; raise them as the analysis improves. The full run
takes about two minutes.
"""
from __future__ import annotations

import ast
from collections import Counter

import pytest

from .run import run_all
from .transforms import TRANSFORMS, tag_markers, variants

# measured 97.2% overall, every rule at least 90.0% (bench/RESULTS.md, stop 48); the acceptance point of
# issue 25 is 95% overall and 85% for every rule, bad and good fixtures alike
OVERALL_FLOOR = 0.955
RULE_FLOOR = 0.88
# A rule (or a family, by its first four characters) held lower, each with the reason, to be raised
# (stop 48 brought DDP222 and DDP013, held at 0.84 in stop 47, above the rule floor; stop 49 brought
# DDP014, 56/76 = 73.7% by annotations only, to 117/117 by following the config object's value).
FAMILY_FLOORS: dict[str, float] = {
    # stop 53: DDP528 misses the second finding of bad_name_and_tuple.py once the call is extracted into
    # a helper, and the new scripts_folder transformation (a helper in a package of its own) repeats
    # that miss: 29/33 = 87.9%. To be raised when the helper's parameter is followed.
    "DDP528": 0.85,
}


@pytest.fixture(scope="module")
def results():
    return run_all()


def test_at_least_twelve_transformations():
    assert len(TRANSFORMS) >= 12


def test_variants_parse_and_differ():
    src = tag_markers(
        "import os\nimport torch.distributed as dist\n\n\ndef main():\n    rank, world = dist.get_rank(), 2\n"
        "    x = 1 if rank else 0\n    dist.init_process_group(backend='nccl')  # expect: DDP001\n\n\n"
        "if __name__ == '__main__':\n    main()\n")
    names = set()
    for v in variants(src):
        ast.parse(v.text)
        assert v.text != src, v.name
        names.add(v.name)
    assert {"rename", "tuple_assign", "ifexp_to_if", "argparse_default", "extract_helper", "class_method"} <= names


@pytest.mark.timeout(1800)  # the module's fixture runs every variant on the first test that asks
def test_survival_floor(results):
    ok = sum(o.survived for o in results)
    assert ok / len(results) >= OVERALL_FLOOR, f"{ok}/{len(results)}"
    tot, good = Counter(), Counter()
    for o in results:
        tot[o.code] += 1
        good[o.code] += o.survived
    low = {c: f"{good[c]}/{tot[c]}" for c in tot if good[c] / tot[c] < FAMILY_FLOORS.get(c, FAMILY_FLOORS.get(c[:4], RULE_FLOOR))}
    assert not low, low


@pytest.mark.timeout(1800)
def test_both_kinds_measured(results):
    kinds = Counter(o.kind for o in results)
    assert kinds["bad"] > 500 and kinds["good"] > 500
