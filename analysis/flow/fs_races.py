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
  - ``"checked-outside-lock"``: ``if exists(p): return p`` (the fast path), then ``with FileLock(...):``
    that removes, extracts, writes or creates ``p`` with no existence test of ``p`` inside the lock:
    two processes both miss the fast path, the second to take the lock redoes the first one's work
    over it (removing what the first may already be reading). The lock (a ``filelock`` class, or a
    project class derived from one) says that several processes run it;
  - ``"library-check-then-create"`` (``library_check_then_create``): a library call that tests and
    creates its folder itself, without ``exist_ok`` (tensorboardX's ``SummaryWriter(logdir)`` and
    ``FileWriter(logdir)`` run ``if not os.path.exists(logdir): os.makedirs(logdir)`` in
    ``record_writer.directory_check``), on a path that this scope has not created before the call
    (an earlier ``os.makedirs(p, exist_ok=True)`` of the same path leaves the library's test
    nothing to race on), whose name does not depend on the rank, not in a ``try`` that catches the
    error;
  - ``"write-if-missing"``: ``if os.path.exists(p): x = load(p) else: x = build(); save(x, p)`` (or
    ``if not exists(p): save(...)`` and a read of ``p`` after it): a file written where the test
    says it is missing and read where it is present; several processes find it missing and write
    it at once, and one that tests after another began writing reads a partial file. A write that
    moves a finished file into place (``os.replace(tmp, p)``) is not one;
  - ``"fail-if-present"``: ``if exists(p): raise ...`` (or ``assert not exists(p)``), then, later in
    the same scope, a creation of ``p`` (any ``os.makedirs``/``mkdir``/write of it): a process that
    creates it first makes the others' test fail. A synchronising call between the test and the
    creation (``flow.sync``) removes the race (every process tests before any creates).

Paths are the same when their keys are (``race_key``: ``fs_effects.path_key``, names followed to
their values, joins normalised; else the same variable, not assigned in between). Whether several processes run the scope is the caller's question.
"""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, get_arg, parent
from ..torch_api import constant_of
from .assignments import has_ancestor
from .fs_effects import EXTRACT, MKDIR, READ, WRITE, effects_at, is_path_obj, path_key, rank_specific

_EXISTS = frozenset({"os.path.exists", "os.path.isdir", "os.path.lexists"})
_PATH_TESTS = frozenset({"exists", "is_dir"})
_LOCKS = frozenset({"filelock.FileLock", "filelock.SoftFileLock", "filelock.UnixFileLock",
                    "filelock.WindowsFileLock", "filelock.BaseFileLock"})
_REMOVES = frozenset({"shutil.rmtree", "os.remove", "os.unlink", "os.rmdir"})
_CATCHES = frozenset({"FileExistsError", "OSError", "IOError", "Exception", "BaseException", "EnvironmentError"})
# library calls that create their folder with ``if not os.path.exists(d): os.makedirs(d)`` -> the
# folder's argument (tensorboardX ``record_writer.directory_check``, still so in its 2026 sources;
# ``torch.utils.tensorboard`` creates it with ``exist_ok=True`` and is not listed)
_RACY_CREATORS = {
    "tensorboardX.SummaryWriter": (0, "logdir"), "tensorboardX.writer.SummaryWriter": (0, "logdir"),
    "tensorboardX.FileWriter": (0, "logdir"), "tensorboardX.writer.FileWriter": (0, "logdir"),
}


class Race:
    """``kind`` (see the module), the ``test`` (the ``if``/``assert``), the existence ``check`` call,
    the creating ``call`` of this scope and its ``effect`` (``fs_effects.FsEffect``); for
    ``"checked-outside-lock"``, ``call`` is the lock's construction and ``effect`` the effect on
    the path under it (None for a removal)."""

    __slots__ = ("kind", "test", "check", "call", "effect")

    def __init__(self, kind, test, check, call, effect):
        self.kind, self.test, self.check, self.call, self.effect = kind, test, check, call, effect


def exists_tested(vctx, expr: ast.AST, files: bool = False):
    """The path that ``expr`` tests for existence, else None. ``files``: also a test that it is a
    file (``os.path.isfile(p)``, ``p.is_file()``), which a missing path fails too."""
    if not isinstance(expr, ast.Call):
        return None
    qn = vctx.qn(expr) or ""
    if (qn in _EXISTS or files and qn == "os.path.isfile") and len(expr.args) == 1 and not expr.keywords:
        return expr.args[0]
    f = expr.func
    if isinstance(f, ast.Attribute) and (f.attr in _PATH_TESTS or files and f.attr == "is_file") \
            and not expr.args and not expr.keywords and is_path_obj(vctx, f.value):
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


def _tested_paths(vctx, test, holds: bool, files: bool = False):
    """(check call, key, exists?) for each existence test whose answer is known where ``test``
    evaluated to ``holds`` (the ``if`` body: True; its ``else``: False, only for a single test);
    ``files``: ``exists_tested``'s."""
    out = []
    if holds:
        parts = list(_conjuncts(test))
    else:
        parts = [(e, not neg) for e, neg in _conjuncts(test)]
        if len(parts) != 1:
            return []
    for e, neg in parts:
        p = exists_tested(vctx, e, files)
        if p is None:
            continue
        k = race_key(vctx, p)
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


def _caught(node, stop, catches=_CATCHES) -> bool:
    """``node`` sits in the body of a ``try`` (below ``stop``) one of whose handlers catches the
    error of an existing folder (bare ``except``, ``FileExistsError``, ``OSError``, ``Exception``;
    ``catches``: the names that count)."""
    child, p = node, parent(node)
    while p is not None and p is not stop:
        if isinstance(p, ast.Try) and child in p.body:
            for h in p.handlers:
                if h.type is None:
                    return True
                types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                for t in types:
                    name = t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", "")
                    if name in catches:
                        return True
        if isinstance(p, FUNC_TYPES):
            return False
        child, p = p, parent(p)
    return False


_MISSING_CATCHES = (_CATCHES - {"FileExistsError"}) | {"FileNotFoundError"}
_TOLERANT = {"shutil.rmtree": (1, "ignore_errors"), "Path.unlink": (0, "missing_ok")}


def strict_removal(vctx, call: ast.Call):
    """The path ``call`` removes when it fails on a missing one (``os.remove``, ``os.unlink``,
    ``os.rmdir``, ``shutil.rmtree`` without ``ignore_errors=True``, ``Path(p).unlink()`` without
    ``missing_ok=True``), not inside a ``try`` that catches ``FileNotFoundError``/``OSError``;
    else None."""
    qn = vctx.qn(call) or ""
    f = call.func
    if qn in _REMOVES:
        path = get_arg(call, 0, "path")
    elif isinstance(f, ast.Attribute) and f.attr == "unlink" and is_path_obj(vctx, f.value):
        qn, path = "Path.unlink", f.value
    else:
        return None
    if path is None or any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    if qn in _TOLERANT:
        flag = get_arg(call, *_TOLERANT[qn])
        c = constant_of(vctx.sem, flag) if flag is not None else None
        if flag is not None and (c is None or c.value):
            return None
    stop = vctx.sem.enclosing_function(call) or vctx.sem.tree
    return None if _caught(call, stop, _MISSING_CATCHES) else path


def exists_tested_around(vctx, node, key, files: bool = False) -> bool:
    """``node`` sits under an ``if`` whose test checks that the path of ``key`` exists (``files``:
    or that it is a file, ``exists_tested``)."""
    child, p = node, parent(node)
    while p is not None and not isinstance(p, FUNC_TYPES):
        if isinstance(p, ast.If) and child is not p.test:
            for e in ast.walk(p.test):
                got = exists_tested(vctx, e, files)
                if got is not None and race_key(vctx, got) == key:
                    return True
        child, p = p, parent(p)
    return False


def _alone(node, chk) -> bool:
    """The existence test is the whole test of ``node`` (``if exists(p):``, ``assert not
    exists(p)``): whether it fails depends on the path alone, not on other conditions that a
    later creation may exclude."""
    t = node.test
    while isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
        t = t.operand
    return t is chk


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
            if e.kind in kinds and effect_key(ctx, an, e) is not None:
                out.append((c, e))
                break
    return out


def is_file_lock(ctx, an, expr) -> bool:
    """``expr`` makes an inter-process file lock: ``filelock.FileLock(...)`` (and its siblings), or
    a class of the project derived from one (by the qualified names of its bases)."""
    from .fs_effects import resolve

    if not isinstance(expr, ast.Call):
        return False
    if (ctx.qn(expr) or "") in _LOCKS:
        return True
    cls, sem = None, ctx.sem
    if isinstance(expr.func, ast.Name) and expr.func.id in an.main.classes:
        cls = an.main.classes[expr.func.id]
    else:
        got = resolve(an, an.main, expr)
        if got is not None and isinstance(parent(got[1]), ast.ClassDef):
            cls, sem = parent(got[1]), got[0].sem
    if cls is None:
        return False
    return any((sem.qualname(b) or "") in _LOCKS for b in cls.bases)


def _checked_outside_lock(ctx, an, scope, calls, tests) -> list[Race]:
    out = []
    withs = [w for w in ast.walk(scope) if isinstance(w, ast.With)
             and (sem_scope(ctx, w) is scope) and any(is_file_lock(ctx, an, it.context_expr) for it in w.items)]
    if not withs:
        return out
    for w in withs:
        inside = [c for c in calls if _in_block(c, w.body)]
        for node, chk, k, ex, block in tests:
            if not ex or block is None or not isinstance(node, ast.If) or not block or \
                    not isinstance(block[-1], ast.Return) or (node.end_lineno, node.end_col_offset) > (w.lineno, w.col_offset):
                continue
            if any((p := exists_tested(ctx, c)) is not None and race_key(ctx, p) == k for c in inside):
                continue  # tested again under the lock
            hit = None
            for c in inside:
                qn = ctx.qn(c) or ""
                if qn in _REMOVES and c.args and race_key(ctx, c.args[0]) == k:
                    hit = c
                    break
                effs = [e for e in effects_at(ctx, an, c) if e.kind in (MKDIR, WRITE, EXTRACT) and effect_key(ctx, an, e) == k]
                if effs:
                    hit = c
                    break
            if hit is not None and not rebound(ctx, scope, k, node, hit):
                effs = effects_at(ctx, an, hit)
                out.append(Race("checked-outside-lock", node, chk, w.items[0].context_expr,
                                effs[0] if effs else None))
                break
    return out


def _local(name: ast.Name) -> str:
    return "local:" + name.id


def race_key(vctx, expr) -> str | None:
    """``fs_effects.path_key``, or for a path it cannot key because of a variable whose value it
    cannot read (assigned in several branches, from a call, a loop variable), the path with that
    variable keyed as itself (``local:name``; the whole path when it is such a variable,
    ``join(param:root,local:name)`` when it is written inline as ``os.path.join(root, name)``): the
    same path as long as no such variable is assigned again in between (``rebound``)."""
    k = path_key(vctx, expr)
    if k is None and expr is not None:
        if isinstance(expr, ast.Name):
            return _local(expr)
        return path_key(vctx, expr, leaf=_local)
    return k


def effect_key(vctx, an, e) -> str | None:
    """``race_key`` of an effect's path (variables only for an effect of this file's own call)."""
    k = e.path_key()
    if k is None and e.view is an.main and e.path is not None and not e.via:
        return race_key(vctx, e.path)
    return k


_LOCAL_NAME = re.compile(r"local:([A-Za-z_][A-Za-z_0-9]*)")


def rebound(ctx, scope, key, a, b) -> bool:
    """A variable of a key with ``local:`` parts is assigned between ``a`` and ``b``."""
    if "local:" not in key:
        return False
    lo, hi = a.end_lineno, b.lineno
    bound = ctx.sem.assignments(scope)
    return any(lo < st.lineno <= hi for name in _LOCAL_NAME.findall(key) for st in bound.get(name, ()))


def sem_scope(ctx, node):
    return ctx.sem.enclosing_function(node) or ctx.sem.tree


def check_then_create(ctx, an, scope) -> list[Race]:
    """The check-then-create races of ``scope`` (module or function) of the checked file."""
    sem = ctx.sem
    calls = sem.scope_calls(scope)
    tests = []  # (if/assert node, check call, key, exists?, block where it holds or None)
    fills = []  # (if node, check call, key, a block reached whenever the path is missing)
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
            for chk, k, ex in _tested_paths(ctx, p.test, True, files=True):
                if chk is c:  # the body needs ``not exists(p)``; the ``else`` of ``exists(p) and ...``
                    fills.append((p, chk, k, (p.orelse or _after_return(p)) if ex else p.body))
        elif isinstance(p, ast.Assert):
            for chk, k, ex in _tested_paths(ctx, p.test, True):
                if chk is c and not ex:  # ``assert not exists(p)``: fails when present
                    tests.append((p, chk, k, True, None))
    if not tests and not fills:
        return []
    creates = None
    out = _checked_outside_lock(ctx, an, scope, calls, tests)
    done = set()
    for node, chk, k, ex, block in tests:
        if creates is None:
            creates = _creations(ctx, an, calls, (MKDIR, WRITE))
        if not ex and block is not None:
            # the path is missing in ``block``: a creation there that raises on an existing folder
            for c, e in creates:
                if e.kind != MKDIR or e.exist_ok is not False or effect_key(ctx, an, e) != k or id(c) in done:
                    continue
                if _in_block(c, block) and not _caught(c, node) and not rebound(ctx, scope, k, node, c):
                    done.add(id(c))
                    out.append(Race("create-if-missing", node, chk, c, e))
        elif ex and (block is None or _terminates(ctx, block)) and _alone(node, chk):
            # the path must be absent past ``node``: a later creation of it by another process fails this test
            end = (node.end_lineno, node.end_col_offset)
            for c, e in creates:
                if effect_key(ctx, an, e) != k or id(c) in done or (c.lineno, c.col_offset) < end \
                        or rebound(ctx, scope, k, node, c):
                    continue
                if has_ancestor(c, node):
                    continue
                done.add(id(c))
                out.append(Race("fail-if-present", node, chk, c, e))
                break
    for node, chk, k, block in fills:
        if creates is None:
            creates = _creations(ctx, an, calls, (MKDIR, WRITE))
        out.extend(_write_if_missing(ctx, an, scope, calls, creates, node, chk, k, block, done))
    return out


def _after_return(node: ast.If) -> list:
    """The statements after ``node`` in its block when its body ends in a ``return``
    (``if exists(p): return load(p)`` and then the code that runs when it is missing)."""
    if not node.body or not isinstance(node.body[-1], ast.Return):
        return []
    for block in _blocks(parent(node)):
        for i, st in enumerate(block):
            if st is node:
                return block[i + 1:]
    return []


def _blocks(p) -> list:
    return [getattr(p, f) for f in ("body", "orelse", "finalbody") if isinstance(getattr(p, f, None), list)] + \
        [h.body for h in getattr(p, "handlers", ())]


# moves that put a finished file in place at once: a reader sees the old name or the whole file
_ATOMIC_WRITES = frozenset({"os.replace", "os.rename", "shutil.move"})


def _write_if_missing(ctx, an, scope, calls, creates, node, chk, k, block, done) -> list[Race]:
    """``"write-if-missing"``: a file written in ``block`` (where the test says ``k`` is missing)
    and read elsewhere in the scope (the other branch, or after the ``if``): the cache that every
    process builds when it finds none. A process that tests after another has begun writing finds
    the file and reads what is there so far. Not a write that moves a finished file into place
    (``os.replace``), nor one inside a folder creation's race (``create-if-missing``)."""
    out = []
    for c, e in creates:
        if e.kind != WRITE or e.folder or e.api in _ATOMIC_WRITES or effect_key(ctx, an, e) != k \
                or id(c) in done or not _in_block(c, block) or rebound(ctx, scope, k, node, c) \
                or e.per_rank or rank_specific(ctx, chk.args[0] if chk.args else chk.func.value, chk):
            continue  # (a path of this rank's own: nobody else writes or reads it)
        reads = [r for r in calls if not _in_block(r, block) and r is not c
                 and any(x.kind == READ and effect_key(ctx, an, x) == k for x in effects_at(ctx, an, r))
                 and not rebound(ctx, scope, k, node, r)]
        if reads:
            done.add(id(c))
            out.append(Race("write-if-missing", node, chk, c, e))
    return out


def library_check_then_create(ctx, an, scope) -> list[Race]:
    """The ``"library-check-then-create"`` races of ``scope`` (see the module): ``Race`` with no
    test or check of this file (the library makes them), ``call`` the library call."""
    from ..semantic import get_arg

    calls = ctx.sem.scope_calls(scope)
    out, made = [], None
    for c in calls:
        spec = _RACY_CREATORS.get(ctx.qn(c) or "")
        if spec is None:
            continue
        arg = get_arg(c, *spec)
        if arg is None or isinstance(arg, ast.Constant) and arg.value is None:
            continue  # the default folder: ``runs/<date>_<host>``, one per host and second
        k = race_key(ctx, arg)
        if k is None or rank_specific(ctx, arg, c) or _caught(c, scope):
            continue
        if made is None:
            made = _creations(ctx, an, calls, (MKDIR,))
        here = (c.lineno, c.col_offset)
        if any((m.lineno, m.col_offset) < here and effect_key(ctx, an, e) == k for m, e in made):
            continue  # created before: the library finds it
        out.append(Race("library-check-then-create", None, None, c, None))
    return out
