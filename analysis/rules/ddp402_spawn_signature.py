from __future__ import annotations

import ast
import os
import re

from ..model import Position, Range, Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..source import SourceText
from ..flow.assignments import reaching_assignment
from ._spawn import project_target, spawn_calls, target_def

_RANK_PARAM = frozenset({"rank", "local_rank", "gpu", "global_rank", "gpu_id", "device_id", "local_gpu",
                         "rank_id", "proc_rank", "process_rank", "gpu_rank", "local_gpu_id"})
# a first parameter named like one of these cannot be meant to receive the process index
_NOT_INDEX_TOKENS = frozenset({"world", "size", "args", "arg", "cfg", "config", "conf", "opt", "opts", "options",
                               "model", "params", "hparams", "dataset", "nprocs", "ngpus", "gpus", "nodes",
                               "settings", "kwargs", "ns", "namespace", "parser", "port", "addr"})
_SPLIT = re.compile(r"[^a-z0-9]+")


class SpawnSignature(Rule):
    """
    ## What it does
    Checks the target of `torch.multiprocessing.spawn(fn, args=(...))` (a function of the same
    file, or one imported from another file of the project, `from engine.worker import run`; that
    one is reported at the spawn; a method of the class spawned as `self.worker`, which is called
    after `self`; or a function of the file handed to a launcher helper that spawns its
    parameter, `run_all(train, 2)`, through up to three helpers, reported at that argument) against
    the call `fn(index, *args)` that every spawned process makes:

    - wrong arity: more required parameters than `1 + len(args)`, more arguments than it takes,
      or a keyword-only parameter without a default;
    - a swapped rank: a later positional parameter is named like the rank (`rank`, `local_rank`,
      `gpu`, ...) while the first one, which receives the process index, is named like something
      else entirely (`world_size`, `args`, `cfg`, `ngpus`...): `def main(world_size, rank)`.

    ## Why is this bad?
    The process index is always passed first. A wrong arity fails in every child:

    ```
    torch.multiprocessing.spawn.ProcessRaisedException:
    -- Process 0 terminated with the following error:
    TypeError: main() missing 1 required positional argument: 'world_size'
    ```

    A swapped signature does not fail: `world_size` silently receives the rank and `rank` the world
    size, so every process calls `init_process_group(rank=2, world_size=0)`-style nonsense and
    hangs in the rendezvous, or several processes claim the same rank.

    ## Example
    ```python
    def main(world_size, rank):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)

    mp.spawn(main, args=(world_size,), nprocs=world_size)
    ```

    ## Use instead
    ```python
    def main(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)

    mp.spawn(main, args=(world_size,), nprocs=world_size)
    ```

    ## Fix safety
    There is no fix: reordering parameters changes every other caller of the function.
    """

    code = "DDP402"
    name = "spawn-signature"
    severity = Severity.ERROR
    requires_text = ("spawn", "start_processes")
    requires_text_all = (("multiprocessing",),)  # torch.multiprocessing.spawn / start_processes

    def finish(self, ctx) -> None:
        seen: set[tuple[int, int]] = set()
        for call in spawn_calls(ctx):
            fn = target_def(ctx, call)
            if fn is None:
                if not self._project_target(ctx, call):
                    self._method_target(ctx, call, seen)
                    self._passed_target(ctx, call, seen)
                continue
            msg = _arity_problem(ctx, fn, call) or _swapped_rank(fn)
            if msg is None or (id(fn), id(call)) in seen:
                continue
            seen.add((id(fn), id(call)))
            ctx.report(_def_head(ctx, fn), msg, related=[(call, "spawned here as fn(index, *args)")])

    @staticmethod
    def _method_target(ctx, call, seen: set) -> None:
        """``mp.spawn(self.worker, ...)``: a method of the enclosing class, bound to ``self``, so it
        is called as ``worker(index, *args)`` after ``self``."""
        fn = get_arg(call, 0, "fn")
        if not (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "self"):
            return
        cls = parent(ctx.sem.enclosing_function(call) or call)
        if not isinstance(cls, ast.ClassDef):
            return
        m = next((d for d in cls.body if isinstance(d, FUNC_TYPES) and d.name == fn.attr), None)
        if m is None or any(_decorator_name(d) in ("staticmethod", "classmethod", "property")
                            for d in m.decorator_list) or (id(m), id(call)) in seen:
            return
        msg = _arity_problem(ctx, m, call, bound=1)
        if msg is not None:
            seen.add((id(m), id(call)))
            ctx.report(_def_head(ctx, m), msg, related=[(call, "spawned here as self.fn(index, *args)")])

    @staticmethod
    def _passed_target(ctx, call, seen: set) -> None:
        """``mp.spawn(fn, args=(world,))`` where ``fn`` is a parameter of the enclosing function and a
        caller in this file passes a function of the file (``run_all(train, 2)``): reported at
        that argument."""
        fn = get_arg(call, 0, "fn")
        outer = ctx.sem.enclosing_function(call)
        if not isinstance(fn, ast.Name) or outer is None or fn.id not in param_names(outer):
            return
        from ..flow import for_context  # lazy: only spawns of a parameter load the flow layer
        from ..flow.context import call_args

        ana = for_context(ctx)
        view = ana.main
        work, args = [(outer, fn.id, 0)], []
        while work:  # up the chain of helpers that pass the function on (``run_all`` -> ``_launch``)
            func, pname, depth = work.pop()
            for site in ana.call_sites(view, func):
                arg = next((a for p, a in call_args(site, func) if p == pname), None)
                up = ctx.sem.enclosing_function(site)
                if isinstance(arg, ast.Name) and up is not None and arg.id in param_names(up) and depth < 3:
                    work.append((up, arg.id, depth + 1))
                elif arg is not None:
                    args.append(arg)
        for arg in args:
            defs = ctx.sem.functions.get(arg.id) if isinstance(arg, ast.Name) else None
            if not defs or len(defs) != 1 or isinstance(parent(defs[0]), ast.ClassDef):
                continue
            target = defs[0]
            msg = _arity_problem(ctx, target, call) or _swapped_rank(target)
            if msg is None or (id(target), id(call)) in seen:
                continue
            seen.add((id(target), id(call)))
            ctx.report(arg, f"{msg} (`{outer.name}` spawns its parameter `{fn.id}`, line {call.lineno})",
                       related=[(call, "spawned here as fn(index, *args)"),
                                (_def_head(ctx, target), f"`{target.name}` is defined here")])

    @staticmethod
    def _project_target(ctx, call) -> bool:
        """A target imported from another file of the project: reported at the spawn, with the
        definition as related information. True when the target was found there."""
        got = project_target(ctx, call)
        if got is None:
            return False
        view, fn = got
        msg = _arity_problem(ctx, fn, call) or _swapped_rank(fn)
        if msg is None:
            return True
        src = SourceText(view.text)
        rel = os.path.relpath(view.path, os.path.dirname(os.path.abspath(ctx.filename))) \
            if ctx.filename and not ctx.filename.startswith("<") else view.path
        ctx.report(get_arg(call, 0, "fn"), f"{msg} (`{fn.name}` is defined in {rel}, line {fn.lineno})",
                   related=[("file", view.path, _def_head(src, fn), f"`{fn.name}` is defined here")])
        return True


def _decorator_name(d) -> str | None:
    d = d.func if isinstance(d, ast.Call) else d
    return d.attr if isinstance(d, ast.Attribute) else d.id if isinstance(d, ast.Name) else None


def _n_args(ctx, call: ast.Call) -> int | None:
    val = get_arg(call, 1, "args")
    if val is None:
        return 0 if not any(k.arg is None for k in call.keywords) and len(call.args) < 2 else None
    if isinstance(val, ast.Name):
        st = reaching_assignment(ctx, val.id, call)
        val = st.value if st is not None else None
    if isinstance(val, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in val.elts):
        return len(val.elts)
    return None


def _arity_problem(ctx, fn, call, bound: int = 0) -> str | None:
    """``bound``: leading parameters already bound (``self`` of a bound method)."""
    n = _n_args(ctx, call)
    a = fn.args
    pos = [*a.posonlyargs, *a.args][bound:]
    required = len(pos) - len(a.defaults)
    kw_required = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
    if kw_required:
        return (f"`{fn.name}` has the keyword-only parameter `{kw_required[0]}` without a default, but "
                "`mp.spawn` passes only positional arguments: TypeError in every process")
    if n is None:
        return None
    given = 1 + n
    if given < required:
        missing = pos[given].arg
        return (f"`mp.spawn` calls `{fn.name}(index, *args)` with {given} argument{'s' if given > 1 else ''}, but it "
                f"requires {required}: TypeError (missing `{missing}`) in every process")
    if given > len(pos) and a.vararg is None:
        return (f"`mp.spawn` calls `{fn.name}(index, *args)` with {given} arguments, but it takes "
                f"{len(pos)}: TypeError in every process (the process index is always passed first)")
    return None


def _swapped_rank(fn) -> str | None:
    pos = [*fn.args.posonlyargs, *fn.args.args]
    if len(pos) < 2:
        return None
    first = pos[0].arg
    toks = set(t for t in _SPLIT.split(first.lower()) if t)
    if not (toks & _NOT_INDEX_TOKENS) or toks & {"rank", "gpu", "idx", "index", "id", "proc", "device"}:
        return None
    for p in pos[1:]:
        if p.arg.lower() in _RANK_PARAM:
            return (f"`{fn.name}`'s first parameter `{first}` receives the process index from `mp.spawn`, and "
                    f"`{p.arg}` receives one of `args`: rank and `{first}` are silently swapped")
    return None


def _def_head(ctx_or_src, fn) -> Range:
    src = getattr(ctx_or_src, "src", ctx_or_src)
    line0 = fn.lineno - 1
    text = src.line(line0)
    start = src.char_col(line0, fn.col_offset)
    i = text.find(fn.name, start)
    end = i + len(fn.name) if i >= 0 else len(text)
    return Range(Position(line0, start), Position(line0, end))
