from __future__ import annotations

import ast
import unicodedata

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.helper_calls import calls_named_or_on_attr
from ..flow.models import is_ddp_wrapper
from ._common import callers_may_exist
from ._training import _NO_GRAD, backward_calls, ddp_holder, enclosing_function, flows_to, grad_disabled
from .ddp209_unused_parameters import wrapped_class


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
    requires_text = (".module",)

    @classmethod
    def reach(cls, text, filename):
        # ``ddp_holder``: a wrapper built in this file, or passed by a caller of the project
        if "DistributedDataParallel" in text or (
                not text.isascii() and "DistributedDataParallel" in unicodedata.normalize("NFKC", text)):
            return True, {}
        return callers_may_exist(text, filename, (("DistributedDataParallel",),))

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
