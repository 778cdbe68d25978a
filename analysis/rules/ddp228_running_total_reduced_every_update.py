from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, param_names, subtree
from ..torch_api import D
from ..flow.assignments import under_try
from ..flow.calls import on_subgroup, scope_calls
from ..flow.call_sites import project_target
from ..flow.modern import hub
from ..flow.origins import origins
from ..flow.reductions import _is_sum, sum_reach, sum_reductions


class RunningTotalReducedEveryUpdate(Rule):
    """
    ## What it does
    Checks for a method that adds a batch's counts to running totals held on the instance
    (`self.correct += hits`) and, in the same call, sums those accumulated totals over the ranks
    with `all_reduce` (`SUM`, or no `op`) and keeps the result as the new totals: the reduction is
    in place on the attribute (`dist.all_reduce(self.total)`), or on a tensor built from it
    (`t = torch.tensor(self.total)`, `torch.tensor([self.correct, self.total])`) whose value is
    then written back (`self.total = t.item()`, `self.correct, self.total = t.tolist()`), or
    through a project helper that sums its argument in place or returns the sum
    (`self.total = sum_over_ranks(self.total)`), in this module or another.

    A method that reduces only the batch's own counts and then adds them to the totals, one that
    reduces the totals into a separate value without writing it back (a `get_metric()` that
    returns the global value), or one that resets the totals after writing them back, is not
    flagged.

    ## Why is this bad?
    After the first update every rank holds the global totals. The next update adds one batch
    to them and sums them over the ranks again: the earlier batches are counted once per rank,
    again, on every call. The totals grow geometrically with the number of updates (in float32
    they reach `inf`, and a ratio of them `nan`), and the reported metric is a skewed weighting
    of the batches. Nothing raises.

    ## Example
    ```python
    def update(self, pred, gold):
        self.hits += (pred == gold).sum().item()
        self.seen += gold.numel()
        t = torch.tensor([self.hits, self.seen], device=gold.device)
        dist.all_reduce(t)
        self.hits, self.seen = t.tolist()  # the global totals are summed again next call
    ```

    ## Use instead
    ```python
    def update(self, pred, gold):
        t = torch.tensor([(pred == gold).sum().item(), gold.numel()], device=gold.device)
        dist.all_reduce(t)  # this batch's counts only
        hits, seen = t.tolist()
        self.hits += hits
        self.seen += seen
    ```

    ## Fix safety
    There is no automatic fix: the increments must be separated from the totals by hand.
    """

    code = "DDP228"
    name = "running-total-reduced-every-update"
    severity = Severity.ERROR
    # the reduction may be in a helper of another module: the file or a module it imports spells it
    reach = classmethod(sum_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        for cls in ctx.sem.of_types(ast.ClassDef):
            methods = [fn for fn in cls.body if isinstance(fn, FUNC_TYPES)]
            for fn in methods:
                self._method(ctx, an, view, fn, methods)

    def _method(self, ctx, an, view, fn, methods) -> None:
        params = param_names(fn)
        if not params:
            return
        me = params[0]
        totals = _accumulated(fn, me)
        # a method that syncs the totals, called by the one that adds to them (``self._sync()``)
        for other in methods:
            if other is not fn and _calls_method(other, fn.name):
                oparams = param_names(other)
                if oparams:
                    for a, n in _accumulated(other, oparams[0]).items():
                        totals.setdefault(a, n)
        if not totals:
            return
        for at, attrs, holds in _reductions(an, view, fn, me, totals):
            kept = sorted(a for a in attrs if _kept(fn, me, a, at, holds))
            if not kept:
                continue
            names = ", ".join(f"`{me}.{a}`" for a in kept)
            msg = (f"the running totals {names} are added to on every call and then summed over the ranks, "
                   "the sum kept as the new totals: each call sums the already global totals again, so they "
                   "grow with every update and the metric is wrong; all-reduce only this call's increments "
                   "and add them to the totals (or reduce the totals once, into a separate value, when the "
                   "metric is read)")
            acc = totals[kept[0]]
            ctx.report(at, msg, related=[(acc, "accumulated here")])


def _calls_method(fn, name: str) -> bool:
    """``fn`` calls ``self.<name>(...)`` on its own instance (its first parameter)."""
    params = param_names(fn)
    if not params:
        return False
    return any(isinstance(n, ast.Call) and _self_attr(n.func, params[0]) == name for n in subtree(fn))


def _self_attr(e, me: str) -> str | None:
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == me:
        return e.attr
    return None


def _accumulated(fn, me: str) -> dict:
    """{attribute: node} of the instance's attributes that ``fn`` adds to: ``self.x += v`` or
    ``self.x = self.x + v``."""
    out = {}
    for n in subtree(fn):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add):
            a = _self_attr(n.target, me)
            if a is not None:
                out.setdefault(a, n)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.BinOp) \
                and isinstance(n.value.op, ast.Add):
            a = _self_attr(n.targets[0], me)
            if a is not None and a in (_self_attr(n.value.left, me), _self_attr(n.value.right, me)):
                out.setdefault(a, n)
    return out


def _state_read(an, view, expr, at, me, totals, depth: int = 0) -> set:
    """The accumulated attributes that the value of ``expr`` (at ``at``) is built from: read
    directly (``torch.tensor([self.a, self.b])``), or through local names (one binding after
    another, as ``origins`` follows them)."""
    out = set()
    if depth > 3:
        return out
    for n in subtree(expr):
        a = _self_attr(n, me)
        if a in totals:
            out.add(a)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id != me and depth < 3:
            for v, e in origins(an, view, n, at):
                if v is view and e is not n and not isinstance(e, ast.Name):
                    out |= _state_read(an, view, e, e, me, totals, depth + 1)
    return out


def _reductions(an, view, fn, me, totals) -> list:
    """(node, attributes) of the world ``SUM`` reductions in ``fn`` whose result ends up in the
    accumulated attributes it was built from."""
    out = []
    for c in scope_calls(view, fn):
        if (view.sem.call_qualname(c) or "") != D + "all_reduce" or under_try(c, fn) or on_subgroup(c, "all_reduce"):
            continue
        if not _is_sum(get_arg(c, 1, "op")):
            continue
        t = get_arg(c, 0, "tensor")
        a = _self_attr(t, me)
        if a in totals:
            out.append((c, {a}, _NEVER))  # in place on the running total itself
        elif isinstance(t, ast.Name):
            got = _state_read(an, view, t, c, me, totals)
            holds = _holder(t.id)
            back = _written_back(fn, me, c, holds)
            if got & back:
                out.append((c, got & back, holds))
    for red in sum_reductions(an, view, fn):
        if red.via is None:
            continue  # direct: above
        got = _state_read(an, view, ast.Name(id=red.name, ctx=ast.Load()), red.call, me, totals)
        holds = _holder(red.name)
        back = _written_back(fn, me, red.call, holds)
        if got & back:
            out.append((red.call, got & back, holds))
    for c in scope_calls(view, fn):
        # ``self.total = sum_over_ranks(self.total)``: a helper that returns its argument's world sum
        if not isinstance(c.func, (ast.Name, ast.Attribute)) or (view.sem.call_qualname(c) or "").startswith("torch."):
            continue
        target = project_target(an, view, c)
        if target is None or not isinstance(target[1], FUNC_TYPES) or not _returns_world_sum(an, *target):
            continue
        got = set()
        for arg in [*c.args, *(k.value for k in c.keywords)]:
            got |= _state_read(an, view, arg, c, me, totals)
        holds = _holder_call(c)
        back = _written_back(fn, me, c, holds, inclusive=True)
        if got & back:
            out.append((c, got & back, holds))
    return out


def _NEVER(_value) -> bool:
    return False


def _holder(name: str):
    """A test of an assigned value: it reads the reduced tensor ``name``."""
    return lambda v: _reads_name(v, name)


def _holder_call(call):
    """A test of an assigned value: it holds the helper call ``call`` that returns the sum."""
    return lambda v: any(n is call for n in subtree(v))


def _reads_name(expr, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in subtree(expr))


def _written_back(fn, me, at, holds, inclusive: bool = False) -> set:
    """The attributes that an assignment after ``at`` in ``fn`` (``inclusive``: or the one holding
    it) stores a value into that ``holds`` (``self.total = t.item()``, ``self.a, self.b =
    t.tolist()``)."""
    out = set()
    pos = (at.lineno, at.col_offset)
    for n in subtree(fn):
        if not isinstance(n, ast.Assign):
            continue
        if (n.lineno, n.col_offset) <= pos and not (inclusive and any(x is at for x in subtree(n.value))):
            continue
        if not holds(n.value):
            continue
        for t in n.targets:
            for e in subtree(t):
                a = _self_attr(e, me)
                if a is not None and isinstance(e.ctx, ast.Store):
                    out.add(a)
    return out


def _kept(fn, me, attr: str, at, holds) -> bool:
    """Nothing after the reduction in ``fn`` gives ``self.<attr>`` another value than the reduced
    one (``holds``: the write-backs): a reset (``self.total = 0``, ``self.total.zero_()``) after
    writing the totals back ends the accumulation."""
    pos = (at.lineno, at.col_offset)
    for n in subtree(fn):
        if (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)) <= pos:
            continue
        if isinstance(n, ast.Assign) and not holds(n.value):
            if any(_self_attr(e, me) == attr and isinstance(e.ctx, ast.Store) for t in n.targets for e in subtree(t)):
                return False
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _RESETS \
                and _self_attr(n.func.value, me) == attr:
            return False
    return True


# in-place calls that give a tensor a new value
_RESETS = frozenset({"zero_", "fill_", "copy_", "mul_"})


def _returns_world_sum(an, view, fn) -> bool:
    """``fn`` sums over the world, with ``SUM``, a tensor built from one of its parameters and
    returns a value read from it (``t = torch.tensor(x); dist.all_reduce(t); return t.item()``)."""
    params = [p for p in param_names(fn) if p not in ("self", "cls")]
    if not params:
        return False
    for c in scope_calls(view, fn):
        if (view.sem.call_qualname(c) or "") != D + "all_reduce" or on_subgroup(c, "all_reduce") \
                or not _is_sum(get_arg(c, 1, "op")):
            continue
        t = get_arg(c, 0, "tensor")
        if not isinstance(t, ast.Name):
            continue
        src = t.id in params or any(
            _reads_param(e, params) for v, e in origins(an, view, t, c) if v is view)
        if src and any(isinstance(r, ast.Return) and r.value is not None and _reads_name(r.value, t.id)
                       and (r.lineno, r.col_offset) > (c.lineno, c.col_offset) for r in subtree(fn)):
            return True
    return False


def _reads_param(expr, params) -> bool:
    return any(isinstance(n, ast.Name) and n.id in params for n in subtree(expr))
