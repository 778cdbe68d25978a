"""What runs at import time: the first use of the process group on a module's unconditional top
level.

Importing a module runs its top-level statements (and its class bodies). When one of them calls
``dist.get_rank()`` / ``get_world_size()`` / a collective / ``new_group``, builds a DDP model or a
``DistributedSampler`` without ``num_replicas``/``rank``, or calls a project helper whose
unconditional path does (``summaries.requires_pg_of``), the import itself needs an initialised
process group. Project modules the module imports at its top level are followed (to a small depth,
across files).

Only the unconditional top level counts: statements under ``if`` (``if dist.is_initialized():``,
``if __name__ == "__main__":``), loops, and ``try`` blocks are skipped, function bodies are not
run, and a module that initialises the process group itself stops the search.
"""
from __future__ import annotations

import ast

from ..torch_api import D
from ..semantic import FUNC_TYPES, get_arg, parent
from .calls import is_main_guard  # noqa: F401  (re-exported: rules import it from here)
from .records import callee_name
from .summaries import INIT, WRAPPERS, Effect, _calls_in, _inits

_PG_USES = frozenset(D + n for n in ("get_rank", "get_world_size", "new_group", "new_subgroups", "all_reduce",
                                     "all_gather", "broadcast", "barrier", "reduce", "gather", "scatter",
                                     "all_gather_object", "broadcast_object_list", "gather_object",
                                     "scatter_object_list", "all_to_all", "reduce_scatter",
                                     "all_gather_into_tensor", "reduce_scatter_tensor", "monitored_barrier"))
_SAMPLER = "torch.utils.data.DistributedSampler"
_MAX_DEPTH = 3
_NOT_PROJECT = frozenset({"torch", "os", "sys", "math", "time", "json", "logging", "numpy", "np", "random",
                          "argparse", "re", "collections", "functools", "itertools", "typing", "pathlib",
                          "shutil", "subprocess", "datetime", "copy", "pickle", "warnings", "dataclasses",
                          "torchvision", "transformers", "tqdm", "yaml", "wandb", "__future__", "abc", "enum",
                          "contextlib", "glob", "io", "inspect", "socket", "tempfile", "traceback", "uuid",
                          "pandas", "scipy", "sklearn", "PIL", "cv2", "matplotlib", "tensorboardX", "einops",
                          "timm", "accelerate", "deepspeed", "apex", "hydra", "omegaconf", "lightning",
                          "pytorch_lightning", "fairscale", "huggingface_hub", "safetensors"})


class ImportUse:
    """The first process-group use an import runs: ``effect`` (in ``effect.path``) reached
    through the project modules in ``modules`` (the imported one first)."""

    __slots__ = ("effect", "modules")

    def __init__(self, effect: Effect, modules: tuple[str, ...]):
        self.effect, self.modules = effect, modules


def _is_main_test(st) -> bool:
    return is_main_guard(st)


def imported_views(hub, view, st: ast.stmt):
    """(module name, view) of every project module the import statement ``st`` runs."""
    out = []
    if isinstance(st, ast.Import):
        for a in st.names:
            parts = a.name.split(".")
            if parts[0] in _NOT_PROJECT:
                continue
            for i in range(1, len(parts) + 1):
                v = hub.module_view(view, ".".join(parts[:i]), 0)
                if v is not None:
                    out.append((".".join(parts[:i]), v))
    elif isinstance(st, ast.ImportFrom):
        mod = st.module or ""
        if st.level == 0 and (not mod or mod.split(".")[0] in _NOT_PROJECT):
            return out
        v = hub.module_view(view, mod, st.level)
        if v is not None:
            out.append((mod or ".", v))
        for a in st.names:
            if a.name == "*":
                continue
            sub = f"{mod}.{a.name}" if mod else a.name
            v2 = hub.module_view(view, sub, st.level)
            if v2 is not None and v2 is not v:
                out.append((sub, v2))
    return out


def _has_init(node: ast.AST, sem) -> bool:
    return any(isinstance(n, ast.Call) and (sem.call_qualname(n) or "") == INIT for n in ast.walk(node))


def top_level_runs(stmts):
    """(statement, calls) for what runs unconditionally at import, in order; None marks a point
    after which nothing is certain (a statement that may initialise the group is checked by the
    caller)."""
    for st in stmts:
        if isinstance(st, (ast.If, ast.While)) and not _is_main_test(st):
            test = st.test
            while isinstance(test, ast.BoolOp):
                test = test.values[0]  # ``a and b``: only ``a`` surely runs
            yield st, _calls_in(test, enter=True)  # the test itself runs
            yield st, None
            continue
        if isinstance(st, (ast.For, ast.AsyncFor)):
            yield st, _calls_in(st.iter, enter=True)
            yield st, None
            continue
        if isinstance(st, (ast.If, ast.Try)) or st.__class__.__name__ in ("Match", "TryStar"):
            yield st, None
            continue
        if isinstance(st, FUNC_TYPES):
            yield st, [c for d in st.decorator_list for c in _calls_in(d, enter=True)]
            continue
        if isinstance(st, ast.ClassDef):
            head = [c for x in (*st.decorator_list, *st.bases, *(k.value for k in st.keywords)) for c in _calls_in(x, enter=True)]
            yield st, head
            yield from top_level_runs(st.body)
            continue
        if isinstance(st, (ast.With, ast.AsyncWith)):
            yield st, [c for it in st.items for c in _calls_in(it.context_expr, enter=True)]
            yield from top_level_runs(st.body)
            continue
        yield st, _calls_in(st, enter=True)


def initialises(hub, view, c: ast.Call) -> bool:
    """``c`` is ``init_process_group`` or a project function that calls it."""
    if (view.sem.call_qualname(c) or "") == INIT:
        return True
    target = hub.resolve_call(view, c)
    return target is not None and _inits(hub, target)


def use_of_call(hub, view, c: ast.Call):
    """The process-group use ``c`` makes on its unconditional path (an Effect), else None."""
    qn = view.sem.call_qualname(c) or ""
    if qn in _PG_USES:
        return Effect(qn[len(D):], c, view.path, what=f"`{qn[len(D):]}()`")
    if qn in WRAPPERS:
        return Effect("DistributedDataParallel", c, view.path, what="the DistributedDataParallel constructor")
    if qn == _SAMPLER and not (get_arg(c, 1, "num_replicas") is not None and get_arg(c, 2, "rank") is not None):
        return Effect("DistributedSampler", c, view.path,
                      what="`DistributedSampler(...)` without `num_replicas` and `rank`")
    if qn.startswith(("torch.", "os.", "sys.", "logging.", "math.", "numpy.", "json.", "time.")):
        return None
    return use_through_call(hub, view, c)


def use_through_call(hub, view, c: ast.Call):
    """The process-group use that the project function ``c`` calls makes on its unconditional
    path (``hub.requires_pg_of``), seen through the call (an Effect), else None."""
    target = hub.resolve_call(view, c)
    if target is None:
        return None
    req = hub.requires_pg_of(*target)
    return None if req is None else req.through(callee_name(target))


def import_use(hub, view, depth: int = 0) -> ImportUse | None:
    """The first use of the process group that importing ``view``'s module runs, or None."""
    memo = view.memo.setdefault("import_use", {})
    key = ("v", depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    if depth > _MAX_DEPTH:
        return None
    memo[key] = None  # import cycles: the module is already being imported
    hub._view_stack.append(view)
    try:
        got = _import_use(hub, view, depth)
    finally:
        hub._view_stack.pop()
    memo[key] = got
    return got


def _import_use(hub, view, depth):
    sem = view.sem
    for st, calls in top_level_runs(view.tree.body):
        if calls is None:
            if _has_init(st, sem):
                return None
            continue
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            for name, v2 in imported_views(hub, view, st):
                got = import_use(hub, v2, depth + 1)
                if got is not None:
                    return ImportUse(got.effect, (name, *got.modules))
            continue
        for c in calls:
            if initialises(hub, view, c):
                return None
            eff = use_of_call(hub, view, c)
            if eff is not None:
                return ImportUse(eff, ())
    return None


_ONCE_STOP = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
              ast.Lambda, ast.ClassDef)


def _outside_loops(node: ast.AST) -> ast.AST | None:
    """The function (or module) whose every run runs ``node`` at most once: no loop, comprehension,
    lambda or class body between them; None when there is one."""
    p = parent(node)
    while p is not None:
        if isinstance(p, _ONCE_STOP):
            return None
        if isinstance(p, (*FUNC_TYPES, ast.Module)):
            return p
        p = parent(p)
    return None


def once_per_run(ctx, call: ast.Call) -> list[str] | None:
    """``call`` runs at most once each time its module runs (as a script or an import, which
    Python does once per process): in no loop, comprehension or lambda, on the module's top level
    or in an undecorated module-level function whose only uses in the module are one call made
    that way from the top level (``if __name__ == "__main__": main()``). Returns the names of
    those functions (``[]`` on the top level): another module that names one may call it again,
    which the caller judges. None when it cannot tell."""
    from .calls import call_sites_here  # lazy

    names: list[str] = []
    node = call
    for _ in range(4):
        holder = _outside_loops(node)
        if holder is None:
            return None
        if isinstance(holder, ast.Module):
            return names
        if holder.decorator_list or not isinstance(parent(holder), ast.Module):
            return None  # a decorator may run it again (``@hydra.main`` in a multirun); a method
        sites = call_sites_here(ctx, holder)
        if len(sites) != 1 or len(ctx.sem.functions.get(holder.name, ())) != 1:
            return None
        names.append(holder.name)
        node = sites[0]
    return None
