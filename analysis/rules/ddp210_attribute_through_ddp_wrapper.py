from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import param_names, parent
from ..flow.assignments import stmt_list_of
from ..flow.modern import hub
from ..torch_api import DDP_CLASS
from ..flow.testing import is_test_file
from ..flow.calls import call_args
from ..flow.same_tests import ruled_out_by_same_test
from ..flow.wrapped import (NOT_DDP_PLUGINS, bound_at, is_unwrap, branch_excludes_wrap, contradicts, dominating_binding, guards,
                            handles_attribute_error, implied, is_model_class, tested_values, wrap_origins)
from ..flow.attr_order import own_bindings
from ..flow.kernel import one_process_notebook
from ..flow.exclusive import exclusive_runs
from ..flow.wrap_flags import flag_excludes_wrap
from ._common import shown_path


class AttributeThroughDdpWrapper(Rule):
    """
    ## What it does
    Checks for an attribute read through a `DistributedDataParallel` wrapper that the wrapper does
    not have: `model.generate(...)`, `self.model.tokenize(...)`, `model.config` where `model` may
    hold `DDP(...)`.

    The value is followed through the program model (`flow.origins`): assignments, tuple unpacking
    (`model, opt = build(cfg)`), `self.<attr>` across the methods of a class, parameters filled by
    the calls of their module (and, for a module-level function, a caller in another file of the
    project, `main.py` passing `model = DDP(model)` to `train_one_epoch(model, ...)`; for a
    `self.<attr>` that `__init__` binds to one of its parameters, `self.autoencoder = autoencoder`,
    a constructor call in another file, `Trainer(autoencoder=model)`), the field of an instance
    its construction binds (`trainer.model` of `trainer = Trainer(cfg)`, where a base class in
    another module keeps `self.model = model` and the subclass passes the wrapper to
    `super().__init__(model, ...)`; a package's `from .defaults import *` re-export is followed),
    and helper
    functions of this file or another module of the project that return the wrapper. A free name
    of a nested function (`def save_checkpoint(step):` inside `main`) is read as the value the
    enclosing function gives it where the nested function is defined, when the enclosing function
    binds it only before that definition. A value that *may* be the wrapper counts: `model = DDP(m) if
    distributed else m` fails on the distributed path, which is the one a single-GPU test never
    ran.

    It also checks a component of a `diffusers` pipeline built from such a value:
    `StableDiffusionPipeline(text_encoder=text_encoder, ...)`,
    `DiffusionPipeline.from_pretrained(name, unet=unet)` where the argument (a name or
    `self.<attr>`) may be the wrapper. The pipeline reads the component's own attributes (`dtype`,
    `config`) and `save_pretrained` saves each component by looking up its class, which is then
    `DistributedDataParallel`: saving fails, or skips the component.

    It also checks a type test of a model class on a value that may be the wrapper:
    `isinstance(model, Detector)`, `type(model) in [CLIP, CustomTextCLIP]`, where every class named
    is a model class (a project `nn.Module` subclass, a `torch.nn` layer, a `transformers` /
    `diffusers` model class). The wrapper is none of them, so the test is false under DDP and the
    code silently takes the other branch (or an `assert` fails). A predicate helper (`def
    is_clip(m): return type(m) in [...]`) is judged at its calls, and a parameter of a
    module-level function (or of a module-level class's `__init__`) counts as the wrapper when a
    caller in another file of the project passes it (`main.py` calls `train_one_epoch(model, ...)`
    or `WithAugment(model)` with `model = DDP(model)`). A test that also
    names a DDP class or asks `hasattr(model, "module")`, or that decides an unwrap (`model if
    isinstance(model, Net) else model.module`), is not flagged.

    Not flagged: an attribute that `DistributedDataParallel` or `nn.Module` has (`parameters`,
    `state_dict`, `train`, `eval`, `to`, `no_sync`, `module`, `register_forward_hook`, ...); an
    attribute the code sets on the wrapper itself (`model.foo = ...`, `setattr(model, "foo", ...)`)
    or on its class (`type(model).foo = ...`, `model.__class__.foo = ...`);
    a value that was unwrapped on some path (`model = model.module`, `getattr(model, "module",
    model)`, `model.module if hasattr(model, "module") else model`); a read under a test of the
    same value (`if hasattr(model, "generate")`, `if isinstance(model, DDP)`, a flag bound to one,
    `has_custom = hasattr(model, "f")` then `if has_custom:`, or a predicate asked about it first:
    `is_clip(model) and model.output_dict`), inside a `try` that
    catches `AttributeError`, or on the other branch of the test that guards the wrap (`if
    args.distributed: model = DDP(model)` ... `if not args.distributed: model.generate()`, also
    after an `assert not distributed` or an `if distributed: raise` in an enclosing block, or through
    the calls that lead to each: `if cfg.fsdp: self._setup_fsdp() else: self._setup_ddp()`, also when
    the read is in a helper of another module that only the FSDP branch calls); a read
    under the same unchanged test as an earlier rebinding of the name (`if is_main: model =
    accelerator.unwrap_model(model)` ... `if is_main: model.save_weights(path)`); a
    subclass of `DistributedDataParallel` (which may define `__getattr__`). A `self.<attr>` wrapped
    in a method other than `__init__` (or a method `__init__` calls) is not assumed to be wrapped
    when another method reads it: the class's users call its methods in an order the rule does not
    see (`task.compile()` before `task.prepare_distributed()`); and a method that binds the
    attribute to the plain module and reads it before its own call of the wrapping method (`self.
    _wrap()`; a callback it hands to a method of the class, `self.on_rank0(lambda: ...)`, counts as
    run there) does not see the wrap. Statement order decides within the method that wraps: a read
    before its own `self.model = DDP(self.model)` sees the bare module (unless a loop brings the
    read round again), and so does a read in a method that only that method calls, before the wrap
    (`self._freeze()` in `__init__` above the wrap, with no other use of `_freeze` in the module). In a test file (`test_*.py`), where
    a harness runs a function's modes in fixed combinations, a conditional wrap and a read under an
    `if` count only when the wrap sits under the same tests (`if with_fsdp: ... else: model =
    DDP(model)` and `if method == "grad_to_none": model.trunk` may never hold together).

    A value the code unwraps itself only under a main-rank test (`if accelerator.is_main_process:
    model = accelerator.unwrap_model(model)`, `if rank == 0: net = net.module`, also one element of
    a tuple assignment) and then reads on every rank (after that `if`, not under the same test) is
    flagged too, wherever it came from: the unwrap says it is a wrapper, and on the other ranks
    it still is. Not when another rank unwraps it too on some path (an `else` that unwraps).

    Accelerate's `accelerator.prepare(model, ...)` returns a `DistributedDataParallel` wrapper when
    it runs on several processes (the default multi-GPU configuration), so a read of the model's
    own attributes on its result (`model.generate`, `model.save_pretrained`, `model.config`) is the
    same bug; the element of a tuple result is matched to its argument (`model, opt, dl =
    accelerator.prepare(model, opt, dl)`), which must be built as a module (a `torch.nn` layer, a
    project `nn.Module` class, a `transformers`/`diffusers` model class, built or
    `from_pretrained`, a torchvision or timm model, `peft.get_peft_model`), or be used as the trained model where the result is bound (its
    function, or the methods of its class for `self.model`): called, with that call's result
    reaching a `backward` (`loss = model(**batch).loss; accelerator.backward(loss)`), or handed to
    `accelerator.accumulate(model)` or, elsewhere, to `accelerator.unwrap_model(model)` (the code
    itself takes it for a model Accelerate wraps; `flow.wrapped.trained_as_model`: an optimizer, a
    loader or a scheduler is none of these). A file that uses Accelerate need not spell "torch" for this rule.
    `device_placement=[...]` only says whether Accelerate moves the model: `accelerator.prepare(model,
    device_placement=[False])` wraps it all the same. An `Accelerator` built with a DeepSpeed, FSDP,
    Megatron-LM or tensor-parallel plugin (one that is never None: `deepspeed_plugin=make_plugin(args)`
    where the helper returns None when its option is off, or `plugin if args.zero else None`, leaves
    the plain DDP path open and is flagged), or code that reads that plugin from the accelerator's state
    (`getattr(accelerator.state, "deepspeed_plugin", None)`) or gathers or partitions parameters
    with DeepSpeed ZeRO (`deepspeed.zero.GatheredParameters`, `deepspeed.zero.Init`), or builds
    Accelerate's DeepSpeed stand-ins (`DummyOptim`, `DummyScheduler`: the optimizer is the DeepSpeed
    config's, and without that plugin there is none): written for
    engines that forward attribute reads, a test file (its harness runs one process), a notebook that never calls
    `notebook_launcher` (its kernel is one process), or a read under a test of the
    accelerator's mode (`if accelerator.distributed_type == DistributedType.XLA:`) is not flagged.

    The attributes the wrapper has are frozen from torch 2.13: `dir(DistributedDataParallel)` (its
    methods and `nn.Module`'s) plus the instance attributes its `__init__` sets (`vars()` of a
    wrapper built on a one-process gloo group), plus `module`. `nn.Module.__getattr__` looks only
    in the wrapper's own `_parameters`, `_buffers` and `_modules`, which hold nothing but `module`.

    ## Why is this bad?
    `DistributedDataParallel` does not forward attribute lookups to the module it wraps. Code that
    works on one GPU, where the model is not wrapped, fails as soon as it runs distributed:

    ```
    AttributeError: 'DistributedDataParallel' object has no attribute 'generate'
    ```

    ## Example
    ```python
    model = DDP(model, device_ids=[local_rank])
    ...
    tokens = model.generate(prompt)
    ```

    ## Use instead
    ```python
    model = DDP(model, device_ids=[local_rank])
    ...
    tokens = model.module.generate(prompt)
    ```

    Where the wrap is conditional, unwrap first: `getattr(model, "module", model).generate(prompt)`.
    With Accelerate: `accelerator.unwrap_model(model).generate(prompt)`.

    ## Fix safety
    Where every value the expression may hold is the wrapper, the fix reads through `.module`
    (`model.module.generate`). It is **unsafe**: a custom method that runs the model's forward
    (`self(x)`) then bypasses DDP's forward, so it no longer synchronises gradients when its result
    is trained on (see DDP207). Where the wrap is conditional, `.module` would fail on the other
    path, so no fix is offered.
    """

    code = "DDP210"
    name = "attribute-through-ddp-wrapper"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    node_types = (ast.Attribute,)
    # every finding is an attribute read (``x.attr``, ``getattr(x, "attr")``); what narrows the
    # files is the reach gate below (the wrap may be in another module, or a base class)
    requires_text = (".", "getattr")
    # ``accelerator.prepare(model)`` builds the wrapper in a file that need not spell "torch"
    base_text = ("torch", "ccelerat")

    @classmethod
    def reach(cls, text, filename):
        # the wrap: an Accelerate ``prepare`` (``accelerator.prepare(model)``, an ``Accelerator`` of a
        # base class), or a DDP wrapper in this file or a project module it imports (the flow rules'
        # text-level import graph: ``DistributedDataParallel`` holds "Parallel")
        if "prepare" in text or "ccelerat" in text:
            return True, {}
        from ..flow.reach import reaches  # lazy: only files the text gate admits

        got = reaches(filename, text)
        if got[0]:
            return got
        # a type test of a helper's parameter that a caller in another file fills with the wrapper
        from ._common import callers_may_exist

        more = callers_may_exist(text, filename, (("DistributedDataParallel",),))
        return more[0], {**got[1], **more[1]}

    def visit(self, node: ast.Attribute, ctx) -> None:
        if not isinstance(node.ctx, ast.Load):
            if isinstance(node.ctx, ast.Store):
                ctx.memo("ddp210.stores", list).append(node)
            return
        if node.attr in DDP_ATTRIBUTES:
            return
        holder = node.value
        if not _holder(holder) or (isinstance(holder, ast.Name) and (
                holder.id in ("self", "cls") or ctx.qn(holder) is not None)):
            return  # ``self.x`` of a method, ``torch.x``/``np.x`` of an imported module: not a wrapper
        ctx.memo("ddp210.reads", list).append(node)

    def finish(self, ctx) -> None:
        self._type_tests(ctx)
        reads = ctx.memo("ddp210.reads", list)
        getattrs = [c for c in ctx.sem.calls if isinstance(c.func, ast.Name) and c.func.id == "getattr"
                    and len(c.args) == 2 and not c.keywords and isinstance(c.args[1], ast.Constant)
                    and isinstance(c.args[1].value, str) and c.args[1].value not in DDP_ATTRIBUTES
                    and _holder(c.args[0])]
        # a pipeline's component given as the wrapper: ``StableDiffusionPipeline(text_encoder=model)``
        comps = _pipeline_components(ctx)
        if not reads and not getattrs and not comps:
            return
        an, view = hub(ctx)
        stored = _stored(ctx)
        test_file = is_test_file(ctx.filename)
        if stored is None:
            return  # the file patches DistributedDataParallel itself
        memo: dict = {}
        local = _wrap_reachable(ctx, an)
        unwraps_here = "unwrap_model" in ctx.src.text or "module" in ctx.src.text
        for node, holder, attr in [*((n, n.value, n.attr) for n in reads),
                                   *((c, c.args[0], c.args[1].value) for c in getattrs), *comps]:
            comp = node is holder  # (a pipeline component: the value itself is the place)
            h = ctx.text(holder)
            if not comp and (_store_scope(ctx, node), h, attr) in stored:
                continue
            wraps, always = _wrap_origins(an, view, holder, node, memo) if local else ([], False)
            if not wraps:
                # a module-level function's parameter that a caller in another file fills with it
                wraps, always = _from_callers(ctx, holder, node, memo), False
            if not wraps:
                # a value the code unwraps itself, but only on the main rank
                one = None if test_file or not unwraps_here or comp else _unwrapped_on_main_only(ctx, view, holder, node)
                if one is not None and not _tested(ctx, node, h, attr) and not handles_attribute_error(node):
                    self._report_main_only_unwrap(ctx, node, h, attr, one)
                continue
            # (the tests of the read itself only once a wrapper may reach it: most reads meet none)
            if _tested(ctx, node, h, attr) or handles_attribute_error(node):
                continue
            at, facts = guards(node), guards(node, settled=True)
            # in a test file, a conditional wrap seen by a conditional read only under the same
            # tests: its harness runs the modes in fixed combinations (``if with_fsdp: ... else:
            # DDP(...)`` and ``if method == "grad_to_none": model.trunk`` never hold together)
            # (each wrap judged where the code binds it: a project helper's call, not the
            # constructor in the helper's module)
            wraps = [o for o in wraps for v, c in (bound_at(o),)
                     if not contradicts(guards(c, settled=True), facts)
                     and (always or not test_file or implied(at, guards(c))) and not _sets_attr(v, c, attr)
                     and not branch_excludes_wrap(an, view, node, v, c)
                     and not _runs_apart(ctx, an, view, node, v, c)
                     and not flag_excludes_wrap(view.sem, node, facts, v.sem, c)
                     and not (v is view and isinstance(holder, ast.Name) and ruled_out_by_same_test(c, node, holder.id))]
            if not wraps or _only_group_less_callers(ctx, an, node):
                continue
            v, call = wraps[0]
            if (v.sem.call_qualname(call) or "") != DDP_CLASS:  # ``accelerator.prepare(model)``
                # a wrapper only on several processes: not in a test file (its harness fixes the
                # world, one process), nor under a test of the accelerator's mode
                acc = ast.unparse(call.func.value)
                if test_file or any(isinstance(n, ast.Attribute) and n.attr in _MODE_ATTRS
                                    for t, _b in at for n in ast.walk(t)) or _reads_plugin(v) \
                        or one_process_notebook(ctx):
                    continue
                self._report_prepared(ctx, node, h, attr, v, view, call, acc, comp)
                continue
            fix = None
            if always and isinstance(node, ast.Attribute):
                end = ctx.src.node_end(holder)
                fix = ctx.fix(Applicability.UNSAFE, f"Read it from the wrapped module: `{h}.module.{attr}`",
                              [_insert(end)])
            if v is view:
                related = [(call, "wrapped in DistributedDataParallel here")]
                where = f"line {call.lineno}"
            else:
                from ..source import SourceText  # noqa: PLC0415  (only for the other file's range)

                related = [("file", v.path, SourceText(v.text).node_range(call),
                            "wrapped in DistributedDataParallel here")]
                where = f"{shown_path(ctx, v.path)} line {call.lineno}"
            may = "is" if always else "may be"
            if comp:
                ctx.report(
                    node,
                    f"`{h}` {may} the DistributedDataParallel wrapper (built on {where}), given to the pipeline as "
                    f"its `{attr}` component: the pipeline reads the model's own attributes and `save_pretrained` "
                    f"looks up the component's class, the wrapper's, so this fails under DDP; pass the wrapped "
                    f"module, `{h}.module`" + ("" if always else f" (or `getattr({h}, \"module\", {h})`)"),
                    related=related,
                    fix=ctx.fix(Applicability.UNSAFE, f"Pass the wrapped module: `{h}.module`",
                                [_insert(ctx.src.node_end(holder))]) if always else None,
                )
                continue
            ctx.report(
                node,
                f"`{h}` {may} the DistributedDataParallel wrapper (built on {where}), which has no attribute "
                f"`{attr}`: this raises AttributeError under DDP; read it from the wrapped module, "
                f"`{h}.module.{attr}`" + ("" if always else f" (or `getattr({h}, \"module\", {h})`)"),
                related=related,
                fix=fix,
            )


    def _type_tests(self, ctx) -> None:
        """``isinstance(model, Net)`` / ``type(model) in [Net, ...]`` of model classes, where
        ``model`` may be the DDP wrapper: false under DDP. A predicate helper (``def is_net(m):
        return isinstance(m, Net)``) is judged at its calls of this module."""
        tests = [t for t in (_model_type_test(ctx, c) for c in ctx.sem.calls) if t is not None]
        if not tests:
            return
        from ._training import callers_pass_wrapper

        an, view = hub(ctx)
        for test, value, classes in tests:
            sites = [(test, value)]
            ret = parent(test)
            fn = ctx.sem.enclosing_function(test)
            if isinstance(ret, ast.Return) and ret.value is test and fn is not None and isinstance(value, ast.Name) \
                    and value.id in param_names(fn) and not ctx.sem.assignments(fn).get(value.id):
                sites = [(c, a) for c in an.call_sites(view, fn)[:8]
                         for p, a in call_args(c, fn) if p == value.id and _holder(a) and not isinstance(a, ast.Call)]
            for at, v in sites:
                if _tests_wrapper_too(ctx, at, ctx.text(v)) or handles_attribute_error(at):
                    continue
                wraps, _always = wrap_origins(an, view, v, at, ordered=False)
                wraps = [(w, c) for w, c in wraps if (w.sem.call_qualname(c) or "") == DDP_CLASS
                         and not contradicts(guards(c), guards(at))]
                if not wraps:
                    wraps = callers_pass_wrapper(ctx, v, at)
                if not wraps:
                    continue
                w, call = wraps[0]
                h = ctx.text(v)
                where = f"line {call.lineno}" if w is view else f"{shown_path(ctx, w.path)} line {call.lineno}"
                how = "" if at is test else f" (`{ctx.text(at.func)}` tests `{ctx.text(test)}`)"
                ctx.report(
                    at,
                    f"`{h}` may be the DistributedDataParallel wrapper (built on {where}), which is not a "
                    f"{' or '.join(classes)}: this type test{how} is false under DDP, so the code takes the other "
                    f"branch; test the wrapped module, `getattr({h}, \"module\", {h})`",
                    related=[(call, "wrapped in DistributedDataParallel here")] if w is view else [],
                )

    @staticmethod
    def _report_main_only_unwrap(ctx, node, h, attr, unwrap) -> None:
        ctx.report(
            node,
            f"`{h}` is unwrapped only on the main rank (line {unwrap.lineno}); on the other ranks it is still "
            f"the DistributedDataParallel wrapper, which has no attribute `{attr}`: this raises AttributeError "
            f"there; unwrap it on every rank, or read `{attr}` under the same main-rank test",
            related=[(unwrap, "unwrapped here, under a main-rank test")],
        )

    @staticmethod
    def _report_prepared(ctx, node, h, attr, v, view, call, acc, comp=False) -> None:
        where = f"line {call.lineno}" if v is view else f"{shown_path(ctx, v.path)} line {call.lineno}"
        if v is view:
            related = [(call, "Accelerate wraps the model in DistributedDataParallel here")]
        else:
            from ..source import SourceText  # noqa: PLC0415  (only for the other file's range)

            related = [("file", v.path, SourceText(v.text).node_range(call),
                        "Accelerate wraps the model in DistributedDataParallel here")]
        what = (f"given to the pipeline as its `{attr}` component, it fails under multi-GPU (the pipeline "
                f"reads the model's own attributes and `save_pretrained` looks up its class); pass "
                f"`{acc}.unwrap_model({h})`") if comp else (
            f"the wrapper has no attribute `{attr}`, so this raises AttributeError under multi-GPU; read it "
            f"through `{acc}.unwrap_model({h}).{attr}`")
        ctx.report(
            node,
            f"`{h}` comes from `{acc}.prepare(...)` ({where}), which returns a DistributedDataParallel wrapper "
            f"when it runs on several processes; {what}",
            related=related,
        )


def _unwrapped_on_main_only(ctx, view, holder, node):
    """The binding ``name = name.module`` / ``name = acc.unwrap_model(name)`` that reaches the read
    ``node`` of ``holder`` (a plain name) from inside a main-rank test (``if is_main_process:``)
    while another binding, made before it, reaches the read too (the path of the other ranks),
    and the read itself is not kept to the main rank (a function that tests the rank inside is not
    one that only the main rank calls): the code takes the value for a wrapper (it unwraps
    it), but only the main rank unwraps it. None otherwise."""
    if not isinstance(holder, ast.Name):
        return None
    from ..flow.bindings import reaching
    from ..flow.rank import rank0_guarded

    kind, evs = reaching(view, holder.id, node)
    if kind not in ("events", "events+param") or not isinstance(evs, (list, tuple)):
        return None
    unwraps = [b for b in evs if _self_unwrap(b, holder.id)]
    # (``events+param``: the parameter's own value reaches the read too)
    if not unwraps or len(unwraps) == len(evs) and kind == "events":
        return None
    b = unwraps[0]
    if isinstance(b.value, ast.Call) and not is_unwrap(b.value) and (_reads_plugin(view) or one_process_notebook(ctx)):
        return None  # an engine that forwards attribute reads, or one process
    if any(rank0_guarded(ctx, u, callers=False) is not True for u in unwraps) or rank0_guarded(ctx, node) is True:
        return None  # (an unwrap that other ranks run too: ``else: model = model.module``)
    return b


def _self_unwrap(b, name: str) -> bool:
    """``name = name.module``, ``name = getattr(name, "module", ...)``, ``name = acc.unwrap_model(name)``
    (also as one element of a tuple assignment)."""
    if not (isinstance(b, ast.Assign) and len(b.targets) == 1):
        return False
    t, v = b.targets[0], b.value
    if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
        # ``model, ema = model.module, ema.module``: the element bound to ``name``
        pairs = [(x, y) for x, y in zip(t.elts, v.elts) if isinstance(x, ast.Name) and x.id == name]
        if len(pairs) != 1:
            return False
        t, v = pairs[0]
    if not (isinstance(t, ast.Name) and t.id == name):
        return False
    if is_unwrap(v):
        base = v.value if isinstance(v, ast.Attribute) else v.args[0]
    elif isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "unwrap_model" \
            and len(v.args) == 1 and not v.keywords:
        base = v.args[0]
    else:
        return False
    return isinstance(base, ast.Name) and base.id == name


# an Accelerator's (or its state's) distributed mode: a read under a test of it is left alone
_MODE_ATTRS = frozenset({"distributed_type", "num_processes", "use_distributed"})


# DeepSpeed ZeRO's parameter partitioning APIs: a module that gathers or partitions parameters
# with them is written for the DeepSpeed engine that Accelerate's ``prepare`` then returns
_ZERO_APIS = ("deepspeed.zero.GatheredParameters", "deepspeed.zero.Init",
              "deepspeed.runtime.zero.GatheredParameters", "deepspeed.runtime.zero.Init",
              # Accelerate's stand-ins for an optimizer / a scheduler that the DeepSpeed config
              # defines: no optimizer without the DeepSpeed plugin, so the program runs on it
              "accelerate.utils.DummyOptim", "accelerate.utils.deepspeed.DummyOptim",
              "accelerate.utils.DummyScheduler", "accelerate.utils.deepspeed.DummyScheduler")


def _reads_plugin(view) -> bool:
    """The module reads an Accelerate state's DeepSpeed/FSDP/Megatron plugin (``accelerator.state.
    deepspeed_plugin``, ``getattr(self.accelerator.state, "fsdp_plugin", None)``) or gathers
    parameters with DeepSpeed ZeRO (``deepspeed.zero.GatheredParameters``): it is written for
    engines that forward attribute reads to the model."""
    got = view.memo.get("ddp210.plugin_reads")
    if got is None:
        got = bool(view.sem.calls_to(*_ZERO_APIS))
        for n in () if got else ast.walk(view.tree):
            if isinstance(n, ast.Attribute) and n.attr in NOT_DDP_PLUGINS:
                base = n.value
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr") \
                    and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and n.args[1].value in NOT_DDP_PLUGINS:
                base = n.args[0]
            else:
                continue
            if isinstance(base, ast.Attribute) and base.attr == "state":
                got = True
                break
        view.memo["ddp210.plugin_reads"] = got
    return got


def _model_type_test(ctx, c):
    """(test, tested value, class names) for ``isinstance(x, C)`` / ``type(x) is C`` / ``type(x) in
    [C, D]`` where every class named is a model class (``flow.wrapped.is_model_class``) and ``x``
    is a name or ``self.<attr>``; else None."""
    f = c.func
    if not isinstance(f, ast.Name):
        return None
    if f.id == "isinstance" and len(c.args) == 2 and not c.keywords:
        test, value, spec = c, c.args[0], c.args[1]
    elif f.id == "type" and len(c.args) == 1:
        cmp = parent(c)
        if not (isinstance(cmp, ast.Compare) and cmp.left is c and len(cmp.ops) == 1
                and isinstance(cmp.ops[0], (ast.Is, ast.Eq, ast.In))):
            return None
        test, value, spec = cmp, c.args[0], cmp.comparators[0]
    else:
        return None
    if not (isinstance(value, ast.Name) or (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                                            and value.value.id == "self")):
        return None
    elts = spec.elts if isinstance(spec, (ast.Tuple, ast.List, ast.Set)) else [spec]
    if not elts or not all(isinstance(e, (ast.Name, ast.Attribute)) for e in elts):
        return None
    an, view = hub(ctx)
    if not all(is_model_class(an, view, e) for e in elts):
        return None
    return test, value, [ctx.text(e) for e in elts]


def _tests_wrapper_too(ctx, at, h: str) -> bool:
    """The condition ``at`` is part of also asks about the wrapping (``hasattr(h, "module")``, a
    DDP class), or the statement it decides reads ``h.module`` (an unwrap on the other branch)."""
    top = at
    p = parent(top)
    while isinstance(p, (ast.BoolOp, ast.UnaryOp)):
        top, p = p, parent(p)
    if isinstance(p, (ast.If, ast.IfExp, ast.While)) and p.test is top:
        # ``model if isinstance(model, Net) else model.module``: the other branch unwraps
        for n in ast.walk(p):
            if isinstance(n, ast.Attribute) and n.attr == "module" and ctx.text(n.value) == h:
                return True
    for n in ast.walk(top):
        if isinstance(n, (ast.Name, ast.Attribute)) and (ctx.qn(n) or "").startswith("torch.nn.parallel."):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("hasattr", "getattr") \
                and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and n.args[1].value == "module":
            return True
    return False


def _insert(pos):
    from ..model import Edit, Range

    return Edit(Range(pos, pos), ".module")


def _pipeline_components(ctx) -> list:
    """``(value, value, component)`` for each keyword of a ``diffusers`` pipeline's construction
    (``StableDiffusionPipeline(unet=..., text_encoder=...)``, ``XPipeline.from_pretrained(name,
    unet=...)``) whose value is one the program model follows (a name, ``self.<attr>``): the pipeline
    registers it as a component, reads its own attributes (``dtype``, ``config``) and saves it by its
    class."""
    out = []
    for c in ctx.sem.calls:
        if not c.keywords:
            continue
        parts = (ctx.sem.call_qualname(c) or "").split(".")
        if parts[0] != "diffusers" or len(parts) < 2:
            continue
        if parts[-1] == "from_pretrained":
            parts = parts[:-1]
        if not (parts[-1][:1].isupper() and parts[-1].endswith("Pipeline")):
            continue
        out += [(k.value, k.value, k.arg) for k in c.keywords if k.arg is not None and (
            isinstance(k.value, ast.Name) or _holder(k.value) and not isinstance(k.value, ast.Call))]
    return out


def _holder(e) -> bool:
    """A value the program model follows: a name, ``self.<attr>``, or a call (a helper's return)."""
    return isinstance(e, (ast.Name, ast.Call)) or (
        isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self")


def _asks_wrapping(ctx, test, h: str, attr: str) -> bool:
    """``hasattr(h, "module")`` / ``hasattr(h, attr)`` / ``isinstance(h, ...)`` / ``type(h)``: a test of
    the wrapping itself (an unrelated ``hasattr(h, "hf_device_map")`` before the wrap is not)."""
    for n in ast.walk(test):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.args and ctx.text(n.args[0]) == h:
            if n.func.id in ("isinstance", "type"):
                return True
            if n.func.id in ("hasattr", "getattr") and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) \
                    and n.args[1].value in ("module", attr):
                return True
    return False


def _tested(ctx, node, h: str, attr: str = "") -> bool:
    """The read sits under a test of the same value (``hasattr(h, ...)``, ``isinstance(h, ...)``)."""
    fn = ctx.sem.enclosing_function(node)
    for test, _branch in guards(node):
        if any(ctx.text(v) == h for v in tested_values(test)):
            return True
        # a flag bound to such a test: ``has_custom = hasattr(model, "f")`` ... ``if has_custom:``
        for n in ast.walk(test):
            if isinstance(n, ast.Name) and fn is not None:
                for st in ctx.sem.assignments(fn).get(n.id, ()):
                    value = getattr(st, "value", None)
                    if isinstance(st, (ast.Assign, ast.AnnAssign)) and value is not None \
                            and any(ctx.text(v) == h for v in tested_values(value)):
                        return True
    # ``if hasattr(x, "module"): return x.module.a`` before the read: an early exit on the test
    st = ctx.sem.statement_of(node)
    while st is not None and not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
        got = stmt_list_of(st)
        if got is not None:
            for prev in got[1][:got[1].index(st)]:
                if isinstance(prev, ast.If) and prev.body and isinstance(
                        prev.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)) \
                        and _asks_wrapping(ctx, prev.test, h, attr):
                    return True
        st = parent(st)
    # ``x.a if hasattr(x, "a") else ...`` / ``hasattr(x, "a") and x.a`` / ``is_clip(x) and x.a`` (a
    # predicate asked about the same value first)
    p = getattr(node, "_p", None)
    while p is not None and not isinstance(p, ast.stmt):
        if isinstance(p, ast.BoolOp) and any(ctx.text(v) == h for x in p.values if x is not node
                                              for v in tested_values(x)):
            return True
        if isinstance(p, ast.BoolOp) and any(
                isinstance(c, ast.Call) and any(ctx.text(a) == h for a in c.args)
                for x in p.values if x is not node and not any(n is node for n in ast.walk(x))
                for c in ast.walk(x)):
            return True
        p = getattr(p, "_p", None)
    return False


def _store_scope(ctx, node):
    """Where a store on a holder is seen: the class for ``self.x.foo``, else the function."""
    h = node.value if isinstance(node, ast.Attribute) else node.args[0]
    while isinstance(h, ast.Attribute):
        h = h.value
    fn = ctx.sem.enclosing_function(node)
    if isinstance(h, ast.Name) and h.id == "self" and fn is not None:
        return parent(fn)
    return fn


def _stored(ctx):
    """(scope, holder text, attribute) of every attribute the file stores (``model.foo = ...``,
    ``setattr(model, "foo", ...)``); None when it stores one on DistributedDataParallel itself."""
    def build():
        out = set()
        for n in ctx.memo("ddp210.stores", list):
            if ctx.qn(n.value) == "torch.nn.parallel.DistributedDataParallel":
                return None
            out.add((_store_scope(ctx, n), ctx.text(_patched(n.value)), n.attr))
        for c in ctx.sem.calls:
            if isinstance(c.func, ast.Name) and c.func.id == "setattr" and len(c.args) >= 2 \
                    and isinstance(c.args[1], ast.Constant) and isinstance(c.args[1].value, str):
                if ctx.qn(c.args[0]) == "torch.nn.parallel.DistributedDataParallel":
                    return None
                out.add((_store_scope(ctx, c), ctx.text(c.args[0]), c.args[1].value))
        return out
    return ctx.memo("ddp210.stored", build)


def _patched(e):
    """The object a store on ``e`` gives the attribute to: ``x`` for ``type(x)`` and ``x.__class__``
    (``type(model).generate = ...`` patches the wrapper's class, so ``model.generate`` exists)."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "type" and len(e.args) == 1 \
            and not e.keywords:
        return e.args[0]
    if isinstance(e, ast.Attribute) and e.attr == "__class__":
        return e.value
    return e


def _sets_attr(view, call, attr: str) -> bool:
    """The function (the class, for ``self.x``) that binds the wrapper to a name stores ``attr`` on
    that name (``model = DDP(m); model.generate = m.generate``)."""
    st = getattr(call, "_p", None)
    if not isinstance(st, ast.Assign):
        return False
    memo = view.memo.setdefault("ddp210.stores", {})
    for t in st.targets:
        if not isinstance(t, (ast.Name, ast.Attribute)):
            continue
        fn = view.sem.enclosing_function(st)
        scope = parent(fn) if isinstance(t, ast.Attribute) and fn is not None else fn
        if scope is None:
            scope = view.tree
        got = memo.get(id(scope))
        if got is None:
            got = memo[id(scope)] = {(ast.unparse(_patched(n.value)), n.attr) for n in ast.walk(scope)
                                      if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
        if (ast.unparse(t), attr) in got:
            return True
    return False


# The attributes a DistributedDataParallel wrapper has, frozen from torch 2.13.0:
# dir(DistributedDataParallel) | vars(DDP(nn.Linear(2, 2))) on a one-process gloo group | {"module"}, and
# every ``self.x = ...`` of DistributedDataParallel's source (those set only on some paths, such as
# ``_authoritative_rank`` after a join and ``device_mesh`` when one is given).
DDP_ATTRIBUTES = frozenset("""
    T_destination __abstractmethods__ __annotations__ __call__ __class__ __delattr__ __dict__ __dir__
    __doc__ __eq__ __format__ __ge__ __getattr__ __getattribute__ __getstate__ __gt__ __hash__ __init__
    __init_subclass__ __le__ __lt__ __module__ __ne__ __new__ __reduce__ __reduce_ex__ __repr__
    __setattr__ __setstate__ __sizeof__ __slots__ __str__ __subclasshook__ __weakref__ _abc_impl
    _accum_grad_hooks _active_ddp_module _apply _assign_modules_buffers _backward_hooks
    _backward_pre_hooks _bucket_config _buffers _build_debug_param_to_name_mapping
    _build_params_for_reducer _call_impl _check_and_sync_module_buffers _check_comm_hook
    _check_default_group _check_global_requires_backward_grad_sync _check_reducer_finalized
    _check_sync_bufs_post_fwd _check_sync_bufs_pre_fwd _clear_grad_buffer _comm_hooks
    _compiled_call_impl _ddp_init_helper _ddp_sink_clone _default_broadcast_coalesced
    _delay_all_reduce_all_params _delay_all_reduce_params _delay_grad_buffer _delay_grad_views
    _delayed_all_reduce_hook _distributed_broadcast_coalesced _distributed_rank _find_common_rank
    _fire_reducer_autograd_hook _forward_hooks _forward_hooks_always_called _forward_hooks_with_kwargs
    _forward_pre_hooks _forward_pre_hooks_with_kwargs _get_active_ddp_module _get_backward_hooks
    _get_backward_pre_hooks _get_data_parallel_params _get_ddp_logging_data _get_name _get_parameters
    _has_rebuilt_buckets _inside_ddp_forward _is_full_backward_hook _join_config _lazy_init
    _lazy_init_ran _load_from_state_dict _load_state_dict_post_hooks _load_state_dict_pre_hooks
    _log_and_throw _match_all_reduce_for_bwd_pass _match_unused_params_allreduce
    _maybe_warn_non_full_backward_hook _module_parameters _module_wait_for_copy_hook _modules
    _named_members _non_persistent_buffers_set _parameters _passing_sync_batchnorm_handle _post_forward
    _pre_forward _register_accum_grad_hook _register_buffer_comm_hook _register_builtin_comm_hook
    _register_delay_all_reduce_hook _register_fused_optim _register_load_state_dict_pre_hook
    _register_state_dict_hook _remove_autograd_hooks _replicate_for_data_parallel _root_copy_hook
    _run_ddp_forward _save_to_state_dict _set_ddp_runtime_logging_sample_rate _set_ddp_sink_clone
    _set_params_and_buffers_to_ignore_for_model _set_sparse_metadata _set_static_graph
    _setup_in_backward_optimizers _slow_forward _state_dict_hooks _state_dict_pre_hooks _sync_buffers
    _sync_final_model _sync_module_buffers _update_process_group _use_python_reducer _version
    _wrapped_call_impl add_module apply batched_grad_copy bfloat16 broadcast_bucket_size
    broadcast_buffers bucket_bytes_cap bucket_bytes_cap_default bucket_bytes_cap_list buffers
    call_super_init children compile cpu cuda device device_ids device_type dim double dump_patches eval
    extra_repr find_unused_parameters float forward forward_sync_buffers gather get_buffer
    get_extra_state get_parameter get_submodule gradient_as_bucket_view half ipu is_multi_device_module
    join join_device join_hook join_process_group load_state_dict logger mixed_precision module modules
    modules_buffers mtia named_buffers named_children named_module_buffers named_modules
    named_parameters no_sync output_device parameters parameters_to_ignore process_group reducer
    register_backward_hook register_buffer register_comm_hook register_forward_hook
    register_forward_pre_hook register_full_backward_hook register_full_backward_pre_hook
    register_load_state_dict_post_hook register_load_state_dict_pre_hook register_module
    register_parameter register_state_dict_post_hook register_state_dict_pre_hook
    require_backward_grad_sync require_forward_param_sync requires_grad_ scatter set_extra_state
    set_submodule share_memory skip_all_reduce_unused_params state_dict static_graph to to_empty
    to_kwargs train training type use_side_stream_for_tensor_copies will_sync_module_buffers xpu
    zero_grad _authoritative_rank _mp_stream _static_graph_delay_allreduce_enqueued _submodule_to_event
    buffer_hook device_mesh
""".split())


# what the module holding a wrap that ``wrap_origins`` finds spells: the constructor's name (its
# qualified name needs it bound there), or Accelerate's ``prepare`` (``prepares_model``)
_WRAP_NEEDLES = ("DistributedDataParallel", "prepare")


def _only_group_less_callers(ctx, an, node) -> bool:
    """The read is in a method of a module-level class that this file never calls, and every call
    of it in the project's other files resolves to it and is made by a program that never creates
    the default group (``group_free.program_caller_without_group``): there the DDP constructor, which
    needs that group, never ran, so the attribute holds the bare module (a single-process tool
    built on the training class)."""
    from ..flow.group_free import program_caller_without_group
    from ._common import project_callers

    fn = ctx.sem.enclosing_function(node)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef) or not isinstance(parent(cls), ast.Module) or fn.name.startswith("__"):
        return False
    if any((c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", None)) == fn.name
           for c in ctx.sem.calls):
        return False  # called in its own file (``self.m()``, a script of the module): not followed
    sites = [(cctx, c) for cctx, c, n in project_callers(ctx, (fn.name,), unknown=True) if n is None or n is fn]
    if not sites:
        return False
    for cctx, c in sites:
        cv = an.view_of(cctx.filename)
        if cv is None or cv.sem is not cctx.sem or not program_caller_without_group(an, cv, c):
            return False
    return True


def _wrap_reachable(ctx, an) -> bool:
    """Whether ``wrap_origins`` may find a wrap for a value of this file: ``wrap_origins`` follows
    origins only into the project modules the file's imports reach (no callers), so a wrap needs
    one of ``_WRAP_NEEDLES`` in the file or a module its imports reach (``flow.reach``). On a no,
    the files that answer rests on become dependencies of the check."""
    from ..flow.reach import reaches

    got, deps = reaches(ctx.filename, ctx.src.text, _WRAP_NEEDLES)
    if not got:
        an.depend_on_files(deps)
    return got


def _runs_apart(ctx, an, view, node, wrap_view, wrap) -> bool:
    """The read ``node`` and the wrap never run in one run of the program (``flow.exclusive``): in
    this module, through the calls that lead to each; for a wrap of another module, every call
    there of the read's module-level function is exclusive with the wrap (``if cfg.fsdp:
    apply_fsdp(self.model) else: self.model = DDP(self.model)``)."""
    if wrap_view is view:
        return exclusive_runs(an, view, node, wrap)
    fn = ctx.sem.enclosing_function(node)
    if fn is None or not isinstance(parent(fn), ast.Module):
        return False
    from ._common import project_callers  # lazy: reads the project's other files

    sites = []
    for caller, call, d in project_callers(ctx, {fn.name}):
        an2, view2 = hub(caller)
        if d is fn and view2 is wrap_view:
            sites.append((an2, call))
    return bool(sites) and all(exclusive_runs(an2, wrap_view, call, wrap) for an2, call in sites)


def _from_callers(ctx, holder, node, memo: dict) -> list:
    """``callers_pass_wrapper`` for a name, once per (function, name), or for ``self.<attr>`` that
    ``__init__`` binds to a parameter, once per (method, attribute)."""
    if isinstance(holder, ast.Name):
        name = holder.id
    elif isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name) and holder.value.id == "self":
        name = "self." + holder.attr
    else:
        return []
    from ._training import callers_pass_wrapper

    key = ("callers", id(ctx.sem.enclosing_function(node)), name)
    got = memo.get(key)
    if got is None:
        got = memo[key] = callers_pass_wrapper(ctx, holder, node)
    return got


def _wrap_origins(an, view, holder, node, memo: dict):
    """``wrap_origins`` of ``holder`` at ``node``, once per value: a name's answer depends only on
    the bindings that reach it (every read of ``model`` after the same assignment shares it), a
    ``self.<attr>``'s only on the method it is read in."""
    from ..flow.bindings import reaching

    key = None
    if isinstance(holder, ast.Name):
        kind, evs = reaching(view, holder.id, node)
        ids = tuple(id(e) for e in evs) if isinstance(evs, (list, tuple)) else id(evs)
        key = ("name", holder.id, kind, ids)
    elif isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name) and holder.value.id == "self":
        # (and, where that method binds it before the read on every path, on the read's line: what
        # runs between that binding and the read)
        fn = view.sem.enclosing_function(node)
        last = dominating_binding(fn, holder.attr, node)
        # (and on the method's own bindings that may still come before the read: statement order)
        own = tuple(id(s) for s in own_bindings(fn, holder.attr, node))
        key = ("self", id(fn), holder.attr, id(last), None if last is None else node.lineno, own)
    if key is None:
        return wrap_origins(an, view, holder, node)
    got = memo.get(key)
    if got is None:
        got = memo[key] = wrap_origins(an, view, holder, node)
        if not got[0] and isinstance(holder, ast.Name):
            # a free name of a nested function (``def save_checkpoint(step):`` in ``main``): the
            # enclosing function's value where the function is defined
            from ..flow.bindings import closure_definition

            d = closure_definition(view, holder.id, node)
            if d is not None:
                got = memo[key] = wrap_origins(an, view, holder, d)
    return got
