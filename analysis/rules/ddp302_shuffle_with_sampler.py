from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ._common import is_simple_ref
from ._loader import dataloaders, is_none, is_true, may_be_none, remove_keyword, sampler_args


class ShuffleWithSampler(Rule):
    """
    ## What it does
    Checks for `DataLoader(..., shuffle=True, sampler=...)` (or `batch_sampler=...`) with a sampler
    that is not `None`, also when the options come from a dict unpacked into the call
    (`DataLoader(ds, sampler=sampler, **loader_kwargs)` with `loader_kwargs = dict(shuffle=True, ...)`
    bound once and never changed; a sampler that is `None` on some path is the distributed path's
    error all the same).

    ## Why is this bad?
    A sampler decides the order itself, so the DataLoader refuses the combination at construction:

    ```
    ValueError: sampler option is mutually exclusive with shuffle
    ```

    (`batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last`
    for a batch sampler). With a `DistributedSampler`, shuffling is the sampler's job:
    `DistributedSampler(dataset, shuffle=True)` is the default.

    ## Example
    ```python
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, sampler=sampler)
    ```

    ## Use instead
    ```python
    sampler = DistributedSampler(dataset)  # shuffles by default
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    ```

    ## Fix safety
    When the sampler is never `None`, the fix drops `shuffle=True`; when it may be `None` (a
    variable set to a sampler only in distributed runs), it writes `shuffle=(sampler is None)`.
    Both are **safe**: the call raised before, and the non-distributed path keeps shuffling.
    """

    code = "DDP302"
    name = "shuffle-with-sampler"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = ("shuffle",)
    requires_text_all = (("DataLoader",),)  # torch.utils.data.DataLoader calls

    def finish(self, ctx) -> None:
        for call in dataloaders(ctx):
            kw = next((k for k in call.keywords if k.arg == "shuffle"), None)
            if kw is None:
                self._through_kwargs(ctx, call)
                continue
            if not is_true(kw.value, ctx.sem):
                continue
            samplers = sampler_args(call)
            if not samplers:
                continue
            s = samplers[0]
            which = "batch_sampler" if any(k.arg == "batch_sampler" and k.value is s for k in call.keywords) else "sampler"
            fix = None
            if not may_be_none(ctx, s, call):
                fix = ctx.fix(Applicability.SAFE, "Remove `shuffle=True` (the sampler decides the order)",
                              [remove_keyword(ctx, call, kw)])
            elif isinstance(s, ast.Name) or (is_simple_ref(s) and not isinstance(s, ast.Subscript)):
                new = f"({ctx.text(s)} is None)"
                fix = ctx.fix(Applicability.SAFE, f"Shuffle only without a sampler: `shuffle={new}`",
                              [ctx.replace(kw.value, new)])
            ctx.report(
                kw,
                f"`shuffle=True` with `{which}=`: DataLoader raises ValueError (mutually exclusive); "
                "the sampler does the shuffling",
                fix=fix,
            )

    def _through_kwargs(self, ctx, call) -> None:
        """``DataLoader(ds, sampler=s, **loader_kwargs)`` with ``loader_kwargs`` bound once to a dict
        that says ``shuffle=True`` (or the sampler comes from the dict too)."""
        for k in call.keywords:
            if k.arg is not None or not isinstance(k.value, ast.Name):
                continue
            entries = _dict_entries(ctx, k.value.id, call)
            if entries is None or not is_true(entries.get("shuffle"), ctx.sem):
                continue
            samplers = sampler_args(call) or [v for n, v in entries.items()
                                             if n in ("sampler", "batch_sampler") and not is_none(v)]
            if not samplers:
                continue
            ctx.report(
                k,
                f"`{k.value.id}` passes `shuffle=True` together with a sampler: DataLoader raises ValueError "
                "(mutually exclusive); the sampler does the shuffling",
                related=[(entries["shuffle"], "`shuffle=True` comes from here")],
            )


_MUTATORS = frozenset({"update", "pop", "setdefault", "clear", "popitem", "__setitem__"})


def _dict_entries(ctx, name: str, call: ast.Call):
    """The constant-keyed entries of the dict ``name`` is bound to once (``dict(shuffle=True, ...)``
    or ``{"shuffle": True, ...}``), when nothing in the scope changes it; else None."""
    scope = ctx.sem.scope_of(call)
    d = ctx.sem.single_value(name, scope)
    out = {}
    if isinstance(d, ast.Dict):
        for key, val in zip(d.keys, d.values):
            if key is None:
                return None  # ``{**base, ...}``: not all entries are known
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                out[key.value] = val
    elif isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "dict" and not d.args:
        for kw in d.keywords:
            if kw.arg is None:
                return None
            out[kw.arg] = kw.value
    else:
        return None
    for n in ast.walk(scope):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == name \
                and not isinstance(n.ctx, ast.Load):
            return None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                and n.func.value.id == name and n.func.attr in _MUTATORS:
            return None
    return out
