"""A function that a launcher helper runs on its single-process path, where no group exists.

A launcher such as ``call_main(cfg, main)`` takes the program's entry function and either starts
the distributed run (a branch that initialises the default group, directly or through project
functions: ``lifecycle.lifecycle_of``, or a library that creates it) or calls the entry function
itself in the other branch of the same ``if`` (``else: return main(cfg)``, "single GPU"). On that
branch no group exists: the sibling branch creates it, and nothing before the ``if`` in the
launcher does (an init there would make the sibling's a second one).

The other branch may also be what follows an ``if`` whose branch with the call leaves
(``if not distributed: return main(cfg)``), and the call may follow an ``if`` without ``else``
whose body creates the group and leaves (``if world > 1: init(...); return main(cfg)`` then
``return main(cfg)``).

An ``if`` on the group's own state (``dist.is_initialized()``) is not a launcher's choice of
mode: a branch it keeps for a run with a group is not the single-process path.

``single_process_call(hub, view, fn)`` gives ``(view, call, if)`` of such a call of ``fn`` (a
module-level function of ``view``), for a launcher of the project (this module or another) that
receives ``fn`` as an argument at a call in ``view``; None when there is none. The call must not
sit in a ``try`` with handlers, and nothing on its branch before it may initialise the group.
Nothing here reports a finding.
"""
from __future__ import annotations

import ast
import weakref

from ..semantic import FUNC_TYPES, parent
from ..torch_api import D
from .bindings import reaching
from .call_sites import project_target
from .calls import call_args
from .lifecycle import LIBRARY_INITS, group_value, library_init_sites, lifecycle_of

INIT = D + "init_process_group"


def creates_group(hub, view, c) -> bool:
    """``c`` creates the default group: ``init_process_group``, or a project function that may."""
    qn = view.sem.call_qualname(c) or ""
    if qn == INIT or qn in LIBRARY_INITS:
        return True
    if qn.startswith("torch."):
        return False
    target = project_target(hub, view, c)
    if target is None:
        return False
    return lifecycle_of(hub, *target)[0] is not None or bool(library_init_sites(hub, *target))


def _calls(nodes):
    for st in nodes:
        for n in ast.walk(st):
            if isinstance(n, ast.Call):
                yield n


_PASSED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _passed_index(view) -> dict:
    """name -> the (call, argument) pairs of ``view`` that pass a bare name, in walk order; built
    once per module (one walk, not one per function asked about)."""
    idx = _PASSED.get(view.tree)
    if idx is None:
        idx = {}
        for n in view.sem.of_types(ast.Call):  # (``ast.walk``'s order: the module's index by type)
            for a in (*n.args, *(k.value for k in n.keywords)):
                if isinstance(a, ast.Name):
                    idx.setdefault(a.id, []).append((n, a))
        _PASSED[view.tree] = idx
    return idx


def _passed(view, fn):
    """The calls of ``view`` that pass ``fn`` (by its name, unshadowed) as an argument."""
    if list(view.sem.functions.get(fn.name, ())) != [fn]:
        return
    for n, a in _passed_index(view).get(fn.name, ()):
        if reaching(view, a.id, n)[0] in ("none", "global"):
            yield n, a


def single_process_call(hub, view, fn):
    if not isinstance(fn, FUNC_TYPES) or not isinstance(parent(fn), ast.Module):
        return None
    for c, a in _passed(view, fn):
        try:
            got = hub.resolve_call(view, c)
        except Exception:  # noqa: BLE001 - unresolvable: not a launcher we know
            got = None
        if got is None or not isinstance(got[1], FUNC_TYPES) or got[1] is fn:
            continue
        lv, launcher = got
        params = [p for p, x in call_args(c, launcher) if x is a]
        if len(params) != 1:
            continue
        found = _branch_call(hub, lv, launcher, params[0])
        if found is not None:
            return (lv, *found)
    return None


def _rest(st):
    """The statements after ``st`` in its block."""
    p = parent(st)
    for field in ("body", "orelse", "finalbody"):
        blk = getattr(p, field, None)
        if isinstance(blk, list) and any(x is st for x in blk):
            return blk[next(i for i, x in enumerate(blk) if x is st) + 1:]
    return []


def _on_group(hub, lv, st) -> bool:
    """The ``if`` tests the group's state (``dist.is_initialized()``), not the run's mode."""
    return group_value(hub, lv, st.test, False) is not None or group_value(hub, lv, st.test, True) is not None


def _leaves(body) -> bool:
    last = body[-1] if body else None
    if isinstance(last, ast.Try):
        last = last.body[-1] if last.body else None
    return isinstance(last, (ast.Return, ast.Raise))


def _after_leaving_if(hub, lv, launcher, c):
    """The ``if`` (without ``else``) before ``c`` in a block that holds it, whose body creates the
    group and leaves (``if world > 1: init(...); return main(cfg)`` then ``return main(cfg)``),
    with nothing else before ``c`` creating the group."""
    n = c
    while n is not None and n is not launcher:
        p = parent(n)
        blk = None
        for field in ("body", "orelse", "finalbody"):
            b = getattr(p, field, None)
            if isinstance(b, list) and any(x is n for x in b):
                blk = b
                break
        if blk is not None:
            for st in blk[:next(i for i, x in enumerate(blk) if x is n)]:
                if isinstance(st, ast.If) and not st.orelse and _leaves(st.body) and not _on_group(hub, lv, st) \
                        and any(creates_group(hub, lv, x) for x in _calls(st.body)):
                    inside = {id(x) for x in _calls(st.body)}
                    before = [x for x in _calls(launcher.body)
                              if id(x) not in inside and (x.lineno, x.col_offset) < (c.lineno, c.col_offset)]
                    if not any(creates_group(hub, lv, x) for x in before):
                        return st
        if isinstance(p, ast.Try) and p.handlers and any(n is x for x in p.body):
            return None
        n = p
    return None


def _branch_call(hub, lv, launcher, p):
    """``(call, if)``: ``launcher`` calls its parameter ``p`` in one branch of an ``if`` whose
    other branch initialises the group, with no init before the ``if`` nor on the branch before
    the call."""
    for c in _calls(launcher.body):
        if not (isinstance(c.func, ast.Name) and c.func.id == p) or lv.sem.enclosing_function(c) is not launcher:
            continue
        if reaching(lv, p, c)[0] != "param":
            continue
        got = _after_leaving_if(hub, lv, launcher, c)
        if got is not None:
            return c, got
        child, st = c, parent(c)
        while st is not None and st is not launcher:
            if isinstance(st, ast.Try) and st.handlers and any(child is x for x in st.body):
                break
            if isinstance(st, ast.If) and child is not st.test:
                if _on_group(hub, lv, st):
                    break  # ``if dist.is_initialized():``: the group's own state decides (not a launcher's mode)
                mine, other = (st.body, st.orelse) if any(child is x for x in st.body) else (st.orelse, st.body)
                if not other and mine and isinstance(mine[-1], (ast.Return, ast.Raise)):
                    other = _rest(st)  # ``if not distributed: return main(cfg)`` then the distributed run
                if other and any(creates_group(hub, lv, x) for x in _calls(other)):
                    before = [x for x in _calls(mine) if (x.lineno, x.col_offset) < (c.lineno, c.col_offset)]
                    earlier = [x for x in _calls(launcher.body) if x.lineno < st.lineno]
                    if not any(creates_group(hub, lv, x) for x in (*before, *earlier)):
                        return c, st
                break
            child, st = st, parent(st)
    return None
