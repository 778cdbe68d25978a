from __future__ import annotations

import ast
import os

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent
from ..source import SourceText
from ..flow.bindings import reaching, target_path
from ..flow.instances import module_instance_class
from ..flow.modern import hub, shard_calls
from ._common import other_call_sites


class TiedParametersSplit(Rule):
    """
    ## What it does
    Checks for tied (shared) parameters that end up in different `fully_shard` groups: a tie
    `model.output.weight = model.tok_embeddings.weight` (in the training script, or
    `self.output.weight = self.tok_embeddings.weight` in the methods of the model's class, which
    may live in another module of the project: the sharded model is built as that class, its
    parameter is annotated with it, or the sharding helper's or method's parameter is given an
    instance of it by its callers in the project's other modules), and `fully_shard` applied to
    one of the two modules (or to each of them) on its own, so that the one parameter belongs to
    two groups, or to a group and the root. A tie made under a condition (`if cfg.tie_embeddings:`,
    a flag read from a config file) is still a tie: the grouping must hold when it is made. A group may be a list of modules (`fully_shard([model.norm, model.output])`), a
    name bound to one or to a submodule, or each element of a module list in a loop. A group
    made under a condition (`if not tied: fully_shard(model.tok_embeddings)`) that may hold one
    of the two modules is not known to split them, and nothing is reported in a function that
    gives `fully_shard` a module it cannot name (a loop over `model.modules()`).

    ## Why is this bad?
    FSDP2 shards each parameter once, in the group of the module it is given to. A tied parameter
    reached from two groups is all-gathered and resharded by one group while the other uses it:
    the second group sees the sharded DTensor (a shape error in the forward) or a freed
    all-gather buffer, and its gradient is reduce-scattered twice or not at all (torch 2.13
    refuses it at the first forward: "Parameter ... is shared with a parameter already managed
    by another FSDP group"; older versions silently untie the weights). Tied embeddings and
    output heads must share one group (the root's, one `fully_shard` of a module that holds
    both, or one `fully_shard([...])` of a list with both).

    ## Example
    ```python
    model.output.weight = model.tok_embeddings.weight
    fully_shard(model.tok_embeddings)
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    ```

    ## Use instead
    ```python
    model.output.weight = model.tok_embeddings.weight
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)  # the embedding and the output head stay in the root group
    ```

    ## Fix safety
    There is no automatic fix: the grouping is a memory/performance choice.
    """

    code = "DDP515"
    name = "tied-parameters-split"
    severity = Severity.ERROR
    requires_text = ("fully_shard",)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        shards = shard_calls(an, view)
        if not shards:
            return
        sem = view.sem
        # the shard calls of each function: (call, member chains, certain); a chain is a sharded
        # module as (base key, attribute path), ``*`` for any element of a module list
        scopes: dict = {}
        for c, a in shards:
            scope = sem.enclosing_function(c)
            chains, sure = _members(view, a, c)
            scopes.setdefault(scope, []).append((c, chains, sure and _unconditional(c, scope)))
        script_ties = callers = None
        for scope, calls in scopes.items():
            if any(not chains for c, chains, sure in calls):
                continue  # a module given to ``fully_shard`` that is not known: any group is possible
            if script_ties is None:
                script_ties = [t for t in _ties(view, None) if t[1][0] != "self"]
            ties = [(tie, left, right, left[0], False, None) for tie, left, right in script_ties
                    if sem.enclosing_function(tie) is scope]
            if callers is None:
                callers = other_call_sites(ctx, an, methods=True)
            ties.extend(self._class_ties(an, view, scope, calls, callers))
            for tie, left, right, base, in_class, tie_view in ties:
                mine = [(c, ch, sure) for c, chains, sure in calls for ch, _ in chains
                        if in_class or c.lineno > tie.lineno]
                la, ra = (base, *left[1:-1]), (base, *right[1:-1])
                certain = [(c, ch) for c, ch, sure in mine if sure]
                ga, gb = _group(la, certain), _group(ra, certain)
                if ga is None and gb is None or ga is not None and gb is not None and ga[0] is gb[0]:
                    continue
                split = next((g for g in (ga, gb) if g is not None and len(g[1]) > 1), None)
                if split is None:
                    continue
                # a conditional group that may hold one side nearer than the certain groups: the
                # program may keep the two together on the path the tie is made (``if not tied``)
                if any(not sure and len(ch) > 1 and (_prefix(ch, la) or _prefix(ch, ra)) for c, ch, sure in mine):
                    continue
                where = f"line {tie.lineno}" if tie_view is None or tie_view is view else \
                    f"{os.path.basename(tie_view.path)}:{tie.lineno}"
                if tie_view is None or tie_view is view:
                    related = [(tie, "the parameters are tied here")]
                else:
                    related = [("file", tie_view.path, SourceText(tie_view.text).node_range(tie),
                                "the parameters are tied here")]
                ctx.report(split[0], f"`{ctx.text(split[0])}` puts `{'.'.join(la[1:]) or base}` and "
                                     f"`{'.'.join(ra[1:]) or base}` in different FSDP groups, but they share "
                                     f"the tied parameter `{left[-1]}` ({where}): one parameter "
                                     "sharded by two groups",
                           related=related)
                break

    @staticmethod
    def _class_ties(an, view, scope, calls, callers=None) -> list:
        """The ties made in the methods of the project class a sharded base holds (``model`` of
        ``fully_shard(model.output)``, built or annotated as that class, maybe in another module;
        ``self`` in the class's own methods; a parameter of a helper that another module of the
        project calls with the model: ``callers``), as (tie, left, right, base, True, class's view)."""
        out, seen = [], set()
        for c, chains, sure in calls:
            for ch in chains:
                base = ch[0][0]
                if base in seen:
                    continue
                seen.add(base)
                if base == "self":
                    cls = parent(scope) if isinstance(scope, FUNC_TYPES) else None
                    got = (view, cls) if isinstance(cls, ast.ClassDef) else None
                else:
                    got = module_instance_class(an, view, ch[1], ch[1], callers=callers)
                if got is None:
                    continue
                cv, cls = got
                for tie, left, right in _ties(cv, cls):
                    if left[0] == "self":
                        out.append((tie, left, right, base, True, cv))
        return out


def _chain(e):
    """``model.output.weight`` -> ("model", "output", "weight"); ``self.x`` -> ("self", "x")."""
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if not isinstance(e, ast.Name):
        return None
    return (e.id, *reversed(parts))


def _members(view, a, at, depth: int = 0) -> tuple[list, bool]:
    """The modules ``fully_shard`` gets as ``a``, each as (chain, its base name's node): a module
    or a list of modules (``[model.norm, model.output]``), followed through a name bound to one
    (``group = [...]``, ``emb, head = model.emb, model.head``) or by a loop over a module list
    (``for layer in model.layers``: any element); and whether that is certain (a conditional
    expression gives the chains of both branches, uncertain). An empty list: not known."""
    if isinstance(a, (ast.List, ast.Tuple)):
        out, sure = [], True
        for e in a.elts:
            got, ok = _members(view, e, at, depth)
            if not got:
                return [], False
            out.extend(got)
            sure = sure and ok
        return out, sure
    if isinstance(a, ast.IfExp):
        x, _ = _members(view, a.body, at, depth)
        y, _ = _members(view, a.orelse, at, depth)
        return (x + y, False) if x and y else ([], False)
    if isinstance(a, ast.Name) and depth < 4:
        kind, evs = reaching(view, a.id, at)
        if kind == "events" and evs:
            held = [_bound_value(e, a.id) for e in evs]
            if all(h is None for h in held):
                return [((a.id,), a)], True  # a module built or passed otherwise: itself
            if len(held) > 1 or held[0] is None or held[0] is _UNKNOWN:
                return [], False  # one of several bindings is a submodule or a group: not known which
            h = held[0]
            if isinstance(h, tuple):  # ``for layer in model.layers``: any element
                return [((*h[0], "*"), _base(h[1]))], True
            return _members(view, h, evs[0], depth + 1)
    ch = _chain(a)
    return ([(ch, _base(a))], True) if ch is not None else ([], False)


_UNKNOWN = object()


def _bound_value(e, name: str):
    """What the binding ``e`` gives ``name`` when it is a submodule or a group of them: the
    expression (through tuple unpacking), or (chain, iterable) for a loop over a module list;
    ``_UNKNOWN`` for a binding not read (an element of a call's result, a loop over anything
    else); None for anything else (a module built, loaded or returned)."""
    if isinstance(e, ast.Assign) and len(e.targets) == 1:
        path = target_path(e.targets[0], name)
        v = e.value
        for i in path or ():
            if not isinstance(v, (ast.Tuple, ast.List)) or i >= len(v.elts) or \
                    any(isinstance(x, ast.Starred) for x in v.elts):
                return _UNKNOWN  # an element of something not a display
            v = v.elts[i]
        if path is None:
            return _UNKNOWN
        if isinstance(v, (ast.List, ast.Tuple, ast.IfExp, ast.Attribute, ast.Name)):
            return v
        return None
    if isinstance(e, (ast.For, ast.AsyncFor)):
        it, target = e.iter, e.target
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and \
                it.args and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            it, target = it.args[0], target.elts[1]
        ch = _chain(it)
        if ch is not None and isinstance(target, ast.Name) and target.id == name:
            return ch, it
        return _UNKNOWN
    return None


def _base(e) -> ast.Name:
    while isinstance(e, ast.Attribute):
        e = e.value
    return e


def _unconditional(call, scope) -> bool:
    """No ``if``/``while``/``try``/``match`` between ``call`` and its function: it runs whenever the
    function does (a loop over a module list runs it for each element)."""
    n = parent(call)
    while n is not None and n is not scope:
        if isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Try, ast.Match, ast.BoolOp)) or (
                hasattr(ast, "TryStar") and isinstance(n, ast.TryStar)):
            return False
        if isinstance(n, (*FUNC_TYPES, ast.Lambda)):
            break
        n = parent(n)
    return True


def _ties(view, cls):
    """``a.x.w = a.y.w`` assignments of ``view`` (inside ``cls`` when given): (tie, left, right)."""
    out = []
    for st in view.sem.by_type.get(ast.Assign, ()):
        if len(st.targets) != 1:
            continue
        if cls is not None and not (cls.lineno <= st.lineno <= cls.end_lineno):
            continue
        left, right = _chain(st.targets[0]), _chain(st.value)
        if left is None or right is None or len(left) < 3 or len(right) < 3 or left[0] != right[0]:
            continue
        if left[:-1] == right[:-1]:
            continue
        out.append((st, left, right))
    return out


def _prefix(ch, owner) -> bool:
    """The module ``ch`` is ``owner`` or one of its ancestors (``*``: any element)."""
    return len(ch) <= len(owner) and all(a == b or a == "*" for a, b in zip(ch, owner))


def _group(owner, groups):
    """The shard call whose module is the nearest ancestor of ``owner`` (the root counts), or None."""
    best = None
    for c, ch in groups:
        if _prefix(ch, owner) and (best is None or len(ch) > len(best[1])):
            best = (c, ch)
    return best
