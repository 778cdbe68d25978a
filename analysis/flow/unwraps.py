"""The unwrapped module, followed through helpers: which ``DistributedDataParallel`` wrapper a
module read out of one comes from, when the read (``x.module``, ``getattr(x, "module", x)``, a
conditional expression that asks about the wrapping) happens inside a helper whose return gives
the value (``net = unwrap(model)``), in this module or another, or in a method
(``self.raw()`` returning ``self.model.module``). ``wrapped.unwrap_reads`` is the question inside
one function.
"""
from __future__ import annotations

import ast

from .calls import call_args
from .origins import origins
from .wrapped import _param_names, is_unwrap, tests_wrapping, unwrapped_base


def unwrap_sources(hub, view, expr, at) -> list | None:
    """Like ``unwrap_reads``, through the returns of helpers too (``net = unwrap(model)`` with
    ``def unwrap(m): return m.module if hasattr(m, "module") else m``, in this module or another,
    or a method returning ``self.model.module``): (the unwrap read, the view of the wrapper
    expression, the wrapper expression, the node it is read at) for every origin. The wrapper of a
    read inside a helper whose parameter it is (``m`` above) is lifted to the argument of the very
    call whose return gave the value (``model`` of ``unwrap(model)``), in the caller's view. The
    first helper call crossed is the fourth element's context: ``at`` when no helper was crossed.
    None when some origin is anything else, or none is known."""
    got = origins(hub, view, expr, at, frames=())
    if not got:
        return None
    out = []
    for v, e, fr in got:
        if is_unwrap(e):
            read = e
        elif isinstance(e, ast.IfExp) and tests_wrapping(e.test) and (is_unwrap(e.body) or is_unwrap(e.orelse)):
            read = e.body if is_unwrap(e.body) else e.orelse
        else:
            return None
        base, bv, bat = unwrapped_base(read), v, read
        frames = list(fr or ())
        while isinstance(base, ast.Name) and frames:
            helper, call, cv = frames[-1]
            if bv.sem.enclosing_function(bat) is not helper or base.id not in _param_names(helper) \
                    or bv.sem.assignments(helper).get(base.id):
                break
            arg = next((a for p, a in call_args(call, helper) if p == base.id), None)
            if arg is None:
                return None  # the parameter's default: not the caller's wrapper
            base, bv, bat = arg, cv, call
            frames.pop()
        out.append((read, bv, base, bat, fr[0][1] if fr else at))
    return out
