from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ..flow.hidden import arg_calls
from ..flow.modern import (FSDP1, PARALLELIZE, holds_call, hub, is_optimizer_ctor, key_of, origins, params_root,
                           shard_reach, shard_calls)


class OptimizerBeforeShard(Rule):
    """
    ## What it does
    Checks for an optimizer built from a model's parameters before the model is sharded:
    before `fully_shard(model)` (FSDP2), `parallelize_module(model, ...)` (tensor parallel) or
    `FullyShardedDataParallel(model)` (FSDP1), in the same function. The sharding may happen in a
    project helper that gives its parameter to `fully_shard` (`apply_fsdp(model, mesh)`), and the
    optimizer may be built by a helper that returns it (`opt = build_optimizer(model)`). A class
    that builds `self.opt` from `self.model` in `__init__` and shards `self.model` in another
    method is flagged too: the sharding method can only run on a constructed object, so the
    optimizer always comes first (unless `__init__` calls the sharding method before it, or a
    method builds the optimizer again). The sharding may also be done by a project function or
    class constructor of another module that gives its parameter to `fully_shard`,
    `parallelize_module` or `FullyShardedDataParallel` (`trainer = FSDPTrainer(cfg, model,
    optimizer)` whose `__init__` wraps `model`), and the optimizer may be one element of what a
    builder returns (`optimizer, scheduler = build_optimizer(cfg, model)`). The optimizer may also
    come from a method of the model's own class that builds it from the instance's parameters
    (`optimizer = model.configure_optimizers(lr)` whose body groups `self.named_parameters()`),
    alone or as an element of the tuple it returns, and the sharding may be on one branch only
    (`if use_fsdp: fully_shard(model)`).

    ## Why is this bad?
    Sharding replaces the module's parameters: `fully_shard` and `parallelize_module` swap each
    `nn.Parameter` for a new DTensor parameter, FSDP1 flattens them into new flat parameters. An
    optimizer built earlier holds the old tensors. `optimizer.step()` updates tensors that the
    model no longer uses: the loss does not go down, and nothing raises.

    Not flagged: an optimizer rebuilt after the sharding, or given to the helper that shards
    (`parallelize_model(model, config, optimizer)` re-points its parameter groups), unless that
    helper is a constructor that only stores it (`self.optimizer = optimizer`) in a class (with
    no base class) that only calls its methods (`self.optimizer.step()`).

    ## Example
    ```python
    model = Transformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    fully_shard(model)
    ```

    ## Use instead
    ```python
    model = Transformer(cfg)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ```

    ## Fix safety
    There is no automatic fix: the statements between the two may depend on their order.
    """

    code = "DDP501"
    name = "optimizer-before-shard"
    severity = Severity.ERROR
    # the sharding and the optimizer may both be built by helpers of other modules: only the reach gate
    reach = classmethod(shard_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        shards = [(c, a, "fully_shard") for c, a in shard_calls(an, view)]
        # direct calls, and project helpers or constructors (this module or another) that give
        # their parameter to them: ``FSDPTrainer(cfg, model, ...)`` whose ``__init__`` wraps it
        for qn, needle in ((PARALLELIZE, "parallelize_module"), ((FSDP1,), "FullyShardedDataParallel")):
            for c, a in arg_calls(an, view, qn, 0, "module", needle):
                shards.append((c, a, qn[0].rsplit(".", 1)[-1]))
        # ``self.setup_fsdp()``: a method of the class that shards an attribute of ``self``
        base = list(shards)
        for c in sem.calls:
            f = c.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                target = an.resolve_call(view, c)
                if target is None or target[0] is not view:
                    continue
                for s2, a2, what2 in base:
                    if sem.enclosing_function(s2) is target[1] and (_root_key(sem, a2, s2) or "").startswith("self."):
                        shards.append((c, a2, what2))
        done = set()
        for c, a, what in shards:
            k = _root_key(sem, a, c)
            if k is None:
                continue
            scope = sem.enclosing_function(c) or sem.tree
            for st in _statements_before(sem, scope, c):
                if not isinstance(st, ast.Assign) or not isinstance(st.value, ast.Call) or id(st) in done:
                    continue
                tks = _optimizer_keys(an, view, st, k)
                if not tks:
                    continue
                if any(tk is not None and _rebuilt_after(an, view, scope, tk, c) for tk in tks):
                    continue
                given = [x for x in (*c.args, *(kw.value for kw in c.keywords)) if key_of(x) is not None
                         and key_of(x) in tks]
                if given and _may_repoint(an, view, c, given):
                    continue  # the sharding helper receives the optimizer (and re-points it: composer)
                done.add(id(st))
                _report(ctx, st, k, c, what, tks[0] if isinstance(st.targets[0], ast.Tuple) else None)
        for c, a, what in shards:
            st = _built_at_construction(an, view, c, _root_key(sem, a, c))
            if st is not None and id(st) not in done:
                done.add(id(st))
                _report(ctx, st, _root_key(sem, a, c), c, what)


def _report(ctx, st, k, c, what, name=None) -> None:
    ctx.report(
        st.value,
        f"`{name or ctx.text(st.targets[0])}` is built from `{k}`'s parameters before `{ctx.text(c)}` "
        f"(line {c.lineno}); {what} replaces those parameters, so the optimizer updates tensors "
        "the model no longer uses and training silently does nothing",
        related=[(c, "the parameters are replaced here")],
    )


def _built_at_construction(an, view, c, k):
    """``self.opt = AdamW(self.model.parameters())`` in the class's ``__init__`` while another
    method of the class shards ``self.model`` (``c``): every instance builds the optimizer first,
    since the sharding method can only run on a constructed object. None when ``__init__`` runs
    the sharding method before that assignment, or another method of the class rebuilds the
    optimizer."""
    sem = view.sem
    if not k or not k.startswith("self."):
        return None
    fn = sem.enclosing_function(c)
    cls = parent(fn) if fn is not None else None
    if fn is None or fn.name == "__init__" or not isinstance(cls, ast.ClassDef):
        return None
    methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    init = methods.get("__init__")
    if init is None:
        return None
    for st in ast.walk(init):
        if not isinstance(st, ast.Assign) or len(st.targets) != 1 or not isinstance(st.value, ast.Call):
            continue
        tk = key_of(st.targets[0])
        if not tk or not tk.startswith("self.") or not _optimizer_over(an, view, st.value, k):
            continue
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and key_of(n.func.value) == "self"
               and n.func.attr == fn.name and n.lineno < st.lineno for n in ast.walk(init)):
            return None  # __init__ shards first
        if any(isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n is not st
               and any(key_of(t) == tk for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
               for m in methods.values() for n in ast.walk(m)):
            return None  # rebuilt somewhere
        if any(key_of(x) == tk for x in (*c.args, *(kw.value for kw in c.keywords))):
            return None  # the sharding call receives the optimizer
        return st
    return None


def _root_key(sem, a, at):
    if at is not None and isinstance(at, ast.Call) and isinstance(at.func, ast.Attribute) and \
            isinstance(at.func.value, ast.Name) and at.func.value.id == "self" and at.func.attr not in (
            "fully_shard",) and key_of(a) is not None and key_of(a).startswith("self."):
        return key_of(a)  # a sharding method of the class, called as ``self.setup_fsdp()``
    return _root_key_of(sem, a, at)


def _root_key_of(sem, a, at):
    """The module whose parameters sharding ``a`` replaces: ``model`` for ``model``,
    ``model.layers[0]``, ``model.output``, or ``block`` of ``for block in model.layers:``."""
    while isinstance(a, (ast.Attribute, ast.Subscript)) and key_of(a) is None:
        a = a.value
    k = key_of(a)
    if k is None or not isinstance(a, ast.Name):
        return k
    p = parent(at)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, ast.For) and isinstance(p.target, ast.Name) and p.target.id == a.id:
            it = p.iter
            if isinstance(it, ast.Call) and it.args:  # enumerate(model.layers) / model.layers.values()
                it = it.args[0] if isinstance(it.func, ast.Name) else it.func.value
            while isinstance(it, (ast.Attribute, ast.Subscript, ast.Call)) and key_of(it) is None:
                it = it.func if isinstance(it, ast.Call) else it.value
            return key_of(it) or k
        p = parent(p)
    return k


def _statements_before(sem, scope, call):
    """The assignments of ``scope`` (not of functions nested in it) that end before ``call``."""
    return [st for st in sem.by_type.get(ast.Assign, ()) if st.end_lineno < call.lineno
            and (sem.enclosing_function(st) or sem.tree) is scope]


def _optimizer_keys(an, view, st, k) -> list:
    """The keys that ``st`` binds to an optimizer over ``k``'s parameters: its target, or the names
    of a tuple target that hold one (``optimizer, scheduler = build_optimizer(cfg, model)``)."""
    t = st.targets[0]
    if isinstance(t, ast.Tuple):
        f = st.value.func
        if any(isinstance(e, ast.Starred) for e in t.elts) or is_optimizer_ctor(view, st.value):
            return []
        if isinstance(f, ast.Attribute) and key_of(f.value) == k:  # ``opt, sched = model.configure_optimizers()``
            return [e.id for i, e in enumerate(t.elts) if isinstance(e, ast.Name)
                    and _own_params_optimizer(an, view, st.value, (i,))]
        if not any(key_of(x) == k for x in (*st.value.args, *(kw.value for kw in st.value.keywords))):
            # ``model, optimizer = self._build(cfg)``: a builder that makes the model and its optimizer
            return _built_together(an, view, st, k)
        return [e.id for i, e in enumerate(t.elts) if isinstance(e, ast.Name) and any(
            isinstance(x, ast.Call) and _builds_optimizer(an, v, x) for v, x in origins(an, view, st.value, st, path=(i,)))]
    if not _optimizer_over(an, view, st.value, k):
        return []
    tk = key_of(t)
    return [tk] if tk is not None else [None]


def _built_together(an, view, st, k) -> list:
    """The names of ``st``'s tuple target bound to an optimizer over the element bound to ``k``,
    both made by the project function ``st`` calls: every ``return`` of it is a tuple whose element
    for ``k`` is a name and whose element for the optimizer a name assigned once there to an
    optimizer over that name's parameters (``model = GPT(cfg)``, ``opt = model.configure_optimizers()``,
    ``return model, opt``)."""
    from ..semantic import FUNC_TYPES, iter_scope_nodes

    elts = st.targets[0].elts
    j = next((i for i, e in enumerate(elts) if key_of(e) == k), None)
    target = an.resolve_call(view, st.value) if j is not None else None
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return []
    tv, fn = target
    rets = [r for r in iter_scope_nodes(fn) if r.__class__ is ast.Return]
    if not rets or any(not isinstance(r.value, ast.Tuple) or len(r.value.elts) != len(elts) for r in rets):
        return []
    out = []
    for i, e in enumerate(elts):
        if i == j or not isinstance(e, ast.Name):
            continue
        ok = True
        for r in rets:
            m, o = r.value.elts[j], r.value.elts[i]
            v = tv.sem.single_value(o.id, fn) if isinstance(o, ast.Name) and isinstance(m, ast.Name) else None
            if not (isinstance(v, ast.Call) and _optimizer_over(an, tv, v, m.id)):
                ok = False
                break
        if ok:
            out.append(e.id)
    return out


# what re-points an optimizer at other parameters
_REPOINT = frozenset({"param_groups", "add_param_group"})


def _may_repoint(an, view, call, given) -> bool:
    """The sharding helper or constructor ``call`` receives the optimizer (``given``: its argument
    expressions) and may re-point it at the sharded parameters: unless the callee (resolved in the
    project) only stores it on ``self`` (``self.optimizer = optimizer``) and its class uses that
    attribute only through its own methods (``self.optimizer.step()``), never its parameter groups
    and never handing it on."""
    from ..semantic import FUNC_TYPES
    from ..flow.context import call_args

    target = an.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return True
    fn = target[1]
    names = {p for p, a in call_args(call, fn) if any(a is g for g in given)}
    if not names:
        return True
    attrs = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id in names:
            st = parent(n)
            if isinstance(n.ctx, ast.Store):
                return True
            if not (isinstance(st, ast.Assign) and st.value is n and len(st.targets) == 1
                    and (key_of(st.targets[0]) or "").startswith("self.")):
                return True  # used otherwise: given on, or its groups read
            attrs.add(st.targets[0].attr)
    cls = parent(fn)
    if not attrs or not isinstance(cls, ast.ClassDef) or any(
            not (isinstance(b, ast.Name) and b.id == "object") for b in cls.bases):
        return True  # (a base class's methods are not read)
    for n in ast.walk(cls):
        if not (isinstance(n, ast.Attribute) and n.attr in attrs and key_of(n.value) == "self"):
            continue
        up = parent(n)
        if isinstance(up, ast.Assign) and n in up.targets:
            if not (isinstance(up.value, ast.Name) and up.value.id in names and any(up is s for s in ast.walk(fn))):
                return True  # bound again elsewhere
            continue
        # ``self.optimizer.step()``: a method call on it; anything else (its groups, handing it on) may re-point
        if not (isinstance(up, ast.Attribute) and up.attr not in _REPOINT and isinstance(parent(up), ast.Call)
                and parent(up).func is up):
            return True
    return False


def _optimizer_over(an, view, call, k) -> bool:
    """``call`` builds an optimizer over ``k``'s parameters: directly, through a helper given
    ``k`` that returns one, or through a method of ``k``'s class that builds one from the
    instance's own parameters (``model.configure_optimizers(...)``: ``_own_params_optimizer``)."""
    if is_optimizer_ctor(view, call):
        p = get_arg(call, 0, "params")
        return p is not None and params_root(p) == k
    f = call.func
    if isinstance(f, ast.Attribute) and key_of(f.value) == k and _own_params_optimizer(an, view, call):
        return True
    args = [*call.args, *(kw.value for kw in call.keywords)]
    if not any(key_of(x) == k for x in args):
        return False
    return holds_call(an, view, call, call, lambda v, e: _builds_optimizer(an, v, e)) is not None


def _builds_optimizer(an, view, call, path=()) -> bool:
    """``call`` is an optimizer's constructor, or a method call that returns one the method builds
    from its instance's parameters (element ``path`` of the tuple it returns)."""
    if not path and is_optimizer_ctor(view, call):
        return True
    return isinstance(call.func, ast.Attribute) and _own_params_optimizer(an, view, call, path)


def _own_params_optimizer(an, view, call, path=()) -> bool:
    """``call`` (``model.configure_optimizers(...)``) runs a method of a project class (resolved
    on the instance its receiver holds) that returns an optimizer built from the instance's own
    parameters (``self.parameters()``, or ``self.named_parameters()`` through the groups it
    builds: ``_training.params_reach_optimizer``), alone or as element ``path`` of a tuple
    (``return optimizer, scheduler``)."""
    from ..semantic import FUNC_TYPES, iter_scope_nodes, param_names
    from ._training import params_reach_optimizer

    target = an.resolve_call(view, call) or an.module_method(view, call.func.value, call)
    if target is None or not isinstance(target[1], FUNC_TYPES) or not isinstance(parent(target[1]), ast.ClassDef):
        return False
    tv, fn = target
    names = param_names(fn)
    if not names or any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in fn.decorator_list):
        return False
    opt = params_reach_optimizer(tv, names[0], fn)
    if opt is None:
        return False
    for r in iter_scope_nodes(fn):
        if r.__class__ is not ast.Return or r.value is None:
            continue
        v = r.value
        for i in path:
            v = v.elts[i] if isinstance(v, ast.Tuple) and i < len(v.elts) else None
        if v is not None and holds_call(an, tv, v, r, lambda _v, e: e is opt) is not None:
            return True
    return False


def _rebuilt_after(an, view, scope, tk, c) -> bool:
    sem = view.sem
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and n.lineno > c.lineno and any(key_of(t) == tk for t in n.targets) \
                and isinstance(n.value, ast.Call) and (sem.enclosing_function(n) or sem.tree) is scope:
            return True
    return False
