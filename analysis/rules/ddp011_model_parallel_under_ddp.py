from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent
from ..flow.rank_tests import LOCAL_RANK_ENV, only_single_process, rank_test, world_size_tests
from ..flow.vocab import env_key
from ..flow.world import WORLD_SIZE_ENV
from ..torch_api import constant_of
from ._common import D, DDP_CLASS, project_callers

# ``device_map`` strategies that spread one model over every visible GPU (Accelerate's
# ``infer_auto_device_map``): ``"auto"``, ``"balanced"``, ``"balanced_low_0"``, ``"sequential"``
_SPREAD = frozenset({"auto", "balanced", "balanced_low_0", "sequential"})
# the attributes the HF ``Trainer`` reads to treat a model as split across GPUs
_MP_FLAGS = frozenset({"model_parallel", "is_parallelizable"})


class ModelParallelUnderDdp(Rule):
    """
    ## What it does
    Checks for model parallelism of a single process set up in code that runs as one of several
    data-parallel ranks (torchrun, `init_process_group`, DDP):

    - `from_pretrained(..., device_map="auto")` (also `"balanced"`, `"balanced_low_0"`,
      `"sequential"`, or a name bound only to one of them), which spreads **one** model over
      **every** GPU of the machine;
    - `model.model_parallel = True` / `model.is_parallelizable = True`, the flags that tell the
      Hugging Face `Trainer` the model is already split across GPUs.

    The code counts as multi-process when the same function (or module, for module-level code)
    compares the world size with one process (`world_size != 1`, `int(os.environ.get("WORLD_SIZE",
    1)) > 1`, `dist.get_world_size() == 1`), reads `LOCAL_RANK`/`WORLD_SIZE` from the environment,
    calls `init_process_group`, or builds `DistributedDataParallel`; for a function of the module,
    a function of the same module that calls it may show it instead. The world size is read by
    value flow, never by name. A statement on a branch taken only in a world of one process
    (`if not ddp:` with `ddp = world_size != 1`, `... if world_size == 1 else ...`) is not
    flagged, nor one that only some ranks run (`if rank == 0:`).

    ## Why is this bad?
    Under torchrun every rank runs the same code. With `device_map="auto"` each of the N processes
    loads a whole copy of the model spread over all the node's GPUs: every GPU holds a slice of N
    copies (out of memory), and the data-parallel wrapper is handed a model that spans several
    devices (Accelerate refuses to prepare a quantized model split over devices in a distributed
    run; DDP of a multi-device module needs `device_ids=None` and all ranks then share GPUs).
    Setting `model_parallel`/`is_parallelizable` makes the `Trainer` treat each rank's replica as a
    model split across GPUs (it stops placing the model on the rank's device and changes how it
    parallelises), which is meant for one process that spreads the model, not for one replica per
    rank.

    ## Example
    ```python
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)} if world_size != 1 else None
    model = AutoModelForCausalLM.from_pretrained(name, device_map=device_map)
    if torch.cuda.device_count() > 1:
        model.is_parallelizable = True
        model.model_parallel = True  # also under torchrun
    ```

    ## Use instead
    ```python
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    ddp = world_size != 1
    device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)} if ddp else None
    model = AutoModelForCausalLM.from_pretrained(name, device_map=device_map)
    if not ddp and torch.cuda.device_count() > 1:
        model.is_parallelizable = True
        model.model_parallel = True
    ```

    ## Fix safety
    No fix is offered: the per-rank placement (`device_map={"": local_rank}`) and the single-process
    condition belong to the script's own launch logic.
    """

    code = "DDP011"
    name = "model-parallel-under-ddp"
    severity = Severity.ERROR
    requires_text = ("device_map", "model_parallel", "is_parallelizable")

    def finish(self, ctx) -> None:
        sem = ctx.sem
        cands: list[tuple[ast.AST, str]] = []
        for c in sem.calls:
            for k in c.keywords:
                if k.arg == "device_map":
                    spread = _spread_value(ctx, k.value, sem.scope_of(c))
                    if spread is not None:
                        cands.append((k, f'`device_map="{spread}"` spreads one model over every GPU of the node'))
        for n in sem.by_type.get(ast.Assign, ()):  # every assignment (the traversal's index)
            if n.value.__class__ is ast.Constant and n.value.value is True:
                for t in n.targets:
                    if t.__class__ is ast.Attribute and t.attr in _MP_FLAGS:
                        cands.append((n, f"`{ctx.text(t)} = True` tells the Trainer the model is split "
                                         f"across GPUs (model parallelism)"))
        if not cands:
            return
        for node, what in cands:
            if only_single_process(ctx, node) or _rank_subset(ctx, node):
                continue
            got = _evidence_here_or_at_caller(ctx, sem.scope_of(node))
            if got is None:
                continue
            ev, where = got
            note = "the code knows it may run as several processes here"
            if where is None:
                at, related = f"line {ev.lineno}", [(ev, note)]
            else:
                from ..flow.findings import node_span

                at = f"line {ev.lineno} of {_short_path(where.filename)}, a caller"
                related = [("file", where.filename, node_span(ctx, where.filename, ev), note)]
            ctx.report(
                node,
                f"{what}, but this code also runs as one of several data-parallel ranks ({at}): "
                f"each rank needs its own whole replica on its own GPU; do this only when the world size is 1",
                related=related,
            )


def _spread_value(ctx, e: ast.AST, scope: ast.AST) -> str | None:
    """The spreading strategy ``e`` is: a literal, or (``constant_of``) a name bound once to one,
    an argparse default, the one store of ``args.x``, a config dict item."""
    c = constant_of(ctx.sem, e, scope)
    if c is not None and isinstance(c.value, str) and c.value in _SPREAD:
        return c.value
    return None


def _rank_subset(ctx, node: ast.AST) -> bool:
    """Only some ranks run ``node`` (``if rank == 0:``)."""
    scope = ctx.sem.scope_of(node)
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            t = rank_test(ctx, p.test, scope)
            in_body = child in p.body if isinstance(p.body, list) else child is p.body
            if t is not None and (t.body if in_body else t.orelse):
                return True
        child, p = p, parent(p)
    return False


def _short_path(path: str) -> str:
    return "/".join(path.replace("\\", "/").split("/")[-2:])


def _evidence_here_or_at_caller(ctx, scope: ast.AST):
    """(node, None) for evidence of several ranks in ``scope`` or, for a function, in a function of
    the same module that calls it where the call itself is not single-process only; (node, the
    caller's context) for a module-level helper called from another file of the project."""
    ev = _multi_process_evidence(ctx, scope)
    if ev is not None or not isinstance(scope, FUNC_TYPES):
        return None if ev is None else (ev, None)
    sem = ctx.sem
    if len(sem.functions.get(scope.name, ())) != 1:
        return None
    for c in sem.calls:
        f = c.func
        # ``load(name)``, or ``Loader().load(name)`` / ``self.load(name)`` of a method
        if (f.__class__ is ast.Name or f.__class__ is ast.Attribute) and (
                f.id if f.__class__ is ast.Name else f.attr) == scope.name:
            caller = sem.scope_of(c)
            if caller is scope or only_single_process(ctx, c) or _rank_subset(ctx, c):
                continue
            ev = _multi_process_evidence(ctx, caller)
            if ev is not None:
                return ev, None
    if isinstance(parent(scope), ast.Module):
        # a module-level helper called from another file of the project
        for cctx, call, _def in project_callers(ctx, (scope.name,)):
            if only_single_process(cctx, call) or _rank_subset(cctx, call):
                continue
            ev = _multi_process_evidence(cctx, cctx.sem.scope_of(call))
            if ev is not None:
                return ev, cctx
    return None


def _multi_process_evidence(ctx, scope: ast.AST) -> ast.AST | None:
    """A node of ``scope`` showing it runs as one of several ranks: a test on the world size, an
    environment read of the launcher's ``LOCAL_RANK``/``WORLD_SIZE``, ``init_process_group``, DDP."""
    tests = world_size_tests(ctx, scope)
    if tests:
        return tests[0]
    sem = ctx.sem
    for c in sem.calls:
        if sem.scope_of(c) is not scope:
            continue
        qn = ctx.qn(c) or ""
        if qn in (D + "init_process_group", DDP_CLASS):
            return c
        key = env_key(ctx, c)
        if key in LOCAL_RANK_ENV or key in WORLD_SIZE_ENV:
            return c
    for n in _env_subscripts(ctx, scope):
        return n
    return None


def _env_subscripts(ctx, scope: ast.AST):
    from ..semantic import iter_scope_nodes

    for n in iter_scope_nodes(scope):
        if n.__class__ is ast.Subscript:
            key = env_key(ctx, n)
            if key in LOCAL_RANK_ENV or key in WORLD_SIZE_ENV:
                yield n
