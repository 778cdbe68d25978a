"""Which kinds of filesystem effect the calls of a scope may have, without binding them to the
calls' arguments: a prefilter for a check that needs two kinds in one scope (DDP015: a write and a
folder creation) before it asks ``fs_effects.effects_at`` about every call.

- ``scope_may_have(ctx, an, scope, calls, kinds)``: a superset answer of "some call of ``calls``
  (those of ``scope`` in the checked file) has an effect of each kind in ``kinds``" as
  ``effects_at(ctx, an, c)`` gives them: a library call's own effects (``call_effects``), and a
  project function's effects before ``call_site_effects`` binds them (which drops some, never adds
  one: ``function_effects``, memoised per function). The library calls are looked at first, and a
  project call is resolved only while a kind is still missing.
"""
from __future__ import annotations

from .fs_effects import call_effects, function_effects, may_resolve_any, resolve


def scope_may_have(ctx, an, scope, calls, kinds: frozenset) -> bool:
    memo = ctx.memo("fs_index.kinds", dict)
    key = (id(scope), kinds)
    got = memo.get(key)
    if got is None:
        got = memo[key] = _may_have(ctx, an, calls, kinds)
    return got


def _may_have(ctx, an, calls, kinds: frozenset) -> bool:
    missing = set(kinds)
    project = []  # calls with no library effect: maybe a project function's
    for c in calls:
        effs = call_effects(ctx, c)
        if effs:
            missing.difference_update(e.kind for e in effs)
            if not missing:
                return True
        else:
            project.append(c)
    main = an.main
    for c in project:
        if not may_resolve_any(main, c):
            continue
        target = resolve(an, main, c)
        if target is None or target[1] is main.sem.enclosing_function(c):
            continue
        missing.difference_update(e.kind for e in function_effects(an, *target))
        if not missing:
            return True
    return False
