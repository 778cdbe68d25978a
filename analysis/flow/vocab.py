"""The vocabulary of ``uniformity``: which library calls, methods and attributes give uniform,
rank-varying or shape-only values (tables only; ``uniformity`` re-exports them)."""
from __future__ import annotations

import ast

from ..torch_api import D

_UNIFORM_QNS = frozenset({
    D + "get_world_size", D + "is_initialized", D + "is_available", D + "get_backend", D + "is_nccl_available",
    D + "get_global_rank", D + "get_process_group_ranks", D + "is_torchelastic_launched",
    "torch.cuda.device_count", "torch.cuda.is_available", "os.cpu_count", "torch.device", "torch.Size",
})
_SEEDS = {
    "torch": ("torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.random.manual_seed"),
    "numpy": ("numpy.random.seed",),
    "random": ("random.seed",),
}
_EXISTS_QNS = frozenset({"os.path.exists", "os.path.isfile", "os.path.isdir", "os.path.lexists"})
# wrappers whose module is replicated on every rank (the device they sit on is not the value)
_REPLICATED = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.distributed.fsdp.FullyShardedDataParallel"})
_CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "time.process_time",
                     "time.perf_counter_ns", "time.monotonic_ns", "datetime.datetime.now", "datetime.datetime.utcnow",
                     # the current time, formatted (``time.strftime(fmt)`` reads the clock)
                     "time.localtime", "time.gmtime", "time.ctime", "time.asctime", "time.strftime",
                     "datetime.datetime.today", "datetime.date.today"})
_RNG_PREFIXES = ("random.", "numpy.random.", "np.random.")
_RNG_TORCH = frozenset({"torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.bernoulli",
                        "torch.multinomial", "torch.normal", "torch.rand_like", "torch.randn_like"})
# the state of torch's generators: the same on every rank unless a rank-varying seed set it (an
# unseeded process starts from torch's fixed default seed)
_RNG_STATES = frozenset({"torch.get_rng_state", "torch.random.get_rng_state", "torch.cuda.get_rng_state",
                         "torch.cuda.get_rng_state_all", "torch.cuda.random.get_rng_state"})
_PURE_PREFIXES = ("torch.", "math.", "numpy.", "np.", "operator.")
_BUILTIN_JOIN = frozenset({"int", "float", "bool", "str", "abs", "round", "min", "max", "sum", "list", "tuple",
                           "sorted", "reversed", "set", "frozenset", "dict", "repr", "format", "divmod", "pow",
                           "any", "all", "hash", "ord", "chr", "next"})
_SHAPE_ATTRS = frozenset({"shape", "ndim", "dtype", "device", "is_cuda", "layout", "requires_grad"})
_SHAPE_METHODS = frozenset({"size", "dim", "numel", "nelement", "ndimension", "__len__", "get_device",
                            "type", "is_contiguous", "element_size", "stride"})
_PURE_METHODS = frozenset({"format", "join", "split", "strip", "lower", "upper", "startswith", "endswith",
                           "replace", "get", "keys", "values", "items", "copy", "index", "count",
                           # tensor methods: the same inputs give the same outputs on every rank
                           "item", "tolist", "float", "int", "long", "double", "half", "bool", "numpy", "cpu",
                           "cuda", "to", "detach", "clone", "mean", "sum", "max", "min", "any", "all", "abs",
                           "sqrt", "exp", "log", "div", "mul", "add", "sub", "argmax", "argmin", "isnan",
                           "isfinite", "contiguous", "view", "reshape", "squeeze", "unsqueeze", "norm"})
_CONFIG_PARAMS = frozenset({"args", "cfg", "config", "conf", "opt", "opts", "hparams", "hps", "flags",
                            "options", "params", "hp", "settings", "configs", "cfgs"})
_SYNC_WORDS = ("gather", "reduce", "sync", "broadcast", "all_", "allreduce", "mean_across", "across", "dist")


def env_key(view, expr: ast.AST) -> str | None:
    """``"RANK"`` for ``os.environ["RANK"]``, ``os.environ.get("RANK", ...)``, ``os.getenv("RANK")``;
    ``""`` when the key is not a constant; None for anything else. ``view``: anything with a
    ``sem`` (a module view, a rule's context)."""
    sem = view.sem
    if isinstance(expr, ast.Subscript):
        if sem.qualname(expr.value) == "os.environ":
            s = expr.slice
            if isinstance(s, ast.Constant) and isinstance(s.value, str):
                return s.value
            return ""
        return None
    if isinstance(expr, ast.Call):
        qn = sem.call_qualname(expr)
        if qn in ("os.environ.get", "os.getenv", "os.environ.__getitem__"):
            if expr.args and isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str):
                return expr.args[0].value
            return ""
    return None


def _int_vals(e: ast.AST):
    """The int constants of ``e`` (``0``, ``-1``, ``[-1, 0]``), or None."""
    def one(x):
        if isinstance(x, ast.UnaryOp) and isinstance(x.op, ast.USub) and isinstance(x.operand, ast.Constant):
            x = x.operand
            return -x.value if type(x.value) is int else None
        return x.value if isinstance(x, ast.Constant) and type(x.value) is int else None
    if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
        vals = [one(x) for x in e.elts]
        return None if any(v is None for v in vals) else vals
    v = one(e)
    return None if v is None else [v]


_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}


def _progress_wrapper(sem, call: ast.Call) -> bool:
    """``tqdm(x)`` (any ``tqdm`` module's) or the builtin ``iter(x)``: yields the items of ``x``."""
    from ..semantic import terminal_name  # lazy

    qn = sem.call_qualname(call)
    if qn is None:
        return terminal_name(call.func) == "iter" and isinstance(call.func, ast.Name)
    return qn.split(".")[0] == "tqdm" and qn.rsplit(".", 1)[-1] in ("tqdm", "trange")


def _placed(call: ast.Call, qn: str, args: list) -> list:
    """``args`` of ``call`` less its placement (``device=``, ``map_location=``)."""
    drop = {id(k.value) for k in call.keywords if k.arg in ("device", "map_location")}
    if qn == "torch.load" and len(call.args) > 1:
        drop.add(id(call.args[1]))
    return [a for a in args if id(a) not in drop] if drop else args


def _rank_compare_uniform(op: ast.cmpop, consts: list[int]) -> bool:
    """``rank <op> consts`` has the same truth value for every valid rank (>= 0): ``rank >= 0``,
    ``local_rank != -1``, ``rank == -1`` ("distributed or not" tests)."""
    if isinstance(op, (ast.In, ast.NotIn)):
        return not any(c >= 0 for c in consts)
    if len(consts) != 1:
        return False  # ``rank == []``: not a comparison with one number
    c = consts[0]
    if isinstance(op, (ast.Eq, ast.NotEq, ast.Gt, ast.LtE)):
        return c < 0
    if isinstance(op, (ast.GtE, ast.Lt)):
        return c < 1
    return False
