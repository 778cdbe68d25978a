"""Rank expressions and rank tests: is this expression the process rank, and does this condition
select some of the ranks (or the main rank)? Built on uniformity's rank sources (``RANK_NAME``,
``MAIN_NAMES``, ``RANK_ENV``, ``env_key``): one vocabulary for "this is the rank". Two questions:

- ``rank_kind(expr)``: ``"global"`` for ``dist.get_rank()`` and ``os.environ["RANK"]`` (directly or through
  simple assignments), ``"rank"`` for anything that is a rank by name (``rank``, ``args.local_rank``,
  ``comm.get_rank()``, ``rank % ngpus``); ``rank_test(test)``: does this condition select a subset of the
  ranks (``rank == 0``, ``not is_main``, ``utils.is_primary(args)``, ``is_main_process()`` helpers defined
  in the file, boolean combinations), and on which branch? Used where *any* subset matters.
- ``polarity(test)``: does the condition let only the main rank (or one chosen rank) through (True),
  only the others (False), or is it unrelated (None)? ``is_rank_like`` / ``is_main_like`` also read
  names by their words (``args.gpu``, ``xm.get_ordinal()``, ``should_save``, ``@rank_zero_only``).
  Used where the main rank's side matters (a save or a load on rank 0).
Everything is a query on a node plus the semantic indexes; nothing walks the whole tree.
"""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, param_names, parent, terminal_name
from ..torch_api import D
from .assignments import name_binding_kind, self_attr_value
from .cli_options import sub_config_field
from .rank_flags import main_flag
from .returned_flags import returned_main_only, returned_polarity
from .world_tests import _int_const, _unwrap_int, single_world_test, world_size_source  # noqa: F401  (re-exported)
from .uniformity import _FLIP, _RANK_QNS, MAIN_NAMES, RANK_ENV, RANK_NAME, _int_vals, _rank_compare_uniform, env_key

# uniformity's rank variables, split by what they count (node ranks and group ranks are neither)
GLOBAL_RANK_ENV = frozenset({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
LOCAL_RANK_ENV = frozenset({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"})
_LOCAL_RANK_NAME = re.compile(r"^_?local_?rank", re.I)


def is_rank_function(name: str | None) -> bool:
    """``get_rank``, ``get_local_rank``, ``comm.get_global_rank``...: ``get_`` + a rank by name, or
    the name of a ``torch.distributed`` rank function (``get_node_local_rank``) on another module."""
    return bool(name) and name.startswith("get_") and (
        RANK_NAME.match(name[4:]) is not None or D + name in _RANK_QNS)


def global_rank_source(ctx, expr: ast.AST, scope: ast.AST, depth: int = 0) -> ast.AST | None:
    """The ``dist.get_rank()`` / ``os.environ["RANK"]`` expression that ``expr`` provably is (through
    ``int(...)`` and names assigned exactly once), else None. ``get_rank(group)`` is a group rank,
    not the global one."""
    if depth > 5:
        return None
    expr = _unwrap_int(expr)
    if isinstance(expr, ast.Call):
        qn = ctx.qn(expr)
        if qn == D + "get_rank" and _asks_default_group(ctx, expr, scope):  # what the init made it
            return None if local_group(ctx) else expr
        if qn == D + "get_global_rank":
            return None
    key = env_key(ctx, expr)
    if key is not None:
        return expr if key in GLOBAL_RANK_ENV else None
    if isinstance(expr, ast.Name):
        kind, val = name_binding_kind(ctx, expr.id, scope)
        return bound_global_rank(ctx, kind, val, depth)
    return None


def local_group(ctx) -> bool:
    """Every ``init_process_group`` of the module passes ``rank=`` the environment's local rank
    (``rank=int(os.environ["LOCAL_RANK"])``, through names bound once): ``dist.get_rank()`` then
    returns the local rank, and the one mistake is the init's (DDP007), not each use of the rank.
    ``ctx``: a rule's context or a module's view."""
    inits = ctx.sem.calls_to(D + "init_process_group")
    return bool(inits) and all((r := get_arg(c, 4, "rank")) is not None
                               and _local_source(ctx, r, ctx.sem.scope_of(c)) for c in inits)


def _local_source(ctx, e: ast.AST, scope: ast.AST, depth: int = 0) -> bool:
    e = _unwrap_int(e)
    key = env_key(ctx, e)
    if key is not None or not isinstance(e, ast.Name) or depth > 4:
        return key in LOCAL_RANK_ENV
    kind, val = name_binding_kind(ctx, e.id, scope)
    return kind == "single" and val is not None and _local_source(ctx, val, ctx.sem.scope_of(val), depth + 1)


def _asks_default_group(ctx, call: ast.Call, scope) -> bool:
    """``get_rank()``, ``get_rank(None)``, or ``get_rank(group)`` of ``group = init_process_group(...)``
    (which returns None): the default group's rank."""
    if not call.args and not call.keywords:
        return True
    g = get_arg(call, 0, "group")
    if g is None or len(call.args) + len(call.keywords) != 1:
        return False
    if isinstance(g, ast.Constant):
        return g.value is None
    if isinstance(g, ast.Name):
        kind, val = name_binding_kind(ctx, g.id, scope)
        return kind == "single" and isinstance(val, ast.Call) and ctx.qn(val) == D + "init_process_group"
    return False


def bound_global_rank(ctx, kind: str, val, depth: int = 0) -> ast.AST | None:
    """``global_rank_source`` of a name whose ``name_binding_kind`` is ``(kind, val)`` (for a
    caller that already holds the binding)."""
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
            return "rank" if qn in _RANK_QNS else None
        if is_rank_function(terminal_name(expr.func)):
            return "rank"
        return None
    key = env_key(ctx, expr)
    if key is not None:
        return "rank" if key in RANK_ENV else None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return "rank" if rank_kind(ctx, expr.left, scope, depth + 1) else None
    if isinstance(expr, ast.Attribute):
        return "rank" if RANK_NAME.match(expr.attr) and not sub_config_field(ctx.sem, expr) else None
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
        return "rank" if RANK_NAME.match(expr.id) else None
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
        return key in LOCAL_RANK_ENV
    n = terminal_name(expr)
    return bool(n and _LOCAL_RANK_NAME.match(n))


# -- rank tests: a subset of the ranks ------------------------------------------------------------

class Test:
    """A condition that selects ranks: ``body`` when the if-body runs on a subset of the ranks only,
    ``orelse`` when the else-branch does too (false for ``rank == 0 and x``)."""

    __slots__ = ("node", "body", "orelse")

    def __init__(self, node, body: bool, orelse: bool):
        self.node, self.body, self.orelse = node, body, orelse


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
                consts = _int_vals(b)
                if consts:
                    if a is right:
                        op = _FLIP.get(type(op), type(op))()
                    # uniformity's reading: ``rank >= 0``, ``local_rank != -1`` and ``rank == -1`` hold
                    # alike on every valid rank ("distributed or not"); other comparisons select some
                    return None if _rank_compare_uniform(op, consts) else Test(test, True, True)
                if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(b, (ast.Name, ast.Attribute)) and not rank_kind(ctx, b, scope):
                    return Test(test, True, True)
                return None
        return None
    if isinstance(test, ast.Call):
        n = terminal_name(test.func)
        if n in MAIN_NAMES:
            return Test(test, True, True)
        if isinstance(test.func, ast.Name) and n is not None and _main_helper(ctx, n, depth):
            return Test(test, True, True)
        return None
    if isinstance(test, ast.Attribute):
        return Test(test, True, True) if test.attr in MAIN_NAMES else None
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
        return Test(test, True, True) if test.id in MAIN_NAMES else None
    return None


# -- main-rank polarity ----------------------------------------------------------------------------

_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")
_RANK_TOKENS = frozenset({"rank", "gpu", "ordinal", "procid", "rankid"})
_MAIN_TOKENS = frozenset({"master", "main", "zero", "rank0", "chief", "leader", "primary", "root"})
_NOT_MAIN_TOKENS = frozenset({"addr", "address", "port", "ip", "host", "worker", "func", "fn", "args", "parser",
                              "module", "loop", "thread", "dir", "path", "file", "weight", "weights", "grad"})
_RANK_NAMES = frozenset({"process_index", "local_process_index", "get_process_index", "get_local_process_index",
                         "device_id", "device_index", "dev_id", "local_device", "local_device_id", "proc_id",
                         "process_id", "gpu_idx", "local_gpu"})
# lower-case text that every rank-like name (``is_rank_like``) contains: a file without any of them
# holds no rank-like name (a necessary-condition text gate)
RANK_NEEDLES = tuple(sorted(_RANK_TOKENS | {n.lower() for n in _RANK_NAMES} | {"rank", "localid"}))
# uniformity's main-rank names, plus flags that hold on the main rank only (``args.should_save``)
_MAIN_FLAGS = MAIN_NAMES | {"should_save", "should_log"}


def _last_name(expr: ast.AST) -> str | None:
    return terminal_name(expr.func if isinstance(expr, ast.Call) else expr)


_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def _tokens(name: str) -> list[str]:
    # camelCase -> camel_case, then split
    name = _CAMEL.sub(r"\1_\2", name).lower()
    return [t for t in _TOKEN_SPLIT.split(name) if t]


def is_rank_like(expr: ast.AST) -> bool:
    """``rank``, ``args.local_rank``, ``self.global_rank``, ``dist.get_rank()``, ``xm.get_ordinal()``,
    ``args.gpu``, ``rank % ngpus``, ``int(os.environ["RANK"])``."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return is_rank_like(expr.left)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "int" and len(expr.args) == 1:
        return is_rank_like(expr.args[0])
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("get", "getenv") \
            and expr.args and isinstance(expr.args[0], ast.Constant) and expr.args[0].value in RANK_ENV:
        return True
    if isinstance(expr, ast.Subscript):
        s = expr.slice
        if not (isinstance(s, ast.Constant) and isinstance(s.value, str)) or s.value.isupper():
            return isinstance(s, ast.Constant) and s.value in RANK_ENV
    # ``opt["rank"]``: an options dict's entry reads like ``args.rank``
    name = expr.slice.value if isinstance(expr, ast.Subscript) else _last_name(expr)
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
    if name in _MAIN_FLAGS:
        return True
    toks = _tokens(name)
    if not toks or set(toks) & _NOT_MAIN_TOKENS:
        return False
    s = set(toks)
    if "zero" in s and not (s & {"rank", "global", "process", "local", "world", "gpu"}):
        return False
    if "root" in s and len(toks) == 1:
        return False
    if "rank" in s and ("0" in s or "zero" in s or "rank0" in s):
        return True  # on_rank_0, rank_0_only, is_rank_zero
    return bool(s & _MAIN_TOKENS)


def is_main_decorated(fn: ast.AST) -> bool:
    """``@rank_zero_only``, ``@master_only``, ``@main_process_only``: the function runs on the main rank."""
    for d in getattr(fn, "decorator_list", ()):
        name = _last_name(d)
        if name and is_main_like(ast.Name(id=name)):
            return True
        if name and set(_tokens(name)) & {"rank0", "master", "main"} and "only" in _tokens(name):
            return True
    return False


# what torchrun (and torch.distributed.launch) set in every process it starts
LAUNCHER_ENV = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                          "TORCHELASTIC_RUN_ID"})


def polarity(ctx, test: ast.AST, scope: ast.AST, depth: int = 0) -> bool | None:
    """True: when ``test`` holds, only the main rank (or one chosen rank) runs on.
    False: when ``test`` holds, the non-main ranks run on (``rank != 0``, ``not is_main``).
    A test on the world size (by value flow: ``world_size_source``) reads the same way: when
    ``dist.get_world_size() == 1`` holds, the only process is the main rank (True); when
    ``dist.get_world_size() != 1`` fails, likewise (False).
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
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(test.left, (ast.Name, ast.Attribute)) and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None:
        # ``writer is not None`` where only the main rank builds a writer, the others keep None;
        # ``cfg.out_dir is not None`` where the non-main ranks set it to None (``rank_flags``)
        if (isinstance(test.left, ast.Name) and main_only_value(ctx, test.left.id, scope, depth + 1)) \
                or main_flag(ctx, test.left, scope, polarity, depth + 1, none=True):
            return isinstance(test.ops[0], ast.IsNot)
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        single = single_world_test(ctx, test, scope)
        if single is not None:
            return single  # a world of one process: its only rank is the main one
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(left, ast.Constant) \
                and left.value in LAUNCHER_ENV and ctx.sem.qualname(right) == "os.environ":
            # ``"WORLD_SIZE" in os.environ``: a launcher started this process, so the other ranks may
            # run on when it holds; when it fails there is one process, the main rank
            return isinstance(op, ast.NotIn)
        # a variable that holds the rank by value flow (``r = dist.get_rank()``; ``r == 0``), whatever
        # its name: compare its value
        left, right = rank_value(ctx, left, scope), rank_value(ctx, right, scope)
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
            got = polarity(ctx, val, scope, depth + 1)
            if got is None and isinstance(val, ast.Call) and main_only_value(ctx, test.id, scope, depth + 1):
                return True  # ``if ckpt:`` of a project function's result that is None off the main rank
            if got is not None or not isinstance(val, ast.IfExp):
                return got
        got = _param_polarity(ctx, test.id, scope, depth + 1)
        if got is None:  # ``device, is_main = setup(cfg)``: a project function returns the test
            got = returned_polarity(ctx, test.id, scope, polarity, depth + 1)
        if got is None and (main_only_value(ctx, test.id, scope, depth + 1) or main_flag(ctx, test, scope, polarity, depth + 1)):
            return True  # ``if writer:``: None (false) on every rank but the main one; a kept flag
        return got
    if isinstance(test, ast.Attribute):
        # a flag set once in this function: ``args.save_logs = args.logs and is_master(args)``
        from .helper_calls import attr_assignments  # lazy, as above

        vals = attr_assignments(ctx, scope).get(ctx.text(test))
        if vals and len(vals) == 1:
            return polarity(ctx, vals[0], scope, depth + 1)
        if main_flag(ctx, test, scope, polarity, depth + 1):
            return True  # a flag the non-main ranks clear (``rank_flags``)
        if not vals:
            # set by every caller on the object it passes (``args.save_logs = ... is_master(args)``
            # in ``main``, tested in ``save(args)``): the callers' values must agree
            from .helper_calls import caller_flag_values  # lazy: helper_calls sits above calls

            # a flag of the object that its class sets once, maybe in another method
            # (``self.may_write = not distributed or rank == 0`` in ``train``, tested in ``save``)
            val = self_attr_value(ctx, test)
            if val is not None:
                return polarity(ctx, val, ctx.sem.scope_of(val), depth + 1)
            got = caller_flag_values(ctx, test, scope)
            if any(v is None for v, _ in got):
                return None
            ps = {polarity(ctx, v, at, depth + 1) for v, at in got}
            return ps.pop() if len(ps) == 1 else None
        return None
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
        return _helper_polarity(ctx, test.func.id, depth + 1)
    return None


def main_only_value(ctx, name: str, scope: ast.AST, depth: int = 0) -> bool:
    """``name`` holds something other than None only on the main rank: every binding of it in
    ``scope`` is ``None``, a value only the main rank binds (under a main-rank test:
    ``if rank == 0: writer = SummaryWriter() else: writer = None``), or a conditional expression
    whose main-rank side is the only one not None (``w = Writer() if is_main else None``); at least
    one binding is not None. A parameter never rebound asks the same of the argument of every call
    of its function in this module. So ``name is not None`` holds on the main rank only."""
    if depth > 6:
        return False
    memo = ctx.memo("rank_tests.main_only_value", dict)
    key = (name, id(scope), depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    memo[key] = False  # recursion guard
    memo[key] = got = _main_only_value(ctx, name, scope, depth)
    return got


def _main_only_value(ctx, name: str, scope: ast.AST, depth: int) -> bool:
    from .helper_calls import bind_args
    from .calls import call_sites_here

    sem = ctx.sem
    binds = sem.assignments(scope).get(name)
    if not binds:
        if not isinstance(scope, FUNC_TYPES) or name not in param_names(scope):
            return False
        sites = call_sites_here(ctx, scope)
        if not sites:
            return False
        for c in sites:
            a = bind_args(c, scope).get(name)
            if not isinstance(a, ast.Name) or not main_only_value(ctx, a.id, sem.scope_of(c), depth + 1):
                return False
        return True
    if isinstance(scope, FUNC_TYPES) and name in param_names(scope):
        return False  # the callers' value reaches too
    some = False
    for b in binds:
        if not (isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name)):
            return False
        v = b.value
        if isinstance(v, ast.Constant) and v.value is None:
            continue
        if isinstance(v, ast.IfExp) and _is_none_const(v.body) != _is_none_const(v.orelse):
            pol = polarity(ctx, v.test, scope, depth + 1)
            if pol is None or pol != _is_none_const(v.orelse):
                return False
        elif not (isinstance(v, ast.Call) and returned_main_only(ctx, v, scope, polarity, main_only_value, depth + 1)) \
                and not _under_main_test(ctx, b, scope, depth):
            return False  # (a project function's result that is None off the main rank counts)
        some = True
    return some


def _under_main_test(ctx, node: ast.AST, scope: ast.AST, depth: int) -> bool:
    """``node`` sits in the body of an ``if`` of ``scope`` that lets only the main rank in (or the
    ``else`` of one that lets the others in)."""
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, ast.If) and child is not p.test:
            pol = polarity(ctx, p.test, scope, depth + 1)
            if (pol is True and child in p.body) or (pol is False and child in p.orelse):
                return True
        child, p = p, parent(p)
    return False


def _is_none_const(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def _param_polarity(ctx, name: str, fn: ast.AST, depth: int) -> bool | None:
    """The polarity of a parameter ``name`` of ``fn`` (never rebound in it) that every call of
    ``fn`` in this module fills with a test of one polarity in the caller's terms
    (``train(model, ddp)`` with ``ddp = int(os.environ.get("RANK", -1)) != -1``: ``not ddp`` in
    ``train`` runs in a world of one process). None when ``fn`` is used as a value (a callback,
    an ``mp.spawn`` target: callers not seen here), has no call, or the callers disagree."""
    from .helper_calls import bind_args
    from .calls import call_sites_here

    if depth > 6 or not isinstance(fn, FUNC_TYPES) or name not in param_names(fn):
        return None
    memo = ctx.memo("rank_tests.param_polarity", dict)
    key = (id(fn), name, depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    if any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
           for n in iter_scope_nodes(fn)):
        return None
    sites = call_sites_here(ctx, fn)
    if not sites:
        return None
    got: set = set()
    for c in sites:
        a = bind_args(c, fn).get(name)
        if a is None:
            return None
        got.add(polarity(ctx, a, ctx.sem.scope_of(c), depth + 1))
        if None in got or len(got) > 1:
            return None
    memo[key] = got.pop()
    return memo[key]


def rank_value(ctx, e: ast.AST, scope: ast.AST, depth: int = 0) -> ast.AST:
    """``e``'s rank call when ``e`` is a name not read as a rank whose every assignment is a rank
    call (``dist.get_rank()``) or the constant 0, one of them a call (``r = 0``, then ``r =
    dist.get_rank()`` under ``if world_size > 1:``: one process is rank 0), or ``self.<attr>`` bound
    once to a rank call or to a constructor parameter that every construction here fills so: value
    flow before name."""
    if isinstance(e, ast.Name) and not is_rank_like(e) and depth < 4:
        kind, vals = name_binding_kind(ctx, e.id, scope)
        vals = [vals] if kind == "single" else vals if kind == "multi" and vals else []
        calls = [v for v in vals if isinstance(v, ast.Call) and is_rank_like(v)]
        if calls and all(v in calls or _int_const(v) == 0 for v in vals):
            return calls[0]
        if kind == "param" and isinstance(scope, FUNC_TYPES) and scope.name == "__init__" \
                and not ctx.sem.assignments(scope).get(e.id):
            from .helper_calls import bind_args, calls_named

            cls = parent(scope)
            sites = calls_named(ctx, cls.name) if isinstance(cls, ast.ClassDef) else []
            got = [rank_value(ctx, a, ctx.sem.scope_of(a), depth + 1) if a is not None else None
                   for a in (bind_args(c, scope).get(e.id) for c in sites)]
            if got and all(isinstance(g, ast.Call) and is_rank_like(g) for g in got):
                return got[0]
    elif isinstance(e, ast.Attribute) and not is_rank_like(e) and (v := self_attr_value(ctx, e)) is not None:
        if isinstance(v, ast.Call) and is_rank_like(v):
            return v  # ``self.me = dist.get_rank()``, its one binding
        if isinstance(v, ast.Name):
            got = rank_value(ctx, v, ctx.sem.scope_of(v), depth + 1)
            return got if isinstance(got, ast.Call) and is_rank_like(got) else e
    return e


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


# -- a world of one process: which branch runs only when the job has one process ------------------

def single_process_side(ctx, test: ast.AST, scope: ast.AST, depth: int = 0) -> str | None:
    """``"body"`` when ``test`` holding implies a world of one process (``world_size == 1``, ``not
    ddp`` with ``ddp = world_size != 1``, ``a and world_size == 1``), ``"orelse"`` when ``test``
    failing implies it (``world_size > 1``), else None. The world size by value flow
    (``world_size_source``), never by name."""
    if depth > 6:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        s = single_process_side(ctx, test.operand, scope, depth + 1)
        return None if s is None else ("orelse" if s == "body" else "body")
    if isinstance(test, ast.BoolOp):
        sides = [single_process_side(ctx, v, scope, depth + 1) for v in test.values]
        if isinstance(test.op, ast.And):
            # the body needs every conjunct: one that implies a single process is enough; the
            # else-branch is reached when any conjunct fails: all must imply it
            if "body" in sides:
                return "body"
            return "orelse" if all(s == "orelse" for s in sides) else None
        if all(s == "body" for s in sides):
            return "body"
        return "orelse" if "orelse" in sides else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        single = single_world_test(ctx, test, scope)
        if single is None:
            return None
        return "body" if single else "orelse"
    if isinstance(test, ast.Name):
        kind, val = name_binding_kind(ctx, test.id, scope)
        if kind == "single" and val is not None:
            return single_process_side(ctx, val, ctx.sem.scope_of(val), depth + 1)
    return None


def only_single_process(ctx, node: ast.AST) -> bool:
    """``node`` runs only in a world of one process: a branch of an enclosing ``if`` (or
    if-expression) of its function that ``single_process_side`` says is taken only then."""
    from ..semantic import parent

    scope = ctx.sem.scope_of(node)
    child, p = node, parent(node)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Module, ast.ClassDef, ast.Lambda)):
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and child is not p.test:
            side = single_process_side(ctx, p.test, scope)
            in_body = child in p.body if isinstance(p.body, list) else child is p.body
            if side is not None and (side == "body") == in_body:
                return True
        child, p = p, parent(p)
    return False


def world_size_tests(ctx, scope: ast.AST) -> list[ast.AST]:
    """The tests of ``scope`` (its own nodes) that compare the world size with one process
    (``single_process_side`` is not None): the code there knows it may run as several ranks."""
    out = []
    for n in iter_scope_nodes(scope):
        if isinstance(n, (ast.If, ast.IfExp, ast.While)) and single_process_side(ctx, n.test, scope) is not None:
            out.append(n.test)
    return out
