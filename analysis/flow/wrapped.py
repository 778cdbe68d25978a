"""Is a value the ``DistributedDataParallel`` wrapper (rather than the module it wraps)?

A question on the origins of a value (``origins.py``: bindings, tuple unpacking, ``self``
attributes across a class's methods, parameters filled by their module's calls, project
functions' returns), with "may" semantics: the answer lists the ``DDP(...)`` constructions the
value may hold on some path. A conditional expression is followed into both branches, unless its
test asks about the wrapping itself (``m.module if hasattr(m, "module") else m``). A value one of
whose origins unwraps (``x.module``, ``getattr(x, "module", x)``) is the unwrapped module: the
answer is empty. ``wrap_guards`` / ``contradicts`` compare the conditions a construction and a
use sit under, spelled the same: a use on the other branch of the same test never sees the wrapper.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent, subtree
from ..torch_api import DDP_CLASS
from . import _NOT_PROJECT
from .assignments import values_through
from .attr_order import dominating_binding, still_reaches, may_reach, runs_only_before
from .class_chains import collect_binding, ctor_chain, runs_first, self_bindings, self_calls
from .instances import class_named
from .records import class_chain
from .origins import origins
from .params import dead_for_callers
from .return_deps import names_reaching, target_names
from .wrap_flags import guard_atoms
from .wrap_views import Origin, bound_at, with_calls  # noqa: F401  (``bound_at`` re-exported)

# calls whose first argument is the value a test asks about (``hasattr(m, "module")``)
_TYPE_TESTS = frozenset({"hasattr", "isinstance", "getattr", "type"})


def wrap_origins(hub, view, expr, at, ordered: bool = True, frames=None) -> tuple[list, bool]:
    """(the (view, ``DDP(...)`` call) origins ``expr`` may hold at ``at``, whether every origin is
    one). Empty when none is, or when some origin unwraps (``x.module``). ``ordered=False``: a
    ``self.<attr>`` binding of any method counts, whatever order the methods run in. ``frames``
    (``origins``'): a parameter is read as the calls that lead to ``at`` bind it."""
    found: list = []
    others = [False]
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        ok = _self_attr(hub, view, expr, at, found, others, ordered)
    else:
        ok = _collect(hub, view, expr, at, found, others, 0, frames=frames or None)
    if ok is False:
        return [], False
    if any(v is not view and not isinstance(o, Origin) for o in found for v, _c in (o,)):
        found = with_calls(hub, view, expr, at, found)
    return found, not others[0]


def _self_attr(hub, view, expr, at, found, others, ordered=True):
    """``self.<attr>``: its bindings in the methods of the class and of its project base classes
    (``self.model = DDP(...)`` in a trainer base class of another module). A binding counts for a
    read in another method only when it runs first: in ``__init__``, or in a method ``__init__``
    calls (``self.setup()``); a method the class's users call in some order (``compile()`` then
    ``prepare_distributed()``) is not assumed to run before the read. Any binding that unwraps, in
    any method, makes the answer "unwrapped"."""
    fn = view.sem.enclosing_function(at)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return True
    last = dominating_binding(fn, expr.attr, at) if ordered else None
    # a base class's ``__init__`` parameter: the argument its subclass passes to ``super().__init__``
    ctx_of = {id(c): f for _v, c, f in ctor_chain(hub, view, cls)}
    for v, c in class_chain(hub, view, cls):
        early = runs_first(c)
        for m, val, path in self_bindings(c, expr.attr):
            if last is not None and not any(still_reaches(s, last, at) for s in ([parent(val)] if m is fn else self_calls(fn, m.name))):
                continue  # overwritten by the read's own method before the read (or the call of ``m``), on every path
            if ordered and m is fn and not may_reach(parent(val), at):
                continue  # the read's own method binds it only after the read: the read sees the value before
            if ordered and m is not fn and v is view and m.name in early and runs_only_before(view, fn, m, parent(val)):
                continue  # the read's method runs only from ``m``, before ``m`` binds it
            if ordered and m is not fn and m.name not in early:
                # still an unwrap anywhere makes the attribute unwrapped on some path
                if any(is_unwrap(e) for _v, e in origins(hub, v, val, val, 0, path)):
                    return False
                continue
            fr = ctx_of.get(id(c)) if m.name == "__init__" else None
            if collect_binding(hub, _collect, v, val, found, others, 0, path, fr or None) is False:
                return False
    return True


def _rebound_attrs(sem, scope) -> tuple[frozenset, frozenset]:
    """(every ``(name, attr)`` of a ``name.attr`` stored or deleted anywhere in ``scope``, every
    ``name`` handed first to ``setattr``/``delattr`` there): one scan per scope and module view,
    kept on its semantic model, instead of one per query."""
    memo = getattr(sem, "_rebound_attrs", None)
    if memo is None:
        memo = sem._rebound_attrs = {}
    got = memo.get(scope)
    if got is None:
        stored = set()
        reflected = set()
        for n in subtree(scope):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)) \
                    and isinstance(n.value, ast.Name):
                stored.add((n.value.id, n.attr))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("setattr", "delattr") \
                    and n.args and isinstance(n.args[0], ast.Name):
                reflected.add(n.args[0].id)
        got = memo[scope] = (frozenset(stored), frozenset(reflected))
    return got


def _instance_field(hub, view, expr, at, found, others, depth):
    """``x.<attr>`` where every origin of ``x`` constructs a project class (``trainer =
    Trainer(cfg)``): the ``self.<attr>`` bindings its construction runs (the ``__init__`` of the
    class and of its project base classes, and the methods they call on ``self``), each followed
    in the context of that construction (``ctor_chain``: a parameter of ``__init__`` is the
    construction's argument; of a base class's, what the subclass passes to
    ``super().__init__``). None when not followed (an origin that constructs nothing known, or a
    class that binds no such attribute); False when a binding unwraps."""
    scope = view.sem.enclosing_function(at) or view.tree
    while isinstance(scope, ast.Lambda):  # a closure reads the enclosing function's instance
        scope = view.sem.enclosing_function(scope) or view.tree
    name = expr.value.id
    stored, reflected = _rebound_attrs(view.sem, scope)
    if (name, expr.attr) in stored or name in reflected:
        # ``trainer.model = trainer.model.module`` in the reading scope: not what the class binds
        return None
    base = origins(hub, view, expr.value, at)
    if not base or len(base) > 4:
        return None
    todo = []
    for bv, b in base:
        got = hub.resolve_class(bv, b.func) if isinstance(b, ast.Call) else None
        if got is None:
            return None
        todo.append((bv, b, got))
    any_binding = False
    for bv, b, (cv, cls) in todo:
        for v, c, fr in ctor_chain(hub, cv, cls, b, bv):
            early = runs_first(c)
            for m, val, path in self_bindings(c, expr.attr):
                if m.name not in early:
                    if any(is_unwrap(e) for _v, e in origins(hub, v, val, val, 0, path)):
                        return False
                    continue
                any_binding = True
                if collect_binding(hub, _collect, v, val, found, others, depth, path,
                                    (fr or None) if m.name == "__init__" else None) is False:
                    return False
    return True if any_binding else None


def init_param_bindings(hub, view, expr, at) -> list:
    """The ``<param>`` (a name read in ``__init__``) of each ``self.<attr> = <param>`` in the ``__init__`` of the class
    (or of a base class in the same module) of the method that reads ``expr`` (``self.<attr>``) at
    ``at``, where ``<param>`` is a parameter that ``__init__`` never rebinds: the value is what
    the class's constructor calls pass (``Trainer(autoencoder=model)``), which the callers of
    another module may show (``rules._training.callers_pass_wrapper``). Empty when a binding of
    ``self.<attr>`` in the class or its project base classes unwraps (``self.model =
    model.module``), or when the reading method rebinds it before the read on every path."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return []
    fn = view.sem.enclosing_function(at)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return []
    last = dominating_binding(fn, expr.attr, at)
    out = []
    for v, c in class_chain(hub, view, cls, _NOT_PROJECT):
        for m, val, path in self_bindings(c, expr.attr):
            if any(is_unwrap(e) for _v, e in origins(hub, v, val, val, 0, path)):
                return []
            if v is not view or m.name != "__init__" or path or not isinstance(val, ast.Name) \
                    or val.id not in _param_names(m) or view.sem.assignments(m).get(val.id):
                continue
            if last is not None and parent(val) is not last:
                continue  # the reading method binds it itself first
            out.append(val)
    return out


def _param_names(fn) -> set:
    a = fn.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)} - {"self"}


def _collect(hub, view, expr, at, found, others, depth, path=(), frames=None):
    """Fill ``found`` with the DDP constructions among the origins; False when one unwraps.
    ``frames``: the constructor calls the value is read in the context of (``origins``)."""
    for v, e, p, *fr in origins(hub, view, expr, at, 0, path, keep_path=True, frames=frames):
        fr = fr[0] if fr else None
        if isinstance(e, ast.IfExp) and depth < 3:
            if tests_wrapping(e.test):
                return False  # ``m.module if hasattr(m, "module") else m``: an unwrap
            for branch in (e.body, e.orelse):
                if _collect(hub, v, branch, e, found, others, depth + 1, frames=fr) is False:
                    return False
            continue
        if isinstance(e, ast.BoolOp) and isinstance(e.op, ast.Or) and depth < 3:
            for x in e.values:
                if _collect(hub, v, x, e, found, others, depth + 1, frames=fr) is False:
                    return False
            continue
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in SELF_RETURNING \
                and depth < 3 and not is_unwrap(e.func.value):
            # ``model.to(device)``, ``model.cuda()``: nn.Module's methods that return the module
            if _collect(hub, v, e.func.value, e, found, others, depth + 1, frames=fr) is False:
                return False
            continue
        if is_unwrap(e):
            return False
        if isinstance(e, ast.Attribute) and isinstance(e.ctx, ast.Load) and isinstance(e.value, ast.Name) \
                and e.value.id not in ("self", "cls") and e.value.id not in v.imports and depth < 3:
            # ``trainer.model`` of ``trainer = Trainer(cfg)``: what its construction binds
            got = _instance_field(hub, v, e, e, found, others, depth + 1)
            if got is False:
                return False
            if got:
                continue
        if isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") == DDP_CLASS:
            if dead_for_callers(v, hub, e):
                continue  # ``if distributed: m = DDP(m)`` where every call passes a false flag
            if not any(c is e for _, c in found):
                found.append((v, e))
            continue
        if isinstance(e, ast.Call) and not (v.sem.call_qualname(e) or "torch.").startswith("torch."):
            # ``self.model = wrap(self.model)``: a project helper every return of which is the wrapper
            w = hub.wrapper_ctor(v, e, e)
            wv = hub.ctor_views.get(id(w), v) if w is not None else None
            if wv is not None and (wv.sem.call_qualname(w) or "") == DDP_CLASS:
                if not any(c is w for _, c in found):
                    found.append(Origin(wv, w, (v, e)))
                continue
        others[0] = True  # (a prepared model is the plain module on one process)
        if isinstance(e, ast.Call) and prepares_model(hub, v, e, p) and not any(c is e for _, c in found):
            found.append((v, e))
    return True


ACCELERATOR = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
# an Accelerator built with one of these prepares a DeepSpeed engine, an FSDP or Megatron module, a
# tensor-parallel model: they forward attribute reads to the model (not DDP)
NOT_DDP_PLUGINS = frozenset({"deepspeed_plugin", "fsdp_plugin", "megatron_lm_plugin", "parallelism_config",
                             "torch_tp_plugin"})


def prepares_model(hub, view, call, path=()) -> bool:
    """``accelerator.prepare(model, ...)``, element ``path[0]`` of its result: an ``nn.Module``
    that Accelerate wraps in DistributedDataParallel when it runs on several processes (the
    receiver is an ``accelerate.Accelerator(...)`` built without a DeepSpeed/FSDP/Megatron/TP
    plugin; the argument is built by a ``torch.nn`` layer, a project class deriving from
    ``nn.Module``, a model class of ``transformers``/``diffusers`` (built, or its
    ``from_pretrained``), a torchvision or timm model builder, or ``peft.get_peft_model``; or it
    is used as a trained model where it is bound: ``trained_as_model``)."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr == "prepare") or any(
            isinstance(a, ast.Starred) for a in call.args) or any(k.arg != "device_placement" for k in call.keywords):
        return False  # (``device_placement=[...]`` only moves the model: it is wrapped all the same)
    i = path[0] if path else 0
    if (not path and len(call.args) != 1) or i >= len(call.args):
        return False
    if not any(isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in ACCELERATOR
               and not any(k.arg in NOT_DDP_PLUGINS and not _may_be_none(hub, v, k.value, e) for k in e.keywords)
               for v, e in leaves(hub, view, f.value, call)):
        return False
    if any(_is_module_ctor(hub, v, e) for v, e in leaves(hub, view, call.args[i], call)):
        return True
    return trained_as_model(view, call, path)


def _may_be_none(hub, view, e, at) -> bool:
    """Some origin of ``e`` at ``at`` is ``None`` (a plugin a helper returns only when its option
    is on leaves the plain DDP path open)."""
    return any(isinstance(x, ast.Constant) and x.value is None for _v, x in leaves(hub, view, e, at))


def trained_as_model(view, call, path=()) -> bool:
    """The element ``path[0]`` of ``call``'s result (``model, opt = accelerator.prepare(model, opt)``),
    bound to a name or a ``self.<attr>``, is used as a trained ``nn.Module`` where it is bound (its
    function, or the methods of its class for ``self.<attr>``): it is called and that call's result
    reaches a ``backward`` (``loss = model(**batch).loss; accelerator.backward(loss)``), or it is
    handed to ``accelerator.accumulate(...)`` or ``accelerator.unwrap_model(...)`` (the code itself
    takes it for a model that Accelerate wraps). An optimizer, a loader or a scheduler is none of
    these."""
    memo = view.memo.setdefault("wrapped.trained_as_model", {})
    key = (id(call), tuple(path))
    got = memo.get(key)
    if got is None or got[0] is not call:
        got = memo[key] = (call, _trained_as_model(view, call, path))
    return got[1]


def _trained_as_model(view, call, path) -> bool:
    st = parent(call)
    if not isinstance(st, ast.Assign) or len(st.targets) != 1:
        return False
    t = st.targets[0]
    if path:
        if not isinstance(t, (ast.Tuple, ast.List)) or path[0] >= len(t.elts) or any(
                isinstance(x, ast.Starred) for x in t.elts):
            return False
        t = t.elts[path[0]]
    elif isinstance(t, (ast.Tuple, ast.List)):
        return False
    fn = view.sem.enclosing_function(st)
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
        cls = parent(fn) if fn is not None else None
        if not isinstance(cls, ast.ClassDef):
            return False
        scopes = [m for m in cls.body if isinstance(m, FUNC_TYPES)]
    elif isinstance(t, ast.Name):
        scopes = [fn if fn is not None else view.tree]
    else:
        return False
    key = _ref(t)
    for scope in scopes:
        for n in iter_scope_nodes(scope):
            if not isinstance(n, ast.Call):
                continue
            if _ref(n.func) == key and _reaches_backward(view, n, scope):
                return True
            if isinstance(n.func, ast.Attribute) and n.func.attr in ("accumulate", "unwrap_model") and n.args \
                    and _ref(n.args[0]) == key:
                return True
    return False


def _ref(e):
    """A name or ``self.<attr>``, whatever its context (load or store)."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return ("self", e.attr)
    return None


def _is_backward(n) -> bool:
    return isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"


def _reaches_backward(view, call, scope) -> bool:
    """The value of ``call`` reaches a ``backward`` call of ``scope``: inside its receiver or
    arguments, or bound to a name of ``_backward_names`` (a superset: order is ignored)."""
    p = parent(call)
    while p is not None and not isinstance(p, ast.stmt):
        if _is_backward(p):
            return True
        p = parent(p)
    st = p
    if st is None:
        return False
    if not isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return False
    return bool(target_names(st) & _backward_names(view, scope))


def _backward_names(view, scope) -> frozenset:
    """The names whose values reach a ``backward`` call of ``scope`` (``return_deps.names_reaching``
    from its receiver and arguments), once per scope."""
    memo = view.memo.setdefault("wrapped.backward_names", {})
    got = memo.get(id(scope))
    if got is not None and got[0] is scope:
        return got[1]
    nodes = list(iter_scope_nodes(scope))
    names = names_reaching([b for b in nodes if _is_backward(b)],
                           [s for s in nodes if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))])
    memo[id(scope)] = (scope, names)
    return names


def _is_module_ctor(hub, view, e) -> bool:
    if not isinstance(e, ast.Call):
        return False
    qn = view.sem.call_qualname(e) or ""
    last = qn.rsplit(".", 1)[-1]
    if qn.startswith("torch.nn.") and last[:1].isupper() and ".functional." not in qn:
        return True
    if qn in ("peft.get_peft_model", "peft.mapping.get_peft_model", "timm.create_model"):
        return True
    if qn.startswith("torchvision.models.") and last[:1].islower() and (last == "get_model" or not last.startswith(
            ("get_", "list_"))):
        return True  # a model builder: ``torchvision.models.resnet50()`` (not ``get_weight``)
    if qn.startswith(("transformers.", "diffusers.")) and last[:1].isupper() and ("Model" in last or "For" in last):
        return True  # ``InformerForPrediction(config)``, ``UNet2DModel(...)``
    if qn.startswith(("transformers.", "diffusers.")) and last == "from_pretrained":
        cls = qn.rsplit(".", 2)[-2]
        return "Model" in cls or "For" in cls
    if isinstance(e.func, ast.Name):
        got = class_named(hub, view, e.func, _NOT_PROJECT)
        if got is not None:
            return any(any((v.sem.qualname(b) or "") == "torch.nn.Module" for b in c.bases)
                       for v, c in class_chain(hub, got[0], got[1], _NOT_PROJECT))
    return False


def is_model_class(hub, view, e) -> bool:
    """``e`` names a model class: a project class deriving from ``torch.nn.Module`` (through its
    project base classes), a ``torch.nn`` layer class (not a parallel wrapper), or a
    ``transformers``/``diffusers`` model class (``...Model``, ``...For...``)."""
    qn = view.sem.qualname(e) or ""
    last = qn.rsplit(".", 1)[-1]
    if qn.startswith("torch.nn.") and not qn.startswith("torch.nn.parallel.") and last[:1].isupper() \
            and last not in ("DataParallel", "Module", "DistributedDataParallel"):
        return True
    if qn.startswith(("transformers.", "diffusers.")) and ("Model" in last or "For" in last):
        return True
    got = class_named(hub, view, e, _NOT_PROJECT)
    if got is None:
        return False
    return any(any((v.sem.qualname(b) or "") == "torch.nn.Module" for b in c.bases)
               for v, c in class_chain(hub, got[0], got[1], _NOT_PROJECT))


def leaves(hub, view, expr, at, depth: int = 0) -> list:
    """The (view, expression) origins of ``expr``, with conditional expressions, ``or`` and the
    module methods that return the module itself (``.to(device)``) followed."""
    out = []
    for v, e in origins(hub, view, expr, at):
        if depth < 3 and isinstance(e, ast.IfExp):
            out += leaves(hub, v, e.body, e, depth + 1) + leaves(hub, v, e.orelse, e, depth + 1)
        elif depth < 3 and isinstance(e, ast.BoolOp) and isinstance(e.op, ast.Or):
            for x in e.values:
                out += leaves(hub, v, x, e, depth + 1)
        elif depth < 3 and isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) \
                and e.func.attr in SELF_RETURNING:
            out += leaves(hub, v, e.func.value, e, depth + 1)
        else:
            out.append((v, e))
    return out


# nn.Module methods that return the module itself
SELF_RETURNING = frozenset({"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval",
                            "requires_grad_", "share_memory", "to_empty", "apply", "xpu", "ipu", "mtia"})


def is_unwrap(e) -> bool:
    """``x.module`` / ``getattr(x, "module", ...)``: the wrapped module, read out of a wrapper."""
    if isinstance(e, ast.Attribute) and e.attr == "module":
        return True
    return (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "getattr"
            and len(e.args) >= 2 and isinstance(e.args[1], ast.Constant) and e.args[1].value == "module")


def unwrap_reads(hub, view, expr, at) -> list | None:
    """The ``x.module`` / ``getattr(x, "module", ...)`` reads that every origin of ``expr`` at
    ``at`` is: a plain unwrap, or a conditional expression that asks about the wrapping and
    unwraps on one side (``m.module if isinstance(m, DDP) else m``: the other side is taken only
    when ``m`` is no wrapper). None when some origin is anything else, or none is known."""
    got = origins(hub, view, expr, at)
    if not got:
        return None
    out = []
    for _v, e in got:
        if is_unwrap(e):
            out.append(e)
        elif isinstance(e, ast.IfExp) and tests_wrapping(e.test) and (is_unwrap(e.body) or is_unwrap(e.orelse)):
            out.append(e.body if is_unwrap(e.body) else e.orelse)
        else:
            return None
    return out


def unwrapped_only(hub, view, expr, at) -> bool:
    """Every origin of ``expr`` at ``at`` reads the module out of its wrapper (``unwrap_reads``)."""
    return unwrap_reads(hub, view, expr, at) is not None


def unwrapped_base(e):
    """The wrapper an unwrap read reads from: ``x`` of ``x.module`` / ``getattr(x, "module")``."""
    return e.value if isinstance(e, ast.Attribute) else e.args[0]


def tests_wrapping(test) -> bool:
    """A test that asks what a value is: ``hasattr``/``isinstance``/``getattr``/``type`` on it."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _TYPE_TESTS
               for n in ast.walk(test))


def tested_values(test) -> list:
    """The first arguments of the ``hasattr``/``isinstance``/``getattr``/``type`` calls of a test."""
    return [n.args[0] for n in ast.walk(test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in _TYPE_TESTS and n.args]


def guards(node, settled: bool = False) -> list[tuple[ast.AST, bool]]:
    """(test, branch) of each ``if`` statement / conditional expression around ``node`` in its
    function (``True``: in the body, ``False``: in the ``else``); with ``settled``, also of each
    test that an earlier statement of an enclosing block settles on the way to ``node``: ``assert
    t`` (``True``), ``if t: raise``/``return`` with no ``else`` (``False``). Those are facts, not
    guards: a ``hasattr(model, ...)`` among them does not handle a read of ``model``."""
    out = []
    child, p = node, parent(node)
    while p is not None and not isinstance(p, ast.Lambda):
        for block in _blocks(p) if settled else ():
            if any(child is b for b in block):
                out.extend(_settled(block, child))
        if isinstance(p, (*FUNC_TYPES, ast.ClassDef, ast.Module)):
            break
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            body = p.body if isinstance(p.body, list) else [p.body]
            out.append((p.test, any(child is b for b in body)))
        child, p = p, parent(p)
    return out


def _blocks(p) -> list:
    return [b for b in (getattr(p, f, None) for f in ("body", "orelse", "finalbody"))
            if isinstance(b, list)]


def _settled(block: list, child) -> list:
    """The tests the statements before ``child`` in ``block`` settle on every path that reaches it."""
    out = []
    for st in block:
        if st is child:
            break
        if isinstance(st, ast.Assert):
            out.append((st.test, True))
        elif isinstance(st, ast.If) and not st.orelse and st.body \
                and isinstance(st.body[-1], (ast.Raise, ast.Return)):
            out.append((st.test, False))
    return out


def _norm(test, branch: bool):
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _norm(test.operand, not branch)
    return ast.dump(test), branch


def _atoms(guards_: list):
    """``guard_atoms``, each test spelled as its dump."""
    return [_norm(t, br) for t, br in guard_atoms(guards_)]


def contradicts(a: list, b: list) -> bool:
    """Two lists of ``guards`` hold the same test on opposite branches (also an operand of an
    ``and`` that holds, or of an ``or`` that fails)."""
    na = dict(_atoms(a))
    return any(na.get(k, br) != br for k, br in _atoms(b))


def implied(a: list, b: list) -> bool:
    """Every ``if`` test of the ``guards`` list ``a`` is one of ``b`` on the same branch (a use
    that runs no more conditionally than the wrap it sees)."""
    nb = {_norm(t, br) for t, br in b}
    return all(_norm(t, br) in nb for t, br in a)


def handles_attribute_error(node) -> bool:
    """``node`` runs inside a ``try`` whose handler catches AttributeError (or everything)."""
    child, p = node, parent(node)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
        if isinstance(p, ast.Try) and any(child is s for s in p.body):
            for h in p.handlers:
                names = [] if h.type is None else (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])
                if h.type is None or any(isinstance(n, (ast.Name, ast.Attribute)) and (
                        n.id if isinstance(n, ast.Name) else n.attr) in (
                        "AttributeError", "Exception", "BaseException") for n in names):
                    return True
        child, p = p, parent(p)
    return False


# -- a use whose None test rules out the branch the wrap was built on --------------------------------

def _none_test(test, branch: bool):
    """(name, whether the use needs it None) for a guard ``(test, branch)`` that tests a plain name
    against None (``x is None``, ``x is not None``), else None."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _none_test(test.operand, not branch)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None:
        return test.left.id, branch == isinstance(test.ops[0], ast.Is)
    return None


def _never_none(hub, view, e) -> bool:
    """``e`` is never None: a literal other than None, a display, arithmetic, or the construction
    of a project class."""
    if isinstance(e, ast.Constant):
        return e.value is not None
    if isinstance(e, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp,
                      ast.JoinedStr, ast.BinOp)):
        return True
    return isinstance(e, ast.Call) and class_named(hub, view, e.func, _NOT_PROJECT) is not None


def _arm_binding(caller_fn, wrap, name: str, site):
    """The value of the last plain ``name = <value>`` in the innermost ``if`` branch around ``wrap``
    (in ``caller_fn``) that binds ``name`` and that ``site`` runs after (or within, after the
    binding), with no other binding of ``name`` between that branch and ``site``; else None."""
    child, p = wrap, parent(wrap)
    while p is not None and p is not caller_fn:
        if isinstance(p, ast.If) and child is not p.test:
            arm = p.body if any(child is s for s in p.body) else p.orelse
            got = [s for s in arm if isinstance(s, ast.Assign) and len(s.targets) == 1
                   and isinstance(s.targets[0], ast.Name) and s.targets[0].id == name
                   and (s.lineno, s.col_offset) < (site.lineno, site.col_offset)]
            if got:
                last = got[-1]
                inside = p.lineno <= site.lineno <= p.end_lineno
                start = last.end_lineno if inside else p.end_lineno
                for n in iter_scope_nodes(caller_fn):
                    if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) \
                            and start < n.lineno <= site.lineno and n is not last.targets[0]:
                        return None  # rebound between the branch and the use
                return last.value
        child, p = p, parent(p)
    return None


def branch_excludes_wrap(hub, use_view, node, wrap_view, wrap) -> bool:
    """A use ``node`` sits behind a None test that the branch of the wrap ``wrap`` (or the caller's
    one binding of the name, ``scaler = Scaler()`` on every path) makes fail:
    ``if use_amp: scaler = Scaler(); model = DDP(model) else: scaler = None; model = engine`` and
    ``if scaler is None: model.backward(loss)`` (here, or in a helper the caller passes ``scaler``
    to): the wrapper never reaches that read. Every call of the use's function from the wrap's
    function must pass a name that the wrap's branch binds to the failing kind of value."""
    caller_fn = wrap_view.sem.enclosing_function(wrap)
    fn = use_view.sem.enclosing_function(node)
    if caller_fn is None or fn is None:
        return False
    from .helper_calls import bind_args

    for test, branch in guards(node):
        t = _none_test(test, branch)
        if t is None:
            continue
        name, need_none = t
        if fn is caller_fn:
            sites = [(node, name)]
        else:
            if name not in _param_names(fn) or any(
                    isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
                    for n in iter_scope_nodes(fn)):
                continue
            sites = []
            for c in wrap_view.sem.scope_calls(caller_fn):
                f = c.func
                if (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) != fn.name:
                    continue
                a = bind_args(c, fn).get(name)
                sites.append((c, a.id if isinstance(a, ast.Name) else None))
        if not sites:
            continue
        ok = True
        for site, q in sites:
            # bound in the wrap's branch, on each path through the wrap, or once in the whole caller
            val = None if q is None else (_arm_binding(caller_fn, wrap, q, site) or values_through(
                wrap_view.sem, caller_fn, wrap, q, site) or wrap_view.sem.single_value(q, caller_fn))
            if not val or not all(_never_none(hub, wrap_view, v) if need_none else isinstance(v, ast.Constant)
                                  and v.value is None for v in (val if isinstance(val, list) else [val])):
                ok = False
                break
        if ok:
            return True
    return False
