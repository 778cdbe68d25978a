from __future__ import annotations

import ast

from ..flow.checkpointing import direct_sites, forward_checkpoints, helper_sites, module_leaves, param_root
from ..flow.ddp_options import strict_ddp_on
from ..flow.modern import hub
from ..model import Severity
from ..registry import Rule
from ..torch_api import DDP_CLASS
from ..flow.wrap_sites import as_ctor, ddp_like_calls


class ReentrantCheckpointWithUnusedSearch(Rule):
    """
    ## What it does
    Checks for reentrant activation checkpointing applied to a module that
    `DistributedDataParallel` wraps with `find_unused_parameters=True` (and no `static_graph`):
    `apply_activation_checkpointing(model, checkpoint_wrapper_fn=partial(checkpoint_wrapper,
    checkpoint_impl=CheckpointImpl.REENTRANT))`, a `lambda`, function or method of a project
    class (`Recompute().wrap`) that returns such a `checkpoint_wrapper(...)`, or `checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.REENTRANT)`
    assigned into the model. The wrapper and the checkpointed module are matched by value flow
    (the wrapper itself, the module it wraps, or a submodule of either; through names, `self`
    attributes, tuples, helpers that take the model as a parameter and helpers in other modules
    of the project that build and return it), whether the checkpointing runs before or after the
    wrap: both fail the same way.

    It also checks a wrapped model (a project class the wrapper's module is built from, here or
    in another module) whose `forward` (its own or the nearest base class's) calls
    `torch.utils.checkpoint.checkpoint` with `use_reentrant=True` or without `use_reentrant`
    (torch then warns and uses the reentrant implementation) on every call: under no `if`,
    `while`, `try` or conditional expression, and after no early `return`. A checkpoint behind a
    flag (`if self.grad_checkpointing:`) is not judged.

    `find_unused_parameters` (and `use_reentrant`) is followed by value flow: a literal, a config
    dict's entry, a namespace attribute stored once, or a command-line option's default
    (`parser.add_argument("--find-unused", default=True)`): the run a user gets without options
    fails.

    Not flagged: `checkpoint_wrapper` without `checkpoint_impl` (it defaults to `NO_REENTRANT`),
    `CheckpointImpl.NO_REENTRANT`, `use_reentrant=False`, a wrapper with `find_unused_parameters`
    off or `static_graph=True`, or a value the analysis does not follow (an option without a
    default, one the program stores into or merges a config file over, a call's result).

    ## Why is this bad?
    With `find_unused_parameters=True` DDP walks the autograd graph of the forward's output to
    find the parameters that took no part. The reentrant checkpoint hides the parameters of the
    checkpointed block from that graph (it re-runs the block inside backward), so DDP marks them
    unused and ready at once; the recomputation in backward then fires their gradient hooks a
    second time and the first backward fails on every rank:

    ```
    RuntimeError: Expected to mark a variable ready only once. ... Parameter at index 12 with name
    encoder.blocks.0.mlp.fc2.bias has been marked as ready twice.
    ```

    ## Example
    ```python
    model = DDP(model, find_unused_parameters=True)
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT),
        check_fn=lambda m: isinstance(m, Block),
    )
    ```

    ## Use instead
    ```python
    model = DDP(model, find_unused_parameters=True)
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
        check_fn=lambda m: isinstance(m, Block),
    )
    ```

    ## Fix safety
    There is no automatic fix: switching to `CheckpointImpl.NO_REENTRANT` (or dropping
    `find_unused_parameters`, or `static_graph=True`) changes memory use and what DDP checks.
    """

    code = "DDP222"
    name = "reentrant-checkpoint-with-unused-search"
    severity = Severity.ERROR
    fix_availability = "never"
    # the file checkpoints (``checkpoint_wrapper``), or builds the wrapper whose module another
    # module of the project checkpoints
    requires_text = ("checkpoint", "find_unused_parameters")

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        ddps = {}
        for d in ddp_like_calls(ctx):  # (a helper's call that forwards all to DDP counts)
            if d.args:
                why = strict_ddp_on(an, view, d)
                if why is not None:
                    ddps[d] = why
        arg_leaves = {}
        for d in ddps:
            for lv, le in module_leaves(an, view, d.args[0], d):
                arg_leaves.setdefault(le, (lv, d))
        reported: set = set()
        # a site of this module: its module is the wrapper (here or in a helper module), or the
        # module a wrapper of this module wraps
        sites = [s for s in direct_sites(an, view) if not param_root(view, s[1], s[0])]
        for c, m, why in (*sites, *helper_sites(an, view)):
            for leaf in module_leaves(an, view, m, c):
                lv, le = leaf
                hit = None
                if lv.sem.call_qualname(le) == DDP_CLASS:
                    if strict_ddp_on(an, *as_ctor(an, leaf)) is not None:
                        hit = as_ctor(an, leaf)
                elif le in arg_leaves:
                    hit = (view, arg_leaves[le][1])
                if hit is not None and c not in reported:
                    reported.add(c)
                    self._report(ctx, view, c, m, why, hit)
        # a wrapper of this module whose module a helper module checkpoints (``build_model(cfg)``)
        for le, (lv, d) in arg_leaves.items():
            if lv is view or d in reported:
                continue
            for c, m, why in direct_sites(an, lv):
                if any(le2 is le for _v, le2 in module_leaves(an, lv, m, c)):
                    reported.add(d)
                    self._report_wrap(ctx, d, lv, c)
                    break
        # a wrapped model whose ``forward`` checkpoints reentrantly (``torch.utils.checkpoint``)
        for le, (lv, d) in arg_leaves.items():
            for cv, c in forward_checkpoints(an, lv, le):
                node = c if cv is view else d
                if node in reported:
                    continue
                reported.add(node)
                self._report_forward(ctx, view, node, cv, c, d)

    @staticmethod
    def _where(ctx, view, v, node) -> str:
        if v is view:
            return f"line {node.lineno}"
        return f"{str(v.path).replace(chr(92), '/').rsplit('/', 1)[-1]}:{node.lineno}"

    def _report(self, ctx, view, c, m, why, hit) -> None:
        wv, w = hit
        related = [(w, "wrapped with find_unused_parameters=True here")] if wv is view else []
        if why[0] is view and why[1] is not c:
            related.append((why[1], "reentrant checkpoint chosen here"))
        ctx.report(
            c,
            f"reentrant activation checkpointing (`{ast.unparse(why[1])}`, {self._where(ctx, view, *why)}) "
            f"is applied to `{ctx.text(m)}`, which DistributedDataParallel wraps with "
            f"`find_unused_parameters=True` ({self._where(ctx, view, wv, w)}): the recomputation in backward "
            "fires the checkpointed parameters' hooks after DDP already marked them unused, and the first "
            "backward fails with 'Expected to mark a variable ready only once'; use "
            "`CheckpointImpl.NO_REENTRANT` (or `static_graph=True`)",
            related=related,
        )

    def _report_forward(self, ctx, view, node, cv, c, d) -> None:
        flag = "use_reentrant=True" if any(k.arg == "use_reentrant" for k in c.keywords) else \
            "`use_reentrant` left out, which is reentrant"
        ctx.report(
            node,
            f"the model's forward checkpoints reentrantly ({flag}, {self._where(ctx, view, cv, c)}) and "
            f"DistributedDataParallel wraps it with `find_unused_parameters=True` ({self._where(ctx, view, view, d)}): "
            "the recomputation in backward fires the checkpointed parameters' hooks after DDP already marked "
            "them unused, and the first backward fails with 'Expected to mark a variable ready only once'; "
            "pass `use_reentrant=False` (or `static_graph=True`)",
            related=[(d, "wrapped with find_unused_parameters=True here")] if node is not d else [],
        )

    def _report_wrap(self, ctx, d, lv, c) -> None:
        ctx.report(
            d,
            "DistributedDataParallel with `find_unused_parameters=True` wraps a module that gets reentrant "
            f"activation checkpointing ({self._where(ctx, None, lv, c)}): the recomputation in backward fires "
            "the checkpointed parameters' hooks after DDP already marked them unused, and the first backward "
            "fails with 'Expected to mark a variable ready only once'; use `CheckpointImpl.NO_REENTRANT` "
            "there (or `static_graph=True`)",
        )
