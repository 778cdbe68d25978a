"""Kinds of rank: is a value the *global* rank (its place among all the job's processes) or the
*local* rank (its place on its node)? The two are equal on one node and differ on every other.

A value's kind is read from where it comes from (``origins``: names and their reaching bindings,
tuple unpacking, ``self`` attributes, parameters filled at their calls, returns of project
helpers in this or another module), never from its name:

- global: ``dist.get_rank()`` (default group; local where every init passes ``rank=`` the local
  rank: ``rank_tests.local_group``), the environment's ``RANK`` / ``SLURM_PROCID`` / ``PMI_RANK`` /
  ``OMPI_COMM_WORLD_RANK``;
- Accelerate's ``process_index`` (global) and ``local_process_index`` (local) of an
  ``Accelerator`` / ``PartialState`` (by value: ``self.accelerator = Accelerator(...)``);
- local: the environment's ``LOCAL_RANK`` / ``SLURM_LOCALID`` / ``OMPI_COMM_WORLD_LOCAL_RANK``,
  ``dist.get_node_local_rank()``, and a ``--local_rank`` / ``--local-rank`` command-line option
  (what the launchers that pass one pass is the local rank; also its plain argparse default);
- a namespace attribute (``args.local_rank``) has the kind of every store to it in its module and
  of the argparse option that defines it; ``int(...)`` / ``str(...)`` and a conditional
  expression keep the kind; a constant (the single-process fallback ``0`` / ``-1``) is neutral.

Anything else (arithmetic such as ``node_rank * gpus + gpu``, the index ``mp.spawn`` passes, an
unknown call) is unknown, and a value is of a kind only when every non-constant origin is.

``local_rank_options(sem)`` lists the module's ``--local_rank`` / ``--local-rank`` options and
``local_rank_env_reads(view)`` its reads of the local rank from the environment (by value)."""
from __future__ import annotations

import ast

from ..semantic import get_arg, parent
from ..torch_api import DEVICE_SETTERS, FSDP1_CLASSES, D
from .origins import origins
from .rank_tests import GLOBAL_RANK_ENV, LOCAL_RANK_ENV
from .rank_tests import local_group
from .cli_options import LOCAL_RANK_OPTIONS, argparse_options, option_dest, option_strings  # noqa: F401  (re-exported)
from .vocab import env_key

GLOBAL, LOCAL = "global", "local"
_CONST = "const"
_MAX_DEPTH = 4


def rank_kind_of(hub, view, expr: ast.AST, at: ast.AST, depth: int = 0):
    """(kind, (view, witness)) for ``expr`` at ``at``: ``GLOBAL`` or ``LOCAL`` when every
    non-constant origin is of that kind (the witness is one such origin), else (None, None)."""
    if expr is None or depth > _MAX_DEPTH:
        return None, None
    kinds: set = set()
    witness = None
    leaves = origins(hub, view, expr, at)
    if not leaves:
        return None, None
    for v, e in leaves[:16]:
        k, w = _leaf_kind(hub, v, e, depth)
        if k is None:
            return None, None
        if k == _CONST:
            continue
        kinds.add(k)
        witness = witness or w
    if len(kinds) != 1:
        return None, None
    return kinds.pop(), witness


def _leaf_kind(hub, view, e: ast.AST, depth: int):
    if (opt := _local_rank_option_of_default(e)) is not None:  # ``--local_rank`` when no launcher passes it
        return LOCAL, (view, opt)
    if isinstance(e, ast.Constant) or (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant)):
        return _CONST, None
    if isinstance(e, ast.IfExp):
        ks = set()
        witness = None
        for side in (e.body, e.orelse):
            if _const_expr(side):
                continue
            k, w = rank_kind_of(hub, view, side, e, depth + 1)
            if k is None:
                return None, None
            ks.add(k)
            witness = witness or w
        if not ks:
            return _CONST, None
        return (ks.pop(), witness) if len(ks) == 1 else (None, None)
    key = env_key(view, e)
    if key is not None:
        if key in LOCAL_RANK_ENV:
            return LOCAL, (view, e)
        if key in GLOBAL_RANK_ENV:
            return GLOBAL, (view, e)
        return None, None
    if isinstance(e, ast.Call):
        f = e.func
        if isinstance(f, ast.Name) and f.id in ("int", "str") and len(e.args) == 1 and not e.keywords:
            k, w = rank_kind_of(hub, view, e.args[0], e, depth + 1)
            if k is None and _const_expr(e.args[0]):
                return _CONST, None
            return k, w
        qn = view.sem.call_qualname(e)
        if qn == D + "get_rank" and _default_group(hub, view, e):  # the rank the init gave it
            return LOCAL if local_group(view) else GLOBAL, (view, e)
        if qn == D + "get_node_local_rank":
            return LOCAL, (view, e)
        return None, None
    if isinstance(e, ast.Attribute) and e.attr in ACCELERATE_RANKS and isinstance(e.ctx, ast.Load):
        from .class_chains import chain_attr_values
        from .hidden import ACCELERATE_STATE_QNS as QNS, is_accelerator  # lazy: hidden's neighbours ask the kinds

        if is_accelerator(hub, view, e.value, e, QNS) or any(  # also built by a base class of another module
                is_accelerator(hub, v, x, x, QNS) for v, x in chain_attr_values(hub, view, e.value)):
            return ACCELERATE_RANKS[e.attr], (view, e)
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id != "self" \
            and view.sem.qualname(e) is None:
        return _namespace_kind(hub, view, e.value.id, e.attr, depth)
    return None, None


# Accelerate's place of this process (of an ``Accelerator`` or its process state): among all the
# job's processes, or on its node
ACCELERATE_RANKS = {"process_index": GLOBAL, "local_process_index": LOCAL}


def _default_group(hub, view, call: ast.Call) -> bool:
    """``get_rank()`` asks the default group: no group given, or one that is None by value flow
    (``group = dist.init_process_group(...)``, which returns None, then ``get_rank(group)``)."""
    if not call.args and not call.keywords:
        return True
    g = get_arg(call, 0, "group")
    if g is None or len(call.args) + len(call.keywords) != 1:
        return False
    leaves = origins(hub, view, g, call)
    return bool(leaves) and all(
        (isinstance(x, ast.Constant) and x.value is None)
        or (isinstance(x, ast.Call) and lv.sem.call_qualname(x) == D + "init_process_group") for lv, x in leaves)


def _local_rank_option_of_default(e: ast.AST) -> ast.Call | None:  # add_argument("--local_rank", default=e)
    c = parent(parent(e)) if isinstance(parent(e), ast.keyword) and parent(e).arg == "default" else None
    ok = isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "add_argument"
    return c if ok and LOCAL_RANK_OPTIONS & set(option_strings(c)) else None


def _const_expr(e) -> bool:  # ``0``, ``-1``
    return isinstance(e, ast.Constant) or (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))


def _namespace_kind(hub, view, base: str, attr: str, depth: int):
    """The kind of ``<base>.<attr>``: of every store to it in the module, and of the argparse
    option whose destination it is (a ``--local_rank`` option is the local rank; another one has
    the kind of its default)."""
    memo = view.memo.setdefault("rank_kinds.ns", {})
    key = (base, attr, depth)
    if key in memo:
        return memo[key]
    memo[key] = (None, None)  # recursion guard
    vals = []
    for st in view.sem.by_type.get(ast.Assign, ()):
        for tg in st.targets:
            if isinstance(tg, ast.Attribute) and tg.attr == attr and isinstance(tg.value, ast.Name) \
                    and tg.value.id == base:
                vals.append((st.value, st))
    kinds: set = set()
    witness = None
    opts = [c for c in argparse_options(view.sem) if option_dest(c, view.sem) == attr]
    for c in opts:
        if LOCAL_RANK_OPTIONS & set(option_strings(c)):
            kinds.add(LOCAL)
            witness = witness or (view, c)
        else:
            d = get_arg(c, None, "default")
            if d is None or _const_expr(d):
                continue
            k, w = rank_kind_of(hub, view, d, c, depth + 1)
            if k is None:
                memo[key] = (None, None)
                return None, None
            kinds.add(k)
            witness = witness or w
    if not vals and not opts:
        return None, None
    for v, st in vals:
        if _const_expr(v):
            continue
        k, w = rank_kind_of(hub, view, v, st, depth + 1)
        if k is None:
            memo[key] = (None, None)
            return None, None
        kinds.add(k)
        witness = witness or w
    got = (kinds.pop(), witness) if len(kinds) == 1 else (None, None)
    memo[key] = got
    return got


# -- argparse options ---------------------------------------------------------------------------

def local_rank_options(sem) -> list[ast.Call]:
    """The ``add_argument`` calls that declare ``--local_rank`` or ``--local-rank``."""
    return [c for c in argparse_options(sem) if LOCAL_RANK_OPTIONS & set(option_strings(c))]


# -- where the environment's local rank is read ---------------------------------------------------

def local_rank_env_reads(view, known: bool = False) -> list[ast.AST]:
    """The expressions of a module that read the local rank from the environment (by value):
    ``os.environ["LOCAL_RANK"]`` and its ``get`` / ``getenv`` forms (also ``SLURM_LOCALID``,
    ``OMPI_COMM_WORLD_LOCAL_RANK``), ``dist.get_node_local_rank()``; ``known``: no unknown keys."""
    memo = view.memo
    mk = "rank_kinds.env_reads.known" if known else "rank_kinds.env_reads"
    got = memo.get(mk)
    if got is not None:
        return got
    got = []
    sem = view.sem
    for c in sem.calls:
        if _reads_local(view, c, known) or sem.call_qualname(c) == D + "get_node_local_rank":
            got.append(c)
    for s in view.sem.of_types(ast.Subscript):  # once per module, and only for a module with a --local_rank option
        if isinstance(s.ctx, ast.Load) and _reads_local(view, s, known):
            got.append(s)
    memo[mk] = got
    return got


# -- the program a module belongs to ------------------------------------------------------------

_MAX_PROGRAM = 24


def program_views(hub, view, limit: int = _MAX_PROGRAM) -> list:
    """``view`` and the project modules it imports, transitively (breadth first, at most
    ``limit``): the part of the program one check can see."""
    from . import _NOT_PROJECT  # lazy: the package imports this module's neighbours

    out = [view]
    seen = {id(view)}
    i = 0
    while i < len(out) and len(out) < limit:
        v = out[i]
        i += 1
        for mod, level, attr in list(v.imports.values()):
            if (mod or "").split(".", 1)[0] in _NOT_PROJECT:
                continue
            cands = [f"{mod}.{attr}" if (mod and attr) else (attr or mod), mod] if attr else [mod]
            for name in cands:
                if not name and not level:
                    continue
                got = hub.module_view(v, name or "", level)
                if got is not None:
                    if id(got) not in seen:
                        seen.add(id(got))
                        out.append(got)
                    break
    return out


def self_launched(views) -> ast.AST | None:
    """A call of ``mp.spawn`` / ``start_processes`` in one of ``views``: the program starts its own
    processes (on one node), so no launcher passes or sets anything (``process_entries.
    starts_group_processes``: the same with ``multiprocessing.Process(target=f)``)."""
    from ..torch_api import SPAWNS

    for v in views:
        got = v.sem.calls_to(*SPAWNS)
        if got:
            return got[0]
    return None


_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def loopback_rendezvous(views) -> ast.AST | None:
    """The program fixes its rendezvous on this machine: ``os.environ["MASTER_ADDR"] = "localhost"``
    (a plain store: ``setdefault`` keeps a launcher's value), or an ``init_process_group`` whose
    ``init_method`` is a literal on the loopback address: its world is one node by construction."""
    for v in views:
        sem = v.sem
        for st in sem.by_type.get(ast.Assign, ()):
            val = st.value
            if isinstance(val, ast.Constant) and isinstance(val.value, str) and val.value in _LOOPBACK \
                    and any(env_key(v, t) == "MASTER_ADDR" for t in st.targets):
                return st
        for c in sem.calls_to(D + "init_process_group"):
            m = get_arg(c, 1, "init_method")
            if isinstance(m, ast.Constant) and isinstance(m.value, str) and any(h in m.value for h in _LOOPBACK):
                return c
    return None


# -- where an option's value is used as a rank or a device ----------------------------------------

_DEVICE_QNS = {"torch.cuda.set_device": "a CUDA device", "torch.device": "a device",
               "torch.cuda.device": "a CUDA device",
               "torch.nn.parallel.DistributedDataParallel": "the DDP device",
               D + "init_process_group": "`init_process_group`"}
_DDP = "torch.nn.parallel.DistributedDataParallel"
# the accelerators whose device index counts the devices of one node (``torch_npu``, ``torch_mlu``
# register ``torch.npu`` / ``torch.mlu``)
_SET_DEVICE = DEVICE_SETTERS | {"torch.cuda.device"}
_THROUGH = (ast.List, ast.Tuple, ast.keyword, ast.FormattedValue, ast.JoinedStr, ast.BinOp)


def option_uses(view, dest: str) -> list:
    """(node, how) for each read of ``<namespace>.<dest>`` in ``view`` that uses it as a device
    (``set_device``, ``torch.device``, ``.to`` / ``.cuda``, DDP's ``device_ids``), in
    ``init_process_group``, or in a comparison (a rank test)."""
    memo = view.memo.setdefault("rank_kinds.uses", {})
    got = memo.get(dest)
    if got is not None:
        return got
    got = []
    sem = view.sem
    for n in sem.of_types(ast.Attribute):
        if n.attr != dest or not isinstance(n.ctx, ast.Load) \
                or sem.qualname(n) is not None:
            continue
        how = _use_of(view, n)
        if how is not None:
            got.append((n, how))
    memo[dest] = got
    return got


def _use_of(view, node: ast.AST) -> str | None:
    from ..semantic import parent

    child, p = node, parent(node)
    while p is not None:
        if p.__class__ is ast.Compare:
            return "a rank test"
        if p.__class__ is ast.Call:
            if child is p.func:
                return None
            f = p.func
            if isinstance(f, ast.Name) and f.id in ("int", "str") and len(p.args) == 1:
                child, p = p, parent(p)
                continue
            qn = view.sem.call_qualname(p)
            if qn in _DEVICE_QNS:
                return _DEVICE_QNS[qn]
            if qn is None and isinstance(f, ast.Attribute) and f.attr in ("to", "cuda"):
                return "a device"
            return None
        if not isinstance(p, _THROUGH):
            return None
        child, p = p, parent(p)
    return None


# -- where a value must be the global rank ----------------------------------------------------------

def global_rank_sinks(view) -> list:
    """(value, node to report, what it is) for each place of the module that takes the *global*
    rank: ``init_process_group(rank=...)``, and a store of the environment's ``RANK`` (``os.environ
    ["RANK"] = ...``, ``os.environ.setdefault("RANK", ...)``) that a later init reads."""
    memo = view.memo.get("rank_kinds.sinks")
    if memo is not None:
        return memo
    out = []
    sem = view.sem
    for c in sem.calls_to(D + "init_process_group"):
        r = get_arg(c, 4, "rank")
        if r is not None:
            out.append((r, c, "`init_process_group(rank=...)`"))
    for st in sem.by_type.get(ast.Assign, ()):
        for t in st.targets:
            if isinstance(t, ast.Subscript) and env_key(view, t) in GLOBAL_RANK_ENV:
                out.append((st.value, st, f'`os.environ["{env_key(view, t)}"]`'))
    for c in sem.calls_to("os.environ.setdefault"):
        if len(c.args) == 2 and isinstance(c.args[0], ast.Constant) and c.args[0].value in GLOBAL_RANK_ENV:
            out.append((c.args[1], c, f'`os.environ["{c.args[0].value}"]`'))
    view.memo["rank_kinds.sinks"] = out
    return out


def bare_param(view, fn, expr) -> str | None:
    """The parameter of ``fn`` that ``expr`` is as it stands (through ``int()`` / ``str()``)."""
    from ..semantic import FUNC_TYPES
    from .bindings import reaching

    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("int", "str") \
            and len(expr.args) == 1:
        expr = expr.args[0]
    if not isinstance(expr, ast.Name):
        return None
    kind, evs = reaching(view, expr.id, expr)
    return expr.id if kind == "param" and isinstance(evs, FUNC_TYPES) and evs is fn else None


def device_sinks(view) -> list:
    """(value, call, what) for each expression of the module used as a CUDA device index
    (``device_index_sites``)."""
    memo = view.memo.get("rank_kinds.device_sinks")
    if memo is not None:
        return memo
    sem = view.sem
    out = [(site, c, "a CUDA device index") for c in sem.calls for site in device_index_sites(sem, c)]
    view.memo["rank_kinds.device_sinks"] = out
    return out


def device_param_sinks(hub, view, fn, depth: int = 0) -> dict:
    """``rank_param_sinks`` for the places that take a CUDA device index (``device_sinks``)."""
    return param_sinks(hub, view, fn, device_sinks, depth)


def param_sinks(hub, view, fn, sinks_of, depth: int = 0, shards=None) -> dict:
    """parameter name -> (view, node, what) for each parameter of ``fn`` that reaches, as it
    stands (through ``int()`` / ``str()``), one of ``sinks_of(view)`` in ``fn`` itself or through a
    project helper it passes the parameter to (a few calls deep, across modules). ``shards``: also
    the data-shard indexes (``shard_sinks``), those a class's members read included."""
    # per check (on the hub): the answer names nodes of other modules
    memo = hub.__dict__.setdefault("_rank_param_sinks", {})
    key = (id(view), id(fn), sinks_of.__name__, depth, shards)
    if key in memo:
        return memo[key]
    memo[key] = {}
    out: dict = {}
    sem = view.sem
    direct = sinks_of(view)
    if shards:  # (the data-shard sinks, the class-member sinks): ``shard_sinks.rank_param_sinks``
        shard_rank_sinks, member_param_sinks = shards
        direct = [*direct, *shard_rank_sinks(hub, view)]
        out.update(member_param_sinks(hub, view, fn))
    for val, node, what in direct:  # ``node`` may be in another method (``self.cfg.x``)
        if sem.enclosing_function(val) is fn:
            p = bare_param(view, fn, val)
            if p is not None:
                out.setdefault(p, (view, node, what))
    if depth < 3:
        from .calls import call_args
        for c in sem.scope_calls(fn):
            target = hub.resolve_call(view, c)
            if target is None:
                continue
            tv, tfn = target
            inner = param_sinks(hub, tv, tfn, sinks_of, depth + 1, shards)
            if not inner:
                continue
            for pname, a in call_args(c, tfn):
                if pname in inner:
                    p = bare_param(view, fn, a)
                    if p is not None:
                        out.setdefault(p, inner[pname])
    memo[key] = out
    return out


def _reads_local(view, e, known: bool = False) -> bool:
    """``e`` reads the environment with a local-rank key (a constant, a name bound to one, a loop
    variable over constant keys), or, unless ``known``, with a key it cannot tell."""
    key = env_key(view, e)
    if key is None:
        return False
    if key:
        return key in LOCAL_RANK_ENV
    k = e.slice if isinstance(e, ast.Subscript) else (e.args[0] if e.args else None)
    keys = _key_values(view, k)
    return (keys is None and not known) or bool(keys and keys & LOCAL_RANK_ENV)


def _key_values(view, k) -> set | None:
    from ..semantic import parent
    from ..torch_api import constant_of

    if k is None:
        return None
    c = constant_of(view.sem, k)
    if c is not None:
        return {c.value} if isinstance(c.value, str) else set()
    if isinstance(k, ast.Name):
        p = parent(k)
        while p is not None:
            if isinstance(p, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(p.target, ast.Name) \
                    and p.target.id == k.id and isinstance(p.iter, (ast.Tuple, ast.List, ast.Set)):
                vals = {x.value for x in p.iter.elts if isinstance(x, ast.Constant) and isinstance(x.value, str)}
                return vals if len(vals) == len(p.iter.elts) else None
            for g in getattr(p, "generators", ()) if isinstance(p, (ast.ListComp, ast.SetComp, ast.GeneratorExp,
                                                                    ast.DictComp)) else ():
                if isinstance(g.target, ast.Name) and g.target.id == k.id:
                    if isinstance(g.iter, (ast.Tuple, ast.List, ast.Set)):
                        vals = {x.value for x in g.iter.elts if isinstance(x, ast.Constant) and isinstance(x.value, str)}
                        return vals if len(vals) == len(g.iter.elts) else None
                    return None
            p = parent(p)
    return None


# -- where a value is used as a CUDA device index -----------------------------------------------------
def device_index_sites(sem, call: ast.Call) -> list:
    """The expressions ``call`` uses as a device index: ``set_device(i)`` (CUDA, XPU, NPU, MLU, MUSA),
    ``torch.cuda.device(i)``, ``torch.device("cuda", i)`` / ``torch.device(f"cuda:{i}")`` /
    ``index=i``, DDP's ``device_ids=[i]`` / ``output_device=i``, FSDP's ``device_id=i``, ``.to(i)`` /
    ``.cuda(i)`` (also ``"cuda:" + str(i)``)."""
    f = call.func
    qn = sem.call_qualname(call)
    sites: list[ast.AST] = []
    if qn in _SET_DEVICE:
        a = get_arg(call, 0, "device")
        if a is not None:
            sites.append(a)
    elif qn == "torch.device":
        if len(call.args) >= 2:
            if _is_cuda_str(call.args[0]):
                sites.append(call.args[1])
        elif call.args:
            sites.extend(_device_string_sites(call.args[0]))
            if not sites and not isinstance(call.args[0], (ast.Constant, ast.JoinedStr, ast.BinOp)):
                sites.append(call.args[0])
        idx = get_arg(call, None, "index")
        if idx is not None:
            sites.append(idx)
    elif qn == _DDP:
        ids = get_arg(call, 1, "device_ids")
        if isinstance(ids, (ast.List, ast.Tuple)):
            sites.extend(ids.elts)
        od = get_arg(call, 2, "output_device")
        if od is not None:
            sites.append(od)
    elif qn in FSDP1_CLASSES and (d := get_arg(call, None, "device_id")) is not None and d.__class__ is not ast.Call:
        sites.append(d)  # an index (a ``torch.device(...)`` there is a site of its own)
    elif f.__class__ is ast.Attribute and f.attr in ("to", "cuda") and qn is None:
        a = call.args[0] if call.args else get_arg(call, None, "device")
        if a is not None:
            if a.__class__ is ast.JoinedStr or a.__class__ is ast.BinOp:
                sites.extend(_device_string_sites(a))
            else:
                sites.append(a)
    return sites


def _is_cuda_str(node) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cuda"


def _device_string_sites(node) -> list[ast.AST]:
    """The index part of ``f"cuda:{r}"`` or ``"cuda:" + str(r)``."""
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        head, val = node.values
        if isinstance(head, ast.Constant) and head.value == "cuda:" and isinstance(val, ast.FormattedValue) \
                and val.format_spec is None and val.conversion == -1:
            return [val.value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.Constant) \
            and node.left.value == "cuda:":
        r = node.right
        if isinstance(r, ast.Call) and isinstance(r.func, ast.Name) and r.func.id == "str" and len(r.args) == 1:
            return [r.args[0]]
    return []


# -- a rank read from the environment and left a string ------------------------------------------

# the environment variables launchers set to a rank, a node's rank or a count of processes: each
# holds a number written as text
NUMERIC_RANK_ENV = GLOBAL_RANK_ENV | LOCAL_RANK_ENV | frozenset({
    "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "OMPI_COMM_WORLD_NODE_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK", "PMI_SIZE", "SLURM_NODEID",
    "SLURM_NTASKS", "SLURM_NPROCS",
})
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Mod, ast.FloorDiv, ast.Div)


def raw_rank_env_read(view, e) -> str | None:
    """The key when ``e`` is itself a read of a numeric launcher variable (``NUMERIC_RANK_ENV``):
    ``os.environ["LOCAL_RANK"]``, ``os.environ.get("RANK", 0)``, ``os.getenv("WORLD_SIZE")``. Such
    a read is a string (the default only when the variable is unset): the caller asks this of an
    origin, so a read inside ``int(...)`` (whose origin is the ``int`` call) never gets here."""
    key = env_key(view, e)
    return key if key and key in NUMERIC_RANK_ENV else None


def _int_const(e) -> int | None:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = _int_const(e.operand)
        return -v if v is not None else None
    return e.value if isinstance(e, ast.Constant) and type(e.value) is int else None


def int_use_of(view, node: ast.AST, _sites=None) -> str | None:
    """How ``node`` (a name or attribute read) is used as a number, where a string breaks: a device
    index (``device_index_sites``, not inside an f-string or ``str()``), ``init_process_group``'s
    ``rank=`` / ``world_size=``, an order comparison or arithmetic with an int (``TypeError``, or
    ``"2" * 4 == "2222"``), an equality test against a rank ``>= 0`` (always unequal: the test
    silently says no); else None. ``== -1`` / ``!= -1`` (the "unset" sentinel) and ``is None`` are
    not uses: they mean the same for a string."""
    p = parent(node)
    if p is None:
        return None
    if p.__class__ is ast.Compare:
        parts = [p.left, *p.comparators]
        i = next((k for k, x in enumerate(parts) if x is node), None)
        if i is None:
            return None
        for k, op in enumerate(p.ops):
            if i not in (k, k + 1):
                continue
            other = parts[k + 1] if i == k else parts[k]
            c = _int_const(other)
            if c is None:
                continue
            if isinstance(op, _ORDER):
                return "compared with an int (`TypeError`)"
            if isinstance(op, (ast.Eq, ast.NotEq)) and c >= 0:
                return f"compared with `{c}` (a string never equals an int: the test is always {'False' if isinstance(op, ast.Eq) else 'True'})"
        return None
    if p.__class__ is ast.BinOp and isinstance(p.op, _ARITH):
        other = p.right if p.left is node else p.left
        if _int_const(other) is not None:
            return "in arithmetic with an int (`TypeError`, or `\"2\" * 4 == \"2222\"`)"
        return None
    if p.__class__ is ast.keyword and p.arg in ("rank", "world_size"):
        call = parent(p)
        if isinstance(call, ast.Call) and view.sem.call_qualname(call) == D + "init_process_group":
            return f"`init_process_group({p.arg}=...)`"
        return None
    sites = _sites if _sites is not None else {id(s) for s, _c, _w in device_sinks(view)}
    if id(node) in sites:
        if isinstance(p, ast.FormattedValue):
            return None  # ``f"cuda:{r}"``: a string is what the f-string wants
        return "a device index"
    return None


def int_uses(view) -> list:
    """(read, how) for each name, attribute or raw environment read (``raw_rank_env_read``) of the
    module that ``int_use_of`` says is used as a number (once per module)."""
    memo = view.memo.get("rank_kinds.int_uses")
    if memo is not None:
        return memo
    sites = {id(s) for s, _c, _w in device_sinks(view)}
    out = []
    for n in view.sem.walk_order():
        if n.__class__ is ast.Name or n.__class__ is ast.Attribute:
            if not isinstance(n.ctx, ast.Load):
                continue
        elif not ((n.__class__ is ast.Subscript and isinstance(n.ctx, ast.Load)) or n.__class__ is ast.Call) \
                or not raw_rank_env_read(view, n):
            continue  # a read used in place: ``set_device(os.environ["LOCAL_RANK"])``
        how = int_use_of(view, n, sites)
        if how is not None:
            out.append((n, how))
    view.memo["rank_kinds.int_uses"] = out
    return out


def int_options(views, attr: str) -> list:
    """(view, call) for each argparse option of ``views`` whose destination is ``attr`` and whose
    ``type=`` is ``int``: the program declares that attribute a number."""
    out = []
    for v in views:
        for c in argparse_options(v.sem):
            t = get_arg(c, None, "type")
            if isinstance(t, ast.Name) and t.id == "int" and v.sem.qualname(t) is None \
                    and option_dest(c, v.sem) == attr:
                out.append((v, c))
    return out


# the global rank of the launchers that place ranks on nodes by a distribution the job chooses
# (SLURM ``--distribution=cyclic``, ``mpirun --map-by node``): consecutive ranks need not share a node
PLACED_RANK_ENV = frozenset({"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
# the node-local rank each of those launchers sets beside it
PLACED_LOCAL_ENV = {"SLURM_PROCID": "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK": "OMPI_COMM_WORLD_LOCAL_RANK",
                    "PMI_RANK": "MPI_LOCALRANKID", "PMIX_RANK": "OMPI_COMM_WORLD_LOCAL_RANK"}
DEVICE_COUNTS = frozenset({"torch.cuda.device_count", "torch.xpu.device_count", "torch.npu.device_count",
                           "torch.mlu.device_count", "torch.musa.device_count"})


def env_keys_of(hub, view, expr, at, depth: int = 0) -> set | None:
    """The environment keys every non-constant origin of ``expr`` reads (through ``int()``), or
    None when one origin is something else."""
    if depth > _MAX_DEPTH:
        return None
    keys: set = set()
    leaves = origins(hub, view, expr, at)
    if not leaves:
        return None
    for v, e in leaves[:16]:
        if _const_expr(e):
            continue
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "int" and len(e.args) == 1 \
                and not e.keywords:
            got = env_keys_of(hub, v, e.args[0], e, depth + 1)
            if got is None:
                return None
            keys |= got
            continue
        k = env_key(v, e)
        if not k:
            return None
        keys.add(k)
    return keys or None


def is_device_count(hub, view, expr, at) -> bool:
    """Every origin of ``expr`` is ``torch.cuda.device_count()`` (or another accelerator's)."""
    leaves = origins(hub, view, expr, at)
    return bool(leaves) and all(isinstance(e, ast.Call) and v.sem.call_qualname(e) in DEVICE_COUNTS
                                for v, e in leaves[:16])
