"""What a rule sees: the source, the semantic indexes, and helpers to report findings and build
lossless text edits (insert a line after a statement, replace a node, add an import)."""
from __future__ import annotations

import ast
from collections.abc import Iterable  # (not `typing`: its import costs start-up)

from .model import Applicability, Edit, Finding, Fix, Position, Range, Related, Severity
from .semantic import Semantic, get_arg
from .source import SourceText
from .torch_api import D  # noqa: F401  (the one prefix of every torch.distributed qualified name)

DIST = D[:-1]


class Context:
    def __init__(self, src: SourceText, sem: Semantic, filename: str):
        self.src = src
        self.sem = sem
        self.filename = filename
        self.findings: list[Finding] = []
        self._rule = None  # set by the engine while a rule runs
        self._memo: dict = {}

    def memo(self, key, fn):
        """``fn()`` computed once per check and shared by every rule that asks with the same
        ``key`` (a string naming the helper, or a tuple starting with one)."""
        try:
            return self._memo[key]
        except KeyError:
            got = self._memo[key] = fn()
            return got

    # -- reporting ---------------------------------------------------------------------------
    def report(
        self,
        node_or_range,
        message: str,
        *,
        related: Iterable[tuple[ast.AST | Range, str]] = (),
        fix: Fix | None = None,
        severity: Severity | None = None,
    ) -> Finding:
        rule = self._rule
        rng = node_or_range if isinstance(node_or_range, Range) else self.src.node_range(node_or_range)
        rel = tuple(
            Related(item[2], item[3], filename=item[1]) if len(item) == 4  # ("file", path, range, msg)
            else Related(item[0] if isinstance(item[0], Range) else self.src.node_range(item[0]), item[1])
            for item in related
        )
        f = Finding(
            code=rule.code,
            name=rule.name,
            message=message,
            severity=severity or rule.severity,
            range=rng,
            filename=self.filename,
            related=rel,
            fix=fix,
            url=rule.url(),
        )
        self.findings.append(f)
        return f

    # -- name helpers ------------------------------------------------------------------------
    def qn(self, node: ast.AST) -> str | None:
        if node.__class__ is ast.Call:
            return self.sem.call_qualname(node)
        return self.sem.qualname(node)

    def calls_to(self, *names: str) -> list[ast.Call]:
        return self.sem.calls_to(*names)

    def dist_calls(self, *short: str) -> list[ast.Call]:
        return self.sem.calls_to(*(f"{DIST}.{s}" for s in short))

    @staticmethod
    def arg(call: ast.Call, pos: int | None, kw: str) -> ast.expr | None:
        return get_arg(call, pos, kw)

    def text(self, node: ast.AST) -> str:
        return self.src.segment(node)

    # -- edit helpers ------------------------------------------------------------------------
    def replace(self, node: ast.AST, content: str) -> Edit:
        return Edit(self.src.node_range(node), content)

    def stmt_starts_line(self, stmt: ast.stmt) -> bool:
        """True when ``stmt`` is the first thing on its line (so a new line with its indentation
        is a sibling statement, not part of a one-line compound statement)."""
        line = self.src.line(stmt.lineno - 1)
        return self.src.char_col(stmt.lineno - 1, stmt.col_offset) == len(line) - len(line.lstrip(" \t"))

    def insert_after(self, stmt: ast.stmt, code: str) -> Edit | None:
        """Insert ``code`` as a new statement right after ``stmt``, at its indentation.
        None when that would not be a sibling statement (``a = 1; b = 2`` or ``if x: a = 1``)."""
        if not self.stmt_starts_line(stmt):
            return None
        end_line = stmt.end_lineno - 1
        # the statement must also end its line (ignoring a trailing comment)
        rest = self.src.line(end_line)[self.src.char_col(end_line, stmt.end_col_offset):]
        stripped = rest.strip()
        if stripped and not stripped.startswith("#"):
            return None
        indent = self.src.indent_of(stmt.lineno - 1)
        nl = self.src.newline
        if end_line + 1 < len(self.src.lines):
            return Edit(Range(Position(end_line + 1, 0), Position(end_line + 1, 0)), f"{indent}{code}{nl}")
        eol = Position(end_line, len(self.src.line(end_line)))
        return Edit(Range(eol, eol), f"{nl}{indent}{code}")

    def insert_before(self, stmt: ast.stmt, code: str) -> Edit | None:
        if not self.stmt_starts_line(stmt):
            return None
        line = stmt.lineno - 1
        indent = self.src.indent_of(line)
        pos = Position(line, 0)
        return Edit(Range(pos, pos), f"{indent}{code}{self.src.newline}")

    def ref(self, qualname: str) -> tuple[str, list[Edit]]:
        """How to spell ``qualname`` in this file, plus the import edit needed (if any).

        Reuses the file's own aliases (``dist.get_world_size`` when torch.distributed is ``dist``);
        otherwise adds ``import <top module>`` after the file's imports."""
        local = self.sem.alias_for(qualname)
        if local is not None:
            return local, []
        top = qualname.split(".", 1)[0]
        # ``import torch.distributed`` binds ``torch``; a bare top-level import is enough
        edit = self.add_import(f"import {top}")
        return qualname, [edit] if edit else []

    def add_import(self, line: str) -> Edit | None:
        """Insert an import statement after the module's leading imports (after a docstring and
        ``from __future__`` imports when there are no others)."""
        body = self.sem.tree.body
        anchor = None
        for i, st in enumerate(body):
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                anchor = st
            elif i == 0 and isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(
                st.value.value, str
            ):
                anchor = st
            else:
                break
        if anchor is not None:
            return self.insert_after(anchor, line)
        pos = Position(0, 1 if self.src.text.startswith("\ufeff") else 0)
        return Edit(Range(pos, pos), line + self.src.newline)

    @staticmethod
    def fix(applicability: Applicability, message: str, edits: Iterable[Edit | None]) -> Fix | None:
        es = [e for e in edits if e is not None]
        if not es:
            return None
        return Fix(applicability, message, tuple(es))
