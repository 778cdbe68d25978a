"""Where a value is used as the index of this process's shard of the data, among as many shards
as the job has processes: the places that need the *global* rank (``rank_kinds``), beside
``init_process_group(rank=...)``.

- ``DistributedSampler(ds, num_replicas, rank)``: its ``rank`` (positional or keyword);
- a strided slice ``items[r::n]`` (also ``items[r:end:n]``) and ``range(r, end, n)``: ``r`` picks
  every ``n``-th item from its own offset.

Either one shards among *all* the processes unless its count is known to be a node's (the
environment's ``LOCAL_WORLD_SIZE``, ``torch.cuda.device_count()``): then the local rank is the
right offset (each node reads everything). A sampler without ``num_replicas`` counts the default
group (all the processes).

A sink whose value is ``self.<attr>`` bound only to one parameter of the class's ``__init__``
(``self.rank = rank`` then ``batches[self.rank::self.num_replicas]`` in ``__iter__``) is a
*member* sink: the class is a component that shards for whoever builds it, so what it is given
is decided where it is built (``member_param_sinks``: ``__init__``'s parameter -> the sink), not
in the class."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent

SAMPLERS = frozenset({"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"})
# the environment's count of a node's processes (``torchrun``, SLURM, Open MPI, Intel MPI)
LOCAL_COUNT_ENV = frozenset({"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                             "MPI_LOCALNRANKS"})


def shard_rank_sinks(hub, view) -> list:
    """(value, node to report, what it is) for each shard index of the module (see the module's
    docstring) whose count is not known to be a node's."""
    memo = view.memo.get("shard_sinks")
    if memo is not None:
        return memo
    out = []
    sem = view.sem
    for c in sem.calls:
        f = c.func
        if isinstance(f, ast.Name) and f.id == "range" and sem.qualname(f) is None:
            if len(c.args) == 3 and not c.keywords and _offset(c.args[0]) and not _local_count(hub, view, c.args[2], c):
                out.append((c.args[0], c, "the start of a `range` stepping over the ranks"))
        elif sem.call_qualname(c) in SAMPLERS:
            r = get_arg(c, 2, "rank")
            n = get_arg(c, 1, "num_replicas")
            if r is not None and _offset(r) and (n is None or not _local_count(hub, view, n, c)):
                out.append((r, c, "`DistributedSampler(rank=...)`"))
    for s in sem.of_types(ast.Subscript):
        if s.slice.__class__ is ast.Slice:
            sl = s.slice
            if sl.lower is not None and sl.step is not None and _offset(sl.lower) \
                    and not _local_count(hub, view, sl.step, s):
                out.append((sl.lower, s, "the offset of a slice that steps over the ranks"))
    view.memo["shard_sinks"] = out
    return out


def _offset(e) -> bool:
    """Not a constant: a constant offset is no rank."""
    return not isinstance(e, ast.Constant) and not (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))


def _local_count(hub, view, n, at) -> bool:
    """``n`` is known to count the processes of one node."""
    from .rank_kinds import env_keys_of, is_device_count

    if isinstance(n, ast.Constant):
        return True  # a fixed stride (``x[i::2]``): no count of processes
    keys = env_keys_of(hub, view, n, at)
    if keys and keys <= LOCAL_COUNT_ENV:
        return True
    return is_device_count(hub, view, n, at)


def member_sink(hub, view, val) -> tuple | None:
    """(class's ``__init__``, parameter name) when ``val`` is ``self.<attr>`` read in a method and
    every binding of ``self.<attr>`` in the class is that one parameter of ``__init__``, as it
    stands."""
    if not (isinstance(val, ast.Attribute) and isinstance(val.value, ast.Name) and val.value.id == "self"):
        return None
    fn = view.sem.enclosing_function(val)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return None
    init = next((m for m in cls.body if isinstance(m, FUNC_TYPES) and m.name == "__init__"), None)
    if init is None:
        return None
    binds = hub.class_attr_bindings(view, cls, val.attr)
    names = {b.id for b in binds if isinstance(b, ast.Name)}
    if not binds or len(names) != 1 or len(binds) != sum(isinstance(b, ast.Name) for b in binds):
        return None
    from .rank_kinds import bare_param

    if not all(view.sem.enclosing_function(b) is init and bare_param(view, init, b) for b in binds):
        return None
    return init, names.pop()


def member_param_sinks(hub, view, fn) -> dict:
    """parameter name -> (view, node, what) for each parameter of ``fn`` (a class's ``__init__``)
    that a member sink of its class reads (``member_sink``)."""
    out: dict = {}
    if fn is None or fn.name != "__init__" or not isinstance(parent(fn), ast.ClassDef):
        return out
    for val, node, what in shard_rank_sinks(hub, view):
        got = member_sink(hub, view, val)
        if got is not None and got[0] is fn:
            out.setdefault(got[1], (view, node, what))
    return out


def rank_param_sinks(hub, view, fn, depth: int = 0) -> dict:
    """parameter name -> (view, node, what) for each parameter of ``fn`` that reaches, as it
    stands, a place that takes the global rank (``rank_kinds.global_rank_sinks``, and the data-shard
    indexes of this module), in ``fn`` itself or through a project helper it passes the parameter to
    (a few calls deep, across modules)."""
    from .rank_kinds import global_rank_sinks, param_sinks

    return param_sinks(hub, view, fn, global_rank_sinks, depth, shards=(shard_rank_sinks, member_param_sinks))
