"""The kind of rank (``rank_kinds``: global or local) a *device object* carries as its CUDA index:
``torch.device("cuda", rank)`` returned by a helper, kept on ``self.device``, used as it is or by
its ``.index``; DDP003."""
from __future__ import annotations

import ast

from .origins import origins
from .rank_kinds import GLOBAL, LOCAL, _CONST, _MAX_DEPTH, _const_expr, _device_string_sites, _leaf_kind, \
    device_index_sites, rank_kind_of


def device_index_kind(hub, view, expr: ast.AST, at: ast.AST):
    """The kind of rank a *device object* used as a CUDA device carries as its index. Its origins
    (a helper's returns, ``self.device`` set from one, a conditional expression, a tuple element)
    are read one by one: ``torch.device("cuda", i)`` / ``torch.device(f"cuda:{i}")`` /
    ``torch.device(index=i)`` / ``"cuda:" + str(i)`` has the kind of ``i`` (``rank_kind_of``);
    ``<device>.index`` the kind of the index that device carries; a device with no index
    (``torch.device("cpu")``, ``"cuda"``) is neutral like a constant. (kind, (view, witness)) as
    ``rank_kind_of``: a kind only when every non-neutral origin has it and at least one of them is
    such a device construction or a conditional expression (a bare integer index is the rule's own
    question)."""
    if isinstance(expr, ast.Attribute) and expr.attr == "index" and view.sem.qualname(expr) is None:
        k, w, carried = _device_kind(hub, view, expr.value, at, 0, False)
    else:
        k, w, carried = _device_kind(hub, view, expr, at, 0, True)
    return (k, w) if k in (GLOBAL, LOCAL) and carried else (None, None)


_UNKNOWN = (None, None, False)
_NEUTRAL = (_CONST, None, False)


def _device_kind(hub, view, expr, at, depth: int, as_index: bool):
    """(GLOBAL / LOCAL / ``_CONST`` (no rank on any origin) / None (unknown), witness, carried: a
    rank came through a device construction) for the device index ``expr`` carries
    (``as_index``: the value itself may be the index, as ``set_device(i)`` takes it; else only a
    device object is read, for its ``.index``)."""
    if expr is None or depth > _MAX_DEPTH:
        return _UNKNOWN
    leaves = origins(hub, view, expr, at)
    if not leaves:
        return _UNKNOWN
    return _join([_device_leaf_kind(hub, v, e, depth, as_index) for v, e in leaves[:16]])


def _join(parts) -> tuple:
    kinds: set = set()
    witness, carried = None, False
    for k, w, c in parts:
        if k is None:
            return _UNKNOWN
        if k == _CONST:
            continue
        kinds.add(k)
        witness = witness or w
        carried = carried or c
    if not kinds:
        return _NEUTRAL
    return (kinds.pop(), witness, carried) if len(kinds) == 1 else _UNKNOWN


def _index_kind(hub, view, e, at, depth: int):
    """The kind of the index a device construction is given (carried from here on)."""
    if _const_expr(e):
        return _NEUTRAL
    k, w = rank_kind_of(hub, view, e, at, depth + 1)
    return (k, w, True) if k is not None else _UNKNOWN


def _device_leaf_kind(hub, view, e: ast.AST, depth: int, as_index: bool):
    if isinstance(e, ast.IfExp):  # ``get_rank() if dist.is_initialized() else 0``: both sides decided
        k, w, _c = _join([_device_kind(hub, view, side, e, depth + 1, as_index) for side in (e.body, e.orelse)])
        return (k, w, k in (GLOBAL, LOCAL)) if k is not None else _UNKNOWN
    if isinstance(e, ast.Constant) and isinstance(e.value, str):
        return _NEUTRAL  # ``"cpu"``, ``"cuda"``, ``"cuda:0"``: no rank in it
    if isinstance(e, (ast.JoinedStr, ast.BinOp)):
        sites = _device_string_sites(e)
        return _index_kind(hub, view, sites[0], e, depth) if sites else _UNKNOWN
    if isinstance(e, ast.Call) and view.sem.call_qualname(e) == "torch.device":
        sites = device_index_sites(view.sem, e)
        if not sites:
            # ``torch.device("cpu")`` / ``torch.device("cuda")``: no index; anything else unknown
            return _NEUTRAL if e.args and isinstance(e.args[0], (ast.Constant, ast.JoinedStr)) else _UNKNOWN
        parts = []
        for s in sites:
            if e.args and s is e.args[0]:  # ``torch.device(dev)`` / ``torch.device(3)``: what it copies
                k, w, _c = _device_kind(hub, view, s, e, depth + 1, True)
                parts.append((k, w, k is not None))
            else:
                parts.append(_index_kind(hub, view, s, e, depth))
        return _join(parts)
    if not as_index:
        return _UNKNOWN
    k, w = _leaf_kind(hub, view, e, depth)
    return (k, w, False) if k is not None else _UNKNOWN
