"""Lightning Fabric's object, as the evaluation questions see it.

A value *is a Fabric* when some origin of it (``origins``: names, ``self`` attributes, parameters
its module's calls bind, helpers' returns) is a ``lightning.Fabric(...)`` construction, or when it
is a parameter declared with that class (``fabric: L.Fabric``), the first parameter of a
function that a Fabric starts itself (``fabric.launch(main, ...)`` calls ``main(fabric, ...)``),
or a parameter every call of its module fills with a Fabric (``loaders(fabric, ...)`` from such a
``main``).
A Fabric built with ``devices=1`` and no ``num_nodes`` runs one process and does not count.

What the evaluation questions ask of it (``eval_walks``, ``local_metrics``):

- ``shards``: every value a name may hold comes from ``F.setup_dataloaders(...)`` (an element of
  its result too), which gives each loader a ``DistributedSampler`` (unless
  ``use_distributed_sampler=False``): the loader walks this rank's shard (an iterable dataset,
  which Fabric leaves alone, is taken to split itself by rank, as streaming datasets do: a
  training job whose ranks all read the same data would be pointless);
- ``main_only_report``: ``F.print(...)`` / ``F.log(...)`` / ``F.log_dict(...)`` report on the main
  rank alone (``print`` prints on global rank 0; the loggers' ``log_metrics`` are rank-zero only);
- ``reduction``: ``F.all_reduce(x)`` / ``F.all_gather(x)`` combine the ranks' data.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg

FABRIC_QNS = frozenset({"lightning.Fabric", "lightning.fabric.Fabric", "lightning.fabric.fabric.Fabric",
                        "lightning_fabric.Fabric", "lightning_fabric.fabric.Fabric"})
REPORTS = frozenset({"print", "log", "log_dict"})
REDUCTIONS = frozenset({"all_reduce", "all_gather"})
_DEPTH = 3


def is_fabric(hub, view, expr, at, depth: int = 0, frames=None) -> bool:
    """``expr`` holds a Fabric that runs several processes (module docstring); ``frames``: as
    ``origins`` takes them, for a receiver inside a helper whose return a caller reads."""
    from .bindings import reaching
    from .origins import origins

    if isinstance(expr, ast.Call):  # ``L.Fabric(devices=4).launch(main)``
        return (view.sem.call_qualname(expr) or "") in FABRIC_QNS and not _one_process(expr)
    if depth > _DEPTH or not isinstance(expr, (ast.Name, ast.Attribute)):
        return False
    try:
        found = origins(hub, view, expr, at, frames=frames)
    except RecursionError:  # pragma: no cover - defensive
        found = []
    built = [(o[0], o[1]) for o in found  # (view, expr), or with their frames when ``frames`` is given
             if isinstance(o[1], ast.Call) and (o[0].sem.call_qualname(o[1]) or "") in FABRIC_QNS]
    if built:
        return any(not _one_process(e) for _v, e in built)
    if not isinstance(expr, ast.Name):
        return False
    kind, fn = reaching(view, expr.id, at)
    if kind != "param" or not isinstance(fn, FUNC_TYPES):
        return False
    from .config_devices import _annotation_expr, _param_annotation

    ann = _annotation_expr(_param_annotation(fn, expr.id))
    if ann is not None and (view.sem.qualname(ann) or "") in FABRIC_QNS:
        return True
    if _launched_by_fabric(hub, view, fn, expr.id, depth):
        return True
    # a parameter its module's calls fill (``origins`` found no construction): each gives a Fabric
    from .calls import call_args

    if frames and frames[-1][0] is fn:  # the call whose return we are in: its argument
        _f, c, cv = frames[-1]
        a = next((a for p, a in call_args(c, fn) if p == expr.id), None)
        return a is not None and is_fabric(hub, cv, a, c, depth + 1, frames[:-1])

    sites = list(hub.call_sites(view, fn))[:8]
    args = [a for c in sites for p, a in call_args(c, fn) if p == expr.id]
    return bool(sites) and len(args) == len(sites) and all(
        is_fabric(hub, view, a, c, depth + 1) for a, c in zip(args, sites))


def _one_process(ctor: ast.Call) -> bool:
    d = get_arg(ctor, 2, "devices")
    return isinstance(d, ast.Constant) and d.value == 1 and get_arg(ctor, 3, "num_nodes") is None


def _launched_by_fabric(hub, view, fn, name: str, depth: int) -> bool:
    """``name`` is the first parameter of ``fn``, a function of this module that a Fabric's
    ``launch(fn, ...)`` runs."""
    pos = [*fn.args.posonlyargs, *fn.args.args]
    if not pos or pos[0].arg != name:
        return False
    from .calls import reference_call

    for call in view.sem.of_types(ast.Call):
        f = call.func
        if not (isinstance(f, ast.Attribute) and f.attr == "launch" and call.args
                and isinstance(call.args[0], ast.Name) and call.args[0].id == fn.name):
            continue
        try:
            got = hub.resolve_call(view, reference_call(call.args[0], call))
        except Exception:  # noqa: BLE001 - unresolvable: not this function
            got = None
        if got is not None and got[1] is fn and is_fabric(hub, view, f.value, call, depth + 1):
            return True
    return False


def method_call(hub, view, call, names, frames=None) -> str | None:
    """The method of ``names`` that ``call`` makes on a Fabric (``fabric.print(...)``), else None."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in names and is_fabric(hub, view, f.value, call, frames=frames):
        return f.attr
    return None


def shards(hub, view, expr, at) -> bool:
    """Every value ``expr`` may hold is a loader a Fabric's ``setup_dataloaders`` set up with its
    distributed sampler (and at least one is)."""
    from .origins import branch_origins

    try:
        found = branch_origins(hub, view, expr, at, limit=10)
    except Exception:  # noqa: BLE001 - no answer
        return False
    if not found:
        return False
    for v, e, fr in found:
        if not (isinstance(e, ast.Call) and method_call(hub, v, e, ("setup_dataloaders",), fr)):
            return False
        off = next((k.value for k in e.keywords if k.arg == "use_distributed_sampler"), None)
        if off is not None and not (isinstance(off, ast.Constant) and off.value is True):
            return False
    return True
