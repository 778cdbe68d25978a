"""Epoch iterators and the datasets that take the epoch (DDP301).

An *epoch iterator* is a class whose method advances its own epoch counter (``self.epoch += 1``)
and starts a new pass over a dataset it holds by building ``DataLoader(self.dataset, ...)`` (in
that method or in a method of the class it calls). A dataset *takes the epoch* when its class
defines ``set_epoch(self, epoch)`` that stores the epoch in ``self.<x>`` and another method of the
class (``__getitem__``, ``__iter__``, ...) reads ``self.<x>``: what it yields depends on the epoch.
The project-wide facts are read from the project's files that spell ``set_epoch`` (parsed through
the flow layer, so they are dependencies of the check).
"""
from __future__ import annotations

import ast
import os

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes
from ._loader import DATALOADER

NEEDS = (("set_epoch",),)


def _self_attr(e) -> str | None:
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return e.attr
    return None


def _classes(sem) -> list:
    if ast.ClassDef in sem.wanted:
        return sem.by_type.get(ast.ClassDef, [])
    return [n for n in ast.walk(sem.tree) if isinstance(n, ast.ClassDef)]


def epoch_advances(ctx):
    """[(class, method, the ``self.<e> += ...`` statement, dataset attribute)] for each method of
    a class of this module that advances ``self.<e>`` by one and builds ``DataLoader(self.<d>, ...)``
    itself or through a method of the class it hands ``self.<e>`` to (``self.<m>(self.<e>)``)."""
    out = []
    for cls in _classes(ctx.sem):
        methods = {f.name: f for f in cls.body if isinstance(f, FUNC_TYPES)}
        if not methods:
            continue
        for m in methods.values():
            steps = [n for n in iter_scope_nodes(m) if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add)
                     and _self_attr(n.target) and isinstance(n.value, ast.Constant) and n.value.value == 1]
            if not steps:
                continue
            e = _self_attr(steps[0].target)
            # the pass for the new epoch: a DataLoader over ``self.<d>`` built in ``m`` or in a
            # method ``m`` hands the advanced epoch to (``self._iter_for(self.epoch, ...)``)
            walked = [m, *(methods[c.func.attr] for c in iter_scope_nodes(m) if isinstance(c, ast.Call)
                           and _self_attr(c.func) in methods and methods[c.func.attr] is not m
                           and any(_self_attr(n) == e for a in (*c.args, *(k.value for k in c.keywords))
                                   for n in ast.walk(a)))]
            ds = None
            for fn in walked:
                for c in iter_scope_nodes(fn):
                    if isinstance(c, ast.Call) and ctx.sem.call_qualname(c) == DATALOADER:
                        ds = _self_attr(get_arg(c, 0, "dataset")) or ds
            if ds is not None:
                out.append((cls, m, steps[0], ds))
    return out


def calls_set_epoch_outside_forwarders(sem) -> bool:
    """The module calls ``<x>.set_epoch(...)`` other than inside a function named ``set_epoch``
    (a forwarder passes on an epoch it was given; it does not start one)."""
    for c in sem.calls:
        if isinstance(c.func, ast.Attribute) and c.func.attr == "set_epoch":
            fn = sem.enclosing_function(c)
            if fn is None or fn.name != "set_epoch":
                return True
    return False


def takes_epoch(cls: ast.ClassDef) -> bool:
    """``cls`` is a dataset (it defines ``__getitem__`` or ``__iter__`` and no base of it is named
    like a sampler) and defines ``set_epoch(self, epoch)`` storing the epoch in ``self.<x>``, and another of
    its methods (not ``__init__``) reads ``self.<x>``."""
    names = {f.name for f in cls.body if isinstance(f, FUNC_TYPES)}
    if not names & {"__getitem__", "__iter__"} or any(
            (b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "").endswith("Sampler")
            for b in cls.bases):
        return False  # a dataset (map-style or iterable), not a sampler
    st = next((f for f in cls.body if isinstance(f, FUNC_TYPES) and f.name == "set_epoch"), None)
    if st is None or len(st.args.args) < 2:
        return False
    ep = st.args.args[1].arg
    stored = {_self_attr(t) for n in iter_scope_nodes(st) if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Name) and n.value.id == ep for t in n.targets} - {None}
    if not stored:
        return False
    for f in cls.body:
        if isinstance(f, FUNC_TYPES) and f.name not in ("set_epoch", "__init__"):
            if any(isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and _self_attr(n) in stored
                   for n in iter_scope_nodes(f)):
                return True
    return False


def project_root(filename: str | None) -> str | None:
    from ..flow import project

    if not filename or filename.startswith("<") or not project.is_file(os.path.abspath(filename)):
        return None
    roots = project.roots_for(os.path.abspath(filename))
    return roots[1] if len(roots) > 1 else roots[0]


def gate(text: str, filename: str | None):
    """(may fire, deps): the project's files that spell ``set_epoch``, when this file may hold an
    epoch iterator (an augmented assignment and a DataLoader)."""
    from ._common import _admitting_files
    from ..flow import project

    if "+=" not in text or "DataLoader" not in text:
        return False, {}
    top = project_root(filename)
    if top is None:
        return False, {}
    files, _index, deps = _admitting_files(top, NEEDS, project.disk_allowed())
    here = os.path.abspath(filename)
    deps = {p: h for p, h in deps.items() if p != here}
    return bool(files), deps


def unfed_epoch_datasets(ctx) -> list:
    """[(view, class)] of the project's dataset classes that take the epoch, when no file of the
    project calls ``set_epoch`` outside a ``set_epoch`` forwarder; [] otherwise."""
    def build():
        from ._common import _admitting_files
        from ..flow import for_context, project

        top = project_root(ctx.filename)
        if top is None:
            return []
        files, _index, _deps = _admitting_files(top, NEEDS, project.disk_allowed())
        if len(files) > 64:
            return []  # a large package: too many files to read for one check
        an = for_context(ctx)
        found = []
        for path, _text in files:
            view = an.main if os.path.abspath(path) == os.path.abspath(ctx.filename) else an.view_of(path)
            if view is None:
                return []  # unreadable: it may call set_epoch
            if calls_set_epoch_outside_forwarders(view.sem):
                return []
            for cls in _classes(view.sem):
                if takes_epoch(cls):
                    found.append((view, cls))
        return found

    return ctx.memo("ddp301.unfed_epoch_datasets", build)
