"""The Flight Recorder loader (analysis/runtime/frdump.py) on hostile input: random bytes, random
pickle opcode streams, mutations of a real-shaped dump, and any nesting of data.

Invariants:
- ``safe_loads`` / ``read_dump`` either return data or raise DumpError (never another exception,
  never a hang, never a crash);
- nothing in the input runs: every global, REDUCE, BUILD, NEWOBJ, INST, OBJ or EXT in a stream is
  refused (a sentinel callable is never called);
- what comes back holds data types only, within the depth bound;
- ``explain`` over a folder of such files ends with a result, never a traceback.
"""
from __future__ import annotations

import pickle
import pickletools

from hypothesis import given
from hypothesis import strategies as st

from analysis.runtime.explain import explain
from analysis.runtime.frdump import (
    DumpError,
    check_shape,
    read_dump,
    safe_loads,
    to_dump,
)
from tests.fuzz.support import examples
from tests.runtime.fr_fixtures import dump, entry

CALLED = []


def sentinel(*a):  # reachable by name from a pickle, never to be called
    CALLED.append(a)
    return a


BASE = pickle.dumps(dump("2.10", [entry("2.10", i, i + 1, "all_reduce", [[4]], [("/w/train.py", 7, "step")])
                                  for i in range(3)], 2), protocol=4)
EVIL = [
    pickle.dumps(sentinel, protocol=2),
    b"c" + __name__.encode() + b"\nsentinel\n(tR.",
    b"\x80\x02c" + __name__.encode() + b"\nsentinel\nq\x00)\x81q\x01.",  # NEWOBJ
    b"(i" + __name__.encode() + b"\nsentinel\n.",  # INST
    b"\x80\x02\x82\x01.",  # EXT1
    b"\x80\x02P0\n.",  # PERSID
    b"\x80\x02}q\x00c" + __name__.encode() + b"\nsentinel\nb.",  # BUILD with a global
]

_opcodes = [op.code.encode("latin-1") for op in pickletools.opcodes]
data_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20) | st.binary(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.tuples(kids, kids) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=30)


def _ok(data: bytes):
    try:
        obj = safe_loads(data, max_objects=200_000)
    except DumpError as e:
        assert str(e)
        return None
    check_shape(obj, max_objects=200_000)
    try:
        to_dump(obj, "trace_rank_0", 0)
    except DumpError as e:
        assert str(e)
    return obj


@examples(300)
@given(st.binary(max_size=400))
def test_random_bytes(data):
    _ok(data)
    _ok(b"\x80\x04" + data)


@examples(300)
@given(st.lists(st.sampled_from(_opcodes) | st.binary(max_size=6), max_size=40))
def test_random_opcode_streams(parts):
    _ok(b"\x80\x02" + b"".join(parts) + b".")
    assert not CALLED


@examples(300)
@given(st.integers(0, len(BASE) - 1), st.binary(min_size=1, max_size=8), st.booleans())
def test_mutated_dump(pos, patch, cut):
    data = BASE[:pos] if cut else BASE[:pos] + patch + BASE[pos + len(patch):]
    _ok(data)
    assert not CALLED


@examples(200)
@given(data_values)
def test_any_data_round_trips_or_is_refused(value):
    obj = _ok(pickle.dumps(value, protocol=4))
    assert obj is None or obj == value


def test_nothing_runs():
    for data in EVIL:
        try:
            safe_loads(data)
        except DumpError as e:
            assert "refused" in str(e) or "truncated or not a pickle" in str(e)
        else:
            raise AssertionError(f"loaded {data!r}")
    assert not CALLED


@examples(40)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=3), st.integers(0, len(BASE)))
def test_explain_never_raises(tmp_path_factory, blobs, cut):
    d = tmp_path_factory.mktemp("fz")
    (d / "trace_rank_0").write_bytes(BASE[:cut])
    for i, b in enumerate(blobs, 1):
        (d / f"trace_rank_{i}").write_bytes(b"\x80\x02" + b)
    res = explain([str(d)], root=str(d))
    assert res.exit_code in (0, 1, 2)
    try:
        read_dump(str(d / "trace_rank_0"))
    except DumpError:
        pass
