"""The process that starts the other processes of its node, and the rank test that picks it.

A launcher of its own (Lightning's script re-launch, a hand-written ``torchrun``) starts one
process per *local* index on every node: a loop whose body stores its variable under the
environment's local-rank key (``env["LOCAL_RANK"] = str(i)``, ``{"LOCAL_RANK": f"{i}", ...}``)
and starts a process (``subprocess.Popen`` / ``run`` / ``call`` / ``check_call`` /
``check_output``). Exactly one process of each node must run that loop: the one whose *local* rank
is 0. ``launch_guards`` lists the tests against 0 that decide whether such a loop runs (an
``assert r == 0`` before it, an enclosing ``if r == 0:``, an ``if r != 0: return`` before it, in
the loop's function or around a call of that function in its module); ``global_rank_value`` says
whether the tested value is the *global* rank:

- ``rank_kinds.rank_kind_of`` says so (``RANK``, ``dist.get_rank()``, through names, helpers,
  ``self`` attributes and properties, also of a project base class);
- ``node_rank * n + local_rank`` (the node's rank from the environment's ``NODE_RANK`` /
  ``GROUP_RANK`` / ``SLURM_NODEID``, times anything, plus the local rank);
- an accessor call on ``self`` (``self.env.global_rank()``, no arguments) that the class, or a
  class of its project chain, also gives to ``init_process_group(rank=...)`` (or stores as the
  environment's ``RANK``): the same object's accessor, so the same value.

A loop that also gives each child its loop variable as the global rank (``env["RANK"] = str(i)``)
makes a world of one node, and is no launcher of several nodes."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .origins import branch_origins
from .rank_kinds import GLOBAL, LOCAL, global_rank_sinks, rank_kind_of
from .rank_tests import GLOBAL_RANK_ENV, LOCAL_RANK_ENV
from .records import class_chain
from .vocab import env_key

NODE_RANK_ENV = frozenset({"NODE_RANK", "GROUP_RANK", "SLURM_NODEID", "OMPI_COMM_WORLD_NODE_RANK"})
_STARTS = frozenset({"subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call",
                     "subprocess.check_output"})


def _start_loops(view) -> list:
    """(loop, its target's names, the nodes of its body, its process-start calls) for each ``for``
    loop of the module whose body starts a process: what both launcher queries read."""
    memo = view.memo.get("node_launch.starts")
    if memo is not None:
        return memo
    out = []
    sem = view.sem
    # (no process-start call in the module: no loop's body holds one, and no body is walked)
    for loop in sem.by_type.get(ast.For, ()) if sem.calls_to(*_STARTS) else ():
        names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        if not names:
            continue
        body = [n for st in loop.body for n in _walk_here(st)]
        starts = [n for n in body if isinstance(n, ast.Call) and sem.call_qualname(n) in _STARTS]
        if starts:
            out.append((loop, names, body, starts))
    view.memo["node_launch.starts"] = out
    return out


def node_launch_loops(view) -> list:
    """(function, loop, start call) for each loop of the module that starts one process per local
    index (see the module's docstring)."""
    memo = view.memo.get("node_launch.loops")
    if memo is not None:
        return memo
    out = []
    for loop, names, body, starts in _start_loops(view):
        local = [v for k, v in _env_stores(body) if k in LOCAL_RANK_ENV and _mentions(v, names)]
        if not local:
            continue
        if any(k in GLOBAL_RANK_ENV and _just(v, names) for k, v in _env_stores(body)):
            continue  # each child's global rank is its local index: one node
        out.append((view.sem.enclosing_function(loop), loop, starts[0]))
    view.memo["node_launch.loops"] = out
    return out


def rank_launch_loops(view) -> list:
    """(function, loop, start call) for each loop of the module that starts a process a round and
    gives it the round's index as its rank: in its environment (a rank key, global or local, as
    ``node_launch_loops`` reads the local one) or on its command line (an option a rank name
    spells, ``"--rank={}".format(i)``, ``f"--local_rank={i}"``, ``"--rank", str(i)``, put into what
    the start call runs). The loop's function runs in the launching process, once: its children
    are the ranks."""
    memo = view.memo.get("node_launch.rank_loops")
    if memo is not None:
        return memo
    keys = GLOBAL_RANK_ENV | LOCAL_RANK_ENV
    out = [(view.sem.enclosing_function(loop), loop, starts[0])
           for loop, names, body, starts in _start_loops(view)
           if any(k in keys and _mentions(v, names) for k, v in _env_stores(body)) or _argv_rank(body, names, starts)]
    view.memo["node_launch.rank_loops"] = out
    return out


def _argv_rank(body, names, starts) -> bool:
    """A string of ``body`` that spells a rank option with the loop's index reaches a start call:
    inside its arguments, or stored into (``x = ...``, ``x[k] = ...``, ``x.append(...)``) a name
    they read."""
    used = {n.id for c in starts for a in (*c.args, *(k.value for k in c.keywords))
            for n in ast.walk(a) if isinstance(n, ast.Name)}
    inside = {id(n) for c in starts for n in ast.walk(c)}
    for n in body:
        if not _rank_option_value(n, names):
            continue
        if id(n) in inside:
            return True
        p = parent(n)
        while p is not None and not isinstance(p, ast.stmt):
            if isinstance(p, ast.Call) and isinstance(p.func, ast.Attribute) and isinstance(p.func.value, ast.Name) \
                    and p.func.attr in ("append", "extend", "insert") and p.func.value.id in used:
                return True
            p = parent(p)
        if isinstance(p, ast.Assign):
            for t in p.targets:
                if isinstance(t, ast.Tuple) and isinstance(p.value, ast.Tuple) and len(t.elts) == len(p.value.elts):
                    # ``cmd, log = [..., f"--rank={i}"], None``: the target of the item holding it
                    k = next((k for k, e in enumerate(p.value.elts) if any(x is n for x in ast.walk(e))), None)
                    t = t.elts[k] if k is not None else t
                base = t.value if isinstance(t, ast.Subscript) else t
                if isinstance(base, ast.Name) and base.id in used:
                    return True
    return False


def _rank_option_value(n, names) -> bool:
    """``n`` is a rank option given the loop's index: ``"--rank={}".format(i)``, ``"--rank=%d" % i``,
    ``f"--rank={i}"``, or a display ``[..., "--rank", str(i), ...]``."""
    if isinstance(n, ast.JoinedStr):
        head = n.values[0] if n.values else None
        return isinstance(head, ast.Constant) and _rank_option(str(head.value)) and _mentions(n, names)
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "format" \
            and isinstance(n.func.value, ast.Constant) and isinstance(n.func.value.value, str):
        return _rank_option(n.func.value.value.split("{", 1)[0]) and _mentions(n, names)
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and isinstance(n.left, ast.Constant) \
            and isinstance(n.left.value, str):
        return _rank_option(n.left.value.split("%", 1)[0]) and _mentions(n.right, names)
    if isinstance(n, (ast.List, ast.Tuple)):
        return any(isinstance(a, ast.Constant) and isinstance(a.value, str) and _rank_option(a.value)
                   and _mentions(b, names) for a, b in zip(n.elts, n.elts[1:]))
    return False


def _rank_option(text: str) -> bool:
    """``text`` is a command-line option (with or without its ``=``) that a rank name spells
    (``uniformity.RANK_NAME``: ``--rank``, ``--local_rank``, ``--gpu_rank``)."""
    from .uniformity import RANK_NAME  # lazy: uniformity sits above the launch facts

    t = text.strip()
    if not t.startswith("-"):
        return False
    t = t.lstrip("-").rstrip("=").strip()
    return bool(t) and bool(RANK_NAME.match(t.replace("-", "_")))


def _walk_here(node):
    """The nodes of ``node`` outside nested functions and classes."""
    yield node
    for c in ast.iter_child_nodes(node):
        if not isinstance(c, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            yield from _walk_here(c)


def _env_stores(nodes) -> list:
    """(key, value) of each constant-key store among ``nodes``: ``m["K"] = v``, ``{"K": v}``,
    ``dict(m, K=v)``."""
    out = []
    for n in nodes:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str):
                    out.append((t.slice.value, n.value))
        elif isinstance(n, ast.Dict):
            out.extend((k.value, v) for k, v in zip(n.keys, n.values)
                       if isinstance(k, ast.Constant) and isinstance(k.value, str))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "dict":
            out.extend((k.arg, k.value) for k in n.keywords if k.arg)
    return out


def _mentions(e, names) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(e))


def _just(e, names) -> bool:
    """``e`` is the loop variable itself, through ``str()`` / ``int()`` / an f-string."""
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("str", "int") and len(e.args) == 1:
        e = e.args[0]
    if isinstance(e, ast.JoinedStr) and len(e.values) == 1 and isinstance(e.values[0], ast.FormattedValue):
        e = e.values[0].value
    return isinstance(e, ast.Name) and e.id in names


# -- the tests that pick the launching process -----------------------------------------------------

def launch_guards(view, fn, node) -> list:
    """(tested value, test node) for each test against 0 in ``fn`` that decides whether ``node``
    runs; when ``fn`` has none, those around the calls of ``fn`` in its module (``self.fn()`` in a
    method of its class, ``fn()``)."""
    got = _zero_tests(fn, node)
    if got or fn is None:
        return got
    cls = parent(fn)
    out = []
    for c in view.sem.calls:
        f = c.func
        if isinstance(cls, ast.ClassDef):
            ok = isinstance(f, ast.Attribute) and f.attr == fn.name and isinstance(f.value, ast.Name) \
                and f.value.id == "self" and view.sem.enclosing_function(c) in cls.body
        else:
            ok = isinstance(f, ast.Name) and f.id == fn.name and isinstance(parent(fn), ast.Module)
        if ok:
            out.extend(_zero_tests(view.sem.enclosing_function(c), c))
    return out


def _zero_tests(fn, node) -> list:
    if fn is None:
        return []
    out = []
    child, p = node, parent(node)
    while p is not None and child is not fn:
        if isinstance(p, ast.If):
            r, eq = _zero_compare(p.test)
            if r is not None and ((eq and child in p.body) or (not eq and child in p.orelse)):
                out.append((r, p.test))
        for block in ("body", "orelse", "finalbody"):
            stmts = getattr(p, block, None)
            if isinstance(stmts, list) and child in stmts:
                for st in stmts[:stmts.index(child)]:
                    if isinstance(st, ast.Assert):
                        r, eq = _zero_compare(st.test)
                        if r is not None and eq:
                            out.append((r, st.test))
                    elif isinstance(st, ast.If) and not st.orelse and st.body and isinstance(
                            st.body[-1], (ast.Return, ast.Raise)):
                        r, eq = _zero_compare(st.test)
                        if r is not None and not eq:
                            out.append((r, st.test))
        child, p = p, parent(p)
    return out


def _zero_compare(test):
    """(value, True) for ``value == 0`` (either side), (value, False) for ``value != 0``."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
        a, b = test.left, test.comparators[0]
        for r, z in ((a, b), (b, a)):
            if isinstance(z, ast.Constant) and type(z.value) is int and z.value == 0:
                return r, isinstance(test.ops[0], ast.Eq)
    return None, None


# -- is the tested value the global rank -----------------------------------------------------------

def global_rank_value(hub, view, expr, at):
    """(view, node) witnessing that ``expr`` at ``at`` is the global rank (see the module's
    docstring), else None."""
    kind, w = rank_kind_of(hub, view, expr, at)
    if kind == GLOBAL:
        return w
    if kind is not None:
        return None
    witness = None
    for v, e, _fr in branch_origins(hub, view, expr, at):
        if isinstance(e, ast.Constant):
            continue
        w = _node_formula(hub, v, e) or _sink_accessor(hub, view, at, v, e)
        if w is None:
            return None
        witness = witness or w
    return witness


def _node_formula(hub, view, e):
    """``node_rank * n + local_rank`` (either order of either operation)."""
    if not (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add)):
        return None
    for prod, loc in ((e.left, e.right), (e.right, e.left)):
        if isinstance(prod, ast.BinOp) and isinstance(prod.op, ast.Mult) \
                and rank_kind_of(hub, view, loc, e)[0] == LOCAL:
            for f in (prod.left, prod.right):
                w = _node_rank(hub, view, f, e)
                if w is not None:
                    return w
    return None


def _node_rank(hub, view, e, at):
    leaves = [(v, x) for v, x, _fr in branch_origins(hub, view, e, at) if not isinstance(x, ast.Constant)]
    if not leaves:
        return None
    for v, x in leaves:
        while isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "int" and len(x.args) == 1:
            x = x.args[0]
        if env_key(v, x) not in NODE_RANK_ENV:
            return None
    return leaves[0]


def _sink_accessor(hub, view, at, v, e):
    """``e`` (in ``v``) is ``self.<attrs>.m()`` and a class of the chain of ``at``'s class gives the
    same accessor to a place that takes the global rank: (view, that sink)."""
    if not (isinstance(e, ast.Call) and not e.args and not e.keywords and isinstance(e.func, ast.Attribute)):
        return None
    root = e.func.value
    while isinstance(root, ast.Attribute):
        root = root.value
    if not (isinstance(root, ast.Name) and root.id == "self"):
        return None
    fn = view.sem.enclosing_function(at)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return None
    chain = class_chain(hub, view, cls)
    if not any(cv is v and _class_of(e) is c for cv, c in chain):
        return None  # the accessor is not read on this object
    key = ast.dump(e.func)
    for cv, c in chain:
        for val, node, _what in global_rank_sinks(cv):
            sfn = cv.sem.enclosing_function(node)
            if sfn is None or parent(sfn) is not c:
                continue
            for sv, se, _fr in branch_origins(hub, cv, val, node):
                if isinstance(se, ast.Call) and not se.args and not se.keywords and ast.dump(se.func) == key \
                        and any(v2 is sv and _class_of(se) is c2 for v2, c2 in chain):
                    return cv, node
    return None


def _class_of(node):
    """The class whose method holds ``node``."""
    p = parent(node)
    while p is not None and not isinstance(p, ast.ClassDef):
        p = parent(p)
    return p
