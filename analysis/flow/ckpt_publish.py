"""Publishing a checkpoint before its asynchronous save is durable: a write that points at the
checkpoint (a ``latest`` symlink, a marker file holding its path) between the
``dcp.async_save(...)`` that writes it and the wait on that save's future.

- ``async_starts(hub, view, fn)``: (call, checkpoint id expression) for each call of ``fn`` that
  starts an ``async_save`` and returns without waiting it: ``dcp.async_save(sd, checkpoint_id=p)``
  itself, or a project helper / method that runs one with the path it is given
  (``self.checkpointer.save(sd, checkpoint_id=path)``), a few calls deep;
- ``waits(hub, view, call)``: does a call wait a future (``.result()``, ``.wait()``...), itself or
  in the project function it runs (``self.checkpointer.wait()``);
- ``published(hub, view, fn, start, forms)``: the first call of ``fn`` after ``start`` and before
  any wait that writes a pointer to the checkpoint: ``os.symlink(name, link)``,
  ``Path.symlink_to(name)``, ``f.write(name)`` / ``Path.write_text(name)`` / ``json.dump(name, f)``
  where ``name`` is the checkpoint's path or its last component *by value*, directly or in a
  project helper it passes the value to (``self._commit_latest(step)`` writing
  ``os.symlink(f"step_{step}", ...)`` for the checkpoint ``os.path.join(root, f"step_{step}")``).

Values are compared as signatures (``path_forms``): the expression with each local name replaced by
its one binding, each parameter of a helper by the argument of the call being followed, project
functions' single returns inlined; a path's forms are its own and those of its last component
(``os.path.join(root, name)``, ``root / name``). Nothing is decided by a name's spelling.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from .bindings import reaching
from .calls import call_args
from .modern import ASYNC_SAVE

WAITS = frozenset({"result", "wait", "done", "exception", "add_done_callback", "upload_completion"})
_MAX_DEPTH = 3
_JOIN = ("os.path.join", "posixpath.join")
_SAME = ("os.fspath", "str", "os.path.abspath", "os.path.realpath", "pathlib.Path", "os.path.normpath")
_BASENAME = ("os.path.basename",)
_LINKS = ("os.symlink", "os.link")
_DUMPS = ("json.dump", "yaml.dump", "yaml.safe_dump")
_BUILTINS = frozenset({"str", "open"})


def _qn(view, c) -> str:
    """The call's qualified name; a builtin's own name (``str``, ``open``)."""
    qn = view.sem.call_qualname(c)
    if qn is None and isinstance(c.func, ast.Name) and c.func.id in _BUILTINS:
        return c.func.id
    return qn or ""


def _calls_in(view, fn) -> list:
    """The calls of ``fn`` in source order, not those of a nested function or ``lambda`` (a done
    callback runs after the save)."""
    out = []
    for c in view.sem.function_calls(fn):
        p = parent(c)
        while p is not None and p is not fn and not isinstance(p, ast.Lambda):
            p = parent(p)
        if p is fn:
            out.append(c)
    return out


def _ckpt_id(call):
    got = get_arg(call, None, "checkpoint_id")
    if got is None:
        w = get_arg(call, None, "storage_writer")
        if isinstance(w, ast.Call) and w.args:
            got = w.args[0]
    return got


def _bare(view, fn, expr) -> str | None:
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, expr)
        if kind == "param" and evs is fn:
            return expr.id
    return None


def waits(hub, view, call, depth: int = 0) -> bool:
    """``call`` waits a future: ``x.result()`` / ``x.wait()`` ... or a project function that
    makes such a call (a few calls deep)."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in WAITS:
        return True
    if depth >= 2:
        return False
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return False
    return any(waits(hub, target[0], c, depth + 1) for c in target[0].sem.function_calls(target[1]))


def _saver_param(hub, view, fn, depth: int = 0):
    """For a project function that starts an ``async_save`` and returns without waiting it: the
    parameter that becomes its checkpoint id (``""``: an id of its own), else None."""
    memo = hub.__dict__.setdefault("_ckpt_saver_param", {})
    key = (id(view), id(fn))
    if key in memo:
        return memo[key]
    memo[key] = None
    got = None
    for s, idx in async_starts(hub, view, fn, depth + 1):
        got = _bare(view, fn, idx) or ""
        break
    memo[key] = got
    return got


def async_starts(hub, view, fn, depth: int = 0) -> list:
    """(call, checkpoint id expression or None) for the calls of ``fn`` that start an
    ``async_save`` and return with it in flight (no wait after it in the helper)."""
    out = []
    if depth > _MAX_DEPTH:
        return out
    sem = view.sem
    calls = _calls_in(view, fn)
    for i, c in enumerate(calls):
        if (sem.call_qualname(c) or "") in ASYNC_SAVE:
            idx = _ckpt_id(c)
        else:
            target = hub.resolve_call(view, c)
            if target is None or not isinstance(target[1], FUNC_TYPES) or target[1] is fn:
                continue
            p = _saver_param(hub, target[0], target[1], depth)
            if p is None:
                continue
            idx = dict(call_args(c, target[1])).get(p) if p else None
        if depth and any(waits(hub, view, w) for w in calls[i + 1:]):
            continue  # a helper that waits its own save before it returns
        out.append((c, idx))
    return out


def _sig(hub, view, fn, e, env, depth: int = 0) -> str:
    """The signature of ``e`` (in ``fn`` of ``view``; ``env``: the signatures of ``fn``'s
    parameters as the call being followed binds them)."""
    if depth > 8:
        return f"?{id(e)}"
    if isinstance(e, ast.Constant):
        return repr(e.value)
    if isinstance(e, ast.Name):
        kind, evs = reaching(view, e.id, e)
        if kind == "param" and evs is fn:
            return env.get(e.id) or f"p:{e.id}@{id(fn)}"
        if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) \
                and len(evs[0].targets) == 1 and isinstance(evs[0].targets[0], ast.Name):
            return _sig(hub, view, fn, evs[0].value, env, depth + 1)
        return f"n:{e.id}@{id(fn)}"
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return f"self.{e.attr}"
    if isinstance(e, ast.JoinedStr):
        return "f(" + "".join(_sig(hub, view, fn, v, env, depth + 1) for v in e.values) + ")"
    if isinstance(e, ast.FormattedValue):
        return "{" + _sig(hub, view, fn, e.value, env, depth + 1) + "}"
    if isinstance(e, ast.BinOp):
        return f"({_sig(hub, view, fn, e.left, env, depth + 1)} {type(e.op).__name__} " \
               f"{_sig(hub, view, fn, e.right, env, depth + 1)})"
    if isinstance(e, ast.Call):
        qn = _qn(view, e)
        args = [_sig(hub, view, fn, a, env, depth + 1) for a in e.args]
        if qn in _SAME and len(e.args) == 1 and not e.keywords:
            return args[0]
        if qn in _JOIN:
            return "join(" + ", ".join(args) + ")"
        ret = _inline(hub, view, fn, e, env, depth)
        if ret is not None:
            return ret
    return f"?{id(e)}"


def _inline(hub, view, fn, call, env, depth):
    """The signature of the single ``return`` of the project function ``call`` runs, its
    parameters bound to the call's arguments."""
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, tfn = target
    rets = [n for n in ast.walk(tfn) if isinstance(n, ast.Return) and n.value is not None]
    if len(rets) != 1:
        return None
    inner = {p: _sig(hub, view, fn, a, env, depth + 1) for p, a in call_args(call, tfn)}
    return _sig(hub, tv, tfn, rets[0].value, inner, depth + 1)


def path_forms(hub, view, fn, e, env=None, depth: int = 0) -> set:
    """The signatures of ``e`` and of its last path component (``join(root, name)``: ``name``)."""
    env = env or {}
    whole = _sig(hub, view, fn, e, env)
    out = {whole}
    if whole.startswith("join(") and whole.endswith(")"):
        out.add(_last_arg(whole[5:-1]))
    if whole.startswith("(") and " Div " in whole:
        out.add(whole[1:-1].rsplit(" Div ", 1)[1])
    return {f for f in out if not f.startswith("?") and not f.startswith("self.")}


def _last_arg(s: str) -> str:
    """The last top-level argument of a comma-separated signature list."""
    level = 0
    for i in range(len(s) - 1, -1, -1):
        ch = s[i]
        if ch in ")}":
            level += 1
        elif ch in "({":
            level -= 1
        elif ch == "," and level == 0:
            return s[i + 1:].strip()
    return s.strip()


def _contents(hub, view, c) -> list:
    """The expressions a call writes as a pointer: a link's target, the text written to a file
    opened for writing, a dumped object."""
    qn = _qn(view, c)
    f = c.func
    if qn in _LINKS and c.args:
        return [c.args[0]]
    if qn in _DUMPS and len(c.args) >= 2:
        return [c.args[0]]
    if isinstance(f, ast.Attribute) and f.attr in ("symlink_to", "hardlink_to", "write_text") and len(c.args) == 1:
        return [c.args[0]]
    if isinstance(f, ast.Attribute) and f.attr == "write" and len(c.args) == 1 and isinstance(f.value, ast.Name):
        from .origins import origins

        for _v, o in origins(hub, view, f.value, c):
            if isinstance(o, ast.Call) and (_qn(_v, o) in ("open", "io.open", "gzip.open") or (
                    isinstance(o.func, ast.Attribute) and o.func.attr == "open")):  # ``Path.open("w")``
                return [c.args[0]]
    return []


def _items(e, depth: int = 0) -> list:
    """``e``, and the values of a dict / list / tuple display it is (``{"latest": name}``)."""
    if depth < 2 and isinstance(e, ast.Dict):
        return [x for v in e.values if v is not None for x in _items(v, depth + 1)]
    if depth < 2 and isinstance(e, (ast.List, ast.Tuple)):
        return [x for v in e.elts for x in _items(v, depth + 1)]
    return [e]


def _publishes(hub, view, fn, c, forms, env, depth: int = 0) -> ast.AST | None:
    """The write of ``c`` (or of the project function it runs) whose content has one of
    ``forms``; None when there is none."""
    for e in _contents(hub, view, c):
        for x in _items(e):
            if path_forms(hub, view, fn, x, env) & forms:
                return c
    if depth >= 2:
        return None
    target = hub.resolve_call(view, c)
    if target is None or not isinstance(target[1], FUNC_TYPES) or target[1] is fn:
        return None
    tv, tfn = target
    inner = {p: _sig(hub, view, fn, a, env) for p, a in call_args(c, tfn)}
    for ic in _calls_in(tv, tfn):
        if _publishes(hub, tv, tfn, ic, forms, inner, depth + 1) is not None:
            return ic
    return None


def published(hub, view, fn, start, forms) -> tuple | None:
    """(call of ``fn``, the write it makes) for the first call after ``start`` (and before any
    call that waits a future) that writes a pointer whose content has one of ``forms``."""
    end = (start.end_lineno, start.end_col_offset)
    for c in _calls_in(view, fn):
        if (c.lineno, c.col_offset) <= end:
            continue
        if waits(hub, view, c):
            return None
        w = _publishes(hub, view, fn, c, forms, {})
        if w is not None:
            return c, w
    return None
