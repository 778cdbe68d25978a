"""Names that only the distributed run binds: a local name of a scope whose every binding sits in
the branch of an ``if`` that a single-process run does not take (``if world_size > 1:``,
``if dist.is_initialized() and dist.get_world_size() > 1:``, ``if args.distributed:``), read after
that ``if`` on a path a single-process run takes: ``UnboundLocalError`` (``NameError`` at module
level) there.

- ``single_run_side(ctx, test, scope)``: the branch of ``test`` ("body" / "orelse") that a
  single-process run takes, or None when the test does not say: a world-size comparison with one
  (``rank_tests.single_process_side``, by value flow; or a distributed-mode name, ``dist_mode_test``),
  ``dist.is_initialized()`` (a run without a group), a distributed-mode flag (``args.distributed``,
  ``is_ddp()``), a launcher variable test (``"WORLD_SIZE" in os.environ``), ``not``, ``and``
  (one conjunct false is enough), ``or`` (every disjunct), a name bound once to such a test;
- ``unbound_reads(ctx, scope)``: [(name, if, read)] for the first such read of each name.

A name also bound elsewhere in the scope (before the ``if``, in its other branch, by a loop, a
``with``, an ``except``, an import, a ``def``), declared ``nonlocal``, deleted, or a parameter is
left alone, and so is a name a function declares ``global`` that the module also binds outside
that function (``NameError`` when it binds it nowhere else); so is a scope that uses ``locals()`` / ``vars()`` / ``exec`` /
``eval``, an ``if`` inside a loop or a ``try`` with handlers, a branch that never falls through,
a read that no path from the single-process branch reaches (``else: return`` / ``raise`` /
``sys.exit()``: ``bindings.cut_from``), a read under a test on the distributed mode or the rank (the same condition, in any spelling), in
a ``try`` with handlers, in a nested function, or after a test on the distributed mode that leaves.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, param_names, parent
from ..torch_api import D
from .bindings import contains, cut_from
from .lifecycle import _ends, harmless, mode_test
from .rank_tests import RANK_ENV, rank_test, single_process_side
from .unconditional import dist_mode_test
from .world import WORLD_SIZE_ENV

_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)
_DYNAMIC = frozenset({"locals", "vars", "exec", "eval", "globals"})
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
try:  # Python 3.11+
    _TRY = (ast.Try, ast.TryStar)
except AttributeError:  # pragma: no cover
    _TRY = (ast.Try,)
_FLIP = {"body": "orelse", "orelse": "body"}


def single_run_side(ctx, test: ast.AST, scope: ast.AST, depth: int = 0, hub=None) -> str | None:
    """(See the module docstring.) ``ctx``: anything with the module's ``sem`` (a rule context, a
    module view); ``hub``: the flow analysis that resolves a helper of another module."""
    if test is None or depth > 4:
        return None
    t = test.__class__
    if t is ast.UnaryOp and isinstance(test.op, ast.Not):
        s = single_run_side(ctx, test.operand, scope, depth + 1, hub)
        return None if s is None else _FLIP[s]
    if t is ast.BoolOp:
        sides = [single_run_side(ctx, v, scope, depth + 1, hub) for v in test.values]
        if isinstance(test.op, ast.And):
            return "orelse" if "orelse" in sides else ("body" if all(s == "body" for s in sides) else None)
        return "body" if "body" in sides else ("orelse" if all(s == "orelse" for s in sides) else None)
    sem = ctx.sem
    if t is ast.Compare and len(test.ops) == 1:
        try:
            got = single_process_side(ctx, test, scope)
        except AttributeError:  # a module view where the query wants a rule context: no answer
            got = None
        if got is not None:
            return got
        return _world_field_compare(ctx, test, hub) or _named_world_compare(test) or _env_test(test)
    if t is ast.Call:
        qn = sem.call_qualname(test) or ""
        if qn == D + "is_initialized":
            return "orelse"
        if qn.startswith("torch."):
            return None
        fctx, fn = _helper(ctx, test, hub)
        if fn is not None:
            rets = [n.value for n in iter_scope_nodes(fn) if isinstance(n, ast.Return)]
            if rets and all(r is not None for r in rets):
                sides = {single_run_side(fctx, r, fn, depth + 1, hub) for r in rets
                         if not (isinstance(r, ast.Constant) and isinstance(r.value, bool))}
                if len(sides) == 1 and None not in sides:
                    return sides.pop()
        return "orelse" if _flag(test.func) else None
    if t is ast.Name:
        v = sem.single_value(test.id, sem.scope_of(test))
        if v is not None and v is not test:
            got = single_run_side(ctx, v, sem.scope_of(v), depth + 1, hub)
            if got is not None:
                return got
        return "orelse" if _flag(test) else None
    if t is ast.Attribute:
        return "orelse" if _flag(test) else None
    return None


def _helper(ctx, call, hub):
    """(module, function) of the project function ``call`` calls: of this module by name, or of
    another through ``hub`` (``lifecycle.project_target``); (None, None) when not known."""
    f = call.func
    if isinstance(f, ast.Name):
        for st in ctx.sem.tree.body:
            if isinstance(st, FUNC_TYPES) and st.name == f.id:
                return ctx, st
    view = ctx if isinstance(getattr(ctx, "memo", None), dict) else getattr(hub, "main", None)
    if view is None:
        return None, None
    from .lifecycle import project_target

    got = project_target(hub, view, call)
    if got is None or not isinstance(got[1], FUNC_TYPES):
        return None, None
    return got


_FLAG_WORDS = ("distributed", "ddp", "multi_gpu", "multigpu", "use_dist", "is_dist", "dist_mode", "dist_on",
               "dist_enabled", "is_distributed", "using_distributed")


def _flag(e) -> bool:
    """A flag that says the run is distributed (``args.distributed``, ``is_ddp()``, ``use_ddp``):
    a distributed-mode test (``dist_mode_test``) whose last name says so."""
    name = e.attr if isinstance(e, ast.Attribute) else e.id if isinstance(e, ast.Name) else None
    if name is None or not dist_mode_test(e):
        return False
    low = name.lower().lstrip("_")
    return any(low == w or low.endswith("_" + w) or low.startswith(w) for w in _FLAG_WORDS) \
        and "world" not in low and "avail" not in low


def _world_field_compare(ctx, test: ast.Compare, hub) -> str | None:
    """``self.env.world_size > 1`` by value flow: every origin of the attribute (``origins``: a
    field of an object a helper of another module builds, ``Info(rank, get_world_size())``) is the
    world's size (``world_tests.world_size_source`` in its own module); None origins aside (an
    attribute is never read from None)."""
    from .origins import origins  # lazy: origins follows helpers across modules
    from .world_tests import world_compare, world_size_source

    sides = [x for x in (test.left, *test.comparators) if not isinstance(x, ast.Constant)]
    if len(sides) != 1 or not isinstance(sides[0], ast.Attribute) or ctx.sem.qualname(sides[0]) is not None:
        return None  # (``os.environ``: a module's value, not an object's field)
    if hub is None and callable(getattr(ctx, "memo", None)):
        from . import for_context  # lazy: the package imports this module

        hub = for_context(ctx)
    view = ctx if isinstance(getattr(ctx, "memo", None), dict) else getattr(hub, "main", None)
    if view is None or hub is None:
        return None

    def is_world(e) -> bool:
        leaves = [(v, x) for v, x in origins(hub, view, e, test) if not (isinstance(x, ast.Constant) and x.value is None)]
        return bool(leaves) and all(world_size_source(v, x, v.sem.scope_of(x)) is not None for v, x in leaves)

    got = world_compare(test, is_world)
    return None if got is None else ("body" if got else "orelse")


def _named_world_compare(test: ast.Compare) -> str | None:
    """``world_size > 1`` / ``args.world_size == 1`` by a distributed-mode name (``dist_mode_test``
    with a world-size word), compared with the constant one (or two)."""
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(left, ast.Constant):
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
    if not (isinstance(right, ast.Constant) and type(right.value) is int) or not dist_mode_test(test):
        return None
    name = left.attr if isinstance(left, ast.Attribute) else left.id if isinstance(left, ast.Name) else ""
    if isinstance(left, ast.Call):
        f = left.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if "world" not in name.lower() and name.lower() not in ("ngpus", "n_gpus", "num_gpus", "nprocs", "num_processes"):
        return None
    k, t = right.value, type(op)
    if (t is ast.Eq and k == 1) or (t is ast.LtE and k == 1) or (t is ast.Lt and k == 2):
        return "body"
    if (t is ast.NotEq and k == 1) or (t is ast.Gt and k == 1) or (t is ast.GtE and k == 2):
        return "orelse"
    return None


def _env_test(test: ast.Compare) -> str | None:
    """``"WORLD_SIZE" in os.environ``: a launcher's variable is there only in a launched run."""
    op = test.ops[0]
    if not isinstance(op, (ast.In, ast.NotIn)) or not isinstance(test.left, ast.Constant):
        return None
    if test.left.value not in WORLD_SIZE_ENV | set(RANK_ENV):
        return None
    return "orelse" if isinstance(op, ast.In) else "body"


def unbound_reads(ctx, scope: ast.AST, hub=None) -> list:
    if scope not in ctx.memo("mode_unbound.if_scopes", lambda: _if_scopes(ctx.sem)):
        return []  # no ``if`` of its own: no binding of the scope can sit in one (``_owner_if``)
    nodes = iter_scope_nodes(scope)
    binds: dict[str, list] = {}
    skip = set(param_names(scope)) if isinstance(scope, FUNC_TYPES) else set()
    reads: dict[str, list] = {}
    globs: set[str] = set()
    for n in nodes:
        c = n.__class__
        if c is ast.Name:
            if n.ctx.__class__ is ast.Load:
                reads.setdefault(n.id, []).append(n)
                if n.id in _DYNAMIC:
                    return []
            elif n.ctx.__class__ is ast.Del:
                skip.add(n.id)
            else:
                binds.setdefault(n.id, []).append(n)
        elif c is ast.Global and isinstance(scope, FUNC_TYPES):
            globs.update(n.names)
        elif c in (ast.Global, ast.Nonlocal):
            skip.update(n.names)
        elif c in (ast.Import, ast.ImportFrom):
            for a in n.names:
                if a.name == "*":
                    return []
                skip.add((a.asname or a.name).split(".")[0])
        elif c in (*FUNC_TYPES, ast.ClassDef) and n is not scope:
            skip.add(n.name)
        elif c is ast.ExceptHandler and n.name:
            skip.add(n.name)
        elif c.__name__ in ("MatchAs", "MatchStar", "MatchMapping"):
            skip.update(x for x in (getattr(n, "name", None), getattr(n, "rest", None)) if x)
    if globs:
        skip |= _bound_elsewhere(ctx, scope, globs)
    out = []
    for name, stores in binds.items():
        if name in skip or name not in reads:
            continue
        owner = _owner_if(ctx, stores, scope, hub)
        if owner is None:
            continue
        end = (owner.end_lineno, owner.end_col_offset)
        # the single-process run's branch: the name is unbound from its start, and a read is
        # reached unbound only along the paths from there that go on (``bindings.cut_from``)
        single = owner.orelse if any(contains(st, stores[0]) for st in owner.body) else owner.body
        for r in sorted(reads[name], key=lambda x: (x.lineno, x.col_offset)):
            if (r.lineno, r.col_offset) < end:
                continue
            if single and cut_from(single[0], r, scope, stops=lambda st: st.__class__ is not ast.Raise
                                   and _ends(ctx.sem, [st])):  # (a ``raise``: by ``cut_from``'s own rule)
                continue
            if _guarded(ctx, r, owner, scope, hub):
                continue
            out.append((name, owner, r))
            break
    return out


def _if_scopes(sem) -> frozenset:
    """The scopes (``_SCOPES``, the module included) that hold an ``if`` of their own, not one of a
    nested scope: the only ones where ``_owner_if`` can find an owner."""
    out = set()
    for q in sem.by_type.get(ast.If, ()):  # (``by_type`` indexes every ``if``: ``semantic.BRANCHING``)
        p = parent(q)
        while p is not None and not isinstance(p, _SCOPES):
            p = parent(p)
        out.add(p)
    return frozenset(out)


def global_names(scope) -> set[str]:
    """The names a function declares ``global``."""
    return {x for n in iter_scope_nodes(scope) if isinstance(n, ast.Global) for x in n.names}


def _bound_elsewhere(ctx, scope, names: set[str]) -> set[str]:
    """Those of ``names`` (declared ``global`` in ``scope``) that the module may bind outside
    ``scope``: a store or ``del`` of the name anywhere else (a local of another function
    included), an import, a ``def`` or ``class``, a handler's or pattern's name; all of them when
    the module binds names it does not spell (``globals()``, ``vars()``, ``setattr``, ``exec``, a
    star import). The module's bindings are indexed once per check (``_module_bindings``)."""
    by_name, dynamic = ctx.memo("mode_unbound.bindings", lambda: _module_bindings(ctx.sem.of_types(*_BINDERS)))
    ancestors = ctx.sem.ancestors

    def outside(n) -> bool:  # not ``scope`` nor in it (through the parent pointers: no walk of ``scope``)
        return n is not scope and not any(a is scope for a in ancestors(n))

    if dynamic:
        # (a store of a dynamic word the function declares ``global`` is a plain binding of it)
        if any(outside(n) and not (n.__class__ is ast.Name and n.ctx.__class__ is not ast.Load
                                   and n.id in names) for n in dynamic):
            return set(names)
    out = set()
    for name in names:
        nodes = by_name.get(name)
        if nodes and any(outside(n) for n in nodes):
            out.add(name)
    return out


# the node types ``_module_bindings`` looks at (``Semantic.of_types``: no walk of the other nodes)
_BINDERS = (ast.Name, ast.Import, ast.ImportFrom, *FUNC_TYPES, ast.ClassDef, ast.ExceptHandler,
            *(getattr(ast, k) for k in ("MatchAs", "MatchStar", "MatchMapping") if hasattr(ast, k)))


def _module_bindings(nodes) -> tuple[dict[str, list], list]:
    """({name: [every node that may bind it: a store or ``del``, an import, a ``def`` or
    ``class``, a handler, a pattern]}, [every node that binds names it does not spell: a read of
    ``globals``/``vars``/``locals``/``exec``/``eval``/``setattr``, a star import]), from the module's
    nodes of those types (in no particular order: the answers only ask whether any is outside a
    scope)."""
    by_name: dict[str, list] = {}
    dynamic: list = []
    for n in nodes:
        if isinstance(n, ast.Name):
            if not isinstance(n.ctx, ast.Load):
                by_name.setdefault(n.id, []).append(n)
            if n.id in _DYNAMIC or n.id == "setattr":
                dynamic.append(n)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in n.names):
                dynamic.append(n)
            for a in n.names:
                if a.name != "*":
                    by_name.setdefault((a.asname or a.name).split(".")[0], []).append(n)
        elif isinstance(n, (*FUNC_TYPES, ast.ClassDef)) or (isinstance(n, ast.ExceptHandler) and n.name):
            by_name.setdefault(n.name, []).append(n)
        elif n.__class__.__name__ in ("MatchAs", "MatchStar", "MatchMapping"):
            for x in (getattr(n, "name", None), getattr(n, "rest", None)):
                if x:
                    by_name.setdefault(x, []).append(n)
    return by_name, dynamic


def _owner_if(ctx, stores, scope, hub):
    """The ``if`` whose branch that a single-process run does not take holds every binding, or
    None (see the module docstring)."""
    chain = []
    child, p = stores[0], parent(stores[0])
    while p is not None and p is not scope:
        if isinstance(p, _SCOPES):
            return None
        chain.append((p, child))
        child, p = p, parent(p)
    if p is None:
        return None
    k = next((k for k, (q, c) in enumerate(chain) if isinstance(q, ast.If) and c is not q.test
              and single_run_side(ctx, q.test, scope, 0, hub) not in (None, "body" if c in q.body else "orelse")), None)
    if k is None:
        return None
    owner, c = chain[k]
    for q, c2 in chain[k + 1:]:
        if isinstance(q, (*_LOOPS, ast.ExceptHandler)) or (isinstance(q, _TRY) and q.handlers and c2 in q.body):
            return None  # another pass (or the handler) may have bound it, or the error is handled
    block = owner.body if c in owner.body else owner.orelse
    if _ends(ctx.sem, block):
        return None
    for s in stores:
        if not any(contains(st, s) for st in block):
            return None
        q = parent(s)
        while q is not owner:  # a loop / with / comprehension target, or a ``try``, inside the branch
            if isinstance(q, (*_LOOPS, ast.With, ast.AsyncWith, ast.comprehension, ast.NamedExpr, *_TRY)):
                return None
            q = parent(q)
    return owner


def _guarded(ctx, read, owner, scope, hub) -> bool:
    """A single-process run does not reach ``read`` there (or the program handles the error)."""
    child, p = read, parent(read)
    while p is not None:
        if p is scope:
            return _leaves_before(ctx, scope.body, child, owner, scope, hub)
        if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return True
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and child is not p.test:
            if _any_mode(ctx, p.test, scope, hub):
                return True
        if isinstance(p, ast.BoolOp) and any(_any_mode(ctx, v, scope, hub) for v in p.values[: p.values.index(child)]):
            return True
        if isinstance(p, _TRY) and p.handlers and child in p.body:
            return True
        if isinstance(p, ast.ExceptHandler):
            return True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if isinstance(block, list) and child in block:
                if _leaves_before(ctx, block, child, owner, scope, hub):
                    return True
                break
        child, p = p, parent(p)
    return False


def _leaves_before(ctx, block, child, owner, scope, hub) -> bool:
    """A statement of ``block`` after ``owner`` and before ``child`` leaves on a mode test."""
    if child not in block:
        return False
    return any((st.lineno, st.col_offset) > (owner.lineno, owner.col_offset) and _leaves_on_mode(ctx, st, scope, hub)
               for st in block[: block.index(child)])


def _any_mode(ctx, test, scope, hub) -> bool:
    """A test on the distributed mode, the group or the rank, in any spelling."""
    if single_run_side(ctx, test, scope, 0, hub) is not None or harmless(ctx.sem, test) or mode_test(ctx.sem, test):
        return True
    if _sentinel_test(ctx, test, scope, hub):
        return True
    try:
        return rank_test(ctx, test, scope) is not None
    except Exception:  # noqa: BLE001 - a query that cannot answer says nothing
        return False


def _leaves_on_mode(ctx, st, scope, hub) -> bool:
    """``if world_size == 1: return``: a test on the mode (or the rank) with a branch that leaves."""
    return isinstance(st, ast.If) and (_ends(ctx.sem, st.body) or _ends(ctx.sem, st.orelse)) \
        and _any_mode(ctx, st.test, scope, hub)


def _sentinel_test(ctx, test, scope, hub) -> bool:
    """``v != c`` / ``v == c`` (``is``, ``is not``) of a local ``v`` against a constant ``c`` it is
    set to outside the distributed branches only: every binding of ``v`` in the scope is ``v = c``
    or sits in the branch of an ``if`` that a single-process run does not take (``tp_dim = -1``,
    then ``if distributed: tp_dim = meta.dim``), at least one the latter. A single-process run
    always sees ``c`` there, so the test decides by the mode."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot))):
        return False
    a, b = test.left, test.comparators[0]
    if _const(a) is not None:
        a, b = b, a
    c = _const(b)
    if not isinstance(a, ast.Name) or c is None or isinstance(scope, ast.Module) \
            or a.id in param_names(scope) or a.id in global_names(scope):
        return False
    in_mode = 0
    for st in ctx.sem.assignments(scope).get(a.id, ()):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and _const(st.value) == c:
            continue
        if not _distributed_only(ctx, st, scope, hub):
            return False
        in_mode += 1
    return in_mode > 0


def _distributed_only(ctx, node, scope, hub) -> bool:
    """``node`` sits in the branch of an ``if`` that a single-process run does not take."""
    return _mode_branch(ctx, node, scope, hub, False)


def single_run_only(ctx, node, scope, hub=None) -> bool:
    """``node`` sits in the branch of an ``if`` on the distributed mode that a single-process run
    takes and a distributed run does not (``if distributed: ... else: node``)."""
    return _mode_branch(ctx, node, scope, hub, True)


def single_run_callers(ctx, fn, depth: int = 0) -> bool:
    """Every call of the function ``fn`` in this file runs only in a one-process run: it sits in
    the branch of a test on the distributed mode that only a single process takes
    (``if self.world > 1: self._sharded(x) else: self._local(x)``), or in a function whose every
    call does, up to three callers deep. False when the file never calls ``fn`` by name or hands
    it on as a value (a callback may run anywhere)."""
    from .rank import _call_index

    if depth > 2 or not isinstance(fn, FUNC_TYPES):
        return False
    by_name, by_attr, as_arg, started = _call_index(ctx)
    method = isinstance(parent(fn), ast.ClassDef)
    sites = by_attr.get(fn.name, ()) if method else by_name.get(fn.name, ())
    if not sites or (not method and (as_arg.get(fn.name) or started.get(fn.name))):
        return False
    for c in sites:
        outer = ctx.sem.enclosing_function(c)
        if outer is None or outer is fn:
            return False
        if not (single_run_only(ctx, c, outer) or single_run_callers(ctx, outer, depth + 1)):
            return False
    return True


def _mode_branch(ctx, node, scope, hub, single: bool) -> bool:
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, ast.If) and child is not p.test:
            side = single_run_side(ctx, p.test, scope, 0, hub)
            if side is not None and (side == ("body" if child in p.body else "orelse")) is single:
                return True
        child, p = p, parent(p)
    return False


def _const(e):
    """(type, value) of a constant (``-1`` included), else None."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) and isinstance(e.operand, ast.Constant) \
            and type(e.operand.value) in (int, float):
        return type(e.operand.value), -e.operand.value
    return (type(e.value), e.value) if isinstance(e, ast.Constant) else None
