from __future__ import annotations

import ast
import os
import re

from ..model import Position, Range, Severity
from ..registry import Rule
from ..semantic import get_arg
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
    one is reported at the spawn) against the call `fn(index, *args)` that every spawned process
    makes:

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
                self._project_target(ctx, call)
                continue
            msg = _arity_problem(ctx, fn, call) or _swapped_rank(fn)
            if msg is None or (id(fn), id(call)) in seen:
                continue
            seen.add((id(fn), id(call)))
            ctx.report(_def_head(ctx, fn), msg, related=[(call, "spawned here as fn(index, *args)")])

    @staticmethod
    def _project_target(ctx, call) -> None:
        """A target imported from another file of the project: reported at the spawn, with the
        definition as related information."""
        got = project_target(ctx, call)
        if got is None:
            return
        view, fn = got
        msg = _arity_problem(ctx, fn, call) or _swapped_rank(fn)
        if msg is None:
            return
        src = SourceText(view.text)
        rel = os.path.relpath(view.path, os.path.dirname(os.path.abspath(ctx.filename))) \
            if ctx.filename and not ctx.filename.startswith("<") else view.path
        ctx.report(get_arg(call, 0, "fn"), f"{msg} (`{fn.name}` is defined in {rel}, line {fn.lineno})",
                   related=[("file", view.path, _def_head(src, fn), f"`{fn.name}` is defined here")])


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


def _arity_problem(ctx, fn, call) -> str | None:
    n = _n_args(ctx, call)
    a = fn.args
    pos = [*a.posonlyargs, *a.args]
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
