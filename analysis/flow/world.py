"""A world of one process: which tests say how many processes the job has, and which bindings
reach a use only where there is one (so they cannot differ between ranks), for the uniformity
evaluator (``uniformity.Evaluator._name``) and the main-rank tests (``rank_tests.polarity``).

The world size is read by value flow (``dist.get_world_size()``, ``WORLD_SIZE`` from the
environment, a name bound once to one of them); a name that counts processes (``num_gpus``,
``world_size``) counts too, but only for a value the evaluator already found uniform: the name
follows the value-flow answer, never replaces it.

Also the group a call makes: ``one_process_init``, an ``init_process_group(..., world_size=1)``
(a literal, a name bound once to one, or a parameter every entry of its function fills with 1)
starts a world of one process, which ``models.is_distributed_script`` does not count as a launch.
"""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..semantic import terminal_name as _terminal
from ..torch_api import D, SPAWNS, const_int
from .assignments import stmt_list_of
from .bindings import EQUALISERS, reaching
from .unconditional import holders_of
from .vocab import _FLIP, _int_vals, env_key

WORLD_SIZE_ENV = frozenset({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
_LEAVES = (ast.Break, ast.Continue, ast.Return, ast.Raise, ast.Try, ast.Yield, ast.YieldFrom, ast.Await)
# names that count the processes of the job (only after the value flow found the value uniform)
_WORLD_NAME = re.compile(r"^_?(?:world_?size|num_?gpus|n_?gpus|num_?procs|nprocs|num_?processes|num_?replicas"
                         r"|num_?ranks|n_?ranks)$", re.I)


# the world size of the job: torch's (default group), and the launchers' wrappers of it (composer's
# ``composer.utils.dist.get_world_size()`` reads ``WORLD_SIZE`` or the default group's size)
_WORLD_SIZE_QNS = frozenset({D + "get_world_size", "composer.utils.dist.get_world_size"})


def world_size_call(sem, e: ast.AST) -> bool:
    """``dist.get_world_size()`` of the default group (``get_world_size(group)`` is a group's)."""
    return isinstance(e, ast.Call) and sem.call_qualname(e) in _WORLD_SIZE_QNS and not e.args and not e.keywords


def overwritten(ev: ast.AST, use: ast.Name) -> bool:
    """A later plain assignment of ``use``'s name in ``ev``'s own block overwrites ``ev`` before
    the use: nothing between them can leave the block (``break``/``continue``/``return``/
    ``raise``/``try``) and the use lies after the overwrite."""
    if not isinstance(ev, ast.stmt) or ev.__class__ in (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith):
        return False
    got = stmt_list_of(ev)  # (a statement is never in an ``except`` handler list)
    if got is None:
        return False
    blk = got[1]
    for st in blk[blk.index(ev) + 1:]:
        if (st.lineno, st.col_offset) <= (use.lineno, use.col_offset):
            if (use.lineno, use.col_offset) <= (st.end_lineno, st.end_col_offset):
                return False  # the use is inside this statement
        else:
            return False  # the use comes before: not after this block's later statements
        if st.__class__ is ast.Assign and any(t.__class__ is ast.Name and t.id == use.id for t in st.targets):
            return True
        if any(n.__class__ in _LEAVES for n in ast.walk(st)):
            return False
    return False


def _break_holders(view) -> set:
    """The nodes that are or hold a ``break`` (one in a nested definition too), once per module."""
    got = view.memo.get("break_holders")
    if got is None:
        got = view.memo["break_holders"] = holders_of(view.sem.by_type.get(ast.Break, ()), scopes=())
    return got


def alone_only(evaluator, ev: ast.AST, use: ast.Name) -> bool:
    """``ev`` (a binding statement) reaches ``use`` only where the world has one process: a
    later ``if`` of its block, or of a block around it in the same scope (a binding inside a loop
    or a ``with`` that accumulates, the test after them), before the statement holding the use,
    tests the world size against 1 (``world_size_side``) or whether the default group exists
    (``group_side``: without one no other rank takes part) and, at the top of its multi-process
    branch, rebinds the name or makes it equal on every rank in place (``dist.all_reduce(name)``).
    A ``break`` between them may carry the value out of a loop past the test: no answer then."""
    if not isinstance(ev, ast.stmt):
        return False
    node = ev
    breaks = _break_holders(evaluator.view)
    while True:
        got = stmt_list_of(node)  # (a statement is never in an ``except`` handler list)
        if got is None:
            return False
        owner, blk = got
        for st in blk[blk.index(node) + 1:]:
            if (st.lineno, st.col_offset) <= (use.lineno, use.col_offset) <= (st.end_lineno, st.end_col_offset):
                return False  # the use is inside: no test stands between
            if st.__class__ is ast.If:
                side = world_size_side(evaluator, st.test) or group_side(evaluator.sem, st.test)
                if side is not None and _rebinds(getattr(st, side), use.id, evaluator.sem):
                    return (st.end_lineno, st.end_col_offset) <= (use.lineno, use.col_offset)
            if st in breaks:
                return False
        if not isinstance(owner, ast.stmt) or isinstance(owner, (*FUNC_TYPES, ast.ClassDef)) \
                or (owner.lineno, owner.col_offset) <= (use.lineno, use.col_offset) <= (owner.end_lineno,
                                                                                    owner.end_col_offset):
            return False  # the scope's end, or the use inside the block's owner: no test after it
        node = owner


def _rebinds(block: list, name: str, sem=None) -> bool:
    """A plain assignment of ``name`` at the top of ``block``, or a collective that makes the
    object ``name`` holds equal on every rank in place (``bindings.EQUALISERS``:
    ``dist.all_reduce(name)``), with nothing before it that can leave the block (a ``break``
    would carry the old value past the overwrite)."""
    for b in block:
        if b.__class__ is ast.Assign and any(t.__class__ is ast.Name and t.id == name for t in b.targets):
            return True
        if sem is not None and b.__class__ is ast.Expr and b.value.__class__ is ast.Call:
            spec = EQUALISERS.get(sem.call_qualname(b.value) or "")
            if spec is not None:
                a = get_arg(b.value, *spec)
                if a.__class__ is ast.Name and a.id == name:
                    return True
        if any(n.__class__ in _LEAVES for n in ast.walk(b)):
            return False
    return False


def group_side(sem, test: ast.AST) -> str | None:
    """``"body"`` when ``test`` holds only where the default group exists
    (``dist.is_initialized()``, also ``and``-ed with ``dist.is_available()``), ``"orelse"`` for
    ``not dist.is_initialized()``, else None. Without a group no other rank takes part in
    anything: the run is, for what the ranks share, a world of one process."""
    if test.__class__ is ast.UnaryOp and isinstance(test.op, ast.Not):
        return "orelse" if group_side(sem, test.operand) == "body" else None
    if test.__class__ is ast.BoolOp and isinstance(test.op, ast.And):
        plain = [v for v in test.values if not (v.__class__ is ast.Call and sem.call_qualname(v) == D + "is_available")]
        return "body" if plain and all(group_side(sem, v) == "body" for v in plain) else None
    if test.__class__ is ast.Call and sem.call_qualname(test) == D + "is_initialized" and not test.args:
        return "body"
    return None


def world_size_side(evaluator, test: ast.AST) -> str | None:
    """``"body"`` when ``test`` holds exactly in a world of several processes
    (``world_size > 1``, ``!= 1``, ``>= 2``), ``"orelse"`` for the converse (``== 1``, ``<= 1``,
    ``< 2``), else None. The operand is the world size by value flow
    (``dist.get_world_size()``, ``WORLD_SIZE``, a name bound to one), or a value the analysis
    finds uniform whose name counts processes (``num_gpus``, ``world_size``: the name only
    follows the value-flow answer)."""
    if not (test.__class__ is ast.Compare and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0].__class__, test.comparators[0]
    k = _int_vals(right)
    if k is None:
        k = _int_vals(left)
        if k is None:
            return None
        left, op = right, _FLIP.get(op, op)
    if len(k) != 1 or not _world_size(evaluator, left):
        return None
    k = k[0]
    if (op is ast.Gt and k == 1) or (op is ast.NotEq and k == 1) or (op is ast.GtE and k == 2):
        return "body"
    if (op is ast.Eq and k == 1) or (op is ast.LtE and k == 1) or (op is ast.Lt and k == 2):
        return "orelse"
    return None


def _world_size(evaluator, e: ast.AST, depth: int = 0) -> bool:
    while isinstance(e, ast.Call) and _terminal(e.func) == "int" and len(e.args) == 1:
        e = e.args[0]
    if isinstance(e, ast.IfExp) and depth < 4:
        # ``dist.get_world_size() if dist.is_initialized() else 1``: one process without a group
        arms = [b for b in (e.body, e.orelse) if not (isinstance(b, ast.Constant) and b.value == 1)]
        return len(arms) == 1 and _world_size(evaluator, arms[0], depth + 1)
    if isinstance(e, ast.Call):
        return world_size_call(evaluator.sem, e) or (depth < 3 and _world_size_helper(evaluator, e, depth))
    key = env_key(evaluator.view, e)
    if key is not None:
        return key in WORLD_SIZE_ENV
    name = e.id if isinstance(e, ast.Name) else e.attr if isinstance(e, ast.Attribute) else None
    if name is None:
        return False
    if isinstance(e, ast.Name) and depth < 4:
        kind, got = reaching(evaluator.view, e.id, e)
        if kind == "events" and len(got) == 1 and got[0].__class__ is ast.Assign and len(got[0].targets) == 1 \
                and _world_size(evaluator, got[0].value, depth + 1):
            return True
    return _WORLD_NAME.match(name) is not None and evaluator.value(e).uniform


def _world_size_helper(evaluator, call: ast.Call, depth: int) -> bool:
    """A call, without arguments, of a project function whose every ``return`` gives the world
    size (``return dist.get_world_size() if dist.is_initialized() else 1``)."""
    if call.args or call.keywords:
        return False
    hub = getattr(evaluator, "hub", None)
    if hub is None:
        return False
    try:
        target = hub.resolve_call(evaluator.view, call)
    except Exception:  # noqa: BLE001 - unresolvable: not the world size
        return False
    if target is None or not isinstance(target[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    tv, fn = target
    from ..semantic import iter_scope_nodes

    rets = [r for r in iter_scope_nodes(fn) if isinstance(r, ast.Return)]
    if not rets or any(r.value is None for r in rets):
        return False
    ev = hub.evaluator(tv)
    return all(_world_size(ev, r.value, depth + 1) for r in rets)
def one_process_init(sem, init: ast.Call) -> bool:
    """``init_process_group(..., world_size=1)``: the group's world is one process (a literal, a
    name bound once to one in the init's scope, also through a tuple assignment, or a parameter of
    the init's function that every entry of it fills with 1: ``_one_at_every_entry``). Its only rank cannot share a GPU with another,
    nor race another on a file."""
    expr = get_arg(init, None, "world_size")
    fn = sem.enclosing_function(init)
    for _ in range(3):  # ``rank, world = 0, world_size`` before the init: the parameter's value
        if not isinstance(expr, ast.Name):
            break
        if fn is not None and _unbound_param(sem, fn, expr.id):
            return _one_at_every_entry(sem, fn, expr.id, 0)
        expr = sem.single_value(expr.id, sem.scope_of(init))
    return const_int(expr, sem) == 1


def _unbound_param(sem, fn, name: str) -> bool:
    return name in param_names(fn) and not sem.assignments(fn).get(name)


def _one_at_every_entry(sem, fn, name: str, depth: int) -> bool:
    """The parameter ``name`` of ``fn`` (a function of this module) holds 1 wherever ``fn`` starts:
    ``fn`` is used only as the target of ``mp.spawn(fn, args=(...), ...)`` calls whose ``args``
    tuple gives 1 at the parameter's place (a literal, or a name bound once to one), or only
    called, each call passing 1 or a parameter of its caller that holds 1 in turn (a setup helper
    ``setup(rank, world_size)`` called from the spawned worker). Any other use of ``fn`` (a
    callback, another module's call) is not seen: the answer is False then only when this module
    has none of those entries."""
    if depth > 2 or not isinstance(parent(fn), ast.Module):
        return False
    refs = [n for n in sem.of_types(ast.Name) if n.id == fn.name
            and isinstance(n.ctx, ast.Load)]
    if not refs:
        return False
    params = param_names(fn)
    at = params.index(name)
    for r in refs:
        p = parent(r)
        if isinstance(p, ast.Call) and p.func is r:
            a = get_arg(p, at, name)
            if any(isinstance(x, ast.Starred) for x in p.args) or any(k.arg is None for k in p.keywords):
                return False
        elif isinstance(p, ast.Call) and (sem.call_qualname(p) or "") in SPAWNS and get_arg(p, 0, "fn") is r:
            tup = get_arg(p, 1, "args")
            if isinstance(tup, ast.Name):
                tup = sem.single_value(tup.id, sem.scope_of(p))
            if at == 0 or not isinstance(tup, ast.Tuple) or len(tup.elts) < at \
                    or any(isinstance(x, ast.Starred) for x in tup.elts):
                return False  # the first parameter is the process index
            a = tup.elts[at - 1]
        else:
            return False  # passed as a value elsewhere: its calls are not seen
        if isinstance(a, ast.Name):
            caller = sem.enclosing_function(p)
            if caller is not None and caller is not fn and _unbound_param(sem, caller, a.id):
                if _one_at_every_entry(sem, caller, a.id, depth + 1):
                    continue
                return False
            a = sem.single_value(a.id, sem.scope_of(p))
        if const_int(a, sem) != 1:
            return False
    return True
