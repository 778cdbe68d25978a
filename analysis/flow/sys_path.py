"""Folders a script puts on its own import path: ``sys.path.insert(0, os.path.dirname(os.path.dirname(
os.path.abspath(__file__))))`` in ``tools/train.py``, ``sys.path.append(str(Path(__file__).parents[1]))``,
``sys.path.append(os.path.join(os.path.dirname(__file__), ".."))``. Such a script imports the
project's package from the folder it names (``from mypkg.trainer import Trainer``), which the
package climb of ``project.roots_for`` cannot find from a folder of scripts.

``declared_roots(path)`` evaluates the path argument of every ``sys.path.append`` /
``sys.path.insert`` call of the file from ``__file__`` (``os.path`` ``dirname`` / ``abspath`` /
``realpath`` / ``normpath`` / ``join`` with literal parts and ``os.pardir``, ``pathlib`` ``Path``,
``.parent``, ``.parents[i]``, ``.resolve()``, ``/``, ``str(...)``, ``+ "/.."``, and names bound once
to such a value). A path relative to the working directory (``sys.path.append("..")``), an
environment variable or anything else is not evaluated: the working directory is not known.
Only existing folders count, at most three levels above the file's own (an absolute path elsewhere,
``/home/me/code``, is another machine's layout and is not read); at most ``_MAX`` of them, looked up
after the file's own roots.
The answer is memoised by the file's content hash (an edit of the ``sys.path`` line changes it).
"""
from __future__ import annotations

import ast
import os
import threading

from . import project

_MAX = 4
_memo: dict[tuple[str, str], tuple[str, ...]] = {}
_lock = threading.Lock()
_PATH_FUNCS = frozenset({"dirname", "abspath", "realpath", "normpath", "join"})
_PATH_MODULES = frozenset({"os.path", "osp", "path", "posixpath"})


def declared_roots(path: str) -> tuple[str, ...]:
    """The existing folders that ``path`` (an absolute file path) adds to ``sys.path``."""
    h = project.current_hash(path)
    if h is None:
        return ()
    key = (path, h)
    with _lock:
        got = _memo.get(key)
    if got is not None:
        return got
    got = ()
    r = project.read(path)
    if r is not None and "sys.path" in r[0]:  # necessary: the call spells it
        got = _evaluate(path, r[0])
    with _lock:
        if len(_memo) > 65536:
            _memo.clear()
        _memo[key] = got
    return got


def _evaluate(path: str, text: str) -> tuple[str, ...]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    once: dict[str, ast.AST | None] = {}
    calls = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            name = n.targets[0].id
            once[name] = None if name in once else n.value
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "insert") \
                and _dotted(n.func.value) == "sys.path" and n.args and not n.keywords:
            calls.append(n)
    here = os.path.dirname(os.path.abspath(path))
    near = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # never above three levels up
    out: list[str] = []
    for c in calls:
        arg = c.args[-1] if c.func.attr == "insert" and len(c.args) == 2 else c.args[0]
        v = _value(arg, os.path.abspath(path), once, 0)
        if v is None or not os.path.isabs(v):
            continue
        v = os.path.normpath(v)
        if v != here and v not in out and project._within(v, near) and v.count(os.sep) >= 2 and project._is_dir(v):
            out.append(v)
        if len(out) >= _MAX:
            break
    return tuple(out)


def _dotted(e) -> str | None:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        base = _dotted(e.value)
        return f"{base}.{e.attr}" if base else None
    return None


def _value(e, file: str, once: dict, depth: int) -> str | None:
    """The path ``e`` evaluates to (a string), or None when it cannot be known."""
    if depth > 12:
        return None
    d = depth + 1
    if isinstance(e, ast.Name):
        if e.id == "__file__":
            return file
        bound = once.get(e.id)
        return _value(bound, file, once, d) if bound is not None else None
    if isinstance(e, ast.Constant) and isinstance(e.value, str):
        return e.value
    if isinstance(e, ast.Attribute):
        if e.attr == "pardir" and _dotted(e.value) in ("os", "os.path", "osp"):
            return ".."
        if e.attr == "parent":
            v = _value(e.value, file, once, d)
            return os.path.dirname(v) if v else None
        return None
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "parents" \
            and isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, int) and 0 <= e.slice.value < 8:
        v = _value(e.value.value, file, once, d)
        for _ in range(e.slice.value + 1 if v else 0):
            v = os.path.dirname(v)
        return v
    if isinstance(e, ast.BinOp):
        left, right = _value(e.left, file, once, d), _value(e.right, file, once, d)
        if left is None or right is None:
            return None
        if isinstance(e.op, ast.Div):  # ``Path(...) / ".."``
            return os.path.join(left, right)
        if isinstance(e.op, ast.Add):  # ``os.path.dirname(__file__) + "/../"``
            return left + right
        return None
    if not isinstance(e, ast.Call) or e.keywords:
        return None
    name = _dotted(e.func)
    if name is None:
        if isinstance(e.func, ast.Attribute) and e.func.attr in ("resolve", "absolute") and not e.args:
            return _value(e.func.value, file, once, d)  # ``Path(__file__).resolve()``
        return None
    head, _, tail = name.rpartition(".")
    if tail in ("str", "Path", "PurePath", "PosixPath") and head in ("", "pathlib") and len(e.args) == 1:
        return _value(e.args[0], file, once, d)
    if tail in ("resolve", "absolute") and not e.args:
        return _value(e.func.value, file, once, d)
    if tail not in _PATH_FUNCS or not (head in _PATH_MODULES or head == "") or not e.args:
        return None
    parts = [_value(a, file, once, d) for a in e.args]
    if any(p is None for p in parts):
        return None
    if tail == "join":
        return os.path.join(*parts)
    if len(parts) != 1:
        return None
    if tail == "dirname":
        return os.path.dirname(parts[0])
    return os.path.normpath(parts[0])  # abspath / realpath / normpath of an absolute path
