"""Which ranks a filesystem path is the same on, beside ``fs_effects`` (what the calls do to paths):

- ``main_only_part(ctx, view, path, at)``: a name of a path expression that holds its real value
  only on the main rank (set under a main-rank test) and a literal fallback on every other rank
  (``out_dir = ""`` before ``if rank == 0: out_dir = make_run_dir()``): the other ranks all use
  the fallback, the same path.
- ``rank_specific_path(ctx, expr, at)``: the path (or file object) is this rank's own: made of
  the rank (``f"ckpt_{rank}.pt"``), through names bound before ``at`` and ``with ... as f``, or
  an in-memory buffer (DDP202, DDP203, DDP215, DDP217).
- ``per_process_path(ctx, expr, at)``: the path holds a value each process makes for itself
  (``uuid.uuid4()``, ``os.getpid()``, ``tempfile.mkdtemp()``), not one a broadcast or the
  launcher made the same on every rank: no two ranks name the same file (DDP202).
- ``dumped_file(ctx, call)``: the path a serializer's dump writes (``pickle.dump(obj, f)``,
  ``json.dump``, ``yaml.dump``) when its file object was opened for writing at it
  (``with open(p, "wb") as f``, ``f = open(p, "w")``, ``Path(p).open("w")``), by value flow (DDP202).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent, subtree
from ..torch_api import constant_of
from .assignments import reaching_assignment, reaching_value, unpacked_call
from .rank_tests import is_rank_like
class MainOnlyPart:
    """A name of a path expression that holds the real value only on the main rank: ``name``
    (the use), ``main`` (its binding under a main-rank test), ``fallback`` (a binding that reaches
    the use on the other ranks, ``name = "<literal string>"``) and its ``value``."""

    __slots__ = ("name", "main", "fallback", "value")

    def __init__(self, name, main, fallback, value):
        self.name, self.main, self.fallback, self.value = name, main, fallback, value


def main_only_part(ctx, view, path: ast.AST, at: ast.AST, literal: bool = True) -> MainOnlyPart | None:
    """A name used in ``path`` (an expression of ``view``'s module, evaluated at ``at``) whose
    bindings that reach ``at`` (``bindings.reaching``) are some made under a main-rank test of its
    own function (``rank.rank0_guarded``, callers not asked) and the others all ``name = "<str>"``
    outside one: a rank that is not the main one reaches ``at`` with the literal, the same on every
    such rank. None when no such name, or when ``at`` sits under a test of that name (``if out:``,
    ``if out is not None:``, an early exit on it): that test may keep the fallback away.
    ``literal=False``: any fallback (``out = None``; ``value`` None), tested or not: the other
    ranks do not see the main rank's path there (whether they reach ``at`` at all or not)."""
    from .bindings import reaching
    from .rank import rank0_guarded

    for n in ast.walk(path):
        if n.__class__ is not ast.Name or not isinstance(n.ctx, ast.Load):
            continue
        kind, evs = reaching(view, n.id, n)
        if kind != "events" or len(evs) < 2:
            continue
        main, rest = [], []
        for e in evs:
            (main if rank0_guarded(ctx, e, callers=False) is True else rest).append(e)
        if not main or not rest:
            continue
        if not literal:
            return MainOnlyPart(n, main[0], rest[0], None)
        vals = [_literal_fallback(e, n.id) for e in rest]
        if any(v is None for v in vals) or _tested(n.id, at):
            continue
        return MainOnlyPart(n, main[0], rest[0], vals[0])
    return None


def _literal_fallback(e, name: str) -> str | None:
    """``name = "<str>"`` (also ``name: str = "<str>"``, ``a, name = x, "<str>"``): the string, else
    None."""
    if isinstance(e, ast.Assign) and len(e.targets) == 1 and isinstance(e.targets[0], ast.Name):
        v = e.value
    elif isinstance(e, ast.Assign) and len(e.targets) == 1 and isinstance(e.targets[0], (ast.Tuple, ast.List)) \
            and isinstance(e.value, (ast.Tuple, ast.List)) and len(e.targets[0].elts) == len(e.value.elts):
        got = [y for x, y in zip(e.targets[0].elts, e.value.elts) if isinstance(x, ast.Name) and x.id == name]
        if len(got) != 1:
            return None
        v = got[0]
    elif isinstance(e, ast.AnnAssign) and isinstance(e.target, ast.Name):
        v = e.value
    else:
        return None
    if isinstance(v, ast.Constant) and isinstance(v.value, str):
        return v.value
    return None


def _mentions(node, name: str) -> bool:
    return any(x.__class__ is ast.Name and x.id == name for x in ast.walk(node))


def _tested(name: str, at: ast.AST) -> bool:
    """``at`` sits under a test that reads ``name`` (an ``if``/``while``/conditional expression
    around it, a test before it in an enclosing block whose body leaves the block), up to its
    function."""
    child, p = at, parent(at)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and child is not p.test and _mentions(p.test, name):
            return True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if isinstance(block, list) and child in block:
                for s in block[:block.index(child)]:
                    if isinstance(s, (ast.If, ast.Assert)) and _mentions(s.test, name):
                        return True
        child, p = p, parent(p)
    if p is not None:
        for s in getattr(p, "body", ())[:]:
            if s is child:
                break
            if isinstance(s, (ast.If, ast.Assert)) and _mentions(s.test, name):
                return True
    return False


# in-memory file objects: each process writes its own
_BUFFERS = ("io.BytesIO", "io.StringIO", "tempfile.TemporaryFile", "tempfile.NamedTemporaryFile",
            "tempfile.SpooledTemporaryFile")


def rank_specific_path(ctx, expr: ast.AST, at: ast.AST, depth: int = 0, buffers: bool = True) -> bool:
    """The path (or file object) ``expr`` is this rank's own: it is made of the rank
    (``f"ckpt_{rank}.pt"``), or (``buffers``) it is an in-memory buffer (``io.BytesIO()``)."""
    if depth > 3:
        return buffers
    for n in ast.walk(expr):
        if isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and is_rank_like(n):
            return True
        if buffers and isinstance(n, ast.Call) and (ctx.qn(n) or "") in _BUFFERS:
            return True
        if isinstance(n, ast.Name) and n is not expr and depth < 3:
            st = reaching_assignment(ctx, n.id, at)
            if st is not None and rank_specific_path(ctx, st.value, st, depth + 1, buffers):
                return True
    if isinstance(expr, ast.Name):
        st = reaching_assignment(ctx, expr.id, at)
        if st is not None:
            return rank_specific_path(ctx, st.value, st, depth + 1, buffers) or \
                _per_rank_or_single(ctx, expr.id, at, depth, buffers)
        # bound by `with open(...) as f` / `with io.BytesIO() as f` / a loop: look at the binding
        scope = ctx.sem.scope_of(at)
        for b in ctx.sem.assignments(scope).get(expr.id, ()):
            if isinstance(b, (ast.With, ast.AsyncWith)):
                for item in b.items:
                    if rank_specific_path(ctx, item.context_expr, b, depth + 1, buffers):
                        return True
    return False


def _per_rank_or_single(ctx, name: str, at: ast.AST, depth: int, buffers: bool) -> bool:
    """Every binding of ``name`` in the function of ``at`` (at least two, all ``name = value``) is
    this rank's own path, or sits in the branch of a test on the distributed mode that only a
    one-process run takes (``if world_size > 1: f = f"rng_{rank}.pth"`` / ``else: f = "rng.pth"``):
    several processes never share the file."""
    from .mode_unbound import single_run_only

    scope = ctx.sem.scope_of(at)
    binds = ctx.sem.assignments(scope).get(name, ())
    if isinstance(scope, ast.Module) or len(binds) < 2:
        return False
    mine = 0
    for b in binds:
        if not (isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name)):
            return False
        if single_run_only(ctx, b, scope):
            continue
        if not rank_specific_path(ctx, b.value, b, depth + 1, buffers):
            return False
        mine += 1
    return mine > 0


# a value each process makes for itself and no two processes share: a random name from the
# system's entropy (``uuid4``, ``secrets``: nothing a seed makes equal), the process id, a fresh
# temporary file or folder (created exclusively)
PER_PROCESS_CALLS = frozenset({"uuid.uuid4", "os.getpid", "tempfile.mkdtemp", "tempfile.mkstemp", "tempfile.mktemp",
                               "tempfile.TemporaryDirectory",
                               "secrets.token_hex", "secrets.token_urlsafe", "secrets.token_bytes", "os.urandom"})
# calls that build a path or a string out of their parts (the value of a part shows in the result)
_BUILDERS = frozenset({"os.path.join", "posixpath.join", "str", "os.fspath", "pathlib.Path", "Path",
                       "os.path.abspath", "os.path.expanduser"})
_BUILDER_METHODS = frozenset({"format", "joinpath", "with_name", "with_suffix", "replace"})


def per_process_path(ctx, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """The path (or a file opened at it, ``with open(p, "wb") as f``) holds a value each process
    makes for itself (``PER_PROCESS_CALLS``: ``os.path.join(d, str(uuid.uuid4()))``,
    ``f"{d}/{os.getpid()}.pt"``, ``tempfile.mkdtemp()``): no two ranks name the same file. Followed
    only through what keeps a part's value in the result (f-strings, ``+``/``/``, path and string
    builders, ``.hex``, a slice, names bound before ``at``, ``with ... as``): a value handed to any
    other call (a broadcast from rank 0, a project helper) or put in a list (filled in place by
    ``broadcast_object_list``) may come back the same on every rank, and is not one."""
    if expr is None or depth > 8:
        return False
    t = expr.__class__
    if t is ast.Call:
        qn = ctx.qn(expr) or ""
        if qn in PER_PROCESS_CALLS:
            return True
        f = expr.func
        name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")
        if name == "open" and expr.args:  # a file opened at the path
            return per_process_path(ctx, expr.args[0], at, depth + 1)
        parts = []
        if qn in _BUILDERS or (not qn and isinstance(f, ast.Name) and f.id == "str"):
            parts = [*expr.args, *(k.value for k in expr.keywords)]
        elif isinstance(f, ast.Attribute) and name in _BUILDER_METHODS:
            parts = [f.value, *expr.args, *(k.value for k in expr.keywords)]
        return any(per_process_path(ctx, a, at, depth + 1) for a in parts)
    if t is ast.JoinedStr:
        return any(per_process_path(ctx, v.value, at, depth + 1) for v in expr.values if isinstance(v, ast.FormattedValue))
    if t is ast.BinOp:
        return per_process_path(ctx, expr.left, at, depth + 1) or per_process_path(ctx, expr.right, at, depth + 1)
    if t in (ast.Attribute, ast.Subscript):  # ``uuid.uuid4().hex``, ``str(uuid.uuid4())[:8]``
        return per_process_path(ctx, expr.value, at, depth + 1)
    if t is ast.Name:
        st = reaching_assignment(ctx, expr.id, at)
        if st is not None:
            return per_process_path(ctx, st.value, st, depth + 1)
        v = reaching_value(ctx, expr.id, at)  # ``name, step = uuid.uuid4().hex, 0``
        if v is not None:
            return per_process_path(ctx, v, at, depth + 1)
        c = unpacked_call(ctx, expr.id, at)  # ``fd, name = tempfile.mkstemp()``
        if c is not None and (ctx.qn(c) or "") in PER_PROCESS_CALLS:
            return True
        for b in ctx.sem.assignments(ctx.sem.scope_of(at)).get(expr.id, ()):
            if isinstance(b, (ast.With, ast.AsyncWith)):
                for item in b.items:
                    v = item.optional_vars
                    if isinstance(v, ast.Name) and v.id == expr.id and per_process_path(ctx, item.context_expr, b, depth + 1):
                        return True
    return False


# serializers that write a whole object into a file object: qualified name -> (position, keyword)
# of the file object
DUMPS = {"pickle.dump": (1, "file"), "json.dump": (1, "fp"), "yaml.dump": (1, "stream"),
         "yaml.safe_dump": (1, "stream"), "yaml.dump_all": (1, "stream"), "yaml.safe_dump_all": (1, "stream")}
_OPENS = frozenset({"open", "io.open", "builtins.open"})


def dumped_file(ctx, call: ast.Call) -> ast.AST | None:
    """The path that the dump ``call`` (``DUMPS``) writes the whole file at: its file object is a
    file opened for writing from the start (mode ``"w"``/``"wb"``/``"x"``, not an append) at that
    path: the ``open(p, "w")`` call itself, a name bound to one (``f = open(p, "w")``), or a ``with
    open(p, "wb") as f:`` around the dump; ``Path(p).open("w")`` gives ``Path(p)``. None otherwise."""
    where = DUMPS.get(ctx.qn(call) or "")
    handle = get_arg(call, *where) if where else None
    if isinstance(handle, ast.Name):
        handle = _handle_opener(ctx, handle.id, call)
    if not isinstance(handle, ast.Call):
        return None
    f = handle.func
    if (ctx.qn(handle) or "") in _OPENS or (isinstance(f, ast.Name) and f.id == "open" and not ctx.qn(handle)):
        path, mode = get_arg(handle, 0, "file"), get_arg(handle, 1, "mode")
    elif isinstance(f, ast.Attribute) and f.attr == "open":
        from .fs_effects import is_path_obj  # noqa: PLC0415  (fs_effects reads paths at large)

        if not is_path_obj(ctx, f.value):
            return None
        path, mode = f.value, get_arg(handle, 0, "mode")
    else:
        return None
    mode = constant_of(ctx.sem, mode) if mode is not None else None
    if path is None or mode is None or not isinstance(mode.value, str) or not set(mode.value) & set("wx"):
        return None
    return path


def _handle_opener(ctx, name: str, at: ast.AST) -> ast.AST | None:
    """The call a file object named ``name`` was made by at ``at``: the ``with ... as name`` around
    ``at``, else the value of the plain assignment that reaches it."""
    for a in ctx.sem.ancestors(at):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                v = item.optional_vars
                if isinstance(v, ast.Name) and v.id == name:
                    return item.context_expr
        if isinstance(a, FUNC_TYPES):
            break
    return reaching_value(ctx, name, at)


_SAMPLERS = ("torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler")
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def per_item_path(ctx, path: ast.AST, call: ast.Call) -> bool:
    """The path names an item of this rank's share of the work: it mentions a variable bound by an
    enclosing ``for`` over a rank-split list (``paths[rank::world_size]``), a rank's stride of the
    indices (``range(rank, n, world_size)``), a rank's block of them (``range(rank * per, (rank + 1)
    * per)``) or over a loader with a
    ``DistributedSampler`` (also through ``enumerate``/``zip`` and inner loops over the batch, and
    plain assignments inside those loops). Each rank then writes its own files."""
    sem = ctx.sem
    loops = []
    for a in sem.ancestors(call):
        if isinstance(a, _FUNCS):
            break
        if isinstance(a, (ast.For, ast.AsyncFor)):
            loops.append(a)
    if not loops:
        return False
    tainted: set[str] = set()
    for loop in reversed(loops):  # outermost first
        if _sharded(ctx, loop.iter, loop, 0) or _names(loop.iter) & tainted:
            tainted |= _names(loop.target)
            # plain assignments in the loop body that derive from the item
            for st in sorted((n for n in subtree(loop) if isinstance(n, (ast.Assign, ast.AnnAssign))
                              and n.value is not None), key=lambda n: n.lineno):
                if _names(st.value) & tainted:
                    for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
                        tainted |= _names(t)
    if not tainted:
        return False
    names = _names(path)
    if isinstance(path, ast.Name):
        st = reaching_assignment(ctx, path.id, call)
        if st is not None:
            names |= _names(st.value)
    return bool(names & tainted)


def _names(e: ast.AST) -> set[str]:
    return {n.id for n in subtree(e) if isinstance(n, ast.Name)}


def _sharded(ctx, e: ast.AST, at: ast.AST, depth: int) -> bool:
    if depth > 3 or e is None:
        return False
    for n in subtree(e):
        if isinstance(n, ast.Subscript) and any(is_rank_like(x) for x in subtree(n.slice)
                                                 if isinstance(x, (ast.Name, ast.Attribute, ast.Call))):
            return True  # paths[rank::world_size], chunks[rank]
        if isinstance(n, ast.Call):
            if (ctx.qn(n) or "") in _SAMPLERS:
                return True
            if (n.func.__class__ is ast.Name and n.func.id == "range" and len(n.args) == 3
                    and any(is_rank_like(x) for x in subtree(n.args[0])
                            if isinstance(x, (ast.Name, ast.Attribute, ast.Call)))):
                return True  # range(rank, n, world_size): this rank's stride of the items
            if n.func.__class__ is ast.Name and n.func.id == "range" and _rank_chunk(ctx, n, at):
                return True  # range(rank * per, (rank + 1) * per): this rank's block of the items
            for k in n.keywords:
                if k.arg == "sampler" and _sharded(ctx, k.value, at, depth + 1):
                    return True
        if isinstance(n, ast.Name) and depth < 3:
            st = reaching_assignment(ctx, n.id, at)
            if st is not None and _sharded(ctx, st.value, st, depth + 1):
                return True
    return False


def _bound(ctx, e: ast.AST, at: ast.AST) -> ast.AST:
    """``e``, or the value of the plain assignment of the name ``e`` that reaches ``at``."""
    if isinstance(e, ast.Name):
        st = reaching_assignment(ctx, e.id, at)
        if st is not None and isinstance(st, ast.Assign) and len(st.targets) == 1:
            return st.value
    return e


def _rank_times(ctx, e: ast.AST, at: ast.AST) -> ast.AST | None:
    """``per`` when ``e`` is ``rank * per`` (``per * rank``; through a name bound before ``at``)."""
    e = _bound(ctx, e, at)
    if not (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult)):
        return None
    for r, k in ((e.left, e.right), (e.right, e.left)):
        r = _bound(ctx, r, at)
        if isinstance(r, (ast.Name, ast.Attribute, ast.Call)) and is_rank_like(r):
            return k
    return None


def _rank_chunk(ctx, rng: ast.Call, at: ast.AST) -> bool:
    """``range(start, stop)`` is this rank's block of the indices: ``start = rank * per`` and ``stop``
    is ``start + per`` or ``(rank + 1) * per`` (either under ``min(..., n)``), so the blocks of two
    ranks never overlap."""
    if len(rng.args) != 2:
        return False
    start, stop = rng.args
    per = _rank_times(ctx, start, at)
    if per is None:
        return False
    same = ast.dump(per)
    stop = _bound(ctx, stop, at)
    if isinstance(stop, ast.Call) and isinstance(stop.func, ast.Name) and stop.func.id == "min" and stop.args:
        stops = stop.args
    else:
        stops = [stop]
    for s in stops:
        if isinstance(s, ast.BinOp) and isinstance(s.op, ast.Add):
            for a, b in ((s.left, s.right), (s.right, s.left)):
                if ast.dump(b) == same and (ast.dump(a) == ast.dump(start) or _rank_times(ctx, a, at) is not None
                                            and ast.dump(_rank_times(ctx, a, at)) == same):
                    return True  # start + per
        if isinstance(s, ast.BinOp) and isinstance(s.op, ast.Mult):
            for a, b in ((s.left, s.right), (s.right, s.left)):
                a = _bound(ctx, a, at)
                if ast.dump(b) == same and isinstance(a, ast.BinOp) and isinstance(a.op, ast.Add) and any(
                        isinstance(x, ast.Constant) and x.value == 1 for x in (a.left, a.right)) and any(
                        isinstance(x, (ast.Name, ast.Attribute, ast.Call)) and is_rank_like(x) for x in (a.left, a.right)):
                    return True  # (rank + 1) * per
    return False
