from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.findings import node_related
from ..flow.modern import DCP_LOAD, hub
from ..flow.calls import call_args
from ..flow.object_state import (constructions, keys_read_back, param_loads, restored_only_in_dict,
                                  state_entries, unread_stateful_keys)
from ._common import other_call_sites


class DcpLoadedValueDropped(Rule):
    """
    ## What it does
    Checks `torch.distributed.checkpoint.load(state_dict, ...)` for an entry of the state dict
    that the load restores into the dict alone, and that nothing reads back out of it afterwards:
    a training counter (`"step": self.step`), a copy of an object's fields
    (`dataclasses.asdict(progress)`, a project method that returns a new dict of them), a
    learning-rate scheduler's `state_dict()`, a random generator's state. The state dict is
    followed through the helpers and methods that build it (in other modules too), dict displays,
    `dict(...)`, `d["k"] = v` stores and `update`. The check holds only when the state dict is a
    local name of the function that loads it and is read there only as `state["key"]` /
    `state.get("key")` (a dict passed on, returned or iterated may be read elsewhere), and only for
    values known to be immutable or new: a module's or an optimizer's state dict (whose tensors
    are loaded in place) or a value not followed is never reported. A state dict gathered or
    offloaded by `get_state_dict(..., options=StateDictOptions(full_state_dict=True))` (or
    `cpu_offload=True`) is a new copy too.

    A `Stateful` object given to the load (a project class with its own `state_dict` and
    `load_state_dict`, which DCP calls itself) is checked the same way: an entry that its
    `state_dict()` returns and that the load fills in the dict only, which its `load_state_dict`
    never reads (the report is on that method when it is in the checked file).

    ## Why is this bad?
    `dcp.load` loads tensors in place, into the storage the state dict points to, but a plain value
    (a number, a string, a dict of them, a new tensor) is only replaced inside the state dict the
    call was given. A value that no live object shares is restored there and nowhere else: unless
    the code copies it back (`progress.update(state["progress"])`,
    `scheduler.load_state_dict(state["sched"])`), the resumed run keeps the values it had before
    the load. The weights and the optimizer come back from the checkpoint while the step counter,
    the epoch or the schedule restart from zero: the run replays data, overwrites checkpoints, and
    steps the schedule out of range. Nothing fails.

    ## Example
    ```python
    def restore(self, path):
        state = {"model": get_model_state_dict(self.model), "progress": asdict(self.progress)}
        dcp.load(state, checkpoint_id=path)
        set_model_state_dict(self.model, state["model"])
    ```

    ## Use instead
    ```python
    def restore(self, path):
        state = {"model": get_model_state_dict(self.model), "progress": asdict(self.progress)}
        dcp.load(state, checkpoint_id=path)
        set_model_state_dict(self.model, state["model"])
        self.progress = Progress(**state["progress"])
    ```
    (or give DCP a `Stateful` object whose `load_state_dict` restores the fields).

    ## Fix safety
    There is no automatic fix: where the restored value belongs is the program's choice.
    """

    code = "DDP533"
    name = "dcp-loaded-value-dropped"
    severity = Severity.ERROR
    default_enabled = True
    requires_text = ("checkpoint",)  # every qualified name it resolves is torch.distributed.checkpoint.*

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        callers = other_call_sites(ctx, an, methods=True)
        sites = []  # (the call that fills the dict, the state dict there, keys a helper reads back)
        for c in ctx.calls_to(*DCP_LOAD):
            sites.append((c, get_arg(c, 0, "state_dict"), set()))
        for c in view.sem.calls:  # a helper that loads into the dict it is given
            target = an.resolve_call(view, c) if c.args or c.keywords else None
            if target is None:
                continue
            for pname, _, read in param_loads(target[0], target[1], DCP_LOAD):
                arg = dict(call_args(c, target[1])).get(pname)
                if arg is not None:
                    sites.append((c, arg, read))
        done = set()  # the ``load_state_dict`` methods already judged
        for c, sd, read in sites:
            if isinstance(sd, ast.Name):
                here = keys_read_back(view, sd.id, c)
                if here is None:
                    continue
                read = read | here
            elif not isinstance(sd, (ast.Dict, ast.Call)):
                continue  # a display or a helper's new dict: nothing can read it afterwards
            dropped, seen = {}, set()
            for e in state_entries(an, view, sd, c, callers):
                top = e.outer[0] if e.outer else e
                if id(top.value) in seen:
                    continue
                seen.add(id(top.value))
                self._stateful(ctx, an, top, c, callers, done)
                if not (isinstance(top.key, ast.Constant) and isinstance(top.key.value, str)):
                    continue
                if top.key.value in read or top.key.value in dropped:
                    continue
                if restored_only_in_dict(an, top.view, top.value, top.value, callers):
                    dropped[top.key.value] = top
            if not dropped:
                continue
            keys = ", ".join(f'`"{k}"`' for k in dropped)
            first = next(iter(dropped.values()))
            via = "" if ctx.qn(c) in DCP_LOAD else " (through the DCP load of the function it calls)"
            msg = (f"`{ast.unparse(c.func)}`{via} restores {keys} (`{ast.unparse(first.value)}`: a new or immutable "
                   "value that no live object shares) into the state dict only, and nothing reads it back after the "
                   "load: the resumed run keeps the value it had before the load. Copy it back out of the state dict "
                   "(or give DCP a `Stateful` object that restores it)")
            related = [node_related(ctx, t.view.path, t.value, f'the value saved under "{k}"')
                       for k, t in list(dropped.items())[:3]]
            ctx.report(c, msg, related=related)

    def _stateful(self, ctx, an, top, site, callers, done) -> None:
        """A ``Stateful`` object the load fills: the entries its ``state_dict()`` returns that its
        ``load_state_dict`` never reads back."""
        for cv, ctor in constructions(an, top.view, top.value, top.value, callers):
            got = unread_stateful_keys(an, cv, ctor, callers)
            if got is None or not got[1] or id(got[0][1]) in done:
                continue
            (lv, lfn), dropped = got
            done.add(id(lfn))
            keys = ", ".join(f'`"{k}"`' for k in dropped)
            first = next(iter(dropped.values()))
            here = lv is an.main
            where = f"`{lfn.name}`" if here else f"the `load_state_dict` of `{ast.unparse(top.value)}`"
            msg = (f"{where} never reads {keys} that `state_dict()` saves (`{ast.unparse(first.value)}`: a new value "
                   "that the load fills in the dict only, not the live object): the checkpoint holds it but a "
                   "resumed run never restores it. Read it back in `load_state_dict`")
            related = [node_related(ctx, t.view.path, t.value, f'saved under "{k}"') for k, t in list(dropped.items())[:3]]
            ctx.report(lfn if here else site, msg, related=related)
