"""The little of a rule context the per-file flow queries read (``sem``, ``memo``, ``qn``,
``text``), for any module of the project: ``view_ctx(view)``. It imports nothing of the flow
layer, so a query below ``fs_effects`` (``returned_flags``, asked by ``rank_tests``) can read
another module through it; ``fs_effects`` re-exports it."""
from __future__ import annotations

import ast


class ViewCtx:
    """The little of a rule context the per-file flow queries read (``sem``, ``memo``, ``qn``,
    ``text``), for any module of the project."""

    def __init__(self, view):
        self.view, self.sem = view, view.sem

    def memo(self, key, fn):
        m = self.view.memo.setdefault("fs.viewctx", {})
        try:
            return m[key]
        except KeyError:
            got = m[key] = fn()
            return got

    def qn(self, node):
        return self.sem.call_qualname(node) if node.__class__ is ast.Call else self.sem.qualname(node)

    def text(self, node):
        return ast.unparse(node)


def view_ctx(view) -> ViewCtx:
    got = view.memo.get("fs.ctx")
    if got is None:
        got = view.memo["fs.ctx"] = ViewCtx(view)
    return got
