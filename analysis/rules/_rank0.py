"""Rank-0 guards for the DDP2xx rules: "does this node run on one rank only?"

``rank0_guarded(ctx, node)`` answers True (only rank 0, or one chosen rank, gets there), False (every
rank gets there) or None (cannot tell: the node sits in a function that this file never calls).
Callers stay silent on None.

A guard is an ``if`` whose test selects the main rank (``rank == 0``, ``dist.get_rank() == 0``,
``args.local_rank in [-1, 0]``, ``master_process``, ``is_main_process()``, ``accelerator.is_main_process``,
``not args.distributed or args.rank % ngpus == 0``...), the ``else`` of the negated test, an early exit
(``if rank != 0: return``), a decorator (``@rank_zero_only``, ``@master_only``), or a helper function
whose every call site in the file is guarded. Everything is a walk up parent pointers plus the
semantic indexes: no tree walk.
"""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent

_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")
_RANK_TOKENS = frozenset({"rank", "gpu", "ordinal", "procid", "rankid"})
_MAIN_TOKENS = frozenset({"master", "main", "zero", "rank0", "chief", "leader", "primary", "root"})
_NOT_MAIN_TOKENS = frozenset({"addr", "address", "port", "ip", "host", "worker", "func", "fn", "args", "parser",
                              "module", "loop", "thread", "dir", "path", "file", "weight", "weights", "grad"})
_RANK_ENV = frozenset({"RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "GROUP_RANK", "NODE_RANK"})
_RANK_NAMES = frozenset({"process_index", "local_process_index", "get_process_index", "get_local_process_index",
                         "device_id", "device_index", "dev_id", "local_device", "local_device_id", "proc_id",
                         "process_id", "gpu_idx", "local_gpu"})
_MAIN_NAMES = frozenset({"should_save", "should_log", "is_world_process_zero", "is_local_process_zero"})
_TERMINATORS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_EXIT_FUNCS = frozenset({"exit", "_exit", "abort"})


def _last_name(expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Call):
        expr = expr.func
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def _tokens(name: str) -> list[str]:
    # camelCase -> camel_case, then split
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    return [t for t in _TOKEN_SPLIT.split(name) if t]


def is_rank_like(expr: ast.AST) -> bool:
    """``rank``, ``args.local_rank``, ``self.global_rank``, ``dist.get_rank()``, ``xm.get_ordinal()``,
    ``args.gpu``, ``rank % ngpus``, ``int(os.environ["RANK"])``."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return is_rank_like(expr.left)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "int" and len(expr.args) == 1:
        return is_rank_like(expr.args[0])
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("get", "getenv") \
            and expr.args and isinstance(expr.args[0], ast.Constant) and expr.args[0].value in _RANK_ENV:
        return True
    if isinstance(expr, ast.Subscript):
        s = expr.slice
        if isinstance(s, ast.Constant) and isinstance(s.value, str) and s.value in _RANK_ENV:
            return True
        return False
    name = _last_name(expr)
    if name is None:
        return False
    toks = set(_tokens(name))
    if toks & _RANK_TOKENS and not (toks & {"world", "size", "count", "num", "nproc", "ids", "per", "node"}):
        return True
    return name.lower() in _RANK_NAMES


def is_main_like(expr: ast.AST) -> bool:
    """``is_main_process()``, ``master_process``, ``accelerator.is_main_process``, ``is_rank_zero``."""
    name = _last_name(expr)
    if name is None or name == "main":
        return False
    if name in _MAIN_NAMES:
        return True
    toks = _tokens(name)
    if not toks or set(toks) & _NOT_MAIN_TOKENS:
        return False
    s = set(toks)
    if "zero" in s and not (s & {"rank", "global", "process", "local", "is", "world", "gpu"}):
        return False
    if "root" in s and len(toks) == 1:
        return False
    if "rank" in s and ("0" in s or "zero" in s or "rank0" in s):
        return True  # on_rank_0, rank_0_only, is_rank_zero
    return bool(s & _MAIN_TOKENS)


def _int_const(e: ast.AST) -> int | None:
    if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.lstrip("-").isdigit():
        return int(e.value)  # os.environ.get("RANK", "0") == "0"
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = _int_const(e.operand)
        return -v if v is not None else None
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return e.value
    return None


def polarity(ctx, test: ast.AST, scope: ast.AST, depth: int = 0) -> bool | None:
    """True: when ``test`` holds, only the main rank (or one chosen rank) runs on.
    False: when ``test`` holds, the non-main ranks run on (``rank != 0``, ``not is_main``).
    None: unrelated to the rank."""
    if depth > 6:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if is_rank_like(test.operand):
            return True  # not rank  <=> rank == 0
        p = polarity(ctx, test.operand, scope, depth + 1)
        return None if p is None else not p
    if isinstance(test, ast.BoolOp):
        ps = [polarity(ctx, v, scope, depth + 1) for v in test.values]
        if isinstance(test.op, ast.And):
            if True in ps:
                return True
            if False in ps:
                return False
            return None
        # or: `not distributed or rank == 0` runs on the main rank (or a single process)
        if True in ps and False not in ps:
            return True
        if False in ps and True not in ps:
            return False
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if is_rank_like(right) and not is_rank_like(left):
            left, right = right, left
            op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
        if not is_rank_like(left):
            if is_main_like(left) and isinstance(right, ast.Constant) and isinstance(right.value, bool):
                if isinstance(op, (ast.Eq, ast.Is)):
                    return right.value
                if isinstance(op, (ast.NotEq, ast.IsNot)):
                    return not right.value
            return None
        k = _int_const(right)
        if isinstance(op, (ast.In, ast.NotIn)):
            if isinstance(right, (ast.List, ast.Tuple, ast.Set)) and any(_int_const(e) == 0 for e in right.elts):
                return isinstance(op, ast.In)
            return None
        if isinstance(op, ast.Eq):  # one rank passes: `rank == 0`, `rank == world_size - 1`, `rank == src`
            return True
        if isinstance(op, ast.NotEq):
            return False
        if k is None:
            return None
        if isinstance(op, ast.LtE) and k <= 0 or isinstance(op, ast.Lt) and k <= 1:
            return True
        if isinstance(op, ast.Gt) and k >= 0 or isinstance(op, ast.GtE) and k >= 1:
            return False
        return None
    if is_main_like(test):
        return True
    if isinstance(test, (ast.Name, ast.Attribute)) and is_rank_like(test):
        return False  # `if rank:` is true on the non-zero ranks
    if isinstance(test, ast.Call) and is_rank_like(test) and not test.args:
        return False  # `if dist.get_rank():`
    if isinstance(test, ast.Name):
        val = ctx.sem.single_value(test.id, scope)
        if val is not None:
            return polarity(ctx, val, scope, depth + 1)
        return None
    if isinstance(test, ast.Attribute):
        # a flag set once in this function: ``args.save_logs = args.logs and is_master(args)``
        vals = _attr_assignments(ctx, scope).get(ctx.text(test))
        if vals and len(vals) == 1:
            return polarity(ctx, vals[0], scope, depth + 1)
        return None
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
        return _helper_polarity(ctx, test.func.id, depth + 1)
    return None


def _attr_assignments(ctx, scope: ast.AST) -> dict[str, list[ast.AST]]:
    """``"args.flag"`` -> values assigned to it in ``scope`` (one walk per scope, cached)."""
    cache = ctx.memo("rank0.attr_assignments", dict)
    got = cache.get(id(scope))
    if got is None:
        got = {}
        if isinstance(scope, FUNC_TYPES):
            for n in iter_scope_nodes(scope):
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Attribute):
                            got.setdefault(ctx.text(t), []).append(n.value)
                elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Attribute):
                    got.setdefault(ctx.text(n.target), []).extend([n.value, n.value])  # not a single binding
        cache[id(scope)] = got
    return got


def _helper_polarity(ctx, name: str, depth: int) -> bool | None:
    """A function defined in the file whose every ``return`` gives the same rank test."""
    defs = ctx.sem.functions.get(name)
    if not defs or len(defs) != 1 or depth > 6:
        return None
    fn = defs[0]
    rets = [s for s in ast.walk(fn) if isinstance(s, ast.Return)] if _small(fn) else []
    if not rets:
        return None
    ps = set()
    for r in rets:
        if r.value is None:
            return None
        if isinstance(r.value, ast.Constant) and isinstance(r.value.value, bool):
            continue  # `if not dist.is_initialized(): return True`
        ps.add(polarity(ctx, r.value, fn, depth + 1))
    return ps.pop() if len(ps) == 1 else None


def _small(fn: ast.AST) -> bool:
    return (getattr(fn, "end_lineno", fn.lineno) - fn.lineno) < 40


def _terminates(body: list[ast.stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, _TERMINATORS):
        return True
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        n = _last_name(last.value)
        return n in _EXIT_FUNCS
    return False


def _decorated_main(fn: ast.AST) -> bool:
    for d in getattr(fn, "decorator_list", ()):
        name = _last_name(d)
        if name and is_main_like(ast.Name(id=name)):
            return True
        if name and set(_tokens(name)) & {"rank0", "zero", "master", "main", "0"} and "only" in _tokens(name):
            return True
    return False


def rank0_guarded(ctx, node: ast.AST, depth: int = 0) -> bool | None:
    """True when ``node`` runs only on the main rank; False when every rank runs it; None when the
    function holding it is never called in this file (cannot tell)."""
    sem = ctx.sem
    child = node
    p = parent(node)
    while p is not None:
        if isinstance(p, (ast.If, ast.IfExp, ast.While)):
            scope = sem.scope_of(p)
            if child is p.test:
                pass
            elif isinstance(p, ast.IfExp):
                pol = polarity(ctx, p.test, scope)
                if (child is p.body and pol is True) or (child is p.orelse and pol is False):
                    return True
            else:
                pol = polarity(ctx, p.test, scope)
                in_body = child in p.body
                if (in_body and pol is True) or (not in_body and child in p.orelse and pol is False):
                    return True
        if isinstance(child, ast.stmt):
            block = _block_of(p, child)
            if block is not None:
                scope = sem.scope_of(child)
                for s in block:
                    if s is child:
                        break
                    if isinstance(s, ast.If):
                        pol = polarity(ctx, s.test, scope)
                        if pol is False and _terminates(s.body):
                            return True
                        if pol is True and s.orelse and _terminates(s.orelse):
                            return True
                    elif isinstance(s, ast.Assert) and polarity(ctx, s.test, scope) is True:
                        return True
        if isinstance(p, FUNC_TYPES):
            if _decorated_main(p):
                return True
            return _callers_guarded(ctx, p, depth)
        if isinstance(p, (ast.Lambda, ast.ClassDef)):
            return None
        child = p
        p = parent(p)
    return False  # module level, unguarded


def _block_of(parent: ast.AST, child: ast.stmt) -> list[ast.stmt] | None:
    for field in ("body", "orelse", "finalbody"):
        lst = getattr(parent, field, None)
        if isinstance(lst, list) and child in lst:
            return lst
    return None


def _call_index(ctx):
    """One pass over the calls: callee name -> call sites, method name -> call sites, and name ->
    calls that take it as a bare argument (cached on the context)."""
    return ctx.memo("rank0.call_index", lambda: _build_call_index(ctx))


def _build_call_index(ctx):
    by_name: dict[str, list[ast.Call]] = {}
    by_attr: dict[str, list[ast.Call]] = {}
    as_arg: dict[str, list[ast.Call]] = {}
    for c in ctx.sem.calls:
        f = c.func
        if isinstance(f, ast.Name):
            by_name.setdefault(f.id, []).append(c)
        elif isinstance(f, ast.Attribute) and ctx.qn(c) is None:
            by_attr.setdefault(f.attr, []).append(c)
        for a in c.args:
            if isinstance(a, ast.Name):
                as_arg.setdefault(a.id, []).append(c)
    return by_name, by_attr, as_arg


def _callers_guarded(ctx, fn: ast.AST, depth: int) -> bool | None:
    """Every call of ``fn`` in the file is rank-0 guarded: True; some call is not: False; no call:
    None. A function passed to ``mp.spawn`` runs on every rank: False; passed elsewhere: None."""
    if depth > 3:
        return None
    cache = ctx.memo("rank0.callers_guarded", dict)
    key = (id(fn), depth)
    if key in cache:
        return cache[key]
    cache[key] = None  # recursion guard
    res = _callers_guarded_uncached(ctx, fn, depth)
    cache[key] = res
    return res


def _callers_guarded_uncached(ctx, fn: ast.AST, depth: int) -> bool | None:
    name = fn.name
    is_method = isinstance(parent(fn), ast.ClassDef)
    by_name, by_attr, as_arg = _call_index(ctx)
    if not is_method:
        for c in as_arg.get(name, ()):
            return False if _spawn_like(ctx, c) else None
    sites = by_attr.get(name, ()) if is_method else by_name.get(name, ())
    if not sites:
        return None
    results = []
    for c in sites:
        if c.lineno >= fn.lineno and c.end_lineno <= fn.end_lineno:
            continue  # recursion
        results.append(rank0_guarded(ctx, c, depth + 1))
    if not results:
        return None
    if all(r is True for r in results):
        return True
    if False in results:
        return False
    return None


def _spawn_like(ctx, call: ast.Call) -> bool:
    qn = ctx.qn(call) or ""
    return qn in ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")
