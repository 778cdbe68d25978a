from __future__ import annotations

import ast
import os

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent
from ..flow.calls import call_args
from ..flow.modern import hub
from ..flow.origins import origins
from ..flow.rank_kinds import int_options, int_uses, program_views, raw_rank_env_read
from ..flow.vocab import env_key
from ._rank_callers import caller_view

_MAX_DEPTH = 3


class RankEnvStringNotInt(Rule):
    """
    ## What it does
    Checks for a rank, local rank or world size read from the environment (`os.environ["LOCAL_RANK"]`,
    `os.environ.get("RANK", 0)`, `os.getenv("WORLD_SIZE")`, and the other launchers' variables:
    `SLURM_PROCID`, `SLURM_LOCALID`, `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_NODE_RANK`,
    `PMIX_RANK`, ...) and never converted with `int(...)`, when the program uses that value as a
    number:

    - as a device index (`torch.cuda.set_device(local_rank)`, `torch.device("cuda", local_rank)`,
      `.to(local_rank)`, DDP's `device_ids=[local_rank]`);
    - as `init_process_group(rank=..., world_size=...)`;
    - in an order comparison or arithmetic with an int (`rank < 2`, `rank * 8`, `rank % 8`);
    - in an equality test against a rank `>= 0` (`local_rank == 0`);
    - in a namespace attribute (`args.local_rank = os.environ["LOCAL_RANK"]`) that the program's
      argparse option for it declares `type=int`, or that a caller of the function setting it (in
      this file or another file of the project) uses as a number (`args = configure(args)`, then
      `torch.cuda.set_device(args.local_rank)`);
    - returned by a function whose caller in another file of the project binds the result and uses
      it as a number (`rank = env_rank()`, then `if rank == 0:`).

    The value is followed by value flow (`flow/origins.py`): assignments, tuple unpacking,
    conditional expressions, and the stores of a namespace attribute in the module (only when every
    non-constant store of it is such a read). A read inside `int(...)` is a number; a read passed
    to `str()`, an f-string (`f"cuda:{local_rank}"`), another environment variable or a log message
    is not a use as a number; `== -1` / `!= -1` (the "unset" sentinel) and `is None` mean the same
    for a string and are not flagged. The read must be in the checked file; the use may be in a
    caller of another file. In a module that imports nothing from torch (a settings helper) only a
    use in a caller of another module counts.

    ## Why is this bad?
    Environment variables are strings. `"0" == 0` is `False`, so a `local_rank == 0` test
    silently says "not the main process" on every rank; `torch.cuda.set_device("1")` and
    `init_process_group(rank="1")` raise; `"1" * 8` is `"11111111"`. The script works when the
    value comes from an argparse option with `type=int` and breaks under the launcher whose
    variable is read raw (often an MPI or SLURM branch that few runs take).

    ## Example
    ```python
    if args.launcher == "mpi":
        args.local_rank = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
    torch.cuda.set_device(args.local_rank)
    ```

    ## Use instead
    ```python
    if args.launcher == "mpi":
        args.local_rank = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    torch.cuda.set_device(args.local_rank)
    ```

    ## Fix safety
    The fix wraps the read in `int(...)` (for `os.environ[...]`, and for `get` / `getenv` with a
    default that is not `None`). It is **unsafe**: other uses of the value that relied on a string
    (a concatenation, a dictionary key) now get a number. No fix is offered when the same statement
    also stores the value into the environment (`args.r = os.environ["RANK"] = ...`), which needs
    the string.
    """

    code = "DDP009"
    name = "rank-env-string-not-int"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = ("environ", "getenv")
    node_types = (ast.Subscript,)  # indexed for the cheap first test of ``finish`` (no visit)

    def visit(self, node, ctx) -> None:
        pass

    def finish(self, ctx) -> None:
        sem = ctx.sem
        if not any(raw_rank_env_read(ctx, n) for n in (*sem.by_type.get(ast.Subscript, ()), *sem.calls)):
            return  # no launcher variable read here (the finding is always at such a read)
        an, view = hub(ctx)
        torch_free = not any((m or "").split(".", 1)[0] == "torch" for m, _lvl, _a in view.imports.values())
        found: dict = {}  # id(read) -> (read, [(where, how)])

        def record(read, where, how):
            if torch_free and where[0] is view:
                return  # a module that imports no torch: only a use in a caller of another module counts
            found.setdefault(id(read), (read, []))[1].append((where, how))

        for n, how in int_uses(view):
            for read in _raw_reads(an, view, n, n):
                record(read, (view, n), how)
        for st in ctx.sem.by_type.get(ast.Assign, ()):
            if not any(isinstance(tg, ast.Attribute) and isinstance(tg.value, ast.Name) and tg.value.id != "self"
                       for tg in st.targets):
                continue
            reads = _raw_reads(an, view, st.value, st)
            if not reads:
                continue
            for tg in st.targets:
                if not (isinstance(tg, ast.Attribute) and isinstance(tg.value, ast.Name) and tg.value.id != "self"
                        and ctx.sem.qualname(tg) is None):
                    continue
                base, attr = tg.value.id, tg.attr
                if not _all_stores_raw(an, view, base, attr):
                    continue
                for ov, opt in ([] if torch_free else int_options(program_views(an, view), attr)):
                    for read in reads:
                        record(read, (ov, opt), "declared `type=int` by its argparse option")
                for cv, use, how in _caller_uses(ctx, an, view, st, base, attr):
                    for read in reads:
                        record(read, (cv, use), how)
        for ret in ctx.sem.by_type.get(ast.Return, ()):
            reads = _raw_reads(an, view, ret.value, ret) if ret.value is not None else []
            if not reads:
                continue
            for cv, use, how in _result_uses(ctx, an, ctx.sem.enclosing_function(ret)):
                for read in reads:
                    record(read, (cv, use), how)
        here = os.path.dirname(os.path.abspath(ctx.filename)) if ctx.filename and not ctx.filename.startswith("<") \
            else None
        for read, uses in sorted(found.values(), key=lambda x: (x[0].lineno, x[0].col_offset)):
            (uv, unode), how = uses[0]
            key = env_key(view, read)
            where = f"line {unode.lineno}" if uv is view else \
                f"{os.path.relpath(uv.path, here) if here and uv.path else uv.path}:{unode.lineno}"
            related = []
            for (rv, rn), rhow in uses[:3]:
                if rv is view:
                    related.append((rn, f"used as a number here: {rhow}"))
                elif rv.path:
                    from ..source import SourceText
                    related.append(("file", rv.path, SourceText(rv.text).node_range(rn), f"used as a number here: {rhow}"))
            ctx.report(
                read,
                f"`{key}` is read from the environment as a string and never converted with `int()`, but it is "
                f"used as a number ({how}, {where}). Wrap the read in `int(...)`",
                related=related,
                fix=_make_fix(ctx, read),
            )


def _raw_reads(an, view, expr, at, depth: int = 0) -> list:
    """The raw environment reads (``raw_rank_env_read``) of this module that the value of ``expr``
    at ``at`` may be: through ``origins``, conditional expressions and the module's stores of a
    namespace attribute (when every non-constant one is such a read)."""
    if depth > _MAX_DEPTH:
        return []
    out = []
    for v, e in origins(an, view, expr, at)[:16]:
        if v is not view:
            continue
        if raw_rank_env_read(v, e):
            out.append(e)
        elif isinstance(e, ast.IfExp):
            out.extend(_raw_reads(an, view, e.body, e, depth + 1))
            out.extend(_raw_reads(an, view, e.orelse, e, depth + 1))
        elif isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id != "self" \
                and view.sem.qualname(e) is None:
            if _all_stores_raw(an, view, e.value.id, e.attr, depth):
                for st in _stores(view, e.value.id, e.attr):
                    out.extend(_raw_reads(an, view, st.value, st, depth + 1))
    return out


def _stores(view, base: str, attr: str) -> list:
    memo = view.memo.setdefault("ddp009.stores", {})
    got = memo.get((base, attr))
    if got is None:
        got = memo[(base, attr)] = [
            st for st in view.sem.by_type.get(ast.Assign, ())
            if any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                   and t.value.id == base for t in st.targets)]
    return got


def _all_stores_raw(an, view, base: str, attr: str, depth: int = 0) -> bool:
    """Every store of ``<base>.<attr>`` in the module is a constant or a raw environment read
    (directly or through a local variable), and there is one such read: nothing converts it."""
    stores = _stores(view, base, attr)
    if not stores:
        return False
    memo = view.memo.setdefault("ddp009.all_raw", {})
    if (base, attr) in memo:
        return memo[(base, attr)]
    memo[(base, attr)] = False  # recursion guard
    any_raw = False
    ok = True
    for st in stores:
        v = st.value
        if isinstance(v, ast.Constant) or (isinstance(v, ast.UnaryOp) and isinstance(v.operand, ast.Constant)):
            continue
        leaves = origins(an, view, v, st)
        if not leaves or not all(lv is view and (raw_rank_env_read(lv, le) or isinstance(le, ast.Constant))
                                 for lv, le in leaves):
            ok = False
            break
        any_raw = any_raw or any(raw_rank_env_read(lv, le) for lv, le in leaves)
    memo[(base, attr)] = got = ok and any_raw
    return got


def _caller_uses(ctx, an, view, st, base: str, attr: str) -> list:
    """(view, read, how) for each read of the attribute, used as a number, in a caller of the
    function that stores it: ``base`` is a parameter of that function, and the caller reads
    ``<arg>.attr`` (or ``<result>.attr`` of ``res = f(arg)``) after the call with no store of it in
    between (callers in this file and in the project's other files)."""
    fn = ctx.sem.enclosing_function(st)
    if not isinstance(fn, FUNC_TYPES) or isinstance(fn, ast.Lambda):
        return []
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
    if base not in params or ctx.sem.assignments(fn).get(base):
        return []
    sites = []
    for c in ctx.sem.calls:
        t = an.resolve_call(view, c)
        if t is not None and t[0] is view and t[1] is fn:
            sites.append((view, c))
    if isinstance(parent(fn), ast.Module):
        from ._common import project_callers  # lazy: reads the project's other files

        for caller, call, node in project_callers(ctx, {fn.name}):
            if node is fn:
                sites.append((caller_view(an, caller), call))
    out = []
    for cv, call in sites:
        arg = next((a for p, a in call_args(call, fn) if p == base), None)
        names = set()
        if isinstance(arg, ast.Name):
            names.add(arg.id)
        ps = parent(call)
        if isinstance(ps, ast.Assign) and len(ps.targets) == 1 and isinstance(ps.targets[0], ast.Name):
            names.add(ps.targets[0].id)
        if not names:
            continue
        cfn = cv.sem.enclosing_function(call)
        for n, how in _module_int_uses(cv):
            if not (isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.value, ast.Name)
                    and n.value.id in names):
                continue
            if cv.sem.enclosing_function(n) is not cfn or (n.lineno, n.col_offset) <= (call.lineno, call.col_offset):
                continue
            if any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                   and t.value.id in names and call.lineno <= s.lineno <= n.lineno
                   for s in cv.sem.by_type.get(ast.Assign, ()) if cv.sem.enclosing_function(s) is cfn
                   for t in s.targets):
                continue  # converted (or replaced) in between
            out.append((cv, n, how))
    return out


def _result_uses(ctx, an, fn) -> list:
    """(view, read, how) for each use as a number, in a caller in another file of the project, of
    what ``fn`` returns: ``r = fn(...)`` and then ``r`` used as a number in the same function with
    no other store of ``r`` in between (a caller in this file: ``origins`` follows the return)."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not isinstance(parent(fn), ast.Module):
        return []
    from ._common import project_callers  # lazy: reads the project's other files

    out = []
    for caller, call, node in project_callers(ctx, {fn.name}):
        if node is not fn:
            continue
        ps = parent(call)
        if not (isinstance(ps, ast.Assign) and len(ps.targets) == 1 and isinstance(ps.targets[0], ast.Name)):
            continue
        name = ps.targets[0].id
        cv = caller_view(an, caller)
        cfn = cv.sem.enclosing_function(call)
        for n, how in _module_int_uses(cv):
            if not (isinstance(n, ast.Name) and n.id == name) or cv.sem.enclosing_function(n) is not cfn \
                    or (n.lineno, n.col_offset) <= (call.lineno, call.col_offset):
                continue
            if any(isinstance(t, ast.Name) and t.id == name and s is not ps and call.lineno <= s.lineno <= n.lineno
                   for s in cv.sem.by_type.get(ast.Assign, ()) if cv.sem.enclosing_function(s) is cfn
                   for t in s.targets):
                continue  # rebound in between
            out.append((cv, n, how))
    return out


def _module_int_uses(cv) -> list:
    return int_uses(cv)


def _make_fix(ctx, read):
    st = parent(read)
    while st is not None and not isinstance(st, ast.stmt):
        st = parent(st)
    if isinstance(st, ast.Assign) and any(env_key(ctx, t) is not None for t in st.targets):
        return None  # the same value also goes into the environment, which needs the string
    if isinstance(read, ast.Call):
        if len(read.args) < 2:
            return None  # ``os.environ.get(K)`` may be None
        d = read.args[1]
        if isinstance(d, ast.Constant) and d.value is None:
            return None
    return ctx.fix(Applicability.UNSAFE, "Convert the environment's string with `int(...)`",
                   [ctx.replace(read, f"int({ctx.text(read)})")])
