from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import get_arg
from ._common import helper_returns, D, const_int, const_str, fixed_world_size, is_simple_ref

# op -> (output list position, keyword), (input position, keyword), (group position)
_OPS = {
    "all_gather_object": ((0, "object_list"), (1, "obj"), 2, False),
    "gather_object": ((1, "object_gather_list"), (0, "obj"), 3, False),
    "all_gather": ((0, "tensor_list"), (1, "tensor"), 2, True),
    "gather": ((1, "gather_list"), (0, "tensor"), 3, True),
    # the source's input list: one tensor per rank, like an output list
    "scatter": ((1, "scatter_list"), (0, "tensor"), 3, True),
}
_OP_QNS = tuple((op, D + op, how) for op, how in _OPS.items())  # (spelled once, asked every check)
_INPUT_LISTS = frozenset({"scatter"})
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "__setitem__", "__delitem__"})


class GatherListSize(Rule):
    """
    ## What it does
    Checks the output list of `all_gather_object`, `all_gather`, `gather_object` and `gather`
    (on the destination), and the input list of `scatter` (on the source), for a length that is
    provably not the world size: a literal list, `[x] * k`, `range(k)`, or a comprehension over a
    fixed-length literal, with a constant `k`.

    A length that is a form in the world size is followed through the program model
    (`flow.counts`: names, tuple unpacking, `self` attributes set in another method, parameters
    through every call of the function, helpers' returns, in this file or another): it is flagged
    when it is provably not the world size (`[None] * (self.world_size + 1)`,
    `range(world_size - 1)`, `2 * get_world_size()`) and never when it may be (`world_size`, an
    unknown variable or parameter, an argparse default or a configuration entry, which the user can
    change). Not flagged either: a call on a subgroup of unknown size (`group=`: the list then needs the
    group's size; `new_group([0, 1])` has a known one), nor an empty list on the non-destination
    ranks (`out if rank == dst else []`), or a constant that equals the world size the file fixes itself
    (`mp.spawn(..., nprocs=2)`, `init_process_group(..., world_size=2)`).

    It also checks two shapes reported again and again:

    - `gather(t, gather_list=out, dst=0)` / `gather_object(obj, out, dst=0)` /
      `scatter(t, scatter_list=chunks, src=0)` where the list is a non-empty list on **every** rank
      (built unconditionally, not behind a rank test or an if-expression): only the destination
      (source) rank may pass one. Non-empty means a non-empty literal, `[x] * world_size`, a
      comprehension over `range(world_size)`, or the pieces of a tensor (`list(t.chunk(n))`,
      `torch.split(t, k)`, `t.tensor_split(n)`: never empty); a `split` whose receiver is not
      provably a tensor (a string's) is left alone;
    - an output list sized by `torch.cuda.device_count()` or `LOCAL_WORLD_SIZE`, the GPUs of
      **one node**, for a collective over the whole world (also through a helper of this file or
      of another project file whose every return is one: `[None] * num_gpus()`). Not flagged on a subgroup (`group=`),
      nor when the file makes the world one node itself (`mp.spawn`, a `world_size` computed from
      `device_count()`).

    ## Why is this bad?
    The output list needs exactly one slot per rank. Current torch fills the first `world_size`
    slots of a longer list and silently leaves the rest as `None` (or stale tensors); a shorter list
    raises:

    ```
    IndexError: list assignment index out of range
    ```

    and older torch versions failed with NCCL "invalid usage" inside `all_gather_object`. A list
    sized to the number of *objects* rather than the number of *ranks* works on one machine and
    breaks as soon as the world size changes; a list sized by the node's GPU count breaks as soon as
    the job spans two nodes.

    `gather`, `gather_object` and `scatter` check the list against the rank, and every other rank
    raises:

    ```
    ValueError: Argument ``gather_list`` must NOT be specified on non-destination ranks.
    ValueError: Argument ``scatter_list`` must NOT be specified on non-source ranks.
    ```

    A `scatter` input list with the wrong number of tensors fails on the source inside the backend:

    ```
    RuntimeError: ProcessGroupGloo::scatter: Incorrect input list size 2. Input list size should be 4,
    same as size of the process group.
    ```

    ## Example
    ```python
    gather_objects = ["foo", 12, {1: 2}]
    output = [None for _ in gather_objects]
    dist.all_gather_object(output, gather_objects[dist.get_rank()])

    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.gather(t, gather_list=out, dst=0)  # ValueError on every rank but 0

    chunks = list(batch.chunk(dist.get_world_size()))
    dist.scatter(mine, scatter_list=chunks, src=0)  # ValueError on every rank but 0
    ```

    ## Use instead
    ```python
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, gather_objects[dist.get_rank()])

    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.gather(t, gather_list=out if dist.get_rank() == 0 else None, dst=0)

    chunks = list(batch.chunk(dist.get_world_size())) if dist.get_rank() == 0 else None
    dist.scatter(mine, scatter_list=chunks, src=0)
    ```

    ## Fix safety
    The fix replaces the list expression with `[None for _ in range(dist.get_world_size())]`
    (`[torch.empty_like(t) for _ in range(...)]` for tensor lists), using the file's own alias for
    `torch.distributed` and passing the call's `group=` on. It is **safe**: a list of the right
    length is what every rank needs, and the slots are overwritten by the collective. A `scatter`
    input list holds the data, so its length gets no fix.

    For a list passed on every rank, the fix replaces the argument with
    `<list> if dist.get_rank() == <dst> else None` (**safe**: the destination keeps its list, the
    others pass what torch requires). It is offered only without `group=` / `group_dst=`, where
    `dst` is a global rank.
    """

    code = "DDP101"
    name = "gather-list-size"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = ("gather", "scatter")
    requires_text_all = (("distributed",),)  # every qualified name it resolves is torch.distributed.*

    def finish(self, ctx) -> None:
        fixed_world = fixed_world_size(ctx)
        seen: set[int] = set()
        by_qn = ctx.sem.calls_by_qualname
        for op, qn, (out_spec, in_spec, group_pos, tensors) in _OP_QNS:
            for call in by_qn.get(qn, ()):
                out = get_arg(call, *out_spec)
                if out is None:
                    continue
                scope = ctx.sem.scope_of(call)
                group = get_arg(call, group_pos, "group")
                size = fixed_world
                if _on_subgroup(group):
                    # the list needs the subgroup's size: known only for ``new_group([literal ranks])``
                    size = _group_size(ctx, group, scope)
                    if size is None:
                        continue
                target, n = _fixed_length(ctx, out, scope, call)
                if target is None:
                    target, count = _counted_length(ctx, out, scope, call)
                    if target is not None and id(target) not in seen:
                        _report_size(ctx, seen, op, call, out, target, in_spec, group_pos, tensors,
                                     f"{_what(op)} of `{op}` has {count.describe()} slots; it needs exactly "
                                     "one slot per rank (the world size): " + _CONSEQUENCE[op in _INPUT_LISTS])
                    continue
                if n is None or n == size or id(target) in seen:
                    continue
                _report_size(ctx, seen, op, call, out, target, in_spec, group_pos, tensors,
                             f"{_what(op)} of `{op}` has a fixed length of {n}; it needs one slot per rank "
                             "(the world size): " + _CONSEQUENCE[op in _INPUT_LISTS])
        _check_non_root_lists(ctx, seen)
        _check_per_node_size(ctx, seen)
        _check_through_helpers(ctx, seen, fixed_world)


# the output list a helper's parameter may reach (``flow.sinks``): the collectives whose every rank
# passes a list of one slot per rank (the rooted ones pass it on the destination only)
_SINK_OPS = {"all_gather_object": (0, "object_list"), "all_gather": (0, "tensor_list")}
_SINK_QNS = tuple(D + op for op in _SINK_OPS)


def _check_through_helpers(ctx, seen: set, fixed_world) -> None:
    """``collect(buf)`` where the helper (this file or another module of the project) passes its
    parameter as it is to ``all_gather_object`` / ``all_gather`` as the output list, and ``buf``'s
    length is provably not the world size."""
    from ..flow.modern import hub
    from ..flow.sinks import helper_sink_args

    an, _view = hub(ctx)
    for call, name, sink, arg, scope in helper_sink_args(ctx, an, _SINK_OPS, _SINK_QNS, "ddp101"):
        if sink.method is not None:
            continue
        target, n = _fixed_length(ctx, arg, scope, call)
        if target is not None and n is not None:
            if n == fixed_world:
                continue
            what = f"a fixed length of {n}"
        else:
            target, count = _counted_length(ctx, arg, scope, call)
            if target is not None:
                what = f"{count.describe()} slots"
            else:
                target = _list_expr(ctx, arg, scope, call)
                node = _counted_per_node(ctx, target, None, call) if target is not None else None
                if node is None or _world_is_node(ctx):
                    continue
                what = "one slot per GPU of one node, too few on more than one node"
        if id(target) in seen:
            continue
        seen.add(id(target))
        fix = None
        if sink.effect.op == "all_gather_object":
            gws, imp = ctx.ref(D + "get_world_size")
            new = f"[None for _ in range({gws}())]"
            fix = ctx.fix(Applicability.SAFE, f"Size the list to the world size: `{new}`", [ctx.replace(target, new), *imp])
        via = " -> ".join((name, *sink.effect.via)) if sink.effect.via else name
        ctx.report(target, f"output list of `{sink.effect.op}` (through `{via}`, parameter `{sink.param}`) has {what}; "
                   "it needs exactly one slot per rank (the world size): " + _CONSEQUENCE[False],
                   related=[(call, f"passed to `{name}` here")] if target is not arg else [], fix=fix)


# op -> (list position, keyword), (root position, keyword), group-root keyword, torch's message
_ROOTED = {
    "gather": ((1, "gather_list"), (2, "dst"), "group_dst",
               "Argument ``gather_list`` must NOT be specified on non-destination ranks."),
    "scatter": ((1, "scatter_list"), (2, "src"), "group_src",
                "Argument ``scatter_list`` must NOT be specified on non-source ranks."),
    # gather_object validates its output list like gather does
    "gather_object": ((1, "object_gather_list"), (2, "dst"), "group_dst",
                      "Argument ``gather_list`` must NOT be specified on non-destination ranks."),
}
# methods (and torch functions) that split a tensor into at least one piece, whatever its size
_SPLITS = frozenset({"chunk", "split", "tensor_split"})


def _check_non_root_lists(ctx, seen: set) -> None:
    """``gather(t, gather_list=out, dst=0)`` with ``out`` a non-empty list on every rank: the
    ranks other than ``dst`` raise ValueError."""
    sem = ctx.sem
    for op, (list_spec, root_spec, group_root_kw, error) in _ROOTED.items():
        for call in ctx.calls_to(D + op):
            lst = get_arg(call, *list_spec)
            if lst is None or _rank_dependent(ctx, call):
                continue
            scope = sem.scope_of(call)
            target = lst
            if isinstance(lst, ast.Name):
                binds = sem.assignments(scope).get(lst.id, [])
                val = sem.single_value(lst.id, scope)
                if val is None or len(binds) != 1 or _rank_dependent(ctx, binds[0]):
                    continue
                if _mutated_before(ctx, lst.id, scope, call):
                    continue
                target = val
            if not _nonempty_list(ctx, target, scope) or id(target) in seen:
                continue
            seen.add(id(target))
            root = get_arg(call, *root_spec)
            group_root = get_arg(call, None, group_root_kw)
            role = "destination" if op == "gather" else "source"
            fix = None
            if group_root is None and get_arg(call, 3, "group") is None and (root is None or isinstance(root, ast.Constant) or is_simple_ref(root)):
                get_rank, imp = ctx.ref(D + "get_rank")
                root_text = ctx.text(root) if root is not None else "0"
                new = f"{ctx.text(lst)} if {get_rank}() == {root_text} else None"
                fix = ctx.fix(Applicability.SAFE, f"Pass the list on the {role} rank only: `{new}`",
                              [ctx.replace(lst, new), *imp])
            ctx.report(
                lst,
                f"`{list_spec[1]}` is passed on every rank, but only the {role} rank may pass one: "
                f"the others raise ValueError ('{error}')",
                related=[(call, f"`{op}` called here on every rank")] if target is not lst else [],
                fix=fix,
            )


def _rank_dependent(ctx, node) -> bool:
    """Inside an ``if``/``while``/if-expression whose test mentions a rank (or a src/dst): the
    author already separates the root from the others, which this check cannot follow."""
    sem = ctx.sem
    stop = sem.scope_of(node)
    child = node
    for a in sem.ancestors(node):
        if a is stop:
            break
        test = getattr(a, "test", None)
        if isinstance(a, (ast.If, ast.While, ast.IfExp)) and test is not None and child is not test:
            return True  # any condition: the branch may be the root's
        if isinstance(a, (ast.Try, ast.ExceptHandler, ast.match_case)):
            return True
        child = a
    return False


def _nonempty_list(ctx, expr, scope) -> bool:
    """A list that has at least one element on every rank: a non-empty literal, `[x] * n`, a
    comprehension over `range(<world size>)` / a non-empty literal / the pieces of a tensor, or
    `list(<the pieces of a tensor>)` (`t.chunk(n)`, `torch.split(t, k)`: never empty)."""
    n = _literal_len(ctx, expr, scope)
    if n is not None:
        return n > 0
    if isinstance(expr, ast.ListComp) and len(expr.generators) == 1 and not expr.generators[0].ifs:
        it = expr.generators[0].iter
        return _is_range_of_world(ctx, it, scope) or _pieces(ctx, it, scope)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "list" \
            and "list" not in ctx.sem.aliases and len(expr.args) == 1 and not expr.keywords:
        return _pieces(ctx, expr.args[0], scope)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        for seq, k in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(seq, ast.List) and seq.elts and _is_world_size(ctx, k, scope):
                return True
    return False


def _pieces(ctx, e, scope, depth: int = 0) -> bool:
    """``t.chunk(n)`` / ``t.split(k)`` / ``t.tensor_split(n)`` / ``torch.chunk(t, n)`` (or a name bound
    once to one): a tuple of at least one tensor, whatever ``t`` holds."""
    if depth > 2:
        return False
    if isinstance(e, ast.Name):
        if len(ctx.sem.assignments(scope).get(e.id, [])) != 1:
            return False
        return _pieces(ctx, ctx.sem.single_value(e.id, scope), scope, depth + 1)
    if not isinstance(e, ast.Call) or not isinstance(e.func, ast.Attribute) or e.func.attr not in _SPLITS:
        return False
    if any(isinstance(a, ast.Starred) for a in e.args) or any(k.arg is None for k in e.keywords):
        return False
    qn = ctx.qn(e)
    if qn is not None:  # ``torch.chunk(t, n)``, never ``re.split`` / ``str.split``
        return qn in {f"torch.{m}" for m in _SPLITS} and len(e.args) >= 2
    if len(e.args) < 1:
        return False
    # a method: ``chunk`` / ``tensor_split`` are tensor methods only; ``split`` is a string's too,
    # so it needs a receiver that is provably a tensor
    return e.func.attr != "split" or _tensor_expr(ctx, e.func.value, scope)


def _tensor_expr(ctx, e, scope, depth: int = 0) -> bool:
    """Built by a ``torch.*`` factory (or a tensor method on one): ``torch.arange(n)``, ``x.cuda()``."""
    if depth > 4 or e is None:
        return False
    if isinstance(e, ast.Name):
        return _tensor_expr(ctx, ctx.sem.single_value(e.id, scope), scope, depth + 1)
    if isinstance(e, ast.Call):
        qn = ctx.qn(e) or ""
        if qn.startswith("torch.") and not qn.startswith(("torch.distributed", "torch.nn", "torch.utils",
                                                           "torch.cuda", "torch.multiprocessing")):
            return qn not in ("torch.load", "torch.save", "torch.device", "torch.Size")
        if qn == "" and isinstance(e.func, ast.Attribute) and e.func.attr in _TENSOR_METHODS:
            return _tensor_expr(ctx, e.func.value, scope, depth + 1)
    return False


_TENSOR_METHODS = frozenset({"cuda", "to", "float", "half", "double", "contiguous", "clone", "detach", "view",
                             "reshape", "flatten", "cpu", "long", "int", "bfloat16", "squeeze", "unsqueeze"})


def _is_range_of_world(ctx, it, scope) -> bool:
    return (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and len(it.args) == 1 and _is_world_size(ctx, it.args[0], scope))


def _is_world_size(ctx, e, scope, depth: int = 0) -> bool:
    if depth > 3 or e is None:
        return False
    if isinstance(e, ast.Call) and ctx.qn(e) == D + "get_world_size":
        return True
    if isinstance(e, ast.Name):
        if e.id in ("world_size", "WORLD_SIZE", "num_replicas"):
            return True
        return _is_world_size(ctx, ctx.sem.single_value(e.id, scope), scope, depth + 1)
    if isinstance(e, ast.Attribute) and e.attr in ("world_size", "num_replicas"):
        return True
    return False


def _per_node(ctx, e, scope, depth: int = 0) -> str | None:
    """How ``e`` counts the GPUs of one node: `torch.cuda.device_count()` or LOCAL_WORLD_SIZE."""
    if depth > 3 or e is None:
        return None
    if isinstance(e, ast.Call):
        qn = ctx.qn(e)
        if qn == "torch.cuda.device_count":
            return "torch.cuda.device_count()"
        if isinstance(e.func, ast.Name) and e.func.id == "int" and len(e.args) == 1:
            return _per_node(ctx, e.args[0], scope, depth + 1)
        if qn in ("os.getenv", "os.environ.get") and e.args and const_str(e.args[0]) == "LOCAL_WORLD_SIZE":
            return "LOCAL_WORLD_SIZE"
        if qn is None or not qn.startswith(("torch.", "os.")):
            # a helper of this file or of the project whose every return counts the node's GPUs
            got = helper_returns(ctx, e, lambda h, r, fn, d: _per_node(h, r, fn, depth + 1 + d), depth)
            if got is not None:
                return f"`{ctx.text(e)}` ({got})"
        return None
    if isinstance(e, ast.Subscript) and ctx.qn(e.value) == "os.environ" and const_str(e.slice) == "LOCAL_WORLD_SIZE":
        return "LOCAL_WORLD_SIZE"
    if isinstance(e, ast.Name) and "world" not in e.id.lower():
        return _per_node(ctx, ctx.sem.single_value(e.id, scope), scope, depth + 1)
    return None


def _counted_per_node(ctx, target, size_expr, call) -> str | None:
    """``target``'s length is exactly the GPUs of one node, its integers followed through the
    program model (a parameter every caller passes ``torch.cuda.device_count()``, a ``self``
    attribute): the description for the message, else None."""
    from ..flow.counts import length_of
    from ..flow.modern import hub

    an, view = hub(ctx)
    c = length_of(an, view, target, call)
    if c is None or c.unit != "N" or (c.a, c.b) != (1, 0):
        return None
    return f"`{ctx.text(size_expr if size_expr is not None else target)}`"


def _world_is_node(ctx) -> bool:
    """The file itself makes the world one node's GPUs (``mp.spawn(..., nprocs=n)``, a
    ``world_size`` computed from ``device_count()``): then a per-node size is the world size."""
    sem = ctx.sem
    if sem.calls_to("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes",
                    "torch.multiprocessing.Process", "multiprocessing.Process"):
        return True
    for fn in (sem.tree, *(n for lst in sem.functions.values() for n in lst)):
        for name in sem.assignments(fn):
            if "world" in name.lower() or "nproc" in name.lower():
                for b in sem.assignments(fn)[name]:
                    v = getattr(b, "value", None)
                    if v is not None and any(isinstance(x, ast.Call) and ctx.qn(x) == "torch.cuda.device_count"
                                             for x in ast.walk(v)):
                        return True
    return False


def _check_per_node_size(ctx, seen: set) -> None:
    """An output list sized by the GPUs of one node (`torch.cuda.device_count()`,
    `LOCAL_WORLD_SIZE`) for a collective over the whole world."""
    sem = ctx.sem
    world_is_node = None
    by_qn = sem.calls_by_qualname
    for op, qn, (out_spec, in_spec, group_pos, tensors) in _OP_QNS:
        for call in by_qn.get(qn, ()):
            out = get_arg(call, *out_spec)
            if out is None or _on_subgroup(get_arg(call, group_pos, "group")):
                continue
            scope = sem.scope_of(call)
            target = out
            if isinstance(out, ast.Name):
                val = sem.single_value(out.id, scope)
                if val is None or _mutated_before(ctx, out.id, scope, call):
                    continue
                target = val
            if isinstance(target, ast.IfExp):
                continue
            size_expr = None
            if isinstance(target, ast.ListComp) and len(target.generators) == 1 and not target.generators[0].ifs:
                it = target.generators[0].iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1:
                    size_expr = it.args[0]
            elif isinstance(target, ast.BinOp) and isinstance(target.op, ast.Mult):
                size_expr = target.right if isinstance(target.left, ast.List) else target.left
            what = _per_node(ctx, size_expr, scope)
            if what is None:
                what = _counted_per_node(ctx, target, size_expr, call)
            if what is None or id(target) in seen:
                continue
            if world_is_node is None:
                world_is_node = _world_is_node(ctx)
            if world_is_node:
                return
            _report_size(ctx, seen, op, call, out, target, in_spec, group_pos, tensors,
                         f"{_what(op)} of `{op}` is sized by {what}, the GPUs of one node, but it needs one slot "
                         "per rank of the world: on more than one node the list is too short")


_CONSEQUENCE = {
    False: "longer lists keep trailing `None`s, shorter ones raise IndexError",
    True: "the source raises 'Incorrect input list size ... should be ... same as size of the process group'",
}


def _what(op: str) -> str:
    return "input list" if op in _INPUT_LISTS else "output list"


def _report_size(ctx, seen: set, op, call, out, target, in_spec, group_pos, tensors, message: str) -> None:
    """Report a list whose length is not the world size (once per list expression)."""
    seen.add(id(target))
    fix = None
    if op not in _INPUT_LISTS:  # an input list's contents are the data: no list of empties replaces it
        # a literal passed to gather/gather_object on every rank: the non-destination ranks must pass
        # None as well, or the resized list still raises there (one fix for both)
        root = None
        if op in _ROOTED and target is out and not _rank_dependent(ctx, call):
            spec = _ROOTED[op]
            r = get_arg(call, *spec[1])
            if get_arg(call, None, spec[2]) is not None or not (
                    r is None or isinstance(r, ast.Constant) or is_simple_ref(r)):
                seen.discard(id(target))  # left to the every-rank check
                return
            root = ctx.text(r) if r is not None else "0"
        fix = _make_fix(ctx, call, target, get_arg(call, *in_spec), get_arg(call, group_pos, "group"), tensors,
                        root=root)
    ctx.report(target, message, related=[(call, f"passed to `{op}` here")] if target is not out else [], fix=fix)


def _on_subgroup(group) -> bool:
    if group is None or (isinstance(group, ast.Constant) and group.value is None):
        return False
    return not (isinstance(group, ast.Attribute) and group.attr == "WORLD")


def _group_size(ctx, group, scope) -> int | None:
    if isinstance(group, ast.Name):
        group = ctx.sem.single_value(group.id, scope)
    if isinstance(group, ast.Call) and ctx.qn(group) == D + "new_group":
        ranks = get_arg(group, 0, "ranks")
        if isinstance(ranks, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in ranks.elts):
            return len(ranks.elts)
    return None


def _fixed_length(ctx, expr, scope, call, depth: int = 0):
    """(node to replace, constant length) or (None, None) when the length is not provable."""
    if depth > 3:
        return None, None
    if isinstance(expr, ast.Name):
        val = ctx.sem.single_value(expr.id, scope)
        if val is None or _mutated(ctx, expr.id, scope, call):
            return None, None
        return _fixed_length(ctx, val, scope, call, depth + 1)
    if isinstance(expr, ast.IfExp):  # `out if rank == dst else None` on gather_object
        for branch in (expr.body, expr.orelse):
            # ``None`` / ``[]``: the idiom for "not the destination rank" on gather
            if not (isinstance(branch, ast.Constant) and branch.value is None) and not (
                    isinstance(branch, (ast.List, ast.Tuple)) and not branch.elts):
                t, n = _fixed_length(ctx, branch, scope, call, depth + 1)
                if t is not None:
                    return t, n
        return None, None
    n = _literal_len(ctx, expr, scope, depth)
    if n is None:
        return None, None
    return expr, n


def _list_expr(ctx, expr, scope, call):
    """The list expression ``expr`` stands for at ``call``: itself, or the one value of a local name
    that nothing changes before the call; None otherwise."""
    if isinstance(expr, ast.Name):
        val = ctx.sem.single_value(expr.id, scope)
        if val is None or _mutated(ctx, expr.id, scope, call):
            return None
        return val
    return expr


def _counted_length(ctx, expr, scope, call):
    """(list expression, ``Count``) when the list's length is a form in the world size that is
    provably not the world size (``[None] * (world_size + 1)``, ``range(2 * world)``), its integers
    followed through the program model (``flow.counts``); else (None, None)."""
    target = _list_expr(ctx, expr, scope, call)
    if target is None or isinstance(target, ast.IfExp):
        return None, None
    from ..flow.counts import length_of
    from ..flow.modern import hub

    an, view = hub(ctx)
    c = length_of(an, view, target, call)
    if c is None or c.unit != "W" or (c.a, c.b) == (1, 0) or c.a < 1:
        return None, None
    return target, c


def _literal_len(ctx, expr, scope, depth: int = 0) -> int | None:
    if depth > 4:
        return None
    if isinstance(expr, (ast.List, ast.Tuple)):
        if any(isinstance(e, ast.Starred) for e in expr.elts):
            return None
        return len(expr.elts)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        for seq, k in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(seq, (ast.List, ast.Tuple)):
                kk = const_int(k)
                base = _literal_len(ctx, seq, scope, depth + 1)
                if kk is not None and base is not None:
                    return base * max(kk, 0)
        return None
    if isinstance(expr, ast.ListComp) and len(expr.generators) == 1:
        gen = expr.generators[0]
        if gen.ifs or gen.is_async:
            return None
        return _iter_len(ctx, gen.iter, scope, depth + 1)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "list" and len(expr.args) == 1 and not expr.keywords:
        return _iter_len(ctx, expr.args[0], scope, depth + 1)
    return None


def _iter_len(ctx, it, scope, depth) -> int | None:
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords:
        vals = [const_int(a) for a in it.args]
        if not vals or any(v is None for v in vals) or len(vals) > 3:
            return None
        try:
            return len(range(*vals))
        except ValueError:
            return None
    if isinstance(it, ast.Constant) and isinstance(it.value, str):
        return len(it.value)
    if isinstance(it, ast.Name):
        val = ctx.sem.single_value(it.id, scope)
        if val is None or _mutated(ctx, it.id, scope, None):
            return None
        if isinstance(val, (ast.List, ast.Tuple)):
            return _literal_len(ctx, val, scope, depth + 1)
        return None
    return _literal_len(ctx, it, scope, depth + 1)


def _mutations_of(ctx, scope, name: str) -> list:
    """The nodes of ``scope`` that may change a list held by ``name`` (see ``_mutates``): those
    that ``iter_scope_nodes(scope)`` yields (nested functions, classes and lambdas not entered)
    and index under ``name``, in another order (the readers only ask whether any mutates).

    Each such node holds the name itself (``name.append``, ``name += ...``, ``del name[i]``,
    ``f(name)``, ``global name``), so it sits on a line whose text contains ``name``: statements
    none of whose lines do are skipped (a line that is not ASCII always counts, since an
    identifier may be spelled there in another form). Memoised per scope and name."""
    def build():
        lines = ctx.src.lines
        nlines = len(lines)

        def mentions(st) -> bool:
            for i in range(st.lineno - 1, min(st.end_lineno, nlines)):
                ln = lines[i]
                if name in ln or not ln.isascii():
                    return True
            return False

        return _mutation_walk(scope, mentions).get(name, [])
    return ctx.memo(("ddp101.mutations", id(scope), name), build)


def _mutation_walk(scope, keep) -> dict:
    """name -> mutating nodes (the kinds ``_mutates`` asks about) among the nodes of ``scope``,
    entering only the statements (and except handlers) for which ``keep(statement)`` holds."""
    idx: dict[str, list] = {}
    Attribute, Name, Call, AugAssign, Delete = ast.Attribute, ast.Name, ast.Call, ast.AugAssign, ast.Delete
    Global, Nonlocal, AST = ast.Global, ast.Nonlocal, ast.AST
    stmt_like = (ast.stmt, ast.excepthandler)
    nested = _NESTED
    skip = _LEAVES
    fields_of = _WALK_FIELDS
    body = scope.body if isinstance(scope.body, list) else [scope.body]
    stack = list(body)
    pop, push = stack.pop, stack.append
    while stack:
        n = pop()
        t = n.__class__
        if t is Attribute:
            if n.attr in _MUTATORS and n.value.__class__ is Name:
                idx.setdefault(n.value.id, []).append(n)
        elif t is Call:
            for a in n.args:
                if a.__class__ is Name:
                    idx.setdefault(a.id, []).append(n)
            for k in n.keywords:
                if k.value.__class__ is Name:
                    idx.setdefault(k.value.id, []).append(n)
        elif isinstance(n, stmt_like):
            if t in nested or not keep(n):
                continue
            if t is AugAssign:
                if n.target.__class__ is Name:
                    idx.setdefault(n.target.id, []).append(n)
            elif t is Delete:
                for tg in n.targets:
                    if isinstance(tg, ast.Subscript) and isinstance(tg.value, ast.Name):
                        idx.setdefault(tg.value.id, []).append(n)
            elif t is Global or t is Nonlocal:
                for nm in n.names:
                    idx.setdefault(nm, []).append(n)
                continue
        elif t is ast.Lambda:
            continue
        fs = fields_of.get(t)
        if fs is None:
            fs = fields_of[t] = tuple(f for f in t._fields if f not in _NOT_CHILDREN)
        for f in fs:
            v = getattr(n, f, None)
            if v.__class__ is list:
                for c in v:
                    if isinstance(c, AST) and c.__class__ not in skip:
                        push(c)
            elif isinstance(v, AST) and v.__class__ not in skip:
                push(v)
    return idx


# the walk of ``_mutation_walk``: fields that never hold a node (identifiers, numbers, expression
# contexts, operators), nodes it never needs to visit (no children of interest), nested scopes
_NOT_CHILDREN = frozenset({"ctx", "op", "ops", "id", "attr", "name", "asname", "arg", "module", "level", "kind",
                           "type_comment", "conversion", "is_async", "type_ignores", "lineno", "tag", "rest",
                           "kwd_attrs"})
_LEAVES = frozenset({ast.Name, ast.Constant, ast.Pass, ast.Break, ast.Continue})
_NESTED = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda})
_WALK_FIELDS: dict[type, tuple[str, ...]] = {}


def _mutated(ctx, name: str, scope, call) -> bool:
    """The list may change length: a mutating method, ``+=``, ``del x[...]``, or being passed to
    any call other than the collective itself (or ``len``/``print``)."""
    return any(_mutates(ctx, n, name, call) for n in _mutations_of(ctx, scope, name))


def _mutated_before(ctx, name: str, scope, call) -> bool:
    """``_mutated``, counting only what can run before ``call``: earlier lines, or anything in a
    loop around it. ``torch.cat(out)`` after the collective does not change what it received."""
    loops = [a for a in ctx.sem.ancestors(call) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))]
    start = min([call.lineno, *(lp.lineno for lp in loops)])
    end = max([call.lineno, *(lp.end_lineno for lp in loops)])
    for n in _mutations_of(ctx, scope, name):
        ln = getattr(n, "lineno", None)
        if ln is None or n is call:
            continue
        if ln < call.lineno or start <= ln <= end:
            if _mutates(ctx, n, name, call):
                return True
    return False


def _mutates(ctx, n, name: str, call) -> bool:
    if isinstance(n, ast.Attribute) and n.attr in _MUTATORS and isinstance(n.value, ast.Name) and n.value.id == name:
        return True
    if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name:
        return True
    if isinstance(n, ast.Delete) and any(
            isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name for t in n.targets):
        return True
    if isinstance(n, ast.Call) and n is not call:
        if isinstance(n.func, ast.Name) and n.func.id in ("len", "print", "enumerate", "range", "zip", "str", "repr"):
            return False
        for a in (*n.args, *(k.value for k in n.keywords)):
            if isinstance(a, ast.Name) and a.id == name:
                qn = ctx.qn(n)
                if not (qn and qn.startswith(D)):
                    return True
    if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
        return True
    return False


def _make_fix(ctx, call, target, inp, group, tensors: bool, root: str | None = None):
    if group is not None and not is_simple_ref(group):
        return None
    gws, imp = ctx.ref(D + "get_world_size")
    size = f"{gws}({ctx.text(group)})" if group is not None else f"{gws}()"
    if tensors:
        if inp is None or not is_simple_ref(inp):
            return None
        empty_like, imp2 = ctx.ref("torch.empty_like")
        elem = f"{empty_like}({ctx.text(inp)})"
        imp = imp + [e for e in imp2 if e not in imp]
    else:
        elem = "None"
    new = f"[{elem} for _ in range({size})]"
    if root is not None:
        get_rank, imp3 = ctx.ref(D + "get_rank")
        imp = imp + [e for e in imp3 if e not in imp]
        new = f"{new} if {get_rank}() == {root} else None"
        return ctx.fix(Applicability.SAFE, f"Size the list to the world size, on the destination rank only: `{new}`",
                       [ctx.replace(target, new), *imp])
    return ctx.fix(Applicability.SAFE, f"Size the list to the world size: `{new}`", [ctx.replace(target, new), *imp])
