from __future__ import annotations

import ast

from ..flow.bindings import contains
from ..model import Severity
from ..registry import NoCase, Rule
from ..semantic import get_arg, terminal_name
from ..flow.rank import rank_guard, terminates
from ..flow.testing import expects_error
from ..flow.wrappers import wrapper_functions
from ._common import ALL_COLLECTIVES, D, lines_within
from ..flow import for_context
from ..flow.group_ctors import WHAT, group_divergences
from ._flow import (all_divergences, call_words, effect_related, effect_words, elsewhere, node_related,
                    scopes, source_related, source_words, text, vtext, where)

# everything every rank of the group must call (point-to-point send/recv are not collectives)
_COLLECTIVES = tuple(dict.fromkeys(ALL_COLLECTIVES + (
    "broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
    "all_to_all", "all_to_all_single", "reduce_scatter", "reduce_scatter_tensor", "new_group",
)))
# positional index of the ``group`` argument, where it has one
_GROUP_POS = {
    "all_reduce": 2, "broadcast": 2, "reduce": 3, "all_gather": 2, "all_gather_into_tensor": 2,
    "gather": 3, "scatter": 3, "reduce_scatter": 3, "reduce_scatter_tensor": 3, "all_to_all": 2,
    "all_to_all_single": 4, "barrier": 0, "monitored_barrier": 0, "all_gather_object": 2,
    "gather_object": 3, "broadcast_object_list": 2, "scatter_object_list": 3,
}
_COLLECTIVE_QNS = tuple(D + n for n in _COLLECTIVES)  # (spelled once: asked on every check)


class CollectiveUnderRankGuard(Rule):
    """
    ## What it does
    Checks for a collective (`all_reduce`, `all_gather*`, `broadcast*`, `barrier`, `gather*`,
    `scatter*`, `reduce*`, `all_to_all*`, the object collectives, and `new_group`, which every rank
    must call too) that runs only on some ranks: inside an `if` on the rank (`rank == 0`,
    `dist.get_rank() == 0`, `local_rank != 0`, `not is_main`, `is_main_process()`-style helpers
    defined in the file or imported, boolean combinations), in its `else`, or after an early
    `if not is_main: return`, when the other ranks never make the same collective. A test that
    makes the failure on purpose is not flagged: the collective sits in `with pytest.raises(...)` /
    `with self.assertRaises(...)`, or in the body of a test marked `@unittest.expectedFailure` or
    `@pytest.mark.xfail` with no condition (an `xfail(sys.platform == "win32")` test must pass
    elsewhere; a helper such a test calls is still checked).

    Beyond the rank itself, any condition whose value differs between ranks counts: one computed
    from this rank's data (`if preds.any():`, a loss, a metric over the local shard), the wall
    clock, unseeded random numbers, or a helper that returns such a value (`is_main_process()`
    defined in this file or imported from the project). So does the length of a list that gets an
    item only where such a test on this rank's data holds (`if (y > 0).any(): kept.append(x)` in a
    loop over this rank's batches, then `if len(kept) > 0:`). So does `x is not None` where such a
    condition chooses between None and a value that is never None (`images = images if found else
    None`, with `found` set from this rank's batch; `extra = None` then `if batch_has_mask: extra =
    {}`; `writer = Writer(path) if rank == 0 else None`, where constructing a project class never
    gives None; the same of `self.writer` bound so by a method of its class), also when `x`
    reaches a helper as its parameter, through any number of calls of the
    same file (functions, `self.<method>(...)`, a method of an object held on `self`): the helper's
    summary says whether one of its calls passes such a choice, with each caller read as its own
    callers run it, and the finding is at the helper's collective. A value that may be None on
    every rank (a call's result, a parameter no call of the file chooses) is not judged. And beyond direct calls, the collective
    may be implicit or inside a helper: `evaluate(model)` whose body (in this file or another file
    of the project) ends in `all_gather_object`, DDP's buffer broadcast in the forward of a wrapped
    model with gradients enabled, DDP's gradient all-reduce in `loss.backward()`. The finding names
    the condition, the source of the variance and the collective inside the callee. Values the
    analysis cannot judge never produce a finding.

    Helpers are analysed as each call runs them. A helper that receives the DDP-wrapped model as a
    parameter (`validate(ddp_model, loader)`, `Trainer(DDP(net)).fit()`, a method of a project
    object held on `self` such as `self.evaluator.run(self.model)`, where every binding of
    `self.evaluator` builds one project class or None, in this file or another) makes the
    collectives of that model: its forward broadcasts the module's buffers when the
    module has any (BatchNorm running statistics, registered buffers), with or without gradients,
    since DDP skips the broadcast only after a forward without gradients has run; a module known to
    have no buffers makes no collective in its forward. A model wrapped only on a distributed run
    (`if distributed: model = DDP(model)`, then `self.model = model`) holds the wrapper wherever a
    collective matters: the plain module reaches the forward only on a run with no other rank. A condition inside a helper on a parameter
    that the call makes rank-varying (`reduce_mean(x)` under `if num_pos > 0:` in a loss helper that
    receives this rank's targets) counts too; when the helper lives in another file, the finding is
    reported at the call.

    The other ranks' counterpart must be a collective that only they make: the other branch, or a
    collective under a condition of its own elsewhere in the function. A collective that every
    rank makes is no counterpart: `if rank == 0: validate(ddp_model)` beside the training forward,
    or `if is_main: export()` (which ends in `synchronize()`) before a `synchronize()` on every
    rank, leaves rank 0 with one collective more than the others. The same holds for `new_group`
    (paired by call order on every rank): `if rank == 0: new_group([0])` followed by a
    `new_group([0, 1])` on every rank leaves rank 0 with one more, and it then waits in its second
    one forever. A `new_group(..., use_local_synchronization=True)` is made by its members only and
    is not reported.

    Group construction is judged by any rank-varying condition, as collectives are: every rank of
    the default group must create every group, in the same order, even the ranks that are not its
    members. A loop over the layout that makes only this rank's group (`for ranks in layout: if
    rank in ranks: g = new_group(ranks)`, `if rank // k == i:`, `if rank not in ranks: continue`),
    in a helper of any module, a method, with the rank unpacked from a tuple, is reported at the
    `new_group`; so are `new_subgroups*`, `split_group`, `init_device_mesh` and `DeviceMesh(...)`
    (they call `new_group` for every group) under such a condition. So is a call of a project
    function that makes a group on every call, through any number of helpers, in this file or
    another module, a method or a constructor (`if rank in members: g = make_group(members)` with
    `def make_group(r): return dist.new_group(r)` in `utils/dist.py`): the finding is at the call and
    names the constructor inside. A helper that makes its group only behind a condition of its own (a
    memo, `if _GROUP is None:`) is not counted. Making every group and keeping only the handle of
    one's own (`g = new_group(ranks)` or `g = make_group(ranks)`, then `if rank in ranks: mine = g`)
    is correct.

    Collectives hidden in the modern stack count the same way (the table is
    `analysis/runtime/shim_vocab.py`, version-tagged and checked on torch 2.13): the forward and
    backward of a `fully_shard` module (FSDP2's all-gather and reduce-scatter, with or without
    gradients; also a `self.model` that `__init__` copies from a parameter every construction in
    the file fills with a sharded module), `DTensor.full_tensor()`
    / `redistribute()` / `distribute_tensor()`, `get_model_state_dict` / `get_optimizer_state_dict` /
    `get_state_dict` with `full_state_dict=True`, `set_*state_dict` with `broadcast_from_rank0=True`,
    `dcp.save` / `dcp.load` / `dcp.async_save`, `clip_grad_norm_` over FSDP2 parameters, FSDP1's
    `summon_full_params` and full optimizer state dicts, and a `torch.compile`d function that makes
    a collective. A helper that gathers the DTensors of a module it receives only behind
    `if isinstance(t, DTensor):` (`for k, t in net.state_dict().items(): full = t.full_tensor()`,
    also through a helper that receives `t`) makes the all-gather when the call passes a
    `fully_shard` module; given a module that was never sharded, it makes none. Likewise a helper whose collective runs behind a flag that only a
    wrapped or sharded argument makes true (`distributed = any(_is_sharded(m) for m in models)` then
    `if distributed: dist.barrier()`, `_is_sharded` testing `isinstance(m, FSDP)` or DTensor
    parameters) makes none at a call that passes plain modules of the project's classes, never
    wrapped nor sharded; given an FSDP or `fully_shard` module, or a value not known, it makes it. The same holds for
    the moments an optimizer keeps of those parameters, which torch builds like the parameter (a
    DTensor sharded the same way): `v = opt.state[p]["exp_avg_sq"]` of a `p` of the sharded
    module's `parameters()`, or an entry of `opt.state.values()` of an optimizer built over
    them, gathered behind `if isinstance(v, DTensor): v = v.full_tensor()` (the `step` count is a
    plain tensor and is not counted). The same gather written inline under the rank test (`for k, v
    in self.model.state_dict().items(): if isinstance(v, DTensor): v = v.full_tensor()`, or the
    conditional expression) counts when the module is sharded by `fully_shard` or split by
    `parallelize_module` (tensor parallel), also when the class keeps it after sharding a local
    (`fully_shard(m); self.model = m`); so does a method of the module's own class that gathers
    `self.state_dict()` that way (`model.export(path)` of a project model class, the model built
    through helpers and `.to(device)`). The rank test may be a property or a dataclass field of an
    object built with the rank (`args.should_save` returning `self.process_index == 0` of
    `Args(process_index=dist.get_rank())`).

    Point-to-point `send` / `recv` / `isend` / `irecv` are not collectives. Calls with an explicit
    `group=` (a subgroup of the guarded ranks) are not flagged, nor is a guarded collective whose
    counterpart the other ranks make elsewhere in the same function (the staggered
    `if local_rank != 0: barrier()` ... `if local_rank == 0: barrier()` pattern). A test on the key
    of a dict that holds this rank's values under names the same on every rank (`for name, v in
    stats.items(): if name == "loss":`) is not rank-varying; one on keys named after the rank is.
    Nor is a field named like a rank of a nested configuration object (`cfg.lora.rank > 0`, the
    size of a LoRA adapter) that nothing in the module fills with a computed value: a
    configuration value, the same on every process (`args.rank` and `self.rank` keep their name's
    reading, and `cfg.dist.rank = int(os.environ["RANK"])` in the module makes the field a rank).

    ## Why is this bad?
    Every rank of the group must enter every collective, in the same order. A collective that only
    rank 0 calls waits for ranks that never come: the job hangs, and minutes later the NCCL watchdog
    kills it:

    ```
    [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE,
    NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 milliseconds before timing out.
    ```

    ## Example
    ```python
    if dist.get_rank() == 0:
        val_loss = evaluate(model)
        dist.all_reduce(val_loss)  # the other ranks never get here: hang
    ```

    ## Use instead
    ```python
    val_loss = evaluate(model)
    dist.all_reduce(val_loss)  # every rank
    if dist.get_rank() == 0:
        print(val_loss)
    ```

    ## Fix safety
    There is no automatic fix: moving the collective out of the guard changes which ranks do the
    work around it.
    """

    code = "DDP104"
    name = "collective-under-rank-guard"
    severity = Severity.ERROR
    fix_availability = "never"
    # the direct check resolves torch.distributed.* names; the flow check (helpers, implicit
    # collectives) needs a collective site: a torch.distributed import, a DDP/FSDP wrapper, or a
    # project helper module (spelled here by the usual "dist"/"comm" module names)
    requires_text = ("reduce", "gather", "broadcast", "barrier", "scatter", "all_to_all", "new_group",
                     NoCase("dist"), "comm", "backward", "Parallel",
                     "full_tensor", "summon_full_params", "full_optim_state_dict")  # hidden collectives (flow/hidden.py)
    requires_reach = True  # a collective site in this file or a module it imports (flow.reach)

    def finish(self, ctx) -> None:
        self._direct(ctx)
        self._groups(ctx, self._flow(ctx))

    def _groups(self, ctx, seen) -> None:
        """Group constructions (``new_group``, ``new_subgroups*``, ``split_group``, a device mesh,
        or a project helper that makes one on every call) that a rank-varying condition the direct
        check does not read decides (``rank in ranks``, ``rank // k == i``): the semantic layer's
        ``group_ctors``. ``seen``: the calls ``_flow`` reported (a helper that makes a collective
        and a group is reported once)."""
        an = for_context(ctx)
        for s in scopes(ctx):
            for d in group_divergences(an, an.main, s):
                c = d.site.node
                if (ctx.qn(c) in _COLLECTIVE_QNS and rank_guard(ctx, c) is not None) or expects_error(c) \
                        or id(c) in seen:
                    continue  # the direct check owns new_group under a rank guard
                cond = text(ctx, d.node.test)
                if d.kind == "exit":
                    where = f"only on the ranks that pass the early exit under `{cond}`"
                elif isinstance(d.node, ast.If) and c in _walk_block(d.node.body) or \
                        isinstance(d.node, ast.IfExp) and contains(d.node.body, c):
                    where = f"only where `{cond}`"
                else:
                    where = f"only where `{cond}` is false"
                through = effect_words(ctx, d.site)[len(WHAT):]  # `` (through `make_group`, line 7)``
                ctx.report(
                    c,
                    f"`{text(ctx, c.func)}(...)` creates a process group{through} {where}, and `{cond}` is rank-varying "
                    f"({source_words(ctx, d.value)}); every rank must create every group, in the same order, even "
                    "the ranks that are not its members, or the ranks' groups no longer match and the first "
                    "collective on them hangs: create it on every rank and keep the handle only where it is a member",
                    related=[(d.node.test, "rank-varying condition"), *source_related(ctx, d.value),
                             *effect_related(ctx, d.site)],
                )

    def _flow(self, ctx) -> set:
        """Helpers, implicit collectives and data-dependent conditions (the semantic layer)."""
        seen = set()
        for d in all_divergences(ctx):
            if d.kind != "cond" or id(d.site.node) in seen:
                continue
            site = d.site
            if elsewhere(ctx, d):
                self._in_callee(ctx, d, seen)
                continue
            seen.add(id(site.node))
            if site.kind == "explicit" and rank_guard(ctx, site.node) is not None:
                continue  # the direct check owns collectives under a rank guard
            if expects_error(site.node):
                continue
            cond = text(ctx, d.node.test)
            call = text(ctx, site.node)
            branch = "" if (isinstance(d.node, ast.If) and site.node in _walk_block(d.node.body)) or \
                (isinstance(d.node, ast.IfExp) and contains(d.node.body, site.node)) else " is false"
            ctx.report(
                site.node,
                f"`{call}` runs only where `{cond}`{branch}, and `{cond}` is rank-varying "
                f"({source_words(ctx, d.value)}); it makes {effect_words(ctx, site)}, which the other ranks "
                "never make, so it hangs until the watchdog timeout",
                related=[(d.node.test, "rank-varying condition"), *source_related(ctx, d.value),
                         *effect_related(ctx, site)],
            )
        return seen

    def _in_callee(self, ctx, d, seen) -> None:
        """A condition inside a function of another file, rank-varying because of what this
        file's call passes it: reported at the call."""
        call = d.ctx.call
        key = (id(call), id(d.site.node))
        if key in seen or not d.ctx.binds and not d.ctx.wraps:
            return
        seen.add(key)
        path = d.view.path
        cond = vtext(d.view, d.node.test)
        ctx.report(
            call,
            f"`{text(ctx, call)}` passes {call_words(ctx, d)} to `{d.ctx.fname}`; there `{cond}` "
            f"({where(ctx, path, d.node)}) is rank-varying ({source_words(ctx, d.value)}) and decides whether "
            f"`{vtext(d.view, d.site.node)}` ({where(ctx, path, d.site.node)}) makes {effect_words(ctx, d.site)}, "
            "which the other ranks never make, so it hangs until the watchdog timeout",
            related=[node_related(ctx, path, d.node.test, "rank-varying condition"),
                     node_related(ctx, path, d.site.node, "the collective inside the callee"),
                     *source_related(ctx, d.value)],
        )

    def _direct(self, ctx) -> None:
        calls = ctx.calls_to(*_COLLECTIVE_QNS)
        if not calls:
            return
        guarded = []
        may_guard = _guardable(ctx)
        for c in calls:
            g = rank_guard(ctx, c) if may_guard(c.lineno) else None
            guarded.append((c, g))
        # the same collective by function: how many calls, and how many under each guard (an
        # index built once: each guarded call then asks in constant time)
        tree = ctx.sem.tree
        enclosing = ctx.sem.enclosing_function
        groups: dict[tuple, list] = {}
        keys: dict[int, tuple] = {}
        for c, g in guarded:
            k = (ctx.qn(c), enclosing(c) or tree)
            got = groups.get(k)
            if got is None:
                got = groups[k] = [0, {}]
            got[0] += 1
            if g is not None:
                gk = keys[id(c)] = g.key(ctx)
                got[1][gk] = got[1].get(gk, 0) + 1
        helpers = _HelperIndex(ctx)
        for c, g in guarded:
            if g is None:
                continue
            qn = ctx.qn(c)
            op = qn[len(D):]
            if _on_subgroup(c, op) or expects_error(c):
                continue
            scope = enclosing(c) or tree
            key = keys[id(c)]
            # the other ranks make the same collective elsewhere in this function (a call not
            # under this same guard): stay silent
            n, by_key = groups[(qn, scope)]
            others = n - by_key[key]
            if op == "new_group":
                # new_group pairs by call order: an unguarded one runs on the guarded ranks too, so
                # they still make one more; only a call under another guard can balance this one
                others = sum(v for k2, v in by_key.items() if k2 != key)
            if others > 0:
                continue
            if helpers.elsewhere(c, op, scope, key):
                continue
            cond = ctx.text(g.if_node.test)
            if g.branch == "body":
                where = f"only where `{cond}`"
            elif g.branch == "orelse":
                where = f"only where `{cond}` is false"
            else:
                where = f"only on the ranks that pass the early exit `if {cond}:`"
            tail = ("every rank must create every group, in the same order, even the ranks that are not its "
                    "members: create it on every rank and keep the handle only where it is a member"
                    if op == "new_group" else "so it hangs until the watchdog timeout")
            ctx.report(
                c,
                f"`{op}` runs {where}; the other ranks never make this collective, {tail}",
                related=[(g.if_node.test, "rank guard")],
            )


_SYNC_NAMES = ("synchronize", "wait_for_everyone", "barrier", "sync")


class _HelperIndex:
    """The other ranks may make the collective through a helper: a function of this file that
    wraps a collective, or one named after it (``comm.synchronize()``, ``all_reduce_mean(x)``).

    The candidate calls of a function and an op are found once (the calls of the file grouped by
    function once, each call's name and guard computed once), with how many there are and how
    many sit under each guard: ``elsewhere`` is then a lookup, not a pass over every call."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._by_scope: dict | None = None
        self._per_op: dict = {}
        self._guards: dict[int, tuple | None] = {}

    def _scopes(self) -> dict:
        if self._by_scope is None:
            ctx = self.ctx
            wrappers = wrapper_functions(ctx, _COLLECTIVE_QNS, "collectives")
            tree, enclosing = ctx.sem.tree, ctx.sem.enclosing_function
            out: dict = {}
            for k in ctx.sem.calls:
                n = terminal_name(k.func)
                if not n or (ctx.qn(k) or "").startswith(D):
                    continue
                out.setdefault(enclosing(k) or tree, []).append((k, n in wrappers, n.lower()))
            self._by_scope = out
        return self._by_scope

    def _key(self, k):
        got = self._guards.get(id(k), False)
        if got is False:
            og = rank_guard(self.ctx, k)
            got = self._guards[id(k)] = None if og is None else og.key(self.ctx)
        return got

    def elsewhere(self, call, op, scope, key) -> bool:
        got = self._per_op.get((scope, op))
        if got is None:
            n, by_key = 0, {}
            sync = op in ("barrier", "monitored_barrier")
            for k, wraps, low in self._scopes().get(scope, ()):
                if wraps or op in low or (sync and any(s in low for s in _SYNC_NAMES)):
                    n += 1
                    gk = self._key(k)
                    if gk is not None:
                        by_key[gk] = by_key.get(gk, 0) + 1
            got = self._per_op[(scope, op)] = (n, by_key)
        # ``call`` itself is a torch.distributed call: never among the candidates
        n, by_key = got
        return n > by_key.get(key, 0)


def _guardable(ctx):
    """A cheap test of a line, false only where ``rank_guard`` cannot find a guard: a guard is an
    ``if`` around the node (whose lines hold the node's first line) or an early-exit ``if`` (body
    ending in return/raise/continue/break, no else) before it in an enclosing block (ended by the
    node's first line). Every ``if`` of the file is in ``sem.by_type``."""
    ifs = ctx.sem.by_type.get(ast.If, ())
    inside = lines_within(ifs)
    first_exit = None
    for n in ifs:
        if not n.orelse and terminates(n.body) and (first_exit is None or n.end_lineno < first_exit):
            first_exit = n.end_lineno
    if first_exit is None:
        return inside
    return lambda line: line >= first_exit or inside(line)


def _on_subgroup(call: ast.Call, op: str) -> bool:
    if op == "new_group":
        # ``use_local_synchronization=True``: only the member ranks call it
        v = get_arg(call, None, "use_local_synchronization")
        return v is not None and not (isinstance(v, ast.Constant) and v.value is False)
    grp = get_arg(call, _GROUP_POS.get(op), "group")
    if grp is None:
        return False
    if isinstance(grp, ast.Constant) and grp.value is None:
        return False
    if isinstance(grp, ast.Attribute) and grp.attr == "WORLD":
        return False
    return True


def _walk_block(block: list) -> list:
    class _Any(list):
        def __contains__(self, node):
            return any(contains(st, node) for st in block)
    return _Any()
