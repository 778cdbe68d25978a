"""Which modules a function gives to ``fully_shard`` (FSDP2), as parts of a root: a child
(``fully_shard(model.lm_head)``), each element of a module list a loop walks (``for block in
model.layers: fully_shard(block)``), or the root itself (``fully_shard(model)``, a list holding
it, a project helper that gives its parameter to ``fully_shard``); and which parameters a
module's class owns itself, outside its children (``self.tok = nn.Embedding(...)``,
``self.pos = nn.Parameter(...)`` in its ``__init__``). DDP522 asks whether a root whose children
are sharded is ever sharded itself."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES
from .bindings import reaching
from .hidden import FULLY_SHARD, shard_calls
from .shard_returns import loop_target_has as _loop_target_has, module_chain as _chain, walked_list as _walked

_MOVES = frozenset({"to", "cuda", "cpu", "float", "half", "bfloat16", "double", "train", "eval", "to_empty"})
PARAMETER = ("torch.nn.Parameter", "torch.nn.parameter.Parameter")


def _member(view, expr, at):
    """(root key, attribute) for a module given to ``fully_shard``: attribute None for a root
    itself; None when it is not known."""
    got = _chain(expr)
    if not isinstance(expr, ast.Name):
        return got
    kind, evs = reaching(view, expr.id, at)
    if kind != "events" or not evs:
        return got if kind == "param" else None
    found = set()
    for e in evs:
        if isinstance(e, (ast.For, ast.AsyncFor)) and _loop_target_has(e.target, expr.id):
            part = _chain(_walked(e.iter))
            if part is None or part[1] is None:
                return None
            found.add(part)
        elif isinstance(e, ast.Assign) and len(e.targets) == 1 and isinstance(e.targets[0], ast.Name):
            part = _chain(e.value)
            found.add(part if part is not None and part[1] is not None else (expr.id, None))
        else:
            return None
    return found.pop() if len(found) == 1 else None


def shard_groups(hub, view, fn):
    """(parts, whole) of the modules ``fn`` (a function, or None for the module's top level)
    gives to ``fully_shard``, directly or through a project helper that gives its parameter to
    it: ``parts`` {root key: [(call, attribute)]} for children of a root, ``whole`` the keys of
    modules given whole. None when one of them is not known (any group is possible)."""
    sem = view.sem
    parts: dict = {}
    whole: set = set()
    any_here = False
    for c, a in shard_calls(hub, view):
        if sem.enclosing_function(c) is not fn:
            continue
        any_here = True
        direct = sem.call_qualname(c) in FULLY_SHARD
        for el in (a.elts if isinstance(a, (ast.List, ast.Tuple)) and direct else (a,)):
            m = _member(view, el, c)
            if m is None:
                return None
            if m[1] is None:
                whole.add(m[0])
            else:
                parts.setdefault(m[0], []).append((c, m[1]))
    return (parts, whole) if any_here else None


def own_parameters(hub, view, cls) -> list:
    """(statement, attribute) of the parameters a module class owns itself: ``self.<attr> =``
    a parameterised ``torch.nn`` layer, a project module with parameters, or ``nn.Parameter(...)``
    in its ``__init__``. Empty when unknown."""
    from .step_branches import param_kind

    init = next((st for st in cls.body if isinstance(st, FUNC_TYPES) and st.name == "__init__"), None)
    if init is None:
        return []
    out = []
    for st in ast.walk(init):
        if not isinstance(st, ast.Assign) or len(st.targets) != 1:
            continue
        t = st.targets[0]
        if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"):
            continue
        v = st.value
        while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in _MOVES:
            v = v.func.value
        if isinstance(v, ast.Call) and (view.sem.call_qualname(v) in PARAMETER or param_kind(hub, view, v)):
            out.append((st, t.attr))
    return out


def module_class(hub, view, expr, at, callers=None):
    """(view, class) of the project module class every origin of ``expr`` constructs
    (``Net(cfg).to(dev)`` too); None when unknown or mixed."""
    from .instances import ctor_class
    from .origins import origins
    from .records import _NOT_PROJECT

    found = None
    got_any = False
    for v, e in origins(hub, view, expr, at, callers=callers):
        while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _MOVES:
            e = e.func.value
        got = ctor_class(hub, v, e, _NOT_PROJECT)
        if got is None or found is not None and found[1] is not got[1]:
            return None
        found, got_any = got, True
    return found if got_any else None
