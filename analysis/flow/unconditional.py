"""Does a statement run on every call of its function: no condition, handler or conditional
expression around it, and no ``return``/``raise`` before it (``unconditional``); the tests that
only ask whether the job is distributed at all (``dist_mode_test``), which never make a collective
conditional in that sense."""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, parent


_SCOPES = (*FUNC_TYPES, ast.ClassDef, ast.Lambda, ast.Module)
_DEFS = (*FUNC_TYPES, ast.ClassDef)


def holders_of(starts, got: set | None = None, scopes: tuple = _SCOPES) -> set:
    """The nodes in ``starts`` and everything around each, up to (and with) the definition (or
    module) it belongs to: the statements, handlers and cases that hold one (a set of nodes: they
    hash by identity). ``got``: a result of ``holders_of`` to add to (in place). ``scopes=()``:
    up to the module, through the definitions (what ``ast.walk`` of a holder would reach)."""
    if got is None:
        got = set()
    for n in starts:
        while n is not None and n not in got:
            got.add(n)
            if isinstance(n, scopes):
                break
            n = parent(n)
    return got


_BRANCHING = (ast.If, ast.IfExp, ast.BoolOp, ast.ExceptHandler, ast.Lambda, ast.ListComp, ast.SetComp,
              ast.DictComp, ast.GeneratorExp, *FUNC_TYPES, ast.ClassDef)


def _return_holders(view) -> set:
    """The statements that hold a ``return`` or ``raise`` of their own definition (one
    in a nested definition leaves that definition only)."""
    got = view.memo.get("return_holders")
    if got is None:
        got = view.memo["return_holders"] = holders_of(
            view.sem.by_type.get(ast.Raise, ()), set(_holders_of_returns(view)))
    return got


def _holders_of_returns(view) -> set:
    """``holders_of`` the module's ``return`` statements (shared by the holders of returns and
    raises here and the holders of early exits in ``control``)."""
    got = view.memo.get("holders_of_returns")
    if got is None:
        got = view.memo["holders_of_returns"] = holders_of(view.sem.by_type.get(ast.Return, ()))
    return got


def unconditional(view, node: ast.AST, fn: ast.AST, allow=None) -> bool:
    """``node`` runs on every call of ``fn`` that reaches the end of the statements before it: no
    ``if`` / handler / conditional expression between them, and no early exit earlier in the
    body. (Loops are taken to run at least once.) ``allow(node, child)``: a condition around
    ``node`` (an ``if`` or a conditional expression) that the caller knows to hold (``child``: the
    part of it that holds ``node``)."""
    holders = _return_holders(view)
    child = node
    p = parent(node)
    while p is not None and p is not fn:
        if isinstance(p, _BRANCHING) or p.__class__.__name__ in ("match_case", "Match"):
            if not ((isinstance(p, ast.If) and (child is p.test or dist_mode_test(p.test)))
                    or (allow is not None and allow(p, child))):
                return False
        child = p
        p = parent(p)
    if p is None:
        return False
    for st in getattr(fn, "body", ()):
        if st is child:
            return True
        if isinstance(st, ast.If) and dist_mode_test(st.test) and not st.orelse:
            continue  # ``if world_size == 1: return``: no other rank to wait for
        if st in holders and not isinstance(st, _DEFS):
            return False
    return True


_DIST_MODE = re.compile(
    r"^(?:_*(?:is_)?(?:dist(?:ributed)?|ddp|torch_dist)?_?(?:avail(?:able)?|initiali[sz]ed|enabled|on|mode|run)?"
    r"(?:_and_initiali[sz]ed)?|(?:get_)?world_size|ws|n_?gpus?|num_gpus|num_processes|nprocs|use_ddp|use_dist"
    r"|multi_?gpu|dist|distributed|torch|self|args|cfg|config|opt|WORLD)$", re.I)


def dist_mode_test(test: ast.AST) -> bool:
    """A test on whether the job is distributed at all (``dist.is_initialized()``,
    ``world_size > 1``, ``args.distributed``): the same on every rank, and when it is false there
    is no other rank to wait for. (Cached on the test node: the same ``if`` is asked about once
    per collective under it.)"""
    try:
        return test._dm
    except AttributeError:
        pass
    got = test._dm = _dist_mode_test(test)
    return got


def _dist_mode_test(test: ast.AST) -> bool:
    names = []
    for n in ast.walk(test):
        if isinstance(n, ast.Name):
            names.append(n.id)
        elif isinstance(n, ast.Attribute):
            names.append(n.attr)
        elif isinstance(n, ast.Constant):
            if not isinstance(n.value, (int, type(None))):
                return False
        elif not isinstance(n, (ast.Call, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.cmpop, ast.boolop,
                                ast.unaryop, ast.Load)):
            return False
    return bool(names) and all(_DIST_MODE.match(x) for x in names) and any(
        x.lower() not in ("self", "args", "cfg", "config", "opt", "torch", "dist") for x in names)


# a flag's own name that says the run is distributed (``lifecycle.mode_test``'s vocabulary, without
# its bare words: ``enabled``, ``on``, ``mode``)
_FLAG = re.compile(r"dist|ddp|world_?size|multi_?gpu|n_?gpus|num_gpus|num_processes|nprocs", re.I)


def flag_mode_test(test: ast.AST) -> bool:
    """``test`` reads only flags and counts that name the distributed mode, whatever object holds
    them (the receiver of an attribute is not read): ``Manager().distributed``,
    ``self.env.world_size > 1``, ``not trainer.is_distributed``."""
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


def passed_only_distributed(test: ast.AST, leaf, first=None) -> bool:
    """Only a distributed run passes ``test``, in the shape ``group_absence`` and ``mode_wraps`` share:
    ``first(t)`` true at any level decides; then one conjunct of an ``and`` that is, or every operand
    of an ``or``; never a negation or a comparison for equality or less (``world_size == 1``);
    otherwise ``leaf(t)``."""
    if first is not None and first(test):
        return True
    t = test.__class__
    if t is ast.BoolOp:
        vals = [passed_only_distributed(v, leaf, first) for v in test.values]
        return any(vals) if isinstance(test.op, ast.And) else all(vals)
    if t is ast.UnaryOp or (t is ast.Compare and not all(isinstance(o, (ast.Gt, ast.GtE, ast.NotEq)) for o in test.ops)):
        return False
    return leaf(test)


def leaves_before(first: ast.AST, second: ast.AST) -> bool:
    """No path goes from ``first`` to ``second`` in their function: ``first``'s statement, or one
    after it in its block or an enclosing block (up to the block that also holds ``second``), is a
    ``return``, or a ``raise`` that no enclosing ``try`` handles (``if special: return
    shard(m)`` before code for the other case). Loops are crossed only by a ``return``."""
    x = first
    while x is not None and not isinstance(x, ast.stmt):
        x = parent(x)
    handled = False
    while x is not None and not isinstance(x, _SCOPES):
        owner = parent(x)
        if isinstance(owner, ast.Try) and owner.handlers and x in owner.body:
            handled = True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(owner, field, None)
            if isinstance(block, list) and x in block:
                for st in block[block.index(x):]:
                    if st is not x and _holds(st, second):
                        return False
                    if isinstance(st, ast.Return) or (isinstance(st, ast.Raise) and not handled):
                        return True
                break
        if _holds(owner, second):
            return False
        x = owner
    return False


def _holds(node: ast.AST, inner: ast.AST) -> bool:
    n = inner
    while n is not None:
        if n is node:
            return True
        n = parent(n)
    return False
