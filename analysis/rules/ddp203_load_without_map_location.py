from __future__ import annotations

import ast

from ..model import Applicability, Edit, Range, Severity
from ..registry import Rule
from ._model_flow import LAUNCH_TEXT, device_in_scope, is_distributed_script
from ._rank0 import rank0_guarded
from .ddp202_save_on_every_rank import rank_specific_path
from ._spawn import runs_in_ranks
from ..semantic import parent


class LoadWithoutMapLocation(Rule):
    """
    ## What it does
    Checks for `torch.load(...)` without `map_location` in a distributed script (one that calls
    `init_process_group`, wraps in DDP/FSDP or spawns its ranks). Loads that only the main rank
    runs, loads in the launching process of an `mp.spawn` script, loads of a rank-specific file
    (written by the same rank, so already on its device), and loads whose `if` has a
    `map_location` load in its other branch (a deliberate choice) are not flagged. To stay
    precise, only checkpoint loads are considered: the result goes to `load_state_dict(...)`, or
    the path names a checkpoint (`ckpt`, `checkpoint`, `resume`, `weights`, `model`, `pretrained`,
    `snapshot`, `state`...). A data file (`torch.load("data/train.pt")`) saved from CPU tensors
    comes back on the CPU and is left alone.

    ## Why is this bad?
    `torch.load` puts every tensor back on the device it was saved from. A checkpoint written by
    rank 0 names `cuda:0`, so *every* rank materialises the whole checkpoint on GPU 0: N copies on
    one GPU, which runs out of memory

    ```
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ... (GPU 0; ... total capacity)
    ```

    or, short of that, leaves each rank holding memory on a GPU that is not its own and slows
    rank 0 down for the whole run.

    ## Example
    ```python
    checkpoint = torch.load(args.resume)
    model.load_state_dict(checkpoint["model"])
    ```

    ## Use instead
    ```python
    checkpoint = torch.load(args.resume, map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    ```

    ## Fix safety
    The fix adds `map_location=<device>` with the `torch.device` (or device string) variable in
    scope, else `map_location="cpu"`. It is **unsafe**: code that relied on the loaded tensors
    being on a GPU (rather than copying them into a module) now gets them on the given device.
    """

    code = "DDP203"
    name = "load-without-map-location"
    severity = Severity.WARNING
    fix_availability = "always"
    requires_text = ("load",)
    requires_text_all = (LAUNCH_TEXT,)  # is_distributed_script: a launch call is spelled in the file

    def finish(self, ctx) -> None:
        loads = ctx.calls_to("torch.load")
        if not loads or not is_distributed_script(ctx):
            return
        for call in loads:
            if len(call.args) >= 2 or any(k.arg in ("map_location", None) for k in call.keywords):
                continue
            if not call.args and not any(k.arg == "f" for k in call.keywords):
                continue
            if any(isinstance(a, ast.Starred) for a in call.args):
                continue
            if runs_in_ranks(ctx, call) is False:
                continue
            path = call.args[0] if call.args else next(k.value for k in call.keywords if k.arg == "f")
            if rank_specific_path(ctx, path, call) or _other_branch_maps(ctx, call, loads):
                continue
            if not _checkpoint_like(ctx, call, path):
                continue
            if rank0_guarded(ctx, call) is not False:
                continue
            dev = device_in_scope(ctx, call)
            value = dev if dev is not None else '"cpu"'
            last = max([*call.args, *(k for k in call.keywords)], key=lambda n: (n.end_lineno, n.end_col_offset))
            pos = ctx.src.node_end(last)
            fix = ctx.fix(Applicability.UNSAFE, f"Add `map_location={value}`",
                          [Edit(Range(pos, pos), f", map_location={value}")])
            ctx.report(
                call,
                "`torch.load` without `map_location` restores tensors to the device they were saved "
                "from (usually cuda:0) on every rank; pass `map_location`",
                fix=fix,
            )


def _other_branch_maps(ctx, call: ast.Call, loads) -> bool:
    """``if gpu is None: torch.load(p) else: torch.load(p, map_location=loc)``: the author chose."""
    for other in loads:
        if other is call or not any(k.arg == "map_location" for k in other.keywords) and len(other.args) < 2:
            continue
        mine = {id(a): a for a in ctx.sem.ancestors(call)}
        child = other
        for a in ctx.sem.ancestors(other):
            if id(a) in mine and isinstance(a, ast.If):
                in_body_other = child in a.body
                c2 = call
                for b in ctx.sem.ancestors(call):
                    if b is a:
                        break
                    c2 = b
                if in_body_other != (c2 in a.body):
                    return True
                break
            child = a
    return False


_CKPT_WORDS = ("ckpt", "checkpoint", "resume", "weight", "model", "pretrain", "snapshot", "state", "finetune",
               "teacher", "best", "last", "latest", "epoch", "optim")


def _checkpoint_like(ctx, call: ast.Call, path: ast.AST) -> bool:
    text = ctx.text(path).lower()
    if isinstance(path, ast.Name):
        from ._model_flow import reaching_assignment

        st = reaching_assignment(ctx, path.id, call)
        if st is not None:
            text += " " + ctx.text(st.value).lower()
    if any(w in text for w in _CKPT_WORDS):
        return True
    # the result is loaded into a module or an optimizer
    p = parent(call)
    while isinstance(p, (ast.Subscript, ast.Attribute, ast.Call)) and not (
            isinstance(p, ast.Call) and _is_load_state_dict(p)):
        p = parent(p)
    if isinstance(p, ast.Call) and _is_load_state_dict(p):
        return True
    st = parent(call)
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
        name = st.targets[0].id
        scope = ctx.sem.scope_of(call)
        lsd = ctx.memo("ddp203.load_state_dict_calls", lambda: [c for c in ctx.sem.calls if _is_load_state_dict(c)])
        for c in lsd:
            if c.args and ctx.sem.scope_of(c) is scope and c.lineno >= call.lineno:
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(c.args[0])):
                    return True
    return False


def _is_load_state_dict(c: ast.Call) -> bool:
    return isinstance(c.func, ast.Attribute) and c.func.attr == "load_state_dict"
