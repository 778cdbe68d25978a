"""Record classes and properties of the project, for ``origins.py``: what a field of a
``@dataclass`` / ``NamedTuple`` holds (the argument a construction ``Env(rank=r)`` binds to it, or
the field's default), and what a ``@property`` returns (``env.device`` where ``device`` is a
property of ``Env``). A field's declaration, default and metadata (``record_field``, a plain
default or ``field(default=...)``'s) are read in one place for origins and the config rules;
``*args`` / ``**kwargs`` at a construction, or a base class with fields of its own, leave a
field's argument unknown.
Also the project class a name refers to (``class_named``) and a class's chain of project base
classes (``class_chain``), which ``origins`` reads for a property a base class defines."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent

# top-level modules that are never part of the user's project
_NOT_PROJECT = frozenset({"torch", "os", "sys", "math", "time", "json", "logging", "numpy", "np", "random",
                          "argparse", "re", "collections", "functools", "itertools", "typing", "pathlib",
                          "shutil", "subprocess", "datetime", "copy", "pickle", "warnings", "dataclasses",
                          "torchvision", "transformers", "tqdm", "yaml", "wandb"})  # project modules one check may load
_PROPERTY = frozenset({"property", "cached_property", "functools.cached_property"})


_DATACLASS = frozenset({"dataclasses.dataclass", "pydantic.dataclasses.dataclass"})
_FIELD_SPEC = frozenset({"dataclasses.field", "pydantic.Field", "pydantic.fields.Field"})


def is_record(view, cls: ast.ClassDef, bases: bool = False) -> bool:
    """A ``@dataclass`` (any spelling of ``dataclasses.dataclass`` or pydantic's, called or not)
    or a ``typing.NamedTuple`` subclass, with no other base (whose fields would come first);
    ``bases``: a dataclass with base classes counts too (its own fields are read, and no
    positional argument of a construction is known to reach one)."""
    sem = view.sem
    for d in cls.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        if sem.qualname(f) in _DATACLASS:
            return bases or not cls.bases
    return len(cls.bases) == 1 and sem.qualname(cls.bases[0]) == "typing.NamedTuple"


def _annotation_kind(ann) -> str | None:
    base = ann.value if isinstance(ann, ast.Subscript) else ann
    name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
    return name if name in ("ClassVar", "InitVar") else None


def fields(cls: ast.ClassDef, init: bool = False) -> list[ast.AnnAssign]:
    """The fields in order: the annotated names of the class body (``ClassVar`` ones excluded);
    ``init``: the parameters of the generated ``__init__`` instead, in order (``InitVar``
    pseudo-fields included, which hold no attribute, and ``field(init=False)`` ones left out)."""
    out = []
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.simple:
            kind = _annotation_kind(st.annotation)
            if kind == "ClassVar" or (kind == "InitVar" and not init):
                continue
            if init and _spec(st.value) is not None and any(
                    k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in st.value.keywords):
                continue
            out.append(st)
    return out


def _spec(v):
    """``v`` when it is a ``field(...)`` specification (dataclasses' or pydantic's), else None."""
    if isinstance(v, ast.Call):
        f = v.func
        if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) in ("field", "Field"):
            return v
    return None


def record_field(view, cls: ast.ClassDef, name: str, bases: bool = False):
    """(declaration, default, metadata) of field ``name`` of record ``cls`` (``bases`` as for
    ``is_record``): the default is the plain one or ``field(default=...)``'s, None for none or a
    ``default_factory``; the metadata the ``field(metadata={...})`` dict literal or None. None when
    ``cls`` is no record or has no such field. The one answer to "what a record field holds
    unless a construction gives it", for ``field_argument`` (origins) and the config rules."""
    if not is_record(view, cls, bases):
        return None
    decl = next((f for f in fields(cls) if f.target.id == name), None)
    if decl is None:
        return None
    spec = _spec(decl.value)
    if spec is None:
        return decl, decl.value, None
    kw = {k.arg: k.value for k in spec.keywords}
    meta = kw.get("metadata")
    return decl, kw.get("default"), meta if isinstance(meta, ast.Dict) else None


def field_binding(view, cls: ast.ClassDef, call: ast.Call, name: str, bases: bool = False):
    """What construction ``call`` of record ``cls`` binds to field ``name``: ("argument", expr)
    for its keyword or positional argument, ("default", expr or None) when it passes none,
    ("unknown", None) when ``*args`` / ``**kwargs`` may (or, ``bases``, a positional argument of a
    class with bases); None when ``cls`` is no record or has no such field."""
    got = record_field(view, cls, name, bases)
    if got is None:
        return None
    kw = next((k.value for k in call.keywords if k.arg == name), None)
    if kw is not None:
        return "argument", kw
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return "unknown", None
    if call.args and cls.bases and not (len(cls.bases) == 1 and view.sem.qualname(cls.bases[0]) == "typing.NamedTuple"):
        return "unknown", None
    params = fields(cls, init=True)
    i = next((i for i, f in enumerate(params) if f is got[0]), None)
    if i is not None and i < len(call.args):
        return "argument", call.args[i]
    return "default", got[1]


def field_argument(view, cls: ast.ClassDef, call: ast.Call, name: str):
    """The expression construction ``call`` of record ``cls`` gives field ``name``: its keyword,
    its positional argument, or the field's default (``record_field``); None when unknown."""
    got = field_binding(view, cls, call, name)
    return got[1] if got is not None else None


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


def class_named(hub, view, e: ast.AST, not_project):
    """(view, class) of the project class a name (``Cls``, a base class) or ``module.Cls`` of an
    imported project module refers to, else None (``not_project``: top-level modules never read)."""
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
        imp = view.imports.get(e.value.id)
        if imp is None or imp[0].split(".", 1)[0] in not_project:
            return None
        mod, level, attr = imp
        v2 = hub.module_view(view, f"{mod}.{attr}" if (attr and mod) else (attr or mod), level)
        return (v2, v2.classes[e.attr]) if v2 is not None and e.attr in v2.classes else None
    if not isinstance(e, ast.Name):
        return None
    cname = e.id
    for _ in range(4):  # a package's ``__init__`` may re-export it (``from .model import CLIP``)
        if cname in view.classes:
            return view, view.classes[cname]
        imp = view.imports.get(cname)
        if imp is None:
            # ``from .defaults import *`` in a package's ``__init__``: the last star import of a
            # project module that defines or imports the name wins, as at run time
            v2 = _star_source(hub, view, cname, not_project)
            if v2 is None:
                return None
            view = v2
            continue
        if imp[2] is None or imp[0].split(".", 1)[0] in not_project:
            return None
        v2 = hub.module_view(view, imp[0], imp[1])
        if v2 is None or v2 is view:
            return None
        view, cname = v2, imp[2]
    return None


def _star_source(hub, view, name: str, not_project):
    """The project module that ``view`` star-imports ``name`` from (it defines the class or
    imports the name itself), the last such import winning; None for a private name or one the
    module binds itself."""
    if name.startswith("_") or not getattr(view, "star_imports", None) or name in view.sem.assignments(view.tree):
        return None
    for mod, level in reversed(view.star_imports):
        if not level and mod.split(".", 1)[0] in not_project:
            continue
        v2 = hub.module_view(view, mod, level)
        if v2 is not None and v2 is not view and (name in v2.classes or name in v2.imports):
            return v2
    return None


def class_chain(hub, view, cls: ast.ClassDef, not_project=None, depth: int = 0, seen=None) -> list:
    """(view, class) of ``cls`` and its base classes of the project (this module or an imported
    one), depth first, each once (``not_project``: top-level modules never read, by default
    ``_NOT_PROJECT``)."""
    seen = set() if seen is None else seen
    if id(cls) in seen or depth > 5 or len(seen) > 24:
        return []
    seen.add(id(cls))
    out = [(view, cls)]
    for b in cls.bases:
        got = class_named(hub, view, b, _NOT_PROJECT if not_project is None else not_project)
        if got is not None:
            out.extend(class_chain(hub, got[0], got[1], not_project, depth + 1, seen))
    return out


def library_bases(hub, view, cls: ast.ClassDef, not_project=None) -> set:
    """The qualified names of the classes outside the project that ``cls`` derives from, through
    its project bases (``class Resumable(DistributedSampler)``, or a project base that does):
    ``class_chain``'s classes' bases that are no project class."""
    np = _NOT_PROJECT if not_project is None else not_project
    out = set()
    for v, c in class_chain(hub, view, cls, not_project):
        for b in c.bases:
            if class_named(hub, v, b, np) is None:
                qn = v.sem.qualname(b)
                if qn:
                    out.add(qn)
    return out


# bases that define no method a subclass could call through ``self``
_EMPTY_BASES = frozenset({"object", "abc.ABC", "typing.Generic", "typing.Protocol", "typing_extensions.Protocol"})


def method_order(hub, view, cls: ast.ClassDef, not_project=None) -> list | None:
    """The method resolution order of ``cls`` as Python computes it (C3 linearisation), as
    ``(view, class)`` pairs; a base that is not a class of the project (a library class) stands as
    ``(None, name)``: its methods are unknown. Bases that define nothing (``object``, ``ABC``,
    ``Generic[...]``) are left out. None when the order cannot be computed (an inconsistent
    hierarchy, or one deeper than a few levels)."""
    np = _NOT_PROJECT if not_project is None else not_project
    return _linearise(hub, view, cls, np, 0, set())


def _linearise(hub, view, cls, np, depth: int, stack: set):
    if depth > 6 or id(cls) in stack:
        return None
    stack = stack | {id(cls)}
    seqs = []
    heads = []
    for b in cls.bases:
        e = b.value if isinstance(b, ast.Subscript) else b  # ``Base[T]``
        got = class_named(hub, view, e, np)
        if got is not None:
            lin = _linearise(hub, got[0], got[1], np, depth + 1, stack)
            if lin is None:
                return None
            seqs.append(lin)
            heads.append(lin[0])
            continue
        qn = view.sem.qualname(e) or (e.id if isinstance(e, ast.Name) else None) or ast.unparse(e)
        if qn in _EMPTY_BASES or (isinstance(e, ast.Name) and e.id == "object"):
            continue
        entry = (None, qn)
        seqs.append([entry])
        heads.append(entry)
    if heads:
        seqs.append(list(heads))
    out = [(view, cls)]

    def key(entry):
        return id(entry[1]) if entry[0] is not None else ("lib", entry[1])

    seqs = [list(s) for s in seqs if s]
    while seqs:
        for s in seqs:
            k = key(s[0])
            if not any(k in {key(x) for x in t[1:]} for t in seqs):
                head = s[0]
                break
        else:
            return None  # no consistent order: Python raises TypeError at the class statement
        out.append(head)
        k = key(head)
        seqs = [t for t in ([x for x in s if key(x) != k] for s in seqs) if t]
    return out


def own_method(view, cls: ast.ClassDef, name: str):
    """``(view, function)`` of the method ``name`` that ``cls`` defines in its own body, else None."""
    for st in cls.body:
        if isinstance(st, FUNC_TYPES) and st.name == name:
            return view, st
    return None


def method_of(hub, view, cls: ast.ClassDef, name: str, not_project=None):
    """``(view, function)`` that ``self.name`` runs on an instance of ``cls``: its own method, else,
    for a class with bases, ``inherited_method``'s answer."""
    got = own_method(view, cls, name)
    if got is None and cls.bases:
        return inherited_method(hub, view, cls, name, not_project)
    return got


def inherited_method(hub, view, cls: ast.ClassDef, name: str, not_project=None):
    """``(view, function)`` that ``self.name`` finds for an instance of ``cls``: the first class of
    its method resolution order (``method_order``) that defines ``name``, also a project base
    class in another module (a mixin's method). None when a library base class comes first (it
    may define the name), when a class on the way binds the name otherwise (``name = other``), or
    when no class of the order defines it."""
    order = method_order(hub, view, cls, not_project)
    if order is None:
        return None
    for v, c in order:
        if v is None:
            return None
        for st in c.body:
            if isinstance(st, FUNC_TYPES) and st.name == name:
                return v, st
            if isinstance(st, (ast.Assign, ast.AnnAssign)) and any(
                    isinstance(t, ast.Name) and t.id == name
                    for t in (st.targets if isinstance(st, ast.Assign) else [st.target])):
                return None
    return None


def callee_name(target) -> str:
    """The name of the function of ``target`` (view, function), its class's for an ``__init__``."""
    return function_name(target[1])


def function_name(fn) -> str:
    """``fn``'s name, or its class's for an ``__init__`` (``Trainer`` for ``Trainer(...)``)."""
    name = getattr(fn, "name", "?")
    if name == "__init__":
        name = getattr(parent(fn), "name", name)
    return name
