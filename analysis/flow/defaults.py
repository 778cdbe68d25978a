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

from ..semantic import get_arg, parent
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
    found, le_of = {}, {}
    for lv, le in leaves:
        if not (isinstance(le, ast.Call) and isinstance(le.func, ast.Attribute) and le.func.attr == "parse_args"):
            return _NOT_AN_OPTION
        if (le.args or le.keywords) and not _no_options(le):
            return UNKNOWN  # ``parse_args(["--x", ...])``, a namespace given: not the defaults
        # the parser's own module (``get_parser()`` of another file) holds its options
        ctors = [(pv, pe) for pv, pe in origins(hub, lv, le.func.value, le, callers=callers)
                 if isinstance(pe, ast.Call) and (pv.sem.call_qualname(pe) or "") == "argparse.ArgumentParser"]
        pvs = {id(pv): pv for pv, _pe in ctors}
        found[id(lv)] = (lv, [lv, *(pv for pv in pvs.values() if pv is not lv)], frozenset(id(pe) for _pv, pe in ctors))
        le_of[id(lv)] = le
    vals = []
    for lv, pviews, roots in found.values():
        if any(_rewrites_options(hub, v, expr.attr) for v in {id(v): v for v in (view, *pviews)}.values()):
            return UNKNOWN
        opts = [(v, c) for v in pviews for c in argparse_options(v.sem) if option_dest(c, v.sem) == expr.attr]
        if not opts:
            v = _looped_default(hub, pviews, roots, expr.attr, callers, depth, (lv, le_of[id(lv)]))
            if v is UNKNOWN:
                return UNKNOWN
            vals.append(v)
            continue
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
        for n in view.sem.of_types(ast.Attribute, ast.Call):  # (a yes from either decides)
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


# -- options declared from a dict: ``for k, v in defaults.items(): p.add_argument(f"--{k}", default=v)``

def _looped_options(view) -> list:
    """(loop, add_argument call, dict expression) of the module: an option declared for each entry
    of a dict, named by its key (``f"--{k}"``, ``"--" + k``) with the entry as its default
    (``default=v`` of ``for k, v in d.items()``, or ``default=d[k]`` of ``for k in d``)."""
    from .rank_kinds import argparse_options

    memo = view.memo.get("defaults.looped")
    if memo is not None:
        return memo
    out = []
    for call in argparse_options(view.sem):
        key = _dash_name(call.args[0]) if len(call.args) == 1 else None
        if key is None:
            continue
        loop = parent(call)
        while loop is not None and not isinstance(loop, (ast.For, ast.FunctionDef, ast.AsyncFunctionDef)):
            loop = parent(loop)
        if not isinstance(loop, ast.For):
            continue
        d, value = _dict_loop(loop, key)
        default = get_arg(call, None, "default")
        if d is None or default is None:
            continue
        if (value is not None and isinstance(default, ast.Name) and default.id == value) or (
                isinstance(default, ast.Subscript) and isinstance(default.slice, ast.Name)
                and default.slice.id == key and ast.dump(default.value) == ast.dump(d)):
            out.append((loop, call, d))
    view.memo["defaults.looped"] = out
    return out


def _dash_name(e) -> str | None:
    """``k`` of ``f"--{k}"`` or ``"--" + k``."""
    if isinstance(e, ast.JoinedStr) and len(e.values) == 2:
        head, f = e.values
        if isinstance(head, ast.Constant) and head.value == "--" and isinstance(f, ast.FormattedValue) \
                and f.conversion == -1 and f.format_spec is None and isinstance(f.value, ast.Name):
            return f.value.id
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) and isinstance(e.left, ast.Constant) \
            and e.left.value == "--" and isinstance(e.right, ast.Name):
        return e.right.id
    return None


def _dict_loop(loop: ast.For, key: str):
    """(dict expression, value name or None) of ``for key, v in d.items()`` / ``for key in d``."""
    it, t = loop.iter, loop.target
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items" \
            and not it.args and not it.keywords and isinstance(t, ast.Tuple) and len(t.elts) == 2 \
            and all(isinstance(x, ast.Name) for x in t.elts) and t.elts[0].id == key:
        return it.func.value, t.elts[1].id
    if isinstance(t, ast.Name) and t.id == key and isinstance(it, (ast.Name, ast.Attribute)):
        return it, None
    return None, None


def _looped_default(hub, pviews, roots: frozenset, attr: str, callers, depth: int, parse=None):
    """The default of option ``attr`` of the parser ``parse`` (view, ``parse_args`` call) parses,
    one of ``roots`` (ids of its constructions), when it declares no option of that name
    literally: the entry ``attr`` of the dict a loop declares its options from, in the function
    that builds the parser or in a helper it calls with the parser
    (``add_dict_to_argparser(parser, defaults)``), the dict followed in the context of the very
    call that built the parser (``make_parser(DEFAULTS).parse_args()``); ``UNKNOWN`` when there is
    no such loop, several, or the entry cannot be read (the dict updated from elsewhere, a key not
    present)."""
    from .calls import call_args
    from .namespaces import parser_roots

    if not roots or parse is None:
        return UNKNOWN
    lv, le = parse
    sources = {}  # id(add_argument call) -> (view, dict expression, at, frames)
    for pv, pe, frames in origins(hub, lv, le.func.value, le, callers=callers, frames=()):
        if id(pe) not in roots:
            continue
        fn = pv.sem.enclosing_function(pe) or pv.tree
        for _loop, call, d in _looped_options(pv):
            if id(call) not in sources and _inside(call, fn) and id(pe) in parser_roots(hub, pv, call):
                sources[id(call)] = (pv, d, call, frames)
        for c in pv.sem.calls:
            if len(c.args) + len(c.keywords) < 2 or not _inside(c, fn):
                continue
            target = hub.resolve_call(pv, c)
            if target is None:
                continue
            tv, hf = target
            loops = [(o, d) for _lp, o, d in _looped_options(tv) if _inside(o, hf) and id(o) not in sources]
            if not loops:
                continue
            bound = dict(call_args(c, hf))
            for o, d in loops:
                recv = o.func.value
                if isinstance(recv, ast.Name) and recv.id in bound and isinstance(d, ast.Name) and d.id in bound \
                        and any(e is pe for _v, e in origins(hub, pv, bound[recv.id], c, callers=callers)):
                    sources[id(o)] = (pv, bound[d.id], c, frames)
    if len(sources) != 1:
        return UNKNOWN
    sv, d, at, frames = next(iter(sources.values()))
    leaves = origins(hub, sv, d, at, path=(attr,), callers=callers, frames=frames)
    if not leaves or len(leaves) > 8:
        return UNKNOWN
    vals = []
    for lv2, le2, *_ in leaves:
        v = default_value(hub, lv2, le2, le2, callers, depth + 1)
        if v is UNKNOWN:
            return UNKNOWN
        vals.append(v)
    return vals[0] if all(type(x) is type(vals[0]) and x == vals[0] for x in vals) else UNKNOWN


def _inside(node, fn) -> bool:
    p = parent(node)
    while p is not None and p is not fn:
        p = parent(p)
    return p is fn
