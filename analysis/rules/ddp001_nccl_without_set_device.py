from __future__ import annotations

import ast
import re

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, has_kwarg, param_names, parent
from ._common import (D, DDP_CLASS, OBJECT_COLLECTIVES, OBJECT_COLLECTIVES_WITH_DEVICE,
                      init_backend_is_nccl)

_DEVICE_NAME = re.compile(r"(^|_)(local_?rank|device|dev|gpu|cuda)(_|$)|^(device_id|gpu_id|dev_id)$", re.I)
_PREFERRED_NAMES = ("local_rank", "device_id", "gpu_id", "gpu", "device", "local_device", "dev_id", "dev")


class NcclWithoutSetDevice(Rule):
    """
    ## What it does
    Checks for an NCCL process group in a file that never pins the rank's CUDA device
    (`torch.cuda.set_device(...)`, `with torch.cuda.device(...)`, or a per-rank
    `CUDA_VISIBLE_DEVICES`) while it makes calls that rely on the *current* CUDA device: the object
    collectives (`all_gather_object`, `gather_object`, `scatter_object_list`, and
    `broadcast_object_list` / `send_object_list` / `recv_object_list` without `device=`), and
    `barrier()` without `device_ids` when `init_process_group` got no `device_id`.

    An `init_process_group` behind `if not dist.is_initialized():` is a fallback (the group, and
    usually the device, are set up elsewhere), so it is not flagged; nor is a file that calls a
    helper named like a device setter (`utils.setup_device(args)`, `init_device_mesh(...)`), since
    what that helper pins is not visible here.

    ## Why is this bad?
    The object collectives pickle each object into a tensor on `torch.cuda.current_device()`.
    Without `set_device`, that is `cuda:0` on **every** rank, so all ranks of the node drive NCCL on
    the same GPU. Depending on the NCCL version the job hangs forever in `all_gather_object`, or dies
    with:

    ```
    RuntimeError: NCCL error ... invalid usage ... ncclInvalidUsage: This usually reflects invalid
    usage of NCCL library ... (Duplicate GPU detected : rank 1 and rank 0 both on CUDA device ...)
    ```

    `init_process_group(device_id=...)` alone does not help the object collectives: they still use
    `torch.cuda.current_device()`. `torch.cuda.synchronize()` does not help either.

    ## Example
    ```python
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    model = DDP(ToyModel().to(device_id), device_ids=[device_id])
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, {"rank": rank})  # hangs: every rank is on cuda:0
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    torch.cuda.set_device(device_id)
    model = DDP(ToyModel().to(device_id), device_ids=[device_id])
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, {"rank": rank})
    ```

    ## Fix safety
    When the script has its own per-rank device variable (passed to `device_ids=`, `.to(...)` or
    `.cuda(...)`, or named like `local_rank` / `device_id`), the fix inserts
    `torch.cuda.set_device(<that variable>)` right after it is assigned: this is **safe**, it only
    makes explicit the device the script already uses. Otherwise the fix inserts
    `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` after `init_process_group`, adding
    `import os` if needed: this is **unsafe**, since it assumes the script is launched by torchrun.
    """

    code = "DDP001"
    name = "nccl-without-set-device"
    severity = Severity.ERROR
    fix_availability = "always"
    requires_text = ("init_process_group",)
    requires_text_all = (("distributed",),)  # every qualified name it resolves is torch.distributed.*

    def finish(self, ctx) -> None:
        inits = ctx.dist_calls("init_process_group")
        # ``if not dist.is_initialized(): init_process_group(...)`` is a fallback: the group (and the
        # device) normally come from elsewhere, so this file cannot tell whether a device is pinned
        nccl_inits = [c for c in inits if init_backend_is_nccl(c, ctx) and not _fallback_init(c)]
        if not nccl_inits or _pins_device(ctx):
            return
        affected: list[tuple[ast.Call, str]] = []
        for c in ctx.dist_calls(*OBJECT_COLLECTIVES):
            affected.append((c, f"`{c.func.attr if isinstance(c.func, ast.Attribute) else _short(ctx, c)}` "
                                "pickles through the current CUDA device"))
        for c in ctx.dist_calls(*OBJECT_COLLECTIVES_WITH_DEVICE):
            if not has_kwarg(c, "device"):
                affected.append((c, f"`{_short(ctx, c)}` without `device=` uses the current CUDA device"))
        if not any(has_kwarg(i, "device_id") for i in nccl_inits):
            for c in ctx.dist_calls("barrier"):
                if not has_kwarg(c, "device_ids"):
                    affected.append((c, "`barrier()` without `device_ids` uses the current CUDA device"))
        if not affected:
            return
        affected.sort(key=lambda a: (a[0].lineno, a[0].col_offset))
        for init in nccl_inits:
            fix = _make_fix(ctx, init, [a[0] for a in affected])
            n = len(affected)
            ctx.report(
                init,
                f"NCCL process group but no `torch.cuda.set_device(...)`: {n} call{'s' if n > 1 else ''} "
                "then run on cuda:0 on every rank (hang or NCCL 'invalid usage')",
                related=[(c, msg) for c, msg in affected],
                fix=fix,
            )


def _fallback_init(call: ast.Call) -> bool:
    p = parent(call)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, ast.If) and "is_initialized" in ast.dump(p.test):
            return True
        p = parent(p)
    return False


def _short(ctx, call: ast.Call) -> str:
    qn = ctx.qn(call) or ""
    return qn[len(D):] if qn.startswith(D) else qn


def _pins_device(ctx) -> bool:
    sem = ctx.sem
    if sem.calls_to("torch.cuda.set_device"):
        return True
    for c in sem.calls_to("torch.cuda.device", "torch.cuda.device_of"):
        p = parent(c)
        if isinstance(p, ast.withitem):
            return True
    # a helper that pins the device for us (``utils.setup_device(args)``, ``init_device_mesh``):
    # what it does is not visible from this file, so do not guess
    for c in sem.calls:
        f = c.func
        n = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if n and _PIN_HELPER.search(n):
            return True
    text = ctx.src.text
    if "CUDA_VISIBLE_DEVICES" in text:
        for line in ctx.src.lines:
            if "CUDA_VISIBLE_DEVICES" in line and _SETS_CVD.search(line) and not line.lstrip().startswith("#"):
                return True
    return False


_PIN_HELPER = re.compile(r"(set|setup|init|select|pin|bind)_?(cuda_?|gpu_?)?device|init_device_mesh", re.I)

# os.environ["CUDA_VISIBLE_DEVICES"] = ..., os.putenv("CUDA_VISIBLE_DEVICES", ...),
# os.environ.update(CUDA_VISIBLE_DEVICES=...), os.environ.setdefault("CUDA_VISIBLE_DEVICES", ...)
_SETS_CVD = re.compile(
    r"""CUDA_VISIBLE_DEVICES['"]\s*\]\s*=(?!=)|putenv\(\s*['"]CUDA_VISIBLE_DEVICES|"""
    r"""update\(.*CUDA_VISIBLE_DEVICES|setdefault\(\s*['"]CUDA_VISIBLE_DEVICES"""
)


def _device_var(ctx, init: ast.Call, affected: list[ast.Call]) -> str | None:
    """The script's own per-rank device variable, visible in the init call's scope."""
    sem = ctx.sem
    scope = sem.scope_of(init)
    params = set(param_names(scope)) if isinstance(scope, FUNC_TYPES) else set()
    assigned = sem.assignments(scope)
    visible = lambda n: n in params or n in assigned  # noqa: E731
    cands: list[str] = []
    for c in sem.calls_to(DDP_CLASS):
        ids = get_arg(c, 1, "device_ids")
        if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1 and isinstance(ids.elts[0], ast.Name):
            cands.append(ids.elts[0].id)
    for c in sem.calls:
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr in ("to", "cuda") and c.args and isinstance(c.args[0], ast.Name):
            name = c.args[0].id
            if _DEVICE_NAME.search(name) or name == "rank":
                cands.append(name)
    for n in _PREFERRED_NAMES:
        if n in assigned or n in params:
            cands.append(n)
    for n in cands:
        if visible(n) and _is_device_like(ctx, n, scope):
            return n
    return None


def _is_device_like(ctx, name: str, scope) -> bool:
    """Reject names bound to things set_device cannot take (strings like "cuda" alone are fine:
    set_device("cuda") is a no-op, so require an index or a device)."""
    val = ctx.sem.single_value(name, scope)
    if val is None:
        return True
    if isinstance(val, ast.Constant) and isinstance(val.value, str):
        return ":" in val.value  # "cuda:1" pins; "cuda" does not
    return True


def _make_fix(ctx, init: ast.Call, affected: list[ast.Call]):
    sem = ctx.sem
    scope = sem.scope_of(init)
    init_stmt = sem.statement_of(init)
    set_device, imp = ctx.ref("torch.cuda.set_device")
    var = _device_var(ctx, init, affected)
    if var is not None:
        anchor = init_stmt
        assigns = [s for s in sem.assignments(scope).get(var, []) if isinstance(s, (ast.Assign, ast.AnnAssign))]
        if assigns:
            anchor = assigns[0]
            if anchor.lineno < init_stmt.lineno:
                anchor = init_stmt  # pin after init, once the index is known
        first_use = min((c.lineno for c in affected if sem.scope_of(c) is scope), default=None)
        if first_use is None or anchor.end_lineno < first_use:
            edit = ctx.insert_after(anchor, f"{set_device}({var})")
            if edit is not None:
                return ctx.fix(Applicability.SAFE, f"Insert `{set_device}({var})`", [edit, *imp])
    environ, imp2 = ctx.ref("os.environ")
    code = f'{set_device}(int({environ}["LOCAL_RANK"]))'
    edit = ctx.insert_after(init_stmt, code)
    if edit is None:
        return None
    edits = [edit, *imp]
    for e in imp2:
        if e not in edits:
            edits.append(e)
    return ctx.fix(Applicability.UNSAFE, f"Insert `{code}` (assumes torchrun's LOCAL_RANK)", _merge_inserts(edits))


def _merge_inserts(edits):
    """Two imports added at the same spot become one edit (fixes must not overlap themselves)."""
    out = []
    for e in edits:
        for i, o in enumerate(out):
            if o.range == e.range and o.range.start == o.range.end:
                out[i] = type(o)(o.range, o.content + e.content)
                break
        else:
            out.append(e)
    return out
