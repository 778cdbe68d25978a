from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..torch_api import constant_of
from ._training import enclosing_function, module_ref

_CONTEXT_MANAGERS = ("contextlib.contextmanager", "contextlib.asynccontextmanager")


class GradientSyncNotRestored(Rule):
    """
    ## What it does
    Checks for a context manager that turns FSDP2's gradient synchronisation off
    (`module.set_requires_gradient_sync(False)`) on entry and never turns it back on on exit:

    - a generator decorated with `@contextlib.contextmanager` (or `asynccontextmanager`) that
      makes the call before its `yield` and, after the `yield` (in a `finally:` or not), makes no
      other `set_requires_gradient_sync` call and nothing else with the module;
    - a class whose `__enter__` makes the call and whose `__exit__` makes no
      `set_requires_gradient_sync` call and nothing else with the module.

    The call may be in a helper of the project (this module or another) that the context manager
    calls with the module, and `False` may come through a name, an argparse default, a config
    attribute or a config dict entry. The call may be conditional (`if active:`), and the module
    that defines the context manager need not import torch: the method is FSDP2's own, and the
    module being sharded may be known only to the caller in another module.

    A restore with `recurse=False` after a turn-off that reached every submodule (the default
    `recurse=True`) turns the root module alone back on: the submodules that `fully_shard` wrapped
    on their own (the transformer blocks) stay off, and it is reported too.

    A restore after the `yield` that is not in a `finally:` counts as a restore: it is skipped only
    when the block raises, which ends the training step (and usually the run) anyway, so that
    alone is not reported.

    The usual origin is a port of DDP's `with model.no_sync():` to FSDP2, which has no `no_sync()`.

    ## Why is this bad?
    `no_sync()` restores DDP's gradient synchronisation when its block ends.
    `set_requires_gradient_sync(False)` is a plain flag on the module: it stays off until something
    sets it to `True`. The micro-batch that should synchronise (the last one of the accumulation
    window, usually run under `nullcontext()` because synchronisation is "on by default") runs with
    it still off, so no gradient is ever reduce-scattered again: the sharded parameters get no
    `.grad`, `optimizer.step()` changes nothing, every rank keeps its own unsharded gradients in
    memory, and the model silently stops training. No error is raised.

    ## Example
    ```python
    @contextlib.contextmanager
    def skip_sync(model):
        model.set_requires_gradient_sync(False)
        yield
    ```

    ## Use instead
    ```python
    @contextlib.contextmanager
    def skip_sync(model):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    ```

    ## Fix safety
    There is no automatic fix: whether to restore `True` or the previous setting is the user's
    choice.
    """

    code = "DDP519"
    name = "gradient-sync-not-restored"
    severity = Severity.ERROR
    # a context manager; the ``set_requires_gradient_sync`` call may be in a project helper it calls.
    # The module that holds it need not spell "torch" (a small ``sync.py`` of a package whose model
    # is sharded elsewhere): the reach gate (the method spelled here or in a project module this
    # one imports) stands in for the base gate
    base_text = ("torch", "contextmanager", "__enter__")
    requires_text = ("contextmanager", "__enter__")

    @classmethod
    def reach(cls, text, filename):
        from ..flow.reach import reaches

        return reaches(filename, text, ("set_requires_gradient_sync",))

    def finish(self, ctx) -> None:
        from ..flow.modern import hub

        an, view = hub(ctx)
        for fn in ast.walk(ctx.sem.tree):
            if not isinstance(fn, FUNC_TYPES):
                continue
            if _is_generator_cm(ctx, fn):
                yields = _own(fn, (ast.Yield, ast.YieldFrom))
                for call, ref, inner in _turn_offs(ctx, an, view, fn):
                    later = [y for y in yields if _after(y, call)]
                    if not later:
                        continue
                    exit_ = min(later, key=lambda y: (y.lineno, y.col_offset))
                    if _restores(ctx, fn, ref, lambda n, e=exit_: _after(n, e), off=inner):
                        continue
                    if self._narrow(ctx, fn, lambda n, e=exit_: _after(n, e), call, inner):
                        continue
                    self._report(ctx, call, exit_, "the context manager's `yield`: nothing after it turns it back on")
            elif fn.name in ("__enter__", "__aenter__") and isinstance(parent(fn), ast.ClassDef):
                name = "__exit__" if fn.name == "__enter__" else "__aexit__"
                exit_ = next((st for st in parent(fn).body if isinstance(st, FUNC_TYPES) and st.name == name), None)
                if exit_ is None:
                    continue
                for call, ref, inner in _turn_offs(ctx, an, view, fn):
                    if not _restores(ctx, exit_, ref, lambda n: True, self_too=True, off=inner) \
                            and not self._narrow(ctx, exit_, lambda n: True, call, inner):
                        self._report(ctx, call, exit_, f"`{name}` does not turn it back on")

    @staticmethod
    def _narrow(ctx, fn, where, off, inner) -> bool:
        """Report a restore of ``fn`` (where ``where`` admits it) that turns the synchronisation back
        on for the root module alone (``recurse=False``) after ``off`` turned it off for every
        submodule; True when there is one."""
        for n in ast.walk(fn):
            f = n.func if isinstance(n, ast.Call) else None
            if isinstance(f, ast.Attribute) and f.attr == "set_requires_gradient_sync" and where(n) \
                    and not _turns_off(ctx.sem, n) and _recurse(ctx.sem, n) is False and _wide(inner):
                ctx.report(n, f"`{ctx.text(n)}` turns gradient synchronisation back on for the root module only, "
                              f"but `{ctx.text(off)}` turned it off for every submodule: the submodules that "
                              "`fully_shard` wrapped on their own keep skipping the reduce-scatter, so their "
                              "sharded parameters never get a gradient; drop `recurse=False`",
                           related=[(off, "turned off for every submodule here")])
                return True
        return False

    @staticmethod
    def _report(ctx, call, exit_, why) -> None:
        ctx.report(
            call,
            f"`{ctx.text(call)}` turns gradient synchronisation off for good: unlike DDP's `no_sync()`, it is "
            "a flag on the module that nothing restores when the context exits, so the micro-batch that "
            "should synchronise never does and the sharded parameters get no gradient; set it back to `True` "
            "in a `finally:` after the `yield` (or in `__exit__`)",
            related=[(exit_, why)],
        )


def _turns_off(sem, call: ast.Call) -> bool:
    """``m.set_requires_gradient_sync(False)``: the literal, or a name, argparse default, ``cfg.x``
    store or config-dict entry that holds it (``torch_api.constant_of``)."""
    c = constant_of(sem, get_arg(call, 0, "requires_gradient_sync"))
    return c is not None and c.value is False


def _turn_offs(ctx, an, view, fn) -> list:
    """(call of ``fn``, ref of the module, (semantic model, the ``set_requires_gradient_sync`` call))
    for each call that turns a module's synchronisation off:
    ``m.set_requires_gradient_sync(False)`` itself, or a call of a project function (this file or
    another module) that makes it on one of its parameters (the module is the argument)."""
    from ..flow.helper_calls import bind_args, resolved

    out = []
    for call in _own(fn, ast.Call):
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "set_requires_gradient_sync":
            if _turns_off(ctx.sem, call):
                out.append((call, module_ref(f.value), (ctx.sem, call)))
            continue
        target = resolved(an, view, call)
        if target is None or target[1] is fn:
            continue
        hview, helper = target
        if _own(helper, (ast.Yield, ast.YieldFrom)):
            continue  # a generator (another context manager): calling it runs none of its body
        params = set(param_names(helper))
        for c in _own(helper, ast.Call):
            g = c.func
            if isinstance(g, ast.Attribute) and g.attr == "set_requires_gradient_sync" \
                    and isinstance(g.value, ast.Name) and g.value.id in params and _turns_off(hview.sem, c):
                arg = bind_args(call, helper).get(g.value.id)
                if arg is not None:
                    out.append((call, module_ref(arg), (hview.sem, c)))
                    break
    return out


def _is_generator_cm(ctx, fn) -> bool:
    for d in getattr(fn, "decorator_list", ()):
        if (ctx.qn(d.func if isinstance(d, ast.Call) else d) or "") in _CONTEXT_MANAGERS:
            return True
    return False


def _own(fn, types):
    """The nodes of ``types`` in ``fn``'s own body (not in a nested function)."""
    return [n for n in ast.walk(fn) if isinstance(n, types) and enclosing_function(n) is fn]


def _after(node: ast.AST, ref: ast.AST) -> bool:
    return (node.lineno, node.col_offset) > (ref.lineno, ref.col_offset)


def _wide(off) -> bool:
    """The turn-off ``off`` ((semantic model, the ``set_requires_gradient_sync(False)`` call), in a
    helper or not) reaches every submodule: ``recurse`` left at True (or not known)."""
    return off is None or _recurse(*off) is not False


def _recurse(sem, call: ast.Call):
    """The ``recurse=`` of a ``set_requires_gradient_sync`` call: True by default, the constant
    passed, or None when not known."""
    r = get_arg(call, None, "recurse")
    if r is None:
        return True
    c = constant_of(sem, r)
    return c.value if c is not None and isinstance(c.value, bool) else None


def _restores(ctx, fn, ref, where, self_too: bool = False, off=None) -> bool:
    """A call of ``fn`` (where ``where`` admits it) that may turn the synchronisation back on: a
    ``set_requires_gradient_sync`` call that does not pass ``False`` (and, when the call that
    turned it off, ``off``, reached every submodule, does not pass ``recurse=False``: that
    restores the root module alone), or any call that reads the module (``ref``), passes it on or
    calls one of its methods (a helper may restore it). With ``self_too`` (an ``__exit__``), any
    call on ``self`` counts too."""
    wide = _wide(off)
    for n in ast.walk(fn):  # a nested callback (``lambda: m.set_requires_gradient_sync(True)``) too
        if not isinstance(n, ast.Call) or not where(n):
            continue
        f = n.func
        if isinstance(f, ast.Attribute) and f.attr == "set_requires_gradient_sync":
            if not _turns_off(ctx.sem, n) and not (wide and _recurse(ctx.sem, n) is False):
                return True
            continue
        if ref is None:
            return True  # the module is not a plain name: any call may restore it
        for x in ast.walk(n):
            if isinstance(x, (ast.Name, ast.Attribute)) and module_ref(x) == ref:
                return True
            if self_too and isinstance(x, ast.Name) and x.id == "self":
                return True
    return False
