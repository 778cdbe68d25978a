"""Hidden collectives: calls of the modern stack (FSDP2, DTensor, DeviceMesh, the distributed state
dicts, DCP, FSDP1's full state dicts) that run a collective without spelling one.

The table is ``runtime/shim_vocab.py`` (shared with the runtime shim). This module answers, for a
call of the user's code, which entry it is and whether its condition holds (``api_of``), which
values hold a module given to ``fully_shard`` (``is_fsdp2``), and turns those calls into collective
sites (``hidden_sites``) that ``summaries.Summaries.sites`` adds beside the explicit ones, so that
DDP104/DDP107/DDP110 and every helper summary see them.
"""
from __future__ import annotations

import ast

from ..runtime.shim_vocab import (BY_QUALNAME, BY_UNIQUE_METHOD, COND_BROADCAST_RANK0, COND_FSDP1_FULL,
                                  COND_FULL_STATE_DICT, COND_RUN_CHECK, COND_SHARDED_PARAMS, VOCAB)
from ..semantic import FUNC_TYPES, get_arg, parent
from ..torch_api import constant_of
from .bindings import reaching, target_path
from .context import call_args
from .shard_returns import constructs, wrapped_on_a_path
from .tensors import replicated_dtensor
from .shard_returns import part_root, returned_modules, returns_sharded, tuple_element
from .values import summary

FULLY_SHARD = frozenset(a for a in BY_QUALNAME if a.endswith(".fully_shard"))
FSDP1 = "torch.distributed.fsdp.FullyShardedDataParallel"
PARALLELIZE = frozenset({"torch.distributed.tensor.parallel.parallelize_module"})
# the calls that make a module's parameters DTensors: FSDP2 (``Shard(0)``) and tensor parallel
# ``dtensor``: a module whose state dict holds DTensors, given to either or holding a part given
# to either (``for b in m.layers: parallelize_module(b, ...)``: ``shard_returns.part_root``)
_SHARDERS = {"fsdp2": (FULLY_SHARD, "fully_shard"), "tp": (PARALLELIZE, "parallelize_module"),
             "dtensor": (FULLY_SHARD | PARALLELIZE, ("fully_shard", "parallelize_module")),
             # a module given to ``register_fsdp_forward_method`` (the same flow: helpers, callers)
             "registered": (frozenset(a for a in BY_QUALNAME if a.endswith(".register_fsdp_forward_method")),
                            "register_fsdp_forward_method")}
_DTENSOR_MODULES = ("torch.distributed.tensor", "torch.distributed._tensor")
_BY_METHOD_RECV = {}
for _a in VOCAB:
    if _a.method and _a.receiver in ("dtensor", "fsdp2", "fsdp1"):
        _BY_METHOD_RECV.setdefault(_a.method, []).append(_a)
del _a
_OPNAMES = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_reduce": "all-reduce",
            "all_to_all": "all-to-all", "new_group": "group creation"}


def op_words(op: str) -> str:
    return _OPNAMES.get(op, op)


# -- what a call is -------------------------------------------------------------------------------
def api_of(hub, view, call: ast.Call):
    """The vocabulary entry whose collective ``call`` runs, its condition known to hold; else None."""
    memo = view.memo.setdefault("hidden.api_of", {})
    if call in memo:
        return memo[call]
    got = memo[call] = _api_of(hub, view, call)
    return got


def entry_of(view, call: ast.Call):
    """The vocabulary entry ``call`` names (by qualified name or unique method), whatever its
    condition; None for other calls."""
    qn = view.sem.call_qualname(call)
    if qn:
        got = BY_QUALNAME.get(qn)
        if got is not None:
            return got
    f = call.func
    if isinstance(f, ast.Attribute) and not qn:
        return BY_UNIQUE_METHOD.get(f.attr)
    return None


def _api_of(hub, view, call):
    sem = view.sem
    qn = sem.call_qualname(call)
    f = call.func
    if qn:
        a = BY_QUALNAME.get(qn)
        if a is None or not a.runs:
            return None
        return a if condition_holds(hub, view, call, a) else None
    if not isinstance(f, ast.Attribute):
        return None
    a = BY_UNIQUE_METHOD.get(f.attr)
    if a is not None:
        return a if a.runs and not (f.attr == "full_tensor" and replicated_dtensor(hub, view, f.value, call)) else None
    for a in _BY_METHOD_RECV.get(f.attr, ()):
        if not a.runs or a.method in ("forward", "backward"):
            continue
        if a.receiver == "dtensor" and uses_dtensor(view):
            return a
        if a.receiver == "fsdp2" and is_fsdp2(hub, view, f.value, call):
            return a
        if a.receiver == "fsdp1" and is_fsdp1(hub, view, f.value, call):
            if a.when == COND_FSDP1_FULL and not _fsdp1_full(view, call):
                continue
            return a
    return None


def uses_dtensor(view) -> bool:
    """The module imports from ``torch.distributed.tensor`` (the DTensor API)."""
    got = view.memo.get("hidden.uses_dtensor")
    if got is None:
        got = view.memo["hidden.uses_dtensor"] = any(
            (v or "").startswith(_DTENSOR_MODULES) for v in view.sem.aliases.values())
    return got


def condition_holds(hub, view, call: ast.Call, a) -> bool:
    w = a.when
    if w is None:
        return True
    if w == COND_FULL_STATE_DICT:
        if options_flag(view, get_arg(call, None, "options"), call, "full_state_dict", hub=hub) is not True:
            return False
        # a model sharded only later in this function holds plain tensors here: nothing to gather
        m = get_arg(call, 0, "model")
        k = _key(m) if m is not None else None
        sem = view.sem
        return not any(_key(a) == k and sem.enclosing_function(c) is sem.enclosing_function(call)
                       and c.lineno > call.lineno for c, a in shard_calls(hub, view))
    if w == COND_BROADCAST_RANK0:
        return options_flag(view, get_arg(call, None, "options"), call, "broadcast_from_rank0", hub=hub) is True
    if w == COND_RUN_CHECK:
        v = get_arg(call, None, "run_check")
        return isinstance(v, ast.Constant) and v.value is True
    if w == COND_SHARDED_PARAMS:
        p = get_arg(call, 0, "parameters")
        return (isinstance(p, ast.Call) and isinstance(p.func, ast.Attribute) and p.func.attr == "parameters"
                and is_fsdp2(hub, view, p.func.value, call))
    if w == COND_FSDP1_FULL:
        return _fsdp1_full(view, call)
    return False


def options_flag(view, expr, at, field: str, depth: int = 0, hub=None, missing=None, callers=None,
                 cls: str = "StateDictOptions", place: int | None = None):
    """The constant value of ``field`` in the ``StateDictOptions(...)`` that ``expr`` holds, or None
    (``cls``: another options class, ``FullStateDictConfig``; ``place``: the field's position).
    The field's value may come from a name bound once, an argparse default or a config dict
    (``constant_of``); with ``hub``, the options may come from a helper's return, a parameter or
    another module (``origins``), every origin agreeing. ``missing``: the answer for options built
    without the field (its default), where None means "cannot tell". With ``hub``, a field set by a
    comparison with a constant is decided where every origin of the other side is a constant
    (``full_state_dict=self.kind == "full"`` of ``State(model, kind="full")``; ``callers``: as
    ``origins`` takes it)."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, ast.Call) and (view.sem.call_qualname(expr) or "").endswith(cls):
        v = get_arg(expr, place, field)
        if v is None:
            return None if any(k.arg is None for k in expr.keywords) or len(expr.args) > (place or 0) else missing
        if not isinstance(v, ast.Constant):
            from .origins import compared_constant
            v = constant_of(view.sem, v) or (compared_constant(hub, view, v, callers) if hub is not None else None)
        return v.value if isinstance(v, ast.Constant) else None
    if hub is not None and depth == 0:
        from .origins import origins
        vals = {options_flag(v, e, e, field, depth + 1, hub, missing, callers, cls, place)
                if isinstance(e, ast.Call) else None for v, e in origins(hub, view, expr, at, callers=callers)}
        return vals.pop() if len(vals) == 1 else None
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, at)
        if kind in ("events", "global") and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign):
            return options_flag(view, evs[0].value, evs[0], field, depth + 1, missing=missing, cls=cls, place=place)
    return None


def _fsdp1_full(view, call) -> bool:
    """``call`` runs with FSDP1's state-dict type ``FULL_STATE_DICT``: under
    ``FSDP.state_dict_type(m, StateDictType.FULL_STATE_DICT)`` (a ``with`` around it, or a
    ``set_state_dict_type`` earlier in the module), or with none set at all, since
    ``FULL_STATE_DICT`` is FSDP1's default. A ``with`` of another type around the call, or any
    other type set anywhere in the module (it may be in force), is not."""
    def kind(c):
        for x in (*c.args, *(k.value for k in c.keywords)):
            if isinstance(x, ast.Attribute) and x.attr.endswith("_STATE_DICT"):
                return x.attr
        return None

    def sets_type(c):
        return isinstance(c.func, ast.Attribute) and c.func.attr in ("state_dict_type", "set_state_dict_type")
    p = parent(call)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.ClassDef)):
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for it in p.items:
                e = it.context_expr
                if isinstance(e, ast.Call) and sets_type(e):
                    return kind(e) == "FULL_STATE_DICT"
        p = parent(p)
    types = {kind(c) for c in view.sem.calls if sets_type(c)}
    return types <= {"FULL_STATE_DICT"}


# -- which values are FSDP2 modules ----------------------------------------------------------------
def _ops(kind: str):
    """What ``shard_returns`` needs of this module (passed in: no import circle)."""
    return _SHARDERS[kind][0], _key, is_fsdp2


def _key(expr):
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return "self." + expr.attr
    return None


def shard_calls(hub, view, kind: str = "fsdp2") -> list:
    """(call, sharded expression) of the module: ``fully_shard(m)``, and calls of project
    functions that give their parameter to ``fully_shard`` (``apply_fsdp(model, mesh)``); for
    ``kind="tp"``, the same of ``parallelize_module(m, mesh, plan)``; ``kind="dtensor"``, of
    either, each argument read as the module it is a part of (``parts``)."""
    qns, needle = _SHARDERS[kind]
    return arg_calls(hub, view, qns, 0, "module", needle, parts=kind == "dtensor")


def arg_calls(hub, view, qns: tuple, pos: int, kw: str, needle, parts: bool = False) -> list:
    """(call, expression) of the module for the argument (``pos``/``kw``) of the calls to ``qns``,
    and of the calls of project functions (this module or another) that give their parameter to
    such an argument (``params_to``), with the argument bound to that parameter. ``needle``: a
    word (or words) every module that calls ``qns`` spells (a module without it calls none).
    ``parts``: an argument that is part of a module (``model.layers[0]``, the element of a loop over
    ``model.layers``) stands for that module (``shard_returns.part_root``)."""
    key = ("hidden.arg_calls", qns, pos, kw, parts)
    got = view.memo.get(key)
    if got is not None:
        return got
    got = view.memo[key] = list(_direct_args(view, qns, pos, kw, needle, parts))
    sem = view.sem
    hub._view_stack.append(view)  # the modules read become this view's dependencies
    try:
        for c in sem.calls:
            f = c.func
            if not c.args or not isinstance(f, (ast.Name, ast.Attribute)) or sem.call_qualname(c) in qns:
                continue
            target = hub.resolve_call(view, c)
            if target is None or not isinstance(target[1], FUNC_TYPES):
                continue
            names = params_to(hub, *target, qns, pos, kw, needle, parts=parts)
            if names:
                for pname, arg in _call_args(c, target[1]):
                    if pname in names:
                        got.append((c, part_root(view, arg, c) if parts else arg))
    finally:
        hub._view_stack.pop()
    return got


def _direct_args(view, qns, pos, kw, needle, parts=False):
    key = ("hidden.direct_args", qns, pos, kw, parts)
    got = view.memo.get(key)
    if got is None:
        got = view.memo[key] = []
        if view.text is None or any(n in view.text for n in ((needle,) if isinstance(needle, str) else needle)):
            for qn in qns:
                for c in view.sem.calls_to(qn):
                    a = get_arg(c, pos, kw)
                    if a is not None:
                        got.append((c, part_root(view, a, c) if parts else a))
    return got



def _call_args(call, fn):
    return call_args(call, fn)


def params_to(hub, view, fn, qns, pos, kw, needle, depth: int = 0, parts: bool = False) -> frozenset:
    """The parameters of ``fn`` that its body gives as the argument ``pos``/``kw`` of a call to
    ``qns``: directly, or through another function that does (of this module, or of a project
    module this one imports; a module that never spells ``needle`` makes no such call itself)."""
    memo = view.memo.setdefault(("hidden.params_to", qns, pos, kw, parts), {})
    # keyed by depth too (``depth`` limits the calls followed): the answer is a function of ``fn``
    # and ``depth`` alone, whichever query came first (one found deeper saw fewer calls, one found
    # shallower more)
    key = (fn, depth)
    if key in memo:
        return memo[key]
    memo[key] = frozenset()  # recursion guard
    from ..semantic import param_names
    params = set(param_names(fn))
    sem = view.sem
    names = {a.id for c, a in _direct_args(view, qns, pos, kw, needle, parts)
             if isinstance(a, ast.Name) and a.id in params and sem.enclosing_function(c) is fn}
    if depth < 3 and params:
        hub._view_stack.append(view)
        try:
            names |= _params_to_through(hub, view, fn, params, qns, pos, kw, needle, depth, parts)
        finally:
            hub._view_stack.pop()
    memo[key] = frozenset(names)
    return memo[key]


def _params_to_through(hub, view, fn, params, qns, pos, kw, needle, depth, parts=False) -> set:
    """``params_to``'s parameters that ``fn`` hands to a function that gives them on."""
    names = set()
    sem = view.sem
    for c in sem.scope_calls(fn):
        f = c.func
        if not isinstance(f, (ast.Name, ast.Attribute)) or not any(
                isinstance(a, ast.Name) and a.id in params or parts and isinstance(a, (ast.Name, ast.Attribute, ast.Subscript))
                for a in (*c.args, *(k.value for k in c.keywords))):
            continue
        if isinstance(f, ast.Name) and f.id in view.defs:
            cv, callee = view, view.defs[f.id]
        else:
            target = hub.resolve_call(view, c)
            if target is None or not isinstance(target[1], FUNC_TYPES):
                continue
            cv, callee = target
        if callee is fn:
            continue
        inner = params_to(hub, cv, callee, qns, pos, kw, needle, depth + 1, parts)
        for pname, arg in _call_args(c, callee):
            arg = part_root(view, arg, c) if parts and pname in inner else arg
            if pname in inner and isinstance(arg, ast.Name) and arg.id in params:
                names.add(arg.id)
    return names


def is_fsdp2(hub, view, expr, at, callers=None, kind: str = "fsdp2") -> bool:
    """``expr`` holds a module given to ``fully_shard`` before ``at`` (in the same function, or
    on ``self`` anywhere in the class), or bound from one. A parameter holds one when every call
    of its function passes one: the calls of this module, else (``callers``, as ``origins`` takes
    it) those of the project's other modules (``load_pretrained(model, path)`` of a loader module,
    called by a trainer after ``apply_fsdp(model)``). ``kind="tp"``: the same question of
    ``parallelize_module`` (``is_tp``)."""
    k = _key(expr)
    if k is None:
        return False
    if callers is None and not _shards(hub, view, kind):
        return False  # nothing below can hold: every answer it asks stays in this module
    sem = view.sem
    scope = sem.enclosing_function(at)
    qns = _SHARDERS[kind][0]
    for c, a in shard_calls(hub, view, kind):
        if _key(a) != k:
            continue
        same = sem.enclosing_function(c) is scope
        if same and (c.lineno, c.col_offset) >= (at.lineno, at.col_offset):
            continue  # sharded later in this function: not yet
        if k.startswith("self."):
            # on ``self``: sharded in another method, unless the class also wraps it in DDP/FSDP1
            # (a class that supports both holds either)
            if not same and _also_wrapped(hub, view, expr):
                continue
            return True
        if same and not wrapped_on_a_path(view, expr, at):
            return True
    # bound from what a sharding call returns: ``fully_shard(m)``, or a project helper that gives
    # its parameter to ``fully_shard`` (``self.model = apply_fsdp(model, mesh)``)
    sharding = {id(c) for c, _a in shard_calls(hub, view, kind)}

    def sharded(v) -> bool:
        return isinstance(v, ast.Call) and (id(v) in sharding and not constructs(hub, view, v)
                                            or view.sem.call_qualname(v) in qns)
    if isinstance(expr, ast.Name):
        how, evs = reaching(view, expr.id, at)
        if how == "param":
            return _param_fsdp2(hub, view, evs, expr.id, callers, kind)
        if how in ("events", "global") and evs:
            for e in evs:
                if isinstance(e, ast.Assign) and (sharded(e.value) or any(
                        p is not None and returns_sharded(hub, view, e.value, p, kind, _ops(kind))
                        for p in (target_path(t, expr.id) for t in e.targets))):
                    return True
    elif k.startswith("self."):
        for v in hub.self_attr_bindings(view, expr, nested=True):
            v, p = tuple_element(v, expr.attr)
            if (not p and sharded(v) or returns_sharded(hub, view, v, p, kind, _ops(kind))) \
                    and not _also_wrapped(hub, view, expr):
                return True
            if isinstance(v, ast.Name) and not _also_wrapped(hub, view, expr):
                # ``self.model = model`` of a parameter that every call passes an FSDP2 module
                # (``Trainer(model, ...)`` after ``fully_shard(model)``), or a name sharded (or bound
                # from a sharding call) before the binding in its method (``fully_shard(m); self.model = m``)
                if is_fsdp2(hub, view, v, v, callers, kind):
                    return True
    return False


def is_tp(hub, view, expr, at, callers=None) -> bool:
    """``is_fsdp2``'s question of tensor parallel: ``expr`` holds a module given to
    ``parallelize_module`` (in place, or bound from what it or a project helper that gives it its
    parameter returns)."""
    return is_fsdp2(hub, view, expr, at, callers, "tp")


def _shards(hub, view, kind: str = "fsdp2") -> bool:
    """The module makes a sharding call ``is_fsdp2`` can see (``shard_calls``, or a ``fully_shard``
    call without the module argument, which its ``sharded`` accepts). Without one, ``is_fsdp2``
    without ``callers`` is False for every expression of the module: its other answers come from
    this module's own bindings and calls (``_param_fsdp2`` asks the call sites of this module)."""
    got = view.memo.get(("hidden.shards", kind))
    if got is None:
        sem = view.sem
        view.memo[("hidden.shards", kind)] = False  # recursion guard
        got = view.memo[("hidden.shards", kind)] = bool(shard_calls(hub, view, kind)) or any(
            sem.calls_to(q) for q in _SHARDERS[kind][0]) or returned_modules(hub, view, kind, _ops(kind))
    return got


def _also_wrapped(hub, view, attr) -> bool:
    """The class of ``self.<attr>`` also binds it to a DDP/FSDP1 wrapper: it holds either. Read
    from a function nested in a method too (``def step(): ... self.model ...`` inside ``run``: the
    closure's ``self`` is the method's)."""
    from .calls import WRAPPERS
    for v in hub.self_attr_bindings(view, attr, nested=True):
        if isinstance(v, ast.Call) and (view.sem.call_qualname(v) or "") in WRAPPERS:
            return True
    return False


def _param_fsdp2(hub, view, fn, name, callers=None, kind: str = "fsdp2") -> bool:
    """Every call of ``fn`` in its module passes an FSDP2 module as ``name``; with ``callers``,
    for a function this module never calls, every call of it in the project's other modules."""
    def compute() -> bool:
        sites = [(view, c) for c in hub.call_sites(view, fn)] if isinstance(fn, FUNC_TYPES) else []
        if not sites and callers is not None and isinstance(fn, FUNC_TYPES):
            sites = callers(view, fn)[:8]
        for cv, c in sites:
            a = next((a for p, a in _call_args(c, fn) if p == name), None)
            # a caller of this module is itself a function whose callers may be in other modules
            # (``recall(model)`` of ``eval.py`` calling ``embed(model)`` of its own module)
            if a is None or not is_fsdp2(hub, cv, a, c, callers if cv is view else None, kind=kind):
                return False
        return bool(sites)

    # a recursion reads as False, and what it made is not memoised for good (``values.summary``)
    return summary(hub.cut_state, view.memo.setdefault("hidden.param_fsdp2", {}),
                   (fn, name, callers is not None, kind), compute, False)


def is_fsdp1(hub, view, expr, at) -> bool:
    try:
        w = hub.wrapper_ctor(view, expr, at)
    except Exception:  # pragma: no cover - defensive: a helper of the hub on odd input
        return False
    return w is not None and hub.ctor_views.get(id(w), view).sem.call_qualname(w) == FSDP1


# sharding strategies of FSDP1 under which each rank holds a shard of every (flat) parameter
_SHARDING = frozenset({"FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"})


def fsdp1_sharded(hub, view, expr, at):
    """(view, ``FullyShardedDataParallel(...)`` call) that ``expr`` holds at ``at`` when it shards
    the parameters: no ``sharding_strategy`` (``FULL_SHARD`` by default), or every value that
    reaches it is a sharding member of ``ShardingStrategy`` (``NO_SHARD`` keeps whole
    parameters, as DDP does); None otherwise or when not known. The wrap is found by
    ``wrapper_ctor``, else when every origin of ``expr`` (tuple unpacking, helpers' returns in
    any module) is one."""
    from .origins import branch_origins, origins

    try:
        w = hub.wrapper_ctor(view, expr, at)
    except Exception:  # pragma: no cover - defensive: a helper of the hub on odd input
        w = None
    wraps = [(hub.ctor_views.get(id(w), view), w)] if w is not None else origins(hub, view, expr, at)
    if not wraps:
        return None
    for wv, w in wraps:
        if not isinstance(w, ast.Call) or wv.sem.call_qualname(w) != FSDP1:
            return None
        s = get_arg(w, 2, "sharding_strategy")
        if s is None:
            continue
        got = branch_origins(hub, wv, s, w)
        if not got:
            return None
        for v, e, _fr in got:
            if isinstance(e, ast.Constant) and e.value is None:
                continue  # ``sharding_strategy=None``: the default
            if not (isinstance(e, ast.Attribute) and e.attr in _SHARDING and
                    (v.sem.qualname(e.value) or "").endswith("ShardingStrategy")):
                return None
    return wraps[0]


# -- sites -----------------------------------------------------------------------------------------
def hidden_sites(hub, view, Effect, Site, gather=None) -> dict:
    """call -> Site for every call of the module that runs a hidden collective: a vocabulary entry
    whose condition holds, the forward of an FSDP2 module, ``backward()`` of a value computed from
    one, and a project helper that calls an FSDP2 module it receives (or, through ``gather``,
    ``gathers.helper_gather``, gathers its DTensors). ``Effect`` and ``Site`` are ``summaries``'
    classes, passed in (this module sits below ``summaries``)."""
    got = view.memo.get("hidden.sites")
    if got is not None:
        return got
    got = view.memo["hidden.sites"] = {}
    sem = view.sem
    if not _relevant(view):
        return got
    for c in sem.calls:
        a = api_of(hub, view, c)
        if a is not None and a.runs == ("new_group",):
            a = None  # group construction: every rank must make it, but on torch 2.13 it does not block (DDP104 checks ``new_group`` itself)
        if a is not None:
            op = a.runs[0]
            got[c] = Site(c, [Effect(op, c, view.path, what=f"the {op_words(op)} inside `{a.key}()`")], "hidden")
            continue
        site = _accelerate_call(hub, view, c, Effect, Site)
        if site is not None:
            got[c] = site
            continue
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr == "backward":
            fwd = _from_fsdp2_forward(hub, view, f.value, c, 0)
            if fwd is not None:
                got[c] = Site(c, [Effect("reduce_scatter", c, view.path,
                                         what="FSDP2's gradient reduce-scatter in `backward()`")], "hidden")
            continue
        fwd = f if (isinstance(f, ast.Name) or _key(f) is not None and isinstance(f, ast.Attribute)) else None
        if fwd is None and isinstance(f, ast.Attribute) and f.attr == "forward":
            fwd = f.value  # ``model.forward(x)``
        if fwd is not None and is_fsdp2(hub, view, fwd, c):
            got[c] = Site(c, [Effect("all_gather", c, view.path,
                                     what="FSDP2's parameter all-gather in the forward")], "hidden")
            continue
        site = (_helper_forward(hub, view, c, Effect, Site) or (gather and gather(hub, view, c, Effect, Site))
                or _compiled_call(hub, view, c, Site))
        if site is not None:
            got[c] = site
    return got


def _relevant(view) -> bool:
    """The module names something of the vocabulary (a qualified name or a unique method), or imports
    ``torch.distributed`` (a sharded module from a helper, ``gathers.helper_gather``), Accelerate or
    torchmetrics' distributed utilities (their collectives, ``_accelerate_call``)."""
    sem = view.sem
    if any((v or "").startswith(("torch.distributed", "torch.nn.utils", "accelerate", "torchmetrics.utilities.distributed"))
           for v in sem.aliases.values()):
        return True
    return any(isinstance(c.func, ast.Attribute) and c.func.attr in BY_UNIQUE_METHOD for c in sem.calls)


def _from_fsdp2_forward(hub, view, expr, at, depth, callers=None):
    """The FSDP2 forward call ``expr`` is computed from (through names bound in this function)."""
    if depth > 4 or expr is None:
        return None
    for n in ast.walk(expr):
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Name) or _key(f) is not None) and is_fsdp2(hub, view, f, n, callers):
                return n
            if isinstance(f, ast.Attribute) and f.attr == "forward" and is_fsdp2(hub, view, f.value, n, callers):
                return n
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            kind, evs = reaching(view, n.id, n)
            if kind == "events":
                for e in evs or ():
                    if isinstance(e, (ast.Assign, ast.AugAssign)):
                        got = _from_fsdp2_forward(hub, view, e.value, e, depth + 1, callers)
                        if got is not None:
                            return got
    return None


def fsdp2_sites_with_callers(hub, view, stmts, Effect, Site, callers) -> list:
    """The FSDP2 collectives inside ``stmts`` (a loop's body in ``view``) that only the project's other
    files show: the forward of a module that a parameter holds, or a ``self`` attribute that
    ``__init__`` stores from one, when every call of that function or constructor in the other
    files (``callers``, as ``origins`` takes it: ``Actor(fully_shard_model, ...)`` in the training
    script) passes a module given to ``fully_shard``; and ``backward()`` of a value computed from
    such a forward. ``hidden_sites`` (which every rule sees) judges them by this module alone
    (and only in a module that names the modern stack: this one need not)."""
    out = []
    for c in (n for st in stmts for n in ast.walk(st)):
        if not isinstance(c, ast.Call):
            continue
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr == "backward":
            if _from_fsdp2_forward(hub, view, f.value, c, 0, callers) is not None:
                out.append(Site(c, [Effect("reduce_scatter", c, view.path,
                                           what="FSDP2's gradient reduce-scatter in `backward()`")], "hidden"))
            continue
        fwd = f if (isinstance(f, ast.Name) or _key(f) is not None and isinstance(f, ast.Attribute)) else None
        if fwd is not None and is_fsdp2(hub, view, fwd, c, callers):
            out.append(Site(c, [Effect("all_gather", c, view.path,
                                       what="FSDP2's parameter all-gather in the forward")], "hidden"))
    out.sort(key=lambda s: (s.node.lineno, s.node.col_offset))
    return out


def _helper_forward(hub, view, call, Effect, Site):
    """``evaluate(model)`` where ``model`` is an FSDP2 module and the project function ``evaluate``
    calls its parameter on every run: the forward's all-gather, at the call."""
    if not call.args and not call.keywords:
        return None
    args = [a for a in (*call.args, *(k.value for k in call.keywords)) if _key(a) is not None]
    if not args or not any(is_fsdp2(hub, view, a, call) for a in args):
        return None
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, fn = target
    from .unconditional import unconditional
    for pname, arg in _call_args(call, fn):
        if not is_fsdp2(hub, view, arg, call):
            continue
        for c in tv.sem.function_calls(fn):
            f = c.func
            if (isinstance(f, ast.Name) and f.id == pname) or (
                    isinstance(f, ast.Attribute) and f.attr == "forward" and isinstance(f.value, ast.Name)
                    and f.value.id == pname):
                if reaching(tv, pname, c)[0] == "param" and unconditional(tv, c, fn):
                    e = Effect("all_gather", c, tv.path, what="FSDP2's parameter all-gather in the forward")
                    return Site(call, [e.through(fn.name)], "helper")
    return None


def _compiled_call(hub, view, call, Site):
    """``step(x)`` where ``step = torch.compile(train_step)`` (or a module attribute bound so) and
    ``train_step`` is a function of this module: the collectives every call of it makes (a
    compiled function runs them as functional collectives)."""
    f = call.func
    if not isinstance(f, ast.Name) or f.id in view.defs:
        return None
    kind, evs = reaching(view, f.id, call)
    if kind not in ("events", "global") or not evs or len(evs) != 1 or not isinstance(evs[0], ast.Assign):
        return None
    v = evs[0].value
    if not (isinstance(v, ast.Call) and view.sem.call_qualname(v) == "torch.compile" and v.args
            and isinstance(v.args[0], ast.Name) and v.args[0].id in view.defs):
        return None
    fn = view.defs[v.args[0].id]
    effs = hub.summary(view, fn).must
    if not effs:
        return None
    return Site(call, [e.through(f"torch.compile({fn.name})") for e in effs], "helper")


# -- Accelerate ------------------------------------------------------------------------------------
# methods of an ``accelerate.Accelerator`` that run a collective on every process of a multi-process
# run (a no-op on one process, like every collective): op, and what runs it
ACCELERATOR_QNS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
ACCELERATE_METHODS = {
    "gather": ("all_gather", "the all-gather inside `accelerator.gather()`"),
    "gather_for_metrics": ("all_gather", "the all-gather inside `accelerator.gather_for_metrics()`"),
    "reduce": ("all_reduce", "the all-reduce inside `accelerator.reduce()`"),
    "pad_across_processes": ("all_gather", "the size all-gather inside `accelerator.pad_across_processes()`"),
    "wait_for_everyone": ("barrier", "the barrier inside `accelerator.wait_for_everyone()`"),
    "backward": ("all_reduce", "the prepared model's gradient all-reduce inside `accelerator.backward()`"),
}
# the same operations as functions of ``accelerate.utils``
_ACCELERATE_FUNCS = {}
for _m in ("accelerate.utils.", "accelerate.utils.operations."):
    for _n in ("gather", "gather_object", "reduce", "broadcast", "broadcast_object_list", "pad_across_processes"):
        _ACCELERATE_FUNCS[_m + _n] = ({"gather_object": "all_gather_object", "reduce": "all_reduce",
                                        "broadcast": "broadcast", "broadcast_object_list": "broadcast_object_list"}
                                       .get(_n, "all_gather"), f"the collective inside `{_n}()` of Accelerate")
del _m, _n
# torchmetrics' ``gather_all_tensors`` (a barrier, then all-gathers; its ``reduce`` is local arithmetic)
_ACCELERATE_FUNCS["torchmetrics.utilities.distributed.gather_all_tensors"] = (
    "all_gather", "the all-gather inside torchmetrics' `gather_all_tensors()`")


def _accelerate_call(hub, view, call, Effect, Site):
    """A call of Accelerate that runs a collective: ``accelerator.gather(x)`` /
    ``reduce`` / ``pad_across_processes`` / ``wait_for_everyone`` / ``backward`` on a value whose
    origin is an ``Accelerator(...)`` (through names, ``self`` attributes, parameters, helpers:
    ``origins``), ``accelerate.utils.gather(x)`` and its kin, torchmetrics' ``gather_all_tensors(x)``."""
    qn = view.sem.call_qualname(call)
    if qn:
        got = _ACCELERATE_FUNCS.get(qn)
        if got is None:
            return None
        return Site(call, [Effect(got[0], call, view.path, what=got[1])], "hidden")
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr not in ACCELERATE_METHODS:
        return None
    if not is_accelerator(hub, view, f.value, call):
        return None
    op, what = ACCELERATE_METHODS[f.attr]
    return Site(call, [Effect(op, call, view.path, what=what)], "hidden")


# Accelerate's objects that know this process's place: the ``Accelerator``, its process state
ACCELERATE_STATE_QNS = ACCELERATOR_QNS | frozenset(f"accelerate.{m}{c}" for m in ("", "state.")
                                                   for c in ("PartialState", "AcceleratorState"))


def is_accelerator(hub, view, expr, at, qns=ACCELERATOR_QNS) -> bool:
    """Some origin of ``expr`` is an ``accelerate.Accelerator(...)`` call (``qns``: or another
    construction, ``ACCELERATE_STATE_QNS``)."""
    from .origins import origins
    try:
        found = origins(hub, view, expr, at)
    except RecursionError:  # pragma: no cover - defensive
        return False
    if not found and isinstance(expr, ast.Name) and reaching(view, expr.id, at)[0] == "none":
        # a module name set by a function that declares it ``global``
        v = view.sem.single_value(expr.id, view.sem.tree)
        found = [(view, v)] if v is not None else []
    return any(isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in qns for v, e in found)
