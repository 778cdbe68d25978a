"""DDP208's late flag: ``require_backward_grad_sync`` set after the forward whose backward it means to
govern (DDP reads the flag in its forward). Split from the rule's module for size."""
from __future__ import annotations

import ast

from ..semantic import Semantic, iter_scope_nodes, param_names
from ..flow.helper_calls import bind_args
from ..flow.return_deps import names_reaching, target_names
from ..flow.training_loops import is_backward
from ..flow.wrap_sites import bound_at
from ._training import ddp_wraps_of

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_FLAG = "require_backward_grad_sync"


def _pos(node) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _has_pos(node) -> bool:
    return isinstance(node, (ast.stmt, ast.expr))


def _innermost_loop(node, fn):
    for a in Semantic.ancestors(node):
        if a is fn or isinstance(a, _FUNCS):
            return None
        if isinstance(a, _LOOPS):
            return a
    return None


def _flag_targets(st):
    """The holders ``X`` whose ``X.require_backward_grad_sync`` the statement/call ``st`` sets:
    an assignment (also one element of a tuple target) or ``setattr(X, "require_backward_grad_sync", v)``."""
    if isinstance(st, (ast.Assign, ast.AnnAssign)):
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        for t in targets:
            for x in ([t] if not isinstance(t, (ast.Tuple, ast.List)) else t.elts):
                if isinstance(x, ast.Attribute) and x.attr == _FLAG and isinstance(x.value, (ast.Name, ast.Attribute)):
                    yield x.value
    elif isinstance(st, ast.Call) and isinstance(st.func, ast.Name) and st.func.id == "setattr" \
            and len(st.args) == 3 and isinstance(st.args[1], ast.Constant) and st.args[1].value == _FLAG \
            and isinstance(st.args[0], (ast.Name, ast.Attribute)):
        yield st.args[0]


def _wrap_ids(ctx, holder, at) -> frozenset:
    if not (isinstance(holder, ast.Name) or isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name)
            and holder.value.id == "self"):
        return frozenset()
    memo = ctx.memo("ddp208.wrap_ids", dict)
    key = (id(holder), id(at))
    if key not in memo:
        # (keyed by where the wrapper is bound: two wrappers a project helper builds are two)
        memo[key] = frozenset(id(bound_at(o)[1]) for o in ddp_wraps_of(ctx, holder, at))
    return memo[key]


def _flag_writes(ctx, an, view, fn, nodes):
    """(node in ``fn``, holder expression in ``fn``'s terms) for each write of the flag that runs at
    that node: the write itself, or a call of a project function (one call deep) that writes the flag
    on one of its parameters (the holder is the argument) or on ``self.<attr>`` (for ``self.m(...)``,
    the holder is ``self.<attr>``)."""
    for n in nodes:
        if isinstance(n, (ast.Assign, ast.AnnAssign)) or isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            for h in _flag_targets(n):
                if not _rearms_after(nodes, n):
                    yield n, h
        if not isinstance(n, ast.Call) or not isinstance(n.func, (ast.Name, ast.Attribute)):
            continue
        try:
            got = an.resolve_call(view, n)
        except Exception:  # noqa: BLE001 - an unresolvable call is simply not followed
            got = None
        if got is None or not isinstance(got[1], (ast.FunctionDef, ast.AsyncFunctionDef)) or got[1].name == "__init__":
            continue
        callee = got[1]
        binds = bind_args(n, callee)
        inner = iter_scope_nodes(callee)
        # a context manager's writes after its ``yield`` run when the block ends, after its backward
        yields = [_pos(y) for y in inner if isinstance(y, (ast.Yield, ast.YieldFrom))]
        for m in inner:
            if not isinstance(m, (ast.Assign, ast.AnnAssign, ast.Call)) or _rearms_after(inner, m) \
                    or any(_pos(m) > y for y in yields):
                continue
            for h in _flag_targets(m):
                if isinstance(h, ast.Name) and h.id in binds and h.id in param_names(callee) \
                        and not got[0].sem.assignments(callee).get(h.id):
                    yield n, binds[h.id]
                elif isinstance(h, ast.Attribute) and isinstance(h.value, ast.Name) and h.value.id == "self" \
                        and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                        and n.func.value.id == "self" and got[0] is view:
                    yield n, ast.copy_location(ast.Attribute(value=n.func.value, attr=h.attr, ctx=ast.Load()), n)


def _rearms_after(nodes, w) -> bool:
    """A ``<wrapper>.reducer.prepare_for_backward(...)`` call after the write ``w`` in its scope: the
    reducer is armed again by hand (Accelerate's ``trigger_sync_in_backward``), so the flag set after
    the forward does govern the next backward."""
    return any(_pos(c) > _pos(w) for c in nodes if c.__class__ is ast.Call and isinstance(c.func, ast.Attribute)
               and c.func.attr == "prepare_for_backward" and isinstance(c.func.value, ast.Attribute)
               and c.func.value.attr == "reducer")


def _forwards_feeding(ctx, an, view, fn, b, wraps, nodes):
    """The calls of ``fn`` whose value the ``backward`` call ``b`` differentiates that run a forward of
    the wrapper ``wraps`` names: a call of a holder of it, a call that hands one to a helper."""
    stmts = [s for s in nodes if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    names = names_reaching([b], stmts)
    calls = [c for c in ast.walk(b) if isinstance(c, ast.Call) and c is not b]
    for s in stmts:
        if s.value is not None and target_names(s) & names:
            calls.extend(c for c in ast.walk(s.value) if isinstance(c, ast.Call))
    out = []
    for c in calls:
        if _wrap_ids(ctx, c.func, c) & wraps or any(
                _wrap_ids(ctx, a, c) & wraps for a in (*c.args, *(k.value for k in c.keywords))):
            out.append(c)
    return out


def late_flag_writes(ctx):
    """(write node, holder, forward call, backward call): ``holder.require_backward_grad_sync`` is set
    (here or in a helper) after the forward of the DDP wrapper whose value the next ``backward()`` of
    the same round differentiates, with no forward of that wrapper for it after the write and no
    write of the flag before that forward in the round. DDP reads the flag in its forward (the
    reducer is prepared there), so the write does not govern that backward."""
    from ..flow.modern import hub

    an, view = hub(ctx)
    scopes = [f for fl in ctx.sem.functions.values() for f in fl] + [ctx.sem.tree]
    for fn in scopes:
        nodes = iter_scope_nodes(fn)
        backs = sorted((b for b in nodes if isinstance(b, ast.Call) and is_backward(view, b)), key=_pos)
        if not backs:
            continue
        # a write that runs before the scope's last backward (a later one governs no backward here)
        writes = list(_flag_writes(ctx, an, view, fn, [n for n in nodes if _has_pos(n) and _pos(n) < _pos(backs[-1])]))
        if not writes:
            continue
        for w, h in writes:
            wraps = _wrap_ids(ctx, h, w)
            if not wraps:
                continue
            loop = _innermost_loop(w, fn)
            b = next((b for b in backs if _pos(b) > _pos(w) and _innermost_loop(b, fn) is loop), None)
            if b is None:
                continue
            fwd = [c for c in _forwards_feeding(ctx, an, view, fn, b, wraps, nodes)
                   if _innermost_loop(c, fn) is loop and _pos(c) < _pos(b)]
            if not fwd or any(_pos(c) > _pos(w) for c in fwd):
                continue
            first = min(fwd, key=_pos)
            if any(_pos(w2) < _pos(first) and _innermost_loop(w2, fn) is loop and _wrap_ids(ctx, h2, w2) & wraps
                   for w2, h2 in writes):
                continue  # a write before the forward governs it: this one is a restore
            yield w, h, max(fwd, key=_pos), b
