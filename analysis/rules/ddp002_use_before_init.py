from __future__ import annotations

import ast
import os

from ..model import Severity
from ..registry import Rule
from ..flow.testing import expects_error
from ..flow.wrappers import calls_or_wrappers
from ._common import ALL_COLLECTIVES, D, DDP_CLASS
from ._flow import effect_related, effect_words, text
from ..flow import for_context
from ..flow.imports import _NOT_PROJECT, import_use, imported_views, is_main_guard
from ..flow.summaries import scope_calls
from ..semantic import parent

# init_device_mesh only initialises when nothing did before it, so it does not count
_INITS = (D + "init_process_group",)
_USES = tuple(D + n for n in ("get_rank", "get_world_size", "new_group", "new_subgroups", *ALL_COLLECTIVES)) + (
    DDP_CLASS,
)
# nodes between a use and its block that make it conditional or deferred
_CONDITIONAL = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.BoolOp, ast.ListComp,
                ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda, ast.match_case, ast.ExceptHandler,
                ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
try:  # Python 3.11+
    _CONDITIONAL += (ast.TryStar,)
except AttributeError:  # pragma: no cover
    pass


class UseBeforeInit(Rule):
    """
    ## What it does
    Checks for `dist.get_rank()`, `dist.get_world_size()`, a collective, `new_group`, or the
    `DistributedDataParallel` constructor that runs before `init_process_group` on the same
    straight-line path: earlier in the same function body (or at module level), unconditionally,
    with the init call later in that body. A `setup()` helper defined in the file that calls
    `init_process_group` counts as the init.

    The use may also sit in a helper along the call graph: a function of this file or of another
    file of the project (`setup_logger()` that calls `dist.get_rank()`), or a class whose
    `__init__` does (a `Trainer` that builds a `DistributedSampler` without `num_replicas` and
    `rank`), when that use is on the helper's unconditional path (not behind an
    `is_initialized()` test or any other condition).

    Code that runs at import time counts too. A script (it has an `if __name__ == "__main__":`
    entry point, or initialises at its top level) whose top level imports a module of the project
    whose own top level needs the group (a `config.py` computing `LR = base * dist.get_world_size()`,
    a module-level logger set up through a helper that reads the rank), directly or through
    further imports, runs that code before `main()` initialises the group (so does an import
    in the `__main__` block above the `main()` call). Statements under a
    test (`if dist.is_initialized():`), in a `try`, or in functions are not import-time uses;
    imports made inside a function after the init are fine; library modules (no entry point) are
    not judged, since their importer may initialise first.

    ## Why is this bad?
    Nothing in `torch.distributed` works until the default process group exists. The call raises:

    ```
    ValueError: Default process group has not been initialized, please make sure to call
    init_process_group.
    ```

    ## Example
    ```python
    def main():
        rank = dist.get_rank()
        dist.init_process_group("nccl")
    ```

    ## Use instead
    ```python
    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
    ```

    For an import-time use, compute the value after the init (in a function, or a lazy
    `get_world_size()` helper), or import the module inside `main()` after `init_process_group`.

    ## Fix safety
    There is no automatic fix: moving the init call may move code that computes its arguments.
    """

    code = "DDP002"
    name = "use-before-init"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("init_process_group",)
    requires_text_all = (("distributed",),)  # every qualified name it resolves is torch.distributed.*

    def finish(self, ctx) -> None:
        inits = calls_or_wrappers(ctx, _INITS, "init")
        if not inits:
            return
        sem = ctx.sem
        by_scope: dict[int, list[ast.Call]] = {}
        for i in inits:
            by_scope.setdefault(id(sem.scope_of(i)), []).append(i)
        direct = sem.calls_to(*_USES)
        helpers = _helper_uses(ctx, inits, set(map(id, direct)) | set(map(id, inits)))
        reported = set()
        for use in [*direct, *(c for c, _ in helpers.values())]:
            scope_inits = by_scope.get(id(sem.scope_of(use)))
            if not scope_inits or expects_error(use):
                continue
            if any(_before(i, use) or _contains(i, use) for i in scope_inits):
                continue  # initialised earlier in this body (or an init call wraps the use)
            later = [i for i in scope_inits if _same_path_after(use, i)]
            if not later:
                continue
            init = later[0]
            qn = ctx.qn(use)
            related = [(init, "the process group is initialised here")]
            if qn is not None and qn.startswith(D) or qn == DDP_CLASS:
                what = "the DistributedDataParallel constructor" if qn == DDP_CLASS else f"`{qn[len(D):]}()`"
            else:
                eff = helpers[id(use)][1]
                what = f"`{text(ctx, use.func)}(...)` (it reaches {effect_words(ctx, _Site(eff))}, which needs it)"
                related += effect_related(ctx, _Site(eff))
            reported.add(id(use))
            ctx.report(
                use,
                f"{what} runs before the process group is initialised (line {init.lineno}): "
                "ValueError: Default process group has not been initialized",
                related=related,
            )
        _import_time(ctx, inits, reported)


def _import_time(ctx, inits, reported) -> None:
    """A script's top-level imports of project modules run before the ``init_process_group``
    that its ``main()`` (or a later top-level statement) makes. (Top-level uses in the script
    itself are the same-scope case above: the call of ``main()`` counts as the init.)"""
    if not any(map(_may_name_project, ctx.sem.imports)):
        return  # no import of the file can run a project module (``imported_views`` finds none)
    tree = ctx.sem.tree
    an = for_context(ctx)
    view = an.main
    top_inits = [i for i in inits if ctx.sem.enclosing_function(i) is None]
    if not top_inits and not any(is_main_guard(st) for st in tree.body):
        return  # a library module: it may be imported after the group exists
    holders = set()  # the statements (at any level) that hold an init call
    for i in inits:
        chain = []
        p = parent(i)
        while p is not None and not isinstance(p, ast.Module):
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                chain = None  # defined, not run, at import
                break
            chain.append(id(p))
            p = parent(p)
        holders.update(chain or ())
    first_init = min(inits, key=lambda n: (n.lineno, n.col_offset))
    init_words = None  # spelled for a finding only
    Import, ImportFrom = ast.Import, ast.ImportFrom
    for st in _before_init(tree.body, holders):
        if st.__class__ is not Import and st.__class__ is not ImportFrom:
            continue
        for name, v2 in imported_views(an, view, st):
            got = import_use(an, v2)
            if got is None:
                continue
            if init_words is None:
                init_words = f"`{text(ctx, first_init.func)}()` at line {first_init.lineno}"
            eff = got.effect
            chain = " -> ".join(f"`{m}`" for m in (name, *got.modules))
            via = f" (through {' -> '.join(f'`{v}`' for v in eff.via)})" if eff.via else ""
            ctx.report(
                st,
                f"importing {chain} runs {eff.what}{via} at import time ({_where(ctx, eff)}), before the "
                f"process group is initialised ({init_words}): ValueError: Default process group has "
                "not been initialized. Compute it after `init_process_group` (in a function, or import "
                "the module later)",
                related=[_eff_range(ctx, eff, "needs the process group at import time"),
                         (first_init, "the process group is initialised here")],
            )
            break


def _may_name_project(st) -> bool:
    """The import statement ``st`` may name a module of the project: what ``imported_views``
    looks up at all (a relative import, or a top-level package that is no well-known library)."""
    if st.__class__ is ast.Import:
        return any(a.name.split(".", 1)[0] not in _NOT_PROJECT for a in st.names)
    mod = st.module or ""
    return bool(st.level) or (bool(mod) and mod.split(".", 1)[0] not in _NOT_PROJECT)


def _before_init(body, holders):
    """The top-level statements that run before the first one holding an init, entering the
    ``if __name__ == "__main__":`` block (its imports run before the ``main()`` call below them)."""
    If = ast.If
    for st in body:
        if st.__class__ is If and is_main_guard(st):
            for inner in st.body:
                if id(inner) in holders:
                    return
                yield inner
            return
        if id(st) in holders:
            return
        yield st


def _where(ctx, eff) -> str:
    return f"{_short(eff.path)}:{eff.line}" if eff.path else f"line {eff.line}"


def _short(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def _eff_range(ctx, eff, msg):
    from ..flow.findings import span

    rng = span(ctx, eff.path, eff.line, eff.col, eff.end_line, eff.end_col)
    here = os.path.abspath(ctx.filename) if not ctx.filename.startswith("<") else None
    if eff.path in (None, here):
        return (rng, msg)
    return ("file", eff.path, rng, msg)


class _Site:
    def __init__(self, eff):
        self.effects = (eff,)


def _helper_uses(ctx, inits, skip) -> dict[int, tuple]:
    """id(call) -> (call, effect) for calls of project functions and constructors whose
    unconditional path uses the process group (``setup_logger()`` that calls ``dist.get_rank()``,
    ``Trainer()`` whose ``__init__`` builds a DistributedSampler), made before an init in the
    same scope."""
    an = for_context(ctx)
    sem = ctx.sem
    out = {}
    last: dict[int, tuple] = {}
    for i in inits:
        scope = sem.scope_of(i)
        end = (i.lineno, i.col_offset)
        if id(scope) not in last or last[id(scope)][1] < end:
            last[id(scope)] = (scope, end)
    for scope, end in last.values():
        for c in scope_calls(an.main, scope):
            if (c.lineno, c.col_offset) >= end:
                break
            if id(c) in skip:
                continue
            target = an.resolve_call(an.main, c)
            if target is None:
                continue
            req = an.requires_pg_of(*target)
            if req is None:
                continue
            name = getattr(target[1], "name", "?")
            if name == "__init__":
                name = getattr(parent(target[1]), "name", name)
            out[id(c)] = (c, req.through(name))
    return out


def _before(a: ast.AST, b: ast.AST) -> bool:
    return (a.end_lineno, a.end_col_offset) <= (b.lineno, b.col_offset)


def _contains(outer: ast.AST, inner: ast.AST) -> bool:
    return (outer.lineno, outer.col_offset) <= (inner.lineno, inner.col_offset) and (
        inner.end_lineno, inner.end_col_offset) <= (outer.end_lineno, outer.end_col_offset)


def _chain(node: ast.AST) -> list[ast.AST]:
    out = [node]
    p = parent(node)
    while p is not None:
        out.append(p)
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)):
            break
        p = parent(p)
    return out


def _same_path_after(use: ast.Call, init: ast.Call) -> bool:
    """``use`` runs unconditionally, earlier in a statement block that (through its later
    statements) leads to ``init``; ``init`` is not behind an ``is_initialized()`` test."""
    uc = _chain(use)
    ic = _chain(init)
    ids = {id(n): k for k, n in enumerate(ic)}
    # lowest common ancestor
    for k, n in enumerate(uc):
        j = ids.get(id(n))
        if j is not None:
            break
    else:
        return False
    common = uc[k]
    if k == 0 or j == 0:
        return False
    u_child, i_child = uc[k - 1], ic[j - 1]
    block = None
    for field in ("body", "orelse", "finalbody"):
        b = getattr(common, field, None)
        if isinstance(b, list) and u_child in b and i_child in b:
            block = b
            break
    if block is None or block.index(u_child) >= block.index(i_child):
        return False
    # the use itself must be unconditional inside its statement
    for n in uc[1:k]:
        if isinstance(n, _CONDITIONAL):
            return False
    # ... and the path to the block must not be conditional either (it is: common is the block owner)
    for n in ic[1:j]:
        if isinstance(n, ast.If) and "is_initialized" in ast.dump(n.test):
            return False
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
    return True
