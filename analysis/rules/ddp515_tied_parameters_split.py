from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent
from ..flow.modern import hub, origins, shard_calls


class TiedParametersSplit(Rule):
    """
    ## What it does
    Checks for tied (shared) parameters that end up in different `fully_shard` groups: a tie
    `model.output.weight = model.tok_embeddings.weight` (in the training script, or
    `self.output.weight = self.tok_embeddings.weight` in the model class's methods), and
    `fully_shard` applied to one of the two modules (or to each of them) on its own, so that the
    one parameter belongs to two groups, or to a group and the root.

    ## Why is this bad?
    FSDP2 shards each parameter once, in the group of the module it is given to. A tied parameter
    reached from two groups is all-gathered and resharded by one group while the other uses it:
    the second group sees the sharded DTensor (a shape error in the forward) or a freed
    all-gather buffer, and its gradient is reduce-scattered twice or not at all. Tied
    embeddings and output heads must share one group (the root's, or one `fully_shard` of a
    module that holds both).

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
        ties = _ties(view)
        if not ties:
            return
        # each sharded module as (base key, attribute path)
        groups = []
        for c, a in shards:
            ch = _chain(a)
            if ch is not None:
                groups.append((c, ch))
        sem = view.sem
        for tie, left, right in ties:
            for base in _bases(an, view, left[0], tie, groups):
                # the shard calls of one function: a name means one module only there
                if left[0] == "self":
                    scopes = {sem.enclosing_function(c) for c, ch in groups if ch[0] == base}
                else:
                    scopes = {sem.enclosing_function(tie)}
                for scope in scopes:
                    mine = [(c, ch) for c, ch in groups if sem.enclosing_function(c) is scope
                            and (left[0] == "self" or c.lineno > tie.lineno)]
                    la, ra = (base, *left[1:-1]), (base, *right[1:-1])
                    ga, gb = _group(la, mine), _group(ra, mine)
                    if ga is None and gb is None or ga is gb:
                        continue
                    split = next((g for g in (ga, gb) if g is not None and len(g[1]) > 1), None)
                    if split is None:
                        continue
                    ctx.report(split[0], f"`{ctx.text(split[0])}` puts `{'.'.join(la[1:]) or base}` and "
                                         f"`{'.'.join(ra[1:]) or base}` in different FSDP groups, but they share "
                                         f"the tied parameter `{left[-1]}` (line {tie.lineno}): one parameter "
                                         "sharded by two groups",
                               related=[(tie, "the parameters are tied here")])
                    break


def _chain(e):
    """``model.output.weight`` -> ("model", "output", "weight"); ``self.x`` -> ("self", "x")."""
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if not isinstance(e, ast.Name):
        return None
    return (e.id, *reversed(parts))


def _ties(view):
    out = []
    for st in view.sem.by_type.get(ast.Assign, ()):
        if len(st.targets) != 1:
            continue
        left, right = _chain(st.targets[0]), _chain(st.value)
        if left is None or right is None or len(left) < 3 or len(right) < 3 or left[0] != right[0]:
            continue
        if left[:-1] == right[:-1]:
            continue
        out.append((st, left, right))
    return out


def _bases(an, view, base, tie, groups):
    """The keys the tie's base stands for among the sharded modules: the base itself, or for
    ``self`` in a model class, the names of its instances that are sharded."""
    if base != "self":
        return [base]
    fn = view.sem.enclosing_function(tie)
    cls = parent(fn) if isinstance(fn, FUNC_TYPES) else None
    if not isinstance(cls, ast.ClassDef):
        return []
    out = []
    for c, ch in groups:
        if ch[0] in out or ch[0] == "self":
            continue
        for v, e in origins(an, view, ast.Name(id=ch[0], ctx=ast.Load(), lineno=c.lineno, col_offset=c.col_offset,
                                                 end_lineno=c.lineno, end_col_offset=c.col_offset), c):
            if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and v.classes.get(e.func.id) is cls:
                out.append(ch[0])
                break
    return out


def _group(owner, groups):
    """The shard call whose module is the nearest ancestor of ``owner`` (the root counts), or None."""
    best = None
    for c, ch in groups:
        if owner[:len(ch)] == ch and (best is None or len(ch) > len(best[1])):
            best = (c, ch)
    return best
