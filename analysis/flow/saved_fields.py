"""A field of a file the module itself writes: ``ckpt = torch.load(path); ckpt["epoch"]`` where every
``torch.save(...)`` of the same module to a file of the same name (``os.path.join(d,
f"shard.{rank}.pt")`` on both sides, whatever the folder) saves a dict written out (``{"epoch":
epoch, ...}``, also through a name bound to one) with that key: the field holds what the writer put
there. A per-rank file (its path holds the rank) is rank-varying as a whole, but a field that every
rank wrote with the same value reads back the same on every rank; the field's value is the join of
what the writers store under that key, as the writer's module reads it (``uniformity``)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes
from .bindings import reaching
from .values import X, join

_LOADS = frozenset(("torch.load",))
_SAVES = frozenset(("torch.save",))
_JOINS = frozenset(("os.path.join", "posixpath.join"))


def saved_field(ev, e: ast.Subscript, d: int):
    """The value of ``e`` (``<loaded>["key"]``) from the module's saves of that file, or None when
    ``e`` is no such field (another container, a key not written out, a save of another kind)."""
    key = e.slice
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return None
    load = _load_of(ev.view, e.value)
    if load is None:
        return None
    name = file_shape(ev.view, get_arg(load, 0, "f"), load, 0)
    if name is None:
        return None
    view = ev.view
    memo = view.memo.setdefault("saved_fields", {})
    mk = (name, key.value)
    if mk in memo:
        return memo[mk]
    memo[mk] = X  # a save that reads its own file back (asked again while answering): unknown
    vals = []
    for _v, c in file_saves((view,), name):
        fields = _dict_of(view, get_arg(c, 0, "obj"), c)
        if fields is None or key.value not in fields:
            vals = None
            break
        vals.append(ev.hub.evaluator(view).value(fields[key.value], d + 1))
    got = join(vals) if vals else None
    memo[mk] = got
    return got


def file_saves(views, name) -> list:
    """(view, call) of every ``torch.save`` of ``views`` to a file named ``name`` (``file_shape``)."""
    return [(v, c) for v in views for c in v.sem.calls_to(*_SAVES)
            if file_shape(v, get_arg(c, 1, "f"), c, 0) == name]


def file_words(view, path, at) -> tuple:
    """Words a module that writes the file ``path`` names must hold in its text: the file's name
    when it is written out, else the longest literal piece of the f-string that makes it
    (``"model_shard_"`` of ``f"model_shard_{rank}.pt"``); empty when neither is known."""
    leaf = _file_leaf(view, path, at, 0)
    if isinstance(leaf, ast.Constant):
        name = leaf.value.replace("\\", "/").rsplit("/", 1)[-1]
        return (name,) if name else ()
    if isinstance(leaf, ast.JoinedStr):
        pieces = [v.value for v in leaf.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
        pieces = [p for p in pieces if p.isprintable() and "\\" not in p and any(ch.isalnum() for ch in p)]
        return (max(pieces, key=len),) if pieces else ()
    return ()


def _load_of(view, expr):
    """The ``torch.load(...)`` call ``expr`` is, or that the one binding of the name ``expr`` reaching it gives."""
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, expr)
        if kind != "events" or not evs or len(evs) != 1:
            return None
        st = evs[0]
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
            return None
        expr = st.value
    if isinstance(expr, ast.Call) and (view.sem.call_qualname(expr) or "") in _LOADS:
        return expr
    return None


def _dict_of(view, expr, at):
    """key -> value of the dict written out that ``expr`` holds (a literal with constant string keys,
    or the one binding of a name to one, not written into after), else None."""
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, at)
        if kind != "events" or not evs or len(evs) != 1:
            return None
        st = evs[0]
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
            return None
        fn = view.sem.enclosing_function(st)
        for n in ast.walk(fn if fn is not None else view.sem.tree):
            if (isinstance(n, (ast.Assign, ast.AugAssign)) and any(
                    isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == expr.id
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))) or (
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("update", "setdefault")
                    and isinstance(n.func.value, ast.Name) and n.func.value.id == expr.id):
                return None  # written into after: not only the literal's keys
        expr = st.value
    if not isinstance(expr, ast.Dict):
        return None
    out = {}
    for k, v in zip(expr.keys, expr.values):
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            return None  # ``**extra`` or a computed key: not every key is known
        out[k.value] = v
    return out


def file_shape(view, path, at, depth, hub=None):
    """The name of the file ``path`` names, as plain data: its last component (a string, or the dump
    of an f-string with its placeholders), through ``os.path.join``, ``/`` and one binding of a name;
    with ``hub``, also a parameter that every call of its function in the module (at least one,
    ``hub.call_sites``) gives a path of the same name (``r.resume("runs/latest.pt")``); else None."""
    return _shape(_file_leaf(view, path, at, depth, hub))


def _shape(leaf):
    if isinstance(leaf, ast.Constant):
        return leaf.value.replace("\\", "/").rsplit("/", 1)[-1] or None
    if isinstance(leaf, ast.JoinedStr):
        if any(isinstance(v, ast.Constant) and "/" in str(v.value) for v in leaf.values):
            return None
        return ast.dump(leaf)
    return None


def _file_leaf(view, path, at, depth, hub=None):
    """The string literal or f-string whose last component names the file ``path`` names (see
    ``file_shape``), else None."""
    if depth > 3 or path is None:
        return None
    if (isinstance(path, ast.Constant) and isinstance(path.value, str)) or isinstance(path, ast.JoinedStr):
        return path
    if isinstance(path, ast.Call) and (view.sem.call_qualname(path) or "") in _JOINS and path.args and not path.keywords:
        return _file_leaf(view, path.args[-1], at, depth + 1, hub)
    if isinstance(path, ast.BinOp) and isinstance(path.op, ast.Div):
        return _file_leaf(view, path.right, at, depth + 1, hub)
    if isinstance(path, ast.Call) and isinstance(path.func, ast.Name) and isinstance(
            view.defs.get(path.func.id), FUNC_TYPES):  # a function of the module that returns the path
        fn = view.defs[path.func.id]
        leaves = [_file_leaf(view, r.value, r, depth + 1) for r in iter_scope_nodes(fn) if isinstance(r, ast.Return)]
        return leaves[0] if leaves and len({_shape(x) for x in leaves}) == 1 else None
    if isinstance(path, ast.Name):
        kind, evs = reaching(view, path.id, at)
        if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) \
                and len(evs[0].targets) == 1 and isinstance(evs[0].targets[0], ast.Name):
            return _file_leaf(view, evs[0].value, evs[0], depth + 1, hub)
        if kind == "param" and hub is not None and isinstance(evs, FUNC_TYPES):
            return _passed_leaf(view, evs, path.id, depth, hub)
    return None


def _passed_leaf(view, fn, name: str, depth, hub):
    """The leaf every call of ``fn`` in its module passes for its parameter ``name`` (one name)."""
    from .calls import call_args

    leaves = []
    for c in hub.call_sites(view, fn):
        args = [a for p, a in call_args(c, fn) if p == name]
        leaves.append(_file_leaf(view, args[0], c, depth + 1, hub) if len(args) == 1 else None)
    if not leaves or any(x is None for x in leaves) or len({_shape(x) for x in leaves}) != 1:
        return None
    return leaves[0]
