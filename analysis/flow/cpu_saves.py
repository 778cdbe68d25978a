"""Is what a ``torch.save`` writes known to live on the CPU? Loaded back without ``map_location``, a
file holds its tensors where they were saved from: a file whose every save is a CPU value comes
back on the CPU on every rank.

A value is on the CPU (``on_cpu``) when it is a literal or None; a tensor that a torch constructor
makes without ``device=`` (``torch.arange(n)``, ``torch.zeros(k)``, the typed constructors
``torch.LongTensor(xs)``, which only make CPU tensors); ``.cpu()`` of anything, ``.long()`` /
``.clone()`` ... of a CPU value; ``torch.cat`` / ``torch.stack`` of CPU values; the
``state_dict()`` of a learning-rate scheduler (``scheduler_class``: ``torch.optim.lr_scheduler``, Megatron's, a project subclass or factory of one; ``holds_class``:
counters, floats and lists of them); either branch of a
conditional expression; a name every binding of which is one. An attribute read (``pool.idx``) is
on the CPU when every store to an attribute of that name in the project (``x.idx = ...`` on any
object: ``files(word)`` lists the modules that name it) is, with a read of the same attribute and a
load of the same file counting as the value itself (they hold what an earlier store or save held),
and a constructor parameter stored there when every call of its class in those modules passes
CPU values for it (a parameter left out keeps its default). Anything else is unknown (False)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, param_defaults, parent
from .bindings import reaching
from .calls import call_args
from .offload import offloaded_state

# make a tensor on the default device (the CPU) unless given ``device=``
_CTORS = frozenset("torch." + n for n in (
    "arange", "zeros", "ones", "empty", "full", "randperm", "linspace", "eye", "range"))
# the typed legacy constructors make CPU tensors only
_TYPED = frozenset("torch." + n for n in (
    "LongTensor", "IntTensor", "FloatTensor", "DoubleTensor", "BoolTensor", "ByteTensor", "ShortTensor",
    "HalfTensor"))
_KEEPS = frozenset(("long", "int", "float", "double", "bool", "half", "short", "byte", "clone", "detach",
                    "contiguous", "flatten", "view", "reshape", "squeeze", "unsqueeze", "sort", "unique"))
_JOINS = frozenset(("torch.cat", "torch.stack", "torch.concat", "torch.concatenate"))
_MAX_DEPTH = 6


_SCHEDULERS = "torch.optim.lr_scheduler."
# library schedulers outside torch whose state is counters and floats too (Megatron's parameter
# scheduler), and the library factories that return a ``torch.optim.lr_scheduler`` class
_OTHER_SCHEDULERS = frozenset({
    "megatron.core.optimizer_param_scheduler.OptimizerParamScheduler",
    "megatron.training.optimizer_param_scheduler.OptimizerParamScheduler",
    "megatron.optimizer_param_scheduler.OptimizerParamScheduler",
    *(f"transformers{m}.get_{n}" for m in ("", ".optimization") for n in (
        "scheduler", "constant_schedule", "constant_schedule_with_warmup", "linear_schedule_with_warmup",
        "cosine_schedule_with_warmup", "cosine_with_hard_restarts_schedule_with_warmup",
        "polynomial_decay_schedule_with_warmup", "inverse_sqrt_schedule", "wsd_schedule",
        "cosine_with_min_lr_schedule_with_warmup"))})


def scheduler_class(qn: str) -> bool:
    """``qn`` (a class, or a library factory) makes a learning-rate scheduler whose state dict
    holds no tensor."""
    return qn.startswith(_SCHEDULERS) or qn in _OTHER_SCHEDULERS


_ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})


def holds_class(hub, view, e, at, pred, depth: int = 0, seen: frozenset = frozenset()) -> bool:
    """Every value ``e`` may hold at ``at`` is an instance of a library class whose qualified name
    ``pred`` accepts: its constructor's result (``LinearLR(opt, ...)``), a parameter annotated with
    it (``sched: torch.optim.lr_scheduler.LRScheduler``), or what an ``Accelerator``'s ``prepare``
    / ``unwrap_model`` returns for one (the wrapper it makes hands on the object's own state), followed
    through names (every reaching binding, a tuple element by its place) and ``self.<attr>`` (every
    binding in the methods of its class; a binding that reads the attribute back while it is judged,
    ``self.s = acc.prepare(self.s)``, holds what the others hold). Anything else, or no binding
    seen: False."""
    if depth > 6 or e is None:
        return False
    if isinstance(e, ast.Call):
        if pred(view.sem.call_qualname(e) or ""):
            return True
        inner = _passed_through(hub, view, e, None, depth)
        if inner is not None:
            return holds_class(hub, view, inner, e, pred, depth + 1, seen)
        return _built_by_project(hub, view, e, pred, depth, seen)
    if isinstance(e, ast.IfExp):
        return holds_class(hub, view, e.body, at, pred, depth + 1, seen) and \
            holds_class(hub, view, e.orelse, at, pred, depth + 1, seen)
    if isinstance(e, ast.Name):
        kind, evs = reaching(view, e.id, at)
        if kind == "param":
            return _annotated(view, evs, e.id, pred) or _passed_by_callers(hub, view, evs, e.id, pred, depth, seen)
        if kind != "events" or not evs:
            return False
        return all(_binding_holds(hub, view, ev, e.id, pred, depth, seen) for ev in evs)
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        from .instances import method_class

        cls = method_class(view, e)
        if cls is None:
            return False
        key = (id(cls), e.attr)
        if key in seen:
            return True
        seen = seen | {key}
        stores = [(v, n, t) for v, c in _class_family(hub, view, cls) for m in c.body if isinstance(m, FUNC_TYPES)
                  for n in iter_scope_nodes(m)
                  if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.With,
                                    ast.AsyncWith))
                  for t in _targets(n) for x in ast.walk(t)
                  if isinstance(x, ast.Attribute) and x.attr == e.attr and isinstance(x.value, ast.Name)
                  and x.value.id == "self" and isinstance(x.ctx, ast.Store)]
        # ``self.sched = None`` (a base class's placeholder) leaves the answer as it is: a method
        # called on the attribute never runs on None
        stores = [s for s in stores if not (isinstance(s[1], (ast.Assign, ast.AnnAssign)) and isinstance(s[2], ast.Attribute)
                                            and isinstance(s[1].value, ast.Constant) and s[1].value.value is None)]
        return bool(stores) and all(_store_holds(hub, v, n, t, e.attr, pred, depth, seen) for v, n, t in stores)
    return False


def _built_by_project(hub, view, call: ast.Call, pred, depth: int, seen) -> bool:
    """``call`` builds a project class derived from a library class ``pred`` accepts that keeps the
    library's state methods (no class of the project part of its chain defines ``state_dict`` or
    ``load_state_dict``: ``class WarmupLR(LambdaLR)``), or runs a project function every ``return``
    of which (at least one, no ``yield``) holds such an instance (``get_lr_scheduler(args, opt)``)."""
    from .records import _NOT_PROJECT, class_chain, class_named

    if isinstance(call.func, (ast.Name, ast.Attribute)):
        got = class_named(hub, view, call.func, _NOT_PROJECT)
        if got is not None:
            chain = class_chain(hub, *got)
            if any(isinstance(m, FUNC_TYPES) and m.name in ("state_dict", "load_state_dict")
                   for _v, c in chain for m in c.body):
                return False
            return any(pred(v.sem.qualname(b) or "") for v, c in chain for b in c.bases)
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES) or target[1].name == "__init__" \
            or depth >= _MAX_DEPTH:
        return False
    tv, fn = target
    rets = []
    for n in iter_scope_nodes(fn):
        if n.__class__ in (ast.Yield, ast.YieldFrom):
            return False
        if n.__class__ is ast.Return:
            rets.append(n)
    return bool(rets) and len(rets) <= 8 and all(
        holds_class(hub, tv, r.value, r, pred, depth + 1, seen) for r in rets)


def _class_family(hub, view, cls) -> list:
    """(view, class) of ``cls``, its project base classes (``records.class_chain``) and the
    classes of its module that derive from it: the methods that may store ``self.<attr>`` of an
    instance whose method reads it."""
    from .records import class_chain

    out = class_chain(hub, view, cls)
    for c in view.classes.values():
        if c is not cls and any(x is cls for _v, x in class_chain(hub, view, c)[1:]):
            out.extend((v, x) for v, x in class_chain(hub, view, c) if all(x is not y for _w, y in out))
    return out


def _targets(n) -> list:
    if isinstance(n, ast.Assign):
        return n.targets
    if isinstance(n, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        return [n.target]
    return [it.optional_vars for it in n.items if it.optional_vars is not None]


def _store_holds(hub, view, n, t, attr: str, pred, depth: int, seen) -> bool:
    """The store of ``self.<attr>`` by ``n`` (through its target ``t``) puts such an instance there."""
    if not isinstance(n, (ast.Assign, ast.AnnAssign)) or n.value is None:
        return False
    if isinstance(t, ast.Attribute):
        return holds_class(hub, view, n.value, n, pred, depth + 1, seen)
    if isinstance(t, (ast.Tuple, ast.List)) and isinstance(n.value, ast.Call):
        for i, x in enumerate(t.elts):
            if isinstance(x, ast.Attribute) and x.attr == attr and isinstance(x.value, ast.Name) and x.value.id == "self":
                inner = _passed_through(hub, view, n.value, i, depth)
                return inner is not None and holds_class(hub, view, inner, n, pred, depth + 1, seen)
    return False


def _binding_holds(hub, view, ev, name: str, pred, depth: int, seen) -> bool:
    if not isinstance(ev, ast.Assign) or len(ev.targets) != 1:
        return False
    t = ev.targets[0]
    if isinstance(t, ast.Name):
        return holds_class(hub, view, ev.value, ev, pred, depth + 1, seen)
    if isinstance(t, (ast.Tuple, ast.List)) and isinstance(ev.value, ast.Call):
        for i, x in enumerate(t.elts):
            if isinstance(x, ast.Name) and x.id == name:
                inner = _passed_through(hub, view, ev.value, i, depth)
                return inner is not None and holds_class(hub, view, inner, ev, pred, depth + 1, seen)
    return False


def _passed_through(hub, view, call, place, depth: int):
    """The argument an ``Accelerator``'s ``prepare(...)`` (element ``place`` of its result; None:
    the whole result of a one-argument call) or ``unwrap_model(x)`` gives back wrapped; else None."""
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr not in ("prepare", "unwrap_model") or call.keywords \
            or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    i = 0 if place is None else place
    if (place is None and len(call.args) != 1) or i >= len(call.args) or (f.attr == "unwrap_model" and place is not None):
        return None
    if not holds_class(hub, view, f.value, call, _ACCELERATORS.__contains__, depth + 1):
        return None
    return call.args[i]


def _passed_by_callers(hub, view, fn, name: str, pred, depth: int, seen) -> bool:
    """Every call of ``fn`` in its module (at least one: ``hub.call_sites``) passes such an
    instance for its parameter ``name`` (``resume(net, opt, sched)``)."""
    if not isinstance(fn, FUNC_TYPES) or depth >= _MAX_DEPTH:
        return False
    sites = hub.call_sites(view, fn)
    if not sites:
        return False
    for c in sites:
        args = [a for p, a in call_args(c, fn) if p == name]
        if len(args) != 1 or not holds_class(hub, view, args[0], c, pred, depth + 1, seen):
            return False
    return True


def _annotated(view, fn, name: str, pred) -> bool:
    """The parameter ``name`` of ``fn`` is annotated with a class ``pred`` accepts."""
    if not isinstance(fn, FUNC_TYPES):
        return False
    a = fn.args
    for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        if p.arg == name:
            return p.annotation is not None and pred(view.sem.qualname(p.annotation) or "")
    return False


class CpuSaves:
    """``files(word)``: (view) of every module of the project whose text names ``word`` (None when
    the list may be incomplete); ``fname``: the file name being judged (a load of it is itself);
    ``file_name(view, path, at)``: the name of the file a path expression names."""

    def __init__(self, files, fname: str, file_name, hub=None):
        self.files, self.fname, self.file_name, self.hub = files, fname, file_name, hub
        self.busy: set = set()

    def on_cpu(self, view, e, at, depth: int = 0) -> bool:
        if depth > _MAX_DEPTH or e is None:
            return False
        t = e.__class__
        if t is ast.Constant:
            return True
        if t in (ast.List, ast.Tuple):
            return all(self.on_cpu(view, x, at, depth + 1) for x in e.elts)
        if t is ast.Dict:  # ``{"model": sd, "step": 3}``: the keys are no tensors
            return all(self.on_cpu(view, x, at, depth + 1) for x in e.values)
        if t is ast.IfExp:
            return self.on_cpu(view, e.body, at, depth + 1) and self.on_cpu(view, e.orelse, at, depth + 1)
        if t is ast.Name:
            return self._name(view, e, at, depth)
        if t is ast.Attribute:
            return self._attr(e.attr, depth)
        if t is ast.Call:
            return self._call(view, e, at, depth)
        return False

    def _call(self, view, e, at, depth) -> bool:
        qn = view.sem.call_qualname(e) or ""
        if qn in _TYPED:
            return True
        if qn in _CTORS:
            return get_arg(e, 99, "device") is None
        if qn in _JOINS:
            xs = get_arg(e, 0, "tensors")
            return isinstance(xs, (ast.List, ast.Tuple)) and all(self.on_cpu(view, x, at, depth + 1) for x in xs.elts)
        if qn == "torch.load":
            return self.file_name(view, get_arg(e, 0, "f"), at) == self.fname  # what this file's saves hold
        if self.hub is not None and offloaded_state(self.hub, view, e):
            return True  # gathered to the CPU: ``FullStateDictConfig(offload_to_cpu=True)``
        f = e.func
        if isinstance(f, ast.Attribute) and not qn.startswith("torch."):
            if f.attr == "cpu" and not e.args:
                return True
            if f.attr == "state_dict" and not e.args and not e.keywords:
                # a learning-rate scheduler's state: counters, floats and lists of them, no tensor
                return self.hub is not None and holds_class(self.hub, view, f.value, at, scheduler_class)
            if f.attr in _KEEPS and not any(k.arg == "device" for k in e.keywords):
                return self.on_cpu(view, f.value, at, depth + 1)
        return False

    def _name(self, view, e, at, depth) -> bool:
        kind, evs = reaching(view, e.id, at)
        if kind == "param":
            return self._param(view, evs, e.id, depth)
        if kind not in ("events", "events+param") or not evs:
            return False
        if kind == "events+param" and not self._param(view, view.sem.enclosing_function(at), e.id, depth):
            return False
        for ev in evs:
            if isinstance(ev, ast.Assign) and len(ev.targets) == 1 and isinstance(ev.targets[0], ast.Tuple) \
                    and isinstance(ev.value, ast.Call) and self.hub is not None \
                    and offloaded_state(self.hub, view, ev.value):
                continue  # ``msd, osd = get_state_dict(..., options=StateDictOptions(cpu_offload=True))``
            if not (isinstance(ev, ast.Assign) and len(ev.targets) == 1 and isinstance(ev.targets[0], ast.Name)):
                return False
            if not self.on_cpu(view, ev.value, ev, depth + 1):
                return False
        return True

    def _attr(self, attr: str, depth) -> bool:
        """Every store to an attribute named ``attr`` in the project holds a CPU value."""
        key = ("attr", attr)
        if key in self.busy:
            return True  # read back while judged: holds what the stores hold
        views = self.files(attr)
        if not views:
            return False
        self.busy.add(key)
        try:
            seen = 0
            for v in views:
                for n in ast.walk(v.tree):
                    if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                        ts = n.targets if isinstance(n, ast.Assign) else [n.target]
                        if any(isinstance(x, ast.Attribute) and x.attr == attr for x in ts):
                            seen += 1
                            if isinstance(n, ast.AugAssign) or len(ts) != 1 or not self.on_cpu(v, n.value, n, depth + 1):
                                return False
                        elif any(isinstance(x, ast.Attribute) and x.attr == attr for t in ts for x in ast.walk(t)
                                 if isinstance(t, (ast.Tuple, ast.List))):
                            return False  # ``a.idx, b = ...``: not judged
                    elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr"
                          and len(n.args) == 3 and isinstance(n.args[1], ast.Constant) and n.args[1].value == attr):
                        seen += 1  # ``setattr(x, "idx", v)`` (a computed name is read as no store, as elsewhere)
                        if not self.on_cpu(v, n.args[2], n, depth + 1):
                            return False
            return seen > 0
        finally:
            self.busy.discard(key)

    def _param(self, view, fn, name: str, depth) -> bool:
        """The parameter ``name`` of ``fn`` (a method of a class: ``__init__``) gets CPU values at every
        construction of its class in the modules that name it."""
        if not isinstance(fn, FUNC_TYPES) or fn.name != "__init__" or not isinstance(parent(fn), ast.ClassDef):
            return False
        cls = parent(fn)
        key = ("param", id(fn), name)
        if key in self.busy:
            return True
        default = param_defaults(fn).get(name)
        if default is not None and not self.on_cpu(view, default, fn, depth + 1):
            return False
        views = self.files(cls.name)
        if not views:
            return False
        self.busy.add(key)
        try:
            built = 0
            for v in views:
                for c in v.sem.calls:
                    f = c.func
                    if not ((isinstance(f, ast.Name) and f.id == cls.name) or (isinstance(f, ast.Attribute) and f.attr == cls.name)):
                        continue
                    if any(isinstance(a, ast.Starred) for a in c.args) or any(k.arg is None for k in c.keywords):
                        return False
                    built += 1
                    for p, a in call_args(c, fn):
                        if p == name and not self.on_cpu(v, a, c, depth + 1):
                            return False
            return built > 0
        finally:
            self.busy.discard(key)


def scheduler_state_load(ctx, call: ast.Call, file_name, is_load_state_dict) -> bool:
    """What the load returns only goes to ``sched.load_state_dict(...)`` of learning-rate schedulers
    (``flow.cpu_saves.holds_class``: ``SequentialLR(...)``, ``LinearLR(...)``), right at the call
    or through a name bound once to it whose every read in the function is such an argument: the
    file is a scheduler's state (counters, floats and lists of them), with no tensor to restore to
    a device. ``file_name(sem, path)``: the file name a path expression ends with;
    ``is_load_state_dict(call)``: the call loads a state dict."""
    from .modern import hub

    an, view = hub(ctx)

    def into_scheduler(arg) -> bool:
        p = parent(arg)
        return isinstance(p, ast.Call) and is_load_state_dict(p) and p.args and p.args[0] is arg \
            and holds_class(an, view, p.func.value, p, scheduler_class)

    if not _saved_from_schedulers(ctx, get_arg(call, 0, "f"), file_name):
        return False
    if into_scheduler(call):
        return True
    st = parent(call)
    if not (isinstance(st, ast.Assign) and st.value is call and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)):
        return False
    name, scope = st.targets[0].id, ctx.sem.scope_of(call)
    if len(ctx.sem.assignments(scope).get(name, ())) != 1:
        return False
    reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
             and ctx.sem.scope_of(n) is scope]
    return bool(reads) and all(into_scheduler(n) for n in reads)


def _saved_from_schedulers(ctx, path, file_name) -> bool:
    """No ``torch.save`` of the project to a path ending with the same file name is known to save
    something else than a scheduler's state: each one saves ``x.state_dict()`` where nothing that
    ``x`` may hold (``flow.origins``) is built by a class outside ``torch.optim.lr_scheduler`` (an
    optimizer, a module: their state dicts hold tensors), or a value known on the CPU."""
    from ..rules._common import project_files_naming
    from .modern import hub
    from .origins import branch_origins, settings_only
    from .saved_fields import file_shape

    an, main = hub(ctx)
    name = file_name(ctx.sem, path) or file_shape(main, path, path, 0)
    if not name or "." not in name or name.startswith("JoinedStr("):
        return True  # no provenance to contradict the destination
    files = project_files_naming(ctx, {name}) or []
    cpu = CpuSaves(lambda w: None, name, lambda v, p, at: file_shape(v, p, at, 0), an)
    for _fctx, view in files:
        for c in view.sem.calls_to("torch.save"):
            where = get_arg(c, 1, "f")
            if (file_name(view.sem, where) or file_shape(view, where, c, 0)) != name:
                continue
            value = get_arg(c, 0, "obj")
            if settings_only(an, view, value, c) or cpu.on_cpu(view, value, c):
                continue
            if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                    and value.func.attr == "state_dict" and not value.args):
                return False
            try:
                found = branch_origins(an, view, value.func.value, c, limit=10)
            except Exception:  # noqa: BLE001 - no answer: nothing known against it
                found = []
            for ov, oe, _f in found:
                if isinstance(oe, ast.Call):
                    qn = ov.sem.call_qualname(oe) or ""
                    if scheduler_class(qn) or holds_class(an, ov, oe, oe, scheduler_class):
                        continue
                    if qn.startswith("torch.") or an.resolve_call(ov, oe) is not None:
                        return False
    return True
