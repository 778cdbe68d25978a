"""Record classes and properties of the project, for ``origins.py``: what a field of a
``@dataclass`` / ``NamedTuple`` holds (the argument a construction ``Env(rank=r)`` binds to it, or
the field's default), and what a ``@property`` returns (``env.device`` where ``device`` is a
property of ``Env``). Only plain fields are read: a ``field(...)`` default, ``*args`` /
``**kwargs`` at a construction, or a base class with fields of its own leave a field unknown."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent

_PROPERTY = frozenset({"property", "cached_property", "functools.cached_property"})


def is_record(view, cls: ast.ClassDef) -> bool:
    """A ``@dataclass`` (any spelling of ``dataclasses.dataclass``, called or not) or a
    ``typing.NamedTuple`` subclass, with no other base (whose fields would come first)."""
    sem = view.sem
    for d in cls.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        if sem.qualname(f) == "dataclasses.dataclass":
            return not cls.bases
    return len(cls.bases) == 1 and sem.qualname(cls.bases[0]) == "typing.NamedTuple"


def fields(cls: ast.ClassDef) -> list[ast.AnnAssign]:
    """The fields in order: the annotated names of the class body (``ClassVar`` ones excluded)."""
    out = []
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.simple:
            ann = st.annotation
            base = ann.value if isinstance(ann, ast.Subscript) else ann
            if isinstance(base, (ast.Name, ast.Attribute)) and (base.id if isinstance(base, ast.Name) else base.attr) \
                    in ("ClassVar", "InitVar"):
                continue
            out.append(st)
    return out


def field_argument(view, cls: ast.ClassDef, call: ast.Call, name: str):
    """The expression construction ``call`` of record ``cls`` gives field ``name``: its keyword,
    its positional argument, or the field's plain default; None when unknown."""
    if not is_record(view, cls):
        return None
    fs = fields(cls)
    i = next((i for i, f in enumerate(fs) if f.target.id == name), None)
    if i is None:
        return None
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    kw = next((k.value for k in call.keywords if k.arg == name), None)
    if kw is not None:
        return kw
    if i < len(call.args):
        return call.args[i]
    d = fs[i].value
    if d is None or isinstance(d, ast.Call):  # no default, or ``field(default_factory=...)``
        return None
    return d


def self_field(view, cls: ast.ClassDef, name: str) -> list | None:
    """(call, argument) for every construction of record ``cls`` in its own module when ``name``
    is one of its fields; None when one of them leaves it unknown or none is seen."""
    from .calls import calls_by_name

    if not isinstance(parent(cls), ast.Module) or not is_record(view, cls) \
            or not any(f.target.id == name for f in fields(cls)):
        return None
    sites = [c for c in calls_by_name(view).get(cls.name, ()) if isinstance(c.func, ast.Name)]
    if not sites or len(sites) > 8:
        return None
    out = []
    for c in sites:
        a = field_argument(view, cls, c, name)
        if a is None:
            return None
        out.append((c, a))
    return out


def property_of(view, cls: ast.ClassDef, name: str):
    """The method ``name`` of ``cls`` when it is a ``@property`` (or a cached one), else None."""
    for st in cls.body:
        if isinstance(st, FUNC_TYPES) and st.name == name:
            if any(view.sem.qualname(d) in _PROPERTY or (isinstance(d, ast.Name) and d.id in _PROPERTY)
                   for d in st.decorator_list):
                return st
            return None
    return None
