from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.hidden import is_fsdp2, options_flag
from ..flow.modern import (content_calls, entry_kept, filled_entries, filled_only, hub, local_shard_of, origins,
                           remapped_entries)
from ._common import other_call_sites, shard_or_callers_reach

_SD = "torch.distributed.checkpoint.state_dict."
_GETTERS = (_SD + "get_model_state_dict", _SD + "get_state_dict", _SD + "get_optimizer_state_dict")


class ShardedStateDictSaved(Rule):
    """
    ## What it does
    Checks for `torch.save` of a sharded state dict to a path that is the same on every rank:
    `model.state_dict()` of a module given to `fully_shard` or `parallelize_module` (or whose parts
    were: `for blk in model.layers: parallelize_module(blk, mesh, plan)`), or `get_model_state_dict` /
    `get_state_dict` / `get_optimizer_state_dict` without `StateDictOptions(full_state_dict=True)`.
    The state dict may be built in a helper, returned in a tuple, put in a dict or copied entry by
    entry (`{k: v.cpu() for k, v in sd.items()}`) first; the module may come from a caller in another
    file.

    ## Why is this bad?
    Under FSDP2 (and tensor parallelism) a state dict holds DTensors: each rank has only its own
    shard of every parameter. `torch.save` pickles the local shards. Every rank writes the same
    file, the last writer wins, and the checkpoint holds one rank's shards: it cannot be loaded
    into an unsharded model, and a sharded reload restores 1/N of the weights.

    ## Example
    ```python
    fully_shard(model)
    ...
    torch.save(model.state_dict(), "model.pt")
    ```

    ## Use instead
    Save the shards with DCP, which writes one file per rank and a shared plan:
    ```python
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id="ckpt/step-100")
    ```
    or gather a full state dict on every rank and write it from one:
    ```python
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        torch.save(sd, "model.pt")
    ```

    ## Fix safety
    There is no automatic fix: which format the checkpoint should have is the user's choice.
    """

    code = "DDP503"
    name = "sharded-state-dict-saved"
    severity = Severity.ERROR
    # the torch.save is in the file; the sharding may be in a module it imports, or in a module
    # that calls the file's export helper with a sharded module
    requires_text = ("save",)

    reach = classmethod(shard_or_callers_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        saves = ctx.calls_to("torch.save")
        if not saves:
            return
        ev = an.evaluator(view)
        callers = other_call_sites(ctx, an)
        for c in saves:
            obj, path = get_arg(c, 0, "obj"), get_arg(c, 1, "f")
            if obj is None or path is None or ev.value(path).varying:
                continue
            src = _sharded_source(an, obj, c, view, callers)
            if src is None:
                local = _local_shards(an, obj, c, view, callers)
                if local is not None:
                    lv, lc = local
                    ctx.report(
                        c,
                        f"`{ctx.text(c)}` saves `{_seg(lv, lc)}` of each entry of a sharded state dict: `to_local()` "
                        "is this rank's shard only, so the file holds 1/N of every parameter; use `full_tensor()` "
                        "(an all-gather every rank runs) or a full state dict (`full_state_dict=True`)",
                        related=[(lc, "the local shard is taken here")] if lv is view else [],
                    )
                continue
            sv, sc = src
            rel = [(sc, "the sharded state dict comes from here")] if sv is view else []
            ctx.report(
                c,
                f"`{ctx.text(c)}` saves a sharded state dict (`{_seg(sv, sc)}`) "
                "to a path that is the same on every rank: each rank holds only its own shards, so the file "
                "keeps one rank's shards (the only rank that writes it, or the last); use `dcp.save`, or a full state dict (`full_state_dict=True`) written by one rank",
                related=rel,
            )


def _sharded_source(an, obj, at, view, callers=None, depth: int = 0):
    if depth < 2:
        # a copy whose entries keep their kind (``{k: v.detach().cpu() for k, v in sd.items()}``,
        # a loop filling ``out = {}`` so): as sharded as the state dict it copies
        for v, e in origins(an, view, obj, at):
            got = remapped_entries(e)
            fills = [got] if got is not None else filled_entries(v, e)
            if fills and all(entry_kept(value, names) for _sd, value, names in fills) and (
                    got is not None or filled_only(v, e, fills, at if v is view else None)):
                for sd, value, _names in fills:
                    found = _sharded_source(an, sd, value, v, callers, depth + 1)
                    if found is not None:
                        return found
    for v, call in content_calls(an, view, obj, at):
        qn = v.sem.call_qualname(call) or ""
        if qn in _GETTERS:
            opts = get_arg(call, None, "options")
            if opts is None or options_flag(v, opts, call, "full_state_dict") is False or (
                    isinstance(opts, ast.Call) and get_arg(opts, None, "full_state_dict") is None
                    and (v.sem.call_qualname(opts) or "").endswith("StateDictOptions")):
                return v, call
            continue
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "state_dict" and not call.args and \
                is_fsdp2(an, v, f.value, call, callers=callers, kind="dtensor"):
            return v, call
    return None


def _local_shards(an, obj, at, view, callers):
    """(view, ``v.to_local()`` call) when ``obj`` holds a comprehension over a sharded state
    dict's entries (``remapped_entries``) that keeps each entry's local shard; None otherwise."""
    for v, e in origins(an, view, obj, at):
        got = remapped_entries(e)
        for sd, value, names in ([got] if got is not None else filled_entries(v, e)):
            local = local_shard_of(value, names)
            if local is not None and _sharded_source(an, sd, local, v, callers) is not None:
                return v, local
    return None


def _seg(view, node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover
        return "state_dict"
