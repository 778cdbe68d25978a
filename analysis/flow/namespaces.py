"""Where an argparse option's value goes, by value flow: the parser an ``add_argument`` call adds
the option to (``parser_roots``), whether a value is a namespace parsed by that parser
(``parsed_from``), and the uses of ``<namespace>.<dest>`` a module reaches by passing such a
namespace to a project function (``passed_option_use``), as an argument bound to a parameter, a
few calls deep, across modules, into constructors and methods (``self.<attr>`` stored from a
parameter in ``__init__``). The option's value is followed, never a name: a function reads the
option only through what its callers pass it.

DDP006 asks it for an option declared in a configuration module (``get_parser()``) and parsed by
the script that calls it (``main(get_parser().parse_args())``), whose value is used in a helper of a
third module (``init_distributed(args)``)."""
from __future__ import annotations

import ast

from ..semantic import parent
from .bindings import reaching
from .origins import origins

_PARSE = frozenset({"parse_args", "parse_known_args", "parse_intermixed_args", "parse_known_intermixed_args"})
_GROUPS = frozenset({"add_argument_group", "add_mutually_exclusive_group"})


def _method_on(e, names) -> bool:
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in names


def _roots(hub, view, expr, at, depth: int = 0) -> list:
    """(view, node) of the constructions the parser ``expr`` holds may come from (``origins``),
    through argument groups (``p.add_argument_group(...)`` is ``p``'s)."""
    out = []
    for v, e in origins(hub, view, expr, at):
        if _method_on(e, _GROUPS) and depth < 3:
            out.extend(_roots(hub, v, e.func.value, e, depth + 1))
        else:
            out.append((v, e))
    return out


def parser_roots(hub, view, option: ast.Call) -> frozenset:
    """The ids of the nodes the parser that ``option`` (an ``add_argument`` call) adds to comes
    from: ``argparse.ArgumentParser(...)`` of ``p = ArgumentParser(); p.add_argument(...)``, through
    helpers that take the parser as a parameter (their calls in the module) or return it."""
    if not isinstance(option.func, ast.Attribute):
        return frozenset()
    return frozenset(id(e) for _v, e in _roots(hub, view, option.func.value, option))


def parsed_from(hub, view, expr, at, roots: frozenset) -> bool:
    """``expr`` (at ``at``) may hold a namespace that a parser of ``roots`` parses: one of its
    origins is a ``parse_args()`` / ``parse_known_args()`` call (element 0 of its pair) on a parser
    coming from one of them (``get_parser().parse_args()``, ``args = parser.parse_args()``, a helper
    that returns either, ``self.args`` stored from one)."""
    if not roots:
        return False
    for v, e in origins(hub, view, expr, at):
        if _method_on(e, _PARSE) and any(id(r) in roots for _rv, r in _roots(hub, v, e.func.value, e)):
            return True
    return False


class OptionReads:
    """``sinks_of`` for ``rank_kinds.param_sinks``: (namespace, read, how) for each use of
    ``<namespace>.<dest>`` in a module (``rank_kinds.option_uses``), with the namespace as its
    function holds it: the name itself, what a local alias is bound to (``args = self.args``), or
    for ``self.<attr>.<dest>`` each value the class stores in ``self.<attr>`` (the parameter of
    ``__init__`` in ``self.cfg = cfg``)."""

    def __init__(self, hub, dest: str):
        self.hub, self.dest = hub, dest
        self.__name__ = f"option_reads:{dest}"  # ``param_sinks``' memo key

    def __call__(self, view) -> list:
        from .rank_kinds import option_uses  # lazy: rank_kinds asks this module nothing

        memo = view.memo.setdefault("namespaces.reads", {})
        got = memo.get(self.dest)
        if got is None:
            got = memo[self.dest] = [(ns, n, how) for n, how in option_uses(view, self.dest)
                                     for ns in _holders(self.hub, view, n.value)]
        return got


def _holders(hub, view, expr, depth: int = 0) -> list:
    """The expressions of its function (or of ``__init__``, for a ``self`` attribute) whose value
    ``expr`` is: a parameter as it stands, through single local aliases and ``self`` attributes."""
    if depth > 3:
        return []
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, expr)
        if kind == "param":
            return [expr]
        if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) \
                and len(evs[0].targets) == 1 and isinstance(evs[0].targets[0], ast.Name):
            return _holders(hub, view, evs[0].value, depth + 1)
        return []
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        out = []
        for b in hub.self_attr_bindings(view, expr)[:8]:
            if isinstance(b, ast.expr):
                out.extend(_holders(hub, view, b, depth + 1))
        return out
    return []


def passed_option_use(hub, view, dest: str, roots: frozenset):
    """(view, read, how) of a use of option ``dest`` that a namespace of this module reaches when
    it is passed to a project function: ``main(get_parser().parse_args())`` whose ``main(args)``
    calls ``init_distributed(args)`` of another module, which tests ``args.local_rank == -1``
    (``rank_kinds.param_sinks`` over ``OptionReads``); the namespace must come from a parser of
    ``roots`` (``parsed_from``). None when no call passes one there."""
    from .calls import call_args
    from .rank_kinds import param_sinks

    reads = OptionReads(hub, dest)
    for c in view.sem.calls:
        if not c.args and not c.keywords:
            continue
        target = hub.resolve_call(view, c)
        if target is None:
            continue
        sinks = param_sinks(hub, target[0], target[1], reads)
        if not sinks:
            continue
        for pname, a in call_args(c, target[1]):
            if pname in sinks and parsed_from(hub, view, a, c, roots):
                return sinks[pname]
    return None


# -- an option's value carried by a store into an object's attribute ------------------------------

def _attr_chain(expr):
    """(base, attrs) of ``base.a1. ... .ak`` (k >= 1), ``base`` a name or a ``self`` attribute:
    ``cfg.DIST.GPU`` is (``cfg``, ("DIST", "GPU"))."""
    chain = []
    while isinstance(expr, ast.Attribute) and not (isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        chain.append(expr.attr)
        expr = expr.value
    if not chain:
        return None
    if isinstance(expr, ast.Name) and expr.id != "self" or \
            isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return expr, tuple(reversed(chain))
    return None


def _bare(e):
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("int", "str") and len(e.args) == 1:
        e = e.args[0]
    return e


class _Callers:
    """``callers`` for ``origins``: the calls of ``fn`` in the modules of ``views`` (the function
    that stores into its parameter's attribute may be called only from another module)."""

    def __init__(self, hub, views):
        self.hub, self.views = hub, list({id(v): v for v in views}.values())

    def __call__(self, view, fn) -> list:
        name = fn.name if fn.name != "__init__" else getattr(parent(fn), "name", None)
        out = []
        for w in self.views:
            if w is view:
                continue
            for c in w.sem.calls:  # ``f(...)``, ``Cls(...)``, ``obj.f(...)``
                f = c.func
                if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) != name:
                    continue
                got = self.hub.resolve_call(w, c)
                if got is not None and got[1] is fn:
                    out.append((w, c))
        return out


def _objects(hub, view, base, at, callers) -> set:
    """The ids of the calls (constructions: ``CN()``, ``_C.clone()``, ``Config(...)``) the object
    ``base`` holds at ``at`` may come from, through names, parameters, tuple returns and helpers."""
    return {id(e) for _v, e in origins(hub, view, base, at, callers=callers) if isinstance(e, ast.Call)}


def stored_option_uses(hub, stores_in, reads_in, dest: str) -> list:
    """(view, read, how) for each use (``rank_kinds.option_uses``' kinds: a device, the init, a
    rank test) of an attribute that an object holds the option ``dest`` in: a store
    ``obj.A = <namespace>.<dest>`` in a module of ``stores_in`` (``config.GPU = args.local_rank``
    in ``update_config(config, args)`` of a configuration module) and a read ``x.A`` in a module of
    ``reads_in`` where ``x`` may be that same object, by value (``origins``: the construction both
    come from, through the helper that returns it, a tuple return ``return args, config``, and the
    parameters the object is passed in). Attribute paths compare whole (``cfg.DIST.GPU``)."""
    from .rank_kinds import _use_of

    callers = _Callers(hub, [*stores_in, *reads_in])
    stores = []  # (attribute path, object ids)
    for v in stores_in:
        for st in v.sem.by_type.get(ast.Assign, ()):
            val = _bare(st.value)
            if not (isinstance(val, ast.Attribute) and val.attr == dest and v.sem.qualname(val) is None):
                continue
            for t in st.targets:
                bc = _attr_chain(t)
                if bc is not None:
                    objs = _objects(hub, v, bc[0], st, callers)
                    if objs:
                        stores.append((bc[1], objs))
    if not stores:
        return []
    out = []
    attrs = {a[-1] for a, _o in stores}
    for w in reads_in:
        for n in w.sem.of_types(ast.Attribute):
            if n.attr not in attrs or not isinstance(n.ctx, ast.Load) \
                    or w.sem.qualname(n) is not None:
                continue
            bc = _attr_chain(n)
            if bc is None:
                continue
            mine = [objs for a, objs in stores if a == bc[1]]
            if not mine:
                continue
            how = _use_of(w, n)
            if how is None:
                continue
            got = _objects(hub, w, bc[0], n, callers)
            if any(got & objs for objs in mine):
                out.append((w, n, how))
    return out
