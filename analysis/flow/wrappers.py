"""The file's own wrappers of a call: a ``setup()`` that runs ``init_process_group``, a
``sync()`` that runs ``all_reduce``, found by following local calls by name to a fixpoint.

This is the per-file, by-name closure the older rules use (DDP002 for the init, DDP104 for a
collective behind a rank guard); ``summaries`` is the interprocedural one (across files, with
what each function returns). Queries use the semantic indexes only (no extra tree walks).
"""
from __future__ import annotations

import ast


def callee_name(call: ast.Call) -> str | None:
    """``setup`` for ``setup(...)`` and ``self.setup(...)`` / ``cls.setup(...)``."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
        return f.attr
    return None


def wrapper_functions(ctx, qualnames: tuple[str, ...], cache_key: str) -> set[str]:
    """Names of functions defined in this file that (transitively) call one of ``qualnames``
    unconditionally or not: a ``setup()`` that calls ``init_process_group``."""
    return ctx.memo(("wrappers", cache_key), lambda: _wrapper_functions(ctx, qualnames))


def _by_callee(ctx) -> dict[str, list[ast.Call]]:
    """Calls by local callee name (``f(...)``, ``self.f(...)``), for the file's own functions;
    built once per check."""
    def build():
        sem = ctx.sem
        fns = sem.functions
        out: dict[str, list[ast.Call]] = {}
        Name, Attribute = ast.Name, ast.Attribute
        for k in sem.calls:  # ``callee_name`` inlined: one pass over every call of the file
            f = k.func
            if f.__class__ is Name:
                n = f.id
            elif f.__class__ is Attribute and f.value.__class__ is Name and (f.value.id == "self" or f.value.id == "cls"):
                n = f.attr
            else:
                continue
            if n in fns:
                got = out.get(n)
                if got is None:
                    out[n] = [k]
                else:
                    got.append(k)
        return out
    return ctx.memo("flow.calls_by_callee", build)


def _wrapper_functions(ctx, qualnames: tuple[str, ...]) -> set[str]:
    sem = ctx.sem
    names: set[str] = set()
    frontier = [c for c in sem.calls_to(*qualnames)]
    by_name: dict[str, list[ast.Call]] | None = None
    seen_fns: set[int] = set()
    while frontier:
        new = []
        for c in frontier:
            fn = sem.enclosing_function(c)
            if fn is None or id(fn) in seen_fns:
                continue
            seen_fns.add(id(fn))
            if fn.name not in names:
                names.add(fn.name)
                if by_name is None:
                    by_name = _by_callee(ctx)
                new.extend(by_name.get(fn.name, ()))
        frontier = new
    return names


def calls_or_wrappers(ctx, qualnames: tuple[str, ...], cache_key: str) -> list[ast.Call]:
    """Direct calls to ``qualnames`` plus calls to the file's own wrappers of them."""
    sem = ctx.sem
    out = list(sem.calls_to(*qualnames))
    wrappers = wrapper_functions(ctx, qualnames, cache_key)
    if wrappers:
        by_name = _by_callee(ctx)
        extra = [k for n in wrappers for k in by_name.get(n, ())]
        extra.sort(key=lambda k: (k.lineno, k.col_offset))  # source order, as before
        out.extend(extra)
    return out
