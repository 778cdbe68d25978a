from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.hidden import is_fsdp2
from ..flow.modern import entry_kept, filled_entries, filled_only, hub, origins, remapped_entries, restores_dtensors
from ._common import other_call_sites, project_files_naming, shard_or_callers_reach

# what reads a checkpoint file into plain tensors
_LOADS = frozenset({"torch.load", "safetensors.torch.load_file", "safetensors.torch.load",
                    "torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url"})


class PlainStateDictIntoShardedModule(Rule):
    """
    ## What it does
    Checks for `model.load_state_dict(sd)` on a module already given to `fully_shard` (FSDP2),
    where every value `sd` may hold is read from a file with `torch.load` (or safetensors'
    `load_file`, `load_state_dict_from_url`), directly, as an entry of the loaded checkpoint
    (`ckpt["model"]`, or `ckpt.get("model", ckpt)`: the entry, or the whole checkpoint where it has none), or as a copy of it whose entries keep their tensors (`{k: v.to(device) for
    k, v in sd.items()}`, or a loop that fills a new dict with them, cast or renamed). The module and the state dict are followed through the program model:
    helpers that shard their parameter (`apply_fsdp(model)`, in this file or an imported one),
    `self` attributes, tuple unpacking and helpers that return the loaded dict. The module may be
    a parameter of a loader function (or of a class's constructor, kept on `self`) of this file
    whose every call, in the project's other files when this file makes none, passes a module
    already sharded there (`load_pretrained(model, path)` of `checkpoint/loader.py`, called by the
    trainer after `model, mesh = parallelize(model)`). A file the project itself writes only with
    the DTensor state dict of a `fully_shard` module (each rank's own shards:
    `torch.save(model.state_dict(), f"part{rank}.pt")`, or `get_model_state_dict` without
    `full_state_dict=True`, in this module or another, under the entry that is loaded) is not
    reported: `torch.load` restores those DTensors, and `load_state_dict` gets DTensors.

    ## Why is this bad?
    After `fully_shard`, every parameter is a DTensor that holds this rank's shard. A checkpoint
    read with `torch.load` holds plain, full tensors, and `load_state_dict` copies each one into
    the DTensor parameter, which raises on every rank:

    ```
    RuntimeError: Error(s) in loading state_dict for FSDPTransformer:
        While copying the parameter named "tok_embeddings.weight", ... an exception occurred :
        ('aten.copy_.default got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling distributed operators!',)
    ```

    ## Example
    ```python
    model = Transformer(cfg)
    fully_shard(model)
    model.load_state_dict(torch.load("pretrained.pt", map_location="cpu"))
    ```

    ## Use instead
    Load the full state dict before sharding, or let DCP's state-dict API shard it:
    ```python
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model = Transformer(cfg)
    fully_shard(model)
    full_sd = torch.load("pretrained.pt", map_location="cpu", mmap=True)
    set_model_state_dict(model, full_sd, options=StateDictOptions(full_state_dict=True))
    ```
    (`broadcast_from_rank0=True` lets only rank 0 read the file.)

    ## Fix safety
    There is no automatic fix: whether to load before sharding or through `set_model_state_dict`
    depends on memory and on where the file is readable.
    """

    code = "DDP517"
    name = "plain-state-dict-into-sharded-module"
    severity = Severity.ERROR
    # the load_state_dict call is in the file; the sharding may be in a module it imports, or in
    # a module that calls the file's loader with a sharded module
    requires_text = ("load_state_dict",)

    reach = classmethod(shard_or_callers_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        callers = None
        for c in view.sem.calls:
            f = c.func
            if not (isinstance(f, ast.Attribute) and f.attr == "load_state_dict") or len(c.args) + len(c.keywords) < 1:
                continue
            sd = get_arg(c, 0, "state_dict")
            if sd is None:
                continue
            copied = []
            load = _plain_load(an, view, sd, c, copied=copied)
            if load is None:
                continue
            if callers is None:
                callers = other_call_sites(ctx, an)
            if not is_fsdp2(an, view, f.value, c, callers):
                continue
            # (a copy of the loaded dict is asked about the dict it copies)
            if any(restores_dtensors(an, v, e, at, lambda words: _naming(ctx, words), callers)
                   for v, e, at in [(view, sd, c), *((v, e, e) for v, e in copied)]):
                continue  # the file holds the DTensors a sharded module's own state dict saved
            lv, lc = load
            ctx.report(
                c,
                f"`{ctx.text(f.value)}` is a `fully_shard` module (its parameters are DTensor shards), and "
                f"`{ctx.text(sd)}` holds the plain tensors `{_text(lc)}` reads from the file: "
                "`load_state_dict` raises 'got mixed torch.Tensor and DTensor' on every rank; load it before "
                "`fully_shard`, or use `set_model_state_dict(..., options=StateDictOptions(full_state_dict=True))`",
                related=[(lc, "the checkpoint is read here")] if lv is view else [],
            )


def _plain_load(an, view, expr, at, depth: int = 0, copied=None):
    """(view, call) of the file read when every value ``expr`` may hold is a checkpoint loaded into
    plain tensors (or one entry of it, or a copy of it whose entries keep their tensors); else
    None. ``copied`` (a list) receives (view, expression) of each dict such a copy reads."""
    if depth > 3:
        return None
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    # an entry of a loaded checkpoint comes back with its key path (``ckpt.get("model", ckpt)``:
    # the entry, or the default where it lacks one)
    got = origins(an, view, expr, at, keep_path="entries")
    if not got:
        return None
    first = None
    for v, e, p in got:
        if p:
            if not (isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in _LOADS):
                return None
            first = first or (v, e)
            continue
        while isinstance(e, ast.Subscript):
            inner = _plain_load(an, v, e.value, e, depth + 1, copied)
            if inner is None:
                return None
            e = None
            first = first or inner
            break
        if e is None:
            continue
        if not isinstance(e, ast.Call):
            # a copy of a loaded dict whose entries keep their tensors (``{k: v.to(device) for k,
            # v in sd.items()}``, or a loop filling ``out = {}``): plain as the dict it copies
            got = remapped_entries(e) if isinstance(e, ast.DictComp) else None
            fills = [got] if got is not None else filled_entries(v, e)
            if not fills or not all(entry_kept(value, names) for _sd, value, names in fills) or (
                    got is None and not filled_only(v, e, fills, at if v is view else None)):
                return None
            for src, *_ in fills:
                inner = _plain_load(an, v, src, src, depth + 1, copied)
                if inner is None:
                    return None
                if copied is not None:
                    copied.append((v, src))
                first = first or inner
            continue
        if (v.sem.call_qualname(e) or "") not in _LOADS:
            return None
        first = first or (v, e)
    return first


def _naming(ctx, words):
    """The views of the project's modules whose text names one of ``words`` (None: unknown)."""
    got = project_files_naming(ctx, set(words))
    return None if got is None else [v for _c, v in got]


def _text(node) -> str:
    try:
        s = ast.unparse(node)
    except Exception:  # pragma: no cover
        return "torch.load(...)"
    return s if len(s) <= 60 else s[:57] + "..."
