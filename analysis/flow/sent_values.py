"""Settings a function sends from one rank to the others, and those it leaves out.

The shape: a function splits on a rank test (``if dist.get_rank() == 0:``); one side calls a
project helper that broadcasts (the sender), passing some of the function's parameters; the other
side rebinds some of the same parameters from a project helper that receives them from a broadcast
(``ctx_len, tokens, steps, greedy = receive_settings()``). The receiving ranks' own arguments for
those parameters are thereby ignored: the function is written for callers on those ranks that do
not know the settings (``generate(model)``).

``unsent_settings(ctx, hub, view, fn)`` lists a parameter with a literal default (a setting, like
the received ones: at least one received parameter has a literal default too) that neither helper
carries and that every rank reads after the split: the receiving ranks run with their own value.
The helpers are recognised by their summaries (``hub.summary``: a broadcast, a scatter or a send
they make, through helpers too), not by their names.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, Semantic
from .bindings import reaching
from .helper_calls import may_resolve, resolved
from .rank_tests import rank_test

_SENDS = frozenset({"broadcast", "broadcast_object_list", "scatter", "scatter_object_list", "send", "isend"})


class Unsent:
    """``param`` (default ``default``) is read at ``read`` after ``split``; ``send`` is the sender's
    call, ``recv`` the receiving assignment, ``carried`` the parameters they carry."""

    __slots__ = ("param", "default", "read", "split", "send", "recv", "carried")

    def __init__(self, param, default, read, split, send, recv, carried):
        self.param, self.default, self.read, self.split = param, default, read, split
        self.send, self.recv, self.carried = send, recv, carried


def _literal(e) -> bool:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        e = e.operand
    return isinstance(e, ast.Constant) and not isinstance(e.value, bytes)


def _literal_defaults(fn) -> dict:
    a = fn.args
    pos = [*a.posonlyargs, *a.args]
    out = {p.arg: d for p, d in zip(pos[len(pos) - len(a.defaults):], a.defaults) if _literal(d)}
    out.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None and _literal(d)})
    return out


def _sends(hub, view, call) -> bool:
    """``call`` runs a project function that broadcasts, scatters or sends (by its summary)."""
    if not may_resolve(view, call):
        return False
    target = resolved(hub, view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return False
    return any(e.op in _SENDS for e in hub.summary(target[0], target[1]).collectives)


def _sender(hub, view, branch, params) -> tuple:
    """(call, parameters it passes) of the first statement of ``branch`` that calls a sending
    helper with at least one of ``params`` as an argument."""
    for st in branch:
        call = st.value if isinstance(st, (ast.Expr, ast.Assign)) else None
        if isinstance(call, ast.Call) and _sends(hub, view, call):
            passed = {a.id for a in (*call.args, *(k.value for k in call.keywords))
                      if isinstance(a, ast.Name) and a.id in params}
            if passed:
                return call, passed
    return None, set()


def _receiver(hub, view, branch, params) -> tuple:
    """(assignment, parameters it rebinds) of the first ``a, b = helper()`` of ``branch`` whose
    helper receives from a broadcast and whose targets rebind one of ``params``."""
    for st in branch:
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.value, ast.Call)):
            continue
        t = st.targets[0]
        names = [t] if isinstance(t, ast.Name) else (list(t.elts) if isinstance(t, (ast.Tuple, ast.List)) else [])
        got = {n.id for n in names if isinstance(n, ast.Name) and n.id in params}
        if got and _sends(hub, view, st.value):
            return st, got
    return None, set()


def unsent_settings(ctx, hub, view, fn) -> list:
    """The ``Unsent`` settings of ``fn`` (see the module's docstring)."""
    if not isinstance(fn, FUNC_TYPES):
        return []
    defaults = _literal_defaults(fn)
    if len(defaults) < 2:
        return []
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    out = []
    for st in fn.body:
        if not isinstance(st, ast.If) or not st.orelse or rank_test(ctx, st.test, fn) is None:
            continue
        for sends, recvs in ((st.body, st.orelse), (st.orelse, st.body)):
            send, sent = _sender(hub, view, sends, params)
            if send is None:
                continue
            recv, got = _receiver(hub, view, recvs, params)
            if recv is None or not got <= sent or not any(p in defaults for p in got):
                continue
            for p, d in defaults.items():
                if p in sent or p in got:
                    continue
                read = _read_after(view, fn, st, p)
                if read is not None:
                    out.append(Unsent(p, d, read, st, send, recv, sorted(got)))
            break
    return out


def _read_after(view, fn, st, name):
    """The first read of parameter ``name`` after the statement ``st`` of ``fn``'s body, in a
    later statement of that body, that the parameter itself reaches (no rebinding between)."""
    i = fn.body.index(st)
    for later in fn.body[i + 1:]:
        for n in ast.walk(later):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
                kind, got = reaching(view, name, n)
                if kind == "param" and got is fn and Semantic.scope_of(n) is fn:
                    return n
    return None
