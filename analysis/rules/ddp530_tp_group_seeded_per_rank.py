from __future__ import annotations

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES
from ..source import SourceText
from ..flow.call_sites import project_target, sites
from ..flow.modern import PARALLELIZE, hub
from ..flow.params import by_name_only
from ..flow.seeds import _event, seed_in_force
from ._common import project_files_naming


class TpGroupSeededPerRank(Rule):
    """
    ## What it does
    Checks for torch's random generator seeded with a value that differs between the ranks of
    one tensor-parallel group (the global rank: `torch.manual_seed(seed + dist.get_rank())`, the
    environment's `RANK` or `LOCAL_RANK`, directly or through a seeding helper or a method of a
    shared context object, in any module) when that seed is in force where the program applies
    tensor parallelism: a call of `parallelize_module`, or of a project function that makes one,
    in any module of the project. The finding is on the seeding call.

    A seed built from a rank within one dimension of a `DeviceMesh`
    (`mesh["dp"].get_local_rank()`) or a process group (`dist.get_rank(dp_group)`), a seed alike
    on every rank, or a seed set only after the parallelisation is not flagged.

    ## Why is this bad?
    Tensor parallelism splits some layers over the ranks of a TP group and treats everything else
    (embeddings, norms, the output head, the activations entering a `ColwiseParallel` layer) as
    replicated: every rank of the group must hold the same values there. Seeded per global rank,
    the ranks of one group initialise the non-parallelised modules differently and draw different
    dropout masks, so the "replicated" activations differ between them; the sharded layers then
    combine parts of different computations and the ranks report different losses. Nothing
    raises.

    ## Example
    ```python
    torch.manual_seed(args.seed + dist.get_rank())  # differs inside each TP group
    model = Net().cuda()
    parallelize_module(model.mlp, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    ```

    ## Use instead
    ```python
    torch.manual_seed(args.seed + mesh["dp"].get_local_rank())  # alike inside each TP group
    model = Net().cuda()
    parallelize_module(model.mlp, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    ```

    ## Fix safety
    There is no automatic fix: which mesh dimension the seed should follow is the user's choice.
    """

    code = "DDP530"
    name = "tp-group-seeded-per-rank"
    severity = Severity.ERROR
    requires_text = ("seed",)

    def finish(self, ctx) -> None:
        if not ctx.sem.calls:
            return
        an, view = hub(ctx)
        mine = _rank_seeds(an, view)
        if not mine:
            return
        done = set()
        for sv, site in _tp_sites(ctx, an):
            seed = seed_in_force(an, sv, site)
            if seed is None or seed.view is not view or id(seed.call) not in mine or id(seed.call) in done \
                    or not _global(seed):
                continue
            done.add(id(seed.call))
            src = f" ({seed.src.desc})" if seed.src.desc else ""
            msg = (f"torch's generator is seeded with a value that differs between ranks{src} and this seed is in "
                   "force where the program applies tensor parallelism: the ranks of one TP group initialise the "
                   "replicated (non-parallelised) modules differently and draw different dropout masks, so the "
                   "activations the parallel layers take as replicated differ between them; seed with the "
                   "data-parallel rank (`mesh[\"dp\"].get_local_rank()`), alike on the ranks of a TP group")
            if sv is view:
                related = [(site, "tensor parallelism applied here")]
            else:
                related = [("file", sv.path, SourceText(sv.text).node_range(site), "tensor parallelism applied here")]
            ctx.report(seed.call, msg, related=related)


def _global(seed) -> bool:
    """A rank-varying seed whose rank varies inside a TP group: not a rank within a mesh
    dimension or a process group, and rank-varying by flow (not only by a parameter's name)."""
    return seed.kind == "V" and seed.src is not None and seed.src.group is None and not by_name_only(seed)


def _rank_seeds(an, view) -> set:
    """ids of this file's calls that seed torch's generator with a value that varies over every
    rank: a seeding call, or a call of a project helper given such a seed (``seed_in_force`` then
    names the call of this file)."""
    out = set()
    for c in view.sem.calls:
        fn = view.sem.enclosing_function(c)
        got = _event(an, view, fn, c, 0)
        if got is not None and got.call is c and _global(got):
            out.add(id(c))
    return out


def _tp_sites(ctx, an) -> list:
    """(view, call) of the project's calls that apply tensor parallelism: ``parallelize_module``
    itself, and the calls of the project functions that make one (``sites``), in any module."""
    wanted = frozenset(PARALLELIZE)
    out, names = [], set()
    # this file always; the others when the project's listing is complete
    for fctx, fv in project_files_naming(ctx, {"parallelize_module"}) or [(ctx, an.main)]:
        for c in fctx.calls_to(*PARALLELIZE):
            out.append((fv, c))
            fn = fv.sem.enclosing_function(c)
            if isinstance(fn, FUNC_TYPES):
                names.add(fn.name)
    if not names:
        return out
    for _fctx, fv in project_files_naming(ctx, names) or [(ctx, an.main)]:
        for c in fv.sem.calls:
            if (fv.sem.call_qualname(c) or "").startswith("torch."):
                continue
            target = project_target(an, fv, c)
            if target is not None and sites(an, *target, wanted):
                out.append((fv, c))
    return out
