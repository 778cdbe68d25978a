"""Test harness facts: is this a test file, and does this code expect its failure on purpose?

Multi-process tests run on one node with a world size fixed by their harness
(``MultiProcessTestCase``, a pytest fixture), and a test that makes a failure on purpose wraps it
in ``assertRaises`` / ``pytest.raises``: rules about the global rank or about failures stay silent
there.
"""
from __future__ import annotations

import ast
import os

from ..semantic import FUNC_TYPES, parent, terminal_name

_RAISES = frozenset({"assertRaises", "assertRaisesRegex", "assertRaisesRegexp", "raises", "assertWarns",
                     "assertWarnsRegex", "warns"})


_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)


def expects_error(node: ast.AST) -> bool:
    """``node`` sits in ``with self.assertRaises(...)`` / ``with pytest.raises(...)``: a test that
    makes the failure on purpose."""
    p = parent(node)
    while p is not None and not isinstance(p, _SCOPES):
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for item in p.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and terminal_name(e.func) in _RAISES:
                    return True
        p = parent(p)
    return False


def is_test_file(filename: str) -> bool:
    """``test_*.py`` / ``*_test.py`` / ``conftest.py``: multi-process tests run on one node with a
    world size fixed by their harness (``MultiProcessTestCase``, a pytest fixture)."""
    base = os.path.basename(filename or "")
    return base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"


def in_test_suite(filename: str) -> bool:
    """A script of a project's test suite: under a ``tests`` / ``test`` folder, beside test modules
    (``tests/distributed/two_gpu_check.py`` next to ``test_groups.py``). Such scripts run on one
    node like the ``test_*.py`` files they sit with."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.normpath(os.path.abspath(filename))
    folder = os.path.dirname(path)
    if not any(p in ("tests", "test") for p in folder.split(os.sep)):
        return False
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return any(is_test_file(n) and n.endswith(".py") for n in names if n != os.path.basename(path))
