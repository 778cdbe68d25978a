"""Rank expressions and rank guards, shared by the DDP0xx/DDP1xx rules.

Everything here is a query on one node and its ancestors (parent pointers from the engine's single
traversal) plus the semantic indexes; nothing walks the whole tree.

- ``rank_kind(expr)``: is this expression the process rank? ``"global"`` for ``dist.get_rank()``
  and ``os.environ["RANK"]`` (directly or through simple assignments), ``"rank"`` for anything that is
  a rank by name (``rank``, ``args.local_rank``, ``comm.get_rank()``, ``rank % ngpus``).
- ``rank_test(test)``: does this condition select a subset of the ranks (``rank == 0``,
  ``not is_main``, ``utils.is_primary(args)``, ``is_main_process()`` helpers defined in the file,
  boolean combinations)?
- ``rank_guard(node)``: the innermost ``if`` (or early exit) that makes ``node`` run on a subset of
  the ranks only.
"""
from __future__ import annotations

import ast
import os
import re

from ..context import D
# the rank vocabulary is the semantic layer's (one definition)
from ..flow.uniformity import MAIN_NAMES as _MAIN_NAMES
from ..flow.uniformity import RANK_ENV as _RANK_ENV
from ..flow.uniformity import RANK_NAME as _RANK_NAME
from ..semantic import FUNC_TYPES, param_names, parent


_LOCAL_RANK_NAME = re.compile(r"^_?local_?rank", re.I)
_RANK_FUNCS = frozenset({
    "get_rank", "get_local_rank", "get_global_rank", "get_process_rank", "get_node_rank",
    "get_dist_rank", "get_world_rank", "get_node_local_rank",
})
_GLOBAL_RANK_ENV = frozenset({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
_TERMINATORS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def terminal_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def env_key(ctx, expr: ast.AST) -> str | None:
    """``"RANK"`` for ``os.environ["RANK"]``, ``os.environ.get("RANK", ...)``, ``os.getenv("RANK")``."""
    if isinstance(expr, ast.Subscript):
        if ctx.qn(expr.value) == "os.environ":
            s = expr.slice
            if isinstance(s, ast.Constant) and isinstance(s.value, str):
                return s.value
        return None
    if isinstance(expr, ast.Call) and expr.args:
        qn = ctx.qn(expr)
        if qn in ("os.environ.get", "os.getenv", "os.environ.__getitem__"):
            a = expr.args[0]
            if isinstance(a, ast.Constant) and isinstance(a.value, str):
                return a.value
    return None


def _unwrap_int(expr: ast.AST) -> ast.AST:
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "int" \
            and len(expr.args) == 1 and not expr.keywords:
        expr = expr.args[0]
    return expr


def name_binding_kind(ctx, name: str, scope: ast.AST):
    """('param' | 'loop' | 'single' | 'multi' | 'none', value-or-None) for ``name`` seen from
    ``scope`` (falls back to module level for names the function does not bind)."""
    sem = ctx.sem
    while True:
        if isinstance(scope, FUNC_TYPES) or isinstance(scope, ast.Lambda):
            if name in param_names(scope):
                return "param", None
        binds = sem.assignments(scope).get(name)
        if binds:
            break
        if isinstance(scope, ast.Module):
            return "none", None
        scope = sem.tree
    if any(isinstance(b, (ast.For, ast.AsyncFor)) for b in binds):
        return "loop", None
    if len(binds) == 1:
        return "single", sem.single_value(name, scope)
    # several bindings: a rank when every plain assignment gives a rank
    vals = []
    for b in binds:
        if isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name):
            vals.append(b.value)
        elif isinstance(b, ast.AnnAssign) and b.value is not None:
            vals.append(b.value)
        else:
            return "multi", None
    return "multi", vals


def global_rank_source(ctx, expr: ast.AST, scope: ast.AST, depth: int = 0) -> ast.AST | None:
    """The ``dist.get_rank()`` / ``os.environ["RANK"]`` expression that ``expr`` provably is (through
    ``int(...)`` and names assigned exactly once), else None. ``get_rank(group)`` is a group rank,
    not the global one."""
    if depth > 5:
        return None
    expr = _unwrap_int(expr)
    if isinstance(expr, ast.Call):
        qn = ctx.qn(expr)
        if qn == D + "get_rank" and not expr.args and not expr.keywords:
            return expr
        if qn == D + "get_global_rank":
            return None
    key = env_key(ctx, expr)
    if key is not None:
        return expr if key in _GLOBAL_RANK_ENV else None
    if isinstance(expr, ast.Name):
        kind, val = name_binding_kind(ctx, expr.id, scope)
        if kind == "single" and val is not None:
            return global_rank_source(ctx, val, ctx.sem.scope_of(val), depth + 1)
    return None


def rank_kind(ctx, expr: ast.AST, scope: ast.AST, depth: int = 0) -> str | None:
    """"global" (provably the global rank), "rank" (a rank by name or helper), or None."""
    if depth > 5:
        return None
    if global_rank_source(ctx, expr, scope) is not None:
        return "global"
    expr = _unwrap_int(expr)
    if isinstance(expr, ast.Call):
        qn = ctx.qn(expr)
        if qn and qn.startswith(D):
            return "rank" if qn[len(D):] in ("get_rank", "get_node_local_rank") else None
        if terminal_name(expr.func) in _RANK_FUNCS:
            return "rank"
        return None
    key = env_key(ctx, expr)
    if key is not None:
        return "rank" if key in _RANK_ENV else None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return "rank" if rank_kind(ctx, expr.left, scope, depth + 1) else None
    if isinstance(expr, ast.Attribute):
        return "rank" if _RANK_NAME.match(expr.attr) else None
    if isinstance(expr, ast.Name):
        kind, val = name_binding_kind(ctx, expr.id, scope)
        if kind == "loop":
            return None
        if kind == "single" and val is not None:
            if isinstance(val, ast.Constant) or _tensor_rank(val):
                return None
            k = rank_kind(ctx, val, ctx.sem.scope_of(val), depth + 1)
            if k:
                return k
        if kind == "multi" and isinstance(val, list):
            if val and all(not isinstance(v, ast.Constant) and rank_kind(ctx, v, ctx.sem.scope_of(v), depth + 1) for v in val):
                return "rank"
        return "rank" if _RANK_NAME.match(expr.id) else None
    return None


def _tensor_rank(val: ast.AST) -> bool:
    """``rank = len(shape)`` / ``x.dim()`` / ``x.ndim``: the rank of a tensor, not of a process."""
    if isinstance(val, ast.Call):
        n = terminal_name(val.func)
        return n in ("len", "dim", "ndimension", "matrix_rank")
    return isinstance(val, ast.Attribute) and val.attr in ("ndim",)


def is_local_rank_expr(ctx, expr: ast.AST, scope: ast.AST) -> bool:
    expr = _unwrap_int(expr)
    key = env_key(ctx, expr)
    if key is not None:
        return key in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")
    n = terminal_name(expr)
    return bool(n and _LOCAL_RANK_NAME.match(n))


# -- rank tests ------------------------------------------------------------------------------------

class Test:
    """A condition that selects ranks: ``body`` when the if-body runs on a subset of the ranks only,
    ``orelse`` when the else-branch does too (false for ``rank == 0 and x``)."""

    __slots__ = ("node", "body", "orelse")

    def __init__(self, node, body: bool, orelse: bool):
        self.node, self.body, self.orelse = node, body, orelse


def _int_like(e: ast.AST) -> bool:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        e = e.operand
    return isinstance(e, ast.Constant) and type(e.value) is int


_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}


def _int_val(e: ast.AST) -> int:
    if isinstance(e, ast.UnaryOp):
        return -e.operand.value
    return e.value


def _selects_some(op: ast.cmpop, b: ast.AST) -> bool:
    """``rank <op> b`` holds for some valid ranks (>= 0) but not all: ``rank >= 0`` and
    ``local_rank != -1`` mean "distributed", ``rank == -1`` means "not distributed"."""
    if isinstance(b, (ast.List, ast.Tuple, ast.Set)):
        valid = [v for v in map(_int_val, b.elts) if v >= 0]
        return bool(valid)  # ``in [-1, 0]`` selects rank 0; ``not in [-1, 0]`` the others
    c = _int_val(b)
    if isinstance(op, (ast.Eq, ast.NotEq)):
        return c >= 0
    if isinstance(op, ast.Gt):
        return c >= 0
    if isinstance(op, ast.GtE):
        return c >= 1
    if isinstance(op, ast.Lt):
        return c >= 1
    if isinstance(op, ast.LtE):
        return c >= 0
    return False


def _main_helper(ctx, name: str, depth: int) -> bool:
    """A function defined in this file whose result is a rank test (``return get_rank() == 0``)."""
    if depth > 3:
        return False
    defs = ctx.sem.functions.get(name)
    if not defs or len(defs) != 1:
        return False
    fn = defs[0]
    rets = [s for s in fn.body if isinstance(s, ast.Return)]
    if len(rets) != 1 or rets[0] is not fn.body[-1] or rets[0].value is None:
        return False
    t = rank_test(ctx, rets[0].value, fn, depth + 1)
    return t is not None and t.body and t.orelse


def rank_test(ctx, test: ast.AST, scope: ast.AST, depth: int = 0) -> Test | None:
    if depth > 6:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        t = rank_test(ctx, test.operand, scope, depth + 1)
        if t is None:
            return None
        return Test(test, t.orelse, t.body)
    if isinstance(test, ast.BoolOp):
        subs = [rank_test(ctx, v, scope, depth + 1) for v in test.values]
        if isinstance(test.op, ast.And):
            if any(s is not None and s.body for s in subs):
                pure = all(s is not None and s.body and s.orelse for s in subs)
                return Test(test, True, pure)
            return None
        # or: the body is a subset only when every alternative is
        if all(s is not None for s in subs):
            return Test(test, all(s.body for s in subs), all(s.orelse for s in subs) and len(subs) == 1)
        return None
    if isinstance(test, ast.Compare):
        if len(test.ops) != 1:
            return None
        op = test.ops[0]
        left, right = test.left, test.comparators[0]
        for a, b in ((left, right), (right, left)):
            if rank_kind(ctx, a, scope):
                if _int_like(b) or (isinstance(b, (ast.List, ast.Tuple, ast.Set)) and b.elts and all(_int_like(e) for e in b.elts)):
                    if a is right:
                        op = _FLIP.get(type(op), type(op))()
                    if _selects_some(op, b):
                        return Test(test, True, True)
                    return None
                if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(b, (ast.Name, ast.Attribute)) and not rank_kind(ctx, b, scope):
                    return Test(test, True, True)
                return None
        return None
    if isinstance(test, ast.Call):
        n = terminal_name(test.func)
        if n in _MAIN_NAMES:
            return Test(test, True, True)
        if isinstance(test.func, ast.Name) and n is not None and _main_helper(ctx, n, depth):
            return Test(test, True, True)
        return None
    if isinstance(test, ast.Attribute):
        return Test(test, True, True) if test.attr in _MAIN_NAMES else None
    if isinstance(test, ast.Name):
        kind, val = name_binding_kind(ctx, test.id, scope)
        if kind == "single" and val is not None:
            t = rank_test(ctx, val, ctx.sem.scope_of(val), depth + 1)
            if t is not None:
                return Test(test, t.body, t.orelse)
            if isinstance(val, ast.Constant):
                return None
        if kind == "loop":
            return None
        return Test(test, True, True) if test.id in _MAIN_NAMES else None
    return None


# -- guards ----------------------------------------------------------------------------------------

class Guard:
    """``node`` runs only on a subset of ranks because of ``if_node`` (``branch`` is "body",
    "orelse", or "after" for code after ``if <test>: return``)."""

    __slots__ = ("if_node", "branch", "test")

    def __init__(self, if_node: ast.If, branch: str, test: Test):
        self.if_node, self.branch, self.test = if_node, branch, test

    def key(self, ctx) -> tuple:
        return (ctx.text(self.if_node.test), self.branch)


def terminates(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], _TERMINATORS)


def rank_guard(ctx, node: ast.AST) -> Guard | None:
    """The innermost rank guard of ``node`` within its function (or module)."""
    scope = ctx.sem.scope_of(node)
    child = node
    p = parent(node)
    while p is not None:
        if isinstance(p, ast.If) and child is not p.test:
            in_body = child in p.body
            t = rank_test(ctx, p.test, scope)
            if t is not None:
                if in_body and t.body:
                    return Guard(p, "body", t)
                if not in_body and t.orelse:
                    return Guard(p, "orelse", t)
        # early exits before ``child`` in the same block: ``if not is_main: return``
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if isinstance(block, list) and child in block:
                idx = block.index(child)
                for prev in reversed(block[:idx]):
                    if isinstance(prev, ast.If) and terminates(prev.body) and not prev.orelse:
                        t = rank_test(ctx, prev.test, scope)
                        if t is not None and t.orelse:
                            return Guard(prev, "after", t)
                break
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            break
        child = p
        p = parent(p)
    return None


_RAISES = frozenset({"assertRaises", "assertRaisesRegex", "assertRaisesRegexp", "raises", "assertWarns",
                     "assertWarnsRegex", "warns"})


def expects_error(node: ast.AST) -> bool:
    """``node`` sits in ``with self.assertRaises(...)`` / ``with pytest.raises(...)``: a test that
    makes the failure on purpose."""
    p = parent(node)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for item in p.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and terminal_name(e.func) in _RAISES:
                    return True
        p = parent(p)
    return False


def is_test_file(filename: str) -> bool:
    """``test_*.py`` / ``*_test.py`` / ``conftest.py``: multi-process tests run on one node with a
    world size fixed by their harness (``MultiProcessTestCase``, a pytest fixture)."""
    base = os.path.basename(filename or "")
    return base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"
