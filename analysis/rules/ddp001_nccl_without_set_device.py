from __future__ import annotations

import ast
import re

from ..model import Applicability, Severity
from ..flow.mentions import code_strings, code_words, mentions
from ..flow.rank_exits import one_visible_device, others_exit_after
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, has_kwarg, param_names, parent
from ._current_device import _is_cuda_literal, _short, current_device_uses
from ._pin_order import (_fallback_init, _helper_pins, _report_before_pin, _report_unpinned_workers,
                         callers_pin_after)
from ._per_rank_device import (_child_toward, _exclusive_branches,
                               _label, _per_rank_placements, _report_per_rank_device)
from ._common import (D, DDP_CLASS, DEVICE_SETTERS, OBJECT_COLLECTIVES, OBJECT_COLLECTIVES_WITH_DEVICE,
                      device_call_index, init_backend_is_nccl, is_simple_ref,
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
    follows that answer). The accelerator-generic setters pin too, wherever `torch.cuda.set_device`
    does (`torch.accelerator.set_device_index`, `torch.xpu` / `torch.npu` / `torch_npu.npu.set_device`:
    the table `torch_api.DEVICE_SETTERS`). An init whose backend comes from the config (`backend=cfg.backend`)
    counts for a call that runs only where `cfg.backend == "nccl"` holds, and a fallback init
    (`if not dist.is_initialized():`) counts for the calls placed right after it. An init in a
    helper of the file whose backend is its parameter (`def join(backend): init_process_group(
    backend=backend)`) counts at each call of the helper, with the argument as the backend.
    A use of the current device that allocates (`torch.empty(1, device="cuda")`, `.cuda()`) on
    the straight-line path before both the NCCL init and `torch.cuda.set_device(...)` (the warm-up
    at the top of a script) is reported too: it runs on cuda:0 on every rank.
    `device=args.device` counts as `"cuda"` when the argparse default of `--device` is `"cuda"`
    and the module never stores `args.device` itself (else the one store decides), and likewise
    `cfg["device"]` of a config dict literal. An init in a module-level helper that this file
    never calls is not reported when every call of it in the project's other files is preceded
    or followed, in the calling function, by `torch.cuda.set_device(...)` (`dist.init()` then
    `torch.cuda.set_device(local_rank)`, or a worker that pins its device and then calls
    `setup_distributed()`): the helper's users pin the device themselves.

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
    state that hands the device out), or returns it from a function or method of the module (a
    device getter, `def dev(): return th.device(f"cuda:{MPI.COMM_WORLD.Get_rank() % 8}")`, also
    behind `if th.cuda.is_available()` or in an if-expression; an MPI rank counts as a rank). A getter
    apart from the function of the init is reported at its `return`, with the init as the related
    location. Test files (`test_*.py`) are not judged on this alone. Here an
    `init_process_group` behind `if not dist.is_initialized():` counts: when it runs, nobody made
    the group, nor pinned the device. `init_device_mesh("cuda", ...)` counts as a pin: in torch
    2.13 it makes `LOCAL_RANK` (else `rank % device_count`) the current device when CUDA is not
    initialized yet.

    A group of one process (`init_process_group(..., world_size=1)`, a literal or a name bound
    once to one) is not flagged: its only rank has cuda:0 to itself. So is a world size that is a
    parameter holding 1 wherever its function starts: a worker that `mp.spawn(worker,
    args=(1, ...), nprocs=1)` alone starts, or a setup helper that such a worker alone calls with
    its parameter.

    A Ray task or actor that asks for at most one GPU (`@ray.remote(num_gpus=1)`,
    `ray.remote(num_gpus=1)(Worker)`, or a `@ray.remote` class that the module starts only with
    `Worker.options(num_gpus=1)`) is not flagged either: Ray sets `CUDA_VISIBLE_DEVICES` to that GPU
    alone, so cuda:0 is the process's own device. One that asks for more GPUs is judged as usual.

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
    # a qualified name of torch.distributed.*, or a project helper (imported) that makes the group
    # (``cfg = setup()``, whose module calls ``init_process_group``: ``reach``)
    requires_text_all = (("distributed", "import"),)

    @classmethod
    def reach(cls, text, filename):
        if "distributed" in text:
            return True, {}
        from ..flow.reach import reaches  # lazy: only files the text gate admits

        return reaches(filename, text, ("init_process_group",))

    def finish(self, ctx) -> None:
        inits = ctx.dist_calls("init_process_group")
        # ``if not dist.is_initialized(): init_process_group(...)`` is a fallback: the group (and the
        # device) normally come from elsewhere, so this file cannot tell whether a device is pinned
        # ``init_process_group(..., world_size=1)``: one process, no second rank to share cuda:0
        nccl_inits = [c for c in inits if init_backend_is_nccl(c, ctx) and not _fallback_init(c)
                      and not single_process_init(ctx, c)]
        # an init helper whose callers (in other files) all pin the device, before or after calling it
        nccl_inits = [c for c in nccl_inits if not callers_pin_after(ctx, c)]
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
            # ``if local_rank != 0: sys.exit()`` right after: only the main rank runs on, and
            # cuda:0 is its device; only what runs before that test is shared
            gate = others_exit_after(ctx, init)
            if one_visible_device(ctx, init):
                continue  # a Ray task or actor given one GPU: cuda:0 is that GPU
            if gate is not None:
                mine = [a for a in mine if sem.scope_of(a[0]) is scope and a[0].lineno < gate.lineno]
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


def _pins_device(ctx, skip: frozenset | set = frozenset()) -> bool:
    """The file pins the rank's device (or calls something that may). ``skip``: ids of helper calls
    known (from their source) to create the group without pinning."""
    sem = ctx.sem
    if sem.calls_to(*DEVICE_SETTERS):
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
    for c in vsem.function_calls(fn):
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
