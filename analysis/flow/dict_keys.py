"""The key set of a dict: does a value always hold a given literal key?

``'loss' in out`` where ``out = model(batch)`` reads this rank's data, yet its truth value is the
same on every rank when every dict the call can return holds the key: a ``forward`` (reached
through the ``DistributedDataParallel`` / FSDP wrapper, or called on the module itself), a method
or a helper of the project whose every ``return`` is a dict display ``{"loss": ..., ...}`` or
``dict(loss=...)`` with that key, a local name bound only to such a dict (keys are only ever
added to it: subscript stores, ``update``, ``setdefault``), another such call, or either arm of a
conditional expression. A ``return None`` (or a bare ``return``) is no counter-example: ``'k' in
None`` raises, so on that path the test never yields a value; at least one dict must be seen.
Anything else returned (a call of a library, a parameter, a dict display without the key, a
generator) leaves the question open: ``has_key`` answers False and the evaluator keeps its usual
answer (rank-varying data).

Asked by the uniformity evaluator (``Evaluator._compare``) for ``"k" in x`` / ``"k" not in x``,
so every rule that asks whether a test is rank-varying benefits.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, parent
from .bindings import reaching
from .calls import WRAPPERS

_MAX_DEPTH = 6
# nn.Module methods returning the module itself, and the wrapper-preserving SyncBN conversion
_CHAIN = frozenset({"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval", "to_empty"})
# uses of a local dict that never remove a key
_ADDING = frozenset({"update", "setdefault", "get", "keys", "items", "values", "copy", "__contains__"})


def has_key(hub, view, x: ast.AST, key: str) -> bool:
    """Whether the name ``x`` holds, at its use, a dict that always has ``key`` (see the module
    docstring): every reaching binding is ``x = <call>`` whose every return has it."""
    if not isinstance(x, ast.Name):
        return False
    kind, got = reaching(view, x.id, x)
    if kind != "events" or not got:
        return False
    for b in got:
        if not (isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name)
                and isinstance(b.value, ast.Call)):
            return False
        if _call_has(hub, view, b.value, key, 0) is not True:
            return False
    return True


def _call_has(hub, view, call: ast.Call, key: str, depth: int):
    """True when every return of what ``call`` runs holds ``key`` (and one dict is seen), None
    when it only returns None, False otherwise (memoised per call)."""
    memo = view.memo.setdefault("dict_keys", {})
    mk = (id(call), key)
    if mk in memo:
        return memo[mk]
    memo[mk] = False  # recursion guard
    got = memo[mk] = _call_has_uncached(hub, view, call, key, depth) if depth <= _MAX_DEPTH else False
    return got


def _call_has_uncached(hub, view, call, key, depth):
    target = _callee(hub, view, call)
    if target is None:
        return False
    fv, fn = target
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in iter_scope_nodes(fn)) \
            or isinstance(fn, ast.AsyncFunctionDef):
        return False  # a generator or a coroutine, not the dict
    seen = None
    for r in iter_scope_nodes(fn):
        if not isinstance(r, ast.Return):
            continue
        got = _expr_has(hub, fv, fn, r.value, r, key, depth + 1)
        if got is False:
            return False
        if got:
            seen = True
    return seen


def _callee(hub, view, call: ast.Call):
    """(view, function) that ``call`` runs: a project function or method, or the ``forward`` of
    the one project module class the called value (a DDP/FSDP wrapper's module, or the module
    itself) is always an instance of; None when unknown."""
    got = hub.resolve_call(view, call)
    if got is not None:
        if getattr(got[1], "name", "__init__") == "__init__" or not isinstance(got[1], FUNC_TYPES):
            return None  # a construction: the instance, not a dict
        return got
    f = call.func
    if not isinstance(f, (ast.Name, ast.Attribute)):
        return None
    cls = _module_class(hub, view, f, call)
    return _forward(hub, *cls) if cls is not None else None


def _module_class(hub, view, expr, at, depth: int = 0, open_=()):
    """(view, ClassDef) of the one project class every origin of ``expr`` constructs, else None.
    A wrapper construction stands for the module it wraps; one already being followed
    (``self.m = DDP(self.m)``, whose argument's origins hold that construction again) adds nothing."""
    from .origins import origins
    from .wrap_views import leaf_arg

    found = None
    for lv, le in origins(hub, view, expr, at):
        e = le
        while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _CHAIN:
            e = e.func.value
        qn = lv.sem.call_qualname(e) or "" if isinstance(e, ast.Call) else ""
        if qn in WRAPPERS or qn.endswith("convert_sync_batchnorm"):
            # the wrapper's forward runs the module's; the conversion returns the module
            if id(e) in open_:
                continue
            iv, inner, iat = leaf_arg(hub, view, expr, at, (lv, e), 0, "module") if e is le else (lv, get_arg(e, 0, "module"), e)
            got = _module_class(hub, iv, inner, iat, depth + 1, (*open_, id(e))) \
                if inner is not None and depth < 4 else None
            if got is None or found is not None and found[1] is not got[1]:
                return None
            found = got
            continue
        if not isinstance(e, ast.Call):
            return None
        r = hub.resolve_call(lv, e)
        if r is None or getattr(r[1], "name", "") != "__init__" or not isinstance(parent(r[1]), ast.ClassDef):
            return None
        cls = (r[0], parent(r[1]))
        if found is not None and found[1] is not cls[1]:
            return None
        found = cls
    return found


def _forward(hub, view, cls: ast.ClassDef):
    """(view, ``forward``) of ``cls`` or its first project base class defining it, provided no
    class before it has a base outside the project (which might define its own); else None."""
    from .records import _NOT_PROJECT, class_chain, class_named

    for v, c in class_chain(hub, view, cls, _NOT_PROJECT):
        for st in c.body:
            if isinstance(st, FUNC_TYPES) and st.name == "forward":
                return v, st
        for b in c.bases:
            if (v.sem.qualname(b) or "") != "torch.nn.Module" and class_named(hub, v, b, _NOT_PROJECT) is None:
                return None
    return None


def _expr_has(hub, view, fn, e, at, key: str, depth: int):
    """For a returned expression: True (a dict with ``key``), None (None), False (anything else)."""
    if e is None or isinstance(e, ast.Constant) and e.value is None:
        return None
    if depth > _MAX_DEPTH:
        return False
    if isinstance(e, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == key for k in e.keys) or False
    if isinstance(e, ast.IfExp):
        a = _expr_has(hub, view, fn, e.body, at, key, depth + 1)
        b = _expr_has(hub, view, fn, e.orelse, at, key, depth + 1)
        if a is False or b is False:
            return False
        return a or b
    if isinstance(e, ast.Call):
        f = e.func
        if isinstance(f, ast.Name) and f.id == "dict" and view.sem.call_qualname(e) in (None, "dict", "builtins.dict") \
                and f.id not in view.defs:
            return any(k.arg == key for k in e.keywords) or False
        return _call_has(hub, view, e, key, depth + 1)  # a helper, a method, another forward
    if isinstance(e, ast.Name):
        return _local_has(hub, view, fn, e, at, key, depth)
    return False


def _local_has(hub, view, fn, x: ast.Name, at, key: str, depth: int):
    """A local name returned: every reaching binding holds the key, and every other use of the
    name in the function only reads it or adds keys to it."""
    kind, got = reaching(view, x.id, x)
    if kind != "events" or not got:
        return False
    for n in iter_scope_nodes(fn):
        if not (isinstance(n, ast.Name) and n.id == x.id) or n is x:
            continue
        p = parent(n)
        if isinstance(n.ctx, ast.Store):
            continue  # a binding: judged below when it reaches the return
        if isinstance(p, ast.Subscript) and p.value is n and not isinstance(p.ctx, ast.Del):
            continue
        if isinstance(p, ast.Attribute) and p.attr in _ADDING:
            continue
        if isinstance(p, ast.Compare) or isinstance(p, ast.Return) and p.value is n:
            continue
        return False  # handed to a call, deleted from, popped: keys may go
    out = None
    for b in got:
        if not (isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name)):
            return False
        r = _expr_has(hub, view, fn, b.value, b, key, depth + 1)
        if r is False:
            return False
        out = out or r
    return out
