"""Gathers a helper makes of the sharded module it receives: ``export(model)`` where ``model`` holds
a ``fully_shard`` module and ``export`` turns the DTensors of its state dict or parameters into
whole tensors (``DTensor.full_tensor()``) behind ``if isinstance(t, DTensor):``, also through the
helpers it gives them to; and the same of the per-parameter state (Adam's moments) of an optimizer
over such a module's parameters, which torch builds like the parameter (``zeros_like``: a DTensor
sharded the same way): ``optimizer.state[p]["exp_avg_sq"]`` of a sharded ``p``, or an entry of
``optimizer.state.values()`` of an optimizer built over ``model.parameters()`` of an FSDP2 module. ``hidden.hidden_sites`` makes such a call a collective site (``summaries`` hands it this module's ``helper_gather``)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, subtree
from .bindings import _COMPS, comp_binder, reaching
from .nones import assigned_value
from .hidden import _DTENSOR_MODULES, _call_args, _key, entry_of, is_fsdp2, op_words

_DTENSOR_CLASSES = frozenset(m + ".DTensor" for m in (*_DTENSOR_MODULES, "torch.distributed.tensor._api"))
_SHARDED_ITERS = ("state_dict", "parameters", "named_parameters")
# the per-parameter state tensors torch's optimizers make with ``torch.zeros_like(p)`` (shaped, and
# for a DTensor parameter sharded, like it); ``step`` (a scalar tensor) is none of them
_MOMENTS = frozenset(("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg",
                      "acc_delta", "grad_avg", "sum", "ax", "prev", "step_size", "mu_product"))


# tensor methods whose result is a tensor of the receiver's kind (a plain tensor stays plain, a
# DTensor stays a DTensor sharded the same way)
_SAME_KIND = frozenset({"to", "cuda", "cpu", "float", "half", "bfloat16", "double", "contiguous", "clone",
                        "detach", "pin_memory", "type", "type_as", "requires_grad_"})


def kind_kept(expr):
    """The tensor ``expr`` is made from by methods that keep its kind (``p.detach().float()``,
    ``p.data``): the receiver at the bottom of the chain; ``expr`` itself when it is no such chain."""
    while (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SAME_KIND
           or isinstance(expr, ast.Attribute) and expr.attr == "data"):
        expr = expr.func.value if isinstance(expr, ast.Call) else expr.value
    return expr


def helper_gather(hub, view, call, Effect, Site):
    """``export(model)`` where ``model`` is an FSDP2 module and the project function ``export``, on
    every call, gathers the DTensors of its parameter's state dict or parameters (``for k, v in
    model.state_dict().items(): v.full_tensor()``, also through helpers that receive ``v``), an
    ``if isinstance(v, DTensor):`` around the gather holding for them: the gather's collective, at
    the call. The same for the moments an optimizer keeps of those parameters
    (``opt.state[p]["exp_avg_sq"].full_tensor()`` of a sharded ``p``), and of an optimizer argument
    built over an FSDP2 module's parameters (``for st in opt.state.values(): st["exp_avg"]``).
    (A helper that gathers unconditionally is a plain summary's; this is for the guarded one, whose
    guard only the sharded argument decides.)"""
    f = call.func
    recv = f.value if isinstance(f, ast.Attribute) and _key(f.value) is not None else None
    if not call.args and not call.keywords and recv is None:
        return None
    args = [a for a in (*call.args, *(k.value for k in call.keywords)) if _key(a) is not None]
    mod_args = [a for a in args if sharded_module(hub, view, a, call)]
    if not mod_args and not args and recv is None:
        return None
    target = hub.resolve_call(view, call)
    if target is None and recv is not None and sharded_module(hub, view, recv, call):
        target = hub.module_method(view, recv, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, fn = target
    # an optimizer over an FSDP2 module's parameters, given to a parameter whose ``.state`` the
    # helper reads (``for st in opt.state.values()``); asked only there (following a value costs)
    states = _state_params(tv, fn)
    mods = {p for p, a in _call_args(call, fn)
            if any(a is m for m in mod_args) or (p in states and a in args and _fsdp2_optimizer(hub, view, a, call))}
    me = _self_param(fn)
    if recv is not None and me is not None and sharded_module(hub, view, recv, call):
        mods.add(me)  # ``model.export(path)``: a method of the sharded module's own class reads ``self``
    if not mods or hub.summary(tv, fn).must:
        return None
    hub._view_stack.append(tv)  # the modules read become the checked view's dependencies
    try:
        e = _gathers(hub, tv, fn, frozenset(mods), frozenset(), Effect, 0)
    finally:
        hub._view_stack.pop()
    return Site(call, [e.through(fn.name)], "helper") if e is not None else None


def _gathers(hub, view, fn, mods, dts, Effect, depth):
    """The DTensor gather every call of ``fn`` makes when its parameters ``mods`` hold FSDP2
    modules and ``dts`` hold DTensors (an ``Effect``), else None."""
    memo = view.memo.setdefault("gathers.gathers", {})
    key = (fn, mods, dts, depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    loops = _sharded_loops(view, fn, mods)
    busy = set()

    def dtensor(expr, at) -> bool:
        expr = kind_kept(expr)  # ``p.detach()`` of a DTensor is a DTensor
        if not isinstance(expr, ast.Name):
            return moment(expr, at)  # ``opt.state[p]["exp_avg"]`` itself
        g = comp_binder(expr)
        if g is not None:
            return _sharded_target(view, g.iter, g.target, mods) == expr.id
        kind, evs = reaching(view, expr.id, at)
        if kind == "param":
            return expr.id in dts
        if kind != "events" or not evs or (expr.id, at) in busy:
            return False
        busy.add((expr.id, at))  # ``v = opt.state[v]["exp_avg"]`` in a loop reaches itself
        try:
            return all(e in loops.get(expr.id, ()) or dtensor(assigned_value(e, expr.id), e) for e in evs)
        finally:
            busy.discard((expr.id, at))

    def param_state(expr, at) -> bool:
        """``expr`` is the state the optimizer keeps for a sharded parameter: ``opt.state[p]``,
        ``opt.state.get(p, {})`` of a DTensor ``p``, an entry of ``opt.state.values()`` of an
        optimizer in ``mods``, or a name bound to one."""
        if isinstance(expr, ast.Name):
            g = comp_binder(expr)
            if g is not None:
                return _sharded_target(view, g.iter, g.target, mods) == ("state", expr.id)
            kind, evs = reaching(view, expr.id, at)
            if kind != "events" or not evs or (expr.id, at) in busy:
                return False
            busy.add((expr.id, at))
            try:
                return all(e in loops.get(("state", expr.id), ()) or param_state(assigned_value(e, expr.id), e) for e in evs)
            finally:
                busy.discard((expr.id, at))
        if isinstance(expr, ast.Subscript):
            base, p = expr.value, expr.slice
        elif (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get"
              and expr.args and not expr.keywords and len(expr.args) <= 2):
            base, p = expr.func.value, expr.args[0]
        else:
            return False
        return isinstance(base, ast.Attribute) and base.attr == "state" and dtensor(p, at)

    def moment(expr, at) -> bool:  # ``state["exp_avg_sq"]`` / ``state.get("exp_avg")`` of a sharded parameter's state
        if isinstance(expr, ast.Subscript):
            base, k = expr.value, expr.slice
        elif (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get"
              and len(expr.args) == 1 and not expr.keywords):
            base, k = expr.func.value, expr.args[0]
        else:
            return False
        return isinstance(k, ast.Constant) and k.value in _MOMENTS and param_state(base, at)

    def holds(p, child) -> bool:  # ``if isinstance(v, DTensor):`` of a DTensor value, around its body
        if p.__class__ in _COMPS:  # the element of ``{k: v.full_tensor() for k, v in net.state_dict().items()}``
            g = p.generators
            return (child is not g[0] and len(g) == 1 and not g[0].ifs
                    and _sharded_target(view, g[0].iter, g[0].target, mods) is not None)
        if isinstance(p, ast.If):
            if child not in p.body:
                return False
        elif not (isinstance(p, ast.IfExp) and child is p.body):
            return False
        t = p.test
        if not (isinstance(t, ast.Call) and isinstance(t.func, ast.Name) and t.func.id == "isinstance"
                and len(t.args) == 2):
            return False
        types = t.args[1].elts if isinstance(t.args[1], ast.Tuple) else [t.args[1]]
        return (any(view.sem.qualname(x) in _DTENSOR_CLASSES for x in types)
                and dtensor(t.args[0], p))

    from .unconditional import unconditional
    got = None
    for c in view.sem.function_calls(fn):
        f = c.func
        a = entry_of(view, c) if isinstance(f, ast.Attribute) else None
        if a is not None and a.runs and a.receiver in ("dtensor", "any") and a.method == f.attr:
            if dtensor(f.value, c) and unconditional(view, c, fn, holds):
                op = a.runs[0]
                got = Effect(op, c, view.path, what=f"the {op_words(op)} inside `{a.key}()`")
                break
            continue
        if depth >= 3 or not (c.args or c.keywords or isinstance(f, ast.Attribute)):
            continue
        target = hub.resolve_call(view, c)
        if target is None or not isinstance(target[1], FUNC_TYPES) or target[1] is fn:
            continue
        sub_d = frozenset(p for p, x in _call_args(c, target[1]) if dtensor(x, c))
        sub_m = frozenset(p for p, x in _call_args(c, target[1]) if isinstance(x, ast.Name) and x.id in mods
                          and reaching(view, x.id, c)[0] == "param")
        me = _self_param(target[1])
        if (me is not None and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in mods
                and reaching(view, f.value.id, c)[0] == "param"):
            sub_m |= {me}  # ``self._collect()`` of the sharded ``self``
        if (sub_d or sub_m) and unconditional(view, c, fn, holds):
            e = _gathers(hub, target[0], target[1], sub_m, sub_d, Effect, depth + 1)
            if e is not None:
                got = e.through(target[1].name)
                break
    memo[key] = got
    return got


def sharded_module(hub, view, expr, at) -> bool:
    """``expr`` holds a module whose parameters are DTensors: given to ``fully_shard`` or to
    ``parallelize_module`` (``hidden.is_fsdp2`` / ``is_tp``)."""
    return is_fsdp2(hub, view, expr, at) or is_fsdp2(hub, view, expr, at, kind="tp")


def _self_param(fn):
    """The name of the instance parameter of a method (``self``), else None."""
    from .calls import self_offset
    a = fn.args
    pos = (*a.posonlyargs, *a.args)
    return pos[0].arg if pos and self_offset(fn) else None


def dtensor_test_holds(hub, view, test) -> bool:
    """``test`` is ``isinstance(v, DTensor)`` (or a tuple of types with DTensor) where every binding
    of ``v`` that reaches it is a ``for`` (or comprehension) over the state dict or the parameters of
    a module whose parameters are DTensors (``for k, v in self.model.state_dict().items()`` after
    ``fully_shard``/``parallelize_module``), or binds it to such an entry through methods that keep
    a DTensor one (``w = p.detach()``): true on every rank, so no condition on the body."""
    if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
            and len(test.args) == 2 and isinstance(test.args[0], ast.Name)):
        return False
    types = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
    if not any(view.sem.qualname(x) in _DTENSOR_CLASSES for x in types):
        return False

    def sharded(it, target):
        def is_mod(m, at):
            return _key(m) is not None and sharded_module(hub, view, m, at)
        return _sharded_target(view, it, target, frozenset(), is_mod)

    def holds(use, at, depth) -> bool:  # ``v`` is a loop's entry, or made from one (``w = p.detach()``)
        g = comp_binder(use)
        if g is not None:
            return sharded(g.iter, g.target) == use.id
        kind, evs = reaching(view, use.id, at)
        if kind != "events" or not evs:
            return False
        for e in evs:
            if isinstance(e, ast.For):
                if sharded(e.iter, e.target) != use.id:
                    return False
                continue
            src = kind_kept(assigned_value(e, use.id))
            if depth >= 3 or not isinstance(src, ast.Name) or not holds(src, e, depth + 1):
                return False
        return True

    return holds(test.args[0], test, 0)


def _state_params(view, fn) -> frozenset:
    """The parameters of ``fn`` whose ``.state`` it reads (``opt.state.values()``)."""
    memo = view.memo.setdefault("gathers.state_params", {})
    got = memo.get(fn)
    if got is None:
        names = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        got = memo[fn] = frozenset(
            n.value.id for n in subtree(fn)
            if isinstance(n, ast.Attribute) and n.attr == "state" and isinstance(n.value, ast.Name)
            and n.value.id in names)
    return got


def _fsdp2_optimizer(hub, view, expr, at) -> bool:
    """``expr`` holds a ``torch.optim`` optimizer built over the parameters of an FSDP2 module
    (``torch.optim.AdamW(model.parameters())`` after ``fully_shard(model)``)."""
    from .origins import holds_call, is_optimizer_ctor
    got = holds_call(hub, view, expr, at, is_optimizer_ctor)
    if got is None:
        return False
    cv, ctor = got
    it = get_arg(ctor, 0, "params")
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "list" and len(it.args) == 1:
        it = it.args[0]
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)
            and it.func.attr in ("parameters", "named_parameters") and not it.args):
        return False
    return _key(it.func.value) is not None and is_fsdp2(hub, cv, it.func.value, ctor)


def _sharded_loops(view, fn, mods) -> dict:
    """name -> the ``for`` statements of ``fn`` that bind it to an entry of the state dict or the
    parameters of a parameter in ``mods`` (``for k, v in model.state_dict().items()``, ``for p in
    model.parameters()``, ``for n, p in model.named_parameters()``); ``("state", name)`` -> those
    that bind it to a parameter's state of an optimizer in ``mods`` (``for st in opt.state.values()``)."""
    got = {}
    if not mods:
        return got
    for st in ast.walk(fn):
        if isinstance(st, ast.For) and view.sem.enclosing_function(st) is fn:
            t = _sharded_target(view, st.iter, st.target, mods)
            if t is not None:
                got.setdefault(t, []).append(st)
    return got


def _sharded_target(view, it, target, mods, is_mod=None):
    """The name ``target`` (of a ``for`` over ``it``) binds to a value of the state dict or the
    parameters of a parameter in ``mods``; ``("state", name)`` where it binds to a parameter's
    state of an optimizer in ``mods``; else None. ``is_mod(expr, at)``: whether the module
    ``expr`` (any expression) counts, in place of ``mods``."""
    pair = False
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "values") \
            and not it.args:
        pair = it.func.attr == "items"
        it = it.func.value
        if (isinstance(it, ast.Attribute) and it.attr == "state" and isinstance(it.value, ast.Name)
                and it.value.id in mods and reaching(view, it.value.id, it)[0] == "param"):
            # ``for p, st in opt.state.items()``: the state of each parameter of the optimizer
            if pair:
                target = target.elts[1] if isinstance(target, ast.Tuple) and len(target.elts) == 2 else None
            return ("state", target.id) if isinstance(target, ast.Name) else None
        if not (isinstance(it, ast.Call) and it.func.__class__ is ast.Attribute and it.func.attr == "state_dict"):
            return None
    elif isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "state_dict":
        return None  # ``for k in model.state_dict()``: the keys
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _SHARDED_ITERS):
        return None
    m = it.func.value
    if is_mod is not None:
        if not is_mod(m, it):
            return None
    elif not (isinstance(m, ast.Name) and m.id in mods and reaching(view, m.id, it)[0] == "param"):
        return None
    if pair or it.func.attr == "named_parameters":
        target = target.elts[1] if isinstance(target, ast.Tuple) and len(target.elts) == 2 else None
    return target.id if isinstance(target, ast.Name) else None
