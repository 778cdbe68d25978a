"""DataLoader / sampler helpers for the DDP3xx rules."""
from __future__ import annotations

import ast
import re

from ..model import Edit, Position, Range
from ..semantic import get_arg, parent
from ..torch_api import constant_of

DATALOADER = "torch.utils.data.DataLoader"
DIST_SAMPLER = "torch.utils.data.DistributedSampler"
_EVAL_NAME = re.compile(r"(^|_)(val|valid|validation|test|eval|evaluation|dev|query|gallery|inference|predict)", re.I)


def dataloaders(ctx) -> list[ast.Call]:
    return ctx.sem.calls_to(DATALOADER)


def is_true(node: ast.AST | None, sem=None) -> bool:
    """``node`` is ``True``: the literal, or (given the module's ``sem``) a value that resolves to it:
    a name bound once, an argparse default, one attribute store, a config dict's item."""
    if sem is not None and node is not None and not isinstance(node, ast.Constant):
        node = constant_of(sem, node)
    return isinstance(node, ast.Constant) and node.value is True


def is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def shuffle_arg(call: ast.Call) -> ast.AST | None:
    return get_arg(call, 2, "shuffle")


def sampler_args(call: ast.Call) -> list[ast.AST]:
    return [a for a in (get_arg(call, 3, "sampler"), get_arg(call, 4, "batch_sampler")) if a is not None and not is_none(a)]


def loader_sampler(ctx, call: ast.Call) -> ast.AST | None:
    """The ``sampler=`` of a DataLoader, also through ``**kwargs`` bound once to a dict literal
    (``train_kwargs = {"batch_size": 64, "sampler": sampler}``)."""
    s = get_arg(call, 3, "sampler")
    if s is not None:
        return s
    for k in call.keywords:
        if k.arg is None and isinstance(k.value, ast.Name):
            d = ctx.sem.single_value(k.value.id, ctx.sem.scope_of(call))
            if isinstance(d, ast.Dict):
                for key, val in zip(d.keys, d.values):
                    if isinstance(key, ast.Constant) and key.value == "sampler":
                        return val
    return None


def has_kwargs(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def may_be_none(ctx, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """Whether ``expr`` can evaluate to None (conservatively True when unknown)."""
    if depth > 3:
        return True
    if is_none(expr):
        return True
    if isinstance(expr, ast.IfExp):
        return may_be_none(ctx, expr.body, at, depth + 1) or may_be_none(ctx, expr.orelse, at, depth + 1)
    if isinstance(expr, (ast.Call, ast.List, ast.Tuple, ast.ListComp)):
        return False
    if isinstance(expr, ast.Name):
        scope = ctx.sem.scope_of(at)
        assigns = ctx.sem.assignments(scope).get(expr.id)
        if not assigns:
            return True
        for st in assigns:
            if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
                return True
            if may_be_none(ctx, st.value, st, depth + 1):
                return True
        return False
    return True


def is_eval_name(*names: str | None) -> bool:
    return any(n and _EVAL_NAME.search(n) for n in names)


_EVAL_FUNCTION = re.compile(r"^_*(val|valid|validate|validation|test|eval|evaluate|evaluation|predict|inference)(_|$)",
                            re.I)


def in_eval_function(sem, node: ast.AST) -> bool:
    """``node`` is in a function whose name starts with an evaluation word (``evaluate``,
    ``eval_loader``, ``test_model``; not ``train_and_eval``). A name heuristic, asked only after the
    value flow found the shuffling sampler."""
    fn = sem.enclosing_function(node)
    return fn is not None and bool(_EVAL_FUNCTION.search(fn.name))


def target_name(call: ast.Call) -> str | None:
    """``loader`` for ``loader = DataLoader(...)`` / ``self.loader = ...``."""
    st = parent(call)
    if isinstance(st, ast.Assign) and len(st.targets) == 1:
        t = st.targets[0]
        if isinstance(t, ast.Name):
            return t.id
        if isinstance(t, ast.Attribute):
            return t.attr
    return None


def remove_keyword(ctx, call: ast.Call, kw: ast.keyword) -> Edit:
    """Delete ``kw`` from ``call`` with its comma; the whole line when it stands alone on one."""
    src = ctx.src
    r = src.node_range(kw)
    line = src.line(r.start.line)
    if r.start.line == r.end.line:
        before = line[: r.start.column]
        after = line[r.end.column:].strip()
        if after.startswith(","):
            after = after[1:].strip()
        if not before.strip() and (not after or after.startswith("#")) and r.start.line + 1 < len(src.lines):
            # alone on its line (maybe with a comment about it): delete the line
            return Edit(Range(Position(r.start.line, 0), Position(r.start.line + 1, 0)), "")
    items = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
    i = next(j for j, n in enumerate(items) if n is kw)
    if i + 1 < len(items):
        return Edit(Range(r.start, src.node_start(items[i + 1])), "")
    if i > 0:
        return Edit(Range(src.node_end(items[i - 1]), r.end), "")
    return Edit(r, "")
