from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow import for_context
from ..flow.control import Divergence, under_join
from ..flow.hidden import fsdp2_sites_with_callers
from ..flow.summaries import Effect, Site
from ..flow.shapes import shapes_of
from ..semantic import FUNC_TYPES, param_names, parent, subtree
from ._common import lines_within, other_call_sites
from ._flow import FLOW_TEXT, all_divergences, report_divergence, scopes


class UnevenCollectiveLoop(Rule):
    """
    ## What it does
    Checks for a loop that makes a collective when the number of iterations differs between ranks:
    a `for` over this rank's own shard, over a `DataLoader` whose dataset is built per rank without
    a `DistributedSampler`, or a `while` on a rank-varying test. The collective may be explicit,
    implicit (DDP's gradient all-reduce in `loss.backward()`, its buffer broadcast in the forward)
    or inside a helper function.

    Collectives hidden in the modern stack count the same way (the table is
    `analysis/runtime/shim_vocab.py`, version-tagged and checked on torch 2.13): the forward and
    backward of a `fully_shard` module (FSDP2's all-gather and reduce-scatter), `DTensor.full_tensor()`
    / `redistribute()` / `distribute_tensor()`, `get_model_state_dict` / `get_optimizer_state_dict` /
    `get_state_dict` with `full_state_dict=True`, `set_*state_dict` with `broadcast_from_rank0=True`,
    `dcp.save` / `dcp.load` / `dcp.async_save`, `clip_grad_norm_` over FSDP2 parameters, FSDP1's
    `summon_full_params` and full optimizer state dicts, and a `torch.compile`d function that makes
    a collective. A module is an FSDP2 module also when a project function (this file or
    another) gives it to `fully_shard` and returns it: `model = build_model(cfg, mesh)`, or an
    element of a returned tuple (`model, opt = setup(cfg)`). An FSDP2 module counts also when this
    file only receives it: a `self` attribute
    that `__init__` stores from a parameter (`self.model, self.opt = model, opt`), or a parameter,
    that every call in the project's other files passes a module given to `fully_shard`
    (`Actor(shard_model(net, mesh), ...)` in the training script), for a loop whose trip count
    varies; such a file need not name `torch.distributed` at all.

    A rank's shard is recognised when it is built by custom code, in this file or another file of
    the project:
    - a slice with rank-varying bounds (`files[rank::world_size]`, `islice(lines, rank, None, world)`),
      a list filtered by the rank
      (`[f for f in files if owner(f) == rank]`), this rank's piece of an uneven split
      (`np.array_split(ids, world)[rank]`);
    - the contents of a file named after the rank (`open(f"shard_{rank}.txt")`, `readlines()`,
      `torch.load`, `json.load`, `glob` of a per-rank pattern), directly or through a helper that
      returns them (`load_shard(rank)` returning `torch.split(rows, 64)`); a field of such a file
      that the module writes itself (`torch.save({"epoch": epoch, ...}, <the same file name>)`)
      holds what the writer stored there instead (`state["epoch"]`: the same on every rank);
    - a generator that loops over such a source (`for rec in stream(f"part-{rank}.jsonl")`);
    - a project `Dataset` / `IterableDataset` whose `__len__` / `__iter__` reads such a source,
      given to a `DataLoader` without a `DistributedSampler`.

    A count a project helper computes from this rank's own data counts too, when the helper makes
    it equal across ranks (`all_reduce(n, op=MAX)`, `MIN`, or a `broadcast`) only under a test on
    one of its optional parameters (`if group is not None:`, `if sync:`) and the call leaves that
    parameter at its default (`None` / `False`: not passed, or passed as that constant): a loop over
    what the helper returns (`for mb in make_micro_batches(seqs, budget)`, the first element of a
    returned tuple), or over `range(n)` of the count it returns, in this file or another file of
    the project, a function or a method. The message names the parameter the call leaves out.

    The loop may walk a parameter (`def evaluate(loader): for batch in loader:`) or an attribute
    that `__init__` stores from one (`self.loader = loader`): it is judged at the calls of that
    function, method or constructor, in this file or another file of the project, and reported
    when one of them passes such a shard (`evaluate(shard_loader)`, `Evaluator(model,
    shard_loader)`, `Trainer(cfg).fit(shard_loader)`), also when that call passes its own caller's
    argument on (`def fit(self, loader): self.train_epoch(loader)`).

    Not flagged: a call that passes the helper's group (by position or by keyword) or sets its
    flag, a helper that always equalises the count, a count computed from config alone, a count
    the caller equalises itself before the loop, the length of a list or dict whose elements
    alone are filled with this rank's outputs (`buckets[level][name] = out`: as many buckets on
    every rank), the shape of random numbers drawn with fixed sizes (`rng.choice(n, k).shape`), a
    start epoch read from a checkpoint mapped onto this rank's GPU (`map_location`), loops under
    DDP's `join()` context manager (`with model.join():`), which exists for
    exactly this case, a `DataLoader` with a `DistributedSampler` (it pads every rank to the same
    count), files every rank reads, loops over a fixed range, loops with no collective inside,
    the keys of a per-rank checkpoint, and loops whose trip count the analysis cannot judge.

    ## Why is this bad?
    The rank with fewer iterations finishes its loop and moves on; the others still enter the
    collective in their extra iterations and wait for it forever (or pair with an unrelated later
    collective). With uneven shards this shows up as a hang at the end of the first epoch.

    ## Example
    ```python
    shard = files[rank::world_size]  # 10 files on 4 ranks: 3, 3, 2, 2
    for path in shard:
        loss = ddp_model(load(path)).sum()
        loss.backward()  # gradient all-reduce: ranks 2 and 3 stop one step early
    ```

    ## Use instead
    ```python
    with ddp_model.join():  # ranks that run out shadow the others' collectives
        for path in shard:
            loss = ddp_model(load(path)).sum()
            loss.backward()
    ```
    or give every rank the same number of items (`DistributedSampler` pads the last ones). For a
    helper that equalises its count only when given the group, pass it:
    `make_micro_batches(seqs, budget, dp_group=dp_group)`.

    ## Fix safety
    There is no automatic fix.
    """

    code = "DDP110"
    name = "uneven-collective-loop"
    severity = Severity.ERROR
    fix_availability = "never"
    # ``backward``: a loop of a file that spells no collective may still run FSDP2's, through a
    # module the project's other files shard (``_fsdp2_loops``)
    requires_text = (*FLOW_TEXT, "backward")
    requires_reach = True  # a collective site in this file or a module it imports (flow.reach)

    def finish(self, ctx) -> None:
        seen = set()
        for d in [*all_divergences(ctx), *_shard_loops(ctx), *_fsdp2_loops(ctx)]:
            if d.kind != "loop" or id(d.node) in seen:
                continue
            seen.add(id(d.node))
            loop = d.node
            head = loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else loop.test
            kind = "the number of iterations" if isinstance(loop, (ast.For, ast.AsyncFor)) else "the loop test"
            report_divergence(
                ctx, d, head, f"{kind} of this loop", "",
                f"at line {d.site.node.lineno} runs a different number of times on each rank, so the ranks "
                "that finish first leave the others waiting (use `join()` or the same number of items per rank)",
                "collective in the loop",
            )


def _shard_loops(ctx):
    """Loops whose trip count comes from this rank's own shard as the shape analysis sees it
    (a rank-specific file, a project Dataset or generator built from one, an uneven split),
    around a collective site, outside ``join()``."""
    an = for_context(ctx)
    view = an.main
    sh = None
    more_sites = other_call_sites(ctx, an, methods=True)  # callers in the project's other files, asked lazily
    out = []
    done = set()
    # the lines inside a ``for``: a site on no such line has no loop around it (every ``for`` of
    # the file is in ``sem.by_type``), and needs neither the join test nor the walk up
    by_type = ctx.sem.by_type
    in_loop = lines_within((*by_type.get(ast.For, ()), *by_type.get(ast.AsyncFor, ())))
    for scope in scopes(ctx):
        for site in an.sites(view, scope):
            if not in_loop(site.node.lineno) or under_join(view, site.node):
                continue
            child, p = site.node, parent(site.node)
            while p is not None and p is not scope:
                if isinstance(p, (ast.For, ast.AsyncFor)) and child is not p.iter and id(p) not in done:
                    done.add(id(p))
                    if sh is None:
                        sh = shapes_of(an, view)
                    v = sh.trip_count(p.iter, more_sites)
                    if v.varying:
                        out.append(Divergence("loop", site, p, v))
                        break
                if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
                    break
                child, p = p, parent(p)
    return out


def _fsdp2_loops(ctx):
    """Loops with a rank-varying trip count (``uniformity``) around the forward or ``backward()``
    of an FSDP2 module that this file receives from the project's other files: a ``self``
    attribute its class's ``__init__`` stores from a parameter, or a parameter, that every call in
    those files gives a module passed to ``fully_shard`` (``hidden.fsdp2_sites_with_callers``)."""
    an = for_context(ctx)
    view = an.main
    by_type = ctx.sem.by_type
    loops = [*by_type.get(ast.For, ()), *by_type.get(ast.AsyncFor, ())]
    out = []
    callers = None
    ev = None
    for loop in loops:
        # a call that may run such a module: ``backward()``, ``self.<attr>(...)``, or a parameter
        fn = ctx.sem.enclosing_function(loop)
        params = set(param_names(fn)) if fn is not None else set()
        if not any(isinstance(n, ast.Call) and (
                isinstance(n.func, ast.Attribute) and (n.func.attr == "backward" or (
                    isinstance(n.func.value, ast.Name) and n.func.value.id == "self"))
                or isinstance(n.func, ast.Name) and n.func.id in params) for st in loop.body for n in subtree(st)):
            continue
        if under_join(view, loop):
            continue
        if ev is None:
            ev = an.evaluator(view)
        v = ev.trip_count(loop.iter)
        if not v.varying:
            continue
        if callers is None:
            callers = other_call_sites(ctx, an)
        sites = fsdp2_sites_with_callers(an, view, loop.body, Effect, Site, callers)
        if sites:
            out.append(Divergence("loop", sites[0], loop, v))
    return out
