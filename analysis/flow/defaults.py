"""What a value is when the program runs with its default configuration.

``default_value(hub, view, expr, at)`` answers with the Python value (a bool, a number, a string,
None) or ``UNKNOWN``: literals; a command-line option's default (``args.aux_weight`` of an
``ap.parse_args()`` or ``ap.parse_args([])``: its ``default=``, ``False`` for ``action="store_true"``, ``True`` for
``"store_false"``); a config dict's entry, a dataclass field's default, a name bound once, a
helper's parameter filled by its callers, a project function's return (all through ``origins``);
and comparisons, ``not``/``and``/``or``, arithmetic and conditional expressions over those. Every
origin must agree; anything else (an environment variable, an option without a default or marked
``required``, a parser with ``set_defaults``, an option the program stores into or reaches
reflectively: ``args.x = ...``, ``setattr(args, ...)``, ``vars(args)``, ``args.__dict__``) is
``UNKNOWN``. A question for findings about the run a user gets without options (issue 25:
DDP209's head that the default configuration never runs); a rule that must hold for every
configuration asks ``torch_api.constant_of`` / ``params`` instead.
"""
from __future__ import annotations

import ast
import operator

from ..semantic import get_arg
from .origins import origins

UNKNOWN = object()
_MAX = 6

_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CASTS = {"bool": bool, "int": int, "float": float, "str": str}
_PLAIN = (bool, int, float, str, type(None))


def default_value(hub, view, expr, at, callers=None, depth: int = 0):
    """The value of ``expr`` (at ``at``, in ``view``) under the default configuration, or
    ``UNKNOWN`` (see the module docstring)."""
    if expr is None or depth > _MAX:
        return UNKNOWN
    if isinstance(expr, ast.Constant):
        return expr.value if isinstance(expr.value, _PLAIN) else UNKNOWN
    got = combine(expr, lambda e: default_value(hub, view, e, at, callers, depth + 1))
    if got is not NOT_OPERATOR:
        return got
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in _CASTS \
            and view.sem.qualname(expr.func) in (None, expr.func.id) and len(expr.args) == 1 and not expr.keywords:
        v = default_value(hub, view, expr.args[0], at, callers, depth + 1)
        return _apply(_CASTS[expr.func.id], v)
    if isinstance(expr, ast.Attribute) and isinstance(expr.ctx, ast.Load):
        opt = option_default(hub, view, expr, at, callers, depth)
        if opt is not _NOT_AN_OPTION:
            return opt
    if not isinstance(expr, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
        return UNKNOWN
    leaves = origins(hub, view, expr, at, callers=callers)
    if not leaves or len(leaves) > 8:
        return UNKNOWN
    vals = []
    for lv, le in leaves:
        if le is expr:
            return UNKNOWN  # not followed further (an attribute of an unknown object, a call)
        v = default_value(hub, lv, le, le, callers, depth + 1)
        if v is UNKNOWN:
            return UNKNOWN
        vals.append(v)
    first = vals[0]
    return first if all(type(v) is type(first) and v == first for v in vals) else UNKNOWN


NOT_OPERATOR = object()


def combine(expr, value_of):
    """The value of an operator expression (``not``, ``and``/``or``, a comparison, arithmetic, a
    conditional expression) from its operands' values (``value_of``); ``UNKNOWN`` when an operand
    that decides is unknown; ``NOT_OPERATOR`` for any other expression."""
    if isinstance(expr, ast.UnaryOp):
        v = value_of(expr.operand)
        op = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos}.get(type(expr.op))
        return UNKNOWN if op is None else _apply(op, v)
    if isinstance(expr, ast.BoolOp):
        # ``a or b`` is the first true operand (else the last), ``a and b`` the first false one;
        # an unknown operand leaves the value unknown, but a known true one still makes an ``or``
        # true (a known false one an ``and`` false)
        want = isinstance(expr.op, ast.Or)
        v, unsure = UNKNOWN, False
        for x in expr.values:
            v = value_of(x)
            if v is UNKNOWN:
                unsure = True
            elif bool(v) is want:
                return want if unsure else v
        return UNKNOWN if unsure else v
    if isinstance(expr, ast.Compare):
        left = value_of(expr.left)
        if left is UNKNOWN:
            return UNKNOWN
        for op, right_e in zip(expr.ops, expr.comparators):
            right = _literal_seq(right_e) if isinstance(op, (ast.In, ast.NotIn)) else value_of(right_e)
            if right is UNKNOWN:
                return UNKNOWN
            if isinstance(op, (ast.Is, ast.IsNot)):
                if right is not None and left is not None:
                    return UNKNOWN  # identity of other values: not modelled
                ok = (left is right) is isinstance(op, ast.Is)
            elif isinstance(op, (ast.In, ast.NotIn)):
                ok = (left in right) is isinstance(op, ast.In)
            else:
                ok = _apply2(_CMP[type(op)], left, right)
                if ok is UNKNOWN:
                    return UNKNOWN
            if not ok:
                return False
            left = right
        return True
    if isinstance(expr, ast.BinOp):
        op = _ARITH.get(type(expr.op))
        if op is None:
            return UNKNOWN
        return _apply2(op, value_of(expr.left), value_of(expr.right))
    if isinstance(expr, ast.IfExp):
        t = value_of(expr.test)
        return UNKNOWN if t is UNKNOWN else value_of(expr.body if t else expr.orelse)
    return NOT_OPERATOR


def _literal_seq(e):
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)) and all(
            isinstance(x, ast.Constant) and isinstance(x.value, _PLAIN) for x in e.elts):
        return [x.value for x in e.elts]
    return UNKNOWN


def _apply(op, v):
    if v is UNKNOWN:
        return UNKNOWN
    try:
        return op(v)
    except (TypeError, ValueError, ArithmeticError):
        return UNKNOWN


def _apply2(op, a, b):
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    try:
        return op(a, b)
    except (TypeError, ValueError, ArithmeticError):
        return UNKNOWN


# -- command-line options -----------------------------------------------------------------------

_NOT_AN_OPTION = object()
_STORE_CONST = {"store_true": False, "store_false": True}


def option_default(hub, view, expr: ast.Attribute, at, callers=None, depth: int = 0):
    """``args.x`` where every origin of ``args`` is a ``parse_args()`` call: the default value of
    option ``x`` (``UNKNOWN`` when it is unknown: no default, ``required``, several options of
    that name, ``set_defaults``, stores into the parsed options, an ``args`` not followed that has
    an option's name: its parse is not seen); ``_NOT_AN_OPTION`` when ``args`` is not (only)
    parsed options."""
    from .rank_kinds import argparse_options, option_dest

    base = expr.value
    if not isinstance(base, (ast.Name, ast.Attribute)):
        return _NOT_AN_OPTION
    leaves = origins(hub, view, base, at, callers=callers)
    if not leaves and any(option_dest(c, view.sem) == expr.attr for c in argparse_options(view.sem)):
        return UNKNOWN  # an object not followed, named like an option of the module: parsed unseen
    if not leaves or len(leaves) > 4:
        return _NOT_AN_OPTION
    found = {}
    for lv, le in leaves:
        if not (isinstance(le, ast.Call) and isinstance(le.func, ast.Attribute) and le.func.attr == "parse_args"):
            return _NOT_AN_OPTION
        if (le.args or le.keywords) and not _no_options(le):
            return UNKNOWN  # ``parse_args(["--x", ...])``, a namespace given: not the defaults
        # the parser's own module (``get_parser()`` of another file) holds its options
        pvs = {id(pv): pv for pv, pe in origins(hub, lv, le.func.value, le, callers=callers)
               if isinstance(pe, ast.Call) and (pv.sem.call_qualname(pe) or "") == "argparse.ArgumentParser"}
        found[id(lv)] = (lv, [lv, *(pv for pv in pvs.values() if pv is not lv)])
    vals = []
    for lv, pviews in found.values():
        if any(_rewrites_options(hub, v, expr.attr) for v in {id(v): v for v in (view, *pviews)}.values()):
            return UNKNOWN
        opts = [(v, c) for v in pviews for c in argparse_options(v.sem) if option_dest(c, v.sem) == expr.attr]
        if len(opts) != 1 or get_arg(opts[0][1], None, "required") is not None:
            return UNKNOWN
        ov, opt = opts[0]
        d = get_arg(opt, None, "default")
        if d is not None:
            v = default_value(hub, ov, d, d, callers, depth + 1)
        else:
            action = get_arg(opt, None, "action")
            if not (isinstance(action, ast.Constant) and action.value in _STORE_CONST):
                return UNKNOWN
            v = _STORE_CONST[action.value]  # the value argparse gives a flag left unset
        if v is UNKNOWN:
            return UNKNOWN
        vals.append(v)
    return vals[0] if vals and all(type(x) is type(vals[0]) and x == vals[0] for x in vals) else UNKNOWN


def _no_options(call: ast.Call) -> bool:
    """``parse_args([])`` / ``parse_args(args=())``: an empty command line, the defaults."""
    given = [*call.args, *(k.value for k in call.keywords if k.arg == "args")]
    return len(given) == 1 == len(call.args) + len(call.keywords) \
        and isinstance(given[0], (ast.List, ast.Tuple)) and not given[0].elts


def _rewrites_options(hub, view, attr: str) -> bool:
    """The module may give the parsed options other values than their defaults: it stores into
    that attribute of the parsed options (``args.x = ...``), uses ``set_defaults``, ``setattr``,
    ``vars(...)`` or ``__dict__`` (a config file merged over the options)."""
    memo = view.memo.setdefault("defaults.rewrites", {})
    got = memo.get(attr)
    if got is None:
        got = False
        for n in ast.walk(view.tree):
            if isinstance(n, ast.Attribute):
                if n.attr in ("set_defaults", "__dict__") or (
                        n.attr == attr and not isinstance(n.ctx, ast.Load) and _parsed(hub, view, n.value, n)):
                    got = True
                    break
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("setattr", "vars"):
                got = True
                break
        memo[attr] = got
    return got


def _parsed(hub, view, base, at) -> bool:
    """``base`` may hold the result of a ``parse_args()`` call (or is not followed)."""
    if isinstance(base, ast.Name) and base.id == "self":
        return False
    leaves = origins(hub, view, base, at)
    return not leaves or any(isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute)
                             and e.func.attr == "parse_args" for _v, e in leaves)
