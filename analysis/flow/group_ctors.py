"""Process-group construction as a collective over the default group.

``new_group`` (and what calls it for every subgroup: ``new_subgroups``,
``new_subgroups_by_enumeration``, ``split_group``, a ``DeviceMesh`` / ``init_device_mesh``) must be
called by every rank of the default group, for every group, in the same order, members or not: on
torch 2.13 each call takes the next name from a per-process counter (``_process_group_name``), so a
rank that skips one names every later group differently and the first collective on it waits
forever. It does not block by itself (no barrier unless ``TORCH_DIST_INIT_BARRIER=1``), so it is
not a site of ``summaries`` (a sync point, a collective a helper makes); this module asks the same
control question of it that ``control`` asks of a collective:

- ``group_ctor(view, call)``: the vocabulary key (``runtime/shim_vocab.py``, entries that run
  ``new_group``) of a call that constructs groups on every rank, else None. Not
  ``new_group(..., use_local_synchronization=True)``: its name is a hash of its ranks and only the
  members call it (torch returns None at once on the others); nor ``DeviceMesh(...,
  _init_backend=False)``, which makes no group.
- ``group_must(hub, view, fn)``: the group constructions every call of the project function ``fn``
  makes (a summary, as ``summaries.Summary.must`` is for collectives): its own, not behind a
  condition or an early exit (``unconditional``), and those of the helpers it calls so, across
  modules (the calls ``hub.helper_calls`` resolved). A call of such a helper is a group site too:
  ``if rank in members: g = make_group(members)`` where ``make_group`` returns ``new_group(r)``.
- ``group_divergences(hub, view, scope)``: ``control``'s divergences of those calls in ``scope`` (a
  rank-varying condition decides whether it runs, ``rank in ranks``, ``rank // k == i``; an early
  exit under one skips it), where the other ranks do not make as many in the other branch.
"""
from __future__ import annotations

import ast

from ..semantic import get_arg
from .records import callee_name
from .calls import scope_calls
from .control import _site_divergence, branching_scopes
from ..runtime.shim_vocab import VOCAB
from .hidden import entry_of
from .summaries import Effect, Site
from .unconditional import unconditional

WHAT = "group creation"
# the qualified names of the group constructors (a cheap test that a module has one)
GROUP_QNS = tuple(q for a in VOCAB if a.runs == ("new_group",) and not a.method for q in a.qualnames)


def group_ctor(view, call: ast.Call) -> str | None:
    a = entry_of(view, call)
    if a is None or a.runs != ("new_group",) or a.method:
        return None
    if a.key == "new_group" and _truthy(get_arg(call, 4, "use_local_synchronization")):
        return None
    if a.key == "DeviceMesh" and _falsy(get_arg(call, None, "_init_backend")):
        return None
    return a.key


def _truthy(v) -> bool:
    return v is not None and not (isinstance(v, ast.Constant) and not v.value)


def _falsy(v) -> bool:
    return isinstance(v, ast.Constant) and v.value is not None and not v.value


def group_sites(hub, view, scope) -> list:
    """The group constructions of ``scope``: its calls of a constructor, and its calls of project
    functions that make a group on every call (``group_must``), in source order."""
    memo = view.memo.setdefault("group_ctors.sites", {})
    got = memo.get(scope)
    if got is None:
        got = memo[scope] = []  # a recursion reads as no group (``group_must`` guards the summary)
        out = [Site(c, [Effect("new_group", c, view.path, what=WHAT)], "explicit")
               for c in scope_calls(view, scope) if group_ctor(view, c) is not None] if _has_ctor(view) else []
        by_call: dict = {}
        for c, target in hub.helper_calls(view, scope):
            effs = group_must(hub, *target)
            if effs:
                name = callee_name(target)
                by_call.setdefault(c, []).extend(e.through(name) for e in effs)
        out += [Site(c, effs[:6], "helper") for c, effs in by_call.items()]
        out.sort(key=lambda s: (s.node.lineno, s.node.col_offset))
        memo[scope] = got = out
    return got


def _has_ctor(view) -> bool:
    """The module calls a group constructor (a cheap test before its scopes' calls are read)."""
    got = view.memo.get("group_ctors.has")
    if got is None:
        got = view.memo["group_ctors.has"] = bool(view.sem.calls_to(*GROUP_QNS))
    return got


def group_must(hub, view, fn) -> tuple:
    """The group constructions every call of ``fn`` makes (at most 6), through its helpers."""
    memo = view.memo.setdefault("group_ctors.must", {})
    got = memo.get(fn)
    if got is None:
        memo[fn] = ()  # recursion: no group
        got = memo[fn] = tuple(e for s in group_sites(hub, view, fn) if unconditional(view, s.node, fn)
                               for e in s.effects)[:6]
    return got


def group_divergences(hub, view, scope) -> list:
    """The group constructions of ``scope`` that run on some ranks only (``cond`` / ``exit``)."""
    if scope not in branching_scopes(view):
        return []  # every statement of the scope runs whenever the scope runs
    mine = group_sites(hub, view, scope)
    if not mine:
        return []
    sites = [*hub.sites(view, scope), *mine]
    ev = hub.evaluator(view)
    out = []
    for s in mine:
        d = _site_divergence(hub, view, scope, s, sites, ev)
        if d is not None and d.kind in ("cond", "exit") and not _memo_test(scope, d.node.test):
            d.view = view
            out.append(d)
    return out


def _memo_test(scope, test) -> bool:
    """``test`` asks whether a cache holds a key (``key in cache``, ``key not in cache``, within an
    ``and``/``or``) that ``scope`` itself fills under that key (``cache[key] = ...``): a memo of
    groups built by earlier calls, which every rank made alike, whatever the key's value."""
    tests = test.values if isinstance(test, ast.BoolOp) else [test]
    pairs = {(ast.dump(t.left), ast.dump(t.comparators[0])) for t in tests
             if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], (ast.In, ast.NotIn))}
    if not pairs:
        return False
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign):
            for tg in n.targets:
                if isinstance(tg, ast.Subscript) and (ast.dump(tg.slice), ast.dump(tg.value)) in pairs:
                    return True
    return False
