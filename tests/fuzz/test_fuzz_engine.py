"""Analysis never raises and every answer is in bounds; fixes are sound (see support.py for the
exact invariants). Corpora: hypothesmith programs, generated DDP programs, the bundled examples and
rule fixtures cut at every line and at random offsets, and random token mutations of them."""
from __future__ import annotations

import hypothesmith
import pytest
from hypothesis import HealthCheck, assume, given
from hypothesis import strategies as st

from tests.fuzz.strategies import ddp_programs, token_mutations
from tests.fuzz.support import check_invariants, corpus_files, examples, read

CORPUS = corpus_files()
TEXTS = {p.name: read(p) for p in CORPUS}
NAMES = sorted(TEXTS)
HEADER = "import torch\nimport torch.distributed as dist\n"


def test_corpus_is_not_empty():
    assert any(n.startswith("seed_problem") for n in NAMES), "the examples are part of the corpus"
    assert len(NAMES) >= 10


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_cut_at_every_line(path):
    text = read(path)
    lines = text.splitlines(keepends=True)
    check_invariants(text)
    for k in range(len(lines)):
        check_invariants("".join(lines[:k]))
        # and the same line cut in half (a half-typed line)
        half = lines[k][: len(lines[k].rstrip("\r\n")) // 2]
        check_invariants("".join(lines[:k]) + half)


@examples(60)
@given(st.sampled_from(NAMES), st.data())
def test_cut_at_random_offsets(name, data):
    text = TEXTS[name]
    i = data.draw(st.integers(0, len(text)), label="start")
    j = data.draw(st.integers(i, len(text)), label="end")
    check_invariants(text[:i])  # a truncated file
    check_invariants(text[:i] + text[j:])  # a chunk cut out of the middle


@examples(80)
@given(st.sampled_from(NAMES), st.data())
def test_token_mutations(name, data):
    check_invariants(data.draw(token_mutations(TEXTS[name]), label="mutated"))


@examples(150)
@given(ddp_programs())
def test_generated_ddp_programs(text):
    check_invariants(text)


@examples(40)
@given(ddp_programs(), st.data())
def test_generated_ddp_programs_mutated(text, data):
    check_invariants(data.draw(token_mutations(text), label="mutated"))


# hypothesmith is slow (~0.3 s per program): few examples in CI, many more under --hypothesis-profile=long
@examples(25, suppress_health_check=list(HealthCheck))
@given(st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node()),
       st.sampled_from(NAMES))
def test_hypothesmith_programs(program, name):
    assume(program.strip())
    check_invariants(program)
    # the same program inside a file that makes the rules run: after the torch header, and spliced
    # into the middle of a real DDP script
    check_invariants(HEADER + program)
    corpus = TEXTS[name]
    mid = corpus.find("\n", len(corpus) // 2) + 1
    check_invariants(corpus[:mid] + program + ("\n" if not program.endswith("\n") else "") + corpus[mid:])
