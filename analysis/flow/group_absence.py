"""Where a run without a default process group cannot be: the facts that say a use of the group
is reached only where one exists, for ``lifecycle.group_state_path``'s "absent" question (DDP002).

- ``absent_truth(hub, view, test)`` / ``absent_value``: the value a test or an expression has where
  no group exists, when the group's absence alone fixes it (``self.rank == 0`` with ``self.rank =
  dist.get_rank() if self.is_distributed else 0``);
- ``flag_mode_test(test)``: a test on the distributed mode read as an attribute of any object
  (``Manager().distributed``, ``trainer.cfg.world_size > 1``): ``lifecycle.mode_test`` asks the
  names of the whole test (``args.distributed``), this one the flag's own name only, and only a
  flag that names distribution (not a bare ``enabled`` / ``on``);
- ``held_by_callers(hub, view, fn, callers)``: every call of ``fn`` (in its module, and through
  ``callers`` in the project's other modules) runs where the group exists or the run is
  distributed (``held_at``): under a test on the group or on the distributed mode, after a use or
  an init of the group on the caller's straight path, in a method of a class another method of
  which needs the group on its straight path, or in a function whose own calls are so (two calls
  up). A function that tests ``dist.is_initialized()`` defensively and then needs the group is no
  bug when no caller runs it without one. ``tested``: only a test at each call counts (what DDP002
  asks for a use made in the function's own body, next to its own test: a slip its author can see,
  unless every caller states the contract by testing the mode itself).
"""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, parent
from .lifecycle import GROUP_USES, INIT, group_value, lifecycle_of, mode_test, project_target, straight

_UNKNOWN = object()
_CMP = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
        ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def absent_truth(hub, view, test: ast.AST):
    """The truth of ``test`` where no default group exists, when that alone decides it: what
    ``group_value`` says, or the value the test compares is one the group's absence fixes
    (``self.rank == 0`` with ``self.rank = dist.get_rank() if self.is_distributed else 0`` and
    ``self.is_distributed = dist.is_initialized()``: ``absent_value``). Only ever used to drop a
    path (a branch or an operand that a run without a group does not reach): a value stored
    earlier, while no group existed, still says so (no group is destroyed in between)."""
    v = group_value(hub, view, test, False)
    if v is not None:
        return v
    got = absent_value(hub, view, test)
    if got is _UNKNOWN:
        return None
    try:
        return bool(got)
    except Exception:  # noqa: BLE001 -- a constant whose truth raises is no answer
        return None


def absent_value(hub, view, e: ast.AST, depth: int = 0):
    """The constant ``e`` holds where no default group exists, or ``_UNKNOWN``: a literal, a
    conditional expression whose test the group's absence decides, a name bound once, a ``self``
    attribute every binding of its class gives the same such value, a comparison of two such
    values."""
    if e is None or depth > 4:
        return _UNKNOWN
    t = e.__class__
    if t is ast.Constant:
        return e.value
    if t is ast.IfExp:
        v = absent_truth(hub, view, e.test) if depth < 4 else None
        return _UNKNOWN if v is None else absent_value(hub, view, e.body if v else e.orelse, depth + 1)
    if t in (ast.BoolOp, ast.Call, ast.UnaryOp):
        v = group_value(hub, view, e, False)
        return _UNKNOWN if v is None else v
    if t is ast.Name:
        v = view.sem.single_value(e.id, view.sem.scope_of(e))
        return _UNKNOWN if v is None or v is e else absent_value(hub, view, v, depth + 1)
    if t is ast.Attribute and e.value.__class__ is ast.Name and e.value.id == "self" \
            and hasattr(hub, "self_attr_bindings"):
        vals = hub.self_attr_bindings(view, e)
        if not vals or len(vals) > 4 or any(isinstance(v, ast.stmt) for v in vals):
            return _UNKNOWN
        got = [absent_value(hub, view, v, depth + 1) for v in vals]
        return got[0] if all(g is not _UNKNOWN and g == got[0] for g in got) else _UNKNOWN
    if t is ast.Compare and len(e.ops) == 1 and e.ops[0].__class__ in _CMP:
        a = absent_value(hub, view, e.left, depth + 1)
        b = absent_value(hub, view, e.comparators[0], depth + 1) if a is not _UNKNOWN else _UNKNOWN
        if a is _UNKNOWN or b is _UNKNOWN:
            return _UNKNOWN
        try:
            return _CMP[e.ops[0].__class__](a, b)
        except Exception:  # noqa: BLE001 -- ``None < 0``: no answer
            return _UNKNOWN
    return _UNKNOWN


# a flag's own name that says the run is distributed (``lifecycle.mode_test``'s vocabulary, without
# its bare words: ``enabled``, ``on``, ``mode``)
_FLAG = re.compile(r"dist|ddp|world_?size|multi_?gpu|n_?gpus|num_gpus|num_processes|nprocs", re.I)


def flag_mode_test(test: ast.AST) -> bool:
    """``test`` reads only flags and counts that name the distributed mode, whatever object holds
    them (the receiver of an attribute is not read): ``Manager().distributed``,
    ``self.env.world_size > 1``, ``not trainer.is_distributed``."""
    from .unconditional import _DIST_MODE

    flags = []

    def ok(n) -> bool:
        t = n.__class__
        if t is ast.Attribute:
            flags.append(n.attr)
            return True
        if t is ast.Name:
            flags.append(n.id)
            return True
        if t is ast.Constant:
            return isinstance(n.value, (int, type(None)))
        if t is ast.UnaryOp:
            return ok(n.operand)
        if t is ast.BoolOp:
            return all(ok(v) for v in n.values)
        if t is ast.Compare:
            return ok(n.left) and all(ok(v) for v in n.comparators)
        return False

    return ok(test) and bool(flags) and all(_DIST_MODE.match(f) and _FLAG.search(f) for f in flags)


def guard_test(sem, test: ast.AST) -> bool:
    """A test on the distributed mode, either way it is read (``lifecycle.mode_test``, or
    ``flag_mode_test``)."""
    return mode_test(sem, test) or flag_mode_test(test)


def _positive(hub, view, test: ast.AST) -> bool:
    """Only a distributed run passes ``test``: a test on the mode that is not negated and not a
    comparison for equality or less (``world_size == 1``), one conjunct of an ``and`` that is, or a
    test on the group that a run without one fails (``group_value``)."""
    if group_value(hub, view, test, False) is False:
        return True
    t = test.__class__
    if t is ast.BoolOp:
        vals = [_positive(hub, view, v) for v in test.values]
        return any(vals) if isinstance(test.op, ast.And) else all(vals)
    if t is ast.UnaryOp or (t is ast.Compare and not all(isinstance(o, (ast.Gt, ast.GtE, ast.NotEq)) for o in test.ops)):
        return False
    return guard_test(view.sem, test)


def _needs_here(hub, view, c, helpers: bool = True) -> bool:
    """The call ``c`` needs the group (a use, an init) or (``helpers``) is a project function whose
    unconditional path does, or that creates the group on every call."""
    qn = view.sem.call_qualname(c) or ""
    if qn in GROUP_USES or qn == INIT:
        return True
    if not helpers or qn.startswith("torch.") or not hasattr(hub, "requires_pg_of"):
        return False
    target = project_target(hub, view, c)
    return target is not None and (hub.requires_pg_of(*target) is not None or lifecycle_of(hub, *target)[0] == "must")


def held_at(hub, view, call: ast.Call, callers=None, depth: int = 0, chain=(), tested: bool = False) -> bool:
    """The call ``call`` runs only where the group exists or the run is distributed (see the
    module's docstring); ``chain``: the functions judged on the way (their own uses say nothing);
    ``tested``: only a test at the call (or up the chain of calls) counts."""
    sem = view.sem
    scope = sem.enclosing_function(call) or sem.tree
    child, p = call, parent(call)
    while p is not None and p is not scope:
        if p.__class__ in (ast.If, ast.IfExp) and child is not p.test:
            in_body = child in p.body if p.__class__ is ast.If else child is p.body
            if in_body and _positive(hub, view, p.test):
                return True
        child, p = p, parent(p)
    at = (call.lineno, call.col_offset)
    for c in () if tested else sem.scope_calls(scope) or ():
        if (c.lineno, c.col_offset) >= at:
            break
        if straight(c, scope) and _needs_here(hub, view, c):
            return True  # the caller has needed the group on every call that gets here
    if not isinstance(scope, FUNC_TYPES):
        return False
    cls = parent(scope)
    if isinstance(cls, ast.ClassDef) and not tested:
        for m in cls.body:
            if isinstance(m, FUNC_TYPES) and m is not scope and m not in chain and any(
                    straight(c, m) and _needs_here(hub, view, c, helpers=False) for c in sem.scope_calls(m) or ()):
                return True  # the class is written for a process that holds the group (its own calls)
    return depth < 2 and held_by_callers(hub, view, scope, callers, depth + 1, chain, tested)


def held_by_callers(hub, view, fn, callers=None, depth: int = 0, chain=(), tested: bool = False) -> bool:
    """``fn`` has calls (in its module; through ``callers(view, fn)``, ``(view, call)`` pairs, in
    the project's other modules), and every one of them is ``held_at`` (a call that a test makes
    fail on purpose, ``pytest.raises``, is left out)."""
    from .testing import expects_error

    if not isinstance(fn, FUNC_TYPES) or not hasattr(hub, "call_sites"):
        return False
    memo = view.memo.setdefault("group_absence.held", {})
    key = (id(fn), depth, tested, *map(id, chain))
    if key in memo:
        return memo[key]
    memo[key] = False  # recursion guard
    sites = [(view, c) for c in hub.call_sites(view, fn)]
    if callers is not None:
        sites += [s for s in callers(view, fn) if s not in sites]
    sites = [(v, c) for v, c in sites if not expects_error(c)]
    chain = (*chain, fn)
    got = bool(sites) and all(held_at(hub, v, c, callers, depth, chain, tested) for v, c in sites)
    memo[key] = got
    return got
