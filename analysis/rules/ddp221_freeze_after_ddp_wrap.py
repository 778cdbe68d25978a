from __future__ import annotations

import ast

from ..flow import for_context
from ..flow.ddp_options import strict_ddp_off
from ..flow.freezes import callee_freezes, freeze_sites, frozen_module, selective, wrapper_of
from ..flow.wrapped import wrap_origins
from ..model import Severity
from ..registry import Rule
from ..semantic import iter_scope_nodes, parent
from ..flow.wrap_sites import as_ctor, ddp_like_calls
from ._common import callers_may_exist
from ._flow import scopes

_MAX_CALLERS = 8


class FreezeAfterDdpWrap(Rule):
    """
    ## What it does
    Checks for parameters frozen after the model was wrapped in `DistributedDataParallel` with
    `find_unused_parameters` off for sure (the keyword absent or `False`, also through config
    values `analysis/flow/ddp_options.py` follows): `requires_grad_(False)` on the wrapper, on
    the module read out of it (`ddp_model.module.backbone.requires_grad_(False)`, or through a
    name bound to such a read, `net = unwrap(ddp_model)` with a helper that returns `.module`),
    or `p.requires_grad = False` for the parameters of those (`for p in
    ddp_model.module.encoder.parameters()`).

    The wrapper is found by value flow: a `DDP(...)` the name holds at the freeze (built in this
    function, or returned by a project helper), or, for a parameter of a module-level function,
    the argument of every call of it, in this module or, when it never calls it, in the
    project's other modules (`apply_policy(model, cfg)` in the training script, after `model =
    wrap_ddp(model)`). A call made after `DDP(m)` in the same function is reported too when the
    function or callback method it runs (`for cb in self.callbacks: cb.on_fit_start(self)`, the
    callbacks a script passed to the trainer) freezes a submodule of `m` through what the call
    passes (`trainer.raw_model.backbone` with `self.raw_model` wrapped). A freeze before the wrap, a wrapper built with
    `find_unused_parameters=True` or `static_graph`, or a module that no wrapper is proven to
    hold, is not flagged.

    ## Why is this bad?
    DDP's reducer records at construction which parameters require gradients and waits, after
    every backward, for a gradient of each of them. A parameter frozen afterwards never gets one:
    the first backward leaves its bucket unfinished and the next forward fails on every rank:

    ```
    RuntimeError: Expected to have finished reduction in the prior iteration before starting a new
    one. This error indicates that your module has parameters that were not used in producing loss.
    ```

    ## Example
    ```python
    model = DDP(model, device_ids=[local_rank])
    model.module.backbone.requires_grad_(False)  # linear probe
    ```

    ## Use instead
    ```python
    model.backbone.requires_grad_(False)  # freeze first
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    There is no automatic fix: the freeze has to move before the wrap (or the wrapper needs
    `find_unused_parameters=True`).
    """

    code = "DDP221"
    name = "freeze-after-ddp-wrap"
    severity = Severity.ERROR
    fix_availability = "never"
    # a freeze names ``requires_grad`` itself: a helper module of the project that freezes the
    # model it is given may never spell "torch"
    base_text = ("torch", "requires_grad")
    requires_text = ("requires_grad",)

    @classmethod
    def reach(cls, text, filename):
        # the wrapper: built in this file, or passed by a caller of the project
        from ..flow.reach import WRAP_TEXT, reaches

        wrap = reaches(filename, text, WRAP_TEXT)  # here, or in a project helper (``wrap_sites``)
        if wrap[0]:
            return wrap
        got = callers_may_exist(text, filename, ())
        return got if got[0] else (False, {**wrap[1], **got[1]})

    def finish(self, ctx) -> None:
        an = for_context(ctx)
        view = an.main
        reported: set = set()
        for sc in scopes(ctx):
            for node, expr in freeze_sites(sc):
                module, loop = frozen_module(view, expr, node)
                if module is None:
                    continue
                ws = wrapper_of(an, view, module, node)
                if not ws:
                    continue
                some = loop is not None and selective(node, loop)
                if not some and not all(below for _w, _at, below in ws):
                    # the whole model frozen: no parameter of it ever fires a gradient hook, so
                    # the reducer has nothing to wait for (a frozen EMA teacher run under no_grad)
                    continue
                wraps = []
                for w, at, _below in ws:
                    got = self._wraps(ctx, an, view, w, at)
                    if not got:
                        wraps = []
                        break
                    wraps.extend(got)
                if not wraps:
                    continue
                if not all(strict_ddp_off(h, v, c) is not None for h, v, c in wraps):
                    continue
                self._report(ctx, view, node, module, wraps, some)
                reported.add(node)
        for sc in scopes(ctx):
            self._callees(ctx, an, view, sc, reported)

    def _callees(self, ctx, an, view, sc, reported) -> None:
        """A call, after a ``DDP(m)`` of this function, of a function or a callback's method
        (``for cb in self.callbacks: cb.on_fit_start(self)``) that freezes a strict submodule of
        what the call passes (``trainer.raw_model.backbone`` with ``self.raw_model`` wrapped): the
        call is reported, the wrap happened before it."""
        if not isinstance(sc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        ddps = [c for c in ddp_like_calls(ctx) if ctx.sem.enclosing_function(c) is sc and c.args]
        if not ddps:
            return
        for call in iter_scope_nodes(sc):
            if not isinstance(call, ast.Call) or not any(d.end_lineno < call.lineno for d in ddps):
                continue
            for expr, node, fv, some in callee_freezes(an, view, call):
                if node in reported:
                    continue  # reported where it freezes
                hit = self._wrapped_by(ctx, an, view, expr, call, ddps, some)
                if hit is None:  # read out of the wrapper: ``trainer.model.module.backbone``
                    ws = wrapper_of(an, view, expr, call)
                    if ws and all(below or some for _w, _at, below in ws):
                        wraps = [x for w, at, _b in ws for x in self._wraps(ctx, an, view, w, at)]
                        if wraps and all(strict_ddp_off(h, v, c) is not None for h, v, c in wraps):
                            hit = wraps[0][2]
                if hit is not None:
                    self._report_call(ctx, call, expr, node, fv, hit)
                    break

    @staticmethod
    def _wrapped_by(ctx, an, view, expr, call, ddps, some):
        """The ``DDP(...)`` before ``call`` whose module ``expr`` is (``some`` freeze) or a strict
        submodule of, with ``find_unused_parameters`` off for sure; else None."""
        prefixes = []
        e = expr
        while isinstance(e, (ast.Attribute, ast.Name)):
            prefixes.append((ast.dump(e), e is not expr))
            e = e.value if isinstance(e, ast.Attribute) else None
        for d in ddps:
            if d.end_lineno >= call.lineno:
                continue
            key = ast.dump(d.args[0])
            if any(k == key and (below or some) for k, below in prefixes) \
                    and strict_ddp_off(an, view, d) is not None:
                return d
        return None

    @staticmethod
    def _report_call(ctx, call, expr, node, fv, ddp) -> None:
        where = str(fv.path).replace(chr(92), "/").rsplit("/", 1)[-1] + f":{node.lineno}"
        ctx.report(
            call,
            f"this call freezes parameters of `{ast.unparse(expr)}` ({where}) after the model was wrapped in "
            f"DistributedDataParallel (line {ddp.lineno}) without `find_unused_parameters=True`: the "
            "reducer still waits for their gradients, so the next forward fails with 'Expected to have "
            "finished reduction in the prior iteration'; run it before wrapping",
        )

    @staticmethod
    def _wraps(ctx, an, view, w, at) -> list:
        """(hub, view, ``DDP(...)`` call) of the wrappers ``w`` holds at ``at``: every origin one,
        found in this module or, for a parameter of a module-level function that its module never
        calls, at every call from the project's other modules. Empty when not proven."""
        found, every = wrap_origins(an, view, w, at)
        if found:
            # (read at a forwarding helper's call: ``wrap_sites.as_ctor``)
            return [(an, *as_ctor(an, o)) for o in found] if every else []
        fn = ctx.sem.enclosing_function(at)
        if not (isinstance(w, ast.Name) and fn is not None and isinstance(parent(fn), ast.Module)):
            return []
        a = fn.args
        names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        if w.id not in names or ctx.sem.assignments(fn).get(w.id) or an.call_sites(view, fn):
            return []
        from ..flow.calls import call_args
        from ._common import project_callers

        out = []
        sites = [(caller, call) for caller, call, node in project_callers(ctx, {fn.name}) if node is fn]
        if not sites or len(sites) > _MAX_CALLERS:
            return []
        for caller, call in sites:
            arg = next((x for p, x in call_args(call, fn) if p == w.id), None)
            if arg is None:
                return []
            can = for_context(caller)
            got, all_wrap = wrap_origins(can, can.main, arg, call)
            if not got or not all_wrap:
                return []
            out.extend((can, v, c) for v, c in got)
        return out

    @staticmethod
    def _report(ctx, view, node, module, wraps, some) -> None:
        _h, v, c = wraps[0]
        if v is view:
            where = f"line {c.lineno}"
        else:
            where = f"{str(v.path).replace(chr(92), '/').rsplit('/', 1)[-1]}:{c.lineno}"
        ctx.report(
            node,
            f"{'some ' if some else ''}parameters of `{ctx.text(module)}` are frozen after the model was wrapped in "
            f"DistributedDataParallel ({where}) without `find_unused_parameters=True`: the reducer still "
            "waits for their gradients, so the next forward fails with 'Expected to have finished "
            "reduction in the prior iteration'; freeze them before wrapping",
        )
