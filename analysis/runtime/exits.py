"""Where a rank that finished early left the loop its peers still wait in (for DDP904).

A rank that returns from the script while another rank waits in a collective inside a loop has
left that loop sooner than its peer: through an early exit of the loop (a ``break``, a ``return``,
a ``raise`` or a ``sys.exit`` under a condition) or because its own loop ran out of items (its
shard was shorter). The run only sees where the peer waits; this module reads the source around
that line and names the ways out of the loop, so that the finding lands on the exit rather than on
the last line of the script.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_EXIT_CALLS = {"exit", "quit", "_exit"}  # sys.exit(), exit(), quit(), os._exit()


@dataclass
class Exit:
    line: int
    kind: str  # break | return | raise | exit | continue (skips the rest of one iteration)
    condition: str | None  # the text of the innermost ``if`` test around it


@dataclass
class LoopExits:
    loop_line: int
    loop_kind: str  # for | while
    endless: bool  # ``while True``: it ends only through an exit
    exits: list[Exit]
    uniform: bool = False  # iterates a model's parameters/buffers or a constant range: the same on every rank


def _is_exit_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
        return False
    f = node.value.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return name in _EXIT_CALLS


@functools.lru_cache(maxsize=8)
def _tree(source: str) -> ast.Module | None:
    """The source parsed once: a report asks about several lines of the same file."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _loops_holding(tree: ast.AST, line: int) -> list:
    """The loops whose body holds ``line``, outermost first, within the function (or module body)
    that holds it: a loop outside that function does not count."""
    found: list = []
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None:
                if not isinstance(child, (ast.expr_context, ast.operator)):
                    stack.append(child)
                continue
            if not start <= line <= end:
                continue
            if isinstance(child, _FUNCS):
                found = []
            elif isinstance(child, _LOOPS) and child.body and child.body[0].lineno <= line:
                found.append(child)
            stack.append(child)
    return found


def _exits_of(loop: ast.AST, before: int | None = None) -> list[Exit]:
    """The conditional ways out of ``loop``: its own ``break``s (not those of inner loops) and the
    ``return``/``raise``/exit calls anywhere in its body (outside nested functions), each under an
    ``if`` inside the loop. With ``before`` (the line of the collective the peers wait at), also
    the loop's own conditional ``continue``s above that line: they skip the collective for one
    iteration, so the rank that took one makes fewer collective calls than its peers."""
    out: list[Exit] = []

    def visit(stmts, cond: str | None, inner_loop: bool, skips: bool = False):
        # ``skips``: in an ``except`` of a ``try`` whose body holds ``before``: an exception raised
        # above the collective lands here, so a ``continue`` below it still skips it
        for st in stmts:
            if isinstance(st, _FUNCS):
                continue
            if isinstance(st, ast.Break) and not inner_loop and cond is not None:
                out.append(Exit(st.lineno, "break", cond))
            elif isinstance(st, ast.Continue) and not inner_loop and cond is not None and before is not None \
                    and (st.lineno < before or skips):
                out.append(Exit(st.lineno, "continue", cond))
            elif isinstance(st, ast.Return) and cond is not None:
                out.append(Exit(st.lineno, "return", cond))
            elif isinstance(st, ast.Raise) and cond is not None:
                out.append(Exit(st.lineno, "raise", cond))
            elif _is_exit_call(st) and cond is not None:
                out.append(Exit(st.lineno, "exit", cond))
            elif isinstance(st, ast.If):
                try:
                    text = ast.unparse(st.test)
                except Exception:  # pragma: no cover - unparse handles every parsed expression
                    text = "..."
                visit(st.body, text, inner_loop, skips)
                visit(st.orelse, f"not ({text})", inner_loop, skips)
            elif isinstance(st, _LOOPS):
                visit(st.body, cond, True)
                visit(st.orelse, cond, inner_loop)
            elif isinstance(st, ast.Try):
                # an exit in an ``except`` runs when the rank's own step failed: a condition too
                visit(st.body, cond, inner_loop, skips)
                holds = before is not None and st.body[0].lineno <= before <= (st.body[-1].end_lineno or 0)
                for h in st.handlers:
                    visit(h.body, cond or "an exception was raised", inner_loop, skips or holds)
                visit(st.orelse, cond, inner_loop)
                visit(st.finalbody, cond, inner_loop)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                visit(st.body, cond, inner_loop)
            elif isinstance(st, ast.Match):
                for case in st.cases:
                    visit(case.body, cond or "a match case", inner_loop)

    visit(loop.body, None, False)
    return out


def loop_exits(source: str, line: int) -> LoopExits | None:
    """The loop around ``line`` of ``source`` and its conditional exits; None when ``line`` is in no
    loop or the source does not parse."""
    tree = _tree(source)
    loops = _loops_holding(tree, line) if tree is not None else []
    return _describe(loops[-1]) if loops else None


def _describe(loop, before: int | None = None) -> LoopExits:
    endless = isinstance(loop, ast.While) and isinstance(loop.test, ast.Constant) and bool(loop.test.value)
    kind = "while" if isinstance(loop, ast.While) else "for"
    return LoopExits(loop.lineno, kind, endless, _exits_of(loop, before), _uniform(loop))


_UNIFORM_ITERS = {"parameters", "named_parameters", "buffers", "named_buffers", "children", "modules",
                  "named_modules", "named_children", "param_groups"}


def _uniform(loop) -> bool:
    """A ``for`` loop whose item count is the same on every rank: over a model's parameters, buffers
    or submodules (the replicas are identical) or over ``range`` of constants."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return False
    it = loop.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _UNIFORM_ITERS:
        return True
    if isinstance(it, ast.Attribute) and it.attr in _UNIFORM_ITERS:
        return True
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
        return bool(it.args) and all(isinstance(a, ast.Constant) for a in it.args)
    return False


def loops_around(source: str, line: int) -> list[LoopExits]:
    """Every loop around ``line`` within the function (or module body) that holds it, innermost
    first, each with its conditional exits and the ``continue``s that skip ``line``."""
    tree = _tree(source)
    if tree is None:
        return []
    return [_describe(loop, line) for loop in reversed(_loops_holding(tree, line))]
