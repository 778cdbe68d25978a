"""Folders a script puts on its own import path: ``sys.path.insert(0, os.path.dirname(os.path.dirname(
os.path.abspath(__file__))))`` in ``tools/train.py``, ``sys.path.append(str(Path(__file__).parents[1]))``,
``sys.path.append(os.path.join(os.path.dirname(__file__), ".."))``. Such a script imports the
project's package from the folder it names (``from mypkg.trainer import Trainer``), which the
package climb of ``project.roots_for`` cannot find from a folder of scripts.

``declared_roots_of(path, text)`` evaluates the path argument of every ``sys.path.append`` /
``sys.path.insert`` call of the file from ``__file__`` (``os.path`` ``dirname`` / ``abspath`` /
``realpath`` / ``normpath`` / ``join`` with literal parts and ``os.pardir``, ``pathlib`` ``Path``,
``.parent``, ``.parents[i]``, ``.resolve()``, ``/``, ``str(...)``, ``+ "/.."``, and names bound once
to such a value), each name read through the file's own imports (``import os.path as osp``,
``from os.path import dirname``, ``import sys as _sys``). A path relative to the working directory
(``sys.path.append("..")``), an environment variable or anything else is not evaluated: the working
directory is not known. A folder counts whether or not it exists yet (an import probed there and found
absent is a negative dependency of the check, so a package created there later invalidates a cached
result), at most three levels above the file's own (an absolute path elsewhere, ``/home/me/code``, is
another machine's layout and is not read); at most ``_MAX`` of them, looked up after the file's own
roots.
``project.declared_roots`` memoises the answer by the file's content hash (an edit of the ``sys.path``
line changes it).
"""
from __future__ import annotations

import ast
import os

_MAX = 4


def declared_roots_of(path: str, text: str) -> tuple[str, ...]:
    """The folders that the file ``path`` (absolute) with this text adds to ``sys.path``. Pure: ``project.declared_roots`` reads the file and memoises the answer."""
    if ".path.insert" not in text and ".path.append" not in text:  # necessary: the call spells it
        return ()
    return _evaluate(path, text)


def _evaluate(path: str, text: str) -> tuple[str, ...]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    once: dict[str, ast.AST | None] = {}
    aliases: dict[str, str] = {}
    calls = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            name = n.targets[0].id
            once[name] = None if name in once else n.value
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            for a in n.names:
                aliases[a.asname or a.name] = f"{n.module}.{a.name}"
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "insert") \
                and n.args and not n.keywords:
            calls.append(n)
    here = os.path.dirname(os.path.abspath(path))
    near = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # never above three levels up
    out: list[str] = []
    ev = _Eval(os.path.abspath(path), once, aliases)
    for c in calls:
        if ev.qual(c.func.value) != "sys.path":
            continue
        arg = c.args[-1] if c.func.attr == "insert" and len(c.args) == 2 else c.args[0]
        v = ev.value(arg, 0)
        if v is None or not os.path.isabs(v):
            continue
        v = os.path.normpath(v)
        if v != here and v not in out and _within(v, near) and v.count(os.sep) >= 2:
            out.append(v)
        if len(out) >= _MAX:
            break
    return tuple(out)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(os.path.join(folder, ""))


_PATH_FUNCS = frozenset(f"{m}.{f}" for m in ("os.path", "posixpath")
                        for f in ("dirname", "abspath", "realpath", "normpath", "join"))
_PATHS = frozenset({"pathlib.Path", "pathlib.PurePath", "pathlib.PosixPath", "str"})


class _Eval:
    """Evaluates a path expression of the file (``value``): names resolved through the file's
    imports (``import os.path as osp``, ``from pathlib import Path``) and its names bound once."""

    def __init__(self, file: str, once: dict, aliases: dict):
        self.file, self.once, self.aliases = file, once, aliases

    def qual(self, e) -> str | None:
        """The dotted name ``e`` spells, its first part replaced by what the file imports it as."""
        if isinstance(e, ast.Name):
            return self.aliases.get(e.id, e.id)
        if isinstance(e, ast.Attribute):
            base = self.qual(e.value)
            return f"{base}.{e.attr}" if base else None
        return None

    def value(self, e, depth: int) -> str | None:
        """The path ``e`` evaluates to (a string), or None when it cannot be known."""
        if depth > 12:
            return None
        d = depth + 1
        if isinstance(e, ast.Name):
            if e.id == "__file__":
                return self.file
            bound = self.once.get(e.id)
            return self.value(bound, d) if bound is not None and e.id not in self.aliases else None
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            return e.value
        if isinstance(e, ast.Attribute):
            if self.qual(e) in ("os.pardir", "os.path.pardir"):
                return ".."
            if e.attr == "parent":
                v = self.value(e.value, d)
                return os.path.dirname(v) if v else None
            return None
        if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "parents" \
                and isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, int) and 0 <= e.slice.value < 8:
            v = self.value(e.value.value, d)
            for _ in range(e.slice.value + 1 if v else 0):
                v = os.path.dirname(v)
            return v
        if isinstance(e, ast.BinOp):
            left, right = self.value(e.left, d), self.value(e.right, d)
            if left is None or right is None:
                return None
            if isinstance(e.op, ast.Div):  # ``Path(...) / ".."``
                return os.path.join(left, right)
            if isinstance(e.op, ast.Add):  # ``os.path.dirname(__file__) + "/../"``
                return left + right
            return None
        if not isinstance(e, ast.Call) or e.keywords:
            return None
        if isinstance(e.func, ast.Attribute) and e.func.attr in ("resolve", "absolute") and not e.args:
            return self.value(e.func.value, d)  # ``Path(__file__).resolve()``
        name = self.qual(e.func)
        if name in _PATHS and len(e.args) == 1:
            return self.value(e.args[0], d)
        if name not in _PATH_FUNCS or not e.args:
            return None
        parts = [self.value(a, d) for a in e.args]
        if any(p is None for p in parts):
            return None
        if name.endswith(".join"):
            return os.path.join(*parts)
        if len(parts) != 1:
            return None
        if name.endswith(".dirname"):
            return os.path.dirname(parts[0])
        return os.path.normpath(parts[0])  # abspath / realpath / normpath of an absolute path
