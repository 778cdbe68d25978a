from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg
from ..flow.hidden import arg_calls, is_fsdp2, shard_calls
from ..flow.modern import hub, key_of
from ._common import other_call_sites, shard_or_callers_reach

REGISTER = ("torch.distributed.fsdp.register_fsdp_forward_method",
            "torch.distributed._composable.fsdp.register_fsdp_forward_method")


class FsdpMethodWithoutRegistration(Rule):
    """
    ## What it does
    Checks for a call of a method other than `forward` (`model.generate(...)`, `model.encode(...)`)
    on a module given to `fully_shard`, when the method is defined by the project's model class,
    does not go through `self(...)` (calling `self.forward(...)` directly skips FSDP2's hooks just
    the same), and no
    `register_fsdp_forward_method(model, "<method>")` registers it. The module is followed into
    the helpers it is passed to, in this module or another (an evaluation helper that calls
    `model.encode(batch)` for a model its callers shard), and a registration is found where the
    module was sharded (a sharding helper of another module). A method that only initialises
    the parameters in place (`nn.init.normal_(...)`, also in a function it hands to
    `self.apply(...)`, as `init_weights` after `to_empty` does) is not reported: the in-place
    init ops work on the DTensor shards.

    ## Why is this bad?
    FSDP2 all-gathers a module's parameters in a pre-forward hook, which only `__call__` runs. A
    method called directly sees the sharded parameters: the root module's own parameters
    (embeddings, the output head) are DTensor shards, and the call fails with a shape or
    "mixed torch.Tensor and DTensor" error, or, on a mesh of one, computes on the wrong tensors.

    ## Example
    ```python
    fully_shard(model)
    tokens = model.generate(prompt, max_new_tokens=32)
    ```

    ## Use instead
    ```python
    fully_shard(model)
    register_fsdp_forward_method(model, "generate")
    tokens = model.generate(prompt, max_new_tokens=32)
    ```

    ## Fix safety
    The fix inserts `register_fsdp_forward_method(model, "<method>")` after the `fully_shard`
    call. It is unsafe: the method then all-gathers like `forward`, which every rank must call.
    """

    code = "DDP502"
    name = "fsdp-method-without-registration"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # the sharding and the registration may be done by a helper of another module, or the method
    # called in a helper of a module that its caller gives the sharded model to: the reach gate
    reach = classmethod(shard_or_callers_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        shards = shard_calls(an, view)
        registered = _registered(an, view)
        callers = other_call_sites(ctx, an)
        for c in sem.calls:
            f = c.func
            if not isinstance(f, ast.Attribute) or f.attr == "forward" or f.attr.startswith("__"):
                continue
            k = key_of(f.value)
            if k is None or (k, f.attr) in registered or (k, None) in registered or \
                    not is_fsdp2(an, view, f.value, c, callers):
                continue
            if is_fsdp2(an, view, f.value, c, callers, kind="registered"):
                continue  # registered where it was sharded (a helper of another module, a caller)
            target = an.resolve_call(view, c) or _method_of_origin(an, view, f.value, f.attr, c, callers)
            if target is None or not isinstance(target[1], FUNC_TYPES) or not _bypasses_call(target[1]):
                continue
            shard = next((s for s, a in shards if key_of(a) == k), None)
            fix = None
            if shard is not None and sem.enclosing_function(shard) is sem.enclosing_function(c):
                st = _stmt(sem, shard)
                name, edits = ctx.ref(REGISTER[0])
                ins = ctx.insert_after(st, f'{name}({ctx.text(f.value)}, "{f.attr}")') if st is not None else None
                if ins is not None:
                    fix = ctx.fix(Applicability.UNSAFE, f"Register `{f.attr}` with `register_fsdp_forward_method`",
                                  [*edits, ins])
            ctx.report(
                c,
                f"`{ctx.text(c)}` calls `{f.attr}` on a module given to `fully_shard` without "
                f"`register_fsdp_forward_method({k}, \"{f.attr}\")`: only `forward` all-gathers the sharded "
                "parameters, so this method computes on DTensor shards",
                related=[(target[1], f"`{f.attr}` is defined here")] if target[0] is view else [],
                fix=fix,
            )


def _bypasses_call(fn) -> bool:
    """The method runs the module's submodules (``self.head(x)``, ``self.layers[i](x)``) without
    ``self(...)``: a computation that needs the gathered parameters. The class's own methods it
    calls (``self._trunk(ids)``, and ``self.forward(ids)``, which FSDP2's hooks do not wrap: they
    run in ``__call__`` only) are read as part of it, transitively. A
    method that only initialises them in place (``reset_parameters``: ``init.*_`` on the DTensor
    shards) is fine under FSDP2, also through ``nn.Module.apply`` (``self.apply(self._init_weights)``,
    ``self.apply(lambda m: ...)``): the function applied is read as part of the method, and it runs
    a submodule only where it calls the module it is given."""
    from ..semantic import parent, param_names
    cls = parent(fn)
    methods = {st.name: st for st in getattr(cls, "body", ()) if isinstance(st, FUNC_TYPES)}
    functions = {st.name: st for st in getattr(parent(cls), "body", ()) if isinstance(st, FUNC_TYPES)}
    runs_submodule = False
    todo, seen, given = [fn], {id(fn)}, set()
    while todo:
        cur = todo.pop()
        for n in ast.walk(cur):
            if not isinstance(n, ast.Call):
                continue
            g = n.func
            if isinstance(g, ast.Name) and g.id == "self":
                return False
            if isinstance(g, ast.Name) and g.id in given:
                runs_submodule = True  # ``apply(fn)``'s ``fn`` calls the submodule it is given
            if isinstance(g, ast.Attribute) and isinstance(g.value, ast.Name) and g.value.id == "self":
                m = methods.get(g.attr)
                if m is None and g.attr == "apply" and len(n.args) == 1 and not n.keywords:
                    # ``nn.Module.apply``: calls its function on every submodule, runs none itself
                    a = n.args[0]
                    f = methods.get(a.attr) if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) \
                        and a.value.id == "self" else a if isinstance(a, ast.Lambda) else \
                        functions.get(a.id) if isinstance(a, ast.Name) else None
                    if f is None:
                        runs_submodule = True
                        continue
                    given.update(param_names(f)[1 if f in methods.values() else 0:][:1])
                    if id(f) not in seen:
                        seen.add(id(f))
                        todo.append(f)
                    continue
                if m is None:
                    runs_submodule = True
                elif id(m) not in seen and len(seen) < 16:
                    seen.add(id(m))
                    todo.append(m)
            if isinstance(g, ast.Subscript) and isinstance(g.value, ast.Attribute) and \
                    isinstance(g.value.value, ast.Name) and g.value.value.id == "self":
                runs_submodule = True
    return runs_submodule


def _registered(an, view) -> set:
    """(key, method) of the modules given to ``register_fsdp_forward_method`` in this module,
    directly or through a project helper of any module that registers its parameter
    (``apply_fsdp(model)``, and the names bound to what it returns: ``self.model =
    self._wrap(model)``); method None (any) where the name is not a literal here (a helper's
    own, a loop over names)."""
    from ..semantic import parent
    out = set()
    for c, a in arg_calls(an, view, REGISTER, 0, "module", "register_fsdp_forward_method"):
        direct = view.sem.call_qualname(c) in REGISTER
        name = get_arg(c, 1, "method_name") if direct else None
        method = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None
        out.add((key_of(a), method))
        st = parent(c)
        if not direct and isinstance(st, ast.Assign) and st.value is c:
            # ``self.model = self._wrap(model)``: the helper registers the module it returns, as
            # ``is_fsdp2`` reads a sharding helper's result
            out.update((key_of(t), method) for t in st.targets)
    return out


def _method_of_origin(an, view, recv, name, at, callers=None):
    """(view, method) of the project class (of this module or another) whose instance ``recv``
    holds (``module_instance_class``: names, parameters, helpers, a module method returning the
    module, a constructor's argument in another module of the project), found through its method
    resolution order."""
    from ..flow.instances import module_instance_class
    from ..flow.records import _NOT_PROJECT, inherited_method
    got = module_instance_class(an, view, recv, at, _NOT_PROJECT, callers, frames=())
    if got is not None:
        return inherited_method(an, got[0], got[1], name, _NOT_PROJECT)
    return None


def _stmt(sem, node):
    from ..semantic import parent
    p = node
    while p is not None and not isinstance(p, ast.stmt):
        p = parent(p)
    return p
