from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import get_arg, terminal_name
from ..flow.testing import patched_names
from ..flow.devices import first_device_id, on_device
from ..flow.modern import hub
from ..flow.wrap_sites import wrap_sites
from ..torch_api import DDP_CLASS
from ._common import is_simple_ref


class DdpModuleNotOnDevice(Rule):
    """
    ## What it does
    Checks for `DistributedDataParallel(module, device_ids=[...])` where `module`, on every path in
    the same scope, was built on the CPU and never moved with `.to(...)` / `.cuda(...)`: a
    `torch.nn` layer, a torchvision/timm model, or an `nn.Module` class of the same file (or of
    another file of the project, `from models.net import Net`) that never places itself, held
    directly or through a variable. In a class (a trainer building its model in
    `__init__`), `self.model` counts too: assigned once, in the same block of the method, before the
    wrap, with no move, no hand-off and no other `self.<method>(...)` call in between.

    A module that comes from a function this file does not show (`build_model(cfg)`), a parameter,
    or code that gets the module handed to it before the wrap, is never flagged.

    The wrap may also be in a project helper (this file or another module, a method): a function
    that hands one of its parameters as it is (not rebound on the way) to
    `DistributedDataParallel(param, device_ids=[...])`. A call of it given, by name, a module that
    was built on the CPU and never moved (`model = env.wrap(model)` before `model.to(device)`) is
    reported at the call, unless the wrap sits in a branch of the helper that this call does not
    take (`if backend == "nccl": DDP(model, device_ids=[rank])` called with `"gloo"`: the test is
    made of the helper's parameters and the call writes them as literals).

    A test that replaces the wrapper with a mock (`@patch("pkg.parallel.DDP")`,
    `patch.object(parallel, "DDP")`, or `with patch(...)` around the call) builds no DDP: left alone.

    ## Why is this bad?
    `device_ids` tells DDP which GPU the module lives on; a CPU module makes the constructor fail:

    ```
    ValueError: DistributedDataParallel device_ids and output_device arguments only work with
    single-device/multiple-device GPU modules or CPU modules, but got device_ids [1],
    output_device None, and module parameters {device(type='cpu')}.
    ```

    ## Example
    ```python
    model = ToyModel()
    ddp_model = DDP(model, device_ids=[local_rank])
    ```

    ## Use instead
    ```python
    model = ToyModel().to(local_rank)
    ddp_model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    The fix moves the module where it is handed to DDP (`DDP(model.to(local_rank), ...)`, using
    the `device_ids` entry). It is **unsafe**: code between the construction and the wrap (an
    optimizer built from the parameters, a checkpoint load) still sees the CPU module, which can
    matter for optimizers that captured device-specific state.
    """

    code = "DDP201"
    name = "ddp-module-not-on-device"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # the wrap: in this file, or in a project helper it calls (``model = env.wrap(model)``, ``reach``)
    requires_text = ("DistributedDataParallel", "import")

    @classmethod
    def reach(cls, text, filename):
        # the constructor's name in this file or in a module its imports reach
        from ..flow.reach import WRAP_TEXT, reaches

        return reaches(filename, text, WRAP_TEXT)

    def finish(self, ctx) -> None:
        view = None
        done = set()
        for site in wrap_sites(ctx):  # ``DDP(...)`` here, or a project helper that returns it
            call = site.call
            if view is None:
                view = hub(ctx)[1]
            ids, iv, iat = site.arg_at(view, 1, "device_ids")
            if isinstance(ids, ast.Name):
                ids = iv.sem.single_value(ids.id, iv.sem.scope_of(iat))
            if not isinstance(ids, (ast.List, ast.Tuple)) or not ids.elts:
                continue  # absent, None, or only known at run time (`[gpu] if gpu is not None else None`)
            module, mv, _at = site.arg_at(view, 0, "module")
            if module is None or mv is not view:
                continue  # the helper moves or builds the module itself: read where it wraps
            if on_device(ctx, module, call) is not False:
                continue
            if terminal_name(call.func) in patched_names(ctx.sem, call) or \
                    terminal_name(site.ctor.func) in patched_names(ctx.sem, call):
                continue  # a test that replaced the wrapper with a mock
            done.add(call)
            if not site.direct:
                name = terminal_name(call.func) or "the helper"
                ctx.report(
                    call,
                    f"`{ctx.text(module)}` is still on the CPU when `{name}(...)` wraps it with `device_ids` "
                    f"(line {site.ctor.lineno} of its module): DDP raises ValueError (device_ids only work "
                    "with GPU modules); move it with `.to(device)` before the call",
                )
                continue
            dev = first_device_id(call)
            fix = None
            if dev is not None and (is_simple_ref(dev) or isinstance(dev, ast.Constant)) and isinstance(
                    module, (ast.Name, ast.Call, ast.Attribute)):
                new = f"{ctx.text(module)}.to({ctx.text(dev)})"
                fix = ctx.fix(Applicability.UNSAFE, f"Move the module to the device: `{new}`",
                              [ctx.replace(module, new)])
            what = f"`{ctx.text(module)}`" if isinstance(module, (ast.Name, ast.Attribute)) else "the module"
            ctx.report(
                call,
                f"{what} is still on the CPU when it is wrapped with `device_ids`: DDP raises "
                "ValueError (device_ids only work with GPU modules); move it with `.to(device)` first",
                fix=fix,
            )
        self._through_helpers(ctx, done)

    def _through_helpers(self, ctx, done) -> None:
        """``model = wrap(model)`` where the project helper ``wrap`` (this file or another module)
        hands its parameter as it is to ``DistributedDataParallel(..., device_ids=[...])``, and the
        module given here was built on the CPU and never moved: reported at the call."""
        from ..flow import for_context
        from ..flow.helper_calls import bind_args
        from ..flow.params import dead_at_call

        an = None
        for call in ctx.sem.calls:
            if call in done:
                continue  # reported as a wrap site
            # the module is handed over by name (``wrap(model)``, ``wrap(module=net)``)
            if not any(isinstance(a, ast.Name) for a in (*call.args, *(k.value for k in call.keywords))):
                continue
            if an is None:
                an = for_context(ctx)
            target = an.resolve_call(an.main, call)
            if target is None or target[1] is ctx.sem.enclosing_function(call):
                continue
            wraps = [w for w in _wrapped_params(target[0], target[1], ctx if target[0] is an.main else None)
                     if not dead_at_call(an.main, call, target[0], target[1], w[2])
                     and w[3] not in patched_names(ctx.sem, call)]
            if not wraps:
                continue  # the wrap is in a branch this call does not take, or the test mocks it
            param, line = wraps[0][0], wraps[0][1]
            arg = bind_args(call, target[1]).get(param)
            if arg is None or on_device(ctx, arg, call) is not False:
                continue
            name = getattr(target[1], "name", "?")
            ctx.report(
                call,
                f"`{ctx.text(arg)}` is still on the CPU when `{name}(...)` wraps it with `device_ids` (line "
                f"{line} of its module): DDP raises ValueError (device_ids "
                "only work with GPU modules); move it with `.to(device)` before the call",
            )


def _wrapped_params(view, fn, ctx=None) -> list:
    """(parameter, line, wrap call, the wrapper's name there) for each
    ``DistributedDataParallel(param, device_ids=[...])`` of ``fn`` that hands one of its
    parameters as it is (not rebound on the way); memoised per function."""
    from ..semantic import FUNC_TYPES, terminal_name
    from ..flow.bindings import reaching
    from ..flow.calls import scope_calls

    if not isinstance(fn, FUNC_TYPES):
        return []
    memo = view.memo.setdefault("ddp201.wrapped_params", {})
    if id(fn) in memo:
        return memo[id(fn)]
    got = []
    # a helper of this file (``ctx`` given) may wrap through another helper
    sites = {id(s.call): s for s in wrap_sites(ctx)} if ctx is not None else {}
    for c in scope_calls(view, fn):
        site = sites.get(id(c))
        if site is not None and not site.direct:
            ids, iv, _ = site.arg_at(view, 1, "device_ids")
            mod, mv, _ = site.arg_at(view, 0, "module")
            if iv is not view or mv is not view:
                continue
        elif view.sem.call_qualname(c) == DDP_CLASS:
            ids = get_arg(c, 1, "device_ids")
            mod = get_arg(c, 0, "module")
        else:
            continue
        if not isinstance(ids, (ast.List, ast.Tuple)) or not ids.elts or not isinstance(mod, ast.Name):
            continue
        kind, where = reaching(view, mod.id, c)
        if kind == "param" and where is fn:
            got.append((mod.id, c.lineno, c, terminal_name(c.func)))
    memo[id(fn)] = got
    return got
