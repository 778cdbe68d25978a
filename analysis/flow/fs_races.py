"""Check-then-create races on a path: a test of whether a path exists, then a creation of the same
path that depends on the test's answer still holding. Run by several processes at once, another
process may create the path between the test and the creation.

- ``exists_tested(vctx, expr)``: the path expression an existence test tests
  (``os.path.exists(p)``, ``os.path.isdir(p)``, ``os.path.lexists(p)``, ``Path(p).exists()``,
  ``p.is_dir()``), else None;
- ``check_then_create(ctx, an, scope)``: the races of one scope (a function, or the module):
  ``Race`` objects of two kinds:

  - ``"create-if-missing"``: ``if not exists(p): os.makedirs(p)`` (``os.mkdir(p)``,
    ``Path(p).mkdir()``) with a creation that raises when the folder exists (no ``exist_ok=True``),
    not inside a ``try`` that catches the error; the creation may be in a helper of the project
    (``flow.fs_effects``, its ``exist_ok`` known there);
  - ``"fail-if-present"``: ``if exists(p): raise ...`` (or ``assert not exists(p)``), then, later in
    the same scope, a creation of ``p`` (any ``os.makedirs``/``mkdir``/write of it): a process that
    creates it first makes the others' test fail. A synchronising call between the test and the
    creation (``flow.sync``) removes the race (every process tests before any creates).

Paths are the same when their keys are (``fs_effects.path_key``: names followed to their values,
joins normalised). Whether several processes run the scope is the caller's question.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .fs_effects import MKDIR, WRITE, effects_at, is_path_obj, path_key

_EXISTS = frozenset({"os.path.exists", "os.path.isdir", "os.path.lexists"})
_PATH_TESTS = frozenset({"exists", "is_dir"})
_CATCHES = frozenset({"FileExistsError", "OSError", "IOError", "Exception", "BaseException", "EnvironmentError"})


class Race:
    """``kind`` (see the module), the ``test`` (the ``if``/``assert``), the existence ``check`` call,
    the creating ``call`` of this scope and its ``effect`` (``fs_effects.FsEffect``)."""

    __slots__ = ("kind", "test", "check", "call", "effect")

    def __init__(self, kind, test, check, call, effect):
        self.kind, self.test, self.check, self.call, self.effect = kind, test, check, call, effect


def exists_tested(vctx, expr: ast.AST):
    """The path that ``expr`` tests for existence, else None."""
    if not isinstance(expr, ast.Call):
        return None
    qn = vctx.qn(expr) or ""
    if qn in _EXISTS and len(expr.args) == 1 and not expr.keywords:
        return expr.args[0]
    f = expr.func
    if isinstance(f, ast.Attribute) and f.attr in _PATH_TESTS and not expr.args and not expr.keywords \
            and is_path_obj(vctx, f.value):
        return f.value
    return None


def _conjuncts(test: ast.AST, negated: bool = False):
    """(expression, negated) of what holds in the body of ``if test:`` (``and`` operands, ``not``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _conjuncts(test.operand, not negated)
        return
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negated:
        for v in test.values:
            yield from _conjuncts(v, False)
        return
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and negated:
        for v in test.values:  # not (a or b): neither holds
            yield from _conjuncts(v, True)
        return
    yield test, negated


def _tested_paths(vctx, test, holds: bool):
    """(check call, key, exists?) for each existence test whose answer is known where ``test``
    evaluated to ``holds`` (the ``if`` body: True; its ``else``: False, only for a single test)."""
    out = []
    if holds:
        parts = list(_conjuncts(test))
    else:
        parts = [(e, not neg) for e, neg in _conjuncts(test)]
        if len(parts) != 1:
            return []
    for e, neg in parts:
        p = exists_tested(vctx, e)
        if p is None:
            continue
        k = path_key(vctx, p)
        if k is not None:
            out.append((e, k, not neg))
    return out


_EXITS = frozenset({"sys.exit", "os._exit", "exit", "quit", "builtins.exit"})


def _terminates(vctx, body) -> bool:
    """The block ends the process's way through: ``raise``, ``sys.exit(...)``."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ast.Raise):
        return True
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        qn = vctx.qn(last.value) or (last.value.func.id if isinstance(last.value.func, ast.Name) else "")
        return qn in _EXITS
    return False


def _caught(node, stop) -> bool:
    """``node`` sits in the body of a ``try`` (below ``stop``) one of whose handlers catches the
    error of an existing folder (bare ``except``, ``FileExistsError``, ``OSError``, ``Exception``)."""
    child, p = node, parent(node)
    while p is not None and p is not stop:
        if isinstance(p, ast.Try) and child in p.body:
            for h in p.handlers:
                if h.type is None:
                    return True
                types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                for t in types:
                    name = t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", "")
                    if name in _CATCHES:
                        return True
        if isinstance(p, FUNC_TYPES):
            return False
        child, p = p, parent(p)
    return False


def _in_block(node, block) -> bool:
    for st in block:
        if st is node:
            return True
        for n in ast.walk(st):
            if n is node:
                return True
    return False


def _creations(ctx, an, calls, kinds):
    """(call, effect) for the calls among ``calls`` that create a path (``kinds``), with its key."""
    out = []
    for c in calls:
        for e in effects_at(ctx, an, c):
            if e.kind in kinds and e.path_key() is not None:
                out.append((c, e))
                break
    return out


def check_then_create(ctx, an, scope) -> list[Race]:
    """The check-then-create races of ``scope`` (module or function) of the checked file."""
    sem = ctx.sem
    calls = sem.scope_calls(scope)
    tests = []  # (if/assert node, check call, key, exists?, block where it holds or None)
    for c in calls:
        p = parent(c)
        while p is not None and not isinstance(p, (ast.If, ast.Assert, ast.stmt)):
            p = parent(p)
        if isinstance(p, ast.If):
            for chk, k, ex in _tested_paths(ctx, p.test, True):
                if chk is c:
                    tests.append((p, chk, k, ex, p.body))
            for chk, k, ex in _tested_paths(ctx, p.test, False):
                if chk is c:
                    tests.append((p, chk, k, ex, p.orelse))
        elif isinstance(p, ast.Assert):
            for chk, k, ex in _tested_paths(ctx, p.test, True):
                if chk is c and not ex:  # ``assert not exists(p)``: fails when present
                    tests.append((p, chk, k, True, None))
    if not tests:
        return []
    creates = None
    out = []
    done = set()
    for node, chk, k, ex, block in tests:
        if creates is None:
            creates = _creations(ctx, an, calls, (MKDIR, WRITE))
        if not ex and block is not None:
            # the path is missing in ``block``: a creation there that raises on an existing folder
            for c, e in creates:
                if e.kind != MKDIR or e.exist_ok is not False or e.path_key() != k or id(c) in done:
                    continue
                if _in_block(c, block) and not _caught(c, node):
                    done.add(id(c))
                    out.append(Race("create-if-missing", node, chk, c, e))
        elif ex and (block is None or _terminates(ctx, block)):
            # the path must be absent past ``node``: a later creation of it by another process fails this test
            end = (node.end_lineno, node.end_col_offset)
            for c, e in creates:
                if e.path_key() != k or id(c) in done or (c.lineno, c.col_offset) < end:
                    continue
                if parent_chain_contains(c, node):
                    continue
                done.add(id(c))
                out.append(Race("fail-if-present", node, chk, c, e))
                break
    return out


def parent_chain_contains(node, anc) -> bool:
    p = parent(node)
    while p is not None:
        if p is anc:
            return True
        p = parent(p)
    return False
