from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg
from ..flow.wrap_sites import wrap_sites
from ..flow.mentions import code_words
from ._common import is_simple_ref, shown_path
from ._loader import DIST_SAMPLER, dataloaders, is_loader_call, has_kwargs, is_eval_name, is_true, sampler_args, target_name

# anything in the code (identifiers, imported modules) that hints the data is already split per rank
_SPLIT_HINTS = ("DistributedSampler", "sampler", "shard", "split_dataset_by_node", "num_replicas",
                "IterableDataset", "DistributedBatchSampler",
                # frameworks that shard a plain DataLoader themselves (``accelerator.prepare(...)``)
                "accelerate", "lightning", "prepare", "deepspeed", "fabric", "horovod", "torch_xla",
                "num_shards")


def _split_hint(sem, text: str | None = None) -> bool:
    """The module's code (never a comment or a string: ``flow.mentions``) names something that
    splits the data per rank, or slices by rank: ``indices[rank::world_size]``."""
    if text is not None and not any(h in text for h in _SPLIT_HINTS) and "::" not in text:
        return False
    words = code_words(sem)
    if any(h in w for w in words for h in _SPLIT_HINTS):
        return True
    for s in sem.by_type.get(ast.Slice, ()) if ast.Slice in sem.wanted else ast.walk(sem.tree):
        if s.__class__ is ast.Slice and s.step is not None and any(
                ("rank" in n or "world" in n) for e in (s.lower, s.step) if e is not None
                for n in _names(e)):
            return True
    return False


def _names(e):
    for n in ast.walk(e):
        if n.__class__ is ast.Name:
            yield n.id.lower()
        elif n.__class__ is ast.Attribute:
            yield n.attr.lower()


_PLAIN_SAMPLERS = ("torch.utils.data.SequentialSampler", "torch.utils.data.RandomSampler",
                   "torch.utils.data.sampler.SequentialSampler", "torch.utils.data.sampler.RandomSampler")


def _discarded_samplers(ctx) -> None:
    """``sampler = DistributedSampler(ds)`` (on the distributed path) overwritten, before anything
    reads it, by ``sampler = SequentialSampler(ds)`` (or ``RandomSampler``) of the same dataset on
    the straight path of the block that holds the first assignment (or an ``if`` around it), and
    a ``DataLoader(..., sampler=sampler)`` after it that only the overwrite reaches
    (``flow.bindings.reaching``): the distributed run builds the per-rank sampler, discards it,
    and every rank walks the whole dataset."""
    from ..flow import for_context
    from ..flow.bindings import reaching

    sem = ctx.sem
    dists = sem.calls_to(DIST_SAMPLER)
    if not dists:
        return
    view = None
    for d in dists:
        st, name = _assigned(d)
        if st is None:
            continue
        ds = get_arg(d, 0, "dataset")
        if ds is None or not is_simple_ref(ds):
            continue
        scope = sem.scope_of(st)
        over = _overwrite(ctx, st, name, ds, scope)
        if over is None:
            continue
        if view is None:
            view = for_context(ctx).main
        for call in dataloaders(ctx):
            arg = next((k.value for k in call.keywords if k.arg == "sampler"), None)
            if not (isinstance(arg, ast.Name) and arg.id == name) or sem.scope_of(call) is not scope \
                    or (call.lineno, call.col_offset) < (over.end_lineno, over.end_col_offset):
                continue
            kind, binds = reaching(view, name, arg)
            if kind != "events" or [id(b) for b in binds] != [id(over)]:
                continue
            ctx.report(
                over,
                f"`{name}` is reassigned to `{ctx.text(over.value)}` before anything reads the "
                f"`DistributedSampler` assigned to it (line {st.lineno}): the DataLoader (line "
                f"{call.lineno}) gets the plain sampler on the distributed path too, so every rank "
                "walks the whole dataset. Drop the reassignment (or keep it for the non-distributed path only)",
                related=[(d, "the DistributedSampler that is discarded"), (call, "the DataLoader that gets the plain sampler")],
            )
            break


def _assigned(d):
    """(statement, name) when ``d`` is assigned to a plain name (``s = d``, ``a, s = x, d``)."""
    from ..semantic import parent

    st = parent(d)
    if isinstance(st, ast.Tuple):
        st, tup = parent(st), st
        if not (isinstance(st, ast.Assign) and st.value is tup and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Tuple) and len(st.targets[0].elts) == len(tup.elts)):
            return None, None
        tgt = st.targets[0].elts[tup.elts.index(d)]
    elif isinstance(st, ast.Assign) and st.value is d and len(st.targets) == 1:
        tgt = st.targets[0]
    else:
        return None, None
    return (st, tgt.id) if isinstance(tgt, ast.Name) else (None, None)


def _overwrite(ctx, st, name, ds, scope):
    """The later ``name = <plain sampler>(<ds>)`` that always replaces ``st``'s value before any
    read of ``name`` (see ``_discarded_samplers``), or None."""
    from ..semantic import parent

    sem = ctx.sem
    anc = st
    while anc is not None and anc is not scope:
        block_owner = parent(anc)
        for field in ("body", "orelse"):
            block = getattr(block_owner, field, None)
            if isinstance(block, list) and anc in block:
                for later in block[block.index(anc) + 1:]:
                    if isinstance(later, ast.Assign) and len(later.targets) == 1 \
                            and isinstance(later.targets[0], ast.Name) and later.targets[0].id == name:
                        v = later.value
                        if isinstance(v, ast.Call) and (sem.call_qualname(v) or "") in _PLAIN_SAMPLERS \
                                and (a := get_arg(v, 0, "data_source")) is not None and ctx.text(a) == ctx.text(ds) \
                                and not _read_between(sem, scope, name, st, later):
                            return later
                        return None
                    if any(isinstance(n, (ast.Return, ast.Raise, ast.Break, ast.Continue)) for n in ast.walk(later)):
                        return None
                break
        if isinstance(block_owner, (ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith,
                                    ast.ExceptHandler, *FUNC_TYPES, ast.ClassDef, ast.Lambda)):
            return None
        anc = block_owner
    return None


def _read_between(sem, scope, name, first, later) -> bool:
    a, b = (first.end_lineno, first.end_col_offset), (later.lineno, later.col_offset)
    return any(n.__class__ is ast.Name and n.id == name and n.ctx.__class__ is not ast.Store
               and a <= (n.lineno, n.col_offset) < b
               for n in ast.walk(scope))


class NoDistributedSampler(Rule):
    """
    ## What it does
    Checks for a script that wraps its model in `DistributedDataParallel` and builds its training
    `DataLoader` without a `sampler` / `batch_sampler`: with `shuffle=True`, or without shuffling
    when the loader is the one the model trains on.

    To stay precise, a file that mentions a `DistributedSampler`, any other sampler, sharding
    (`shard`, `split_dataset_by_node`, `num_replicas`), an `IterableDataset`, or a framework that
    shards plain DataLoaders itself (Accelerate's `prepare`, Lightning, DeepSpeed) is not flagged,
    and neither are loaders named like evaluation loaders, nor a loader whose dataset is already
    this rank's own share: a value that varies by rank (a rank-indexed slice of the rows), wherever
    the slice is taken (a helper, a method of the object that reads the rows, a generator it
    yields from, a class a factory function picks).

    The loader may also come from a data module of the project (`train_loader =
    build_train_loader(train_set, bs)` with the helper in `data/loaders.py`): reported at the call
    when the helper builds `DataLoader(..., shuffle=True)` without a sampler and its module
    mentions no sharding either.

    A loader that does not shuffle (`shuffle=False`, or left out) and has no sampler is reported
    when the program shows it is the *training* loader: a loop walks it (directly, through
    `enumerate`/`tqdm`/`iter`, in a helper that receives it, in a trainer's method, through
    loaders passed in a tuple or a list) and that loop's rounds run `backward()` on a value
    computed from the DDP model's forward (in its body or a function it calls). An evaluation loop
    (no backward in its rounds) stays silent, whatever the loader is called. The dataset must be a
    map-style one (a project class with `__getitem__` and no `__iter__`, or a torchvision dataset)
    built the same on every rank: a construction given a rank-varying argument
    (`Portion(items, rank, world)`) is this rank's own data, and a dataset that draws random
    numbers (in `__init__`, `__getitem__`, ...) under a per-rank seed may order or pick its items
    differently per rank.

    A `DistributedSampler` that is built and then discarded is reported too, in any file: a
    name assigned `DistributedSampler(ds)` (on the distributed path, say) and reassigned
    `SequentialSampler(ds)` or `RandomSampler(ds)` of the same dataset before anything reads it,
    on the straight path of the block that holds the first assignment (or the `if` around it),
    with a `DataLoader(..., sampler=<name>)` after it that only the reassignment reaches
    (`flow.bindings.reaching`). Reported at the reassignment: the distributed run then walks the
    whole dataset on every rank (an evaluation loader, typically).

    ## Why is this bad?
    Without a `DistributedSampler`, every rank iterates over the *whole* dataset (each in its own
    random order). N GPUs then do N times the work per epoch, each "epoch" is really N epochs
    of gradient steps with an N times larger effective batch, and the speed-up from adding GPUs
    never shows up. Nothing errors; the symptom is a distributed run that is no faster per epoch
    than one GPU and converges differently.

    Without shuffling it is worse: every rank iterates the same batches in the same order, so
    (up to random augmentation) the N processes compute the same gradients, the all-reduce
    averages N copies of one gradient, and the extra GPUs add no data at all.

    ## Example
    ```python
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    loader = DataLoader(dataset, batch_size=32, shuffle=True)
    ```

    ## Use instead
    ```python
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    # and call sampler.set_epoch(epoch) at the start of each epoch
    ```

    ## Fix safety
    The fix replaces `shuffle=True` with `sampler=DistributedSampler(<dataset>)` (and
    `shuffle=False` with `sampler=DistributedSampler(<dataset>, shuffle=False)`, which keeps each
    rank's order fixed). It is
    **unsafe**: each rank then sees 1/N of the data per epoch (the intended behaviour, but a change
    to the epoch length, learning-rate schedule and logging), and the loop still needs
    `loader.sampler.set_epoch(epoch)` (DDP301).
    """

    code = "DDP303"
    name = "no-distributed-sampler"
    severity = Severity.WARNING
    fix_availability = "sometimes"
    # the wrap: in this file, or by a helper of a project module it imports (``reach``)
    requires_text = ("DistributedDataParallel", "DistributedSampler", "import")
    requires_text_all = (("DataLoader", "oader"),)  # DataLoader calls, or a project `build_loader` helper

    @classmethod
    def reach(cls, text, filename):
        if "DistributedDataParallel" in text or "DistributedSampler" in text:
            return True, {}
        from ..flow.reach import WRAP_TEXT, reaches  # lazy: only files the text gate admits

        return reaches(filename, text, WRAP_TEXT)

    def finish(self, ctx) -> None:
        _discarded_samplers(ctx)
        if _split_hint(ctx.sem, ctx.src.text) or not wrap_sites(ctx):
            return
        for call in dataloaders(ctx):
            kw = next((k for k in call.keywords if k.arg == "shuffle"), None)
            if kw is None or not is_true(kw.value, ctx.sem) or sampler_args(call) or has_kwargs(call):
                continue
            ds = get_arg(call, 0, "dataset")
            if ds is None:
                continue
            ds_name = ds.id if isinstance(ds, ast.Name) else (ds.attr if isinstance(ds, ast.Attribute) else None)
            if is_eval_name(target_name(call), ds_name):
                continue
            if _own_share(ctx, ds):
                continue
            fix = None
            if is_simple_ref(ds):
                sampler, imp = ctx.ref(DIST_SAMPLER)
                fix = ctx.fix(Applicability.UNSAFE, f"Shard the data: `sampler={sampler}({ctx.text(ds)})`",
                              [ctx.replace(kw, f"sampler={sampler}({ctx.text(ds)})"), *imp])
            ctx.report(
                call,
                "DDP script whose DataLoader shuffles the whole dataset on every rank: without a "
                "DistributedSampler each rank trains on all the data",
                fix=fix,
            )
        self._project_loaders(ctx)
        self._training_loaders(ctx)

    @staticmethod
    def _training_loaders(ctx) -> None:
        """A DataLoader without a sampler that does not shuffle (``shuffle=False`` or left out),
        over a map-style dataset, that a training loop walks: a loop whose rounds run
        ``backward()`` on the DDP model's output (``flow.training_loops``), wherever the loop is
        (this file, a helper given the loader, a trainer's method: ``flow.passes``) and wherever
        the loader is built (``flow.origins``)."""
        from ..flow import for_context  # lazy: only DDP scripts without split hints get here
        from ..flow.origins import branch_origins
        from ..flow.passes import scope_passes
        from ..flow.training_loops import trains, walking_loop
        from ._common import other_call_sites

        ana = for_context(ctx)
        main = ana.main
        callers = other_call_sites(ctx, ana, methods=True)
        scopes = [ctx.sem.tree, *ctx.sem.by_type.get(ast.FunctionDef, ()), *ctx.sem.by_type.get(ast.AsyncFunctionDef, ())] \
            if ast.FunctionDef in ctx.sem.wanted else [ctx.sem.tree, *(n for n in ast.walk(ctx.sem.tree)
                                                                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
        done: set[int] = set()
        asked: set[tuple] = set()
        for scope in scopes:
            for p in scope_passes(ana, main, scope):
                key = (id(p.expr), id(p.walker[1]), *(id(c) for _f, c, _v in p.frames))
                if key in asked:
                    continue
                asked.add(key)
                leaves = branch_origins(ana, p.view, p.expr, p.at, frames=(), limit=10, callers=callers)
                loaders = [(lv, ld, fr) for lv, ld, fr in leaves if is_loader_call(lv.sem, ld)]
                if not loaders or any(id(ld) in done for _, ld, _ in loaders) or len(loaders) + sum(
                        isinstance(e, ast.Constant) and e.value is None for _, e, _ in leaves) != len(leaves):
                    continue  # something else on some path (a framework's loader, a wrapper)
                if not all(_plain_loader(ana, lv, ld, fr) for lv, ld, fr in loaders):
                    continue
                wv, w = p.walker
                loop = walking_loop(wv, w)
                if loop is None:
                    continue
                views = {id(v): v for v in (*p.chain, wv, *(lv for lv, _, _ in loaders))}
                if any(v is not main and _split_hint(v.sem, v.text) for v in views.values()):
                    continue
                got = trains(ana, wv, loop, p.frames)
                if got is None:
                    continue
                lv, ld, _fr = loaders[0]
                done.update(id(x) for _, x, _ in loaders)
                _report_same_batches(ctx, main, p, lv, ld, wv, loop, got)

    @staticmethod
    def _project_loaders(ctx) -> None:
        """``train_loader = build_loader(ds, ...)``: a loader helper of another project file whose
        module never mentions sharding builds ``DataLoader(..., shuffle=True)`` without a sampler."""
        from ..flow import for_context  # lazy: only DDP scripts without split hints get here

        ana = None
        done: set[int] = set()
        for call in ctx.sem.calls:
            if not isinstance(call.func, (ast.Name, ast.Attribute)) or (ctx.qn(call) or "").startswith("torch."):
                continue
            name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr
            if "load" not in name.lower() or is_eval_name(name, target_name(call)):
                continue
            if any(isinstance(a, ast.Name) and is_eval_name(a.id) for a in call.args):
                continue
            if ana is None:
                ana = for_context(ctx)
            got = ana.resolve_call(ana.main, call)
            if got is None or got[0] is ana.main or id(got[1]) in done:
                continue
            view, fn = got
            if view.path is None or _split_hint(view.sem, view.text):
                continue
            loader = _shuffling_loader(view, fn)
            if loader is None:
                continue
            done.add(id(fn))
            from ..source import SourceText  # noqa: PLC0415  (only for the other file's range)

            ctx.report(
                call,
                f"DDP script whose DataLoader (built by `{fn.name}`, {shown_path(ctx, view.path)} line {loader.lineno}) "
                "shuffles the whole dataset on every rank: without a DistributedSampler each rank trains on "
                "all the data",
                related=[("file", view.path, SourceText(view.text).node_range(loader),
                          "the DataLoader shuffles without a sampler here")],
            )


def _own_share(ctx, ds) -> bool:
    """The dataset is already this rank's own share: its value varies by rank (a rank-indexed slice
    of the rows, wherever it is taken: a helper, a method of the dataset's class, a generator it
    yields from, a class a factory picks), so shuffling it shuffles only that share."""
    from ..flow import for_context  # lazy: only shuffling loaders without a sampler get here

    from ..flow.values import CLOCK

    ana = for_context(ctx)
    v = ana.evaluator(ana.main).value(ds)
    return v.varying and v.src.cat != CLOCK  # (a clock-stamped path names a run, not a share)


def _shuffling_loader(view, fn):
    """The ``DataLoader(..., shuffle=True)`` without a sampler or ``**kwargs`` that ``fn`` builds
    (its own body, not under a condition naming evaluation), else None."""
    for c in view.sem.function_calls(fn):
        if not is_loader_call(view.sem, c):
            continue
        kw = next((k for k in c.keywords if k.arg == "shuffle"), None)
        if kw is None or not is_true(kw.value, view.sem) or sampler_args(c) or has_kwargs(c):
            continue
        ds = get_arg(c, 0, "dataset")
        ds_name = ds.id if isinstance(ds, ast.Name) else (ds.attr if isinstance(ds, ast.Attribute) else None)
        if ds is None or is_eval_name(target_name(c), ds_name):
            continue
        return c
    return None


_MAP_STYLE_QNS = ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset")
_RNG = ("random.", "numpy.random.", "torch.rand", "torch.randperm", "torch.randint", "torch.multinomial")


def _plain_loader(ana, lv, ld, fr) -> bool:
    """``ld`` (a DataLoader of ``lv``) has no sampler nor ``**kwargs``, does not shuffle (``shuffle``
    left out or false), and walks a map-style dataset built the same on every rank: every origin
    of its dataset is a construction of a project class with ``__getitem__`` (no ``__iter__``) or
    of torchvision's datasets, none given a rank-varying argument (a shard of its own), none from a
    module that names a sharding, and none drawing random numbers in a method under a per-rank
    seed (its own item order, or the item an index gives, may then differ between ranks)."""
    from ..flow.origins import branch_origins
    from ..flow.records import class_chain

    if sampler_args(ld) or has_kwargs(ld):
        return False
    kw = next((k for k in ld.keywords if k.arg == "shuffle"), None)
    if kw is None and len(ld.args) > 2:
        kw = ld.args[2]
    elif kw is not None:
        kw = kw.value
    if kw is not None and not _is_false(kw, lv.sem):
        return False
    ds = get_arg(ld, 0, "dataset")
    if ds is None:
        return False
    ev = ana.evaluator(lv)
    if any(ev.value(a).varying for a in (*ld.args, *(k.value for k in ld.keywords))):
        return False
    got = branch_origins(ana, lv, ds, ld, frames=fr, limit=10)
    if not got or len(got) > 8:
        return False
    for dv, dc, _f in got:
        if not isinstance(dc, ast.Call) or (dv is not lv and _split_hint(dv.sem, dv.text)):
            return False
        dev = ana.evaluator(dv)
        if any(dev.value(a).varying for a in (*dc.args, *(k.value for k in dc.keywords))):
            return False  # ``ShardSet(files, rank=rank)``: a dataset of this rank's own
        qn = dv.sem.call_qualname(dc) or ""
        if qn.startswith("torchvision.datasets.") or qn in _MAP_STYLE_QNS:
            continue
        cls = ana.resolve_class(dv, dc.func)
        if cls is None:
            return False
        chain = class_chain(ana, *cls)
        methods = {f.name: (v, f) for v, c in reversed(chain) for f in c.body if isinstance(f, FUNC_TYPES)}
        if "__getitem__" not in methods or "__iter__" in methods or any(_split_hint(v.sem, v.text) for v, _c in chain):
            return False
        drawing = [v for v, f in methods.values() if _draws(v, f)]
        if drawing and _per_rank_seed(ana, (ana.main, lv, dv, *drawing)):
            return False  # its items (or which item an index gives) may come from a per-rank stream
    return True


def _is_false(node, sem) -> bool:
    from ..torch_api import constant_of

    if not isinstance(node, ast.Constant):
        node = constant_of(sem, node)
    return isinstance(node, ast.Constant) and node.value is False


def _draws(view, fn) -> bool:
    """``fn`` draws random numbers (``random.shuffle(self.items)``)."""
    return any(isinstance(c, ast.Call) and (view.sem.call_qualname(c) or "").startswith(_RNG) for c in ast.walk(fn))


def _per_rank_seed(ana, views) -> bool:
    """One of ``views`` seeds a random generator with a value that differs between ranks."""
    from ..flow.seeds import seeds_per_rank

    return any(seeds_per_rank(ana, v) for v in {id(v): v for v in views}.values())


def _report_same_batches(ctx, main, p, lv, ld, wv, loop, got) -> None:
    """The finding: on the DataLoader when this file builds it; else where the loader enters this
    file (the call that builds it, the loop that walks it, the call that hands it on)."""
    from ..flow.bindings import reaching
    from ..flow.findings import node_related
    bv, back = got
    related = []
    fix = None
    if lv is main:
        at = ld
        ds = get_arg(ld, 0, "dataset")
        kw = next((k for k in ld.keywords if k.arg == "shuffle"), None)
        if kw is not None and ds is not None and is_simple_ref(ds):
            sampler, imp = ctx.ref(DIST_SAMPLER)
            code = f"sampler={sampler}({ctx.text(ds)}, shuffle=False)"
            fix = ctx.fix(Applicability.UNSAFE, f"Shard the data: `{code}`", [ctx.replace(kw, code), *imp])
    else:
        related.append(node_related(ctx, lv.path, ld, "the DataLoader, without a sampler"))
        at = None
        if p.view is main:
            at = p.expr
            if isinstance(p.expr, ast.Name):
                kind, evs = reaching(main, p.expr.id, p.at)
                if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) \
                        and isinstance(evs[0].value, ast.Call):
                    at = evs[0].value
        elif p.frames and p.frames[0][2] is main:
            at = p.frames[0][1]
        if at is None:
            return
    related.append(node_related(ctx, bv.path, back, "the backward of the DDP model's output in the loop that walks it"))
    ctx.report(
        at,
        "DDP training DataLoader without a sampler that does not shuffle: every rank iterates the same "
        "batches in the same order, so the processes compute the same gradients and adding GPUs adds "
        "no data (use a DistributedSampler)",
        related=related,
        fix=fix,
    )
