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

from ..semantic import param_names, parent
from .bindings import reaching
from .origins import _attr_path, origins

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


# -- an option's value replaced before it is read -------------------------------------------------

_MAX_HELPERS = 2


def overwritten(hub, view, base: str, dest: str, at, depth: int = 0):
    """The statement that replaces ``<base>.<dest>`` before ``at`` on every path of its function
    (``attr_order.dominating_binding``), with a value that does not carry the old one: a store
    ``args.local_rank = torch.device(f"cuda:{args.cuda_id}")``, an ``if``/``else`` that makes one in
    both branches, or a call of a project function given ``base`` that makes such a store into that
    parameter on every call, as its own statement (``setup_device(args)``; a helper of a helper
    too). None when the parsed value may still reach ``at``: no such statement, one only in a
    branch, or a new value computed from the old one (``torch.device("cuda", args.local_rank)``)."""
    from .attr_order import dominating_binding  # lazy: attr_order's neighbours ask the origins

    fn = view.sem.enclosing_function(at) or view.sem.tree
    stores: dict = {}

    def binds(st) -> bool:
        got = _replacing_stores(hub, view, st, base, dest, depth)
        if got is not None:
            stores[st] = got
        return got is not None

    st = dominating_binding(fn, dest, at, base=base, binds=binds)
    if st is None:
        return None
    got = [st] if _attr_store(st, base, dest) else stores.get(st, [])
    return None if any(_carries(_stored_value(s, base, dest), dest, fn) for s in got) else st


def _replacing_stores(hub, view, st, base: str, dest: str, depth: int):
    """The stores by which statement ``st`` replaces ``<base>.<dest>`` on every path through it:
    itself (a plain store), the last such statement of each branch of an ``if``/``else``, none to
    check for a helper's call that does (``_helper_overwrites``); None when it does not."""
    if _attr_store(st, base, dest):
        return [st]
    if isinstance(st, ast.If) and st.orelse:
        out = []
        for block in (st.body, st.orelse):
            got = next((g for s in reversed(block) if (g := _replacing_stores(hub, view, s, base, dest, depth))
                        is not None), None)
            if got is None:
                return None
            out.extend(got)
        return out
    call = st.value if isinstance(st, (ast.Expr, ast.Assign)) else None
    if depth < _MAX_HELPERS and getattr(view, "defs", None) is not None and isinstance(call, ast.Call) \
            and _helper_overwrites(hub, view, call, base, dest, depth):
        return []  # (a caller's bare view resolves no call: its stores only)
    return None


def _helper_overwrites(hub, view, call: ast.Call, base: str, dest: str, depth: int) -> bool:
    """``call`` runs a project function whose parameter given ``base`` gets ``.<dest>`` replaced on
    every call (by its last statement, or before it: ``overwritten``), by a value that no argument
    of ``call`` carries the old one into."""
    from .calls import call_args

    if not any(isinstance(a, ast.Name) and a.id == base for a in (*call.args, *(k.value for k in call.keywords))):
        return False
    target = hub.resolve_call(view, call)
    if target is None or not getattr(target[1], "body", None):
        return False
    tv, fn = target
    pairs = call_args(call, fn)
    for p, a in pairs:
        if not (isinstance(a, ast.Name) and a.id == base):
            continue
        last = fn.body[-1]
        got = _replacing_stores(hub, tv, last, p, dest, depth + 1)
        if got is None:
            st = overwritten(hub, tv, p, dest, last, depth + 1)
            got = None if st is None else [st] if _attr_store(st, p, dest) else []
        if got is None or any(isinstance(r, ast.Return) and (r.lineno, r.col_offset) < (s.lineno, s.col_offset)
                              for s in got for r in ast.walk(fn)):
            continue  # none, or an early ``return`` that may leave before it
        given = dict(pairs)
        if any(_carries(v, dest, fn) or any(_carries(given[n], dest, None) for n in _value_params(v, fn) if n in given)
               for v in (_stored_value(s, p, dest) for s in got)):
            continue  # a new value computed from the old one, or from what this call passes
        return True
    return False


def _stored_value(st, base: str, dest: str):
    """What ``st`` stores into ``<base>.<dest>``: its element of a tuple display
    (``args.local_rank, args.amp = dev, True``), else the whole value."""
    if isinstance(st, ast.AnnAssign):
        return st.value
    value = st.value
    path = next((p for p in (_attr_path(t, dest, base) for t in st.targets) if p is not None), [])
    for i in path:
        if not (isinstance(value, (ast.Tuple, ast.List)) and i < len(value.elts)
                and not any(isinstance(e, ast.Starred) for e in value.elts)):
            break
        value = value.elts[i]
    return value


def _attr_store(st, base: str, dest: str) -> bool:
    """``st`` is a plain assignment to ``<base>.<dest>`` (also within a tuple target)."""
    targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
    return getattr(st, "value", None) is not None and any(_attr_path(t, dest, base) is not None for t in targets)


def _value_params(value, fn) -> set:
    """The parameters of ``fn`` that ``value`` may be computed from."""
    from .return_deps import names_reaching

    stmts = [s for s in ast.walk(fn) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and s.value is not None]
    return set(names_reaching([value], stmts)) & set(param_names(fn))


def _carries(value, dest: str, scope) -> bool:
    """``value`` may be computed from a ``<x>.<dest>`` read: one in it, or in the value of an
    assignment of ``scope`` to a name it is computed from (``return_deps.names_reaching``)."""
    from .return_deps import names_reaching, target_names

    def reads(e) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr == dest and isinstance(n.ctx, ast.Load) for n in ast.walk(e))

    if value is None or reads(value):
        return True
    if scope is None:
        return False
    stmts = [s for s in ast.walk(scope) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))
             and s.value is not None]
    live = names_reaching([value], stmts)
    return any(target_names(s) & live and reads(s.value) for s in stmts)


def live_option_uses(hub, view, dest: str) -> list:
    """``rank_kinds.option_uses`` less the reads whose namespace attribute a statement before them
    replaces on every path (``overwritten``): the parsed value never reaches them."""
    from .rank_kinds import option_uses  # lazy: rank_kinds asks this module nothing

    return [(n, how) for n, how in option_uses(view, dest)
            if not (isinstance(n.value, ast.Name) and overwritten(hub, view, n.value.id, dest, n))]


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
        memo = view.memo.setdefault("namespaces.reads", {})
        got = memo.get(self.dest)
        if got is None:
            got = memo[self.dest] = [(ns, n, how) for n, how in live_option_uses(self.hub, view, self.dest)
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
            if pname in sinks and parsed_from(hub, view, a, c, roots) and not (
                    isinstance(a, ast.Name) and overwritten(hub, view, a.id, dest, c)):
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
            if not (isinstance(val, ast.Attribute) and val.attr == dest and v.sem.qualname(val) is None) or (
                    isinstance(val.value, ast.Name) and overwritten(hub, v, val.value.id, dest, st)):
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
