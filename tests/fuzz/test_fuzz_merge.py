"""``ddp-lint merge`` on hostile reports (issue 29, R7): random JSON, mutated real reports, random
bytes, huge numbers, NaN, control characters.

Invariants, whatever the input:
- ``merge`` returns 0, 1 or 2 and never raises (no traceback); exit 2 is one ``ddp-lint: error:``
  line on stderr;
- memory stays bounded (a report of a few hundred bytes never costs more than a few MB to refuse);
- the text output carries no control character but the line ends (escaped, R5), and the JSON
  output is valid JSON.
"""
from __future__ import annotations

import copy
import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from tests.fuzz.support import examples

DATA = Path(__file__).resolve().parent / "data"
REAL = [json.loads((DATA / f"merge_node{n}.json").read_text()) for n in (0, 1)]

_CONTROL = {chr(c) for c in (*range(0, 10), *range(11, 32), 127, *range(0x80, 0xa0))}

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**11, 1e11, float("nan"), float("inf"), -0.0, 1e308]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["start", "call", "return", "raise", "exception", "exit", "ready", "quiet", "0", "-1",
                     "100000000000", "\x1b]0;x\x07", "a\n::error::x", "DDP901", "error", "barrier"]),
)
json_values = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=12), kids, max_size=5)), max_leaves=25)


def _paths(v, prefix=()):
    """Every (path) into a JSON value, the root included."""
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, prefix + (i,))


def _replace(v, path, new):
    if not path:
        return new
    parent = v
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = new
    return v


@st.composite
def mutated_report(draw):
    """A real node report with 1 to 4 values (anywhere: a rank record, an event, a finding) replaced."""
    rep = copy.deepcopy(REAL[draw(st.integers(0, 1))])
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(rep))
        path = paths[draw(st.integers(0, len(paths) - 1))]
        rep = _replace(rep, path, draw(json_values))
    return rep


def _finding():
    return st.fixed_dictionaries({"code": st.one_of(st.just("DDP901"), scalars)},
                                 optional={"message": json_values, "filename": json_values,
                                           "location": st.one_of(json_values, st.fixed_dictionaries(
                                               {"row": scalars, "column": scalars})),
                                           "ranks": json_values, "related": json_values,
                                           "severity": json_values, "details": json_values})


reports = st.one_of(
    mutated_report(),
    st.lists(_finding(), max_size=4),
    st.dictionaries(st.sampled_from(["ddp_lint_report", "raw", "findings", "ranks", "notes", "script", "timeout"]),
                    json_values, max_size=6).map(lambda d: {"ddp_lint_report": 1, **d}),
    json_values,
)


def _merge(tmp_path, capsys, blobs, fmt="text"):
    from ddp_lint.cli import main

    paths = []
    for i, b in enumerate(blobs):
        p = tmp_path / f"node{i}.json"
        p.write_bytes(b)
        paths.append(str(p))
    tracemalloc.start()
    try:
        code = main(["merge", *paths, "--output-format", fmt])
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    out = capsys.readouterr()
    assert code in (0, 1, 2), code
    if code == 2:
        assert out.err.startswith("ddp-lint: error: ") and out.err.count("\n") == 1, out.err
        assert out.out == ""
    elif fmt == "json":
        json.loads(out.out)
    else:
        assert not (set(out.out) & _CONTROL), out.out
    assert "Traceback" not in out.err
    return code, peak


def _dump(v) -> bytes:
    return json.dumps(v, allow_nan=True).encode()


@examples(60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(first=reports, second=st.one_of(st.none(), reports), fmt=st.sampled_from(["text", "json"]))
def test_merge_never_crashes_on_hostile_reports(tmp_path_factory, capsys, first, second, fmt):
    tmp = tmp_path_factory.mktemp("m")
    blobs = [_dump(first)] + ([] if second is None else [_dump(second)])
    _merge(tmp, capsys, blobs, fmt)


@examples(40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_merge_never_crashes_on_random_bytes(tmp_path_factory, capsys, data):
    _merge(tmp_path_factory.mktemp("b"), capsys, [data])


@examples(30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(world=st.one_of(st.integers(min_value=10**5, max_value=10**40), st.floats(min_value=1e5),
                       st.integers(min_value=10**5, max_value=10**30).map(str)),
       rank=st.sampled_from(["0", "99999", "100000", "18446744073709551616", "-1", "1e9"]))
def test_small_reports_with_huge_numbers_cost_little(tmp_path_factory, capsys, world, rank):
    rep = {"ddp_lint_report": 1, "raw": {"ranks": {rank: {"events": [{"kind": "start", "world_size": world}]}}}}
    blob = _dump(rep)
    assert len(blob) < 300
    code, peak = _merge(tmp_path_factory.mktemp("w"), capsys, [blob])
    assert peak < 32 * 1024 * 1024


def test_the_real_reports_merge_into_the_whole_story(tmp_path, capsys):
    """The fuzzer's seeds are sound: the two nodes' reports, merged, give the cross-node mismatch."""
    code, _ = _merge(tmp_path, capsys, [_dump(r) for r in REAL], "json")
    assert code == 1


@pytest.mark.parametrize("depth", [200, 5000, 100_000])
def test_deeply_nested_report_is_an_error_not_a_recursion_crash(tmp_path, capsys, depth):
    blob = b'{"ddp_lint_report": 1, "raw": ' + b"[" * depth + b"]" * depth + b"}"
    code, _ = _merge(tmp_path, capsys, [blob])
    assert code == 2
