"""How a rank went past a collective that a peer is in (for DDP902).

When two ranks are in different collectives, usually one of them never made a call that the other
is in: it returned early from the helper that makes it, skipped it with a conditional ``continue``,
left the loop around it, or did not enter the ``if`` around it. The run gives each rank's stack
(its traceback or its stack dump); this module compares the two stacks and reads the source of the
frames where they part, to name the line through which the other rank went past. Only the rank's
own code is read; nothing is guessed when the source does not say, or when both ranks could have
gone past the other's collective.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from .exits import loops_around

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass(frozen=True)
class Bypass:
    file: str
    line: int
    kind: str  # return | continue | break | if
    condition: str
    function: str  # the function it is in ("<module>" at the top level)


def _parse(lines: list[str] | None):
    if lines is None:
        return None
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _scope_of(tree: ast.AST, line: int) -> ast.AST:
    """The innermost function holding ``line`` (the module when none does)."""
    best = tree
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is not None and end is not None and not start <= line <= end:
                continue
            if isinstance(child, _FUNCS) and start is not None:
                best = child
            stack.append(child)
    return best


def _text(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every parsed expression
        return "..."


def _within(stmts, line: int) -> bool:
    return any(getattr(s, "lineno", 0) <= line <= (getattr(s, "end_lineno", 0) or 0) for s in stmts)


def _bypasses_in_scope(scope: ast.AST, line: int, file: str) -> list[Bypass]:
    """The ways a call of ``scope`` can go past ``line`` without running it: a conditional
    ``return`` above it, an ``if`` around it (within the function), and, in a loop around it, a
    conditional ``continue`` above it."""
    fn = getattr(scope, "name", "<module>")
    out: list[Bypass] = []

    def visit(stmts, cond: str | None):
        for st in stmts:
            if isinstance(st, _NESTED):
                continue
            if getattr(st, "lineno", line + 1) >= line and not (st.lineno <= line <= (st.end_lineno or 0)):
                continue  # below the line: cannot keep the rank from it
            if isinstance(st, ast.Return) and cond is not None and fn != "<module>":
                out.append(Bypass(file, st.lineno, "return", cond, fn))
            elif isinstance(st, ast.If):
                text = _text(st.test)
                if _within(st.body, line):
                    out.append(Bypass(file, st.lineno, "if", text, fn))
                elif _within(st.orelse, line):
                    out.append(Bypass(file, st.lineno, "if", f"not ({text})", fn))
                visit(st.body, text)
                visit(st.orelse, f"not ({text})")
            elif isinstance(st, ast.Try):
                visit(st.body, cond)
                for h in st.handlers:
                    visit(h.body, cond or "an exception was raised")
                visit(st.orelse, cond)
                visit(st.finalbody, cond)
            elif isinstance(st, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                visit(st.body, cond)

    visit(getattr(scope, "body", []), None)
    return out


def bypass(chain_a: list, chain_b: list, lines_of) -> list[Bypass] | None:
    """How rank B went past the collective rank A is in. ``chain_a``/``chain_b``: the ranks' user
    frames, innermost first (each with ``file``, ``line``, ``function``); ``lines_of(file)``: the
    file's source lines or None. Returns the candidate lines (conditional returns, ``continue``s,
    loop exits and ``if``s on A's side of the frames where the stacks part), or None."""
    a, b = list(reversed(chain_a)), list(reversed(chain_b))
    k = 0
    while k < len(a) and k < len(b) and a[k].file == b[k].file and a[k].function == b[k].function:
        k += 1
    if k == 0:
        return None  # no common function: not the same program path
    common_a, common_b = a[k - 1], b[k - 1]
    lines = lines_of(common_a.file)
    tree = _parse(lines)
    if tree is None:
        return None
    la, lb = common_a.line, common_b.line
    if la == lb:
        return None
    out: list[Bypass] = []
    # in the frame where the stacks part: a loop around A's line that B has left, a ``continue``
    # above A's line, an ``if`` around A's line that does not hold B's
    shared_loop = _loop_holds(lines, la, lb)
    for lp in loops_around("\n".join(lines), la):
        if _loop_holds_line(lines, lp.loop_line, lb):
            out.extend(Bypass(common_a.file, ex.line, ex.kind, ex.condition or "", common_a.function)
                       for ex in lp.exits if ex.kind == "continue" and not (lb < ex.line < la))
        else:
            # (not a `raise` or an exit call: the other rank is still running, in a collective)
            out.extend(Bypass(common_a.file, ex.line, ex.kind, ex.condition or "", common_a.function)
                       for ex in lp.exits if lb > la and ex.kind in ("break", "return", "continue"))
    scope = _scope_of(tree, la)
    out.extend(x for x in _bypasses_in_scope(scope, la, common_a.file) if x.kind == "if" and not _if_holds(tree, x.line, lb))
    # below it, on A's side: B called the same function and went past A's collective inside it
    if k < len(a) and (lb > la or shared_loop):
        for fr in a[k:]:
            flines = lines_of(fr.file)
            ftree = _parse(flines)
            if ftree is None:
                return None
            out.extend(_bypasses_in_scope(_scope_of(ftree, fr.line), fr.line, fr.file))
    return out or None


def _loop_holds(lines: list[str], la: int, lb: int) -> bool:
    """A loop (in the same function) holds both lines."""
    return any(_loop_holds_line(lines, lp.loop_line, lb) for lp in loops_around("\n".join(lines), la))


def _loop_holds_line(lines: list[str], loop_line: int, line: int) -> bool:
    return any(lp.loop_line == loop_line for lp in loops_around("\n".join(lines), line))


def _if_holds(tree: ast.AST, if_line: int, line: int) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.lineno == if_line:
            return node.lineno <= line <= (node.end_lineno or 0)
    return False
