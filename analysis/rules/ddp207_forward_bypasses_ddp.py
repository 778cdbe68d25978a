from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ..flow.helper_calls import calls_named, calls_named_or_on_attr
from ..flow.models import is_ddp_wrapper
from ._common import ddp_or_callers_reach
from ._training import (_NO_GRAD, backward_calls, ddp_holder, ddp_wraps, enclosing_function, flows_to, grad_disabled,
                        module_ref, params_reach_optimizer, reaches_backward)
from ..flow.step_branches import wrapped_class


class ForwardBypassesDdp(Rule):
    """
    ## What it does
    Checks for a training forward pass that goes through the wrapped module instead of the
    `DistributedDataParallel` wrapper: `ddp_model.module(x)` or `ddp_model.module.forward(x)`, whose
    result reaches a `backward()` in the same function.

    It also checks a custom method called through the wrapper, `ddp_model.module.training_step(batch)`,
    when the wrapped class (defined in this file, or in a project file it imports) defines that
    method and the method runs the model: it calls `self(...)` or `self.forward(...)` (directly or
    through other methods of the class), or one of the layers built in `__init__` (a `torch.nn`
    layer, or an `nn.Module` class of the model's file), and the step never calls the wrapper
    itself with gradients enabled.

    The wrapper must be provably the DDP object (`ddp_model = DDP(...)` or `self.model = DDP(...)`
    assigned once, or a parameter of a helper, `def train_step(model, batch)`, that every call in
    the file passes the wrapper; for a helper this file never calls, every call from the project's
    other files: `engine.py: def train_one_epoch(model, ...)` called by `main.py` with the
    wrapper). A forward under `torch.no_grad()` / `torch.inference_mode()` (evaluation), a
    method decorated with them, a method that only computes a loss from outputs the wrapper made
    (`ddp_model.module.criterion(ddp_model(x), y)`), a class that cannot be seen (third-party,
    inherited method), or a result that never reaches a `backward()`, is not flagged.

    The module may also be read out of the wrapper into a name of the same function first,
    `net = ddp_model.module`, `net = ddp_model.module if isinstance(ddp_model, DDP) else ddp_model`
    or `net = getattr(ddp_model, "module", ddp_model)`, then run as `net(x)` / `net.forward(x)`:
    every binding of the name must be such a read of a provable wrapper. The read may also be a
    helper's return, in this module or another, or a method's (`net = unwrap(ddp_model)` with
    `def unwrap(m): return m.module if hasattr(m, "module") else m`, `net = self.raw()` returning
    `self.model.module`): the wrapper is then the helper's argument (`ddp_model`) or the
    attribute it reads. A helper that unwraps with an `if` statement (two `return`s) is not
    followed.

    The unwrapped module may also be kept on the instance: `self.policy = unwrap(model)` (or
    `self.model, self.policy = model, model.module`) in a method of the class, every binding of
    the attribute such a read, where `model` is the wrapper (a parameter of `__init__` that every
    construction of the class passes the wrapper for, in this file or in the project's other
    files: `PPOTrainer(ddp_model, opt)` of a script). Its forward `self.policy(obs)` may sit in a
    method whose value reaches the `backward()` through its `return` (`loss, stats =
    self.compute_loss(batch)` then `loss.backward()` in another method of the module), up to three
    calls up.

    Two more forms skip the wrapper in the same way, where a `DDP(...)` of this file is known:
    - the very module it wraps, called directly while the wrapper is bound to another name
      (`self.model_ddp = DDP(self.model, ...)`, then `loss = self.model(x); loss.backward()` in a
      method of the same class, or `ddp_net = DDP(net)` then `net(x)` later in the same
      function), when the step does not call the wrapper itself;
    - a module trained beside a DDP-wrapped one but never wrapped: built in the function as a
      module (a `torch.nn` layer, a torchvision or timm model, a project `nn.Module`), its forward
      reaches the `backward()`, its parameters (`m.parameters()`) reach the step's optimizer
      (directly, through a list of parameter groups, or `add_param_group`), the step also calls
      the wrapper, and no `DDP(...)` of the file takes it (`DDP(nn.Sequential(backbone, head))`
      does). A module whose parameters never reach an optimizer (a frozen encoder) is not flagged.

    ## Why is this bad?
    `DistributedDataParallel.forward` is where DDP arms its reducer
    (`reducer.prepare_for_backward(...)`) and, with `broadcast_buffers=True`, syncs the buffers.
    Calling `.module` skips it: the backward hooks find nothing to reduce, so **the gradients are
    never all-reduced**. Each rank steps on its own gradients and the replicas silently drift
    apart; there is no error, only a model that trains worse (or differently on every rank).

    ## Example
    ```python
    ddp_model = DDP(model, device_ids=[local_rank])
    for x, y in loader:
        loss = loss_fn(ddp_model.module(x), y)
        loss.backward()  # gradients stay local
        optimizer.step()
    ```

    A method of the wrapped model bypasses it in the same way:

    ```python
    class LitNet(nn.Module):
        def training_step(self, batch):
            x, y = batch
            return F.mse_loss(self(x), y)

    ddp_model = DDP(LitNet().cuda(), device_ids=[local_rank])
    loss = ddp_model.module.training_step(batch)  # self(x) is not DDP's forward
    loss.backward()
    ```

    ## Use instead
    ```python
    ddp_model = DDP(model, device_ids=[local_rank])
    for x, y in loader:
        loss = loss_fn(ddp_model(x), y)
        loss.backward()
        optimizer.step()
    ```

    For a step method, run the forward through the wrapper and keep the method for the loss:
    `loss = ddp_model.module.loss_from(ddp_model(x), y)`.

    ## Fix safety
    The fix calls the wrapper instead (`ddp_model(x)`). It is **unsafe**: gradients start being
    synchronised, which is the point, but DDP's forward also checks that every parameter takes part
    in the loss, so a model with unused parameters then needs `find_unused_parameters=True`.
    A custom method gets no fix: moving its forward into the wrapper's call is a refactoring.
    """

    code = "DDP207"
    name = "forward-bypasses-ddp"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # ``x.module(...)``; the module a ``DistributedDataParallel(...)`` of this file wraps, or another
    # one trained beside it; an unwrap helper imported from another module (``net = unwrap(model)``)
    requires_text = (".module", "DistributedDataParallel", "import")

    # ``ddp_holder``: a wrapper built in this file or by an imported helper, or passed by a caller
    reach = classmethod(ddp_or_callers_reach)

    def finish(self, ctx) -> None:
        # ``x.module(...)`` and ``x.module.m(...)``, in the file's order (an index, not a pass over
        # every call)
        for c in calls_named_or_on_attr(ctx, "module"):
            f = c.func
            if not isinstance(f, ast.Attribute):
                continue
            method = None
            if f.attr == "module":
                holder = f.value
            elif isinstance(f.value, ast.Attribute) and f.value.attr == "module":
                holder = f.value.value
                if f.attr != "forward":
                    method = f.attr  # ``ddp_model.module.training_step(batch)``
            else:
                continue
            if not isinstance(holder, (ast.Name, ast.Attribute)) or grad_disabled(ctx, c):
                continue
            fn = enclosing_function(c)
            if fn is None:
                continue
            back = next((b for b in backward_calls(ctx, fn) if b.lineno >= c.lineno and flows_to(ctx, c, b, fn)), None)
            if back is None:
                continue
            # last: whether the holder is the wrapper may read the project's other files
            if not ddp_holder(ctx, holder, c):
                continue
            h = ctx.text(holder)
            if method is not None:
                self._custom_method(ctx, c, holder, method, fn, back)
                continue
            fix = ctx.fix(Applicability.UNSAFE, f"Call the DDP wrapper: `{h}(...)`", [ctx.replace(f, h)])
            ctx.report(
                c,
                f"forward through `{ctx.text(f)}(...)` bypasses DistributedDataParallel: the `backward()` on "
                f"line {back.lineno} never all-reduces the gradients, so the ranks drift apart; call `{h}(...)`",
                related=[(back, "this backward does not synchronise gradients")],
                fix=fix,
            )

        self._through_alias(ctx)
        self._original_or_outside(ctx)

    @staticmethod
    def _through_alias(ctx) -> None:
        """``net = ddp_model.module`` (or ``ddp_model.module if isinstance(ddp_model, DDP) else
        ddp_model``, ``getattr(ddp_model, "module", ddp_model)``), then ``net(x)`` reaching a
        backward: every binding of the name reads the module out of a provable wrapper
        (``flow.wrapped.unwrap_reads``). A ``self.<attr>`` that methods of the class bind so
        (``self.policy = unwrap(model)`` in ``__init__``) is read the same way; its forward's value may
        reach the backward through the method's ``return`` (``flow.training_loops.backward_reached``)."""
        from ..flow.modern import hub
        from ..flow.training_loops import backward_reached, reaches_return
        from ..flow.unwraps import unwrap_sources

        an, view = hub(ctx)
        for c in ctx.sem.calls:
            f = c.func
            holder = f.value if isinstance(f, ast.Attribute) and f.attr == "forward" else f
            on_self = isinstance(holder, ast.Attribute) and isinstance(module_ref(holder), tuple)
            if not (on_self or isinstance(holder, ast.Name) and ctx.qn(holder) is None) or grad_disabled(ctx, c):
                continue
            fn = enclosing_function(c)
            if fn is None:
                continue
            back = None
            if backward_calls(ctx, fn) and reaches_backward(ctx, c, fn):
                back = next((b for b in backward_calls(ctx, fn) if b.lineno >= c.lineno and flows_to(ctx, c, b, fn)),
                            None)
            if back is None and on_self and reaches_return(view, c, fn):
                back = ...  # through the method's return: asked below, once the holder is known unwrapped
            if back is None:
                continue
            srcs = unwrap_sources(an, view, holder, c)
            # each read in this function, or in a helper whose call in this function returned it; for
            # ``self.<attr>``, in a method of this class
            if not srcs or not all(_binds_here(first, fn, on_self) for _r, _v, _b, _a, first in srcs):
                continue
            if not all(bv is view and isinstance(b, (ast.Name, ast.Attribute)) and ddp_holder(ctx, b, bat)
                       for _r, bv, b, bat, _f in srcs):
                continue
            if back is ...:
                got = backward_reached(an, view, c)
                if got is None or got[0] is not view:
                    continue
                back = got[1]
            r, _v, base, _a, first = srcs[0]
            w = ctx.text(base)
            h = ctx.text(holder)
            if first is not c:
                r = first  # the helper call whose return unwraps (its read may be in another module)
            fix = f"call `{w}(...)`" if enclosing_function(r) is fn else \
                f"run it through the wrapper (`{w}` on line {r.lineno}) instead"
            ctx.report(
                c,
                f"forward through `{h}(...)` bypasses DistributedDataParallel: `{h}` is the module "
                f"read out of the wrapper (`{ctx.text(r)}`, line {r.lineno}), so the `backward()` on line "
                f"{back.lineno} never all-reduces the gradients and the ranks drift apart; {fix}",
                related=[(r, "the module read out of its DDP wrapper here"),
                         (back, "this backward does not synchronise gradients")],
            )

    def _original_or_outside(self, ctx) -> None:
        """A training step that runs a module without its DDP wrapper: the very module a
        ``DDP(...)`` of this file wraps, called directly (``self.model_ddp = DDP(self.model)``, then
        ``loss = self.model(x); loss.backward()``), or a module built beside a DDP-wrapped one,
        whose parameters the step's optimizer trains, and that no ``DDP(...)`` wraps
        (``head = DDP(head)``; ``out = head(backbone(x))``, ``backbone.parameters()`` in the
        optimizer)."""
        wraps = ddp_wraps(ctx)
        if not wraps:
            return
        wrapped = {w for _c, w, _b in wraps if w is not None}
        # the candidates: a wrapped module, or one whose parameters the file reads (an optimizer's)
        trained = {module_ref(p.func.value) for name in ("parameters", "named_parameters")
                   for p in calls_named(ctx, name) if isinstance(p.func, ast.Attribute)}
        candidates = (wrapped | trained) - {None}
        seen: set = set()
        for c in ctx.sem.calls:
            ref = module_ref(c.func) if isinstance(c.func, (ast.Name, ast.Attribute)) else None
            if ref is None or ref in seen or ref not in candidates:
                continue
            fn = enclosing_function(c)
            if fn is None or (ref, id(fn)) in seen or not backward_calls(ctx, fn) or grad_disabled(ctx, c) \
                    or not reaches_backward(ctx, c, fn):
                continue
            seen.add((ref, id(fn)))  # judged once per module and function (the first such call)
            back = next((b for b in backward_calls(ctx, fn) if b.lineno >= c.lineno), None)
            if back is None:
                continue
            if ref in wrapped:
                got = self._original(ctx, c, ref, fn, wraps)
            else:
                got = self._outside(ctx, c, ref, fn, wraps)
            if got is None:
                continue
            seen.add(ref)
            msg, related = got
            ctx.report(c, msg, related=[*related, (back, "this backward does not synchronise its gradients")])

    @staticmethod
    def _same_scope(ctx, ref, fn, at_fn) -> bool:
        """A name is one variable only inside one function; a ``self.<attr>`` is shared by the
        methods of one class."""
        if isinstance(ref, str):
            return fn is at_fn
        return fn is not None and at_fn is not None and parent(fn) is parent(at_fn) and isinstance(parent(fn), ast.ClassDef)

    def _original(self, ctx, c, ref, fn, wraps):
        """``ref`` is the module a ``DDP(...)`` wraps (bound to another name): calling it bypasses
        the wrapper, unless the step calls the wrapper too (then it is not judged)."""
        for d, w, bound in wraps:
            if w != ref or bound is None or bound == ref or not self._same_scope(ctx, ref, enclosing_function(d), fn):
                continue
            if isinstance(ref, str) and d.lineno > c.lineno:
                continue
            if _calls_ref(ctx, bound, fn) or _rebound_between(ctx, ref, d, c, fn):
                continue
            b = _ref_text(bound)
            return (f"`{ctx.text(c.func)}(...)` runs the module that `{b}` wraps in DistributedDataParallel (line "
                    f"{d.lineno}) without the wrapper: its backward never all-reduces the gradients, so the ranks "
                    f"drift apart; run the step through `{b}(...)`",
                    [(d, "wrapped in DistributedDataParallel here")])
        return None

    def _outside(self, ctx, c, ref, fn, wraps):
        """``ref`` is a module (a ``torch.nn`` layer, a torchvision/timm model, a project
        ``nn.Module``) that no ``DDP(...)`` of the file wraps, trained in a step that also runs a
        DDP wrapper, with its parameters in that step's optimizer."""
        from ..flow.wrapped import _is_module_ctor, leaves
        from ..flow.modern import hub

        if not isinstance(ref, str):
            return None  # a name of this function (its builds are visible here)
        if any(ref == bound for _d, _w, bound in wraps):
            return None  # the wrapper itself
        own = [(d, bound) for d, _w, bound in wraps if enclosing_function(d) is fn and bound is not None]
        if not own or any(ref in _names(_wrapped_arg(ctx, d)) for d, _b in own if _wrapped_arg(ctx, d) is not None):
            return None
        if not any(_calls_ref(ctx, bound, fn) for _d, bound in own):
            return None  # no DDP forward in this step
        if any(ref in _names(_wrapped_arg(ctx, d) or d) for d, _w, _b in wraps):
            return None  # wrapped somewhere (``DDP(nn.Sequential(backbone, head))``)
        opt = params_reach_optimizer(ctx, ref, fn)
        if opt is None:
            return None
        an, view = hub(ctx)
        lv = leaves(an, view, c.func, c)
        if not lv or not all(_is_module_ctor(an, v, e) and not (v.sem.call_qualname(e) or "").startswith(
                ("torch.nn.parallel.", "torch.distributed.")) for v, e in lv):
            return None
        d = own[0][0]
        return (f"`{ref}` is trained (its parameters are in the optimizer on line {opt.lineno}) but runs outside "
                f"DistributedDataParallel (only `{_ref_text(own[0][1])}` is wrapped, line {d.lineno}): its "
                f"gradients are never all-reduced, so its replicas drift apart; wrap it with the other module "
                f"(`DDP(nn.Sequential({ref}, ...))`) or in its own DDP",
                [(opt, "its parameters are trained here"), (d, "the only DistributedDataParallel of this step")])

    @staticmethod
    def _custom_method(ctx, c, holder, method, fn, back) -> None:
        """``ddp_model.module.<method>(...)`` whose result reaches a backward: a bypass when the
        method (of the wrapped class, found in this or another project file) runs the model's own
        forward (``self(...)``, ``self.forward(...)``), or its layers while the function never calls
        the wrapper itself."""
        ctor = is_ddp_wrapper(ctx, holder, c)
        if ctor is None or not isinstance(ctor.value, ast.Call):
            return
        got = wrapped_class(ctx, get_arg(ctor.value, 0, "module"), ctor)
        if got is None:
            return
        view, cls = got
        vsem = view.sem if view is not None else ctx.sem
        runs = _runs_forward(vsem, cls, method, set())
        if runs is None:
            return
        where, _via_layer = runs
        if _calls_wrapper(ctx, holder, fn):
            return  # DDP's forward also runs in this step (with gradients): not judged
        h = ctx.text(holder)
        file_note = f" of {view.path}" if view is not None and view.path else ""
        related = [(back, "this backward does not synchronise gradients")]
        if view is not None and view.path:
            from ..source import SourceText  # noqa: PLC0415  (only for the other file's range)

            related.append(("file", view.path, SourceText(view.text).node_range(where),
                            f"`{cls.name}.{method}` runs the model here"))
        else:
            related.append((where, f"`{cls.name}.{method}` runs the model here"))
        ctx.report(
            c,
            f"`{ctx.text(c.func)}(...)` runs the model outside DistributedDataParallel (`{cls.name}.{method}` "
            f"calls `{_short(where)}` on line {where.lineno}{file_note}): the `backward()` on line {back.lineno} "
            f"never all-reduces the gradients, so the ranks drift apart; run the step through `{h}(...)`",
            related=related,
        )


def _binds_here(first, fn, on_self: bool) -> bool:
    """The unwrap read ``first`` (or the helper call that returned it) is in ``fn``; for a
    ``self.<attr>``, in a method of ``fn``'s class."""
    at = enclosing_function(first)
    if at is fn:
        return True
    return on_self and at is not None and isinstance(parent(fn), ast.ClassDef) and parent(at) is parent(fn)


def _ref_text(ref) -> str:
    return ref if isinstance(ref, str) else f"self.{ref[1]}"


def _names(e) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}


def _calls_ref(ctx, ref, fn) -> bool:
    """``fn`` calls the module ``ref`` holds (``ddp_model(x)``, ``self.model(x)``) with gradients on."""
    return any(isinstance(n, ast.Call) and module_ref(n.func) == ref and not grad_disabled(ctx, n)
               for n in ast.walk(fn))


def _rebound_between(ctx, ref, d, c, fn) -> bool:
    """A name rebound in ``fn`` between the wrap and the call (``model = ddp_model``)."""
    if not isinstance(ref, str):
        return False
    return any(isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and d.lineno < s.lineno <= c.lineno
               and any(isinstance(t, ast.Name) and t.id == ref for x in (s.targets if isinstance(s, ast.Assign)
                                                                          else [s.target]) for t in ast.walk(x))
               for s in ast.walk(fn))


def _short(call: ast.Call) -> str:
    return ast.unparse(call.func) + "(...)"


def _runs_forward(sem, cls: ast.ClassDef, method: str, seen: set, depth: int = 0):
    """(call, through a layer?) for the first place ``cls.method`` runs the model: ``self(...)`` /
    ``self.forward(...)`` (False), or a layer the class builds in ``__init__`` from ``torch.nn``
    (True), following ``self.<other method>(...)`` calls of the class. None when it does not, or when
    the method is not defined on the class itself (inherited, dynamic) or disables gradients."""
    if depth > 3 or method in seen:
        return None
    seen.add(method)
    fn = next((st for st in cls.body if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == method),
              None)
    if fn is None or method in ("__init__", "forward", "__call__"):
        return None
    for d in fn.decorator_list:
        qn = sem.qualname(d.func if isinstance(d, ast.Call) else d) or ""
        if qn in _NO_GRAD or qn.endswith("set_grad_enabled") or qn in ("staticmethod", "classmethod"):
            return None
    layers = _layers(sem, cls)
    found = None
    for n in ast.walk(fn):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Name) and f.id == "self":
            return n, False
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            if f.attr == "forward":
                return n, False
            if f.attr in layers and found is None:
                found = (n, True)
            elif f.attr not in layers:
                deeper = _runs_forward(sem, cls, f.attr, seen, depth + 1)
                if deeper is not None and (not deeper[1] or found is None):
                    if not deeper[1]:
                        return n, False
                    found = (n, True)
    return found


def _layers(sem, cls: ast.ClassDef) -> frozenset:
    """``self.<attr>`` bound in ``__init__`` to a ``torch.nn`` module (``nn.Linear(...)``, ``nn.Sequential(...)``)
    or to an ``nn.Module`` subclass of the same file."""
    init = next((st for st in cls.body if isinstance(st, ast.FunctionDef) and st.name == "__init__"), None)
    out = set()
    if init is None:
        return frozenset()
    modules = {st.name for st in sem.tree.body if isinstance(st, ast.ClassDef)
               and any(sem.qualname(b) == "torch.nn.Module" for b in st.bases)}
    for n in ast.walk(init):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            qn = sem.call_qualname(n.value) or ""
            last = qn.rsplit(".", 1)[-1]
            # a torch.nn layer, or a module class of the same file (``self.encoder = Encoder()``)
            if qn.startswith("torch.nn.") and last[:1].isupper() and not qn.startswith("torch.nn.functional") or (
                    not qn and isinstance(n.value.func, ast.Name) and n.value.func.id in modules):
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        out.add(t.attr)
    return frozenset(out)


def _calls_wrapper(ctx, holder, fn) -> bool:
    """The function calls the DDP wrapper itself (``ddp_model(x)``) somewhere, gradients enabled."""
    h = ast.dump(holder)
    return any(isinstance(n, ast.Call) and ast.dump(n.func) == h and not grad_disabled(ctx, n) for n in ast.walk(fn))


def _wrapped_arg(ctx, d):
    """The module argument of the wrap ``d``: ``DDP(m, ...)``'s first; of a project helper's call
    (``wrap(local_rank, net)``), the whole call (any name it passes may be the module)."""
    if ctx.qn(d) == "torch.nn.parallel.DistributedDataParallel":
        return get_arg(d, 0, "module")
    return d
