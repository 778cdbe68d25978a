"""Is there a synchronising point between two places of a function: a collective every rank
makes (explicit, implicit such as DDP's gradient all-reduce, hidden such as ``dcp.save``, or in a
project function that may make one: ``summaries``), between two source positions of one scope.

A call this analysis cannot follow whose name says it waits for the other ranks
(``accelerator.wait_for_everyone()``, ``comm.synchronize()``, ``hvd.join()``,
``xm.rendezvous(...)``) counts as one too: the name can only silence a finding, never make one.
"""
from __future__ import annotations

import ast

from ..semantic import parent, terminal_name

_WAITS = frozenset({"barrier", "monitored_barrier", "synchronize", "wait_for_everyone", "rendezvous", "join",
                    "sync", "all_reduce", "broadcast", "all_gather", "allreduce", "broadcast_object",
                    "broadcast_object_list", "all_gather_object"})


# context managers that hold the other ranks (of the node) at their entry until the main rank has
# run their body: composer's ``run_local_rank_zero_first()`` (a barrier on each side) and
# ``local_rank_zero_download_and_wait(path)`` (the others poll until ``path`` exists)
MAIN_FIRST_CONTEXTS = frozenset({"composer.utils.dist.run_local_rank_zero_first",
                                 "composer.utils.dist.local_rank_zero_download_and_wait"})


def main_first_with(sem, node: ast.AST, stop: ast.AST):
    """The ``with`` of a ``MAIN_FIRST_CONTEXTS`` context manager around ``node`` (inside ``stop``):
    when its block ends, every rank has waited for what the main rank did in it; None when none."""
    p = parent(node)
    while p is not None and p is not stop:
        if isinstance(p, (ast.With, ast.AsyncWith)) and any(
                isinstance(it.context_expr, ast.Call) and sem.call_qualname(it.context_expr) in MAIN_FIRST_CONTEXTS
                for it in p.items):
            return p
        p = parent(p)
    return None


def _pos(node) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _end(node) -> tuple[int, int]:
    return node.end_lineno, node.end_col_offset


def sync_points(hub, view, scope) -> list[ast.Call]:
    """The calls of ``scope`` that may synchronise the ranks, in source order (memoised): its
    ``collective_points`` and the waits of ``_WAITS``."""
    memo = view.memo.setdefault("sync.points", {})
    got = memo.get(id(scope))
    if got is not None:
        return got
    nodes = {id(c): c for c in collective_points(hub, view, scope)}  # (a stable sort: same order)
    for c in view.sem.scope_calls(scope):
        if id(c) not in nodes and terminal_name(c.func) in _WAITS:
            nodes[id(c)] = c
    got = memo[id(scope)] = sorted(nodes.values(), key=_pos)
    return got


def synchronised_between(hub, view, scope, after: ast.AST, before: ast.AST) -> ast.Call | None:
    """A synchronising call of ``scope`` that starts after ``after`` ends and before ``before``
    starts, or None."""
    lo, hi = _end(after), _pos(before)
    for c in sync_points(hub, view, scope):
        if lo <= _pos(c) and _end(c) <= hi:
            return c
    return None


def collective_points(hub, view, scope) -> list[ast.Call]:
    """The calls of ``scope`` that make a collective (explicit, implicit, hidden, or in a project
    function whose summary has one), by value flow alone: no name of ``_WAITS`` counts, so the
    answer may decide that code runs on every rank."""
    memo = view.memo.setdefault("sync.collectives", {})
    got = memo.get(id(scope))
    if got is not None:
        return got
    nodes = {id(s.node): s.node for s in hub.sites(view, scope)}
    for c, target in hub.helper_calls(view, scope):
        if hub.summary(*target).collectives:
            nodes[id(c)] = c
    got = memo[id(scope)] = sorted(nodes.values(), key=_pos)
    return got


def main_rank_first(ctx, hub, node: ast.AST) -> ast.If | None:
    """The ``if`` that makes the other ranks wait before ``node`` until the main rank has passed it:
    an earlier ``if <not the main rank>: <synchronising call>`` in a block around ``node`` in its
    function (the barrier sandwich of ``torch_distributed_zero_first``: the main rank runs on, does
    the work, then reaches its own barrier and releases the others). None when there is none."""
    from .rank_tests import polarity

    sem = ctx.sem
    scope = sem.enclosing_function(node) or sem.tree
    view = hub.main
    points = sync_points(hub, view, scope)
    if not points:
        return None
    child, p = node, parent(node)
    while p is not None:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if not isinstance(block, list) or child not in block:
                continue
            for s in block:
                if s is child:
                    break
                if isinstance(s, ast.If) and polarity(ctx, s.test, scope) is False and any(
                        (s.body[0].lineno, s.body[0].col_offset) <= _pos(c) and _end(c) <= _end(s.body[-1])
                        for c in points):
                    return s
        if p is scope:
            break
        child, p = p, parent(p)
    return None


# arguments of a collective that are no tensor (the rest are the tensors or lists it reads/writes)
_NOT_TENSOR_KW = frozenset({"group", "async_op", "src", "dst", "op", "group_src", "group_dst"})
# the most positional arguments of a collective before ``group`` (its tensors and its root / op):
# more, and the group may be among them
_POSITIONAL_BEFORE_GROUP = {"broadcast": 2, "all_reduce": 2, "reduce": 3, "all_gather": 2,
                            "all_gather_into_tensor": 2, "reduce_scatter": 3,
                            "reduce_scatter_tensor": 3, "all_to_all": 2, "all_to_all_single": 2,
                            "gather": 3, "scatter": 3}
# methods that keep a reference in a container: the tensor's data is not read
_KEEPERS = frozenset({"append", "extend", "insert", "appendleft"})


def completed_by_barrier(sem, call: ast.Call, op: str):
    """The blocking ``dist.barrier()`` of the same process group that every path from ``call`` (a
    collective made with ``async_op=True`` whose handle is dropped) reaches before anything reads
    the tensors it was given; None when there is none.

    A process group runs its collectives in the order they were issued (NCCL: one stream per
    communicator, and a blocking barrier synchronises the device after its all-reduce; Gloo: the
    barrier waits for all pending work), so the barrier returns only after the earlier collective
    ended. The barrier sits in a block that holds (a statement around) ``call``, after it, with no
    ``return`` / ``raise`` on the way; between the two the tensors are only put in containers
    (``out.append(t)``) or handed to other async collectives. Point-to-point transfers are not
    ordered this way (NCCL runs them on streams of their own) and never qualify."""
    from ..torch_api import D

    group = _group_text(call, _POSITIONAL_BEFORE_GROUP.get(op))
    if group is False:
        return None

    def barrier(st):
        bar = _blocking_barrier(sem, st, D)
        return bar if bar is not None and _group_text(bar, 0) == group else None

    return completed_by(call, barrier)


def completed_by(call: ast.Call, completer, at_end=None):
    """The node ``completer(statement)`` answers for the first statement that completes ``call``
    (an asynchronous call whose handle is dropped, or bound to a name nothing reads), when every
    path from ``call`` reaches it before anything reads the tensors ``call`` was given; None when
    there is none. With ``at_end``, a function that falls off its end from ``call`` with no such
    statement and no read answers ``at_end(function)`` (its callers may complete it).

    The statement sits in a block that holds (a statement around) ``call``, after it, with no
    ``return`` / ``raise`` on the way (a ``break`` / ``continue`` of a loop it follows stays
    inside); between the two the tensors (the names ``call`` is given, and the names at the root of
    ``p.grad`` / ``bufs[i]``) are only put in containers (``out.append(t)``) or handed to other
    async collectives. A loop around ``call`` may read the name its own target rebinds before
    ``call`` (the next item, not the pending one)."""
    names = set()
    for a in (*call.args, *(k.value for k in call.keywords if k.arg not in _NOT_TENSOR_KW)):
        while isinstance(a, (ast.Attribute, ast.Subscript, ast.Starred)):
            a = a.value
        if isinstance(a, ast.Name):
            names.add(a.id)
    child = parent(call)
    if not isinstance(child, (ast.Expr, ast.Assign)):
        return None
    p = parent(child)
    while p is not None:
        if isinstance(p, ast.Try) and child in p.body:
            return None  # an exception on the way may skip the completing statement
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if not isinstance(block, list) or child not in block:
                continue
            at = block.index(child)
            for i in range(at + 1, len(block)):
                st = block[i]
                done = completer(st)
                if done is not None:
                    return done if _only_kept(block[at:i], call, names) else None
                if any(isinstance(n, (ast.Return, ast.Raise, ast.Break, ast.Continue)) for n in ast.walk(st)):
                    return None
            if at_end is not None and field == "body" and isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return at_end(p) if _only_kept(block[at:], call, names) else None
            break
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            return None
        if isinstance(p, (ast.For, ast.AsyncFor, ast.While)) and child in p.body:
            # the completion after the loop: its ``break`` / ``continue`` stay inside, a ``return`` not
            if any(isinstance(n, (ast.Return, ast.Raise)) for n in ast.walk(p)):
                return None
        elif not isinstance(p, (ast.If, ast.With, ast.AsyncWith)):
            return None  # a ``try`` handler, a ``match``: not followed
        child, p = p, parent(p)
    return None


def group_expr(call: ast.Call, op: str):
    """The expression of the group a collective ``op`` names (None for the default one); False
    when it cannot be told (more positional arguments than its tensors and root)."""
    kw = next((k for k in call.keywords if k.arg == "group"), None)
    if kw is not None:
        return None if isinstance(kw.value, ast.Constant) and kw.value.value is None else kw.value
    before = _POSITIONAL_BEFORE_GROUP.get(op)
    if before is None:
        return False
    return call.args[before] if len(call.args) > before else None


def _group_text(call: ast.Call, before):
    """The text of the group a collective or barrier names ("" for the default one); False when it
    cannot be told (more positional arguments than ``before``)."""
    kw = next((k for k in call.keywords if k.arg == "group"), None)
    if kw is not None:
        return "" if isinstance(kw.value, ast.Constant) and kw.value.value is None else ast.unparse(kw.value)
    if before is None:
        return False
    if len(call.args) > before:
        return ast.unparse(call.args[before])
    return ""


def _blocking_barrier(sem, st, D):
    """``dist.barrier(...)`` as the statement ``st``, not asynchronous."""
    if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
        return None
    c = st.value
    if (sem.call_qualname(c) or "") != D + "barrier":
        return None
    if any(k.arg == "async_op" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
           for k in c.keywords):
        return None
    return c


def _only_kept(region, call, names) -> bool:
    """In the statements ``region``, the names ``names`` are read only as ``call``'s own arguments,
    as arguments of another ``async_op=True`` call, or put in a container (``out.append(t)``); a
    read before ``call`` of a name that a loop around ``call`` rebinds is the next item's."""
    rebound = set()
    p = parent(call)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, (ast.For, ast.AsyncFor)):
            rebound |= {n.id for n in ast.walk(p.target) if isinstance(n, ast.Name)}
        p = parent(p)
    for st in region:
        for n in ast.walk(st):
            if not (isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)):
                continue
            if n.id in rebound and _pos(n) < _pos(call):
                continue
            x = n  # the argument it is the root of: ``p.grad`` of ``f(p.grad)``
            while isinstance(parent(x), (ast.Attribute, ast.Subscript)) and parent(x).value is x:
                x = parent(x)
            q = parent(x)
            if isinstance(q, ast.keyword):
                q = parent(q)
            if isinstance(q, ast.Call) and x is not q.func and (q is call or (
                    isinstance(q.func, ast.Attribute) and q.func.attr in _KEEPERS
                    or any(k.arg == "async_op" for k in q.keywords))):
                continue
            return False
    return True
