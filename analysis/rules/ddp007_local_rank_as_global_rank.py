from __future__ import annotations

import ast
import os

from ..model import Severity
from ..registry import NoCase, Rule
from ..flow.calls import call_args
from ..flow.process_entries import one_node_elastic, starts_group_processes
from ..semantic import parent
from ..flow.modern import hub
from ..flow.rank_kinds import (
    LOCAL, LOCAL_RANK_OPTIONS, global_rank_sinks, loopback_rendezvous, program_views, rank_kind_of, self_launched,
    option_strings,
)
from ..flow.shard_sinks import member_param_sinks, member_sink, rank_param_sinks, shard_rank_sinks
from ..flow.testing import one_node_test


class LocalRankAsGlobalRank(Rule):
    """
    ## What it does
    Checks for the *local* rank (a process's place on its node) given where the *global* rank (its
    place in the whole job) is required: `init_process_group(rank=...)`, `os.environ["RANK"] =
    ...` (or `setdefault`), and a parameter of a project helper, in this module or another one,
    that the helper passes on to one of those (`setup(rank=local_rank)` with `def setup(rank):
    dist.init_process_group(..., rank=rank)`).

    The index of this process's shard of the data is such a place too (`flow.shard_sinks`):
    `DistributedSampler(rank=...)`, the offset of a strided slice `items[r::n]` or of
    `range(r, end, n)`, unless the stride is known to count one node's processes
    (`LOCAL_WORLD_SIZE`, `torch.cuda.device_count()`: each node then reads everything). A class
    that strides by an attribute it only sets from a parameter of its `__init__` (a project batch
    sampler's `self.rank`) is reported where it is built with the local rank, in this module or
    another one, not in the class.

    The kind of a value is read from where it comes from, never from its name: the local rank is
    the environment's `LOCAL_RANK` / `SLURM_LOCALID` / `OMPI_COMM_WORLD_LOCAL_RANK`,
    `dist.get_node_local_rank()`, Accelerate's `local_process_index` of an `Accelerator` or a
    `PartialState` (by value: `self.accelerator = Accelerator(...)`, also built by a base class of
    another module; its `process_index` is the global rank and `num_processes` counts every
    process, so `items[acc.local_process_index::acc.num_processes]` is flagged and
    `items[acc.process_index::acc.num_processes]` is not), or a `--local_rank` / `--local-rank` command-line option,
    followed through assignments, tuple unpacking, `int(...)`, conditional expressions,
    `args.<attr>` stores and argparse defaults, `self` attributes, parameters filled at their
    calls and returns of project helpers. A value that may also be something else (arithmetic
    such as `node_rank * gpus + local_rank`, the index `mp.spawn` passes) is not flagged; constant
    fallbacks (`0` when not distributed) are neutral.

    Only programs that can span nodes are checked. A program (the file and the project modules
    it imports) that starts its own processes with `mp.spawn` (the spawn index is the global rank
    on its one node) or with `elastic_launch(LaunchConfig(max_nodes=1, ...), entrypoint)` (the value
    of `max_nodes` followed through names, parameters and argparse defaults), or that fixes its rendezvous on the loopback address
    (`os.environ["MASTER_ADDR"] = "localhost"`, `init_method="tcp://127.0.0.1:..."`) has one node by
    construction and is not flagged. Test files are skipped.

    ## Why is this bad?
    On one node the local rank equals the global rank, so the script works. On two nodes every
    node's processes claim ranks `0..nproc-1`: two processes join as rank 0, the rendezvous
    rejects or hangs (`RuntimeError: ... rank 0 already joined`, or a timeout), or the ranks of the
    second node silently duplicate the first node's shards: a sampler given the local rank hands
    the processes with the same local rank on every node the same batches, and the shards of the
    higher ranks are never read.

    ## Example
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl", rank=local_rank, world_size=int(os.environ["WORLD_SIZE"]))
    ```

    ## Use instead
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    torch.cuda.set_device(local_rank)
    ```

    ## Fix safety
    No fix is offered: the global rank has to come from the launcher (`RANK`, `SLURM_PROCID`) or be
    computed (`node_rank * gpus_per_node + local_rank`), and which one the script's launch uses is
    not visible in the code.
    """

    code = "DDP007"
    name = "local-rank-as-global-rank"
    severity = Severity.ERROR
    # any spelling of a rank (the value, the sink, a helper's parameter), SLURM's local id
    requires_text = (NoCase("rank"), "SLURM_LOCALID", "local_process_index")
    # Accelerate's node-local index needs no ``torch`` in the file (a trainer subclass of a base
    # class that builds the ``Accelerator``)
    base_text = ("torch", "local_process_index")

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        if one_node_test(ctx.filename, an):
            return  # multi-process tests (and scripts beside them) run on one node: local rank == global rank
        found = []
        shards = shard_rank_sinks(an, view)
        for val, node, what in (*global_rank_sinks(view), *shards):
            if any(s[1] is node for s in shards) and member_sink(an, view, val) is not None:
                continue  # a class's member: what its builder gives it is reported where it is built
            kind, w = rank_kind_of(an, view, val, node)
            if kind == LOCAL:
                found.append((node, what, w, None))
        for c in ctx.sem.calls:
            target = an.resolve_call(view, c)
            if target is None:
                continue
            tv, tfn = target
            if tv is view:
                # a helper of this module: its own sink follows the argument back here; a class whose
                # member shards the data is reported where it is built
                sinks = member_param_sinks(an, tv, tfn)
            else:
                sinks = rank_param_sinks(an, tv, tfn)
            if not sinks:
                continue
            for pname, a in call_args(c, tfn):
                if pname in sinks:
                    kind, w = rank_kind_of(an, view, a, c)
                    if kind == LOCAL:
                        owner = parent(tfn) if tfn.name == "__init__" else tfn
                        found.append((c, sinks[pname][2], w, (pname, sinks[pname], owner)))
                        break
        if not found:
            return
        program = program_views(an, view)
        if self_launched(program) is not None or starts_group_processes(an, program) is not None \
                or loopback_rendezvous(program) is not None or one_node_elastic(an, program) is not None:
            return
        here = os.path.dirname(os.path.abspath(ctx.filename)) if ctx.filename and not ctx.filename.startswith("<") \
            else None
        for node, what, (wv, wnode), through in found:
            src = _where(ctx, view, here, wv, wnode)
            via = ""
            related = []
            if wv is view and wnode is not node:
                related.append((wnode, "the local rank comes from here"))
            elif wv is not view:
                related.append(("file", wv.path, _range(wv, wnode), "the local rank comes from here"))
            if through is not None:
                pname, (sv, snode, _what), _owner = through
                whose = "the class's" if isinstance(through[2], ast.ClassDef) else "the helper's"
                via = f" through {whose} parameter `{pname}` ({_where(ctx, view, here, sv, snode, text=False)})"
                related.append(("file", sv.path, _range(sv, snode), "the helper passes it on here"))
            sv, snode = through[1][:2] if through is not None else (view, node)
            if any(n is snode for _v, n, _w in shard_rank_sinks(an, sv)):
                why = ("the processes with the same local rank on every node read the same shard of the data "
                       "(the data is duplicated and the other shards are never read)")
            else:
                why = ("its processes claim the same ranks as the first node's (two rank 0s: the rendezvous "
                       "fails or hangs)")
            ctx.report(
                node,
                f"the local rank ({src}) is given as the global rank to {what}{via}: on a second node {why}. "
                f"Use the global rank (`RANK`, `dist.get_rank()`, or `node_rank * gpus_per_node + local_rank`)",
                related=related,
            )


def _where(ctx, view, here, v, node, text: bool = True) -> str:
    from ..source import SourceText

    seg = ""
    if text:
        src = ctx.src if v is view else SourceText(v.text)
        opt = next((o for o in option_strings(node) if o in LOCAL_RANK_OPTIONS), None) \
            if isinstance(node, ast.Call) else None
        seg = f"the `{opt}` option" if opt else src.segment(node)
        seg = f"{seg}, " if opt else (f"`{seg}`, " if len(seg) <= 60 and "\n" not in seg else "")
    if v is view:
        return f"{seg}line {node.lineno}"
    rel = os.path.relpath(v.path, here) if here and v.path else v.path
    return f"{seg}{rel}:{node.lineno}"


def _range(v, node):
    from ..source import SourceText

    return SourceText(v.text).node_range(node)
