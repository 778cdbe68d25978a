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
        # from the file's callee index: for each function name, its ``f(...)`` calls and its
        # ``self.f(...)`` / ``cls.f(...)`` calls, merged in ``sem.calls`` order
        sem = ctx.sem
        names, attrs, _, _ = sem.callee_index()
        calls = sem.calls
        out: dict[str, list[ast.Call]] = {}
        Name = ast.Name
        for n in sem.functions:
            a = names.get(n, ())
            b = attrs.get(n)
            if b:
                b = [i for i in b if (v := calls[i].func.value).__class__ is Name and (v.id == "self" or v.id == "cls")]
                if a and b:
                    a = sorted(a + b)
                elif b:
                    a = b
            if a:
                out[n] = [calls[i] for i in a]
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
