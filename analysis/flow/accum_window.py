"""Gradient-accumulation windows: which micro-batch of a loop a modular test picks (``i % k == 0``,
``(i + 1) % k == 0``, an early ``if (i + 1) % k != 0: continue``), as DDP208 compares the one that
synchronises with the one after which the optimizer steps."""
from __future__ import annotations

import ast

from ..semantic import parent
from .assignments import has_ancestor
from .sync_blocks import bound_part

FUNCS_AND_LAMBDAS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def offset(a):
    """``i + 1`` -> (``i``, 1), ``i - 2`` -> (``i``, -2); anything else -> (itself, 0)."""
    if isinstance(a, ast.BinOp) and isinstance(a.op, (ast.Add, ast.Sub)) and isinstance(a.right, ast.Constant) \
            and type(a.right.value) is int:
        return a.left, (a.right.value if isinstance(a.op, ast.Add) else -a.right.value)
    return a, 0


def loop_vars(ctx, loop) -> set[str]:
    """The names a modular test may count with: a ``for`` loop's targets; a helper's parameters
    that it never rebinds (read as the arguments of each call)."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        return {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    if isinstance(loop, (ast.FunctionDef, ast.AsyncFunctionDef)):
        bound = ctx.sem.assignments(loop)
        return {a.arg for a in (*loop.args.posonlyargs, *loop.args.args, *loop.args.kwonlyargs)
                if not bound.get(a.arg)}
    return set()


def mod_test(ctx, e, loop, depth):
    """(var, residue, k text, holds) for ``(var + c) % k == r`` / ``!= r`` / ``not ...`` / a name bound
    once, in the loop, to such a test: ``holds`` is True when the test is true exactly on the
    iterations where ``var`` is ``residue`` mod ``k`` (False: on all the others)."""
    if depth > 3 or e is None:
        return None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        t = mod_test(ctx, e.operand, loop, depth + 1)
        return None if t is None else (t[0], t[1], t[2], not t[3])
    if isinstance(e, ast.Name):
        scope = loop if isinstance(loop, FUNCS_AND_LAMBDAS) else ctx.sem.scope_of(loop)
        binds = [b for b in ctx.sem.assignments(scope).get(e.id, [])]
        if len(binds) != 1 or not isinstance(binds[0], ast.Assign) or not has_ancestor(binds[0], loop) \
                or len(binds[0].targets) != 1:
            return None
        return mod_test(ctx, bound_part(binds[0].targets[0], binds[0].value, e.id), loop, depth + 1)
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mod):
        # ``if i % k:`` is ``i % k != 0``
        left, right, holds = e, ast.Constant(0), False
    elif isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.ops[0], (ast.Eq, ast.NotEq)):
        left, right, holds = e.left, e.comparators[0], isinstance(e.ops[0], ast.Eq)
    else:
        return None
    if not (isinstance(right, ast.Constant) and type(right.value) is int):
        return None
    if not (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mod)):
        return None
    a, off = offset(left.left)
    if not isinstance(a, ast.Name) or a.id not in loop_vars(ctx, loop):
        return None
    k = left.right
    if not isinstance(k, (ast.Name, ast.Attribute, ast.Constant)):
        return None
    return (a.id, right.value - off, ctx.text(k), holds)


def spell(t) -> str:
    var, residue, k, _ = t
    return f"{var} % {k} == {residue}" if residue >= 0 else f"({var} + {-residue}) % {k} == 0"


def same_window_slot(sync, step) -> bool | None:
    """Do the two modular tests select the same micro-batch of the window? True / False, None when
    the modulus is a name and the residues are more than one apart (it could be a multiple)."""
    r1, r2, k = sync[1], step[1], sync[2]
    try:
        kv = int(k)
    except ValueError:
        kv = None
    if kv is not None and kv > 0:
        return r1 % kv == r2 % kv
    if r1 == r2:
        return True
    return False if abs(r1 - r2) == 1 else None


def skipped_unless(ctx, c, loop):
    """(the ``if``, its modular test) of an ``if <modular test>: continue`` (no ``else``) of ``loop``'s
    body before the statement that holds ``c``: the step runs where the test is false; (None, None)
    when there is none."""
    top = next((a for a in [c, *ctx.sem.ancestors(c)] if parent(a) is loop and a in loop.body), None)
    if top is None:
        return None, None
    for st in loop.body[:loop.body.index(top)]:
        if isinstance(st, ast.If) and not st.orelse and st.body and isinstance(st.body[-1], ast.Continue):
            t = mod_test(ctx, st.test, loop, 0)
            if t is not None:
                return st, t  # (the step is not in its body: the caller reads the test as false)
    return None, None
