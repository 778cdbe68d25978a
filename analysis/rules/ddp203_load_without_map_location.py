from __future__ import annotations

import ast

from ..flow.bindings import contains
from ..model import Applicability, Edit, Range, Severity
from ..registry import Rule
from ..flow.devices import device_in_scope
from ..flow.models import LAUNCH_TEXT, is_distributed_script
from ..flow.mentions import mentions, names_string
from ..flow.mode_unbound import single_run_only
from ..flow.rank import rank0_guarded
from ..flow.rank_tests import RANK_NEEDLES
from ._common import (D, DDP_CLASS, OBJECT_COLLECTIVES, OBJECT_COLLECTIVES_WITH_DEVICE, TENSOR_COLLECTIVES,
                      callers_may_exist, gloo_only)
from ..flow.testing import is_test_file
from ..flow.fs_ranks import rank_specific_path
from ._spawn import is_main_guard, runs_in_ranks
from ..semantic import get_arg, parent
from ..source import lowered, nfkc


class LoadWithoutMapLocation(Rule):
    """
    ## What it does
    Checks for `torch.load(...)` without `map_location` in a distributed script (one that calls
    `init_process_group`, wraps in DDP/FSDP or spawns its ranks). Loads that only the main rank
    runs, loads in the launching process of an `mp.spawn` script, loads of a rank-specific file
    (written by the same rank, so already on its device; a name bound in two branches, this rank's
    file where several processes run and a plain one in the branch of `if args.world_size > 1:`
    that one process takes, counts too), loads of a file that the project writes only with command-line settings (every `torch.save(value, <path ending with that file
    name>)` of the project saves an argparse namespace: `flow.origins.settings_only`, or a
    value known on the CPU: `torch.LongTensor(...)`, `torch.arange(n)` without `device=`, `torch.cat`
    or `.long()` of those, an attribute every store of which in the project is one, a load of the
    same file, a state dict gathered with CPU offload, a dict of those: `flow.cpu_saves`), loads whose result only goes to the `load_state_dict` of
    learning-rate schedulers (`torch.optim.lr_scheduler`, Megatron's `OptimizerParamScheduler`,
    the `transformers` schedule factories, through a name bound once to it, a project subclass
    that keeps the library's `state_dict`, or a project factory every `return` of which is one,
    `self.sched = make_schedule(opt, cfg)` after a `self.sched = None` placeholder: a
    scheduler's state holds no tensor; unless a save of the project to that file name is known to
    write another object's state dict, an optimizer's or a module's), and loads whose `if` has a
    `map_location` load in its other branch (a deliberate choice) are not flagged. To stay
    precise, only checkpoint loads are considered: the result goes to `load_state_dict(...)`, or
    the path names a checkpoint (`ckpt`, `checkpoint`, `resume`, `weights`, `model`, `pretrained`,
    `snapshot`, `state`...). A load in a method (the trainer-class shape: `_load_snapshot` called
    from `__init__`, its result going to `self.model.load_state_dict(...)`) is followed through the
    `self.<method>(...)` calls to where the class is built; so is a load in a module-level
    function that such a method calls (`restore(path, self.net)` from `_resume`, which `__init__`
    runs: the class is built on every rank). A load returned by a module-level
    function of the same file (`def read(p): return torch.load(p)`) counts as a checkpoint load
    when every call of that function in the file is one (its result goes to `load_state_dict(...)`,
    or the path argument or the function's name names a checkpoint). A data file (`torch.load("data/train.pt")`) saved from CPU tensors
    comes back on the CPU and is left alone.

    A load in a module-level function of a file that is not distributed itself
    (`utils/checkpoint.py: def load_checkpoint(path): return torch.load(path)`) is reported when a
    distributed file of the same project imports that function and calls it where every rank runs
    it (not behind a main-rank test, not in the launching process of an `mp.spawn` script, not in a
    CPU-only gloo program). The same holds for a method of a class of that file that `__init__`
    reaches through `self.<method>(...)` calls (a trainer that restores its snapshot when built),
    when the distributed file builds the class on every rank, and for a method that the class's own
    code never calls and a distributed file calls on an instance (`runner.resume_from(path)`, or
    `self.ckpt.load(path)` where every binding of `self.ckpt` in the calling class is
    `CheckPoint(...)`) where every rank runs it. A call in a method of a class of the distributed file that no code of
    that file calls (`Accelerator.load_state` calling `load_custom_state`) counts as run on every
    rank when nothing in that method tests for the main rank and the class runs under
    torch.distributed itself (a collective or a rank query of `torch.distributed`, a DDP/FSDP wrap). The checkpoint test then also accepts the caller's side: its result
    going to `load_state_dict(...)`, or a checkpoint-like argument for the path parameter. Names
    that a distributed file star-imports (`from lib.utils import *`) are followed too.

    Library code (a trainer class, a checkpointing module) is often called by no file of its own
    project. A load there, or one whose callers in a distributed script do not show where it runs,
    is reported when the code around it says that it runs on every rank of a distributed job,
    whoever calls it (the message names the reason found):

    1. the function (or a function of the same file that calls it) takes a `map_location`
       parameter and never reads it (`def pt_load(path, map_location=None): return torch.load(f)`);
    2. another load of the same function (or of its callers in the file), else of the same class,
       passes a `map_location`: the author maps checkpoint loads there and forgot this one
       (`model_state = torch.load(p, map_location=...)`, `training_state = torch.load(q)`);
    3. another load of the same function (or of the helpers it calls, or of its callers) reads
       this rank's own file (`f"random_states_{process_index}.pkl"`): the function runs on every
       rank, each with its own rank;
    4. the class holding the load, or the module, builds an `accelerate.Accelerator`: Accelerate
       runs that code in every process;
    5. the class holding the load runs a collective or a rank query of `torch.distributed`
       (`all_reduce`, `barrier`, `get_rank`..., not `is_initialized`) or wraps a model in DDP/FSDP,
       and calls the method holding the load from its own code with no main-rank test around
       the call (a trainer restoring its best weights at the end of `train()`);
    6. the class holding the load moves its state to a device its user chooses: `x.cuda(self.<attr>)`
       or `x.to(self.<attr>)` where `__init__` binds `self.<attr>` to one of its parameters
       (`self._cuda_device = cuda_device`): one process per GPU gives each its own device there,
       while the unmapped checkpoint comes back on the GPU it was saved from.

    Beyond the first reason, the load must be a checkpoint load (as above); test files
    (`test_*.py`: one process, a world fixed by the harness) are left alone, and so is a script of
    its own (`if __name__ == "__main__":`) that starts no process group, except on reason 4
    (`accelerate launch` runs it in every process); reasons 3, 5 and 6 also
    need the file to name CUDA (an XLA or CPU library saves no CUDA tensors); and when the
    project's own calls of the function show where it runs and none of them runs it on every rank
    (each behind a main-rank test, or in a script that never starts a process group), it is not
    reported; for a method, the project's constructions of its class show it too (an instance
    exists only where the class is built: `gen = Generator(...)` in a one-process sampling script).
    A method that its class calls only behind a main-rank test, or only in the branch of a test on
    the distributed mode that a single-process run takes (`if distributed: self.save_shared()`
    / `else: self.save_best()`), is not reported either. A mapped load in *another* function of the module is not a reason, nor is a module
    that merely calls `torch.distributed`. `torch.hub.load_state_dict_from_url` and
    `torch.utils.model_zoo.load_url` without `map_location` are reported on reasons 1 and 2 only
    (weights published on a hub are usually saved from the CPU).

    ## Why is this bad?
    `torch.load` puts every tensor back on the device it was saved from. A checkpoint written by
    rank 0 names `cuda:0`, so *every* rank materialises the whole checkpoint on GPU 0: N copies on
    one GPU. `torch.cuda.set_device(local_rank)` does not change that: the saved location is used
    as it is, not the current device. It runs out of memory

    ```
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ... (GPU 0; ... total capacity)
    ```

    or, short of that, leaves each rank holding memory on a GPU that is not its own and slows
    rank 0 down for the whole run.

    ## Example
    ```python
    checkpoint = torch.load(args.resume)
    model.load_state_dict(checkpoint["model"])
    ```

    ## Use instead
    ```python
    checkpoint = torch.load(args.resume, map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    ```

    ## Fix safety
    The fix adds `map_location=<device>` with the `torch.device` (or device string) variable in
    scope, `f"cuda:{self.gpu_id}"` in a class that wraps its model with `device_ids=[self.gpu_id]`,
    else `map_location="cpu"`; for a function that dropped its own `map_location` parameter, it
    passes that parameter on (`map_location=map_location`). It is **unsafe**: code that relied on
    the loaded tensors being on a GPU (rather than copying them into a module) now gets them on
    the given device.
    """

    code = "DDP203"
    name = "load-without-map-location"
    severity = Severity.WARNING
    fix_availability = "always"
    requires_text = ("load",)

    @classmethod
    def reach(cls, text, filename):
        # a distributed script itself, or a helper that one of the project calls (``_helper_loads``)
        t = nfkc(text)
        if any(n in t for n in LAUNCH_TEXT):
            return True, {}
        # library code that says by itself that it runs on every rank (``_library_loads``)
        low = lowered(t)
        if any(n in low for n in _LIBRARY_NEEDLES):
            return True, {}
        return callers_may_exist(text, filename, _CALLER_NEEDS)

    def finish(self, ctx) -> None:
        loads = ctx.calls_to("torch.load")
        urls = ctx.calls_to(*_URL_LOADS)
        if not loads and not urls:
            return
        if not is_distributed_script(ctx):
            done = _helper_loads(ctx, loads) if loads else set()
            _library_loads(ctx, loads, urls, done)
            return
        if _cpu_only(ctx):
            return  # a CPU-only gloo program: whatever it saved is on the CPU
        done = set()
        for call in loads:
            path = _unmapped_path(ctx, call, loads)
            if path is None or runs_in_ranks(ctx, call) is False:
                continue
            if not _checkpoint_like(ctx, call, path) and not _callers_say_checkpoint(ctx, call, path):
                continue
            if _settings_file(ctx, path) or _scheduler_state(ctx, call):
                continue
            guarded = rank0_guarded(ctx, call)
            if guarded is None:
                guarded = _method_guarded(ctx, call, 0)
            if guarded is not False:
                continue
            done.add(id(call))
            _report(ctx, call, device_in_scope(ctx, call) or _class_device(ctx, call))
        # what the code around a load says when its callers cannot tell (a method whose in-class
        # callers are never called here): the same reasons as for library code
        _library_loads(ctx, loads, urls, done)


_URL_LOADS = ("torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url",
              "torchvision.models.utils.load_state_dict_from_url")
_ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
# what makes a class distributed (``_distributed_class``): the torch.distributed calls that only a
# member of a process group makes (not ``is_initialized``/``is_available``), and the wraps
_DIST_WORK = frozenset({*TENSOR_COLLECTIVES, *OBJECT_COLLECTIVES, *OBJECT_COLLECTIVES_WITH_DEVICE, "barrier",
                        "get_rank", "get_world_size", "monitored_barrier"})
_WRAPS = frozenset({DDP_CLASS, "torch.distributed.fsdp.FullyShardedDataParallel", "torch.distributed.fsdp.fully_shard"})
# the text a library reason needs: a ``map_location`` (a dropped parameter, a mapping sibling), a
# distributed-aware call, or a rank (a per-rank file loaded next to it); lower case
# (reason 6: a device the class is given, on a file that names CUDA)
_LIBRARY_NEEDLES = ("map_location", "distributed", "accelerator", "cuda", *RANK_NEEDLES)
_CALLER_NEEDS = (LAUNCH_TEXT,)  # a caller that matters is a distributed script (is_distributed_script)
_MESSAGE = ("`torch.load` without `map_location` restores tensors to the device they were saved "
            "from (usually cuda:0) on every rank; pass `map_location`")


def _report(ctx, call, dev, extra: str = "", related=()) -> None:
    value = dev if dev is not None else '"cpu"'
    last = max([*call.args, *(k for k in call.keywords)], key=lambda n: (n.end_lineno, n.end_col_offset))
    pos = ctx.src.node_end(last)
    fix = ctx.fix(Applicability.UNSAFE, f"Add `map_location={value}`",
                  [Edit(Range(pos, pos), f", map_location={value}")])
    msg = _MESSAGE
    if ctx.qn(call) in _URL_LOADS:
        msg = msg.replace("`torch.load`", f"`{ctx.qn(call).rsplit('.', 1)[1]}`", 1)
    ctx.report(call, msg + extra, fix=fix, related=related)


def _names_cuda(ctx) -> bool:
    """The code names CUDA: an identifier (``.cuda()``, ``torch.cuda``) or a device string
    (``"cuda"``, ``"cuda:0"``); comments, docstrings and other strings do not count."""
    return mentions(ctx.sem, "cuda", text=ctx.src.text) or names_string(
        ctx.sem, lambda s: s == "cuda" or s.startswith("cuda:"), text=ctx.src.text, needle="cuda")


def _cpu_only(ctx) -> bool:
    inits = ctx.calls_to(D + "init_process_group")
    return bool(inits) and all(gloo_only(ctx, i) for i in inits) and not _names_cuda(ctx)


def _unmapped_path(ctx, call, loads):
    """The path argument of a ``torch.load`` that has no ``map_location`` (and is not a
    rank-specific file, nor one branch of an ``if`` whose other branch maps); None otherwise."""
    if len(call.args) >= 2 or any(k.arg in ("map_location", None) for k in call.keywords):
        return None
    if not call.args and not any(k.arg == "f" for k in call.keywords):
        return None
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    path = call.args[0] if call.args else next(k.value for k in call.keywords if k.arg == "f")
    if rank_specific_path(ctx, path, call) or _other_branch_maps(ctx, call, loads):
        return None
    return path


def _shown(ctx, caller) -> str:
    """The caller's path relative to the folder both files share (``train.py``)."""
    import os

    try:
        common = os.path.commonpath([os.path.abspath(ctx.filename), caller.filename])
        return os.path.relpath(caller.filename, common)
    except ValueError:
        return caller.filename


def _helper_loads(ctx, loads) -> None:
    """A load in a module-level function of a file that is not itself distributed
    (``utils/checkpoint.py: def load_checkpoint(path): return torch.load(path)``), or in a method of
    one of its classes that ``__init__`` reaches through ``self.<method>(...)`` calls (a trainer
    that restores its snapshot when built), reported when a distributed file of the same project
    calls that function (builds that class) where every rank runs it. Returns the ids of the loads
    reported."""
    done: set[int] = set()
    cands: dict[str, list] = {}
    for call in loads:
        path = _unmapped_path(ctx, call, loads)
        if path is None or rank0_guarded(ctx, call) is True or _scheduler_state(ctx, call):
            continue
        entry = _entry_point(ctx, call, outside=True)
        if entry is not None:
            cands.setdefault(entry[0], []).append((call, path, entry[1]))
    if not cands:
        return done
    from ._common import project_callers

    for name, items in cands.items():
        for caller, site, target in project_callers(ctx, {name}, _CALLER_NEEDS):
            if not is_distributed_script(caller) or _cpu_only(caller) or runs_in_ranks(caller, site) is False:
                continue
            guarded = rank0_guarded(caller, site)
            if guarded is None and rank0_guarded(caller, site, callers=False) is None:
                # a method nobody in its file calls: its class says whether every rank runs it
                where = _caller_class_runs_everywhere(caller, site)
            else:
                where = None
            if guarded is not False and where is None:
                continue  # only the main rank loads (or it cannot tell)
            reported = False
            for call, path, fn in items:
                if not _checkpoint_like(ctx, call, path):
                    arg = _argument_for(site, target, path) if fn is target else None
                    if arg is None or not _checkpoint_like(caller, site, arg):
                        continue
                rng = caller.src.node_range(site)
                owner = parent(target)
                if isinstance(owner, ast.ClassDef) and target.name == "__init__":
                    what = f"`{name}` is built"
                elif isinstance(owner, ast.ClassDef):
                    what = f"`{owner.name}.{name}` is called"
                else:
                    what = f"`{name}` is called"
                if where is not None:
                    what += f" by {where}"
                _report(ctx, call, None,
                        f" ({what} on every rank in {_shown(ctx, caller)}, line {rng.start.line + 1})",
                        related=[("file", caller.filename, rng, f"{what} here on every rank")])
                done.add(id(call))
                reported = True
            if reported:
                break  # one caller is enough
    return done


def _caller_class_runs_everywhere(ctx, site) -> str | None:
    """The call ``site`` sits, with no main-rank test around it, in a method of a class that runs
    under torch.distributed (a collective or a rank query of ``torch.distributed``, a DDP/FSDP
    wrap, in its own code): every rank that uses the class runs it. A description, else None."""
    fn = ctx.sem.enclosing_function(site)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef) or is_test_file(ctx.filename):
        return None
    c = _first_call(ctx, cls, lambda q: q.startswith(D) and q[len(D):] in _DIST_WORK or q in _WRAPS)
    if c is None:
        return None
    line = ctx.src.node_range(c).start.line + 1
    return f"`{cls.name}.{fn.name}` (its class runs `{_short_call(ctx, c)}` at line {line})"


def _entry_point(ctx, call, outside: bool = False):
    """(name other files call, the function holding the load) for a load in a module-level
    function, or in a method of a module-level class that its ``__init__`` reaches through
    unguarded ``self.<method>(...)`` calls (the class name then); None otherwise. ``outside``:
    also a method that no code of its class calls (its name then: other files call it on an
    instance), to find where it runs on every rank; not to conclude from its callers that it
    never does (a launcher outside torch, colossalai's, starts the group of a script that seems
    to start none)."""
    fn = next((a for a in ctx.sem.ancestors(call) if isinstance(a, (*_DEFS, ast.Lambda, ast.ClassDef))), None)
    if not isinstance(fn, _DEFS):
        return None
    owner = parent(fn)
    if isinstance(owner, ast.Module):
        return fn.name, fn
    if not isinstance(owner, ast.ClassDef) or not isinstance(parent(owner), ast.Module):
        return None
    if any(not isinstance(d, ast.Name) or d.id not in ("property",) for d in fn.decorator_list):
        return None
    seen, current = set(), fn
    for _ in range(4):
        if current.name == "__init__":
            return owner.name, fn
        seen.add(current.name)
        sites = [c for m in owner.body if isinstance(m, _DEFS) for c in ast.walk(m)
                 if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == current.name
                 and isinstance(c.func.value, ast.Name) and c.func.value.id == "self"]
        if outside and not sites and not current.name.startswith("__"):
            # a method called from outside its class (``self.ckpt.load(path)`` in a launcher
            # whose ``self.ckpt = CheckPoint(...)``): its callers in other files resolve to it
            return current.name, fn
        if len(sites) != 1 or rank0_guarded(ctx, sites[0]) is True:
            return None
        nxt = next((a for a in ctx.sem.ancestors(sites[0]) if isinstance(a, _DEFS)), None)
        if nxt is None or parent(nxt) is not owner or nxt.name in seen:
            return None
        current = nxt
    return None


def _library_loads(ctx, loads, urls, done: set) -> None:
    """Loads that the code around them shows to run on every rank of a distributed job, whoever
    calls them (library code: a trainer class, a checkpointing module). ``loads``: the
    ``torch.load`` calls, ``urls``: the ``load_state_dict_from_url`` ones; ``done``: ids already
    reported. The reasons (the message names the one found):

    1. the function takes a ``map_location`` parameter and never reads it (it meant to map);
    2. another load of the same function or class passes ``map_location`` (the author maps the
       checkpoint loads here; this one was forgotten), not as the other branch of an ``if``;
    3. another load of the same function reads a per-rank file (``f"rng_{rank}.pkl"``,
       not an in-memory buffer): the function runs on every rank, each with its own rank;
    4. the class holding it, or the module, builds an ``accelerate.Accelerator``:
       Accelerate runs that code in every process;
    5. the class holding it calls a collective or a rank query of ``torch.distributed``
       or wraps a model in DDP/FSDP, and calls the method holding the load from its own code,
       unguarded (a trainer restoring its best weights at the end of ``train()``);
    6. the class holding it moves its state to a device its user gives it (``_class_picks_device``).

    Beyond the first: the load must be a checkpoint load (``_checkpoint_like``), the file must not
    be a test file (one process, a harness-fixed world), nor (except for 4) a script that starts no
    process group, for 3, 5 and 6 it must name CUDA (an XLA or CPU library saves no CUDA tensors), and
    the project's own callers, when they show where the function runs, must not all run it on one
    rank. Loads that
    only the main rank runs are left alone, as are CPU-only gloo modules."""
    everything = [*loads, *urls]
    if len(done) == len(everything) or _cpu_only(ctx):
        return
    mapped = [c for c in everything if _maps(ctx, c)]
    test_file = lone_script = None  # computed once, when needed
    for call in everything:
        if id(call) in done:
            continue
        path = _unmapped_url(ctx, call, everything) if call in urls else _unmapped_path(ctx, call, everything)
        if path is None or runs_in_ranks(ctx, call) is False:
            continue
        fn = ctx.sem.enclosing_function(call)
        if fn is None:
            continue  # module level: what runs at import is not library code
        chain = _caller_chain(ctx, fn)
        why = next((w for w in map(_dropped_map_location, chain) if w is not None), None)
        own = why is not None and chain[0] is fn
        if why is None:
            if test_file is None:
                test_file = is_test_file(ctx.filename)
                lone_script = not is_distributed_script(ctx) and any(
                    isinstance(n, ast.If) and is_main_guard(n.test) for n in ctx.sem.tree.body)
            if test_file or not _checkpoint_like(ctx, call, path):
                continue
            why = _accelerate_owner(ctx, fn)
            if why is None and not lone_script:
                why = _mapping_sibling(ctx, call, chain, mapped)
                if why is None and _names_cuda(ctx):
                    why = _per_rank_sibling(ctx, call, chain, loads) or _distributed_class(ctx, fn, call)
                    if why is None and call not in urls:
                        why = _class_picks_device(ctx, fn)
            if why is None or _callers_say_one_rank(ctx, call):
                continue
        if rank0_guarded(ctx, call) is True or _method_guarded(ctx, call, 0) is True:
            continue
        if call not in urls and (_settings_file(ctx, path) or _scheduler_state(ctx, call)):
            continue
        done.add(id(call))
        dev = "map_location" if own else device_in_scope(ctx, call) or _class_device(ctx, call)
        _report(ctx, call, dev, f" ({why})")


def _class_picks_device(ctx, fn) -> str | None:
    """The class holding ``fn`` moves what it holds to a device its user chooses:
    ``x.cuda(self.<attr>)`` / ``x.to(self.<attr>)`` where ``__init__`` binds ``self.<attr>`` to one
    of its parameters (``self._cuda_device = cuda_device``), read by value flow. One process per
    GPU gives each its own device there, while an unmapped checkpoint comes back on the GPU it was
    saved from."""
    from ..semantic import param_names

    cls = _owner_class(fn)
    if cls is None:
        return None
    init = next((m for m in cls.body if isinstance(m, _DEFS) and m.name == "__init__"), None)
    if init is None:
        return None
    params = set(param_names(init)) - {"self"}
    given: set[str] = set()
    for st in ast.walk(init):
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.Name) and st.value.id in params:
            for t in st.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    given.add(t.attr)
    if not given:
        return None
    for c in ctx.sem.calls:
        f = c.func
        if not (isinstance(f, ast.Attribute) and f.attr in ("cuda", "to") and len(c.args) == 1 and contains(cls, c)):
            continue
        a = c.args[0]
        if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self" and a.attr in given:
            line = ctx.src.node_range(c).start.line + 1
            return (f"class `{cls.name}` moves its state to the device it is given (`{_short_call(ctx, c)}(self."
                    f"{a.attr})` at line {line}), while the checkpoint comes back on the GPU it was saved from")
    return None


def _callers_say_one_rank(ctx, call) -> bool:
    """The project's own calls of the function holding ``call`` (or of the class that runs it when
    built) show where it runs, and none runs it on every rank of a distributed job: each is behind
    a main-rank test, in the launching process of an ``mp.spawn`` script, in a CPU-only program, or
    in a script (``if __name__ == "__main__":``) that never starts a process group. Library
    functions that only other library code calls say nothing."""
    entry = _entry_point(ctx, call) or _built_class(ctx, call)
    if entry is None:
        return False
    from ._common import project_callers

    one_rank = False
    for caller, site, _target in project_callers(ctx, {entry[0]}):
        if is_distributed_script(caller):
            if _cpu_only(caller) or runs_in_ranks(caller, site) is False or rank0_guarded(caller, site) is True:
                one_rank = True
                continue
            return False
        if any(is_main_guard(n.test) for n in caller.sem.tree.body if isinstance(n, ast.If)):
            one_rank = True
    return one_rank


def _built_class(ctx, call):
    """(class name, method) for a load in a method of a module-level class: an instance exists only
    where the project builds the class, so its methods run only in the programs that build it
    (``_callers_say_one_rank`` reads those constructions)."""
    fn = next((a for a in ctx.sem.ancestors(call) if isinstance(a, (*_DEFS, ast.Lambda))), None)
    owner = parent(fn) if isinstance(fn, _DEFS) else None
    if isinstance(owner, ast.ClassDef) and isinstance(parent(owner), ast.Module):
        return owner.name, fn
    return None


def _unmapped_url(ctx, call: ast.Call, loads):
    """The url of a ``load_state_dict_from_url(url, model_dir, map_location, ...)`` call that does not
    map (its third parameter), nor is one branch of an ``if`` whose other branch maps; None
    otherwise."""
    if len(call.args) >= 3 or any(k.arg in ("map_location", None) for k in call.keywords):
        return None
    if any(isinstance(a, ast.Starred) for a in call.args) or _other_branch_maps(ctx, call, loads):
        return None
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "url"), None)


def _maps(ctx, call: ast.Call) -> bool:
    """The load passes a ``map_location`` that is not ``None``."""
    pos = 2 if ctx.qn(call) in _URL_LOADS else 1
    got = call.args[pos] if len(call.args) > pos else next(
        (k.value for k in call.keywords if k.arg == "map_location"), None)
    return got is not None and not (isinstance(got, ast.Constant) and got.value is None) \
        and not isinstance(got, ast.Starred)


def _dropped_map_location(fn) -> str | None:
    """``def pt_load(path, map_location=None): return torch.load(path)``: the function's own
    ``map_location`` parameter is never read."""
    from ..semantic import param_names

    if "map_location" not in param_names(fn):
        return None
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id == "map_location" and isinstance(n.ctx, ast.Load):
            return None
    return f"`{fn.name}` takes a `map_location` parameter and never passes it on"


def _owner_class(fn):
    """The class whose method holds ``fn`` (``fn`` itself or a function nested in one)."""
    p = parent(fn)
    while p is not None and not isinstance(p, ast.Module):
        if isinstance(p, ast.ClassDef):
            return p
        p = parent(p)
    return None


def _caller_chain(ctx, fn) -> list:
    """``fn``, then the functions of this file that call it (``helper(...)`` for a module-level
    function, ``self.helper(...)`` in its class for a method), and theirs, two levels up: a load
    extracted into a helper still belongs to the function it was written for."""
    out, frontier = [fn], [fn]
    for _ in range(2):
        nxt = []
        for f in frontier:
            owner = parent(f)
            for c in ctx.sem.calls:
                g = c.func
                if isinstance(owner, ast.Module):
                    ok = isinstance(g, ast.Name) and g.id == f.name
                elif isinstance(owner, ast.ClassDef):
                    ok = isinstance(g, ast.Attribute) and g.attr == f.name and isinstance(g.value, ast.Name) \
                        and g.value.id == "self" and contains(owner, c)
                else:
                    ok = False
                if not ok:
                    continue
                h = ctx.sem.enclosing_function(c)
                if h is not None and all(h is not o for o in out):
                    out.append(h)
                    nxt.append(h)
        frontier = nxt
    return out


def _mapping_sibling(ctx, call, chain, mapped) -> str | None:
    """Another load of the same function (or of a function of ``chain`` that calls it), else of the
    same class, that maps."""
    others = [m for m in mapped if m is not call]
    cls = _owner_class(chain[0])
    scopes = [(f, f"`{f.name}`") for f in chain]
    if cls is not None:
        scopes.append((cls, f"class `{cls.name}`"))
    for scope, what in scopes:
        near = [m for m in others if contains(scope, m)]
        if near:
            line = ctx.src.node_range(near[0]).start.line + 1
            return f"another load of {what} maps its tensors (line {line})"
    return None


def _per_rank_sibling(ctx, call, chain, loads) -> str | None:
    """Another load of the same function (or of a function of ``chain`` that calls it) reads this
    rank's own file (``f"rng_{process_index}.pkl"``, not an in-memory buffer): it runs on every rank."""
    scopes = list(chain)
    for fn in chain:  # and the helpers they call (``states = _load_rng(input_dir, process_index)``)
        owner = parent(fn)
        for c in ctx.sem.calls:
            if not contains(fn, c):
                continue
            g = c.func
            if isinstance(g, ast.Name):
                h = ctx.sem.functions.get(g.id)
                h = h[0] if h and len(h) == 1 and isinstance(parent(h[0]), ast.Module) else None
            elif isinstance(owner, ast.ClassDef) and isinstance(g, ast.Attribute) and isinstance(g.value, ast.Name) \
                    and g.value.id == "self":
                h = next((m for m in owner.body if isinstance(m, _DEFS) and m.name == g.attr), None)
            else:
                h = None
            if h is not None and all(h is not x for x in scopes):
                scopes.append(h)
    for fn in scopes:
        for other in loads:
            if other is call or not contains(fn, other) or not (other.args or other.keywords):
                continue
            p = other.args[0] if other.args else next((k.value for k in other.keywords if k.arg == "f"), None)
            if p is not None and rank_specific_path(ctx, p, other, buffers=False):
                line = ctx.src.node_range(other).start.line + 1
                return f"`{fn.name}` also loads a per-rank file (line {line}), so every rank runs it"
    return None


def _first_call(ctx, scope, pred):
    for c in ctx.sem.calls:
        if (scope is None or contains(scope, c)) and pred(ctx.qn(c) or ""):
            return c
    return None


def _accelerate_owner(ctx, fn) -> str | None:
    """The class holding ``fn``, else the module, builds an ``accelerate.Accelerator``."""
    cls = _owner_class(fn)
    for scope, what in ((cls, f"class `{cls.name}`" if cls is not None else ""), (None, "this module")):
        if scope is None and what != "this module":
            continue
        c = _first_call(ctx, scope, lambda q: q in _ACCELERATORS)
        if c is not None:
            line = ctx.src.node_range(c).start.line + 1
            return f"{what} builds an `Accelerator` (line {line}): every process of the job loads"
    return None


def _distributed_class(ctx, fn, call) -> str | None:
    """The class holding ``fn`` runs a collective or a rank query, or wraps a model in DDP/FSDP, and
    runs the method holding ``call`` from its own code on every rank."""
    cls = _owner_class(fn)
    if cls is None:
        return None
    c = _first_call(ctx, cls, lambda q: q.startswith(D) and q[len(D):] in _DIST_WORK or q in _WRAPS)
    if c is None:
        return None
    # ``self.<method>(...)`` in the class, with no main-rank test around it in its own function
    sites = [s for s in ctx.sem.calls if isinstance(s.func, ast.Attribute) and s.func.attr == fn.name
             and isinstance(s.func.value, ast.Name) and s.func.value.id == "self" and contains(cls, s)]
    if not any(rank0_guarded(ctx, s) is not True for s in sites):
        return None
    line = ctx.src.node_range(c).start.line + 1
    return (f"class `{cls.name}` runs under torch.distributed (`{_short_call(ctx, c)}` at line {line}) and "
            f"calls this on every rank")


def _short_call(ctx, c) -> str:
    t = ctx.text(c.func)
    return t if len(t) <= 40 and "\n" not in t else c.func.attr if isinstance(c.func, ast.Attribute) else t[:40]


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _argument_for(site: ast.Call, fn, path):
    """The argument ``site`` gives for the parameter that ``path`` names (``load(ckpt_path)`` called
    as ``load("runs/last.pt")``); None when ``path`` is not a parameter or the call does not say."""
    if not isinstance(path, ast.Name) or any(isinstance(a, ast.Starred) for a in site.args):
        return None
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if isinstance(parent(fn), ast.ClassDef) and names and names[0] in ("self", "cls"):
        names = names[1:]
    for k in site.keywords:
        if k.arg == path.id:
            return k.value
    if path.id in names and names.index(path.id) < len(site.args):
        return site.args[names.index(path.id)]
    return None


def _method_guarded(ctx, node: ast.AST, depth: int) -> bool | None:
    """For a load in a method (``Trainer._load_snapshot``): False when the method is reached, through
    ``self.<method>(...)`` calls and the class's ``__init__``, from a place every rank runs; True when
    every such place is rank-guarded; None when it cannot tell."""
    if depth > 4:
        return None
    sem = ctx.sem
    fn = next((a for a in sem.ancestors(node) if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    cls = parent(fn)
    if fn is None or not isinstance(cls, ast.ClassDef):
        return None
    if fn.name == "__init__":
        sites = [c for c in sem.calls if isinstance(c.func, ast.Name) and c.func.id == cls.name]
    else:
        sites = [c for c in sem.calls if isinstance(c.func, ast.Attribute) and c.func.attr == fn.name
                 and isinstance(c.func.value, ast.Name) and c.func.value.id == "self"
                 and cls.lineno <= c.lineno <= cls.end_lineno]
        if isinstance(parent(cls), ast.Module):
            # and its calls on an instance from outside the class (``self.ckpt.load(p)`` in another
            # class whose ``self.ckpt`` is always ``CheckPoint(...)``, ``trainer.resume(p)``)
            from ..flow.modern import hub

            an, view = hub(ctx)
            sites += [c for c in an.call_sites(view, fn) if not (cls.lineno <= c.lineno <= cls.end_lineno)]
    if not sites:
        return None
    results = []
    for site in sites:
        r = rank0_guarded(ctx, site)
        if r is not True and single_run_only(ctx, site, sem.enclosing_function(site) or sem.tree):
            r = True  # ``if distributed: ... else: self.save(...)``: a single-process run only
        if r is None:
            r = _method_guarded(ctx, site, depth + 1)
        results.append(r)
    if any(r is False for r in results):
        return False
    if all(r is True for r in results):
        return True
    return None


def _class_device(ctx, node: ast.AST) -> str | None:
    """``f"cuda:{self.gpu_id}"`` when the class wraps its model with ``device_ids=[self.gpu_id]``."""
    cls = next((a for a in ctx.sem.ancestors(node) if isinstance(a, ast.ClassDef)), None)
    fn = next((a for a in ctx.sem.ancestors(node) if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if cls is None or fn is None or not fn.args.args or fn.args.args[0].arg != "self":
        return None
    for c in ctx.calls_to("torch.nn.parallel.DistributedDataParallel"):
        if not (cls.lineno <= c.lineno <= cls.end_lineno):
            continue
        ids = next((k.value for k in c.keywords if k.arg == "device_ids"), None)
        if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1:
            e = ids.elts[0]
            if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                return f'f"cuda:{{self.{e.attr}}}"'
    return None


def _other_branch_maps(ctx, call: ast.Call, loads) -> bool:
    """``if gpu is None: torch.load(p) else: torch.load(p, map_location=loc)``: the author chose."""
    for other in loads:
        if other is call or not any(k.arg == "map_location" for k in other.keywords) and len(other.args) < 2:
            continue
        mine = {id(a): a for a in ctx.sem.ancestors(call)}
        child = other
        for a in ctx.sem.ancestors(other):
            if id(a) in mine and isinstance(a, ast.If):
                in_body_other = child in a.body
                c2 = call
                for b in ctx.sem.ancestors(call):
                    if b is a:
                        break
                    c2 = b
                if in_body_other != (c2 in a.body):
                    return True
                break
            child = a
    return False


_CKPT_WORDS = ("ckpt", "checkpoint", "resume", "weight", "model", "pretrain", "snapshot", "state", "finetune",
               "teacher", "best", "last", "latest", "epoch", "optim")


def _file_name(sem, path) -> str | None:
    """The file name a path expression ends with, when it is written: ``"args.pt"``,
    ``os.path.join(folder, "args.pt")``, ``folder / "args.pt"``; else None."""
    if isinstance(path, ast.Constant) and isinstance(path.value, str):
        name = path.value.replace("\\", "/").rsplit("/", 1)[-1]
        return name or None
    if isinstance(path, ast.Call) and (sem.call_qualname(path) or "") in ("os.path.join", "posixpath.join") \
            and path.args and not path.keywords:
        return _file_name(sem, path.args[-1])
    if isinstance(path, ast.BinOp) and isinstance(path.op, ast.Div):
        return _file_name(sem, path.right)
    return None


def _settings_file(ctx, path) -> bool:
    """The file loaded is one that the project writes only with command-line settings: every
    ``torch.save(value, <path ending with the same file name>)`` of the project (at least one)
    saves an argparse namespace or a literal (``flow.origins.settings_only``:
    ``torch.save(args, os.path.join(out, "model_args.pth"))``). Loaded back, it holds no tensor,
    so no device to restore them to."""
    from ..flow.cpu_saves import CpuSaves
    from ..flow.modern import hub
    from ..flow.origins import settings_only
    from ..flow.saved_fields import file_shape
    from ._common import project_files_naming

    an, main = hub(ctx)
    name = _file_name(ctx.sem, path) or file_shape(main, path, path, 0, an)  # or the name it is bound to, its callers' path
    if not name or "." not in name or name.startswith("JoinedStr("):
        return False
    files = project_files_naming(ctx, {name})
    if not files:
        return False

    def naming(word):
        got = project_files_naming(ctx, {word})
        return None if got is None else [v for _c, v in got]

    cpu = CpuSaves(naming, name, lambda v, p, at: file_shape(v, p, at, 0, an), an)
    saves = 0
    for fctx, view in files:
        for c in view.sem.calls_to("torch.save"):
            where = get_arg(c, 1, "f")
            if (_file_name(view.sem, where) or file_shape(view, where, c, 0, an)) != name:
                continue
            value = get_arg(c, 0, "obj")
            if not settings_only(an, view, value, c) and not cpu.on_cpu(view, value, c):
                return False
            saves += 1
    return saves > 0


def _scheduler_state(ctx, call: ast.Call) -> bool:
    from ..flow.cpu_saves import scheduler_state_load

    return scheduler_state_load(ctx, call, _file_name, _is_load_state_dict)


def _checkpoint_like(ctx, call: ast.Call, path: ast.AST) -> bool:
    text = ctx.text(path).lower()
    if isinstance(path, ast.Name):
        from ..flow.assignments import reaching_value

        val = reaching_value(ctx, path.id, call)
        if val is not None:
            text += " " + ctx.text(val).lower()
    if any(w in text for w in _CKPT_WORDS):
        return True
    # the result is loaded into a module or an optimizer
    p = parent(call)
    while isinstance(p, (ast.Subscript, ast.Attribute, ast.Call)) and not (
            isinstance(p, ast.Call) and _is_load_state_dict(p)):
        p = parent(p)
    if isinstance(p, ast.Call) and _is_load_state_dict(p):
        return True
    st = parent(call)
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
        name = st.targets[0].id
        scope = ctx.sem.scope_of(call)
        lsd = ctx.memo("ddp203.load_state_dict_calls", lambda: [c for c in ctx.sem.calls if _is_load_state_dict(c)])
        for c in lsd:
            if c.args and ctx.sem.scope_of(c) is scope and c.lineno >= call.lineno:
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(c.args[0])):
                    return True
    return False


def _callers_say_checkpoint(ctx, call: ast.Call, path: ast.AST) -> bool:
    """A load in a module-level function of this file that returns it
    (``def load_ckpt(p): return torch.load(p)``), or in a method of a module-level class (its calls:
    ``flow`` ``call_sites``), whose every call in the file is a checkpoint load: the result goes to
    ``load_state_dict(...)`` or the path argument names a checkpoint."""
    fn = next((a for a in ctx.sem.ancestors(call) if isinstance(a, (*_DEFS, ast.Lambda, ast.ClassDef))), None)
    if not isinstance(fn, _DEFS):
        return False
    owner = parent(fn)
    if isinstance(owner, ast.ClassDef) and isinstance(parent(owner), ast.Module) and fn.name != "__init__":
        from ..flow.modern import hub

        an, view = hub(ctx)
        sites = an.call_sites(view, fn)  # ``self.m(...)``, ``Cls(...).m(...)``, ``obj.m(...)``, ``self.x.m(...)``
    elif isinstance(owner, ast.Module):
        sites = [c for c in ctx.sem.calls if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    else:
        return False
    st = parent(call)
    if not isinstance(st, ast.Return):
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
            return False
        name = st.targets[0].id
        if not any(isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id == name
                   for n in ast.walk(fn)):
            return False
    if not sites:
        return False
    for site in sites:
        arg = _argument_for(site, fn, path)
        if _checkpoint_like(ctx, site, arg if arg is not None else site.func):
            continue
        return False
    return True


def _is_load_state_dict(c: ast.Call) -> bool:
    return isinstance(c.func, ast.Attribute) and c.func.attr == "load_state_dict"
