"""One batch run reads the disk as one snapshot.

The text-level layer keeps memos that a long-lived process (the language server) lets expire after
a few seconds, so that a file saved outside the editor is seen: flow/reach.py's import graph and
answers, rules/_common.py's caller candidates, flow/project.py's import roots. A batch run
(``batch.check_files``) takes the disk as unchanging while it runs, so those memos hold for the
whole run: each file is read, resolved and indexed once, not once every few seconds; some memos
are made only inside a snapshot (flow/project.py's file probes, flow/reach.py's answer per file,
rules/_common.py's index of the called words). Imports
nothing, so that a gated-out file still loads no rule or flow module.
"""
from __future__ import annotations

import contextlib

_on = False
_runs = 0  # the snapshots entered so far (outermost ones)
# False inside ``no_dependencies()``: nothing reads a check's dependencies (a batch run without a
# cache), so flow/reach.py's "no" answers skip collecting the files they rest on
deps = True


def fresh(at: float, now: float, ttl: float) -> bool:
    """A memo made at ``at`` still holds at ``now``: within ``ttl`` seconds, or in a snapshot."""
    return _on or now - at < ttl


def current() -> int | None:
    """The number of the snapshot in force (a memo of an earlier run is not of this one), None
    outside one."""
    return _runs if _on else None


@contextlib.contextmanager
def snapshot():
    """The disk is taken as unchanging while the block runs (forked workers inherit it)."""
    global _on, _runs
    before, _on = _on, True
    if not before:
        _runs += 1
    try:
        yield
    finally:
        _on = before


@contextlib.contextmanager
def no_dependencies(on: bool = True):
    """While the block runs (when ``on``), answers carry no dependencies; the answers themselves
    are the same (forked workers inherit it)."""
    global deps
    before = deps
    deps = deps and not on
    try:
        yield
    finally:
        deps = before
