from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.hidden import entry_of, options_flag
from ..flow.main_filled import main_only_filled
from ..flow.modern import hub
from ._common import other_call_sites

# entry key -> (position, keyword) of each state dict it loads
_STATE_ARGS = {
    "set_model_state_dict": ((1, "model_state_dict"),),
    "set_optimizer_state_dict": ((2, "optim_state_dict"),),
    "set_state_dict": ((None, "model_state_dict"), (None, "optim_state_dict")),
}


class FullStateDictOnRank0WithoutBroadcast(Rule):
    """
    ## What it does
    Checks for `set_model_state_dict`, `set_optimizer_state_dict` or `set_state_dict` with
    `StateDictOptions(full_state_dict=True)` and without `broadcast_from_rank0=True`, given a state
    dict that only the main rank fills: the checkpoint is read under a main-rank test and the other
    ranks pass `{}` or None (`sd = torch.load(path) if rank == 0 else {}`, an if/else statement, a
    helper that returns `{}` off the main rank). The state dict is followed through names, tuple
    unpacking, `self` attributes, helpers' returns and parameters (also of methods called from
    another module), and entries of dicts (`blob["model"]`, `blob.get("model", {})` of
    `blob = torch.load(f)` on the main rank and `{}` on the others), in this file and the modules it
    imports; the options through names, helpers that build them and the modules they come from,
    and a field set by comparing a value with a constant (`full_state_dict=self.mode == "full"`,
    where every construction of the class passes `mode="full"`).

    ## Why is this bad?
    Without `broadcast_from_rank0`, every rank is expected to hold the whole state dict and cut its
    own shards out of it. A rank given an empty dict returns at once, while the main rank goes on
    to distribute each tensor over the mesh (`distribute_tensor` scatters from the mesh's first
    rank), a collective the other ranks never join: the job hangs in the load, or, for a module
    whose parameters are not sharded, the other ranks silently keep their own weights.

    ## Example
    ```python
    full = torch.load(path, map_location="cpu") if dist.get_rank() == 0 else {}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True))
    ```

    ## Use instead
    Let the main rank broadcast what it read:
    ```python
    full = torch.load(path, map_location="cpu") if dist.get_rank() == 0 else {}
    set_model_state_dict(
        model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    )
    ```
    or read the file on every rank.

    ## Fix safety
    There is no automatic fix: whether to broadcast or to read the file on every rank depends on
    host memory and on where the file is readable.
    """

    code = "DDP525"
    name = "full-state-dict-on-rank0-without-broadcast"
    severity = Severity.ERROR
    requires_text = tuple(_STATE_ARGS)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        callers = None
        for c in view.sem.calls:
            a = entry_of(view, c)
            if a is None or a.key not in _STATE_ARGS or not a.qualnames:
                continue
            if callers is None:
                callers = other_call_sites(ctx, an, methods=True)
            opts = get_arg(c, None, "options")
            if options_flag(view, opts, c, "full_state_dict", hub=an, callers=callers) is not True:
                continue
            if options_flag(view, opts, c, "broadcast_from_rank0", hub=an, missing=False, callers=callers) is not False:
                continue
            for pos, kw in _STATE_ARGS[a.key]:
                sd = get_arg(c, pos, kw)
                if sd is None:
                    continue
                got = main_only_filled(an, view, sd, c, callers)
                if got is None:
                    continue
                (fv, fe), (mv, me) = got
                related = [(fe, "filled only on the main rank here")] if fv is view else []
                if mv is view:
                    related.append((me, "empty on the other ranks here"))
                ctx.report(
                    c,
                    f"`{ctx.text(sd)}` holds the state dict only on the main rank (`{_text(me)}` on the "
                    f"others), and `{a.key}` runs with `full_state_dict=True` but without "
                    "`broadcast_from_rank0=True`: the ranks given an empty dict return at once while the "
                    "main rank distributes the tensors over the mesh alone, and the job hangs (or the other "
                    "ranks keep their own weights); pass `broadcast_from_rank0=True`, or read the file on "
                    "every rank",
                    related=related,
                )
                break


def _text(node) -> str:
    try:
        s = ast.unparse(node)
    except Exception:  # pragma: no cover
        return "{}"
    return s if len(s) <= 40 else s[:37] + "..."
