"""The kind of a gradient-norm value across ranks, in the ``spmd_types`` vocabulary (replicate /
shard / partial), for values built from the *local shards* of DTensor gradients.

- ``g.to_local()`` / ``g._local_tensor`` of a gradient (``p.grad``, a name bound to gradients, a
  helper's parameter that callers give gradients) is a ``LOCAL`` value: this rank's shard of a
  sharded DTensor, a plain tensor that element-wise operations (``.to()``, ``.detach()``,
  ``** 2``) keep local, and that containers (a list comprehension, ``groups[k].append(g)``,
  ``list(groups.values())``) hold;
- a norm or a sum of local shards (``torch.linalg.vector_norm(g)``, ``g.norm()``,
  ``torch._foreach_norm(gs)``, ``torch.nn.utils.get_total_norm(gs)``, ``sum(...)``) is
  ``PARTIAL``: this rank's term of the global sum, over the mesh dimensions the shards are split
  on; arithmetic with a partial value stays partial (``total += n ** 2``, ``total.sqrt()``,
  ``max_norm / total``);
- a name that an ``all_reduce`` / ``reduce`` is applied to is reduced (``None``: its value after
  the reduction is the same on the ranks of the group), also by a project helper that reduces the
  parameter it is given.

A value is followed into the project's helpers (this module or another): a call's kind is the kind
of what the callee returns when its parameters hold the arguments' kinds (a tuple return element by
element). ``filtered`` marks local values whose gradients a comprehension selected by a test other
than ``is not None`` (a test of the placements: only the sharded gradients), or that a loop over
them adds up under such a test of its element (``for g in grads: if g.placements...: total +=
part``, the other branch summing the rest apart), so that which mesh
dimensions they are split on is not the module's own.

``local_norms(hub, view, fn)`` answers, per function, the facts the DDP526 rule pairs with the
reductions: the partial names, the reductions applied to them, and the clips they feed. Nothing
here reports a finding.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, parent
from ..torch_api import D
from .helper_calls import bind_args, resolved

LOCAL, PARTIAL, GRAD = "local", "partial", "grad"

# element-wise methods: the kind of the receiver
_SAME = frozenset({"to", "detach", "float", "double", "half", "bfloat16", "abs", "pow", "square", "clone",
                   "contiguous", "view", "flatten", "reshape", "cuda", "cpu", "type", "data", "sqrt", "item",
                   "values", "__getitem__"})
# reductions of a tensor (or a list of tensors) to a term of a sum
_AGG_METHODS = frozenset({"norm", "sum"})
_AGG_FUNCS = frozenset({"torch.norm", "torch.linalg.norm", "torch.linalg.vector_norm", "torch._foreach_norm",
                        "torch.nn.utils.get_total_norm", "torch.nn.utils.clip_grad.get_total_norm",
                        "torch.nn.utils.clip_grad._get_total_norm", "torch.sum"})
_BUILTIN_AGG = frozenset({"sum"})
_CONTAINERS = frozenset({"list", "tuple", "reversed", "sorted"})
# in-place scaling of gradients by a coefficient, and torch's clip by a given norm
_CLIPS = frozenset({"torch.nn.utils.clip_grads_with_norm_", "torch.nn.utils.clip_grad.clip_grads_with_norm_",
                    "torch.nn.utils.clip_grad._clip_grads_with_norm_"})
_SCALES = frozenset({"torch._foreach_mul_", "torch._foreach_mul"})
REDUCERS = frozenset({D + "all_reduce", D + "reduce", D + "all_reduce_coalesced"})
_CONSUMERS = REDUCERS | _CLIPS | _SCALES
_MAX_DEPTH = 3


class Kind:
    """``kind`` (``LOCAL``, ``PARTIAL`` or ``GRAD``: gradients not yet made local), ``filtered``
    (see the module's docstring), ``at`` the node that made it partial (``(view, node)``)."""

    __slots__ = ("kind", "filtered", "at")

    def __init__(self, kind, filtered=False, at=None):
        self.kind, self.filtered, self.at = kind, filtered, at

    def __eq__(self, other):
        return isinstance(other, Kind) and (self.kind, self.filtered) == (other.kind, other.filtered)

    def __hash__(self):
        return hash((self.kind, self.filtered))


def join(a, b):
    """The kind of a value that may be either: partial over local over gradients; filtered when
    either is (a value partly chosen by placement is not the module's plain set)."""
    if a is None or b is None:
        return a or b
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a if isinstance(a, tuple) else b
    order = (GRAD, LOCAL, PARTIAL)
    hi = a if order.index(a.kind) >= order.index(b.kind) else b
    return Kind(hi.kind, a.filtered or b.filtered, hi.at or a.at or b.at)


class Facts:
    """Of one function: ``env`` name -> kind as assigned (before any reduction), ``reduced``
    names -> the reducing calls, ``clips`` (call, argument) pairs that scale gradients by a value,
    ``returns`` the kind returned."""

    __slots__ = ("env", "reduced", "clips", "returns", "view", "fn")

    def __init__(self, view, fn):
        self.view, self.fn = view, fn
        self.env, self.reduced, self.clips, self.returns = {}, {}, [], None


def _trivial_test(t) -> bool:
    """``x is not None`` / ``x.requires_grad`` (and conjunctions of those): a test that keeps every
    gradient there is."""
    if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And):
        return all(_trivial_test(v) for v in t.values)
    if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.IsNot) and \
            isinstance(t.comparators[0], ast.Constant) and t.comparators[0].value is None:
        return True
    return isinstance(t, ast.Attribute) and t.attr == "requires_grad"


def may_consume(sem, fn) -> bool:
    """``fn``'s own calls (``Semantic.function_calls``) hold one that ``local_norms`` may record as a
    reduction or a clip (a ``REDUCERS`` call, torch's clip by a norm, ``torch._foreach_mul_``, a
    ``.mul_``/``.div_`` method): without one its facts have neither, whatever its values' kinds."""
    for c in sem.function_calls(fn):
        f = c.func
        if (isinstance(f, ast.Attribute) and f.attr in ("mul_", "div_")) or (sem.call_qualname(c) or "") in _CONSUMERS:
            return True
    return False


def _selected(n, fn) -> bool:
    """``n`` runs under an ``if`` (or its ``else``) whose test, not a trivial one, reads the
    element that an enclosing loop of ``fn`` walks (or a name its body binds): a per-element
    choice of what it adds to."""
    tests = []
    p, child = parent(n), n
    while p is not None and p is not fn:
        if isinstance(p, ast.If) and child is not p.test and not _trivial_test(p.test):
            tests.append(p.test)
        elif isinstance(p, (ast.For, ast.AsyncFor)) and tests:
            # the element, or a name each iteration binds (``g = p.grad``)
            names = {t.id for t in (*ast.walk(p.target), *(x for st in p.body for x in ast.walk(st)))
                     if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
            if any(isinstance(x, ast.Name) and x.id in names for t in tests for x in ast.walk(t)):
                return True
        elif isinstance(p, (*FUNC_TYPES, ast.ClassDef, ast.Lambda)):
            return False
        p, child = parent(p), p
    return False


def _reduced_by_helper(hub, view, call, facts, depth) -> None:
    """A name given to a project helper that all-reduces its parameter (``sum_over(acc, group)``)
    is reduced by that call, as by the reduction itself (``reduced`` then holds the helper's call)."""
    names = [a.id for a in call.args if isinstance(a, ast.Name)]
    if not names:
        return
    target = resolved(hub, view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES) or target[1] is facts.fn \
            or not may_consume(target[0].sem, target[1]):
        return
    inner = local_norms(hub, target[0], target[1], None, depth + 1).reduced
    for pname, arg in bind_args(call, target[1]).items():
        if pname in inner and isinstance(arg, ast.Name):
            facts.reduced.setdefault(arg.id, []).append(call)


def _makes_local(view) -> bool:
    """The module's text may make a local shard (``to_local`` / ``_local_tensor``); memoised."""
    got = view.memo.get("spmd_kinds.makes_local")
    if got is None:
        text = view.text or ""
        got = view.memo["spmd_kinds.makes_local"] = "to_local" in text or "_local_tensor" in text
    return got


def local_norms(hub, view, fn, seeds=None, depth: int = 0) -> Facts:
    """The ``Facts`` of ``fn`` (of ``view``), its parameters holding ``seeds`` (name -> kind)."""
    key = ("spmd_kinds", id(fn), tuple(sorted((k, v.kind, v.filtered) for k, v in (seeds or {}).items()
                                              if isinstance(v, Kind))))
    memo = view.memo.setdefault("spmd_kinds.facts", {})
    got = memo.get(key)
    if got is not None:
        return got
    facts = memo[key] = Facts(view, fn)  # a recursive call sees an empty answer
    if depth > _MAX_DEPTH:
        return facts
    ev = _Eval(hub, view, facts, depth)
    facts.env.update(seeds or {})
    # the nodes of its body, not those of nested functions or classes (once per function)
    nodes = iter_scope_nodes(fn) if isinstance(fn, FUNC_TYPES) else ()
    for n in nodes:
        if isinstance(n, ast.Call) and (view.sem.call_qualname(n) or "") in REDUCERS:
            t = get_arg(n, 0, "tensor")
            if isinstance(t, ast.Name):
                facts.reduced.setdefault(t.id, []).append(n)
        elif isinstance(n, ast.Call) and depth < _MAX_DEPTH:
            _reduced_by_helper(hub, view, n, facts, depth)
    for _ in range(4):
        before = dict(facts.env)
        for n in nodes:
            ev.statement(n)
        if facts.env == before:
            break
    for n in nodes:
        if isinstance(n, ast.Return) and n.value is not None:
            facts.returns = join(facts.returns, ev.of(n.value)) if not isinstance(n.value, ast.Tuple) else \
                tuple(ev.of(e) for e in n.value.elts)
        elif isinstance(n, ast.Call):
            ev.clip(n)
    return facts


class _Eval:
    def __init__(self, hub, view, facts, depth):
        self.hub, self.view, self.facts, self.depth = hub, view, facts, depth

    # statements -------------------------------------------------------------------------
    def bind(self, target, k):
        if k is None:
            return
        env = self.facts.env
        if isinstance(target, ast.Name):
            env[target.id] = join(env.get(target.id), k)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(k, tuple) and len(k) == len(target.elts):
            for t, kk in zip(target.elts, k):
                self.bind(t, kk)

    def statement(self, n):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Call)) and _selected(n, self.facts.fn):
            env = self.facts.env
            before = dict(env)
            self._statement(n)
            for name, k in env.items():  # what this statement bound: chosen by a test of the element
                if isinstance(k, Kind) and before.get(name) != k:
                    env[name] = Kind(k.kind, True, k.at)
            return
        self._statement(n)

    def _statement(self, n):
        if isinstance(n, ast.Assign):
            if len(n.targets) == 1 and isinstance(n.targets[0], ast.Tuple) and isinstance(n.value, ast.Tuple) \
                    and len(n.targets[0].elts) == len(n.value.elts):
                for t, v in zip(n.targets[0].elts, n.value.elts):
                    self.bind(t, self.of(v))
                return
            k = self.of(n.value)
            for t in n.targets:
                self.bind(t, k)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            k = self.of(n.value)
            if isinstance(n, ast.AugAssign) and isinstance(k, Kind) and k.kind == LOCAL:
                k = Kind(PARTIAL, k.filtered, (self.view, n))  # ``total += g.norm() ** 2`` of a list
            self.bind(n.target, k)
        elif isinstance(n, (ast.For, ast.comprehension)):
            self.bind(n.target, self.element(n.iter))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend") \
                and len(n.args) == 1:
            k = self.of(n.args[0])
            root = n.func.value
            while isinstance(root, ast.Subscript) or (  # ``d[k].append(x)``, ``d.setdefault(k, []).append(x)``
                    isinstance(root, ast.Call) and isinstance(root.func, ast.Attribute) and root.func.attr == "setdefault"):
                root = root.value if isinstance(root, ast.Subscript) else root.func.value
            if isinstance(root, ast.Name) and isinstance(k, Kind):
                self.bind(root, k)

    def element(self, it):
        """The kind of an element of ``it`` (a container keeps its elements' kind)."""
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("zip", "enumerate"):
            return None
        return self.of(it)

    # expressions ------------------------------------------------------------------------
    def of(self, e):
        if isinstance(e, ast.Name):
            if e.id in self.facts.reduced:
                return None
            return self.facts.env.get(e.id)
        if isinstance(e, ast.Attribute):
            if e.attr == "grad":
                return Kind(GRAD)
            if e.attr == "_local_tensor":
                return self._local(self.of(e.value))
            if e.attr == "data":
                return self.of(e.value)
            return None
        if isinstance(e, ast.Subscript):
            return self.of(e.value)
        if isinstance(e, ast.BinOp):
            a, b = self.of(e.left), self.of(e.right)
            return join(a if isinstance(a, Kind) else None, b if isinstance(b, Kind) else None)
        if isinstance(e, ast.UnaryOp):
            return self.of(e.operand)
        if isinstance(e, ast.IfExp):
            return join(self.of(e.body), self.of(e.orelse))
        if isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            for g in e.generators:
                self.statement(g)
            k = self.of(e.elt)
            if isinstance(k, Kind) and any(not _trivial_test(t) for g in e.generators for t in g.ifs):
                k = Kind(k.kind, True, k.at)
            return k
        if isinstance(e, (ast.List, ast.Tuple)):
            k = None
            for x in e.elts:
                kx = self.of(x)
                k = join(k, kx if isinstance(kx, Kind) else None)
            return k
        if isinstance(e, ast.Call):
            return self._call(e)
        return None

    def _local(self, k):
        return Kind(LOCAL, k.filtered) if isinstance(k, Kind) and k.kind == GRAD else (
            k if isinstance(k, Kind) and k.kind == LOCAL else None)

    def _args(self, call):
        out = None
        for a in (*call.args, *(k.value for k in call.keywords)):
            ka = self.of(a)
            out = join(out, ka if isinstance(ka, Kind) else None)
        return out

    def _partial(self, k, call):
        if not isinstance(k, Kind) or k.kind == GRAD:
            return None
        return k if k.kind == PARTIAL else Kind(PARTIAL, k.filtered, (self.view, call))

    def _call(self, call):
        f = call.func
        qn = self.view.sem.call_qualname(call) or ""
        if isinstance(f, ast.Attribute) and not qn.startswith("torch."):
            recv = self.of(f.value)
            if f.attr == "to_local":
                return self._local(recv)
            if f.attr in _AGG_METHODS:
                return self._partial(recv, call)
            if f.attr in _SAME and isinstance(recv, Kind):
                return recv if recv.kind != GRAD or f.attr in ("detach", "data", "values", "to", "float") else None
            if isinstance(recv, Kind) and recv.kind == PARTIAL:
                return recv  # ``total.clamp(...)``: arithmetic on a partial value
        if qn in _AGG_FUNCS:
            return self._partial(self._args(call), call)
        if qn.startswith(("torch.", "math.")):
            k = self._args(call)
            return k if isinstance(k, Kind) and k.kind == PARTIAL else None
        if isinstance(f, ast.Name) and f.id in _BUILTIN_AGG and call.args:
            return self._partial(self.of(call.args[0]), call)
        if isinstance(f, ast.Name) and f.id in _CONTAINERS and call.args:
            return self.of(call.args[0])
        if isinstance(f, ast.Name) and f.id in ("float", "max", "min") and call.args:
            k = self._args(call)
            return self._partial(k, call) if f.id != "float" else (k if isinstance(k, Kind) and k.kind == PARTIAL else None)
        return self._helper(call)

    def _helper(self, call):
        """The kind a project function returns, its parameters holding the arguments' kinds."""
        target = resolved(self.hub, self.view, call)
        if target is None or not isinstance(target[1], FUNC_TYPES) or target[1] is self.facts.fn:
            return None
        seeds = {}
        for name, arg in bind_args(call, target[1]).items():
            k = self.of(arg)
            if isinstance(k, Kind):
                seeds[name] = k
        if not seeds and not _makes_local(target[0]):
            return None  # no argument of a kind, and the callee's module makes no local shard
        got = local_norms(self.hub, target[0], target[1], seeds, self.depth + 1).returns
        return tuple(self._here(k, call) for k in got) if isinstance(got, tuple) else self._here(got, call)

    def _here(self, k, call):
        """A partial value a helper returns is made, for this function, by the call."""
        return Kind(PARTIAL, k.filtered, (self.view, call)) if isinstance(k, Kind) and k.kind == PARTIAL else k

    # consumers --------------------------------------------------------------------------
    def clip(self, call):
        """``torch._foreach_mul_(grads, coef)`` / ``g.mul_(coef)`` / ``clip_grads_with_norm_(ps, m, norm)``
        with a partial coefficient: gradients scaled by this rank's term."""
        qn = self.view.sem.call_qualname(call) or ""
        f = call.func
        if qn in _CLIPS:
            arg = get_arg(call, 2, "total_norm")
        elif qn in _SCALES or (isinstance(f, ast.Attribute) and f.attr in ("mul_", "div_") and
                               isinstance(self.of(f.value), Kind) and self.of(f.value).kind in (LOCAL, GRAD)):
            arg = call.args[1] if qn in _SCALES and len(call.args) > 1 else (call.args[0] if call.args and qn not in _SCALES else None)
        else:
            return
        k = self.of(arg) if arg is not None else None
        if isinstance(k, Kind) and k.kind == PARTIAL:
            self.facts.clips.append((call, arg, k))

