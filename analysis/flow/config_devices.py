"""A config object's device field that a launcher path leaves at its dataclass default.

A configuration dataclass declares the CUDA device of a process as a field with a constant default
(``device: int = 0`` or ``field(default=0, ...)``); code pins ``torch.cuda.set_device(cfg.device)``
(any device-index use, ``flow/rank_kinds.device_sinks``) on a value of that class. The class of an
expression is read from annotations (a parameter annotated with a project class, a dataclass field
annotated with another: ``cfg.train.device`` where ``cfg: Top`` and ``Top.train: TrainCfg``), else
from its value (``built_class``): every origin (``flow/origins``: ``cfg = Config()``, a factory's
return, ``self.cfg`` built in ``__init__``, a record field's argument) constructs the same project
class, or every call of its function passes such a value (``args = Config(); setup(args)``, also
from another module of the program). A field's default counts as constant when it is an int
literal or every origin of it is one (a module constant, a config dict entry, an option default).

``torchrun_setups(hub, views)`` lists the functions that configure such an object for ``torchrun``:
they store into attributes of a parameter of the class values read from the launcher's global
environment (``RANK`` / ``WORLD_SIZE``), plain or tuple assignments. The value of the device field on
that path is its default unless an assignment sets it (a plain ``.device = ...`` in the function, or in
a project helper the function hands the object to; an unknown callee given the object counts as
setting it). A construction of the class or a ``dataclasses.replace`` that names the field (or
passes ``**kwargs``, or enough positional arguments), and a ``setattr`` that may name it (except a
field-by-field copy ``setattr(cfg, k, getattr(ns, k))`` of a parsed namespace, the same on every
process), clear it. An assignment elsewhere in the program clears the field too, except one that belongs
to another launcher's path, so its value is no local rank of ``torchrun``'s processes: inside a
function that reads another launcher's global rank (``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``: the
``SLURM_LOCALID`` it stores there is set on SLURM only), a torch_xla ordinal, or a parameter of a
function whose callers pass the field's own value (``pin(cfg.device)`` -> ``cfg.device = i``).
``device_default_gaps`` answers with (launcher function, the rank read in it, the field, its
declaration, the device use) for each field the launcher leaves at a constant default.
"""
from __future__ import annotations

import ast

from .rank_kinds import PLACED_RANK_ENV, device_sinks, env_keys_of
from .records import field_binding, is_record, record_field

TORCHRUN_GLOBAL = frozenset({"RANK", "WORLD_SIZE"})
TORCHRUN_ENV = TORCHRUN_GLOBAL | {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"}
_MAX = 4


def _param_annotation(fn, name: str):
    a = fn.args
    for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        if p.arg == name:
            return p.annotation
    return None


def _annotation_expr(ann):
    """``Cls`` of ``Cls``, ``"Cls"``, ``Optional[Cls]``."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(ann, ast.Subscript) and isinstance(ann.value, (ast.Name, ast.Attribute)) \
            and getattr(ann.value, "id", getattr(ann.value, "attr", "")) == "Optional":
        ann = ann.slice
    return ann if isinstance(ann, (ast.Name, ast.Attribute)) else None


def expr_class(hub, view, fn, expr, views=(), depth: int = 0):
    """(view, ClassDef) of the project class ``expr`` holds (module docstring): by annotations,
    else by value (``built_class``); ``views``: the program, whose calls fill a parameter."""
    if depth > _MAX:
        return None
    got = None
    if isinstance(expr, ast.Name) and fn is not None:
        ann = _annotation_expr(_param_annotation(fn, expr.id))
        got = hub.resolve_class(view, ann) if ann is not None else None
    elif isinstance(expr, ast.Attribute):
        base = expr_class(hub, view, fn, expr.value, views, depth + 1)
        f = record_field(base[0], base[1], expr.attr, bases=True) if base is not None else None
        ann = _annotation_expr(f[0].annotation) if f else None
        got = hub.resolve_class(base[0], ann) if ann is not None else None
    if got is None:
        got = built_class(hub, view, expr, views)
    if got is None and isinstance(expr, ast.Name) and fn is not None and not view.sem.assignments(fn).get(expr.id):
        got = _param_class(hub, view, fn, expr.id, views, depth)
    return got


def _param_class(hub, view, fn, name: str, views, depth: int):
    """The class of parameter ``name`` of ``fn`` by what its callers pass (their annotations or
    values, ``expr_class``), when every call gives it and all agree; else None."""
    from .calls import call_args

    if name not in [p.arg for p in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]:
        return None
    sites = [(view, c) for c in hub.call_sites(view, fn)]
    sites += [s for s in _callers(hub, views, fn) if not any(s[1] is c for _v, c in sites)]
    out = None
    for cv, c in sites[:8]:
        a = next((a for p, a in call_args(c, fn) if p == name), None)
        got = expr_class(hub, cv, cv.sem.enclosing_function(c), a, views, depth + 1) if a is not None else None
        if got is None or (out is not None and got[1] is not out[1]):
            return None
        out = got
    return out


def built_class(hub, view, expr, views=()):
    """(view, ClassDef) when every origin of ``expr`` (``flow/origins``: its bindings, the
    arguments its function's callers in ``views`` pass, a helper's returns, ``self.<attr>``'s
    bindings, a record field's argument) is a construction of one project class; else None."""
    from .origins import origins  # lazy: origins reads records and bindings

    if not isinstance(expr, (ast.Name, ast.Attribute)):
        return None
    memo = hub.__dict__.setdefault("_built_classes", {})
    key = (id(expr), *(id(v) for v in views))
    hit = memo.get(key)
    if hit is not None and hit[0] is expr:
        return hit[1]
    out = None
    leaves = origins(hub, view, expr, expr, callers=lambda v, f: _callers(hub, views, f))
    if leaves and len(leaves) <= 8:
        for lv, e, *_ in leaves:
            c = hub.resolve_class(lv, e.func) if isinstance(e, ast.Call) else None
            if c is None or (out is not None and c[1] is not out[1]):
                out = None
                break
            out = c
    memo[key] = (expr, out)
    return out


def _callers(hub, views, fn) -> list:
    """(view, call) of every call of project function ``fn`` in ``views`` (indexed once per check)."""
    memo = hub.__dict__.setdefault("_config_callers", {})
    key = tuple(id(v) for v in views)
    got = memo.get(key)
    if got is None or not all(a is b for a, b in zip(got[0], views)):
        index: dict = {}
        for v in views:
            for c in v.sem.calls:
                r = hub.resolve_call(v, c)
                if r is not None:
                    index.setdefault(id(r[1]), []).append((v, c))
        got = memo[key] = (list(views), index)
    return got[1].get(id(fn), [])


def field_of(hub, view, fn, expr, views=()):
    """(class view, ClassDef, field name) when ``expr`` is ``<value of a dataclass>.<field>``."""
    if not isinstance(expr, ast.Attribute):
        return None
    got = expr_class(hub, view, fn, expr.value, views)
    if got is None or record_field(got[0], got[1], expr.attr, bases=True) is None:
        return None
    return got[0], got[1], expr.attr


def _same(a, b) -> bool:
    return a is not None and b is not None and a[1] is b[1] and a[2] == b[2]


def _targets(stmt):
    """(target, value or None) pairs of an assignment statement (tuples element by element)."""
    if isinstance(stmt, ast.Assign):
        out = []
        for t in stmt.targets:
            if isinstance(t, ast.Tuple) and isinstance(stmt.value, ast.Tuple) and len(t.elts) == len(stmt.value.elts):
                out.extend(zip(t.elts, stmt.value.elts))
            elif isinstance(t, ast.Tuple):
                out.extend((e, None) for e in t.elts)
            else:
                out.append((t, stmt.value))
        return out
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return [(stmt.target, stmt.value)]
    return []


def _reads_placed(hub, view, fn) -> bool:
    """``fn`` reads another launcher's global rank (its path is that launcher's)."""
    for n in ast.walk(fn):
        if isinstance(n, (ast.Call, ast.Subscript)):
            keys = env_keys_of(hub, view, n, n)
            if keys and keys & PLACED_RANK_ENV:
                return True
    return False


def _assigns_by_function(view) -> dict:
    """{function: its own ``=`` and annotated assignments, in ``ast.walk(function)``'s order},
    grouped once per module (walking every function again was quadratic in the nesting)."""
    got = view.memo.get("config_devices.assigns")
    if got is None:
        got = view.memo["config_devices.assigns"] = {}
        ef = view.sem.enclosing_function
        for s in view.sem.walk_order():
            if s.__class__ is ast.Assign or s.__class__ is ast.AnnAssign:
                fn = ef(s)
                if fn is not None:
                    got.setdefault(fn, []).append(s)
    return got


def torchrun_setups(hub, views) -> list:
    """[(view, fn, param, (class view, ClassDef), {attr: stmt}, rank read stmt)] (module docstring)."""
    out = []
    for v in views:
        by_fn = _assigns_by_function(v)
        for fn in (f for fs in v.sem.functions.values() for f in fs):
            stores: dict = {}
            read = None
            for s in by_fn.get(fn, ()):
                for t, val in _targets(s):
                    if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)):
                        continue
                    stores.setdefault(t.value.id, {})[t.attr] = s
                    keys = env_keys_of(hub, v, val, s) if val is not None else None
                    if read is None and keys and keys <= TORCHRUN_ENV and keys & TORCHRUN_GLOBAL:
                        read = (t.value.id, s, t.value)
            if read is None:
                continue
            cls = expr_class(hub, v, fn, read[2], views)
            if cls is not None and is_record(*cls, bases=True):
                out.append((v, fn, read[0], cls, stores.get(read[0], {}), read[1]))
    return out


def _hands_object(hub, view, fn, param: str, attr: str, depth: int = 0) -> bool:
    """``fn`` passes ``param`` to a callee that may set ``.attr`` on it (unknown callees may)."""
    for c in view.sem.scope_calls(fn):
        given = [a for a in (*c.args, *(k.value for k in c.keywords)) if isinstance(a, ast.Name) and a.id == param]
        if not given:
            continue
        got = hub.resolve_call(view, c)
        if got is None or depth >= _MAX:
            return True
        v2, f2 = got
        names = [p.arg for p in (*f2.args.posonlyargs, *f2.args.args, *f2.args.kwonlyargs)]
        pos = [i for i, a in enumerate(c.args) if isinstance(a, ast.Name) and a.id == param]
        kws = [k.arg for k in c.keywords if isinstance(k.value, ast.Name) and k.value.id == param]
        off = 1 if names and names[0] in ("self", "cls") and isinstance(c.func, ast.Attribute) else 0
        inner = [names[i + off] for i in pos if i + off < len(names)] + [k for k in kws if k]
        if len(inner) != len(given):
            return True
        for p in inner:
            if any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == p and t.attr == attr
                   for s in ast.walk(f2) for t, _v in _targets(s)):
                return True
            if _hands_object(hub, v2, f2, p, attr, depth + 1):
                return True
    return False


def _flows_from_field(hub, view, fn, val, fld, views) -> bool:
    """``val`` is a parameter of ``fn`` that some project caller fills with the field itself."""
    if not (isinstance(val, ast.Name) and _param_annotation(fn, val.id) is None
            and any(p.arg == val.id for p in (*fn.args.posonlyargs, *fn.args.args))):
        return False
    idx = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args)].index(val.id)
    for v, c in _callers(hub, views, fn):
        if idx < len(c.args) and isinstance(c.args[idx], ast.Attribute) \
                and _same(field_of(hub, v, v.sem.enclosing_function(c), c.args[idx], views), fld):
            return True
    return False


def _other_path(hub, view, fn, val) -> bool:
    """An assignment of the field that is no local rank of torchrun's processes (module docstring)."""
    if val is None:
        return False
    if isinstance(val, ast.Call) and (view.sem.qualname(val.func) or "").startswith("torch_xla."):
        return True
    return fn is not None and _reads_placed(hub, view, fn)


def device_default_gaps(hub, views) -> list:
    """[(setup, field name, (class view, AnnAssign), (use view, use node))] for each device field a
    torchrun setup of ``views`` leaves at a constant default while the program pins it."""
    setups = torchrun_setups(hub, views)
    if not setups:
        return []
    index = _store_index(hub, views)
    uses = []
    for v in views:
        for site, _call, _what in device_sinks(v):
            fn = v.sem.enclosing_function(site)
            fld = field_of(hub, v, fn, site, views)
            if fld is not None:
                uses.append((v, fn, site, fld))
    out = []
    for setup in setups:
        v, fn, param, (cv, cls), stores, _read = setup
        for uv, ufn, site, fld in uses:
            if fld[1] is not cls or fld[2] in stores:
                continue
            decl = record_field(cv, cls, fld[2], bases=True)
            if decl is None or not _constant_int(hub, cv, decl[1]):
                continue
            if _hands_object(hub, v, fn, param, fld[2]) or _set_elsewhere(hub, views, index, fld):
                continue
            out.append((setup, fld[2], (cv, decl[0]), (uv, site)))
            break
    return out


def _constant_int(hub, view, expr) -> bool:
    """``expr`` (a field's default) is an integer constant, written there or held by a module
    value it reads (``_DEFAULTS["gpu"]``, ``defaults.gpu``: every origin an int literal)."""
    from .origins import origins  # lazy: origins reads records and bindings

    if expr is None:
        return False
    leaves = [expr] if isinstance(expr, ast.Constant) else [e for _v, e, *_ in origins(hub, view, expr, expr)]
    return bool(leaves) and all(isinstance(e, ast.Constant) and type(e.value) is int for e in leaves)


def _copies(c: ast.Call) -> bool:
    """``setattr(cfg, k, getattr(other, k))``: a field-by-field copy of another object (a parsed
    namespace), which holds what the command line gave every process alike."""
    v = c.args[2]
    return isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "getattr" \
        and len(v.args) >= 2 and ast.dump(v.args[1]) == ast.dump(c.args[1])


def set_in(hub, views, cls_view, cls, attr: str) -> bool:
    """An assignment in ``views`` may set field ``attr`` of ``cls`` on the torchrun path (for a
    rule that also asks the project's modules outside the program, the ones naming the field)."""
    return _set_elsewhere(hub, views, _store_index(hub, views), (cls_view, cls, attr))


def _store_index(hub, views) -> tuple:
    """What of ``views`` may set a field, found in one pass per check (kept on the hub per list of
    views): the calls that construct a project record, ``dataclasses.replace`` calls and
    ``setattr`` calls (not field-by-field copies), and the attribute assignments by name."""
    memo = hub.__dict__.setdefault("_config_stores", {})
    key = tuple(id(v) for v in views)
    got = memo.get(key)
    if got is not None and all(a is b for a, b in zip(got[0], views)):
        return got[1]
    calls, assigns = [], {}
    for v in views:
        for c in v.sem.calls:
            if isinstance(c.func, ast.Name) and c.func.id == "setattr" and len(c.args) >= 3:
                if not _copies(c):
                    calls.append((v, c, "setattr", None))
            elif v.sem.call_qualname(c) == "dataclasses.replace":
                calls.append((v, c, "replace", None))
            elif (built := hub.resolve_class(v, c.func)) is not None:
                calls.append((v, c, "build", built))
        for s in ast.walk(v.tree):
            if s.__class__ in (ast.Assign, ast.AnnAssign, ast.AugAssign):
                for t, val in _targets(s):
                    if isinstance(t, ast.Attribute):
                        assigns.setdefault(t.attr, []).append((v, s, t, val))
    index = (calls, assigns)
    memo[key] = (list(views), index)
    return index


def _set_elsewhere(hub, views, index, fld) -> bool:
    calls, assigns = index
    for v, c, kind, built in calls:
        # a construction or ``replace`` that names the field (or may: ``**kwargs``, positional
        # arguments that reach it), a ``setattr`` that may name it
        if kind == "build" and built == (fld[0], fld[1]):
            got = field_binding(fld[0], fld[1], c, fld[2], bases=True)
            if got is None or got[0] != "default":
                return True
        elif kind == "replace" and any(k.arg == fld[2] or k.arg is None for k in c.keywords):
            return True
        elif kind == "setattr" and not (isinstance(c.args[1], ast.Constant) and c.args[1].value != fld[2]):
            got = expr_class(hub, v, v.sem.enclosing_function(c), c.args[0], views)
            if got is None or got[1] is fld[1]:  # (not an object of another class)
                return True
    for v, s, t, val in assigns.get(fld[2], ()):
        fn = v.sem.enclosing_function(s)
        got = field_of(hub, v, fn, t, views)
        if got is not None and not _same(got, fld):
            continue  # another class's field of that name
        if isinstance(s, ast.AugAssign) or _other_path(hub, v, fn, val) \
                or (fn is not None and _flows_from_field(hub, v, fn, val, fld, views)):
            continue
        return True
    return False
