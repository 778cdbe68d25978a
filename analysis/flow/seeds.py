"""The seed in force for torch's random numbers at a place of the program, and whether it differs
between ranks.

A seeding event is a call of torch's own seeding functions, of a library's (`transformers`'
`set_seed`, Lightning's `seed_everything`, Accelerate's `set_seed`, which adds the process index
with `device_specific=True`), or of a project function that seeds inside: its last seeding event
decides what a call of it leaves in force, with a seed given as its parameter read at each call
(`seed_everything(args.seed + rank)`). Events are taken in source order, in the function of the
place before it, then before each call of that function in its module (the ``main`` that seeds and
then calls ``train``), then at the module's top level. The seed's value is a uniformity question
(``uniformity.py``): rank-varying only where its value flow reaches the rank.

What a module built under a per-rank seed holds differs between ranks; the modern stack's
wrappers that keep each rank's own values over a replicated dimension (FSDP2 on a 2-D mesh,
FSDP1's hybrid and no-shard strategies without ``sync_module_states``) never reconcile them
(DDP521). Nothing here reads the text beyond the calls' qualified names.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from .bindings import contains, stores_name
from .context import call_args
from .fs_effects import view_ctx
from .rank import rank0_guarded
from .values import RANK
from .vocab import _SEEDS

# library calls that seed torch's generators from their first argument
LIB_SEEDERS = ("transformers.set_seed", "transformers.trainer_utils.set_seed",
               "lightning.seed_everything", "lightning.pytorch.seed_everything",
               "lightning.fabric.seed_everything", "lightning_fabric.seed_everything",
               "lightning_fabric.utilities.seed.seed_everything", "pytorch_lightning.seed_everything",
               "pytorch_lightning.utilities.seed.seed_everything", "accelerate.utils.set_seed",
               "accelerate.utils.random.set_seed")
TORCH_SEEDERS = _SEEDS["torch"] + LIB_SEEDERS
# the calls that seed each global generator: the libraries' helpers seed all three
FAMILY_SEEDERS = {"torch": TORCH_SEEDERS, "numpy": _SEEDS["numpy"] + LIB_SEEDERS,
                  "random": _SEEDS["random"] + LIB_SEEDERS}
_DEVICE_SPECIFIC = ("accelerate.utils.set_seed", "accelerate.utils.random.set_seed")
_MAX_DEPTH = 3
# methods of a module that return it, moved or cast, with the same values
_MOVES = frozenset({"to", "cuda", "float", "half", "bfloat16", "double", "train", "eval", "requires_grad_"})
# calls that may give a module's parameters new values after it is built: a load, a broadcast,
# an initialisation run again (on FSDP2's DTensors, whose random ops share one RNG state)
SETTERS = frozenset({"load_state_dict", "set_state_dict", "set_model_state_dict", "load", "load_checkpoint",
                     "load_model", "load_pretrained", "init_weights", "reset_parameters", "apply", "to_empty",
                     "copy_", "broadcast", "broadcast_coalesced", "_broadcast_coalesced", "_sync_module_states",
                     "sync_module_states", "from_pretrained", "resume", "restore", "_init_weights",
                     "init_parameters", "initialize"})


class Seed:
    """A seeding event: ``kind`` "V" (rank-varying), "U" (uniform or not known to vary) or "P"
    (the seed is the parameter ``param`` of the function it is in, or is computed from the tuple of
    parameters ``param``: judged at each call from its arguments); ``call`` is the call that
    seeds, as the outermost call of the chain in the function asked about; ``src``: the variance's
    source for "V"."""

    __slots__ = ("kind", "call", "view", "param", "src")

    def __init__(self, kind, call, view, param=None, src=None):
        self.kind, self.call, self.view, self.param, self.src = kind, call, view, param, src


def _calls_in(view, fn) -> list:
    """The calls whose innermost function is ``fn`` (the module for None), in source order."""
    sem = view.sem
    key = ("seeds.calls_in", id(fn))
    got = view.memo.get(key)
    if got is None:
        scope = fn if fn is not None else sem.tree
        got = sorted((c for c in sem.function_calls(fn) if contains(scope, c)), key=lambda c: (c.lineno, c.col_offset))
        view.memo[key] = got
    return got


def _judge(hub, view, call, expr, fn) -> Seed:
    """The event of a seeding call whose seed is ``expr`` (in ``fn``)."""
    qn = view.sem.call_qualname(call) or ""
    if qn in _DEVICE_SPECIFIC:
        flag = get_arg(call, 1, "device_specific")
        if isinstance(flag, ast.Constant) and flag.value is True:
            return Seed("V", call, view, src=None)
    if expr is None:
        return Seed("U", call, view)
    if isinstance(expr, ast.Name) and fn is not None and expr.id in param_names(fn) and not stores_name(fn, expr.id):
        return Seed("P", call, view, param=expr.id)
    v = hub.evaluator(view).value(expr)
    if v.varying and v.src is not None and v.src.cat == RANK:
        return Seed("V", call, view, src=v.src)
    if fn is not None:  # ``base + rank`` of two parameters: judged at each call, from its arguments
        ps = tuple(sorted({n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in param_names(fn)
                           and not stores_name(fn, n.id)}))
        if ps:
            return Seed("P", call, view, param=ps)
    return Seed("U", call, view)


def last_seed(hub, view, fn, before=None, depth: int = 0, seeders=TORCH_SEEDERS) -> Seed | None:
    """The last seeding event of ``fn`` (the module's top level for None) that runs before the
    node ``before`` (all of them when None), through the project functions it calls; ``seeders``:
    the calls that seed the generator asked about (``FAMILY_SEEDERS``)."""
    memo = view.memo.setdefault("seeds.last", {})
    # keyed by depth too: an answer cut at the depth limit is not the answer from the top (nor is
    # one found shallower the answer deeper), whichever query came first
    key = (id(fn), id(before), depth, seeders)
    if key in memo:
        return memo[key]
    memo[key] = None  # a recursive call adds nothing
    out = None
    limit = (before.lineno, before.col_offset) if before is not None else None
    for c in _calls_in(view, fn):
        if limit is not None and (c.lineno, c.col_offset) >= limit:
            break
        got = _event(hub, view, fn, c, depth, seeders)
        if got is not None:
            out = got
    memo[key] = out
    return out


def _callee(hub, view, c, depth):
    """(view, function) of the project function the call ``c`` runs, to be read ``depth + 1``
    calls deep; None past ``_MAX_DEPTH`` or when it is no project function (the walk of
    ``_event`` and ``_runs``)."""
    if depth >= _MAX_DEPTH or not isinstance(c.func, (ast.Name, ast.Attribute)):
        return None
    target = hub.resolve_call(view, c)
    if target is None and isinstance(c.func, ast.Attribute):
        # a method of an instance of a project class (``ctx.set_seed(s)`` on a module's shared
        # context object, imported), as the receiver's origins show it
        from .call_sites import project_target  # lazy: call_sites imports this module's neighbours
        target = project_target(hub, view, c, instances=True)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    return target


def _event(hub, view, fn, c, depth, seeders=TORCH_SEEDERS) -> Seed | None:
    qn = view.sem.call_qualname(c) or ""
    if qn in seeders:
        return _judge(hub, view, c, get_arg(c, 0, "seed"), fn)
    target = _callee(hub, view, c, depth)
    if target is None:
        return None
    tv, tfn = target
    inner = last_seed(hub, tv, tfn, None, depth + 1, seeders)
    if inner is None:
        return None
    if inner.kind == "P":
        args = dict(call_args(c, tfn))
        names = inner.param if isinstance(inner.param, tuple) else (inner.param,)
        got = [_judge(hub, view, c, args.get(n), fn) for n in names]
        ps = tuple(sorted({p for g in got if g.kind == "P" for p in (g.param if isinstance(g.param, tuple) else (g.param,))}))
        return next((g for g in got if g.kind == "V"), None) or (Seed("P", c, view, param=ps) if ps else got[0])
    # the callee decides by itself: the event is this call
    return Seed(inner.kind, c if inner.kind == "U" else inner.call, view if inner.kind == "U" else inner.view,
                src=inner.src)


def seed_in_force(hub, view, at, frames=(), callers=None, seeders=TORCH_SEEDERS) -> Seed | None:
    """The seeding event in force at the node ``at``: the last one before it in its function,
    else the last one before a call of that function in its module (for each caller, one must
    be found and all must agree), else the module's top level before the function is called.
    ``frames`` (``origins``' context: (function, call, call's view), innermost last): ``at`` is in
    a helper reached through those calls (of any module), asked at the very call that ran it.
    ``callers`` (``origins``' own): for a function its module never calls, its calls in the
    project's other modules. ``seeders``: the generator asked about (``FAMILY_SEEDERS``)."""
    fn = view.sem.enclosing_function(at)
    got = last_seed(hub, view, fn, at, seeders=seeders)
    if got is not None or fn is None:
        return got
    if frames and frames[-1][0] is fn:
        _fn, c, cv = frames[-1]
        return seed_in_force(hub, cv, c, frames[:-1], callers, seeders)
    sites = [(view, s) for s in hub.call_sites(view, fn)]
    if not sites and callers is not None:
        sites = callers(view, fn)[:8]
    found = []
    for sv, s in sites:
        e = seed_in_force(hub, sv, s, seeders=seeders) if sv.sem.enclosing_function(s) is not fn else None
        if e is None:
            return None
        found.append(e)
    if found and all(e.kind == "V" for e in found):
        return found[0]
    if found:
        return Seed("U", found[0].call, view)
    return None


def constructions(hub, view, expr, at, depth: int = 0, wrap=None) -> list:
    """(view, call) of the constructions of the module ``expr`` holds at ``at``: a project
    ``nn.Module`` class or a ``torch.nn`` class called (moved or cast after: ``Net().cuda()``,
    also when a helper builds and returns it); empty when any origin is something else (a
    pretrained load, an element of a container, a parameter no caller is seen for). ``wrap``: the
    call ``expr`` is given to, whose result stored back (``self.net = FSDP(self.net)``, an
    attribute's origins being those of the whole class) is no origin of what it is given."""
    from .origins import origins

    out = []
    for v, e in origins(hub, view, expr, at):
        if e is wrap:
            continue
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _MOVES:
            if depth >= _MAX_DEPTH:
                return []
            got = constructions(hub, v, e.func.value, e, depth + 1)  # ``Net().cuda()``: the module built
            if not got:
                return []
            out.extend(got)
            continue
        if not isinstance(e, ast.Call):
            return []
        qn = v.sem.call_qualname(e) or ""
        if qn.startswith("torch.nn.") and qn.rsplit(".", 1)[-1][:1].isupper():
            out.append((v, e))
            continue
        cls = hub.resolve_class(v, e.func)
        if cls is None:
            return []
        out.append((v, e))
    return out


def on_meta(hub, view, call) -> bool:
    """The module is built on the ``meta`` device (or with no storage): a ``device="meta"``
    argument, or a ``with`` around it of ``torch.device(...)`` holding ``"meta"``, Accelerate's
    ``init_empty_weights`` or torchdistx's ``deferred_init``."""
    from .origins import origins

    def meta(v, e, at) -> bool:
        for ov, o in origins(hub, v, e, at):
            if isinstance(o, ast.Constant) and o.value == "meta":
                return True
            if isinstance(o, ast.Call) and (ov.sem.call_qualname(o) or "") == "torch.device" and o.args and \
                    meta(ov, o.args[0], o):
                return True
        return False

    dev = get_arg(call, None, "device")
    if dev is not None and meta(view, dev, call):
        return True
    p = parent(call)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.ClassDef, ast.Module)):
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for it in p.items:
                ce = it.context_expr
                if not isinstance(ce, ast.Call):
                    continue
                qn = view.sem.call_qualname(ce) or ""
                if qn.endswith(("init_empty_weights", "deferred_init", "init_on_device")):
                    return True
                if qn == "torch.device" and ce.args and meta(view, ce.args[0], ce):
                    return True
        p = parent(p)
    return False


def setter_calls(hub, view, k, by_name: bool, guards: bool = False):
    """(view, call, runs on the main rank only) of the calls after the construction ``k`` that may
    give the module's parameters other values (``SETTERS``, by the called name): in its function
    after it and the project functions called there (``_MAX_DEPTH`` calls deep), in the other
    methods of its class, and after the calls of its function in its module; lazily, in that order.

    ``by_name``: a call named like a setter counts even where it resolves to a project function
    (a project's own ``init_weights()`` re-initialises: the per-rank seed question); otherwise a
    project function is read for what it runs (the main-rank load question: a helper named
    ``load_checkpoint`` that loads under ``if rank == 0:``). ``guards``: whether each call runs on
    the main rank only (``rank0_guarded``, or inside a call that does); False everywhere without.
    ``torch.load`` reads a file and sets nothing."""
    sem = view.sem
    fn = sem.enclosing_function(k)
    seen: dict = {}
    yield from _setters(hub, view, fn if fn is not None else sem.tree, (k.end_lineno, k.end_col_offset), 0, False,
                        by_name, guards, seen)
    if fn is None:
        return
    cls = parent(fn)
    if isinstance(cls, ast.ClassDef):
        for st in cls.body:
            if isinstance(st, FUNC_TYPES) and st is not fn:
                yield from _setters(hub, view, st, None, 0, False, by_name, guards, seen)
    for s in hub.call_sites(view, fn):
        g = sem.enclosing_function(s)
        if g is not fn:
            main = guards and rank0_guarded(view_ctx(view), s, callers=False) is True
            yield from _setters(hub, view, g if g is not None else sem.tree, (s.end_lineno, s.end_col_offset), 1,
                                main, by_name, guards, seen)


def _setters(hub, view, scope, after, depth, main_only, by_name, guards, seen):
    # a region is walked again only from a shallower depth (it then reaches further), whichever
    # path met it first
    key = (id(scope), after, main_only)
    if seen.get(key, _MAX_DEPTH + 1) <= depth:
        return
    seen[key] = depth
    for n in ast.walk(scope):
        if n.__class__ is not ast.Call or (after is not None and (n.lineno, n.col_offset) < after):
            continue
        f = n.func
        name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else None)
        if name is None or (view.sem.call_qualname(n) or "") == "torch.load":
            continue
        named = name in SETTERS
        target = hub.resolve_call(view, n) if depth < _MAX_DEPTH and not (by_name and named) else None
        project = target is not None and isinstance(target[1], FUNC_TYPES)
        if not project and not named:
            continue
        here = main_only or (guards and rank0_guarded(view_ctx(view), n, callers=False) is True)
        if project:  # a project function: what it runs
            yield from _setters(hub, target[0], target[1], None, depth + 1, here, by_name, guards, seen)
        else:
            yield view, n, here


def state_set_after(hub, view, k) -> bool:
    """A call after the construction ``k`` may give the model's parameters other values
    (``setter_calls``, a project function named like a setter counted by its name)."""
    return next(setter_calls(hub, view, k, by_name=True), None) is not None


def seeds_per_rank(hub, view) -> bool:
    """Some call of the module seeds a random generator (torch's, numpy's, Python's, a library's,
    or through a project function that seeds from its parameter) with a value that differs
    between ranks."""
    from .vocab import _SEEDS as _ALL  # noqa: PLC0415

    memo = view.memo.setdefault("seeds.per_rank", [])
    if memo:
        return memo[0]
    others = frozenset(_ALL["numpy"] + _ALL["random"])
    got = False
    for c in view.sem.calls:
        qn = view.sem.call_qualname(c) or ""
        fn = view.sem.enclosing_function(c)
        if qn in others:
            e = get_arg(c, 0, "seed")
            ev = _judge(hub, view, c, e, fn) if e is not None else None
        else:
            ev = _event(hub, view, fn, c, 0)
        if ev is not None and ev.kind == "V":
            got = True
            break
    memo.append(got)
    return got


def project_seeding(hub, views, family: str) -> Seed | None | bool:
    """How the global generator ``family`` ("random", "numpy", "torch") is seeded across the
    modules ``views`` (the project's files that may seed): False when no call of them seeds it
    (directly, through a library's helper, or through a project function that seeds it from its
    parameter or by itself); the first rank-varying event when every event is rank-varying (a
    project function's own seeding from its parameter judged at its calls); None otherwise (a
    uniform seed somewhere, an event judged only inside a helper whose calls are not seen, or a
    call of an unresolved function that may seed: whatever seeds it may be the one in force)."""
    seeders = FAMILY_SEEDERS[family]
    torch_only = frozenset(_SEEDS["torch"])
    found, inside = [], False
    for view in views:
        for c in view.sem.calls:
            qn = view.sem.call_qualname(c) or ""
            fn = view.sem.enclosing_function(c)
            ev = _event(hub, view, fn, c, 0, seeders)
            if ev is None:
                name = c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
                if "seed" in name.lower() and qn not in torch_only and qn not in seeders and \
                        hub.resolve_call(view, c) is None:
                    return None  # a seeding helper the analysis cannot read
                continue
            if ev.kind == "P":
                inside = True  # judged again at each call of its function
                continue
            if ev.kind != "V":
                return None
            found.append(ev)
    if found:
        return found[0]
    return None if inside else False
