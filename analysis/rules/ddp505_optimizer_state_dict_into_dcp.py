from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._common import other_call_sites
from ..flow.modern import DCP_LOAD, DCP_SAVE, content_calls, hub, is_optimizer


class OptimizerStateDictIntoDcp(Rule):
    """
    ## What it does
    Checks for `optimizer.state_dict()` given to `torch.distributed.checkpoint` (`dcp.save`,
    `dcp.async_save`, `dcp.load`), directly, in a dict, or through a helper that builds the
    state, and for `optimizer.load_state_dict(...)` of a state that `dcp.load` filled (in the same
    function). The optimizer is followed through helpers, `self` attributes and the arguments of
    a class's constructor or methods in other modules (a checkpoint manager built by the training
    script, `ckpt.load(step, model, optimizer)`).

    ## Why is this bad?
    `Optimizer.state_dict()` keys the state by parameter *index* (0, 1, 2...) and holds the local
    shards without their placement. DCP matches entries by fully qualified name across ranks and
    world sizes: indices of different ranks collide, and the optimizer state cannot be resharded
    on load (a different world size loads the wrong moments, or fails). On resume, a fresh
    optimizer's `state_dict()` has no state yet (Adam creates its moments at the first `step()`),
    so `dcp.load` has no entries to fill and the moments silently restart from zero.
    `get_optimizer_state_dict`
    / `get_state_dict` key it by parameter name, and `set_optimizer_state_dict` / `set_state_dict`
    load it back.

    ## Example
    ```python
    dcp.save({"model": get_model_state_dict(model), "optim": optimizer.state_dict()},
             checkpoint_id=path)
    ```

    ## Use instead
    ```python
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    ...
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    ```

    ## Fix safety
    There is no automatic fix: the load side must change with the save side.
    """

    code = "DDP505"
    name = "optimizer-state-dict-into-dcp"
    severity = Severity.ERROR
    requires_text = ("checkpoint",)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        callers = other_call_sites(ctx, an, methods=True)
        for c in ctx.calls_to(*DCP_SAVE, *DCP_LOAD):
            sd = get_arg(c, 0, "state_dict")
            if sd is None:
                continue
            own = False  # the state handed to DCP holds the optimizer's own (index-keyed) state dict
            for v, call in content_calls(an, view, sd, c):
                f = call.func
                if isinstance(f, ast.Attribute) and f.attr == "state_dict" and not call.args and \
                        is_optimizer(an, v, f.value, call, callers):
                    what = "saves" if (ctx.qn(c) or "") in DCP_SAVE else "loads into"
                    ctx.report(
                        c,
                        f"`{ctx.qn(c).rsplit('.', 1)[-1]}` {what} `{ast.unparse(call)}`: the optimizer's own "
                        "state dict is keyed by parameter index and holds local shards, which DCP cannot "
                        "match across ranks; use `get_optimizer_state_dict` / `get_state_dict` "
                        "(and `set_state_dict` to load)",
                        related=[(call, "the optimizer's own state dict")] if v is view else [],
                    )
                    own = True
                    break
            # ``optimizer.load_state_dict(state["optim"])`` after ``dcp.load`` filled the optimizer's
            # own state dict reads the index-keyed state it gave: the mistake is the one reported at
            # the load, not a second one
            if (ctx.qn(c) or "") in DCP_LOAD and isinstance(sd, ast.Name) and not own:
                self._loaded_back(ctx, an, view, c, sd.id, callers)

    def _loaded_back(self, ctx, an, view, load, name, callers):
        """``optimizer.load_state_dict(state["optim"])`` after ``dcp.load(state, ...)``."""
        sem = view.sem
        fn = sem.enclosing_function(load)
        for c in sem.calls:
            f = c.func
            if not (isinstance(f, ast.Attribute) and f.attr == "load_state_dict" and c.args
                    and sem.enclosing_function(c) is fn and c.lineno > load.lineno):
                continue
            if not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(c.args[0])):
                continue
            if is_optimizer(an, view, f.value, c, callers):
                ctx.report(c, f"`{ctx.text(c)}` loads optimizer state that `dcp.load` (line {load.lineno}) filled: "
                              "DCP restores the state keyed by parameter name, which `Optimizer.load_state_dict` "
                              "does not read; use `set_optimizer_state_dict` / `set_state_dict`",
                           related=[(load, "loaded here")])
