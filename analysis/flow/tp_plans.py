"""Tensor-parallel plans: what ``parallelize_module(module, mesh, plan)`` does to which submodule.

``plan_styles`` reads the plan (a dict display, a name bound to one and filled by ``plan[k] = v``
stores, a helper's return, a dict comprehension over literal names) as (key, style call) pairs;
``module_class`` gives the project class the parallelized module is an instance of, through
names, helpers' returns, parameters, ``self`` attributes and the elements of a ``ModuleList`` /
``ModuleDict`` / ``Sequential`` a loop walks; ``submodule_owner`` walks a plan key
(``"layers.*.attention.wq"``) from that class to the class that owns the leaf submodule.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, parent
from ..torch_api import constant_of
from .bindings import reaching
from .instances import _self_bindings, ctor_class, module_instance_class
from .origins import origins

_TP = "torch.distributed.tensor.parallel"
COLWISE = (f"{_TP}.ColwiseParallel", f"{_TP}.style.ColwiseParallel")
COLWISE_TEXT = ("ColwiseParallel",)
_CONTAINERS = ("torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.ModuleDict",
               "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.Sequential",
               "torch.nn.modules.container.ModuleDict")
_SHARD = ("torch.distributed.tensor.Shard", "torch.distributed.tensor.placement_types.Shard",
          "torch.distributed._tensor.Shard", "torch.distributed._tensor.placement_types.Shard")
_RETURNS_MODULE = ("torch.distributed.tensor.parallel.parallelize_module",
                   "torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard",
                   "torch.distributed._composable.fsdp.fully_shard.fully_shard")
_SELF_RETURNING = frozenset({"cuda", "to", "cpu", "float", "half", "bfloat16", "train", "eval", "to_empty"})
_ELEMENT_WALKS = frozenset({"values", "children", "modules"})
_PAIR_WALKS = frozenset({"items", "named_children"})
_MAX = 5


def _str_of(view, e, env):
    """The string ``e`` evaluates to, with the comprehension variables of ``env`` bound."""
    if isinstance(e, ast.Name) and e.id in env:
        return env[e.id]
    if isinstance(e, ast.JoinedStr):
        out = []
        for p in e.values:
            if isinstance(p, ast.Constant) and isinstance(p.value, str):
                out.append(p.value)
            elif isinstance(p, ast.FormattedValue) and p.conversion == -1 and p.format_spec is None:
                s = _str_of(view, p.value, env)
                if s is None:
                    return None
                out.append(s)
            else:
                return None
        return "".join(out)
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
        a, b = _str_of(view, e.left, env), _str_of(view, e.right, env)
        return None if a is None or b is None else a + b
    c = e if isinstance(e, ast.Constant) else constant_of(view.sem, e)
    return c.value if isinstance(c, ast.Constant) and isinstance(c.value, str) else None


def _style_calls(hub, view, value, at) -> list | None:
    """(view, call) leaves of a plan entry's value; None when one is not a call."""
    out = []
    for v, e in origins(hub, view, value, at, limit=4):
        if not isinstance(e, ast.Call):
            return None
        out.append((v, e))
    return out or None


def _dict_entries(hub, view, d, at, env=None) -> list | None:
    out = []
    for k, val in zip(d.keys, d.values):
        if k is None:
            more = plan_styles(hub, view, val, at)
            if more is None:
                return None
            out.extend(more)
            continue
        key = _str_of(view, k, env or {})
        if key is None:
            return None
        if env and isinstance(val, ast.Call):
            calls = [(view, val)]
        else:
            calls = _style_calls(hub, view, val, at)
            if calls is None:
                return None
        out.extend((key, c, v) for v, c in calls)
    return out


def _comprehension(hub, view, comp, at) -> list | None:
    """``{f"attn.{n}": ColwiseParallel() for n in ("wq", "wk")}``: one generator over literal
    strings, no condition."""
    if len(comp.generators) != 1:
        return None
    g = comp.generators[0]
    if g.ifs or not isinstance(g.target, ast.Name):
        return None
    it = g.iter
    if isinstance(it, ast.Name):
        got = origins(hub, view, it, at, limit=3)
        if len(got) != 1:
            return None
        it = got[0][1]
    if not isinstance(it, (ast.Tuple, ast.List, ast.Set)):
        return None
    out = []
    for e in it.elts:
        s = _str_of(view, e, {})
        if s is None:
            return None
        got = _dict_entries(hub, view, ast.Dict(keys=[comp.key], values=[comp.value]), at, {g.target.id: s})
        if got is None:
            return None
        out.extend(got)
    return out


def _stores(hub, view, name: str, bound) -> list | None:
    """``plan[k] = v`` and ``plan.update({...})`` in the function of the binding ``bound``."""
    fn = view.sem.enclosing_function(bound)
    scope = fn if fn is not None else view.sem.tree
    out = []
    for n in iter_scope_nodes(scope):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
                    envs = _loop_envs(view, n, scope)
                    for env in envs if envs is not None else ({},):
                        got = _dict_entries(hub, view, ast.Dict(keys=[t.slice], values=[n.value]), n, env)
                        if got is None:
                            if envs is None:
                                break  # a store under a loop over anything else whose key depends on the
                                # loop: a submodule not known (``plan[f"blocks.{i}.up"]``), left out
                            return None
                        out.extend(got)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                and n.func.value.id == name and n.func.attr in ("update", "setdefault", "pop", "__setitem__"):
            if n.func.attr != "update" or len(n.args) != 1 or n.keywords:
                return None
            more = plan_styles(hub, view, n.args[0], n)
            if more is None:
                return None
            out.extend(more)
    return out


def _loop_envs(view, node, scope) -> list | None:
    """The bindings of the loop variables around ``node`` in ``scope``, one dict per iteration:
    ``for name in ("wq", "wk"): plan[f"attn.{name}"] = ColwiseParallel()`` runs the store once per
    literal string; ``[{}]`` outside a loop; None under a loop over anything else."""
    envs = [{}]
    p = parent(node)
    while p is not None and p is not scope:
        if isinstance(p, (ast.For, ast.AsyncFor, ast.While)):
            it = getattr(p, "iter", None)
            if not (isinstance(p, ast.For) and isinstance(p.target, ast.Name) and isinstance(it, (ast.Tuple, ast.List))):
                return None
            words = [_str_of(view, e, {}) for e in it.elts]
            if not words or None in words or len(envs) * len(words) > 64:
                return None
            envs = [{**env, p.target.id: w} for env in envs for w in words]
        p = parent(p)
    return envs


def plan_styles(hub, view, plan, at, depth: int = 0) -> list | None:
    """(key, style call, view of the call) for each entry of the plan ``plan`` at ``at``: None
    when some entry or key is unknown (a plan built in a way not read here); a ``plan[key] = ...``
    store in a loop over something else than literal names whose key depends on the loop
    (``for i, _ in enumerate(model.blocks): plan[f"blocks.{i}.up"] = ...``) is left out, the
    other entries still read."""
    if depth > _MAX:
        return None
    if isinstance(plan, ast.Dict):
        return _dict_entries(hub, view, plan, at)
    if isinstance(plan, ast.DictComp):
        return _comprehension(hub, view, plan, at)
    if isinstance(plan, ast.Call) and isinstance(plan.func, ast.Name) and plan.func.id == "dict" and not plan.args:
        if any(k.arg is None for k in plan.keywords):
            return None
        return [] if not plan.keywords else None  # ``dict(a=...)``: keys are not module paths
    if not isinstance(plan, (ast.Name, ast.Attribute, ast.Call)):
        return None
    leaves = origins(hub, view, plan, at, limit=4)
    if not leaves:
        return None
    out = []
    for v, e in leaves:
        if not (isinstance(e, (ast.Dict, ast.DictComp)) or (
                isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "dict")):
            return None  # a call (a style itself, a library's plan) or anything else: not read
        got = plan_styles(hub, v, e, e, depth + 1)
        if got is None:
            return None
        out.extend(got)
        st = _assign_of(e)
        if st is not None and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            more = _stores(hub, v, st.targets[0].id, st)
            if more is None:
                return None
            out.extend(more)
    return out


def _assign_of(e):
    st = parent(e)
    return st if isinstance(st, ast.Assign) and st.value is e else None


# -- which class a module is -------------------------------------------------------------------

def module_class(hub, view, expr, at, depth: int = 0, callers=None):
    """(view, class) of the project ``nn.Module`` class ``expr`` holds at ``at``, else None.
    ``callers``: as ``origins`` takes it, for a parameter that only the project's other modules
    pass (``apply_tp(Model(cfg), mesh)`` in a script, ``parallelize_module`` in ``apply_tp``)."""
    if depth > _MAX:
        return None
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SELF_RETURNING:
        expr = expr.func.value
    if isinstance(expr, ast.Call):
        return _call_class(hub, view, expr, depth, callers)
    if isinstance(expr, ast.Name):
        got = module_instance_class(hub, view, expr, at)
        if got is not None:
            return got
        kind, evs = reaching(view, expr.id, at)
        if kind == "param":
            # a parameter of a function its own module never calls: what the calls of the project's
            # other modules pass
            return _origins_class(hub, view, expr, at, depth, callers) if callers is not None else None
        if kind != "events" or not evs:
            return None
        if all(isinstance(e, ast.Assign) for e in evs):
            return _origins_class(hub, view, expr, at, depth, callers)
        found = None
        for e in evs:
            if not isinstance(e, (ast.For, ast.AsyncFor)):
                return None
            got = _loop_element(hub, view, e, expr.id, depth, callers)
            if got is None or (found is not None and found[1] is not got[1]):
                return None
            found = got
        return found
    if isinstance(expr, ast.Attribute):
        if isinstance(expr.value, ast.Name) and expr.value.id == "self":
            fn = view.sem.enclosing_function(expr)
            cls = parent(fn) if fn is not None else None
            return attr_class(hub, view, cls, expr.attr) if isinstance(cls, ast.ClassDef) else None
        owner = module_class(hub, view, expr.value, at, depth + 1, callers)
        return attr_class(hub, *owner, expr.attr) if owner is not None else None
    if isinstance(expr, ast.Subscript):
        return container_elements(hub, view, expr.value, at, depth + 1, callers)
    return None


def _origins_class(hub, view, expr, at, depth: int, callers=None):
    """The one project module class every origin of ``expr`` constructs (``origins``), else None."""
    found = None
    for v, e in origins(hub, view, expr, at, limit=4, callers=callers):
        got = module_class(hub, v, e, e, depth + 1, callers) if isinstance(e, ast.Call) else None
        if got is None or (found is not None and found[1] is not got[1]):
            return None
        found = got
    return found


def colwise_reach(cls, text, filename):
    """DDP524's second gate (``Rule.reach``): the file, or a project module it imports (the
    text-level import graph of ``flow.reach``), spells ``ColwiseParallel``: the plan may come from
    a helper of another module (``parallelize_module(block, mesh, block_plan())``)."""
    from .reach import reaches  # lazy: only files the text gate admits

    return reaches(filename, text, COLWISE_TEXT)


def _call_class(hub, view, call, depth: int, callers=None):
    """``Cls(...)``; ``parallelize_module(m, ...)`` / ``fully_shard(m)`` (they return ``m``);
    ``Cls.build(...)`` of a classmethod that returns ``cls(...)`` (``instances.ctor_class``)."""
    got = ctor_class(hub, view, call, _not_project())
    if got is not None:
        return got
    if view.sem.call_qualname(call) in _RETURNS_MODULE and call.args:
        return module_class(hub, view, call.args[0], call, depth + 1, callers)
    return None


def _not_project():
    from .imports import _NOT_PROJECT
    return _NOT_PROJECT


def _loop_element(hub, view, loop, name: str, depth: int, callers=None):
    it, t = loop.iter, loop.target
    if isinstance(t, ast.Name) and t.id == name:
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _ELEMENT_WALKS \
                and not it.args:
            it = it.func.value
        return container_elements(hub, view, it, loop, depth + 1, callers)
    if isinstance(t, ast.Tuple) and len(t.elts) == 2 and isinstance(t.elts[1], ast.Name) and t.elts[1].id == name:
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
            return container_elements(hub, view, it.args[0], loop, depth + 1, callers)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _PAIR_WALKS \
                and not it.args:
            return container_elements(hub, view, it.func.value, loop, depth + 1, callers)
    return None


def container_elements(hub, view, expr, at, depth: int = 0, callers=None):
    """(view, class) every module of the container ``expr`` (a ``ModuleList`` / ``ModuleDict`` /
    ``Sequential`` attribute of a project class) is an instance of."""
    if depth > _MAX or not isinstance(expr, ast.Attribute):
        return None
    if isinstance(expr.value, ast.Name) and expr.value.id == "self":
        fn = view.sem.enclosing_function(expr)
        cls = parent(fn) if fn is not None else None
        owner = (view, cls) if isinstance(cls, ast.ClassDef) else None
    else:
        owner = module_class(hub, view, expr.value, at, depth + 1, callers)
    if owner is None:
        return None
    cview, cls = owner
    found = None
    for value in _attr_values(cls, expr.attr):
        got = _elements_of(hub, cview, value)
        if got == "empty":
            continue  # ``nn.ModuleDict()``, filled by the entry stores
        if got is None or (found is not None and found[1] is not got[1]):
            return None
        found = got
    return found


def _attr_values(cls, attr: str) -> list:
    """The values stored into ``self.<attr>`` (None for a binding not read) and into its
    entries (``self.layers[k] = Block(...)``, ``self.layers.append(Block(...))``), as
    ``("entry", value)``."""
    vals = list(_self_bindings(cls).get(attr, ()))
    for m in cls.body:
        if not isinstance(m, FUNC_TYPES):
            continue
        for n in iter_scope_nodes(m):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Subscript) and _is_self_attr(t.value, attr):
                        vals.append(("entry", n.value))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in (
                    "append", "add_module", "extend", "insert") and _is_self_attr(n.func.value, attr):
                vals.append(("entry", n.args[-1]) if n.func.attr != "extend" and n.args else None)
    return vals


def _is_self_attr(e, attr):
    return isinstance(e, ast.Attribute) and e.attr == attr and isinstance(e.value, ast.Name) and e.value.id == "self"


def _elements_of(hub, view, value):
    if value is None:
        return None
    if isinstance(value, tuple):
        return ctor_class(hub, view, value[1], _not_project())
    if isinstance(value, ast.Call) and view.sem.call_qualname(value) in _CONTAINERS:
        if not value.args and not value.keywords:
            return "empty"
        items = value.args
        if len(items) == 1 and isinstance(items[0], ast.Starred):
            items = [items[0].value]
        if len(items) == 1:
            return _elements_of(hub, view, items[0])
        return _same_ctor(hub, view, items)
    if isinstance(value, (ast.List, ast.Tuple)):
        return _same_ctor(hub, view, value.elts)
    if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
        return ctor_class(hub, view, value.elt, _not_project())
    if isinstance(value, ast.DictComp):
        return ctor_class(hub, view, value.value, _not_project())
    return None


def _same_ctor(hub, view, items):
    found = None
    for e in items:
        got = ctor_class(hub, view, e, _not_project())
        if got is None or (found is not None and found[1] is not got[1]):
            return None
        found = got
    return found


def attr_class(hub, view, cls, attr: str):
    """(view, class) of the project module ``self.<attr>`` of ``cls`` holds (every binding
    constructs it)."""
    found = None
    for value in _self_bindings(cls).get(attr, ()):
        got = ctor_class(hub, view, value, _not_project()) if value is not None else None
        if got is None or (found is not None and found[1] is not got[1]):
            return None
        found = got
    return found


def submodule_owner(hub, view, cls, path: list):
    """(view, class) of the module that owns the last component of ``path`` (a plan key split on
    dots), walked from the class ``cls``; a digit or ``*`` component is an element of a
    container."""
    cur = (view, cls)
    i = 0
    while i < len(path) - 1:
        v, c = cur
        name = path[i]
        nxt = path[i + 1]
        if i + 1 < len(path) - 1 and (nxt.isdigit() or nxt == "*"):
            found = None
            for value in _attr_values(c, name):
                got = _elements_of(hub, v, value)
                if got == "empty":
                    continue
                if got is None or (found is not None and found[1] is not got[1]):
                    return None
                found = got
            if found is None:
                return None
            cur = found
            i += 2
            continue
        if not name.isidentifier():
            return None
        cur = attr_class(hub, v, c, name)
        if cur is None:
            return None
        i += 1
    return cur


def style_keeps_local_shard(view, call) -> bool:
    """``ColwiseParallel(...)`` that leaves each rank a plain tensor with its shard of the output
    features: ``use_local_output`` left at True, ``output_layouts`` left at ``Shard(-1)``."""
    if view.sem.call_qualname(call) not in COLWISE or call.args:
        return False
    if any(k.arg is None for k in call.keywords):
        return False
    local = get_arg(call, None, "use_local_output")
    if local is not None:
        c = local if isinstance(local, ast.Constant) else constant_of(view.sem, local)
        if not (isinstance(c, ast.Constant) and c.value is True):
            return False
    out = get_arg(call, None, "output_layouts")
    if out is not None:
        if not (isinstance(out, ast.Call) and view.sem.call_qualname(out) in _SHARD and len(out.args) == 1
                and isinstance(out.args[0], ast.UnaryOp) and isinstance(out.args[0].op, ast.USub)
                and isinstance(out.args[0].operand, ast.Constant) and out.args[0].operand.value == 1):
            return False
    return True


def walked_callees(view, call: ast.Call) -> list | None:
    """The callees a call of a loop or comprehension variable runs, where that variable walks a
    tuple or list display: ``self.wq``, ``self.wk`` of ``proj(x)`` in ``(f(proj(x)) for proj in
    (self.wq, self.wk))`` or ``for proj in [self.wq, self.wk]: proj(x)``; None for any other call."""
    from .bindings import comp_binder  # lazy: only asked of a call by a plain name
    f = call.func
    if not isinstance(f, ast.Name):
        return None
    g = comp_binder(f)
    if g is not None:
        loops = [g]
    else:
        kind, evs = reaching(view, f.id, call)
        if kind != "events" or not evs or not all(isinstance(e, (ast.For, ast.AsyncFor)) for e in evs):
            return None
        loops = evs
    out = []
    for lp in loops:
        if not (isinstance(lp.target, ast.Name) and lp.target.id == f.id and isinstance(lp.iter, (ast.Tuple, ast.List))
                and lp.iter.elts and not any(isinstance(e, ast.Starred) for e in lp.iter.elts)):
            return None
        out.extend(lp.iter.elts)
    return out
