from __future__ import annotations

import ast
import os

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent

# the packages whose ``rank_zero_only`` runs the function on global rank 0 and returns ``default``
# (None unless given) on every other rank: Lightning (``lightning.pytorch.utilities``,
# ``lightning.fabric.utilities``, ``pytorch_lightning.utilities``, ``lightning_fabric.utilities``,
# each also under ``.rank_zero``) and ``lightning_utilities.core.rank_zero``, which they re-export
_LIGHTNING = frozenset({"lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities"})
_NEEDS = (("rank_zero_only",),)
# a ``None`` that these consume raises: ``len(None)``, ``iter(None)``, ``next(None)``...
_CONSUMERS = frozenset({"len", "iter", "next", "list", "tuple", "dict", "sorted", "enumerate", "zip"})


class RankZeroOnlyResult(Rule):
    """
    ## What it does
    Checks for the result of a function decorated with Lightning's `@rank_zero_only`
    (`lightning.pytorch.utilities`, `pytorch_lightning.utilities`, `lightning.fabric.utilities`,
    `lightning_utilities.core.rank_zero`; the decorator is recognised by its qualified name,
    through imports and aliases) that every rank uses: an attribute of it, a call of it, an item
    of it, an iteration over it or an unpacking of it (`len(...)`, `for x in ...`, `a, b = ...`).
    The result may be used right at the call or through a name bound once to it in the same
    function, also as an element of a tuple assignment. The decorated function may be of this
    module, a method (`self.build()`), or a function of another module of the project (the call
    is resolved by the program model).

    Not flagged: a call whose result is unused (the usual `@rank_zero_only def log_info(...)`), a
    use under a main-rank test (`if trainer.global_rank == 0:`, or in a function that itself only
    runs on rank 0), a name that the function tests (`if model is None:`, `if model:`), and a
    decorator given a `default` (`rank_zero_only(fn, default=...)`).

    ## Why is this bad?
    `rank_zero_only` calls the function on global rank 0 only; every other rank gets `None` back
    (or the `default`). Code that uses the result works in a single-process run and on rank 0,
    and crashes with `AttributeError: 'NoneType' object has no attribute ...` (or a `TypeError`)
    on every other rank as soon as the job runs on more than one device.

    ## Example
    ```python
    @rank_zero_only
    def build_model(cfg):
        return Net.from_checkpoint(cfg.path)


    model = build_model(cfg)
    model.freeze_encoder()
    ```

    ## Use instead
    ```python
    def build_model(cfg):
        return Net.from_checkpoint(cfg.path)


    model = build_model(cfg)  # every rank builds (or loads) its own replica
    model.freeze_encoder()
    ```

    ## Fix safety
    There is no fix: whether every rank should run the function, or the other ranks should
    receive its result (a broadcast, a barrier and a load from a shared cache) depends on the
    program.
    """

    code = "DDP223"
    name = "rank-zero-only-result"
    severity = Severity.ERROR
    fix_availability = "never"
    # a Lightning program: its files spell "torch" (``lightning.pytorch``) or "lightning"
    base_text = ("torch", "lightning", "rank_zero_only")

    @classmethod
    def reach(cls, text, filename):
        # the decorated function: in this file, or in a file of the project that spells the decorator
        if "rank_zero_only" in text:
            return True, {}
        from ..flow import project
        from ._common import _admitting_files

        if not filename or filename.startswith("<") or not project.is_file(os.path.abspath(filename)):
            return False, {}
        here = os.path.abspath(filename)
        deps: dict[str, str] = {}
        # the file's own project first: the scan of the outer root stops after a number of files
        for folder in dict.fromkeys(project.roots_for(here)[:2]):
            _files, _index, got = _admitting_files(folder, _NEEDS, project.disk_allowed())
            deps.update((p, h) for p, h in got.items() if p != here)
        return bool(deps), deps

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.rank import rank0_guarded

        an = None
        for call in ctx.sem.calls:
            if not _may_be_helper(call):
                continue
            if not _bound_or_used(call):
                continue
            if an is None:
                an = for_context(ctx)
            target = an.resolve_call(an.main, call)
            if target is None or not _rank_zero_only(target[0].sem, target[1]):
                continue
            uses = _uses(ctx, an, call)
            use = next((u for u in uses if rank0_guarded(ctx, u) is not True), None)
            if use is None or rank0_guarded(ctx, call) is True:
                continue
            fn = target[1]
            where = "" if target[0] is an.main else f" (in `{os.path.basename(target[0].path or '')}`)"
            ctx.report(
                call,
                f"`{fn.name}`{where} is decorated with `@rank_zero_only`: it runs on rank 0 only and "
                f"returns None on every other rank, where `{_short(ctx.text(use))}` (line {use.lineno}) "
                f"then fails; call it on every rank, or share its result (broadcast, or a barrier and "
                f"a load)",
            )


def _bound_or_used(call: ast.Call) -> bool:
    p = parent(call)
    return not isinstance(p, ast.Expr) and not (isinstance(p, (ast.Return, ast.Await)))


def _may_be_helper(call: ast.Call) -> bool:
    f = call.func
    return f.__class__ is ast.Name or (f.__class__ is ast.Attribute and f.value.__class__ is ast.Name)


def _rank_zero_only(sem, fn: ast.AST) -> bool:
    """``fn`` is decorated with a bare Lightning ``@rank_zero_only`` (no ``default``)."""
    if not isinstance(fn, FUNC_TYPES):
        return False
    for d in fn.decorator_list:
        if isinstance(d, (ast.Name, ast.Attribute)):
            qn = sem.qualname(d) or ""
            if qn.rsplit(".", 1)[-1] == "rank_zero_only" and qn.partition(".")[0] in _LIGHTNING:
                return True
    return False


def _uses(ctx, an, call: ast.Call) -> list[ast.AST]:
    """The expressions that would fail on None: at the call itself, or through the name the
    call's result is bound to in its function (``x = f()``, ``x, n = f(), 0``) until that name is
    bound again, with no test of that name there; ``x`` handed to a function of the project that
    uses its parameter so (one call deep)."""
    got = _consumer(call)
    if got is not None:
        return [got]
    p = parent(call)
    target = None
    if isinstance(p, ast.Assign) and len(p.targets) == 1 and p.value is call:
        t = p.targets[0]
        if isinstance(t, (ast.Tuple, ast.List)):
            return [p]  # unpacking None
        target = t
    elif isinstance(p, ast.Tuple) and isinstance(parent(p), ast.Assign):
        st = parent(p)
        t = st.targets[0] if len(st.targets) == 1 else None
        if st.value is p and isinstance(t, ast.Tuple) and len(t.elts) == len(p.elts):
            target = t.elts[p.elts.index(call)]
    if not isinstance(target, ast.Name):
        return []
    return _name_uses(ctx.sem, an, ctx.sem.scope_of(call), target.id, call.lineno, depth=0)


def _name_uses(sem, an, scope: ast.AST, name: str, after: int, depth: int) -> list[ast.AST]:
    """The failing uses of ``name`` in ``scope`` after line ``after`` up to (and in) the next
    statement that binds it again; [] when the scope tests it or hands it to a test."""
    later = [st for st in sem.assignments(scope).get(name) or () if st.lineno > after]
    out = []
    for n in _loads(scope, name):
        if n.lineno <= after or any(_rebound_before(st, n) for st in later):
            continue
        if _tested(n):
            return []
        got = _consumer(n)
        if got is not None:
            out.append(got)
        elif depth == 0 and an is not None:
            out.extend(_passed_on(an, n))
    return out


def _rebound_before(st: ast.stmt, n: ast.AST) -> bool:
    """The binding ``st`` runs before ``n`` on every path to it: ``n`` is after ``st`` in the same
    statement list or nested in a later statement of it (the loads of ``st`` itself come first)."""
    if n.lineno <= st.lineno:
        return False
    owner = parent(st)
    child, p = n, parent(n)
    while p is not None and p is not owner:
        child, p = p, parent(p)
    if p is None:
        return False
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(owner, field, None)
        if isinstance(block, list) and st in block:
            return child in block and block.index(child) > block.index(st)
    return False


def _passed_on(an, n: ast.Name) -> list[ast.AST]:
    """``f(x)`` with ``f`` a function of the project whose parameter for ``x`` fails on None."""
    from ..flow.helper_calls import bind_args

    c = parent(n)
    if isinstance(c, ast.keyword):
        c = parent(c)
    if not isinstance(c, ast.Call) or c.func is n:
        return []
    target = an.resolve_call(an.main, c)
    if target is None:
        return []
    view, fn = target
    params = [k for k, v in bind_args(c, fn).items() if v is n]
    if len(params) != 1 or not isinstance(fn, FUNC_TYPES):
        return []
    return [c] if _name_uses(view.sem, None, fn, params[0], fn.lineno, depth=1) else []


def _loads(scope: ast.AST, name: str):
    from ..semantic import iter_scope_nodes

    for n in iter_scope_nodes(scope):
        if n.__class__ is ast.Name and n.id == name and isinstance(n.ctx, ast.Load):
            yield n


def _consumer(e: ast.AST) -> ast.AST | None:
    """The expression that fails when ``e`` is None: ``e.attr``, ``e(...)``, ``e[...]``,
    ``for x in e``, ``len(e)``."""
    p = parent(e)
    if isinstance(p, ast.Attribute) and p.value is e:
        return p
    if isinstance(p, ast.Subscript) and p.value is e:
        return p
    if isinstance(p, ast.Call) and p.func is e:
        return p
    if isinstance(p, (ast.For, ast.comprehension)) and p.iter is e:
        return e
    if isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id in _CONSUMERS \
            and e in p.args:
        return p
    return None


def _tested(n: ast.Name) -> bool:
    """``n`` is tested against None or for truth (``if x is None``, ``if x:``, ``x or y``,
    ``x if x else ...``, ``isinstance(x, ...)``)."""
    p = parent(n)
    if isinstance(p, ast.Compare):
        return True
    if isinstance(p, (ast.If, ast.While, ast.IfExp, ast.Assert)) and p.test is n:
        return True
    if isinstance(p, ast.BoolOp) or (isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not)):
        return True
    return isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id in ("isinstance", "callable")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:37] + "..."
