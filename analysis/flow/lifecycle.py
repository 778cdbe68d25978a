"""The default process group's lifetime: which calls create it (``init_process_group``) and which
tear it down (``destroy_process_group``), directly or through project functions (across files),
and under which conditions of the function that makes them.

- ``lifecycle_of(hub, view, fn)``: ("must" | "may" | None for the init, "must" | None for the
  destroy) of a project function: "must" when every normal return of ``fn`` went through it (with
  what the wrappers of its project decorators do around it: ``call_sites.wrappers``);
- ``events(hub, view, scope)``: the ``Event``s of a scope in source order, each with its path
  conditions (``conditions``): the ``if`` branches around it and the early exits before it;
- ``harmless(view, test)``: a test on the group itself (``dist.is_initialized()``,
  ``dist.is_available()``): an init under ``if not dist.is_initialized():`` leaves a group either way,
  a destroy under ``if dist.is_initialized():`` never fails.
- ``group_value(hub, view, test, present)``: what a test on the group itself evaluates to when the
  default group exists (``present``) or not: True / False when that alone decides it, else None
  (``not dist.is_initialized() or rank == 0``, a project helper ``is_distributed()`` that returns
  ``dist.is_available() and dist.is_initialized()``, a name bound once to such a test);
- ``group_state_path(hub, view, node, scope, present)``: is there a path of ``scope`` on which
  ``node`` runs while the group is known to exist (``present``) or known not to: the code took the
  branch of a test on the group that says so (``if dist.is_initialized(): ...`` that falls through,
  ``if not dist.is_initialized() or ...:`` around ``node``), and nothing on the way inits (for
  "absent") or destroys (for "present") the group or leaves. It answers the ``if`` (or
  conditional expression) that took that branch, or None.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, param_names, parent
from ..torch_api import ALL_COLLECTIVES, D
from .call_sites import project_target, sites, wrappers  # noqa: F401  (project_target: re-exported)
from .calls import scope_calls

INIT, DESTROY = D + "init_process_group", D + "destroy_process_group"
_GROUP_TESTS = frozenset({D + "is_initialized", D + "is_available", D + "is_torchelastic_launched"})
# library calls that create the default group (when none exists yet): DeepSpeed's
# ``init_distributed`` (also run by ``deepspeed.initialize``), Accelerate's state objects, ColossalAI's
# launchers, ``init_device_mesh``
LIBRARY_INITS = frozenset({
    "deepspeed.init_distributed", "deepspeed.comm.init_distributed", "deepspeed.comm.comm.init_distributed",
    "deepspeed.initialize", "accelerate.Accelerator", "accelerate.PartialState", "accelerate.state.PartialState",
    "accelerate.accelerator.Accelerator", "colossalai.launch", "colossalai.launch_from_torch",
    "torch.distributed.device_mesh.init_device_mesh", D + "init_device_mesh",
})
_TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_EXIT_QNS = frozenset({"sys.exit", "os._exit", "exit", "quit"})


class Event:
    """``call`` inits or destroys the default group (``kind``), "must" or "may" (a helper that does
    it only on some of its paths); ``conds``: (if node, "body" | "orelse" | "after") on its path."""

    __slots__ = ("call", "kind", "sure", "conds", "where")

    def __init__(self, call, kind, sure, conds, where=None):
        self.call, self.kind, self.sure, self.conds, self.where = call, kind, sure, conds, where


def mode_test(sem, test: ast.AST) -> bool:
    """A test on whether the job runs distributed at all (``unconditional.dist_mode_test``:
    ``args.distributed``, ``world_size > 1``), or on the launcher's variables
    (``"RANK" in os.environ``): the path where it fails is the single-process run."""
    from .rank_tests import GLOBAL_RANK_ENV, LOCAL_RANK_ENV
    from .unconditional import dist_mode_test
    from .world import WORLD_SIZE_ENV

    if dist_mode_test(test):
        return True
    keys = GLOBAL_RANK_ENV | LOCAL_RANK_ENV | WORLD_SIZE_ENV
    return any(isinstance(n, ast.Constant) and n.value in keys for n in ast.walk(test))


def harmless(sem, test: ast.AST) -> bool:
    """``test`` asks whether the group exists (or can): ``dist.is_initialized()``."""
    for n in ast.walk(test):
        if isinstance(n, ast.Call) and (sem.call_qualname(n) or "") in _GROUP_TESTS:
            return True
    return False


# calls that never return: the process leaves, or the test is skipped / failed (an exception)
_NO_RETURN_QNS = frozenset({"pytest.skip", "pytest.fail", "pytest.exit", "pytest.xfail"})
_NO_RETURN_METHODS = frozenset({"skipTest", "fail"})  # ``self.skipTest(...)`` of a unittest case


def _ends(sem, body) -> bool:
    """The block never falls through: it ends in ``return`` / ``raise`` / ``continue`` / ``break``,
    a call that never returns (``sys.exit``, ``pytest.skip``, ``self.skipTest``), or an ``if``
    both of whose branches end."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, _TERMINAL):
        return True
    if isinstance(last, ast.If):
        return bool(last.orelse) and _ends(sem, last.body) and _ends(sem, last.orelse)
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        f = last.value.func
        qn = sem.call_qualname(last.value) or (f.id if isinstance(f, ast.Name) else "")
        if qn in _EXIT_QNS or qn in _NO_RETURN_QNS:
            return True
        return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
            and f.attr in _NO_RETURN_METHODS
    return False


def conditions(sem, node: ast.AST, scope: ast.AST) -> list | None:
    """The path conditions of ``node`` in ``scope``: (if, branch) for each ``if`` around it and
    each ``if ...: return`` before it in an enclosing block, when the test is on the distributed
    mode (``mode_test``; other tests are not the single-process run and are left out), leaving out
    the tests on the group itself and the ``if`` whose other branch leaves (``else: raise``). None when ``node`` sits in a
    handler, a nested definition, a ``match`` or a conditional expression (not followed)."""
    out = []
    child, p = node, parent(node)
    while p is not None:
        if p is scope:
            _exits_before(sem, p, child, out)
            break
        if isinstance(p, (ast.ExceptHandler, ast.IfExp, ast.BoolOp, ast.Lambda, *FUNC_TYPES, ast.ClassDef)) \
                or p.__class__.__name__ in ("match_case", "Match"):
            return None
        if isinstance(p, ast.If) and child is not p.test:
            branch = "body" if child in p.body else "orelse"
            other = p.orelse if branch == "body" else p.body
            if _counts(sem, p.test) and not _ends(sem, other):
                out.append((p, branch))
        _exits_before(sem, p, child, out)
        child, p = p, parent(p)
    return out


def _exits_before(sem, p, child, out) -> None:
    """``if <test>: return`` before ``child`` in its block of ``p``: (if, "after")."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(p, field, None)
        if isinstance(block, list) and child in block:
            for st in block[: block.index(child)]:
                if isinstance(st, ast.If) and _counts(sem, st.test) and not st.orelse and st.body \
                        and isinstance(st.body[-1], (ast.Return, ast.Continue, ast.Break)):
                    out.append((st, "after"))
            return


def _counts(sem, test) -> bool:
    """A condition that matters here: a test on the distributed mode, not on the group itself."""
    return mode_test(sem, test) and not harmless(sem, test)


def _same(sem, a, b) -> bool:
    (ia, ba), (ib, bb) = a, b
    if ia is ib:
        return ba == bb
    return ba == bb and ast.dump(ia.test) == ast.dump(ib.test)


def covered(sem, init_conds, destroy_conds) -> bool:
    """Every condition of the init holds where the destroy runs."""
    return all(any(_same(sem, c, d) for d in destroy_conds) for c in init_conds)


def lifecycle_of(hub, view, fn, depth: int = 0):
    """(init, destroy) of a project function: "must" / "may" / None each (destroy: "must" only)."""
    if not isinstance(fn, FUNC_TYPES) or depth > 3:
        return None, None
    # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    memo = view.memo.setdefault("lifecycle", {})
    key = (id(fn), depth)
    if key in memo:
        return memo[key]
    memo[key] = (None, None)  # recursion guard
    init = destroy = None
    evs = events(hub, view, fn, depth + 1)
    both = both_branches(evs)
    for ev in evs:
        unconditional = ev.sure == "must" and not [c for c in ev.conds if id(c[0]) not in both]
        if ev.kind == "init":
            if unconditional:
                init = "must"
            elif init is None:
                init = "may"
        elif unconditional:
            destroy = "must"
    for wv, w in wrappers(hub, view, fn):  # a decorator's wrapper runs around the body
        wi, wd = lifecycle_of(hub, wv, w, depth + 1)
        init = "must" if "must" in (init, wi) else init or wi
        destroy = destroy or wd
    memo[key] = (init, destroy)
    return init, destroy


def init_at_call(hub, call_view, call, view, fn, depth: int = 0) -> bool:
    """``call`` of the project function ``fn`` inits the group on every path it takes: an init of
    ``fn`` (made on every path of its own, ``Event.sure``) whose every path condition this call
    decides for its branch (``params.taken_at_call``: a parameter's literal argument, or the default
    a call that omits it leaves: ``def setup(out, distributed=True): if distributed: init(...)``
    called as ``setup(out)``)."""
    from .params import taken_at_call

    if not isinstance(fn, FUNC_TYPES) or depth > 3:
        return False
    evs = events(hub, view, fn, depth + 1)
    both = both_branches(evs)
    return any(ev.kind == "init" and ev.sure == "must" and all(
        id(c[0]) in both or taken_at_call(call_view, call, view, fn, c) for c in ev.conds) for ev in evs)


def events(hub, view, scope, depth: int = 0) -> list[Event]:
    """The init and destroy events of ``scope`` (direct calls and calls of project functions that
    make them), in source order. A destroy under a test on the group itself is no event; an init
    or a destroy whose path is not followed (``conditions`` None) is an init "may" / no event."""
    memo = view.memo.setdefault("lifecycle.events", {})
    key = (id(scope), depth)
    if key in memo:
        return memo[key]
    memo[key] = []
    sem = view.sem
    out = []
    for c in scope_calls(view, scope):
        qn = sem.call_qualname(c) or ""
        kind = sure = None
        where = None
        if qn == INIT:
            kind, sure = "init", "must"
        elif qn == DESTROY:
            kind, sure = "destroy", "must"
        elif not qn.startswith("torch."):
            target = project_target(hub, view, c)
            if target is not None and target[1] is not scope:
                i, d = lifecycle_of(hub, *target, depth=depth)
                if i == "may" and init_at_call(hub, view, c, *target, depth=depth):
                    i = "must"  # the branches this call takes init on every path
                if i is not None:
                    kind, sure, where = "init", i, target
                elif d is not None:
                    kind, sure, where = "destroy", d, target
        if kind is None:
            continue
        conds = conditions(sem, c, scope)
        if conds is None:
            if kind == "destroy":
                continue
            sure, conds = "may", []
        if kind == "destroy" and _under_group_test(sem, c, scope, hub, view):
            continue
        out.append(Event(c, kind, sure, conds, where))
    out.sort(key=lambda e: (e.call.lineno, e.call.col_offset))
    memo[key] = out
    return out


def _under_group_test(sem, node, scope, hub=None, view=None) -> bool:
    """``node`` sits under a test on the group itself: a direct ``dist.is_initialized()`` test
    (``harmless``), or a branch that only a run with the group takes (``if is_dist():`` with a
    project helper that returns ``dist.is_available() and dist.is_initialized()``, its ``else``
    when the test is negated: ``group_value``)."""
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and harmless(sem, p.test):
            return True
        if isinstance(p, ast.BoolOp) and any(harmless(sem, v) for v in p.values):
            return True
        if view is not None and isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            body = child in p.body if isinstance(p, ast.If) else child is p.body
            # the value the test takes without a group: the branch holding ``node`` is not taken
            if group_value(hub, view, p.test, present=False) is (not body):
                return True
        child, p = p, parent(p)
    return False


def both_branches(events_: list[Event]) -> set:
    """The ``if`` nodes with an init in both branches (``if args.dist: init(nccl) else: init(gloo)``)."""
    seen: dict[int, set] = {}
    for e in events_:
        if e.kind == "init":
            for n, b in e.conds:
                seen.setdefault(id(n), set()).add(b)
    return {k for k, v in seen.items() if {"body", "orelse"} <= v}


_IS_INIT, _IS_AVAIL = D + "is_initialized", D + "is_available"
_ENTRY = "entry"


def names_state(hub, view, test: ast.AST, present: bool, branch: bool) -> bool:
    """The ``branch`` (True: the body) of ``test`` is the one taken for the group's state
    (``present``) because the program tested that state: the other state takes the other branch
    (a pure test, the only way an ``else`` names a state), or the body is entered by a test of the
    state itself (``dist.is_initialized() or force``; not by ``dist.is_available()`` alone, which
    holds with a group and without one: torch was built with distributed support)."""
    return group_value(hub, view, test, not present) is (not branch) \
        or (branch and group_value(hub, view, test, present, implied=False) is True)


def group_value(hub, view, test: ast.AST, present: bool, depth: int = 0, implied: bool = True):
    """``test``'s value when the default group exists (``present``) or does not: True / False when
    the group's state alone decides it (``dist.is_initialized()``, ``not``, ``and`` / ``or``, a name
    bound once to such a test, a project function that returns one), else None. ``implied``: also
    what the state implies without testing it (``dist.is_available()`` holds where a group exists)."""
    if test is None or depth > 3:
        return None
    t = test.__class__
    if t is ast.UnaryOp and isinstance(test.op, ast.Not):
        v = group_value(hub, view, test.operand, present, depth, implied)
        return None if v is None else not v
    if t is ast.BoolOp:
        vals = [group_value(hub, view, x, present, depth, implied) for x in test.values]
        stop = isinstance(test.op, ast.Or)  # the value that decides the whole test
        if stop in vals:
            return stop
        return (not stop) if all(v is (not stop) for v in vals) else None
    sem = view.sem
    if t is ast.Call:
        qn = sem.call_qualname(test) or ""
        if qn == _IS_INIT:
            return present
        if qn == _IS_AVAIL:
            return True if present and implied else None
        if qn.startswith("torch.") or hub is None:
            return None
        target = project_target(hub, view, test)
        if target is None or not isinstance(target[1], FUNC_TYPES):
            return None
        tview, fn = target
        rets = [n for n in _own_nodes(fn) if isinstance(n, ast.Return)]
        if len(rets) != 1 or rets[0].value is None:
            return None
        return group_value(hub, tview, rets[0].value, present, depth + 1, implied)
    if t is ast.Name:
        v = sem.single_value(test.id, sem.scope_of(test))
        if v is not None and v is not test:
            return group_value(hub, view, v, present, depth + 1, implied)
    return None


_UNKNOWN = object()
_CMP = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
        ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def absent_truth(hub, view, test: ast.AST):
    """The truth of ``test`` where no default group exists, when that alone decides it: what
    ``group_value`` says, or the value the test compares is one the group's absence fixes
    (``self.rank == 0`` with ``self.rank = dist.get_rank() if self.is_distributed else 0`` and
    ``self.is_distributed = dist.is_initialized()``: ``absent_value``). Only ever used to drop a
    path (a branch or an operand that a run without a group does not reach): a value stored
    earlier, while no group existed, still says so (no group is destroyed in between)."""
    v = group_value(hub, view, test, False)
    if v is not None:
        return v
    got = absent_value(hub, view, test)
    if got is _UNKNOWN:
        return None
    try:
        return bool(got)
    except Exception:  # noqa: BLE001 -- a constant whose truth raises is no answer
        return None


def absent_value(hub, view, e: ast.AST, depth: int = 0):
    """The constant ``e`` holds where no default group exists, or ``_UNKNOWN``: a literal, a
    conditional expression whose test the group's absence decides, a name bound once, a ``self``
    attribute every binding of its class gives the same such value, a comparison of two such
    values."""
    if e is None or depth > 4:
        return _UNKNOWN
    t = e.__class__
    if t is ast.Constant:
        return e.value
    if t is ast.IfExp:
        v = absent_truth(hub, view, e.test) if depth < 4 else None
        return _UNKNOWN if v is None else absent_value(hub, view, e.body if v else e.orelse, depth + 1)
    if t in (ast.BoolOp, ast.Call, ast.UnaryOp):
        v = group_value(hub, view, e, False)
        return _UNKNOWN if v is None else v
    if t is ast.Name:
        v = view.sem.single_value(e.id, view.sem.scope_of(e))
        return _UNKNOWN if v is None or v is e else absent_value(hub, view, v, depth + 1)
    if t is ast.Attribute and e.value.__class__ is ast.Name and e.value.id == "self" \
            and hasattr(hub, "self_attr_bindings"):
        vals = hub.self_attr_bindings(view, e)
        if not vals or len(vals) > 4 or any(isinstance(v, ast.stmt) for v in vals):
            return _UNKNOWN
        got = [absent_value(hub, view, v, depth + 1) for v in vals]
        return got[0] if all(g is not _UNKNOWN and g == got[0] for g in got) else _UNKNOWN
    if t is ast.Compare and len(e.ops) == 1 and e.ops[0].__class__ in _CMP:
        a = absent_value(hub, view, e.left, depth + 1)
        b = absent_value(hub, view, e.comparators[0], depth + 1) if a is not _UNKNOWN else _UNKNOWN
        if a is _UNKNOWN or b is _UNKNOWN:
            return _UNKNOWN
        try:
            return _CMP[e.ops[0].__class__](a, b)
        except Exception:  # noqa: BLE001 -- ``None < 0``: no answer
            return _UNKNOWN
    return _UNKNOWN


def guard_test(sem, test: ast.AST) -> bool:
    """A test on the distributed mode, either way it is read (``mode_test``, or
    ``unconditional.flag_mode_test``: a mode flag of any object)."""
    from .unconditional import flag_mode_test

    return mode_test(sem, test) or flag_mode_test(test)


def _own_nodes(fn):
    """The nodes of ``fn``'s body, not of the functions, lambdas and classes defined in it."""
    work = list(fn.body)
    while work:
        n = work.pop()
        yield n
        for c in ast.iter_child_nodes(n):
            if not isinstance(c, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
                work.append(c)


def group_state_path(hub, view, node: ast.AST, scope: ast.AST, present: bool, at_entry: bool = False):
    """The ``if`` (or conditional expression) of ``scope`` whose branch for the group's state
    (``present``: it exists; else: it does not) leads to ``node``, or None when no such path is
    known (the last one on the way). ``at_entry``: the state holds when ``scope`` starts (answered
    as ``"entry"`` when no ``if`` says so again).

    On the way from that branch to ``node`` nothing may change the state (an init when "absent",
    a destroy when "present", directly or through a project function, even a conditional one),
    leave on that state's path (``if not dist.is_initialized(): return``; for "absent" also a test
on the distributed mode that leaves on one side, ``if world_size == 1: return``), or contradict it (an
    ``if`` / ``and`` / ``or`` on the group whose other branch holds ``node``); ``node`` must not sit
    in a ``try`` with handlers (the error may be the program's business), and for "absent" not
    under a test on the distributed mode (``if world_size > 1:``, which a run without a group fails
    when it is set up consistently). For "absent", an init anywhere before ``node`` in ``scope``
    also ends the question (the path is then the program's own business)."""
    sem = view.sem
    chain = []
    child, p = node, parent(node)
    while p is not None:
        chain.append((p, child))
        if p is scope:
            break
        if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return None
        child, p = p, parent(p)
    else:
        return None
    chain.reverse()
    kill_qns = frozenset({DESTROY}) if present else LIBRARY_INITS | {INIT}

    def kill_call(c) -> bool:
        """``c`` changes the state: directly, or through a project function (``lifecycle_of``)."""
        qn = sem.call_qualname(c) or ""
        if qn in kill_qns:
            return True
        if qn.startswith("torch.") or hub is None:
            return False
        # (a method of an instance of a project class too: ``trainer = Recipe(cfg)`` then
        # ``trainer.setup()``, whose body creates the group)
        target = project_target(hub, view, c, instances=True)
        if target is None or target[1] is scope:
            return False
        i, d = lifecycle_of(hub, *target)
        if not present and i is None:
            # a helper that builds a device mesh (or an Accelerator...): the library creates the
            # group when none exists
            return bool(library_init_sites(hub, *target))
        return (d if present else i) is not None

    at = (node.lineno, node.col_offset)
    if not present:
        for c in sem.scope_calls(scope) or ():
            if (c.lineno, c.col_offset) >= at:
                break
            if kill_call(c):
                return None  # initialised before: what follows is the program's own business
            qn = sem.call_qualname(c) or ""
            if _straight(c, scope) and (qn in GROUP_USES or _needs_group(hub, view, c, qn)):
                return None  # the function uses the group on every call before: it assumes one

    def kills(st) -> bool:
        return any(n.__class__ is ast.Call and kill_call(n) for n in ast.walk(st))

    est = _ENTRY if at_entry else None
    for p, child in chain:
        cls = p.__class__
        if cls in (ast.If, ast.IfExp, ast.While) and child is not p.test:
            v = group_value(hub, view, p.test, present)
            in_body = (child in p.body) if cls is not ast.IfExp else (child is p.body)
            if v is None and not present and absent_truth(hub, view, p.test) is (not in_body):
                return None  # ``if self.rank == 0:`` with ``self.rank = ... if <group> else 0``: not taken
            if v is not None:
                if v != in_body:
                    return None
                if names_state(hub, view, p.test, present, in_body):
                    est = p  # the branch the test names for this state
            elif not present and cls is not ast.While and guard_test(sem, p.test):
                return None
        elif cls is ast.BoolOp:
            stop = isinstance(p.op, ast.Or)
            for x in p.values[: p.values.index(child)]:
                if group_value(hub, view, x, present) is stop \
                        or (not present and absent_truth(hub, view, x) is stop):
                    return None  # short-circuits before ``node`` in this state
        elif cls in _TRY_TYPES and child in p.body and p.handlers:
            return None
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if block.__class__ is list and child in block:
                for st in block[: block.index(child)]:
                    est = _step(hub, view, st, est, present, kills)
                break
    return est


# the calls that need the default group (``ValueError: Default process group has not been initialized``)
GROUP_USES = frozenset(D + n for n in ("get_rank", "get_world_size", "new_group", "new_subgroups", *ALL_COLLECTIVES))


def _needs_group(hub, view, c, qn) -> bool:
    """``c`` calls a project function whose unconditional path uses the group."""
    if qn.startswith("torch.") or not hasattr(hub, "requires_pg_of"):
        return False
    target = project_target(hub, view, c)
    return target is not None and hub.requires_pg_of(*target) is not None


def straight(node, scope) -> bool:
    """``node`` runs on every call of ``scope`` that gets that far (``_straight``)."""
    return _straight(node, scope)


def _straight(node, scope) -> bool:
    """``node`` runs on every call of ``scope`` that gets that far: no ``if``, loop, ``try``,
    boolean operator or conditional expression around it, unless ``node`` is in the part of one
    that always runs (the test of an ``if`` / ``while`` / conditional expression, the first operand
    of ``and`` / ``or``, the iterable of a ``for``: ``if dist.get_rank() == 0:``)."""
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, (ast.If, ast.IfExp, ast.BoolOp, ast.While, ast.For, ast.AsyncFor, *_TRY_TYPES,
                          ast.ExceptHandler, ast.With, ast.AsyncWith, ast.comprehension)):
            if isinstance(p, (ast.With, ast.AsyncWith)):
                return True
            if not _always_run(p, child):
                return False
        child, p = p, parent(p)
    return p is scope


def _always_run(p, child) -> bool:
    """``child`` is the part of ``p`` that runs whenever ``p`` does."""
    if isinstance(p, (ast.If, ast.IfExp, ast.While)):
        return child is p.test
    if isinstance(p, ast.BoolOp):
        return child is p.values[0]
    return isinstance(p, (ast.For, ast.AsyncFor)) and child is p.iter


try:  # Python 3.11+
    _TRY_TYPES = (ast.Try, ast.TryStar)
except AttributeError:  # pragma: no cover
    _TRY_TYPES = (ast.Try,)


def scope_calls_of(view, scope):
    return view.sem.scope_calls(scope) or []


def _step(hub, view, st, est, present, kills):
    """The state after the statement ``st`` on the path that keeps it (see ``group_state_path``)."""
    sem = view.sem
    if st.__class__ is ast.If:
        v = group_value(hub, view, st.test, present)
        if v is not None:
            branch = st.body if v else st.orelse
            if _ends(sem, branch) or kills(ast.Module(body=branch, type_ignores=[])):
                return None
            if names_state(hub, view, st.test, present, v):
                return st  # the branch the test names for this state
            return est
        elif not present and est is not None and mode_test(sem, st.test) \
                and (_ends(sem, st.body) or (st.orelse and _ends(sem, st.orelse))):
            # ``if world_size == 1: return``: a test on the distributed mode that leaves on one
            # side; a run without a group, set up consistently, takes the single-process side
            # (as for a use under such a test, see ``group_state_path``)
            return None
    elif st.__class__ is ast.Assert:
        if group_value(hub, view, st.test, present) is False:
            return None
    if est is not None and kills(st):
        return None
    if st.__class__ in (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr) and not kills(st):
        # ``rank = dist.get_rank() if dist.is_initialized() else 0``: the conditional expression
        # of a pure test has a branch for this state, and the statement goes on either way
        for n in ast.walk(st):
            if n.__class__ is ast.IfExp and _pure(hub, view, n.test):
                return n
    return est


def _pure(hub, view, test) -> bool:
    """The group's state alone decides ``test`` (``dist.is_initialized()``, ``not`` of it)."""
    a, b = group_value(hub, view, test, True), group_value(hub, view, test, False)
    return a is not None and b is not None and a != b


def init_when_present(hub, view, fn, depth: int = 0):
    """The ``init_process_group`` call that ``fn`` (a project function) makes even when the default
    group already exists on entry, directly or through the project functions it calls
    (``group_state_path`` with the state "present" at entry: no ``dist.is_initialized()`` test and
    no destroy on the way): (view, call), or None."""
    if not isinstance(fn, FUNC_TYPES) or depth > 3:
        return None
    memo = view.memo.setdefault("lifecycle.init_when_present", {})
    key = (id(fn), depth)
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    if not init_sites(hub, view, fn):
        return None
    sem = view.sem
    got = None
    for c in sem.scope_calls(fn) or ():
        qn = sem.call_qualname(c) or ""
        if qn == INIT:
            hit = (view, c)
        elif qn.startswith("torch.") or depth >= 3:
            continue
        else:
            target = project_target(hub, view, c)
            if target is None or target[1] is fn:
                continue
            hit = init_when_present(hub, *target, depth=depth + 1)
            if hit is None:
                continue
        if group_state_path(hub, view, c, fn, present=True, at_entry=True) is not None:
            got = hit
            break
    memo[key] = got
    return got


def init_sites(hub, view, fn, depth: int = 0) -> list:
    """The ``init_process_group`` calls (view, call) that ``fn`` makes, directly or through the
    project functions it calls (any path, up to 3 calls deep)."""
    return sites(hub, view, fn, INIT, depth)


def destroys_anywhere(hub, view, fn, depth: int = 0, at_exit: bool = False) -> bool:
    """``fn`` calls ``destroy_process_group`` on some path, directly or through project functions
    (up to 3 calls deep); with ``at_exit``, also through those it registers as exit handlers
    (``atexit.register(close_group)``: the group is gone when the process ends, not before)."""
    return bool(sites(hub, view, fn, DESTROY, depth, instances=True, at_exit=at_exit))


def class_destroys(hub, view, cls: ast.ClassDef) -> bool:
    """A method of ``cls`` destroys the default group on some path, directly or through project
    functions (``destroys_anywhere``): the class owns the group's lifecycle (made in ``__init__``,
    ended in ``shutdown()``), so its instances are meant to run one after another."""
    return any(isinstance(st, FUNC_TYPES) and destroys_anywhere(hub, view, st) for st in cls.body)


def init_sites_at(hub, call_view, call, view, fn) -> list:
    """``init_sites`` of ``fn`` for this ``call`` of it: the calls of ``fn`` in a branch that the
    call does not take (``flow.params.dead_at_call``: ``elif algo == "ring":`` when the call passes
    ``"zigzag"``), and those of a module name that a mock patch around ``call`` replaces
    (``testing.patched_globals``: ``with mock.patch("pkg.core.init_group"): predict()``), are left
    out, with what they reach."""
    from .params import dead_at_call
    from .testing import patched_globals

    if not isinstance(fn, FUNC_TYPES):
        return init_sites(hub, view, fn)
    sem = view.sem
    out = []
    mocked = {n for v, n in patched_globals(hub, call_view, call) if v is view}
    for c in sem.scope_calls(fn) or ():
        if dead_at_call(call_view, call, view, fn, c):
            continue
        if isinstance(c.func, ast.Name) and c.func.id in mocked and c.func.id not in sem.assignments(fn) \
                and c.func.id not in param_names(fn):
            continue  # a module name a test's mock patch replaces around ``call``: the mock runs
        qn = sem.call_qualname(c) or ""
        if qn == INIT:
            out.append((view, c))
        elif not qn.startswith("torch."):
            target = project_target(hub, view, c)
            if target is not None and target[1] is not fn:
                out.extend(s for s in sites(hub, *target, INIT, 1) if s not in out)
    for wv, w in wrappers(hub, view, fn):  # a decorator's wrapper runs around the body
        out.extend(s for s in sites(hub, wv, w, INIT, 1) if s not in out)
    return out


def library_init_sites(hub, view, fn, depth: int = 0) -> list:
    """The calls (view, call) of a library that creates the default group when none exists
    (``LIBRARY_INITS``: ``init_device_mesh``, an ``Accelerator``, DeepSpeed's init) that ``fn``
    makes, directly or through the project functions it calls (any path, up to 3 calls deep)."""
    return sites(hub, view, fn, LIBRARY_INITS, depth)
