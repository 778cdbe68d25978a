from __future__ import annotations

import ast
import re

from ..model import Applicability, Severity
from ..flow.mentions import code_strings, code_words, mentions
from ..registry import Rule
from ..torch_api import argparse_default, attribute_store_value, dict_item_value
from ..semantic import FUNC_TYPES, get_arg, has_kwarg, param_names, parent
from ._per_rank_device import (_child_toward, _const_cuda, _device_position, _exclusive_branches,
                               _label, _per_rank_placements, _report_per_rank_device)
from ._common import (D, DDP_CLASS, OBJECT_COLLECTIVES, OBJECT_COLLECTIVES_WITH_DEVICE,
                      TENSOR_COLLECTIVES, device_call_index, init_backend_is_nccl, is_simple_ref,
                      single_process_init)

_DEVICE_NAME = re.compile(r"(^|_)(local_?rank|device|dev|gpu|cuda)(_|$)|^(device_id|gpu_id|dev_id)$", re.I)
_PREFERRED_NAMES = ("local_rank", "device_id", "gpu_id", "gpu", "device", "local_device", "dev_id", "dev")


class NcclWithoutSetDevice(Rule):
    """
    ## What it does
    Checks for an NCCL process group in a file that never pins the rank's CUDA device
    (`torch.cuda.set_device(...)`, `with torch.cuda.device(...)`, or a per-rank
    `CUDA_VISIBLE_DEVICES`) while it relies on the *current* CUDA device:

    - the object collectives (`all_gather_object`, `gather_object`, `scatter_object_list`, and
      `broadcast_object_list` / `send_object_list` / `recv_object_list` without `device=`);
    - `.cuda()` without an index, `.to("cuda")`, `device="cuda"`, `torch.device("cuda")`,
      `torch.cuda.current_device()` used as a value;
    - tensor collectives on such tensors, and `DistributedDataParallel(model)` on such a module,
      whatever its `device_ids` says.

    It also checks the order when the file does pin the device: a call of the kinds above that runs
    after the NCCL `init_process_group` and before `torch.cuda.set_device(...)` in the same function
    (the dataset-download `all_gather_object` placed above the pin) is reported at that call.
    The pin may be made by a helper: a function of another project module that calls
    `torch.cuda.set_device` (two calls down), or a library function named like a device setter
    (`set_cuda_device_index(self.local_rank)`) whose one argument is a rank (the name only
    follows that answer). An init whose backend comes from the config (`backend=cfg.backend`)
    counts for a call that runs only where `cfg.backend == "nccl"` holds, and a fallback init
    (`if not dist.is_initialized():`) counts for the calls placed right after it.
    A use of the current device that allocates (`torch.empty(1, device="cuda")`, `.cuda()`) on
    the straight-line path before both the NCCL init and `torch.cuda.set_device(...)` (the warm-up
    at the top of a script) is reported too: it runs on cuda:0 on every rank.
    `device=args.device` counts as `"cuda"` when the argparse default of `--device` is `"cuda"`
    and the module never stores `args.device` itself (else the one store decides), and likewise
    `cfg["device"]` of a config dict literal.

    A function started by `mp.spawn` (a fresh process, nothing pinned yet) that joins an NCCL
    group through a helper of the file (`dist_init(rank, world)` whose `init_process_group` uses a
    literal NCCL backend, or a backend parameter left at an NCCL default such as
    `BACKEND = NCCL if torch.cuda.is_available() else GLOO`), never pins, and then uses the
    current device (an object collective without `device=`, also inside a helper of the file it
    calls; `.cuda()`; `device="cuda"`) is reported at its helper call, even when other workers
    of the file pin theirs.

    A `barrier()` is not one of these calls. In torch 2.13, ProcessGroupNCCL runs it on
    `device_ids[0]` if given, else on the `device_id` bound by `init_process_group`, else on the
    first device the group's earlier collectives used, else on GPU `global rank % device count`
    (one GPU per rank of a node). It lands on cuda:0 on every rank only after collectives that
    already ran there, and those collectives are reported.

    The backend is NCCL when it is spelled `"nccl"` (also in a `"cpu:gloo,cuda:nccl"` string or an
    if-expression), `dist.Backend.NCCL`, a name bound to one, or an argparse option of the file
    whose default is `"nccl"` (`backend=args.dist_backend` with
    `parser.add_argument("--dist-backend", default="nccl")`).

    The NCCL group may also come from a setup helper in another file of the project
    (`rank, world = init_distributed()` from `utils/dist.py`): when that helper (or one it calls)
    runs `init_process_group` with an NCCL backend and its module never mentions pinning a device
    (`set_device`, `CUDA_VISIBLE_DEVICES`, `device_id`, a device mesh), the finding is reported at
    the helper call, with the helper's `init_process_group` as a related location; when the
    function that calls the helper then binds this rank's own device (per rank by value flow:
    `self.local_device = torch.device("cuda:{}".format(os.environ["LOCAL_RANK"]))`), it is
    reported at that binding instead, where the pin belongs (the fix inserts it there: safe).

    A per-rank device alone is also reported, under precise conditions: an NCCL group made in the
    file, no pin anywhere in the file (nor a call of a setup helper that may pin), and a per-rank
    CUDA device (`f"cuda:{local_rank}"`, `"cuda:%d" % rank`, `torch.device("cuda", local_rank)`,
    `.cuda(local_rank)`, `.to(rank)`, `device_ids=[local_rank]`; per rank by value flow, not by
    name) that places tensors or the model, when the file also uses the *current* device without
    naming one (`x.pin_memory()`, a `DataLoader(..., pin_memory=True)`, `torch.cuda.synchronize()`,
    `torch.cuda.empty_cache()`, streams, memory statistics, `torch.cuda.manual_seed(...)`), or
    stores the device as an object's own (`self.device = torch.device("cuda", local_rank)`: library
    state that hands the device out). Test files (`test_*.py`) are not judged on this alone. Here an
    `init_process_group` behind `if not dist.is_initialized():` counts: when it runs, nobody made
    the group, nor pinned the device. `init_device_mesh("cuda", ...)` counts as a pin: in torch
    2.13 it makes `LOCAL_RANK` (else `rank % device_count`) the current device when CUDA is not
    initialized yet.

    A group of one process (`init_process_group(..., world_size=1)`, a literal or a name bound
    once to one) is not flagged: its only rank has cuda:0 to itself.

    An `init_process_group` behind `if not dist.is_initialized():` is a fallback (the group, and
    usually the device, are set up elsewhere), so it is not flagged; nor is a file that calls a
    helper named like a device setter (`utils.setup_device(args)`, `init_device_mesh(...)`) or a
    distributed-setup helper from another module (`init_distributed_mode(args)`, `setup_ddp(rank)`)
    whose source is not part of the project, since what that helper pins is not visible here.

    ## Why is this bad?
    Without `set_device`, the current CUDA device is `cuda:0` on **every** rank. `.cuda()` and
    `device="cuda"` put every rank's tensors there, and the object collectives pickle each object
    into a tensor there. `DistributedDataParallel.__init__` then verifies and broadcasts the
    parameters over NCCL from the device they are on (`_verify_param_shape_across_processes`,
    `_sync_module_states`): `device_ids=[local_rank]` does not move the module. All ranks of the
    node drive NCCL on the same GPU. Depending on the NCCL version the job hangs forever, or dies
    with:

    ```
    RuntimeError: NCCL error ... invalid usage ... ncclInvalidUsage: This usually reflects invalid
    usage of NCCL library ... (Duplicate GPU detected : rank 1 and rank 0 both on CUDA device ...)
    ```

    With every tensor placed on `cuda:{local_rank}` explicitly, the current device is still cuda:0:
    pinned memory, synchronisation, streams, memory statistics, `torch.cuda.manual_seed` (it seeds
    cuda:0 only) and compiled or third-party kernels use it, so every process creates a CUDA
    context (hundreds of MiB) and allocates on GPU 0, which runs out of memory first.

    `init_process_group(device_id=...)` alone does not help the object collectives or `.cuda()`:
    they still use `torch.cuda.current_device()`. `torch.cuda.synchronize()` does not help either.

    ## Example
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    model = DDP(ToyModel().cuda(), device_ids=[local_rank])  # every rank on cuda:0
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, {"rank": dist.get_rank()})  # hangs
    ```

    ## Use instead
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    model = DDP(ToyModel().cuda(), device_ids=[local_rank])
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, {"rank": dist.get_rank()})
    ```

    ## Fix safety
    When the script has its own per-rank device variable (passed to `device_ids=`, `.to(...)` or
    `.cuda(...)`, or named like `local_rank` / `device_id`), the fix inserts
    `torch.cuda.set_device(<that variable>)` right after it is assigned: this is **safe**, it only
    makes explicit the device the script already uses. Otherwise the fix inserts
    `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` after `init_process_group`, adding
    `import os` if needed: this is **unsafe**, since it assumes the script is launched by torchrun.

    For a per-rank device alone, the fix inserts `torch.cuda.set_device(<the device>)` right after
    the device is bound (`device = f"cuda:{local_rank}"`, `self.device = ...`): **safe**, it makes
    current the device the code already uses.

    For a call before the pin, the fix repeats the script's own `torch.cuda.set_device(<name>)`
    right after `init_process_group` when `<name>` is already bound there, or right after
    `<name> = ...` when that assignment sits between the init and the call (**safe**: the device is
    the one the script pins anyway, only earlier); otherwise there is no fix.
    """

    code = "DDP001"
    name = "nccl-without-set-device"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # its own init, or (a group made by a helper of the project) a use of the current device
    requires_text = ("init_process_group", "_object", "cuda")
    requires_text_all = (("distributed",),)  # every qualified name it resolves is torch.distributed.*

    def finish(self, ctx) -> None:
        inits = ctx.dist_calls("init_process_group")
        # ``if not dist.is_initialized(): init_process_group(...)`` is a fallback: the group (and the
        # device) normally come from elsewhere, so this file cannot tell whether a device is pinned
        # ``init_process_group(..., world_size=1)``: one process, no second rank to share cuda:0
        nccl_inits = [c for c in inits if init_backend_is_nccl(c, ctx) and not _fallback_init(c)
                      and not single_process_init(ctx, c)]
        # spawned workers that join an NCCL group through a helper of this file and never pin:
        # reported at the worker's helper call (the pin belongs right after it)
        by_worker = _report_unpinned_workers(ctx, inits)
        if by_worker:
            nccl_inits = [c for c in nccl_inits if id(c) not in by_worker]
            inits = [c for c in inits if id(c) not in by_worker]
        made_by: dict[int, tuple] = {}  # a helper call of this file -> (path, init line) in its module
        if not nccl_inits and not inits:
            made_by = _helper_inits(ctx)
            nccl_inits = [c for c in ctx.sem.calls if id(c) in made_by]
        # inits whose group is NCCL only on some paths: a fallback (``if not is_initialized():``)
        # or a backend from the config, NCCL where a test says so (``if cfg.backend == "nccl":``)
        nccl_ids = {id(c) for c in nccl_inits}
        guarded = [c for c in inits if id(c) not in nccl_ids and not single_process_init(ctx, c)]
        if not nccl_inits:
            # ``if not dist.is_initialized(): init_process_group("nccl")`` followed by a per-rank
            # device: when the fallback runs, nobody set the group up, nor pinned the device
            fallbacks = [c for c in inits if _fallback_init(c) and init_backend_is_nccl(c, ctx)
                         and not single_process_init(ctx, c)]
            if fallbacks and not _pins_device(ctx):
                _report_per_rank_device(ctx, fallbacks)
            elif guarded and _pins_device(ctx):
                _report_before_pin(ctx, [], guarded)
            return
        if _pins_device(ctx, skip={i for i in made_by}):
            _report_before_pin(ctx, nccl_inits, guarded)
            return
        affected: list[tuple[ast.AST, str]] = []
        for c in ctx.dist_calls(*OBJECT_COLLECTIVES):
            affected.append((c, f"`{_short(ctx, c)}` pickles through the current CUDA device"))
        for c in ctx.dist_calls(*OBJECT_COLLECTIVES_WITH_DEVICE):
            if not has_kwarg(c, "device"):
                affected.append((c, f"`{_short(ctx, c)}` without `device=` uses the current CUDA device"))
        # no `barrier()`: torch 2.13's ProcessGroupNCCL runs it on device_ids[0], else the bound
        # device_id, else the first device this group's collectives used, else global rank %
        # device count (a GPU of its own per rank of a node); on cuda:0 only after collectives
        # that used cuda:0, and those are reported themselves (docs/emulation.md, same order)
        uses = current_device_uses(ctx, eager_only=False)
        # a collective or DDP(...) fed by a device use comes after that use in the message
        derived = {id(n) for n, _ in uses if isinstance(n, ast.Call) and (ctx.qn(n) or "").startswith(
            (D, DDP_CLASS))}
        affected.extend(uses)
        if not affected:
            if not made_by:
                _report_per_rank_device(ctx, nccl_inits)
            return
        seen: set[tuple[int, int]] = set()
        uniq = []
        for node, msg in sorted(affected, key=lambda a: (a[0].lineno, id(a[0]) in derived, a[0].col_offset)):
            key = (node.lineno, node.col_offset)
            if key not in seen:
                seen.add(key)
                uniq.append((node, msg))
        sem = ctx.sem
        init_scopes = {id(sem.scope_of(i)) for i in nccl_inits}
        for init in nccl_inits:
            # several inits (one per entry point): each owns the calls of its own function, and
            # all share the calls made in functions without an init of their own
            scope = sem.scope_of(init)
            mine = uniq if len(nccl_inits) == 1 else [
                a for a in uniq if sem.scope_of(a[0]) is scope or id(sem.scope_of(a[0])) not in init_scopes]
            # `if args.distributed: init(...) else: model.cuda()`: the single-process branch never
            # has the group
            path = _child_toward(init)
            mine = [a for a in mine if not _exclusive_branches(init, a[0], path)]
            if not mine:
                continue
            # name a call of the init's own function first (the one the reader is looking at)
            first = next((a[0] for a in mine if sem.scope_of(a[0]) is scope), mine[0][0])
            n = len(mine)
            more = f" and {n - 1} more call{'s' if n > 2 else ''}" if n > 1 else ""
            fix = _make_fix(ctx, init, [a[0] for a in mine])
            related = list(mine[:20])
            group = "NCCL process group"
            if id(init) in made_by:
                path, rng, line = made_by[id(init)]
                group = (f"NCCL process group (made by `{_label(ctx, init)}`: `init_process_group` in "
                         f"{_short_path(path)} line {line})")
                related.insert(0, ("file", path, rng, "the NCCL init_process_group, with no set_device"))
            at, where = init, ""
            if id(init) in made_by:
                # the helper's group, then this rank's own device bound in the same function
                # (``self.local_device = torch.device(f"cuda:{LOCAL_RANK}")``): the pin belongs
                # right after that binding, so the finding is reported there
                binding = _per_rank_binding_after(ctx, init)
                if binding is not None:
                    at = binding
                    target = ctx.text(binding.targets[0])
                    where = f"; `{target}` (this rank's device) is never made current"
                    related.insert(0, (init, "the NCCL group is made here"))
                    set_device, imp = ctx.ref("torch.cuda.set_device")
                    edit = ctx.insert_after(binding, f"{set_device}({target})")
                    fix = None if edit is None else ctx.fix(
                        Applicability.SAFE, f"Insert `{set_device}({target})`", [edit, *imp])
            ctx.report(
                at,
                f"{group} but no `torch.cuda.set_device(...)`{where}: `{_label(ctx, first)}` on line "
                f"{first.lineno}{more} {'run' if n > 1 else 'runs'} on cuda:0 on every rank (hang or NCCL 'invalid usage')",
                related=related,
                fix=fix,
            )


def _per_rank_binding_after(ctx, call: ast.AST):
    """The first ``name = <per-rank CUDA device>`` / ``self.x = ...`` statement of ``call``'s own
    function after it (``_per_rank_placements``: per rank by value flow)."""
    sem = ctx.sem
    scope = sem.scope_of(call)
    found = [b for _n, b in _per_rank_placements(ctx) if b is not None and sem.scope_of(b) is scope
             and b.lineno > call.lineno and len(b.targets) == 1]
    return min(found, key=lambda b: b.lineno) if found else None


def current_device_uses(ctx, eager_only: bool) -> list[tuple[ast.AST, str]]:
    """Expressions that put tensors (or a communicator) on the *current* CUDA device: ``x.cuda()``
    without an index, ``.to("cuda")``, ``device="cuda"``, ``torch.device("cuda")`` (unless
    ``eager_only``: that object only picks its device when a tensor is made on it),
    ``torch.cuda.current_device()`` used as a value, and tensor collectives / DDP constructors fed
    with such tensors or modules."""
    return ctx.memo(("ddp001.current_device_uses", eager_only), lambda: _current_device_uses(ctx, eager_only))


def _current_device_uses(ctx, eager_only: bool) -> list[tuple[ast.AST, str]]:
    sem = ctx.sem
    nodes: set[int] = set()  # ids of the affected expressions
    # the moves (``.cuda()``, ``.to("cuda")``) first in the list, then the allocations
    # (``device="cuda"``) of the other calls
    idx = device_call_index(ctx)
    out: list[tuple[ast.AST, str]] = []
    # a name (``.to(device)``, ``device=device``) is judged once per scope: look the answer up
    # here before calling ``_is_cuda_literal`` (which fills the same memo)
    names = ctx.memo("ddp001.cuda_names", dict)
    scope_of = sem.scope_of
    Name = ast.Name
    for c in idx.moves:
        f = c.func
        if f.attr == "cuda":
            if not c.args and all(k.arg == "non_blocking" for k in c.keywords) \
                    and ctx.qn(f.value) not in ("torch", "torch.cuda"):
                out.append((c, f"`{_label(ctx, c)}` moves to the current CUDA device"))
                nodes.add(id(c))
        elif c.args:
            a = c.args[0]
            got = sc = None
            if a.__class__ is Name:
                sc = scope_of(c)
                got = names.get((a.id, id(sc), True, 0))
            if got is None:
                got = _is_cuda_literal(ctx, a, c, scope=sc)
            if got:
                out.append((c, f"`{_label(ctx, c)}` moves to the current CUDA device"))
                nodes.add(id(c))
    allow = not eager_only
    for c, value in idx.device_kw:
        if id(c) in nodes:
            continue
        got = sc = None
        if value.__class__ is Name:
            sc = scope_of(c)
            got = names.get((value.id, id(sc), allow, 0))
        if got is None:
            got = _is_cuda_literal(ctx, value, c, allow_device_obj=allow, scope=sc)
        if got:
            out.append((c, f"`{_label(ctx, c)}` allocates on the current CUDA device"))
            nodes.add(id(c))
    if not eager_only:
        for c in sem.calls_to("torch.device"):
            if len(c.args) == 1 and not c.keywords and _const_cuda(c.args[0]) and _used_as_device(ctx, c):
                out.append((c, '`torch.device("cuda")` is the current CUDA device'))
                nodes.add(id(c))
    for c in sem.calls_to("torch.cuda.current_device"):
        if _only_printed(c) or not _used_as_device(ctx, c):
            continue
        out.append((c, "`torch.cuda.current_device()` is 0 on every rank"))
        nodes.add(id(c))
    if not nodes:
        return out
    # a collective or DDP(...) fed with one of them (directly or through a name bound once)
    def fed(arg: ast.AST | None, scope) -> bool:
        if arg is None:
            return False
        if id(arg) in nodes:
            return True
        if isinstance(arg, ast.Name):
            val = sem.single_value(arg.id, scope)
            return val is not None and any(id(n) in nodes for n in ast.walk(val))
        return False
    for c in ctx.dist_calls(*TENSOR_COLLECTIVES):
        if fed(get_arg(c, 0, "tensor"), sem.scope_of(c)):
            out.append((c, f"`{_short(ctx, c)}` on a tensor on the current CUDA device"))
    for c in sem.calls_to(DDP_CLASS):
        if fed(get_arg(c, 0, "module"), sem.scope_of(c)):
            out.append((c, "`DistributedDataParallel(...)` broadcasts the parameters from their device, "
                           "cuda:0 on every rank, whatever `device_ids` says"))
    return out


def _used_as_device(ctx, call: ast.Call) -> bool:
    """``torch.cuda.current_device()`` placing something (directly, or through a name bound to it
    once); reading it in a test or a log line is not a use."""
    if _device_position(ctx, call):
        return True
    st = parent(call)
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
        name = st.targets[0].id
        scope = ctx.sem.scope_of(call)
        for n in ast.walk(scope):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) \
                    and ctx.sem.scope_of(n) is scope and _device_position(ctx, n):
                return True
    return False


def _is_cuda_literal(ctx, node, at, allow_device_obj: bool = True, depth: int = 0, scope=None) -> bool:
    """``"cuda"``, ``torch.device("cuda")`` or a name bound once to one of them (an if-expression
    ``"cuda" if torch.cuda.is_available() else "cpu"`` counts: on a GPU node it is "cuda").
    ``scope``: ``scope_of(at)`` when the caller has it already."""
    if depth > 3 or node is None:
        return False
    if _const_cuda(node):
        return True
    if isinstance(node, ast.IfExp):
        return _const_cuda(node.body) or _const_cuda(node.orelse)
    if allow_device_obj and isinstance(node, ast.Call) and ctx.qn(node) == "torch.device":
        return len(node.args) == 1 and not node.keywords and _const_cuda(node.args[0])
    if isinstance(node, ast.Name):
        # the answer for a name depends on its scope only (``device`` in ``x.to(device)``,
        # ``torch.zeros(1, device=device)``... of one function): once per check
        if scope is None:
            scope = ctx.sem.scope_of(at)
        memo = ctx.memo("ddp001.cuda_names", dict)
        key = (node.id, id(scope), allow_device_obj, depth)
        got = memo.get(key)
        if got is None:
            val = ctx.sem.single_value(node.id, scope)
            got = memo[key] = _is_cuda_literal(ctx, val, at, allow_device_obj, depth + 1, scope)
        return got
    if node.__class__ is ast.Attribute and node.value.__class__ is ast.Name and ctx.qn(node) is None:
        # ``args.device`` with ``add_argument("--device", default="cuda")`` and no store of its
        # own in the module, or the one store ``args.device = "cuda"``
        if _attr_stored(ctx.sem, node.value.id, node.attr):
            val = attribute_store_value(ctx.sem, node.value.id, node.attr)
        else:
            val = argparse_default(ctx.sem, node.attr)
        return val is not None and _is_cuda_literal(ctx, val, at, allow_device_obj, depth + 1, scope)
    if node.__class__ is ast.Subscript:  # ``cfg["device"]`` of a config dict literal
        val = dict_item_value(ctx.sem, node, scope if scope is not None else ctx.sem.scope_of(at))
        return val is not None and _is_cuda_literal(ctx, val, at, allow_device_obj, depth + 1, scope)
    return False


def _attr_stored(sem, base: str, attr: str) -> bool:
    """Some statement of the module stores ``base.attr`` (an assignment, augmented or annotated)."""
    for t in (ast.Assign, ast.AugAssign, ast.AnnAssign):
        for st in sem.by_type.get(t, ()):
            for tg in (st.targets if t is ast.Assign else [st.target]):
                if tg.__class__ is ast.Attribute and tg.attr == attr and tg.value.__class__ is ast.Name \
                        and tg.value.id == base:
                    return True
    return False


def _only_printed(node: ast.AST) -> bool:
    p = parent(node)
    while p is not None and not isinstance(p, ast.stmt):
        if isinstance(p, ast.JoinedStr):
            return True
        if isinstance(p, ast.Call):
            f = p.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("print", "info", "debug", "warning", "log", "format"):
                return True
        p = parent(p)
    return False


_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def _report_before_pin(ctx, nccl_inits, guarded=()) -> None:
    """The file pins the device, but a call that uses the current device runs after the NCCL init
    and before the pin, in the same function (the ``all_gather_object`` placed above
    ``torch.cuda.set_device(local_rank)``). The pin may be made by a helper (``_helper_pins``).
    ``guarded``: inits whose group is NCCL only where the call's own test says so
    (``if cfg.backend == "nccl":`` around the call, with ``backend=cfg.backend`` at the init), or
    that run only when no group exists yet (``if not is_initialized():``)."""
    sem = ctx.sem
    pins = [c for c in sem.calls_to("torch.cuda.set_device")]
    direct = {id(c) for c in pins}
    pins += _helper_pins(ctx)
    if not pins:
        return
    _report_before_init_and_pin(ctx, nccl_inits, [p for p in pins if id(p) in direct])
    guarded_ids = {id(c) for c in guarded}
    for init in [*nccl_inits, *guarded]:
        scope = sem.scope_of(init)
        pin_lines = [c.lineno for c in _pin_like_calls(ctx) if sem.scope_of(c) is scope]
        later = [p for p in pins if sem.scope_of(p) is scope and p.lineno > init.lineno]
        if not later:
            continue
        pin = min(later, key=lambda p: p.lineno)
        cands: list[tuple[ast.AST, str]] = []
        for c in ctx.dist_calls(*OBJECT_COLLECTIVES):
            cands.append((c, "pickles through the current CUDA device"))
        for c in ctx.dist_calls(*OBJECT_COLLECTIVES_WITH_DEVICE):
            if not has_kwarg(c, "device"):
                cands.append((c, "uses the current CUDA device"))
        # (a `barrier()` before the pin is not one: it picks its GPU as in `finish`)
        for node, _ in current_device_uses(ctx, eager_only=True):
            if isinstance(node, ast.Call) and ctx.qn(node) in (DDP_CLASS,) or \
                    isinstance(node, ast.Call) and (ctx.qn(node) or "").startswith(D):
                continue  # the collectives themselves are judged above
            cands.append((node, "uses the current CUDA device, still cuda:0 on every rank"))
        fix = None
        for node, why in sorted(cands, key=lambda a: (a[0].lineno, a[0].col_offset)):
            if sem.scope_of(node) is not scope or not (init.lineno < node.lineno < pin.lineno):
                continue
            if id(init) in guarded_ids and not (
                    (_fallback_init(init) and init_backend_is_nccl(init, ctx)) or _nccl_by_test(ctx, init, node)):
                continue
            if any(ln <= node.lineno for ln in pin_lines if ln != pin.lineno) or _pinned_before(pin_lines, node, pin):
                continue
            if not _runs_after(sem, init, node) or _shares_loop(sem, node, pin):
                continue
            if any(sem.scope_of(c) is scope and init.lineno < c.lineno < node.lineno
                   for c in _calls_to_pinning_functions(ctx)):
                continue  # ``setup(args)`` of this file pins before the call
            if fix is None:
                fix = _early_pin_fix(ctx, init, pin, node)
            ctx.report(
                node,
                f"`{_label(ctx, node)}` runs after the NCCL `init_process_group` (line {init.lineno}) but before "
                f"`{_label(ctx, pin)}` (line {pin.lineno}): it {why}",
                related=[(init, "NCCL process group created here"), (pin, "the device is pinned only here")],
                fix=fix or None,
            )


def _report_before_init_and_pin(ctx, nccl_inits, pins) -> None:
    """``torch.empty(1, device="cuda")`` at the top of the script, before both the NCCL init and
    ``torch.cuda.set_device(...)``: every rank allocates on (and makes a CUDA context on) cuda:0."""
    sem = ctx.sem
    seen: set[int] = set()
    uses = None
    for init in nccl_inits:
        scope = sem.scope_of(init)
        mine = [p for p in pins if sem.scope_of(p) is scope]
        if not mine:
            continue
        pin_lines = [c.lineno for c in _pin_like_calls(ctx) if sem.scope_of(c) is scope]
        if uses is None:
            uses = [(n, why) for n, why in current_device_uses(ctx, eager_only=True)
                    if not (isinstance(n, ast.Call) and ((ctx.qn(n) or "").startswith(D) or ctx.qn(n) == DDP_CLASS))]
        for node, why in uses:
            if id(node) in seen:
                continue
            pin = min((p for p in mine if p.lineno > node.lineno), key=lambda p: p.lineno, default=None)
            if pin is None or not _runs_before_init_and_pin(ctx, node, init, pin, scope, pin_lines):
                continue
            seen.add(id(node))
            ctx.report(
                node,
                f"{why}, cuda:0 on every rank: it runs before `{_label(ctx, pin)}` (line {pin.lineno}), so "
                f"each process makes a CUDA context and allocates on GPU 0; name the rank's device or move "
                f"it after the pin",
                related=[(pin, "the device is pinned only here"), (init, "NCCL process group created here")],
            )


def _runs_before_init_and_pin(ctx, node, init, pin, scope, pin_lines) -> bool:
    """``node`` (a use of the current device) runs in the init's own function before both the NCCL
    init and the pin, on the straight-line path to them: no pin-like call before it, no branch
    or loop of its own between."""
    sem = ctx.sem
    if sem.scope_of(node) is not scope or not (node.lineno < init.lineno and node.lineno < pin.lineno):
        return False
    if any(ln <= node.lineno for ln in pin_lines):
        return False
    if any(sem.scope_of(c) is scope and c.lineno < node.lineno for c in _calls_to_pinning_functions(ctx)):
        return False
    st = sem.statement_of(node)
    return parent(st) is parent(sem.statement_of(init)) and _runs_after(sem, node, init) \
        and _runs_after(sem, node, pin)


def _nccl_by_test(ctx, init: ast.Call, node: ast.AST) -> bool:
    """``node`` runs only where the init's own backend expression equals ``"nccl"``: an enclosing
    ``if`` (its body) whose test is, or has as a conjunct, ``<backend> == "nccl"`` with the same
    attribute or subscript path as ``backend=`` of the init, and nothing stores to that path in
    the function between them."""
    backend = get_arg(init, 0, "backend")
    if backend is None or not isinstance(backend, (ast.Attribute, ast.Subscript, ast.Name)):
        return False
    if isinstance(backend, ast.Attribute) and not is_simple_ref(backend):
        return False
    key = ctx.text(backend)
    scope = ctx.sem.scope_of(init)
    for n in ast.walk(scope):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and init.lineno <= n.lineno <= node.lineno:
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if ctx.text(t) == key:
                    return False
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, ast.If) and child in p.body:
            tests = p.test.values if isinstance(p.test, ast.BoolOp) and isinstance(p.test.op, ast.And) else [p.test]
            for t in tests:
                if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
                    a, b = t.left, t.comparators[0]
                    for x, y in ((a, b), (b, a)):
                        if ctx.text(x) == key and isinstance(y, ast.Constant) and isinstance(y.value, str) \
                                and y.value.lower() == "nccl":
                            return True
        child, p = p, parent(p)
    return False


def _helper_pins(ctx) -> list[ast.Call]:
    """Calls (as statements) that pin the device through a helper: a function of another project
    module that calls ``torch.cuda.set_device`` (itself or one it calls, two levels down), or a
    function of a library outside the project named like a device setter
    (``set_cuda_device_index(self.local_rank)``) whose argument is a rank by value flow (the name
    follows that answer). Once per check."""
    return ctx.memo("ddp001.helper_pins", lambda: _helper_pins_of(ctx))


def _helper_pins_of(ctx) -> list[ast.Call]:
    from ..flow.rank_tests import rank_kind
    from ._common import pin_name_kind

    sem = ctx.sem
    out: list[ast.Call] = []
    ana = None
    for c in sem.calls:
        f = c.func
        if not isinstance(f, (ast.Name, ast.Attribute)) or not isinstance(parent(c), ast.Expr):
            continue
        qn = ctx.qn(c) or ""
        if qn.startswith("torch."):
            continue
        name = f.id if isinstance(f, ast.Name) else f.attr
        if name in sem.functions:
            continue  # a function of this file: ``_calls_to_pinning_functions`` reads it
        if ana is None:
            from ..flow import for_context

            ana = for_context(ctx)
        got = ana.resolve_call(ana.main, c)
        if got is not None and got[0] is not ana.main:
            if _pins_in(ana, got[0], got[1], 0):
                out.append(c)
            continue
        if got is None and pin_name_kind(name) == 2 and len(c.args) == 1 and not c.keywords \
                and rank_kind(ctx, c.args[0], sem.scope_of(c)) is not None:
            out.append(c)
    return out


def _pins_in(ana, view, fn, depth: int) -> bool:
    if depth > 2 or not isinstance(fn, FUNC_TYPES):
        return False
    memo = view.memo.setdefault("ddp001.pins_in", {})
    if id(fn) in memo:
        return memo[id(fn)]
    memo[id(fn)] = False
    vsem = view.sem
    for c in vsem.calls:
        if vsem.enclosing_function(c) is not fn:
            continue
        if vsem.call_qualname(c) == "torch.cuda.set_device":
            memo[id(fn)] = True
            break
        if depth < 2 and isinstance(parent(c), ast.Expr):
            got = ana.resolve_call(view, c)
            if got is not None and _pins_in(ana, got[0], got[1], depth + 1):
                memo[id(fn)] = True
                break
    return memo[id(fn)]


def _report_unpinned_workers(ctx, inits) -> set[int]:
    """A function that ``mp.spawn`` starts (a fresh process: nothing is pinned yet) joins an NCCL
    group through a helper of this file (``setup(rank, world_size)`` whose body runs
    ``init_process_group`` with an NCCL backend, also a parameter whose default is one), never
    pins its device, and then uses the current device: an object collective without ``device=``
    (in the worker, or in a helper of this file it calls), ``.cuda()``, ``device="cuda"``. Reported
    at the worker's helper call. Returns the ids of the helpers' inits reported this way."""
    from ._spawn import spawn_calls, target_def

    sem = ctx.sem
    if not inits:
        return set()
    init_fns: dict[str, ast.Call] = {}  # helper name -> its NCCL init
    for c in inits:
        fn = sem.enclosing_function(c)
        if fn is None or isinstance(parent(fn), ast.ClassDef) or len(sem.functions.get(fn.name, ())) != 1:
            continue
        if single_process_init(ctx, c) or not (init_backend_is_nccl(c, ctx) or _nccl_param_default(ctx, c, fn)):
            continue
        init_fns[fn.name] = c
    if not init_fns:
        return set()
    targets = []
    for sc in spawn_calls(ctx):
        t = target_def(ctx, sc)
        if t is not None and t not in targets:
            targets.append(t)
    reported: set[int] = set()
    uses = None
    for w in targets:
        calls = [c for c in sem.calls if sem.enclosing_function(c) is w]
        joins = [c for c in calls if isinstance(c.func, ast.Name) and c.func.id in init_fns
                 and isinstance(parent(c), ast.Expr) and parent(parent(c)) is w]
        if not joins:
            continue
        join = joins[0]
        init = init_fns[join.func.id]
        if not init_backend_is_nccl(init, ctx) and not _default_backend_kept(init, sem.enclosing_function(init), join):
            continue  # ``dist_init(rank, world, backend="gloo")``
        pin_ids = {id(c) for c in _pin_like_calls(ctx)} | {id(c) for c in _calls_to_pinning_functions(ctx)} \
            | {id(c) for c in _helper_pins(ctx)}
        if any(id(c) in pin_ids for c in calls):
            continue  # the worker pins (where: ``_report_before_pin`` judges the order)
        if uses is None:
            uses = current_device_uses(ctx, eager_only=False)
        found: list[tuple[ast.AST, str]] = []
        for c in calls:
            if c.lineno <= join.lineno:
                continue
            qn = ctx.qn(c) or ""
            short = qn[len(D):] if qn.startswith(D) else ""
            if short in OBJECT_COLLECTIVES or (short in OBJECT_COLLECTIVES_WITH_DEVICE and not has_kwarg(c, "device")):
                found.append((c, "pickles through the current CUDA device"))
            elif isinstance(c.func, ast.Name) and c.func.id not in init_fns \
                    and len(sem.functions.get(c.func.id, ())) == 1:
                inner = _object_collective_in(ctx, sem.functions[c.func.id][0])
                if inner is not None:
                    found.append((c, f"runs `{_label(ctx, inner)}` (line {inner.lineno}), which pickles through "
                                     f"the current CUDA device"))
        for n, why in uses:
            if sem.enclosing_function(n) is w and n.lineno > join.lineno:
                found.append((n, why[why.find("` ") + 2:] if why.startswith("`") else why))
        if not found:
            continue
        first, why = min(found, key=lambda a: (a[0].lineno, a[0].col_offset))
        reported.add(id(init))
        ctx.report(
            join,
            f"`{w.name}` is started by `mp.spawn` and joins an NCCL group here (`init_process_group` on line "
            f"{init.lineno}) but never pins its device: `{_label(ctx, first)}` on line {first.lineno} {why}, "
            f"cuda:0 on every rank (hang or NCCL 'invalid usage')",
            related=[(init, "the NCCL init_process_group, with no set_device"), (first, "uses the current device")],
        )
    return reported


def _nccl_param_default(ctx, init: ast.Call, fn) -> bool:
    """``backend=backend`` with ``def dist_init(rank, world, backend=BACKEND)`` and ``BACKEND`` NCCL
    (or NCCL on a GPU node: ``NCCL if torch.cuda.is_available() else GLOO``)."""
    from ..torch_api import backend_mentions_nccl

    b = get_arg(init, 0, "backend")
    if not isinstance(b, ast.Name) or b.id not in param_names(fn):
        return False
    if any(b.id in (t.id for t in ast.walk(st) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store))
           for st in fn.body if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign))):
        return False
    a = fn.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)]
    defaults = dict(zip(pos[len(pos) - len(a.defaults):], a.defaults)) if a.defaults else {}
    defaults.update({k.arg: d for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    d = defaults.get(b.id)
    return d is not None and backend_mentions_nccl(d, ctx, ctx.sem.tree)


def _default_backend_kept(init: ast.Call, fn, call: ast.Call) -> bool:
    """``call`` of ``fn`` leaves the backend parameter that ``init`` uses at its default (or sets
    it to a literal NCCL)."""
    b = get_arg(init, 0, "backend")
    if not isinstance(b, ast.Name):
        return False
    for k in call.keywords:
        if k.arg == b.id:
            return isinstance(k.value, ast.Constant) and isinstance(k.value.value, str) \
                and "nccl" in k.value.value.lower()
        if k.arg is None:
            return False  # ``**kwargs``: unknown
    pos = [x.arg for x in (*fn.args.posonlyargs, *fn.args.args)]
    if any(isinstance(a, ast.Starred) for a in call.args):
        return False
    return b.id not in pos or pos.index(b.id) >= len(call.args)


def _object_collective_in(ctx, fn) -> ast.Call | None:
    """An object collective that pickles through the current device, in ``fn``'s own body."""
    sem = ctx.sem
    for c in sem.calls:
        if sem.enclosing_function(c) is not fn:
            continue
        qn = ctx.qn(c) or ""
        short = qn[len(D):] if qn.startswith(D) else ""
        if short in OBJECT_COLLECTIVES or (short in OBJECT_COLLECTIVES_WITH_DEVICE and not has_kwarg(c, "device")):
            return c
    return None


def _calls_to_pinning_functions(ctx) -> list[ast.Call]:
    """Calls of functions of this file that pin the device, directly or through another one
    (once per check)."""
    return ctx.memo("ddp001.calls_to_pinning", lambda: _calls_to_pinning_functions_of(ctx))


def _calls_to_pinning_functions_of(ctx) -> list[ast.Call]:
    sem = ctx.sem
    pinning: set[str] = set()
    for c in _pin_like_calls(ctx):
        fn = sem.enclosing_function(c)
        if fn is not None:
            pinning.add(fn.name)
    for _ in range(3):
        grew = False
        for c in sem.calls:
            f = c.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in pinning and name in sem.functions:
                fn = sem.enclosing_function(c)
                if fn is not None and fn.name not in pinning:
                    pinning.add(fn.name)
                    grew = True
        if not grew:
            break
    out = []
    for c in sem.calls:
        f = c.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in pinning and name in sem.functions:
            out.append(c)
    return out


def _pinned_before(pin_lines, node, pin) -> bool:
    return any(ln < node.lineno for ln in pin_lines)


def _pin_like_calls(ctx) -> list[ast.Call]:
    """The calls that pin (or may pin) the device; once per check."""
    return ctx.memo("ddp001.pin_like_calls", lambda: _pin_like_calls_of(ctx))


def _pin_like_calls_of(ctx) -> list[ast.Call]:
    sem = ctx.sem
    out = list(sem.calls_to("torch.cuda.set_device"))
    for c in sem.calls_to("torch.cuda.device", "torch.cuda.device_of"):
        if isinstance(parent(c), ast.withitem):
            out.append(c)
    for c, n, kind in device_call_index(ctx).named:
        if kind == 2 or (n not in sem.functions and not (ctx.qn(c) or "").startswith("torch.")):
            out.append(c)
    return out


def _runs_after(sem, first: ast.AST, node: ast.AST) -> bool:
    """``first``'s statement is followed, in its own statement list, by a statement holding
    ``node`` (straight-line order, ignoring early exits)."""
    st = sem.statement_of(first)
    block = parent(st)
    for field in ("body", "orelse", "finalbody", "handlers"):
        lst = getattr(block, field, None)
        if isinstance(lst, list) and st in lst:
            idx = lst.index(st)
            later = lst[idx + 1:]
            n = sem.statement_of(node)
            while n is not None and n is not block:
                if n in later:
                    return True
                n = parent(n)
            return False
    return False


def _shares_loop(sem, node: ast.AST, pin: ast.AST) -> bool:
    """Both in one loop: from the second iteration on, the device is pinned."""
    loops = {id(a) for a in sem.ancestors(node) if isinstance(a, _LOOPS)}
    return any(id(a) in loops for a in sem.ancestors(pin) if isinstance(a, _LOOPS))


def _early_pin_fix(ctx, init: ast.Call, pin: ast.Call, first: ast.AST):
    """Pin right after the init (or right after the pinned name is bound, when that happens between
    the init and the first call that needs the pin)."""
    sem = ctx.sem
    if len(pin.args) != 1 or pin.keywords or not isinstance(pin.args[0], ast.Name):
        return False
    name = pin.args[0].id
    scope = sem.scope_of(init)
    init_stmt = sem.statement_of(init)
    params = set(param_names(scope)) if isinstance(scope, FUNC_TYPES) else set()
    binds = sem.assignments(scope).get(name, [])
    anchor = None
    if name in params or any(b.end_lineno < init_stmt.lineno for b in binds):
        if any(init_stmt.lineno <= b.lineno < pin.lineno for b in binds):
            return False  # rebound in between: the value at the init is not the pinned one
        anchor = init_stmt
    elif len(binds) == 1 and isinstance(binds[0], ast.Assign) and binds[0].end_lineno < first.lineno \
            and _runs_after(sem, init, binds[0]) and _runs_after(sem, binds[0], first):
        anchor = binds[0]  # ``local_rank = int(os.environ["LOCAL_RANK"])`` just after the init
    if anchor is None:
        return False
    edit = ctx.insert_after(anchor, f"{ctx.text(pin.func)}({name})")
    if edit is None:
        return False
    where = "`init_process_group`" if anchor is init_stmt else f"`{name}` is known"
    return ctx.fix(Applicability.SAFE, f"Pin the device as soon as {where}: "
                                       f"`{ctx.text(pin.func)}({name})`", [edit])


def _fallback_init(call: ast.Call) -> bool:
    p = parent(call)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, ast.If) and any(
                (n.__class__ is ast.Name and n.id == "is_initialized")
                or (n.__class__ is ast.Attribute and n.attr == "is_initialized") for n in ast.walk(p.test)):
            return True
        p = parent(p)
    return False


def _short(ctx, call: ast.Call) -> str:
    qn = ctx.qn(call) or ""
    return qn[len(D):] if qn.startswith(D) else qn


def _pins_device(ctx, skip: frozenset | set = frozenset()) -> bool:
    """The file pins the rank's device (or calls something that may). ``skip``: ids of helper calls
    known (from their source) to create the group without pinning."""
    sem = ctx.sem
    if sem.calls_to("torch.cuda.set_device"):
        return True
    for c in sem.calls_to("torch.cuda.device", "torch.cuda.device_of"):
        p = parent(c)
        if isinstance(p, ast.withitem):
            return True
    # a helper that pins the device for us (``utils.setup_device(args)``, ``init_device_mesh``):
    # what it does is not visible from this file, so do not guess
    for c, n, kind in device_call_index(ctx).named:
        if id(c) in skip:
            continue
        if kind == 2:
            return True
        # ``utils.init_distributed_mode(args)``, ``setup_ddp(rank)`` from another module: a
        # distributed-setup helper whose body is not here may well pin the device
        if n not in sem.functions and not (ctx.qn(c) or "").startswith("torch."):
            return True
    if sets_visible_devices(sem, ctx.src.text):
        return True
    # a helper of another project module that calls ``torch.cuda.set_device``
    return any(id(c) not in skip for c in _helper_pins(ctx))


def sets_visible_devices(sem, text: str | None = None) -> bool:
    """The code sets ``CUDA_VISIBLE_DEVICES``: ``os.environ["CUDA_VISIBLE_DEVICES"] = ...``,
    ``os.putenv(...)``, ``os.environ.setdefault(...)``, ``os.environ.update(CUDA_VISIBLE_DEVICES=...)``
    or with a dict; a comment or a string saying so does not count."""
    if text is not None and "CUDA_VISIBLE_DEVICES" not in text:
        return False
    if "CUDA_VISIBLE_DEVICES" not in code_strings(sem) and "CUDA_VISIBLE_DEVICES" not in code_words(sem):
        return False
    for n in ast.walk(sem.tree):
        t = n.__class__
        if t is ast.Assign or t is ast.AugAssign or t is ast.AnnAssign:
            for tg in (n.targets if t is ast.Assign else [n.target]):
                if tg.__class__ is ast.Subscript and _is_cvd(tg.slice):
                    return True
        elif t is ast.Call and n.func.__class__ is ast.Attribute:
            a = n.func.attr
            if a in ("putenv", "setdefault") and n.args and _is_cvd(n.args[0]):
                return True
            if a == "update" and (any(k.arg == "CUDA_VISIBLE_DEVICES" for k in n.keywords) or any(
                    d.__class__ is ast.Dict and any(_is_cvd(k) for k in d.keys if k is not None) for d in n.args)):
                return True
    return False


def _is_cvd(e) -> bool:
    return e.__class__ is ast.Constant and e.value == "CUDA_VISIBLE_DEVICES"





def _device_var(ctx, init: ast.Call, affected: list[ast.Call]) -> str | None:
    """The script's own per-rank device variable, visible in the init call's scope."""
    sem = ctx.sem
    scope = sem.scope_of(init)
    params = set(param_names(scope)) if isinstance(scope, FUNC_TYPES) else set()
    assigned = sem.assignments(scope)
    visible = lambda n: n in params or n in assigned  # noqa: E731
    cands: list[str] = []
    attr_cands: list[str] = []
    for c in sem.calls_to(DDP_CLASS):
        ids = get_arg(c, 1, "device_ids")
        if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1 and isinstance(ids.elts[0], ast.Name):
            cands.append(ids.elts[0].id)
        elif isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1 and isinstance(ids.elts[0], ast.Attribute):
            # ``device_ids=[args.local_rank]``: usable when ``args`` is visible at the init
            e = ids.elts[0]
            root = e
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and is_simple_ref(e) and _DEVICE_NAME.search(e.attr) \
                    and (root.id in params or any(b.lineno < init.lineno for b in assigned.get(root.id, ()))):
                attr_cands.append(ctx.text(e))
    named: set[str] = set()  # each name judged (and listed) once: ``.to(device)`` is everywhere
    Name = ast.Name
    for c in device_call_index(ctx).moves:  # ``x.to(...)`` / ``x.cuda(...)``
        if c.args and c.args[0].__class__ is Name:
            name = c.args[0].id
            if name not in named:
                named.add(name)
                if _DEVICE_NAME.search(name) or name == "rank":
                    cands.append(name)
    for n in _PREFERRED_NAMES:
        if n in assigned or n in params:
            cands.append(n)
    tried: set[str] = set()
    for n in cands:
        if n in tried:
            continue  # the same name gives the same answer
        tried.add(n)
        if visible(n) and _is_device_like(ctx, n, scope):
            return n
    return attr_cands[0] if len(set(attr_cands)) == 1 else None


def _is_device_like(ctx, name: str, scope) -> bool:
    """Reject names bound to things set_device cannot take (strings like "cuda" alone are fine:
    set_device("cuda") is a no-op, so require an index or a device)."""
    val = ctx.sem.single_value(name, scope)
    if val is None:
        return True
    # ``gpu = torch.cuda.current_device()`` / ``device = torch.device("cuda")``: that is the
    # current device itself, pinning it changes nothing
    # (the few calls of it, looked up from the index, each checked for being inside ``val``)
    for c in ctx.sem.calls_to("torch.cuda.current_device"):
        n = c
        while n is not None:
            if n is val:
                return False
            n = parent(n)
    if _is_cuda_literal(ctx, val, val):
        return False
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


# -- the group made by a helper of another project file ---------------------------------------------
# a module that mentions any of these may pin the device (or leave it to the launcher): not judged
# (``flow.mentions``: identifiers of the code, never a comment or a string)


def terminal_cuda(e) -> bool:
    return (e.__class__ is ast.Attribute and e.attr == "cuda") or (e.__class__ is ast.Name and e.id == "cuda")


def _short_path(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def _helper_inits(ctx) -> dict[int, tuple]:
    """Calls of this file to a function of another project module that creates an NCCL process
    group without pinning a device: {id(call): (path, range of the init, its line)}. Only asked for
    a file without an init of its own that uses the current device."""
    sem = ctx.sem
    if not ctx.dist_calls(*OBJECT_COLLECTIVES, *OBJECT_COLLECTIVES_WITH_DEVICE) \
            and not current_device_uses(ctx, eager_only=False):
        return {}
    from ..flow import for_context  # lazy: only such files load the project

    ana = None
    out: dict[int, tuple] = {}
    for c in sem.calls:
        f = c.func
        if not isinstance(f, (ast.Name, ast.Attribute)) or (ctx.qn(c) or "").startswith("torch."):
            continue
        if not isinstance(parent(c), (ast.Expr, ast.Assign)):
            continue  # a setup helper is called as a statement
        if ana is None:
            ana = for_context(ctx)
        got = ana.resolve_call(ana.main, c)
        if got is None or got[0] is ana.main:
            continue
        init = _nccl_init_in(ana, got[0], got[1], c, 0)
        if init is not None:
            from ..flow.findings import node_span

            view, node = init
            out[id(c)] = (view.path, node_span(ctx, view.path, node), node.lineno)
    return out


def _nccl_init_in(ana, view, fn, call, depth: int):
    """(view, init call) when ``fn`` (or a function of the project it calls, two levels down) runs
    an NCCL ``init_process_group`` and its module never mentions pinning a device."""
    if depth > 2 or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or view.path is None:
        return None
    # (a module's text is searched once, not once per call of one of its functions)
    pinned = view.memo.get("ddp001.pin_words")
    if pinned is None:
        vs, text = view.sem, view.text or ""
        pinned = view.memo["ddp001.pin_words"] = mentions(vs, "set_device", "device_id", text=text) or (
            "device_mesh" in text and any("device_mesh" in w for w in code_words(vs))) or sets_visible_devices(
            vs, text) or ("device" in text and any(
            c.func.__class__ is ast.Attribute and c.func.attr == "device" and terminal_cuda(c.func.value)
            for c in vs.calls))
    if pinned:
        return None
    memo = view.memo.setdefault("ddp001.helper_init", {})
    key = (id(fn), _passed_backend(call))
    if key in memo:
        return memo[key]
    memo[key] = None
    vsem = view.sem
    adapter = _ViewCtx(vsem)
    for c in vsem.calls:
        if vsem.enclosing_function(c) is not fn:
            continue
        qn = vsem.call_qualname(c) or ""
        if qn == D + "init_process_group":
            backend = get_arg(c, 0, "backend")
            if _nccl_backend(adapter, backend, fn, call):
                memo[key] = (view, c)
                break
            continue
        if depth < 2 and isinstance(parent(c), (ast.Expr, ast.Assign)) and not qn.startswith("torch."):
            got = ana.resolve_call(view, c)
            if got is not None:
                found = _nccl_init_in(ana, got[0], got[1], c, depth + 1)
                if found is not None:
                    memo[key] = found
                    break
    return memo[key]


def _passed_backend(call) -> str | None:
    for k in getattr(call, "keywords", ()):
        if k.arg == "backend" and isinstance(k.value, ast.Constant):
            return str(k.value.value)
    return None


def _nccl_backend(adapter, backend, fn, call) -> bool:
    """The helper's backend is NCCL: a literal, a name bound to one, or its own parameter whose
    default is "nccl" and which this call does not set otherwise."""
    from ..torch_api import backend_mentions_nccl

    if backend_mentions_nccl(backend, adapter, fn):
        return True
    if isinstance(backend, ast.Name) and backend.id in param_names(fn):
        passed = _passed_backend(call)
        if passed is not None:
            return "nccl" in passed.lower()
        a = fn.args
        pos = [x.arg for x in (*a.posonlyargs, *a.args)]
        defaults = dict(zip(pos[len(pos) - len(a.defaults):], a.defaults)) if a.defaults else {}
        defaults.update({k.arg: d for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        i = pos.index(backend.id) if backend.id in pos else None
        if i is not None and i < len(getattr(call, "args", ())):
            return False  # given positionally: not known here
        d = defaults.get(backend.id)
        return isinstance(d, ast.Constant) and isinstance(d.value, str) and "nccl" in d.value.lower()
    return False


class _ViewCtx:
    """The little of a rule context that ``backend_mentions_nccl`` reads, for another module."""

    def __init__(self, sem):
        self.sem = sem

    def qn(self, node):
        return self.sem.call_qualname(node) if isinstance(node, ast.Call) else self.sem.qualname(node)
