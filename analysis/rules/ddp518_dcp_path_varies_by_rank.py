from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.findings import node_related
from ..flow.modern import hub, origins
from ._common import other_call_sites

_DCP = "torch.distributed.checkpoint."
_MAX_CALLERS = 8
_CALLS = {
    _DCP + "save": "save", _DCP + "state_dict_saver.save": "save",
    _DCP + "async_save": "async_save", _DCP + "state_dict_saver.async_save": "async_save",
    _DCP + "load": "load", _DCP + "state_dict_loader.load": "load",
    _DCP + "save_state_dict": "save_state_dict", _DCP + "load_state_dict": "load_state_dict",
}
_STORAGE = (_DCP + "FileSystemWriter", _DCP + "FileSystemReader", _DCP + "filesystem.FileSystemWriter",
            _DCP + "filesystem.FileSystemReader")


class DcpPathVariesByRank(Rule):
    """
    ## What it does
    Checks the checkpoint location of `torch.distributed.checkpoint` (DCP) `save`, `async_save`
    and `load`: the `checkpoint_id`, or the path of the `FileSystemWriter` / `FileSystemReader`
    given as `storage_writer` / `storage_reader`. It is flagged when the value differs between
    ranks: it is built from the rank (`f"ckpt/rank{rank}"`), the local rank, the wall clock or
    unseeded random numbers, or computed from this rank's own data (a validation loss over this
    rank's shard, never all-reduced), followed through names, helpers' parameters and returns,
    `self` attributes and other modules (the uniformity analysis every flow rule shares). A save
    in a function whose path comes from its parameters is judged at each of its calls, in this
    file or the project's other modules: a caller that passes a rank-varying value, also as a
    keyword the function takes in `**kwargs` and formats into the folder name
    (`checkpoint_id=pattern.format(**metrics)`), makes the path rank-varying; the function's own
    line is reported.

    ## Why is this bad?
    A DCP checkpoint is one directory written by all ranks together: every rank writes its shards
    as `__<rank>_0.distcp` files, and the coordinator (rank 0) writes the `.metadata` file that
    maps every shard, after a gather of every rank's plan. With a path per rank, each directory
    holds one rank's shards and only rank 0's has the metadata, so the checkpoint cannot be loaded
    (`dcp.load` on another rank fails to find `.metadata`, or finds a plan for shards it does not
    have); a load from per-rank paths reads a different checkpoint on each rank. A timestamp in the
    path differs between ranks as soon as they reach the call in different seconds.

    ## Example
    ```python
    dcp.save(state, checkpoint_id=f"checkpoints/step{step}_rank{dist.get_rank()}")
    ```

    ## Use instead
    ```python
    dcp.save(state, checkpoint_id=f"checkpoints/step{step}")
    ```

    ## Fix safety
    There is no automatic fix: the uniform part of the path is the user's choice.
    """

    code = "DDP518"
    name = "dcp-path-varies-by-rank"
    severity = Severity.ERROR
    requires_text = ("checkpoint",)  # every qualified name it resolves is torch.distributed.checkpoint.*

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        ev = an.evaluator(view)
        for c in view.sem.calls:
            op = _CALLS.get(view.sem.call_qualname(c) or "")
            if op is None:
                continue
            for path, what in _paths(an, view, c):
                v = ev.value(path)
                caller = None
                if not v.varying:
                    got = _from_callers(ctx, an, view, c, path)
                    if got is None:
                        continue
                    v, caller = got
                src = v.src
                where = f"{src.desc}, line {src.line}" if caller is None else f"{src.text(view.path)}"
                related = [(c, f"`dcp.{op}` runs here")] if path is not c else []
                if caller is not None:
                    related.append(node_related(ctx, caller[0].path, caller[1], "the call that passes it"))
                ctx.report(
                    path,
                    f"the checkpoint location of `dcp.{op}` ({what}) differs between ranks ({where}): a DCP "
                    "checkpoint is one directory that every rank writes its shards into and rank 0 describes in "
                    "`.metadata`; per-rank paths leave checkpoints that cannot be loaded. "
                    "Use the same path on every rank",
                    related=related,
                )


def _from_callers(ctx, an, view, call, path):
    """(value, (caller's view, call)) when ``path``, in a function of this file, differs between
    ranks as one of the function's callers (in this file or the project's others) runs it: the
    caller passes a rank-varying value to a parameter the path is built from (a keyword that the
    function takes as ``**metrics`` and formats into a folder name). None otherwise."""
    fn = view.sem.enclosing_function(call)
    if fn is None:
        return None
    sites = [(view, c) for c in an.call_sites(view, fn)]
    sites += [s for s in other_call_sites(ctx, an, methods=True)(view, fn) if not any(s[1] is c for _v, c in sites)]
    for cv, site in sites[:_MAX_CALLERS]:
        cctx = an.call_context(cv, site, (view, fn), None, want_wraps=False)
        if cctx is None or not cctx.binds:
            continue
        v = an.evaluator(view, cctx).value(path)
        if v.varying:
            return v, (cv, site)
    return None


def _paths(an, view, call):
    """(path expression, what it is) of ``call``'s checkpoint location."""
    cid = get_arg(call, None, "checkpoint_id")
    if cid is not None:
        yield cid, "`checkpoint_id`"
    # ``storage_writer=`` / ``storage_reader=``, or the second positional argument of the old
    # ``save_state_dict(state_dict, storage_writer)`` / ``load_state_dict(state_dict, storage_reader)``
    storages = [k.value for k in call.keywords if k.arg in ("storage_writer", "storage_reader")]
    if len(call.args) > 1:
        storages.append(call.args[1])
    for st in storages:
        for v, e in origins(an, view, st, call):
            if v is view and isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in _STORAGE:
                p = get_arg(e, 0, "path")
                if p is not None:
                    yield p, f"the path of `{v.sem.call_qualname(e).rsplit('.', 1)[-1]}`"
