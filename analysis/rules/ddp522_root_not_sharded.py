from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent
from ._common import other_call_sites
from ..flow.calls import WRAPPERS
from ..flow.hidden import arg_calls, shard_calls
from ..flow.modern import hub, key_of, shard_reach
from ..flow.shard_groups import module_class, own_parameters, shard_groups

# wrappers that manage the root's parameters when they are not sharded (DDP, FSDP1, ``replicate``)
_REPLICATE = ("torch.distributed._composable.replicate", "torch.distributed._composable.replicate.replicate",
              "torch.distributed.fsdp.replicate")


class RootNotSharded(Rule):
    """
    ## What it does
    Checks for `fully_shard` (FSDP2) given the children of a model (each block of a loop over
    `model.layers`, or `model.head`) when the model itself, whose class owns parameters of its
    own (an embedding, a final norm, an output head, an `nn.Parameter`), is never given to
    `fully_shard` (nor wrapped by DDP or `replicate`): not in the function that shards the
    children, nor, when that is a helper (of this module or another), in any of its callers.

    ## Why is this bad?
    `fully_shard(module)` manages the parameters of `module` that no child group already
    manages. Without `fully_shard(model)` the root's own parameters belong to no FSDP group: they
    stay plain tensors, no hook reduces their gradients, and each rank's optimizer steps them with
    the gradient of its own batch only. The replicas drift apart silently (or, with a gradient
    clip over all parameters, the step fails on "mixed torch.Tensor and DTensor"), and a DCP
    checkpoint stores one rank's copy.

    ## Example
    ```python
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    ## Use instead
    ```python
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the embedding, the final norm and the head
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    ## Fix safety
    There is no automatic fix: the root's group takes the mesh and policies of the program.
    """

    code = "DDP522"
    name = "fsdp2-root-not-sharded"
    severity = Severity.ERROR
    requires_text = ("fully_shard",)
    reach = classmethod(shard_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        scopes = {sem.enclosing_function(c) for c, _a in shard_calls(an, view)}
        callers = other_call_sites(ctx, an)
        for fn in scopes:
            got = shard_groups(an, view, fn)
            if got is None:
                continue
            parts, whole = got
            for root, calls in parts.items():
                if root in whole or root.startswith("self."):
                    continue
                first = min((c for c, _ in calls), key=lambda c: (c.lineno, c.col_offset))
                owned = self._unsharded_own(an, view, root, first, {a for _c, a in calls}, callers)
                if not owned:
                    continue
                if not self._never_sharded(an, view, fn, root, callers):
                    continue
                names = ", ".join(f"`{a}`" for a in owned[:4])
                ctx.report(first, f"`fully_shard` is given the children of `{root}` but never `{root}` itself, whose "
                                  f"own parameters ({names}) then belong to no FSDP group: their gradients are "
                                  f"never reduced and the replicas drift apart; call `fully_shard({root})` "
                                  "after its children")

    @staticmethod
    def _unsharded_own(an, view, root, at, sharded_attrs, callers) -> list:
        sem = view.sem
        scope = sem.enclosing_function(at)
        uses = [n for n in ast.walk(scope if scope is not None else sem.tree)
                if isinstance(n, ast.Name) and n.id == root and isinstance(n.ctx, ast.Load)]
        if not uses:
            return []
        got = module_class(an, view, uses[0], uses[0], callers=callers)
        if got is None or any(isinstance(n, ast.Attribute) and n.attr in ("requires_grad", "requires_grad_")
                              for n in ast.walk(got[1])):
            return []  # unknown, or a class that freezes some of its parameters itself
        return [a for _st, a in own_parameters(an, *got) if a not in sharded_attrs]

    def _never_sharded(self, an, view, fn, root, callers) -> bool:
        """No whole shard or wrap of ``root`` in ``fn`` or, where it leaves ``fn`` (a parameter,
        a return), in any caller; False when a caller is not known."""
        if not _settled(an, view, fn, {root}):
            return False
        escapes = isinstance(fn, FUNC_TYPES) and (root in _params(fn) or _returned(fn, root))
        if not escapes:
            return True
        sites = [(view, c) for c in an.call_sites(view, fn)] + list(callers(view, fn))
        if not sites:
            return False
        for cv, c in sites:
            tracked = set()
            k = _bound_arg(c, fn, root)
            if k is not None:
                tracked.add(k)
            st = parent(c)
            if _returned(fn, root) and not isinstance(st, ast.Expr):
                t = st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else None
                if key_of(t) is not None:
                    tracked.add(key_of(t))
                elif isinstance(t, ast.Tuple) and all(key_of(e) is not None for e in t.elts):
                    tracked.update(key_of(e) for e in t.elts)
                else:
                    return False  # the returned root goes where it is not followed
            if not tracked:
                continue  # the root is gone from the caller: nothing shards it later
            cf = cv.sem.enclosing_function(c)
            if isinstance(cf, FUNC_TYPES) and (tracked & _params(cf) or any(_returned(cf, k) for k in tracked)):
                return False  # it leaves the caller too: not followed
            got = shard_groups(an, cv, cf)
            if got is None and any(cv.sem.enclosing_function(s) is cf for s, _a in shard_calls(an, cv)):
                return False
            if got is not None and tracked & got[1]:
                return False
            if not _settled(an, cv, cf, tracked):
                return False
        return True


def _params(fn) -> set:
    a = fn.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}


def _returned(fn, key) -> bool:
    for n in ast.walk(fn):
        if isinstance(n, ast.Return) and n.value is not None:
            vals = n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]
            if any(key_of(v) == key for v in vals):
                return True
    return False


def _bound_arg(call, fn, name):
    from ..flow.context import call_args
    for p, a in call_args(call, fn):
        if p == name:
            return key_of(a)
    return None


def _settled(an, view, fn, keys) -> bool:
    """In ``fn`` (or the module's top level), each of ``keys`` is only handed to calls known not
    to wrap it: torch's own functions other than the wrappers, and project functions that give
    it to none; its parameters' trainability is left as built; no gradient is reduced by hand."""
    sem = view.sem
    body = fn if fn is not None else sem.tree
    wrapping = {id(c) for qns, needle in ((WRAPPERS[:1], "DistributedDataParallel"), (WRAPPERS[1:], "FullyShardedDataParallel"),
                                          (_REPLICATE, "replicate"))
                for c, _a in arg_calls(an, view, qns, 0, "module", needle)}
    for n in ast.walk(body):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and any(
                key_of(v) in keys for v in (n.value.elts if isinstance(n.value, (ast.Tuple, ast.List)) else
                                            n.value.values if isinstance(n.value, ast.Dict) else [n.value])):
            return False  # stored elsewhere (``self.model = model``, an alias): sharded there, maybe
        if isinstance(n, ast.Attribute) and n.attr in ("requires_grad", "requires_grad_", "grad"):
            return False  # frozen parts, or gradients handled by hand
        if not isinstance(n, ast.Call):
            continue
        if not any(key_of(a) in keys for a in (*n.args, *(k.value for k in n.keywords))):
            continue
        if id(n) in wrapping:
            return False
        qn = sem.call_qualname(n) or ""
        if qn.startswith("torch."):
            if qn in WRAPPERS or qn in _REPLICATE:
                return False
            continue
        if an.resolve_call(view, n) is None:
            return False  # a library call: it may wrap the module
    return True
