from __future__ import annotations

import ast

from ..flow import for_context
from ..flow.bcast_sizes import broken_contracts, partial_broadcasts
from ..flow.bindings import reaching
from ..flow.dtypes import branch_dtype_splits
from ..flow.shapes import shapes_of
from ..flow.helper_calls import bind_args, callee_name, helper_calls, may_import_project, resolved
from ..flow.sinks import SHAPED, arg_fact, per_rank_buffers, shape_sinks, shaped_calls
from ..flow.summaries import on_subgroup
from ..semantic import get_arg
from ..torch_api import D
from ..model import Severity
from ..registry import NoCase, Rule
from ._common import other_call_sites
from ._flow import effect_related, effect_words, source_related, source_words, text

_SHAPED_QNS = tuple(D + op for op in SHAPED)  # (spelled once, asked every check)


class RankVaryingShape(Rule):
    """
    ## What it does
    Checks for the tensor given to `all_gather`, `all_gather_into_tensor`, `all_reduce`,
    `reduce_scatter` or `reduce_scatter_tensor` when its shape is computed from sizes that differ
    between ranks, with no padding to a size every rank agrees on. The shape is followed through
    assignments and helpers, in this file and in the other files of the project: a helper that
    builds the tensor from its arguments (`make_buffer(len(hits), 8)`), or one that hands its
    parameter to the collective (`concat_all_gather(x[:, :local_len])`), is flagged at the
    call, naming the helper chain and the collective inside it. A helper of the same file that
    makes the collective itself and is given a rank-varying shape at every one of its calls
    (`def gather_index(embs): bufs = [torch.zeros_like(embs) ...]; dist.all_gather(bufs, embs)`)
    is flagged at its collective instead, where the padding goes. A tensor that a helper returns as
    one element of a tuple (`embs, ids = encode_shard(...)`) keeps its shape.

    Sources of a rank-varying size or shape:
    - a size computed from the rank or from this rank's data (`lengths.max()`, `lengths[rank]`,
      `(preds > 0.5).sum()`), used in `torch.zeros/empty/ones/full/arange(n)`, `new_zeros(n)`,
      `view`/`reshape`, or a slice `x[:, :n]`;
    - `len()` of a list that grows under a test on this rank's data, a comprehension filtered by
      such a test, `x.size(0)` / `x.shape[0]` of a tensor whose length varies;
    - rows a boolean mask keeps (`x[labels == 1]`), `nonzero()` / `argwhere`, `unique()`,
      `masked_select`, one-argument `torch.where`;
    - `torch.bincount(x)` without `minlength` of this rank's values: one entry per value up to the
      largest this rank saw (with `minlength=num_classes` every rank counts the same classes);
    - `torch.tensor(list)` of such a list, `torch.cat` of a varying number of pieces, this rank's
      piece of an uneven split (`np.array_split(x, world)[rank]`);
    - the rows of an evaluation shard: a tensor concatenated from the batches of a loader
      parameter (`def evaluate(model, loader): for x, y in loader: outs.append(model(x))`, then
      `torch.cat(outs)`) is judged at the calls of that function, in this file and the project's
      other files (also a method, or a loader stored by `__init__` from a builder of another file),
      and flagged where it is handed to the gather when a call passes this rank's own items
      without padding: a `DataLoader` over a project `Sampler` whose `__iter__` hands out
      `indices[rank::world]`, over a per-rank `Dataset` / `IterableDataset` without a
      `DistributedSampler`, or over this rank's piece of an uneven split.

    Also checked: a helper that broadcasts a buffer sized by one parameter on the receiving ranks
    and made from another on the source rank (`buf = torch.tensor(values)` on the source,
    `torch.empty(size)` on the others, then `dist.broadcast(buf, src)`), directly or through helpers
    that pass both parameters on, in this file or another one (`flow/bcast_sizes.py`). A call that
    declares a constant size and passes a list or tuple display of another length
    (`broadcast_float_list(3, float_list=values)` with six values) is flagged at the size: the source
    sends six elements, the others receive three.

    And: the buffer of a `broadcast`, `all_reduce`, `reduce` or `all_gather` built with one dtype in
    one arm of a test on the rank and another dtype in the other arm (`buf = torch.tensor([step])`,
    int64, where `rank == 0`; `buf = torch.zeros(1)`, float32, elsewhere): the ranks disagree on the
    byte count. The dtype comes from `dtype=`, the constructor's default, the Python values given to
    `torch.tensor` (followed into helpers' returns and tuple unpacking) and conversions
    (`.long()`, `.to(torch.float64)`); the default floating dtype is not compared with an explicit
    floating one (`torch.set_default_dtype` may make them equal) (`flow/dtypes.py`).

    And: a source rank that broadcasts `torch.tensor(lst)` of a list grown in a loop by pieces of
    unknown length (`lst += take(cluster, k)`), while the other ranks receive into
    `torch.empty(n)`, with no padding or truncation of the list to `n`.

    Not flagged: sizes made uniform by a collective first (`dist.all_reduce(n, op=MAX)`, an
    `all_gather` of the sizes), a size that an `assert` before the collective fixes to a
    rank-uniform value (`assert local.shape[0] == S // world`), padding (`F.pad`, `new_zeros(max_len)` then a copy, `torch.cat`
    with a padding piece sized `max_len - x.size(0)`), truncation to an agreed size, a dimension
    other than the one that varies (`x[mask].shape[1]`), tensors whose values (not shape) differ
    (`torch.tensor([count])`), a window whose bounds move with the rank but whose width does not
    (`x[:, r * (c // 2):(r + 1) * (c // 2)]` has `c // 2` columns on every rank: the two bounds are
    compared as polynomials, a uniform sub-expression written in both being one term), an evaluation loader whose sampler pads (`DistributedSampler`, or
    a project sampler that pads its index list before taking its stride), an `all_gather` whose
    receive buffers are built one per rank from sizes exchanged first
    (`[x.new_empty(int(n), dim) for n in sizes]`: uneven output sizes, which torch supports),
    `all_gather_object`, and anything the analysis cannot follow.

    ## Why is this bad?
    These collectives need the same shape on every rank. NCCL does not check: mismatched sizes
    corrupt the output, hang, or fail much later with an unrelated-looking error such as
    `RuntimeError: Tensors must be CUDA and dense` or a size mismatch in the next operation.

    ## Example
    ```python
    local_max = int(lengths.max())          # differs per rank
    out = [torch.empty_like(x[:, :local_max]) for _ in range(world_size)]
    dist.all_gather(out, x[:, :local_max])
    ```

    An evaluation over an unpadded shard (19877 clips on 8 ranks: 2485 or 2484 rows per rank):
    ```python
    class RankStride(Sampler):
        def __init__(self, dataset):
            self.ids = list(range(len(dataset)))[rank::world_size]  # no padding
        def __iter__(self):
            return iter(self.ids)

    def evaluate(model, loader):
        logits = torch.cat([model(x) for x, _ in loader])
        out = [torch.zeros_like(logits) for _ in range(world_size)]
        dist.all_gather(out, logits)
    ```

    ## Use instead
    ```python
    max_len = lengths.max().clone()
    dist.all_reduce(max_len, op=dist.ReduceOp.MAX)  # the same on every rank
    padded = F.pad(x, (0, int(max_len) - x.shape[1]))
    out = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(out, padded)
    ```
    For an evaluation shard: gather the row counts first, pad to the largest, gather, and trim
    each rank's block to its count (or use `all_gather_object`, or a `DistributedSampler`, which
    pads every rank to the same count).

    ## Fix safety
    There is no automatic fix.
    """

    code = "DDP109"
    name = "rank-varying-shape"
    severity = Severity.ERROR
    fix_availability = "never"
    # the collective's name, or a project helper that makes it (``comm.sync(x)``, ``dist_utils``)
    requires_text = ("gather", "reduce", NoCase("dist"), "comm", "sync")
    requires_reach = True  # a collective site in this file or a module it imports (flow.reach)

    def finish(self, ctx) -> None:
        an = for_context(ctx)
        view = an.main
        self._contracts(ctx, an, view)
        self._partial(ctx, an, view)
        self._dtype_splits(ctx, an, view)
        sh = shapes_of(an, view)
        more_sites = other_call_sites(ctx, an, methods=True)  # callers in the project's other files, asked lazily
        reported = set()
        direct = ctx.calls_to(*_SHAPED_QNS)
        for c in direct:
            op = ctx.qn(c)[len(D):]
            if on_subgroup(c, op):
                continue
            t = get_arg(c, *SHAPED[op])
            if t is None or per_rank_buffers(view, c, op):
                continue
            v = sh.at_callers(sh.shape(t), t, more_sites)
            if not v.varying or id(t) in reported:
                continue
            reported.add(id(t))
            ctx.report(
                t,
                f"the shape of `{text(ctx, t)}` is computed from rank-varying sizes ({source_words(ctx, v)}); "
                f"`{op}` needs the same shape on every rank: agree on the size first (all_reduce with MAX) "
                "and pad to it",
                related=[*source_related(ctx, v), *_binding_related(ctx, view, t)],
            )
        for c in helper_calls(view, ctx.sem.calls, bool(direct) or may_import_project(view), an, SHAPED,
                              ctx=ctx):
            target = resolved(an, view, c)
            if target is None or target[1] is ctx.sem.enclosing_function(c):
                continue
            sinks = shape_sinks(an, *target)
            if not sinks:
                continue
            args = bind_args(c, target[1])
            name = callee_name(target)
            for s in sinks:
                a = args.get(s.param)
                if a is None or id(a) in reported:
                    continue
                v = sh.at_callers(arg_fact(sh, a, s.mode), a, more_sites)
                if not v.varying:
                    continue
                reported.add(id(a))
                inside = _inside_helper(an, view, target, s, sh)
                if inside is not None:
                    # the helper of this file that makes the collective is given a rank-varying
                    # shape at every call: the receive buffers it sizes from its parameter are the bug
                    coll, t = inside
                    if id(t) not in reported:
                        reported.add(id(t))
                        ctx.report(
                            t,
                            f"the shape of `{text(ctx, t)}` is rank-varying at every call of `{name}()` "
                            f"(`{text(ctx, a)}`, line {a.lineno}: {source_words(ctx, v)}); `{s.effect.op}` needs "
                            "the same shape on every rank: agree on the size first (all_reduce with MAX), pad "
                            "to it, and trim what comes back",
                            related=[(a, "the call that passes a rank-varying shape"), *source_related(ctx, v)],
                        )
                    continue
                eff = s.effect.through(name)
                site = _Site(eff)
                what = "shape" if s.mode == "shape" else "value"
                ctx.report(
                    a,
                    f"the {what} of `{text(ctx, a)}` is rank-varying ({source_words(ctx, v)}), and "
                    f"`{name}()` hands {effect_words(ctx, site)} a tensor shaped by its parameter "
                    f"`{s.param}`: `{eff.op}` needs the same shape on every rank: agree on the size first "
                    "(all_reduce with MAX) and pad to it",
                    related=[*source_related(ctx, v), *_binding_related(ctx, view, a), *effect_related(ctx, site)],
                )


    def _partial(self, ctx, an, view) -> None:
        """The source broadcasts a list grown in a loop; the others receive a fixed size."""
        for c, t, alloc, src, grow in partial_broadcasts(an, view):
            lst = src.args[0].id
            ctx.report(
                t,
                f"the source rank broadcasts `{text(ctx, src)}`, whose length is that of `{lst}` grown in a "
                f"loop by pieces of unknown length (line {grow.lineno}), but the other ranks receive into "
                f"`{text(ctx, alloc)}`: when `{lst}` falls short, `broadcast` gets different sizes (hang, or "
                f"garbage in the receivers' tail); pad `{lst}` to that size first",
                related=[(grow, f"`{lst}` grows here"), (alloc, "the receivers' size")],
            )

    def _dtype_splits(self, ctx, an, view) -> None:
        """One arm of a rank test builds the collective's buffer with one dtype, the other arm with
        another (``flow/dtypes.py``)."""
        for c, t, (a, da), (b, db), test_if in branch_dtype_splits(an, view):
            op = ctx.qn(c)[len(D):]
            ctx.report(
                t,
                f"`{t.id}` is {da.words()} where `{text(ctx, test_if.test)}` holds (line {a.lineno}) and "
                f"{db.words()} on the other ranks (line {b.lineno}), and `{text(ctx, test_if.test)}` is "
                f"rank-varying; `{op}` needs the same dtype on every rank (the ranks disagree on the byte "
                "count: an error, a hang or reinterpreted values): build both with the same `dtype=`",
                related=[(a, f"{da.words()} here"), (b, f"{db.words()} here"), (test_if.test, "the rank test")],
            )

    def _contracts(self, ctx, an, view) -> None:
        """Calls that declare a broadcast size other than the length of the list they send
        (``flow/bcast_sizes.py``)."""
        for c, target, size, n, s_arg, p_arg in broken_contracts(an, view):
            name = callee_name(target)
            k = target[0].path == view.path
            where = "" if k else " (in another file)"
            declared = f"`{text(ctx, c)}` declares" if s_arg is not None else \
                f"`{name}()` hands its parameter on to a broadcast that declares"
            ctx.report(
                s_arg if s_arg is not None else p_arg,
                f"{declared} {size} elements, but `{text(ctx, p_arg)}` holds {n}: "
                f"`{name}()`{where} broadcasts the list as it is from the source rank and receives "
                f"into a buffer of the declared size on the others; `broadcast` needs the same size on "
                f"every rank (the receivers get {'truncated' if size < n else 'garbage'} values or the job "
                "hangs): pass the list's length",
                related=[(p_arg, f"{n} elements")],
            )


def _inside_helper(an, view, target, sink, sh):
    """(collective, tensor argument) when ``sink``'s collective sits directly in ``target``, a
    function of this file whose every call here passes a rank-varying shape (or size) for the
    sink's parameter: the helper is never given what its collective needs, so the finding goes
    where the fix goes (a helper of another file, or one with a call that passes a uniform shape,
    is reported at the call)."""
    tv, fn = target
    eff = sink.effect
    if tv is not view or eff.via or eff.path != view.path:
        return None
    calls = an.call_sites(view, fn)
    if not calls or len(calls) > 8:
        return None
    for c in calls:
        a = bind_args(c, fn).get(sink.param)
        if a is None or not arg_fact(sh, a, sink.mode).varying:
            return None
    for c, _op, t in shaped_calls(view, fn):
        if (c.lineno, c.col_offset) == (eff.line, eff.col):
            return c, t
    return None


def _binding_related(ctx, view, e):
    """The assignment that gives the argument (a name) its shape, when one alone reaches it."""
    if not isinstance(e, ast.Name):
        return []
    kind, evs = reaching(view, e.id, e)
    if kind != "events" or not evs or len(evs) != 1 or not isinstance(evs[0], ast.Assign):
        return []
    return [(evs[0], f"`{e.id}` gets its shape here")]


class _Site:
    def __init__(self, eff):
        self.effects = (eff,)
