"""Metrics whose value is already global: a ``torchmetrics`` metric's ``compute()`` gathers its
state across the process group by default (``synced_metric``; the evaluator asks it through the
hub, so that a value reported from it is the same on every rank: DDP220).

And the state that it does not gather: ``metric_state`` reads a plain attribute of a subclass of
torchmetrics' ``Metric`` (one not registered with ``self.add_state``, so the library never syncs it)
that the class's ``update()`` stores from its arguments (``self.total += len(preds)``). The library
calls ``update()`` on each rank with that rank's batch, so the attribute holds this rank's data,
also in ``compute()`` (``if self.total == 0: return ...`` before a gather: DDP107)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from .return_deps import names_reaching, target_names
from .values import DATA, _V

_MOVES = frozenset({"to", "cuda", "cpu"})


def synced_metric(hub, view, recv, at, depth: int = 0) -> bool:
    """``recv`` holds a ``torchmetrics`` metric (every origin is a call of a class of that package,
    maybe moved: ``MeanMetric().to(device)``) whose ``compute()`` synchronises its state across the
    process group: the library default (``sync_on_compute=True``: the running states are
    all-gathered when ``torch.distributed`` is initialised), unless its constructor says
    ``sync_on_compute=False``. The result of ``compute()`` is then the same on every rank."""
    from .origins import origins  # lazy: origins asks the value layer

    got = origins(hub, view, recv, at) if depth < 3 else ()
    if not got:
        return False
    for v, e in got:
        while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _MOVES:
            e = e.func.value
        if isinstance(e, (ast.Name, ast.Attribute)):
            if not synced_metric(hub, v, e, e, depth + 1):
                return False
            continue
        if not isinstance(e, ast.Call) or not (v.sem.call_qualname(e) or "").startswith("torchmetrics."):
            return False
        flag = get_arg(e, None, "sync_on_compute")
        if flag is not None and not (isinstance(flag, ast.Constant) and flag.value is True):
            return False
    return True


def metric_state(view, attr: ast.Attribute):
    """The value of ``self.<attr>`` (read in a method of a subclass of torchmetrics' ``Metric``) when
    the ``update()`` of that class, of a base or of a subclass in this module stores it from its
    arguments, and no ``self.add_state`` registers it (see the module's docstring); else None."""
    fn = view.sem.enclosing_function(attr)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return None
    memo = view.memo.setdefault("metric_state", {})
    key = (id(cls), attr.attr)
    if key not in memo:
        memo[key] = _metric_state(view, cls, attr.attr)
    return memo[key]


def _metric_state(view, cls: ast.ClassDef, name: str):
    chain = _metric_chain(view, cls, 0)
    if chain is None:
        return None
    family = [*chain, *(c for c in view.classes.values() if c not in chain and cls in (_metric_chain(view, c, 0) or ()))]
    for c in family:
        for n in ast.walk(c):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_state" \
                    and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == name:
                return None  # a registered state: the library syncs it
    for c in family:
        for m in c.body:
            if not (isinstance(m, FUNC_TYPES) and m.name == "update"):
                continue
            params = set(param_names(m)) - {"self"}
            stores = [n for n in ast.walk(m) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
            stmts = [st for st in stores if "self" not in target_names(st)]  # the method's own names
            for st in stores:
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if st.value is not None and any(
                        isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name)
                        and t.value.id == "self" for t in targets) and names_reaching([st.value], stmts) & params:
                    return _V(view, DATA, f"this rank's metric state, stored by `{c.name}.update()` from its batch", st)
    return None


def _metric_chain(view, cls: ast.ClassDef, depth: int):
    """``cls`` and its bases of this module, up to a base of torchmetrics named ``...Metric``
    (``torchmetrics.Metric``, ``torchmetrics.metric.Metric``); None when the chain does not reach one."""
    if depth > 6:
        return None
    for b in cls.bases:
        qn = view.sem.qualname(b) or ""
        if qn.startswith("torchmetrics.") and qn.endswith("Metric"):
            return [cls]
        if isinstance(b, ast.Name) and view.classes.get(b.id) is not None and view.classes[b.id] is not cls:
            got = _metric_chain(view, view.classes[b.id], depth + 1)
            if got is not None:
                return [cls, *got]
    return None
