from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ..flow.assignments import name_binding_kind
from ..flow.rank_tests import global_rank_source, is_local_rank_expr
from ..flow.testing import is_test_file
from ._common import DDP_CLASS


class GlobalRankAsDevice(Rule):
    """
    ## What it does
    Checks for the *global* rank (`dist.get_rank()` or `os.environ["RANK"]`, directly or through a
    variable assigned once) used as a CUDA device index: `torch.cuda.set_device(rank)`,
    `torch.device("cuda", rank)`, `torch.device(f"cuda:{rank}")`, `.to(rank)`, `.cuda(rank)`,
    `with torch.cuda.device(rank)`, `DistributedDataParallel(..., device_ids=[rank])` /
    `output_device=rank`. The rank is also followed through the file's own helpers: a function
    that returns `int(os.environ["RANK"])`, a parameter that every call site fills with the global
    rank, and `self.rank` assigned once from it.

    `rank % torch.cuda.device_count()`, `LOCAL_RANK`, and the index parameter `mp.spawn` passes to
    its target are not flagged. Test files (`test_*.py`, `*_test.py`) are skipped: multi-process
    tests run on one node, where the global rank is the local rank.

    ## Why is this bad?
    The global rank counts processes across all nodes; a node only has `torch.cuda.device_count()`
    GPUs. The script works on one node and fails on the second one (rank 8 on an 8-GPU node):

    ```
    RuntimeError: CUDA error: invalid device ordinal
    ```

    ## Example
    ```python
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = DDP(model.to(rank), device_ids=[rank])
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    ```

    ## Fix safety
    The fix replaces the rank at the device use with the script's own `local_rank` variable when it
    has one (assigned from `LOCAL_RANK`, or a `local_rank` parameter), else with
    `int(os.environ["LOCAL_RANK"])`, adding `import os` if needed. It is **unsafe**: it assumes the
    script is launched by torchrun (or another launcher that sets `LOCAL_RANK`).
    """

    code = "DDP003"
    name = "global-rank-as-device"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = ("get_rank", "RANK", "SLURM_PROCID", "PMI_RANK")

    def finish(self, ctx) -> None:
        if is_test_file(ctx.filename):
            return  # multi-process tests run on one node: rank == local rank there
        sem = ctx.sem
        for call in sem.calls:
            f = call.func
            qn = ctx.qn(call)
            sites: list[ast.AST] = []
            if qn in ("torch.cuda.set_device", "torch.cuda.device"):
                a = get_arg(call, 0, "device")
                if a is not None:
                    sites.append(a)
            elif qn == "torch.device":
                if len(call.args) >= 2:
                    if _is_cuda_str(call.args[0]):
                        sites.append(call.args[1])
                elif call.args:
                    sites.extend(_device_string_sites(call.args[0]))
                    if not sites and not isinstance(call.args[0], (ast.Constant, ast.JoinedStr, ast.BinOp)):
                        sites.append(call.args[0])
                idx = get_arg(call, None, "index")
                if idx is not None:
                    sites.append(idx)
            elif qn == DDP_CLASS:
                ids = get_arg(call, 1, "device_ids")
                if isinstance(ids, (ast.List, ast.Tuple)):
                    sites.extend(ids.elts)
                od = get_arg(call, 2, "output_device")
                if od is not None:
                    sites.append(od)
            elif isinstance(f, ast.Attribute) and f.attr in ("to", "cuda") and qn is None:
                a = call.args[0] if call.args else get_arg(call, None, "device")
                if a is not None:
                    if isinstance(a, (ast.JoinedStr, ast.BinOp)):
                        sites.extend(_device_string_sites(a))
                    else:
                        sites.append(a)
            if not sites:
                continue
            scope = sem.scope_of(call)
            for site in sites:
                src = _global_rank(ctx, site, scope, 0)
                if src is None:
                    continue
                how = "`dist.get_rank()`" if isinstance(src, ast.Call) and not _is_env(ctx, src) else "`RANK`"
                ctx.report(
                    call,
                    f"the global rank ({how}) is used as a CUDA device index; it exceeds the GPU count "
                    "on every node but the first: `invalid device ordinal`. Use the local rank",
                    related=[(src, "the global rank comes from here")] if src is not site else [],
                    fix=_make_fix(ctx, site),
                )
                break


def _global_rank(ctx, site, scope, depth: int):
    """``global_rank_source``, also through the file's own helpers: a function whose every
    ``return`` is the global rank (``def get_rank(): return int(os.environ["RANK"])``), a name bound
    once to a call of one, a parameter that every call site in the file fills with the global rank,
    and ``self.<attr>`` assigned once in the class from the global rank."""
    src = global_rank_source(ctx, site, scope)
    if src is not None or depth > 3:
        return src
    sem = ctx.sem
    e = site
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "int" and len(e.args) == 1:
        e = e.args[0]
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and not e.args and not e.keywords:
        fns = sem.functions.get(e.func.id, [])
        if len(fns) == 1 and isinstance(parent(fns[0]), ast.Module):
            fn = fns[0]
            rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
            if rets and all(r.value is not None for r in rets) and \
                    not any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(fn)):
                srcs = [_global_rank(ctx, r.value, fn, depth + 1) for r in rets]
                if all(x is not None for x in srcs):
                    return srcs[0]
        return None
    if isinstance(e, ast.Name):
        kind, val = name_binding_kind(ctx, e.id, scope)
        if kind == "single" and isinstance(val, ast.Call):
            return _global_rank(ctx, val, sem.scope_of(val), depth + 1)
        if kind == "param" and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                isinstance(parent(scope), ast.Module):
            return _param_filled_with_rank(ctx, scope, e.id, depth)
        return None
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        cls = next((a for a in sem.ancestors(e) if isinstance(a, ast.ClassDef)), None)
        if cls is None:
            return None
        vals = ctx.memo(("ddp003.self_assigns", id(cls)), lambda: _self_assigns(cls)).get(e.attr, [])
        if len(vals) == 1 and isinstance(vals[0], ast.Assign) and len(vals[0].targets) == 1:
            return _global_rank(ctx, vals[0].value, sem.scope_of(vals[0]), depth + 1)
    return None


def _self_assigns(cls: ast.ClassDef) -> dict[str, list[ast.AST]]:
    """``self.<attr>`` -> the assignments to it anywhere in the class (one walk per class)."""
    out: dict[str, list[ast.AST]] = {}
    for n in ast.walk(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out.setdefault(t.attr, []).append(n)
    return out


def _calls_by_name(ctx) -> dict[str, list[ast.Call]]:
    out: dict[str, list[ast.Call]] = {}
    for c in ctx.sem.calls:
        if isinstance(c.func, ast.Name):
            out.setdefault(c.func.id, []).append(c)
    return out


def _param_filled_with_rank(ctx, fn, param: str, depth: int):
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if param not in names:
        return None
    pos = names.index(param)
    sites = ctx.memo("ddp003.calls_by_name", lambda: _calls_by_name(ctx)).get(fn.name, [])
    if not sites:
        return None
    first = None
    for c in sites:
        arg = get_arg(c, pos, param)
        if arg is None or any(isinstance(a, ast.Starred) for a in c.args) or any(k.arg is None for k in c.keywords):
            return None
        src = _global_rank(ctx, arg, ctx.sem.scope_of(c), depth + 1)
        if src is None:
            return None
        first = first or src
    return first


def _is_env(ctx, node) -> bool:
    return isinstance(node, ast.Call) and ctx.qn(node) in ("os.environ.get", "os.getenv")


def _is_cuda_str(node) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cuda"


def _device_string_sites(node) -> list[ast.AST]:
    """The index part of ``f"cuda:{r}"`` or ``"cuda:" + str(r)``."""
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        head, val = node.values
        if isinstance(head, ast.Constant) and head.value == "cuda:" and isinstance(val, ast.FormattedValue) \
                and val.format_spec is None and val.conversion == -1:
            return [val.value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.Constant) \
            and node.left.value == "cuda:":
        r = node.right
        if isinstance(r, ast.Call) and isinstance(r.func, ast.Name) and r.func.id == "str" and len(r.args) == 1:
            return [r.args[0]]
    return []


def _local_rank_name(ctx, site: ast.AST) -> str | None:
    """A ``local_rank`` variable the script already has (from ``LOCAL_RANK``), visible at ``site``."""
    sem = ctx.sem
    scope = sem.scope_of(site)
    for name in ("local_rank", "LOCAL_RANK", "local_gpu", "local_device_id"):
        kind, val = name_binding_kind(ctx, name, scope)
        if kind == "param" and name == "local_rank":
            return name
        if kind == "single" and val is not None and is_local_rank_expr(ctx, val, scope) \
                and (val.lineno, val.col_offset) < (site.lineno, site.col_offset):
            return name
    return None


def _make_fix(ctx, site: ast.AST):
    local = _local_rank_name(ctx, site)
    if local is not None:
        if ctx.text(site) == local:
            return None
        return ctx.fix(Applicability.UNSAFE, f"Use the local rank: `{local}`", [ctx.replace(site, local)])
    environ, imp = ctx.ref("os.environ")
    quote = '"'
    fs = parent(site)
    if isinstance(fs, ast.FormattedValue):
        js = parent(fs)
        text = ctx.text(js) if js is not None else ""
        body = text.lstrip("rRfFbB")
        if body.startswith(('"""', "'''")):
            return None
        quote = "'" if body.startswith('"') else '"'
    new = f"int({environ}[{quote}LOCAL_RANK{quote}])"
    if ctx.text(site) == new:
        return None
    return ctx.fix(Applicability.UNSAFE, f"Use the local rank: `{new}`", [ctx.replace(site, new), *imp])
