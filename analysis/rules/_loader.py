"""DataLoader / sampler helpers for the DDP3xx rules."""
from __future__ import annotations

import ast
import re

from ..model import Edit, Position, Range
from ..semantic import get_arg, parent
from ..torch_api import constant_of

DATALOADER = "torch.utils.data.DataLoader"
# Well-known subclasses of torch's DataLoader that hand ``dataset``, ``shuffle``, ``sampler`` and
# ``batch_sampler`` to it unchanged (so a ``DistributedSampler`` given to one needs ``set_epoch``, and
# ``shuffle=True`` with a sampler raises, as with torch's), each with the positions at which it takes
# ``shuffle``, ``sampler`` and ``batch_sampler`` (None: keyword only, through ``**kwargs``).
# Checked against each library's documentation:
# - PyG: ``torch_geometric.loader.DataLoader(dataset, batch_size=1, shuffle=False, follow_batch=None,
#   exclude_keys=None, **kwargs)``, ``DenseDataLoader`` and ``DataListLoader`` ``(dataset,
#   batch_size=1, shuffle=False, **kwargs)``; before PyG 2.0 the same classes lived in
#   ``torch_geometric.data``. (Its graph-sampling loaders, ``NeighborLoader`` and the like, take
#   node indices rather than a dataset: not listed.)
# - DGL: ``dgl.dataloading.GraphDataLoader(dataset, collate_fn=None, use_ddp=False, ddp_seed=0,
#   **kwargs)``; with ``use_ddp=True`` it builds its own DistributedSampler (the caller's
#   ``set_epoch`` is the loader's): such a call is not treated as a loader here.
# - MONAI: ``monai.data.DataLoader(dataset, num_workers=0, **kwargs)``.
# - torchdata: ``torchdata.stateful_dataloader.StatefulDataLoader``, torch's signature.
_TORCH_POSITIONS = (2, 3, 4)
LOADER_POSITIONS: dict[str, tuple[int | None, int | None, int | None]] = {
    DATALOADER: _TORCH_POSITIONS,
    "torch_geometric.loader.DataLoader": (2, None, None),
    "torch_geometric.loader.dataloader.DataLoader": (2, None, None),
    "torch_geometric.loader.DenseDataLoader": (2, None, None),
    "torch_geometric.loader.DataListLoader": (2, None, None),
    "torch_geometric.data.DataLoader": (2, None, None),
    "torch_geometric.data.DenseDataLoader": (2, None, None),
    "torch_geometric.data.DataListLoader": (2, None, None),
    "dgl.dataloading.GraphDataLoader": (None, None, None),
    "monai.data.DataLoader": (None, None, None),
    "torchdata.stateful_dataloader.StatefulDataLoader": _TORCH_POSITIONS,
}
LOADER_QNS = frozenset(LOADER_POSITIONS)
DIST_SAMPLER = "torch.utils.data.DistributedSampler"
_EVAL_NAME = re.compile(r"(^|_)(val|valid|validation|test|eval|evaluation|dev|query|gallery|inference|predict)", re.I)


def dataloaders(ctx) -> list[ast.Call]:
    """The module's DataLoader constructions: torch's and its well-known subclasses'
    (``LOADER_POSITIONS``), and those of the module's own subclasses of one of them
    (``class GraphLoader(DataLoader): ...``, also through one another)."""
    sem = ctx.sem
    found = [c for c in sem.calls_to(*LOADER_QNS) if not _shards_itself(c)]
    local = _local_loader_classes(sem)
    if local:
        found.extend(c for c in sem.calls if c.func.__class__ is ast.Name and c.func.id in local)
        found.sort(key=lambda c: (c.lineno, c.col_offset))
    return found


def is_loader_call(sem, call: ast.AST) -> bool:
    """``call`` (of ``sem``'s module) builds a DataLoader as ``dataloaders`` counts them."""
    if not isinstance(call, ast.Call):
        return False
    if (sem.call_qualname(call) or "") in LOADER_QNS:
        return not _shards_itself(call)
    return call.func.__class__ is ast.Name and call.func.id in _local_loader_classes(sem)


def _shards_itself(call: ast.Call) -> bool:
    # DGL's ``use_ddp=True``: the loader makes (and seeds) its own DistributedSampler
    return any(k.arg == "use_ddp" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
               for k in call.keywords)


def _local_loader_classes(sem) -> frozenset[str]:
    """The names of the module's top-level classes that subclass one of ``LOADER_QNS`` (directly
    or through one another) and that no import rebinds."""
    try:
        return sem._loader_classes
    except AttributeError:
        pass
    classes = [c for c in sem.tree.body if isinstance(c, ast.ClassDef) and c.bases]
    names: set[str] = set()
    grew = bool(classes)
    while grew:
        grew = False
        for c in classes:
            if c.name not in names and c.name not in sem.aliases and any(
                    (sem.qualname(b) or "") in LOADER_QNS or (isinstance(b, ast.Name) and b.id in names)
                    for b in c.bases):
                names.add(c.name)
                grew = True
    sem._loader_classes = frozenset(names)
    return sem._loader_classes


def loader_arg(call: ast.Call, name: str) -> ast.AST | None:
    """A DataLoader call's ``shuffle`` / ``sampler`` / ``batch_sampler`` argument, by keyword or at
    the position its class takes it (``LOADER_POSITIONS``; torch's for a project subclass)."""
    pos = LOADER_POSITIONS.get(getattr(call, "_qn", None) or "", _TORCH_POSITIONS)
    return get_arg(call, pos[("shuffle", "sampler", "batch_sampler").index(name)], name)


def is_true(node: ast.AST | None, sem=None) -> bool:
    """``node`` is ``True``: the literal, or (given the module's ``sem``) a value that resolves to it:
    a name bound once, an argparse default, one attribute store, a config dict's item."""
    if sem is not None and node is not None and not isinstance(node, ast.Constant):
        node = constant_of(sem, node)
    return isinstance(node, ast.Constant) and node.value is True


def is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def shuffle_arg(call: ast.Call) -> ast.AST | None:
    return loader_arg(call, "shuffle")


def sampler_args(call: ast.Call) -> list[ast.AST]:
    return [a for a in (loader_arg(call, "sampler"), loader_arg(call, "batch_sampler")) if a is not None and not is_none(a)]


def loader_sampler(ctx, call: ast.Call) -> ast.AST | None:
    """The ``sampler=`` of a DataLoader, also through ``**kwargs`` bound once to a dict literal
    (``train_kwargs = {"batch_size": 64, "sampler": sampler}``)."""
    s = loader_arg(call, "sampler")
    if s is not None:
        return s
    for k in call.keywords:
        if k.arg is None and isinstance(k.value, ast.Name):
            d = ctx.sem.single_value(k.value.id, ctx.sem.scope_of(call))
            if isinstance(d, ast.Dict):
                for key, val in zip(d.keys, d.values):
                    if isinstance(key, ast.Constant) and key.value == "sampler":
                        return val
    return None


def has_kwargs(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def may_be_none(ctx, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """Whether ``expr`` can evaluate to None (conservatively True when unknown)."""
    if depth > 3:
        return True
    if is_none(expr):
        return True
    if isinstance(expr, ast.IfExp):
        return may_be_none(ctx, expr.body, at, depth + 1) or may_be_none(ctx, expr.orelse, at, depth + 1)
    if isinstance(expr, (ast.Call, ast.List, ast.Tuple, ast.ListComp)):
        return False
    if isinstance(expr, ast.Name):
        scope = ctx.sem.scope_of(at)
        assigns = ctx.sem.assignments(scope).get(expr.id)
        if not assigns:
            return True
        for st in assigns:
            if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
                return True
            if may_be_none(ctx, st.value, st, depth + 1):
                return True
        return False
    return True


def is_eval_name(*names: str | None) -> bool:
    return any(n and _EVAL_NAME.search(n) for n in names)


_EVAL_FUNCTION = re.compile(r"^_*(val|valid|validate|validation|test|eval|evaluate|evaluation|predict|inference)(_|$)",
                            re.I)


def in_eval_function(sem, node: ast.AST) -> bool:
    """``node`` is in a function whose name starts with an evaluation word (``evaluate``,
    ``eval_loader``, ``test_model``; not ``train_and_eval``). A name heuristic, asked only after the
    value flow found the shuffling sampler."""
    fn = sem.enclosing_function(node)
    return fn is not None and bool(_EVAL_FUNCTION.search(fn.name))


def target_name(call: ast.Call) -> str | None:
    """``loader`` for ``loader = DataLoader(...)`` / ``self.loader = ...``."""
    st = parent(call)
    if isinstance(st, ast.Assign) and len(st.targets) == 1:
        t = st.targets[0]
        if isinstance(t, ast.Name):
            return t.id
        if isinstance(t, ast.Attribute):
            return t.attr
    return None


def remove_keyword(ctx, call: ast.Call, kw: ast.keyword) -> Edit:
    """Delete ``kw`` from ``call`` with its comma; the whole line when it stands alone on one."""
    src = ctx.src
    r = src.node_range(kw)
    line = src.line(r.start.line)
    if r.start.line == r.end.line:
        before = line[: r.start.column]
        after = line[r.end.column:].strip()
        if after.startswith(","):
            after = after[1:].strip()
        if not before.strip() and (not after or after.startswith("#")) and r.start.line + 1 < len(src.lines):
            # alone on its line (maybe with a comment about it): delete the line
            return Edit(Range(Position(r.start.line, 0), Position(r.start.line + 1, 0)), "")
    items = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
    i = next(j for j, n in enumerate(items) if n is kw)
    if i + 1 < len(items):
        return Edit(Range(r.start, src.node_start(items[i + 1])), "")
    if i > 0:
        return Edit(Range(src.node_end(items[i - 1]), r.end), "")
    return Edit(r, "")


def project_sampler(ana, view, call, qns) -> bool:
    """``call`` builds a project class derived from one of ``qns`` (DistributedSampler's names:
    ``records.library_bases``) that keeps its epoch-seeded order: each ``__iter__`` of the project's classes on the way walks
    ``super().__iter__()``, and each ``__init__`` leaves ``shuffle`` alone or takes it as a
    parameter that defaults to True (the call's own ``shuffle=`` is read as for the base)."""
    from ..flow.instances import ctor_class
    from ..flow.records import _NOT_PROJECT, class_chain, library_bases

    got = ctor_class(ana, view, call, _NOT_PROJECT)
    if got is None or not library_bases(ana, *got) & set(qns):
        return False
    for _v, c in class_chain(ana, *got):
        for f in c.body:
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if f.name == "__iter__" and not any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__iter__"
                    and isinstance(n.func.value, ast.Call) and isinstance(n.func.value.func, ast.Name)
                    and n.func.value.func.id == "super" for n in ast.walk(f)):
                return False  # an order of its own
            if f.name == "__init__":
                args = [*f.args.posonlyargs, *f.args.args]
                names = [a.arg for a in (*args, *f.args.kwonlyargs)]
                if "shuffle" in names:
                    defaults = dict(zip([a.arg for a in args][::-1], f.args.defaults[::-1]))
                    defaults.update({a.arg: d for a, d in zip(f.args.kwonlyargs, f.args.kw_defaults)})
                    d = defaults.get("shuffle")
                    if not (isinstance(d, ast.Constant) and d.value is True):
                        return False
                elif any(isinstance(n, ast.keyword) and n.arg == "shuffle" for n in ast.walk(f)):
                    return False  # it chooses the base's shuffle itself
    return True
