from __future__ import annotations

import ast

from ..model import Severity
from ..registry import NoCase, Rule
from ..semantic import iter_scope_nodes
from ..flow.assignments import name_binding_kind, self_attr_value
from ..flow.rank_tests import rank_kind
from ..flow.testing import is_test_file
from ._common import fixed_world_size

_MUTATORS = frozenset({"append", "extend", "insert", "__setitem__", "__iadd__"})


class RankIndexesFixedList(Rule):
    """
    ## What it does
    Checks for a fixed-length literal (a list, a tuple or a string, directly, through a name
    assigned once and never grown, or through `self.<attr>` assigned once in the class and never
    grown) indexed by the rank: `["foo", 12, {1: 2}][dist.get_rank()]`,
    `gpus[local_rank]` with `gpus = [0, 1]`. An index like `rank % len(seq)` is fine, and so is a
    literal whose length is the world size the file fixes itself (`mp.spawn(..., nprocs=2)`,
    `init_process_group(world_size=2)`, `WORLD_SIZE = 2`, a `world_size` property returning 2).
    Test files (`test_*.py`, `*_test.py`) are skipped: multi-process tests run with a world size fixed
    by their harness, and per-rank tables of expected values are deliberate there.

    ## Why is this bad?
    The literal's length is fixed when the script is written, the world size is not. As soon as the
    job runs with more ranks than elements, the ranks past the end fail:

    ```
    IndexError: list index out of range
    ```

    and with fewer ranks the trailing elements are silently never used.

    ## Example
    ```python
    gather_objects = ["foo", 12, {1: 2}]
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, gather_objects[dist.get_rank()])
    ```

    ## Use instead
    ```python
    obj = {"rank": dist.get_rank()}  # something each rank computes for itself
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, obj)
    ```

    ## Fix safety
    There is no automatic fix: what each rank should use instead depends on the program.
    """

    code = "DDP103"
    name = "rank-indexes-fixed-list"
    severity = Severity.WARNING
    fix_availability = "never"
    node_types = (ast.Subscript,)
    # rank names match case-insensitively (`Rank`, `localRank`); SLURM spells its ids without "rank"
    requires_text = (NoCase("rank"), "SLURM_PROCID", "SLURM_LOCALID")

    def visit(self, node: ast.Subscript, ctx) -> None:
        if ctx.memo("ddp103.test_file", lambda: is_test_file(ctx.filename)):
            return
        sl = node.slice
        if not isinstance(sl, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) or not isinstance(node.ctx, ast.Load):
            return
        seq = node.value
        if not isinstance(seq, (ast.Name, ast.Attribute, ast.List, ast.Tuple, ast.Constant)):
            return
        p = getattr(node, "_p", None)
        if p.__class__ in _ANNOTATED and getattr(p, _ANNOTATED[p.__class__]) is node:
            return  # a type (``tags: list[str]``), not an indexing
        scope = ctx.sem.scope_of(node)
        if isinstance(seq, ast.Attribute):
            # ``self.x[...]`` is common: ask the cheap question (is the index a rank?) first
            if rank_kind(ctx, sl, scope) is None:
                return
            n = _fixed_len(ctx, seq, scope)
            if n is None:
                return
        else:
            n = _fixed_len(ctx, seq, scope)
            if n is None:
                return
            if rank_kind(ctx, sl, scope) is None:
                return
        if n == fixed_world_size(ctx):
            return
        what = "string" if isinstance(_literal(ctx, seq, scope), ast.Constant) else "literal"
        ctx.report(
            node,
            f"a fixed-length {what} ({n} element{'s' if n != 1 else ''}) is indexed by the rank: "
            f"IndexError on every rank >= {n} once the world size grows. Compute the per-rank value, "
            "or index with `rank % len(...)`",
        )


# node types whose field holds an annotation
_ANNOTATED = {ast.AnnAssign: "annotation", ast.arg: "annotation", ast.FunctionDef: "returns",
              ast.AsyncFunctionDef: "returns"}


def _literal(ctx, seq, scope):
    if isinstance(seq, ast.Attribute):
        return self_attr_value(ctx, seq)  # `self.parts = [...]` assigned once in the class
    if isinstance(seq, ast.Name):
        kind, val = name_binding_kind(ctx, seq.id, scope)
        if kind != "single" or val is None:
            return None
        return val
    return seq


def _fixed_len(ctx, seq, scope) -> int | None:
    val = _literal(ctx, seq, scope)
    if val is None:
        return None
    if isinstance(val, (ast.List, ast.Tuple)):
        if not val.elts or any(isinstance(e, ast.Starred) for e in val.elts):
            return None
        n = len(val.elts)
    elif isinstance(val, ast.Constant) and isinstance(val.value, str) and val.value:
        n = len(val.value)
    else:
        return None
    if isinstance(seq, ast.Name) and _grown(seq.id, ctx.sem.scope_of(val)):
        return None
    if isinstance(seq, ast.Attribute) and _attr_grown(ctx, seq):
        return None
    return n


def _attr_grown(ctx, seq: ast.Attribute) -> bool:
    """``self.parts.append(...)`` (or another mutator) anywhere in the class."""
    cls = next((a for a in ctx.sem.ancestors(seq) if isinstance(a, ast.ClassDef)), None)
    if cls is None:
        return True
    for n in ast.walk(cls):
        if isinstance(n, ast.Attribute) and n.attr in _MUTATORS and isinstance(n.value, ast.Attribute) \
                and n.value.attr == seq.attr and isinstance(n.value.value, ast.Name) and n.value.value.id == "self":
            return True
    return False


def _grown(name: str, scope) -> bool:
    for n in iter_scope_nodes(scope):
        if isinstance(n, ast.Attribute) and n.attr in _MUTATORS and isinstance(n.value, ast.Name) and n.value.id == name:
            return True
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name:
            return True
        if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
            return True
    return False
