from __future__ import annotations

import ast
import os

from ..model import Applicability, Edit, Position, Range, Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ..flow.wrap_sites import ddp_like_calls
from ._common import callers_may_exist, spells_ddp
from ..flow import for_context
from ..flow.mentions import mentions
from ..flow.step_branches import (PARAM_LAYERS as _PARAM_LAYERS, REFLECTIVE as _REFLECTIVE, constructor_call, param_layer,
                                  wrapped_class)


class UnusedParameters(Rule):
    """
    ## What it does
    Checks for a module wrapped in `DistributedDataParallel` without
    `find_unused_parameters=True` whose class (defined in the same file, directly on `nn.Module`)
    creates in `__init__` a layer with trainable parameters (`self.head = nn.Linear(...)`) or an
    `nn.Parameter` that no other method of the class ever mentions.

    Only what the class body proves is reported: an attribute that `forward` (or anything else in
    the class) reads, even under a condition, is not flagged; nor is a class that reaches its
    submodules reflectively (`self.children()`, `self.parameters()`, `getattr(self, ...)`, `self`
    passed to a helper), that is subclassed in the file, an attribute that code outside the class
    reads (`model.module.aux_head(feats)`), a `DistributedDataParallel(..., **kwargs)` call, or a
    file that turns `requires_grad` off or uses `static_graph`.
    The file must also call `backward()`.

    The class may also live in a model file of its own (`models/seg.py`) while the training script
    imports it (`from models.seg import SegNet`), wraps an instance in DDP and calls `backward()`:
    the finding is then on the unused layer in the model file, with the wrapping call as the
    related location. Attributes that the training script reads (`model.module.edge_head(...)`) are
    not reported, and a DDP call with `find_unused_parameters=True`, `static_graph` or `**kwargs`
    in the script keeps it silent.

    An Accelerate `accelerator.prepare(model)` wraps the model in DDP too when the script runs on
    several processes (`accelerate launch`; not with a DeepSpeed, FSDP or Megatron plugin), with the
    options of the `Accelerator`'s `kwargs_handlers`: `find_unused_parameters` is off when the
    `Accelerator(...)` is built without them, or with a `DistributedDataParallelKwargs(...)` that
    leaves it off, followed through names, `self` attributes and helpers (of other modules too).
    Such a wrapper of a class of this file or of a module of the project (`from mol.models import
    FusionNet`, also re-exported by a package's `__init__`, or a relative import) with an unused
    layer is reported on what leaves the option off (the `Accelerator(...)` call, or the handler's
    `False`) when it is in the training script, else where the script gets its `Accelerator`
    (`acc = build_accelerator(cfg)`, from another module) or on the `prepare` call, with the layer
    as the related location. A layer that the class freezes itself (`for p in self.enc.parameters():
    p.requires_grad = False`, `self.enc.requires_grad_(False)`) is not reported, and a model file
    that turns gradients off in any other way keeps its classes silent; so do `Accelerator(**kw)`,
    positional arguments, a handler built from options (`DistributedDataParallelKwargs(**opts)`)
    and a handler list that is not followed. The forms below hold for such a wrapper as well.

    It also checks a parameterised submodule that `forward` (or a method it calls on `self`) runs
    only on some steps: under a test on this step's tensor data (`if keep.any():`,
    `if x[mask].numel() == 0: return ...`, `if loss.item() > t:`), or on a `forward` argument that
    the training loop computes from its step counter (`model(x, with_aux=it < warmup_iters)`).
    Here the wrapper must be built with `find_unused_parameters` off for sure: the keyword absent,
    `False`, or a value followed to one through config dicts (`**cfg["ddp"]`,
    `cfg.get("find_unused_parameters", False)` of a dict that never holds the key), helpers and
    other modules of the project. The finding is on what turns it off (the `False` of the config
    entry, the default of `.get`) when that is in the wrapping file, else on the DDP call. A test
    that is the same on every step (a config flag passed to `forward`, `self.training`, a
    constructor option, `self.head is not None`), a layer that both branches run, a wrapper with
    `find_unused_parameters=True`, `static_graph`, or a value that is not followed
    (`args.find_unused`) is not reported.

    Such a wrapper is also reported when the program's **default configuration** never runs the
    submodule: `forward` runs it only under a test of a `forward` argument (`with_aux`) that every
    training call of the wrapper passes (or leaves at its default) as a value that is false by
    default (`use_aux = args.aux_weight > 0` with the option's default `0.0`, an unset
    `action="store_true"` flag, an option declared from a dict in a loop
    (`for k, v in defaults.items(): parser.add_argument(f"--{k}", default=v)`: that entry), a dataclass
    field or config-dict entry, a literal; through names,
    tuples, helpers and other modules), or of `self.<attr>` that `__init__` stores once from a
    constructor argument given such a value. A value that cannot be determined (an environment
    variable, an option without a default, options merged from a config file or stored into), a
    default that turns the submodule on, calls under `torch.no_grad()`, or a wrapper handed to code
    that is not seen (a library's training loop) keeps it silent.

    The same holds for a submodule that `forward` **always** runs but whose output leaves it only as
    one entry of the dict it returns (`return {"tags": ..., "domain": self.domain_head(h)}`), when
    no training call reads that entry under the default configuration: the call's result is bound to
    a name used only as `out["other"]` and as an argument of project code (a loss function, or a
    loss object's `__call__` / `forward`, with the options its construction passes,
    `TaggingLoss(args.domain_weight)`) that reads `out["domain"]` only under a test the default
    configuration decides against (`if self.domain_weight > 0:` with the option's default `0.0`).
    A read on every step (a term weighted by a zero weight still gives the head a gradient), a use
    that is not followed (`out.items()`, the dict handed to code not seen) or a default that turns
    the term on keeps it silent. The model may come from a factory (`build_model(cfg).to(device)`).

    ## Why is this bad?
    DDP's reducer waits, after every backward, for a gradient of **every** parameter. One that
    took no part in the loss never gets one, the reduction never finishes, and the next forward
    fails on every rank:

    ```
    RuntimeError: Expected to have finished reduction in the prior iteration before starting a new
    one. This error indicates that your module has parameters that were not used in producing loss.
    You can enable unused parameter detection by passing the keyword argument
    `find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`, and by making sure
    all `forward` function outputs participate in calculating loss.
    ...
    Parameter indices which did not receive grad for rank 0: 130 131
    ```

    ## Example
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)
            self.aux_head = nn.Linear(8, 2)  # never used by forward

        def forward(self, x):
            return self.body(x)

    model = DDP(Net().to(local_rank), device_ids=[local_rank])
    ```

    A head that only some steps run:
    ```python
    class Seg(nn.Module):
        def forward(self, img, with_aux=True):
            out = {"main": self.decode(self.backbone(img))}
            if with_aux:
                out["aux"] = self.aux_head(img)
            return out

    CFG = dict(warmup=2000, ddp=dict(find_unused_parameters=False))
    model = DDP(Seg().cuda(), device_ids=[rank], **CFG["ddp"])
    for it, (img, mask) in enumerate(loader):
        loss(model(img, with_aux=it < CFG["warmup"]), mask).backward()
    ```

    A head that the default configuration never runs (`--aux-weight` defaults to 0):
    ```python
    use_aux = args.aux_weight > 0
    model = DDP(Seg().cuda(), device_ids=[rank])
    for img, mask in loader:
        loss(model(img, with_aux=use_aux), mask).backward()
    ```

    A head that always runs, whose output the default loss never reads:
    ```python
    class Net(nn.Module):
        def forward(self, x):
            h = self.body(x)
            return {"main": self.head(h), "aux": self.aux_head(h)}

    model = DDP(Net().cuda(), device_ids=[rank])
    for x, y in loader:
        out = model(x)
        loss = F.cross_entropy(out["main"], y)
        if args.aux_weight > 0:  # --aux-weight defaults to 0
            loss = loss + args.aux_weight * F.cross_entropy(out["aux"], y)
        loss.backward()
    ```

    ## Use instead
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)

        def forward(self, x):
            return self.body(x)

    model = DDP(Net().to(local_rank), device_ids=[local_rank])
    ```

    For a head that only some steps run, or that the default configuration leaves off, pass
    `find_unused_parameters=True` (or give the skipped head a zero-weighted term in the loss on
    every step, or build it only when it is used).

    ## Fix safety
    The fix adds `find_unused_parameters=True` to the `DistributedDataParallel(...)` call (only when
    that call is in the same file as the class). It is
    **unsafe**: it makes the error go away at the cost of an extra graph traversal on every
    iteration; removing the unused layer (or freezing it with `requires_grad_(False)`) may be what
    was meant, and changes the checkpoint's keys.
    """

    code = "DDP209"
    name = "unused-parameters"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # "Module": a model file whose training loop is elsewhere; "DistributedDataParallel": a helper
    # that builds the wrapper for a model and a loop of other files
    requires_text = ("backward", "Module", "DistributedDataParallel")

    @classmethod
    def reach(cls, text, filename):
        # wrapped here (a DDP call in this file), or a class of this file trained elsewhere
        from ..flow.reach import WRAP_TEXT, reaches

        if spells_ddp(text) or "Accelerator" in text:
            return True, {}  # (an Accelerate ``prepare`` wraps in DDP too)
        wrap = reaches(filename, text, WRAP_TEXT)  # a project helper's wrap (``wrap_sites``)
        if wrap[0]:
            return wrap
        got = callers_may_exist(text, filename, _CALLER_NEEDS, classes_only=True)
        return got if got[0] else (False, {**wrap[1], **got[1]})

    def finish(self, ctx) -> None:
        if _freezes(ctx):
            return
        if not mentions(ctx.sem, "_set_static_graph", text=ctx.src.text):
            _step_skipped_heads(ctx)
        _accelerate_unused(ctx)
        classes = {st.name: st for st in ctx.sem.tree.body if isinstance(st, ast.ClassDef)}
        if not classes:
            return
        subclassed = {b.id for st in classes.values() for b in st.bases if isinstance(b, ast.Name)}
        reported: set[int] = set()
        if mentions(ctx.sem, "_set_static_graph", text=ctx.src.text):
            return
        outside: set[str] | None = None
        for call in ddp_like_calls(ctx):  # (a helper's call that forwards all to DDP counts)
            fup = _strict_ddp(call)
            if fup is False:
                continue
            cls = _module_class(ctx, get_arg(call, 0, "module"), call, classes)
            if cls is None or cls.name in subclassed or cls.decorator_list:
                continue
            if not _plain_module(ctx, cls):
                continue
            unused = _unused_attrs(ctx, cls)
            if unused and outside is None:
                outside = _attrs_read_outside(ctx, classes)
            # ``model.module.aux_head(feats)`` in the training loop: the layer gets its gradient
            # outside forward, which DDP accepts
            if not unused:
                continue  # nothing to report (the fix is built only for a finding)
            _report_unused(ctx, reported, cls, unused, outside or set(), "wrapped in DDP",
                           (call, "wrapped here without `find_unused_parameters=True`"), _make_fix(ctx, call, fup))
        _wrapped_elsewhere(ctx, classes, subclassed, reported)


def _prepared(ctx, an) -> list:
    """(call, module expression) of each Accelerate ``prepare(...)`` of this file that wraps a
    module in DDP when the script runs on several processes (``wrapped.prepares_model``)."""
    from ..flow.helper_calls import calls_named
    from ..flow.wrapped import prepares_model

    out = []
    for c in calls_named(ctx, "prepare"):
        for i in range(len(c.args)):
            if prepares_model(an, an.main, c, () if len(c.args) == 1 else (i,)):
                out.append((c, c.args[i]))
    return out


def _accelerate_unused(ctx) -> None:
    """A module that an Accelerate ``prepare`` wraps in DDP with ``find_unused_parameters`` off
    (``ddp_options.strict_ddp_off``: the ``Accelerator`` built without a
    ``DistributedDataParallelKwargs`` handler that turns it on), whose class, of this file or of
    another module of the project, creates a parameterised layer that nothing in the class uses:
    reported at what leaves the option off (the ``Accelerator(...)`` call) when it is in this file,
    else where this file gets the Accelerator (``_accelerator_source``), with the layer as the
    related location."""
    from ._common import other_call_sites
    from ..flow.ddp_options import strict_ddp_off
    from ..flow.findings import node_related

    if not mentions(ctx.sem, "backward", text=ctx.src.text) or mentions(ctx.sem, "_set_static_graph", text=ctx.src.text):
        return
    an = for_context(ctx)
    here = an.main
    prepared = _prepared(ctx, an)
    if not prepared:
        return
    callers = other_call_sites(ctx, an)
    outside = None
    done: set = set()
    for call, mod in prepared:
        got = wrapped_class(ctx, mod, call)
        if got is None:
            continue
        cv, cls = got
        cv = cv or here
        if cls.decorator_list or not _plain_module(ctx, cls, cv.sem) or any(
                isinstance(st, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == cls.name for b in st.bases)
                for st in cv.sem.tree.body):
            continue
        frozen = _frozen_attrs(cv.sem, cls)
        if frozen is None:
            continue
        unused = [u for u in _unused_attrs(ctx, cls, cv.sem) if u[1] not in frozen]
        if not unused:
            continue
        decider = strict_ddp_off(an, here, call, callers)
        if decider is None:
            continue
        if outside is None:
            outside = _attrs_read_outside(ctx, {st.name: st for st in ctx.sem.tree.body if isinstance(st, ast.ClassDef)})
        out_cls = outside | (_view_attrs_outside(cv, cls) if cv is not here else set())
        dv, dnode = decider
        at = dnode if dv is here else _accelerator_source(ctx, call)
        for stmt, attr, kind in unused:
            if attr in out_cls or (id(stmt), id(at)) in done:
                continue
            done.add((id(stmt), id(at)))
            where = "" if cv is here else f" ({os.path.basename(cv.path or '')})"
            line = f"line {stmt.lineno}" if cv is here else f"{os.path.basename(cv.path or '')}:{stmt.lineno}"
            rng = ctx.src.node_range(call)
            related = [(call, "prepared (wrapped in DDP) here")] if at is not call else []
            related.append(node_related(ctx, cv.path, stmt.targets[0], f"`self.{attr}` is created here"))
            ctx.report(
                at,
                f"`{cls.name}`{where} creates `self.{attr}` ({kind}, {line}) in `__init__` but no method of "
                f"`{cls.name}` uses it, and the `prepare` call (line {rng.start.line + 1}) wraps it in DDP with "
                "`find_unused_parameters` off (no `DistributedDataParallelKwargs(find_unused_parameters=True)` "
                "among the `Accelerator`'s `kwargs_handlers`): under a multi-process launch its parameters get "
                "no gradient and the next iteration fails with 'Expected to have finished reduction in the "
                "prior iteration before starting a new one'",
                related=related,
            )


def _accelerator_source(ctx, call: ast.Call):
    """Where this file gets the ``Accelerator`` that ``call`` (``acc.prepare(...)``) runs on, when
    it is built in another module: the call bound to the receiver (``acc = build_accelerator(cfg)``),
    else the ``prepare`` call itself."""
    from ..flow.assignments import reaching_assignment

    recv = call.func.value
    if isinstance(recv, ast.Name):
        st = reaching_assignment(ctx, recv.id, call)
        if st is not None and isinstance(st.value, ast.Call):
            return st.value
    return call


def _frozen_attrs(sem, cls: ast.ClassDef):
    """The ``self.<attr>`` whose parameters a method of ``cls`` turns off (``for p in
    self.enc.parameters(): p.requires_grad = False``, ``self.enc.requires_grad_(False)``), or None
    when the file turns gradients off in another form or outside the methods of its classes (which
    layer it freezes is then not known). What another class freezes on its own ``self`` is its own."""
    if not mentions(sem, "requires_grad", "requires_grad_"):
        return set()
    out: set[str] = set()
    for n in ast.walk(sem.tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "requires_grad_":
            attr = _self_attr(n.func.value)
        elif isinstance(n, ast.Attribute) and n.attr == "requires_grad" and isinstance(n.ctx, ast.Store):
            loop = parent(parent(n))
            if not isinstance(parent(n), ast.Assign) or not isinstance(loop, ast.For) \
                    or not (isinstance(n.value, ast.Name) and isinstance(loop.target, ast.Name)
                            and loop.target.id == n.value.id):
                return None
            it = loop.iter
            if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "parameters"):
                return None
            attr = _self_attr(it.func.value)
        else:
            continue
        owner = _enclosing_class(n)
        if attr is None or owner is None:
            return None
        if owner is cls:
            out.add(attr)
    return out


def _enclosing_class(node):
    p = parent(node)
    while p is not None and not isinstance(p, ast.ClassDef):
        p = parent(p)
    return p


def _self_attr(e):
    """``X`` of ``self.X`` (or of ``self.X.Y...``), else None."""
    while isinstance(e, ast.Attribute):
        if isinstance(e.value, ast.Name) and e.value.id == "self":
            return e.attr
        e = e.value
    return None


def _step_skipped_heads(ctx) -> None:
    """A DDP call whose ``find_unused_parameters`` value flow resolves to off, wrapping a class
    whose forward runs a parameterised submodule only under a per-step test
    (``flow.step_branches``): reported at what turns the option off (the literal ``False`` of a
    config dict, the default of ``cfg.get(...)``) when it is in this file, else at the call."""
    from ..flow import default_branches as db, step_branches as sb
    from ..flow.ddp_options import strict_ddp_off
    from ._common import other_call_sites

    an = for_context(ctx)
    here = an.main
    # the DDP calls, and the Accelerate ``prepare`` calls that wrap a module in DDP
    calls = [(c, get_arg(c, 0, "module")) for c in ddp_like_calls(ctx)]
    calls += _prepared(ctx, an)
    if not calls:
        return
    callers = other_call_sites(ctx, an)
    done: set = set()
    for call, mod in calls:
        decider = strict_ddp_off(an, here, call, callers)
        if decider is None:
            continue
        groups: dict = {}
        for cv, cls, kv, kc in sb.wrapped_constructions(an, here, mod, call, callers):
            groups.setdefault(id(cls), (cv, cls, []))[2].append((kv, kc))
        got: dict = {}

        def wrapper_calls(call=call):
            if "calls" not in got:
                got["views"] = _loop_views(ctx, an, call)
                got["calls"] = sb.wrapper_calls(an, got["views"], here, call)
            return got["calls"]

        def training_calls(call=call):
            """Every training call of the wrapper, or [] when it is handed to code not seen."""
            if "seen" not in got:
                wc = wrapper_calls()
                got["seen"] = [] if not wc or db.escapes(an, got["views"], here, call, wc) else wc
            return got["seen"]

        for cv, cls, ctors in groups.values():
            if cls.decorator_list or len(cls.bases) != 1 \
                    or (cv.sem.qualname(cls.bases[0]) or "") != "torch.nn.Module" or _view_freezes(cv):
                continue

            def arg_varies(name, idx, cls=cls):
                fwd = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
                for v, c in wrapper_calls():
                    a = sb.passed_arg(c, fwd, name, idx)
                    if a is not None and sb.step_value(v, a, c):
                        return True
                return False

            found = sb.step_skipped(an, cv, cls, arg_varies)
            seen = {attr for _st, attr, _k, _t in found}
            off = [f for f in db.default_skipped(an, cv, cls, ctors, training_calls, callers) if f[1] not in seen]
            seen |= {f[1] for f in off}
            dropped = [f for f in db.dropped_outputs(an, cv, cls, training_calls, callers) if f[1] not in seen]
            if not found and not off and not dropped:
                continue
            outside = _attrs_read_outside(ctx, {st.name: st for st in ctx.sem.tree.body if isinstance(st, ast.ClassDef)})
            if cv is not here:
                outside |= _view_attrs_outside(cv, cls)
            dv, dnode = decider
            at = dnode if dv is here else call if not _prepare_call(call) else _accelerator_source(ctx, call)
            cls_where = "" if cv is here else f" ({os.path.basename(cv.path)})"
            crng = ctx.src.node_range(call)
            related = [(call, "wrapped here")] if at is not call else []
            for st, attr, kind, test in found:
                if attr in outside or (id(st), id(at)) in done:
                    continue
                done.add((id(st), id(at)))  # one finding a head and what turns the option off
                t_where = f"line {test.lineno}" if cv is here else f"{os.path.basename(cv.path)}:{test.lineno}"
                ctx.report(
                    at,
                    f"`{cls.name}`{cls_where} runs `self.{attr}` ({kind}) on some steps only: whether it runs "
                    f"depends on `{ast.unparse(test)}` ({t_where}), which changes from step to step, but the DDP wrapper "
                    f"(line {crng.start.line + 1}) is built with `find_unused_parameters` off: on a step that skips "
                    f"it, its parameters get no gradient and the next iteration fails with 'Expected to have "
                    "finished reduction in the prior iteration before starting a new one'",
                    related=related,
                )
            for st, attr, kind, test, runs_when, (wv, wc) in off:
                if attr in outside or (id(st), id(at)) in done:
                    continue
                done.add((id(st), id(at)))
                t_where = f"line {test.lineno}" if cv is here else f"{os.path.basename(cv.path)}:{test.lineno}"
                w_where = f"line {wc.lineno}" if wv is here else f"{os.path.basename(wv.path or '')}:{wc.lineno}"
                ctx.report(
                    at,
                    f"`{cls.name}`{cls_where} runs `self.{attr}` ({kind}) only when `{ast.unparse(test)}` "
                    f"({t_where}) is {'true' if runs_when else 'false'}, and under the program's default "
                    f"configuration it is {'false' if runs_when else 'true'} "
                    f"(`{_short(ast.unparse(wc))}`, {w_where}): the default configuration leaves the submodule "
                    f"without gradients, but the DDP wrapper (line {crng.start.line + 1}) is built with "
                    "`find_unused_parameters` off, so the second iteration fails with 'Expected to have finished "
                    "reduction in the prior iteration before starting a new one'",
                    related=related + [(wc, "called here")] if wv is here else related,
                )
            for st, attr, kind, key, (tv, test), runs_when in dropped:
                if attr in outside or (id(st), id(at)) in done:
                    continue
                done.add((id(st), id(at)))
                t_where = f"line {test.lineno}" if tv is here else f"{os.path.basename(tv.path or '')}:{test.lineno}"
                ctx.report(
                    at,
                    f"`{cls.name}`{cls_where} runs `self.{attr}` ({kind}) on every step, but its output leaves "
                    f"`forward` only as the `{key!r}` entry of the returned dict, which the training code reads only "
                    f"when `{_short(ast.unparse(test))}` ({t_where}) is {'true' if runs_when else 'false'}, and "
                    f"under the program's default configuration it is {'false' if runs_when else 'true'}: the "
                    "submodule's parameters get no gradient, but the DDP wrapper "
                    f"(line {crng.start.line + 1}) is built with `find_unused_parameters` off, so the second "
                    "iteration fails with 'Expected to have finished reduction in the prior iteration before "
                    "starting a new one'",
                    related=related,
                )


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


def _loop_views(ctx, an, call) -> list:
    """The views whose calls of the wrapper may be the training loop: this file, and the files
    that call the function building the wrapper."""
    from ._common import project_callers

    views = [an.main]
    fn = parent(call)
    while fn is not None and not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        fn = parent(fn)
    if fn is not None and isinstance(parent(fn), ast.Module):
        for cctx, _c, _node in project_callers(ctx, (fn.name,)):
            v = an.view_of(cctx.filename)
            if v is not None and v not in views:
                views.append(v)
    return views


def _view_freezes(view) -> bool:
    for n in view.sem.of_types(ast.Attribute):
        if n.attr in ("requires_grad_", "requires_grad", "_set_static_graph"):
            return True
    return False


def _view_attrs_outside(view, cls) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(view.sem.tree):
        if isinstance(n, ast.Attribute) and not (cls.lineno <= n.lineno <= cls.end_lineno) \
                and not (isinstance(n.value, ast.Name) and n.value.id == "self"):
            out.add(n.attr)
    return out


# what a file that wraps and trains a class of another file holds (``_wrapped_elsewhere``)
_CALLER_NEEDS = (("backward",), ("DistributedDataParallel",))


def _strict_ddp(call):
    """The ``find_unused_parameters`` argument (None when absent) of a DDP call that does not
    tolerate unused parameters; False when it does, or may (``**kwargs``, ``static_graph``)."""
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return False  # DDP(model, **ddp_kwargs): find_unused_parameters may be in there
    fup = get_arg(call, None, "find_unused_parameters")
    if fup is not None and not (isinstance(fup, ast.Constant) and fup.value is False):
        return False
    if get_arg(call, None, "static_graph") is not None:
        return False
    return fup


def _wrapped_elsewhere(ctx, classes, subclassed, reported) -> None:
    """A class of this file built by another file of the project (``from models.seg import
    SegNet``) whose instance that file wraps in DDP without ``find_unused_parameters=True`` and
    trains (it calls ``backward()``)."""
    if not ctx.filename or ctx.filename.startswith("<"):
        return  # no file, no project around it (``project_callers`` finds none; it checks the rest)
    cands = {}
    for name, cls in classes.items():
        if name in subclassed or cls.decorator_list or not _plain_module(ctx, cls):
            continue
        unused = _unused_attrs(ctx, cls)
        if unused:
            cands[name] = (cls, unused)
    if not cands:
        return
    from ._common import project_callers

    here_outside = _attrs_read_outside(ctx, classes)
    for caller, site, _init in project_callers(ctx, set(cands), _CALLER_NEEDS):
        if not mentions(caller.sem, "backward", text=caller.src.text) or mentions(caller.sem, "_set_static_graph", text=caller.src.text) or _freezes(caller):
            continue
        cls, unused = cands[parent(_init).name]
        for call in ddp_like_calls(caller):
            if _strict_ddp(call) is False or constructor_call(caller, get_arg(call, 0, "module"), call) is not site:
                continue
            outside = here_outside | _attrs_read_outside(caller, {
                st.name: st for st in caller.sem.tree.body if isinstance(st, ast.ClassDef)})
            rng = caller.src.node_range(call)
            where = f"{os.path.basename(caller.filename)} (line {rng.start.line + 1}) wraps `{cls.name}` in DDP"
            _report_unused(ctx, reported, cls, unused, outside, where,
                           ("file", caller.filename, rng, "wrapped here without `find_unused_parameters=True`"), None)


def _report_unused(ctx, reported: set, cls, unused, outside: set, where: str, related, fix) -> None:
    for stmt, attr, kind in unused:
        if id(stmt) in reported or attr in outside:
            continue
        reported.add(id(stmt))
        ctx.report(
            stmt.targets[0],
            f"`self.{attr}` ({kind}) is created in `{cls.name}.__init__` but no method of `{cls.name}` uses "
            f"it; {where} without `find_unused_parameters=True`, so the next iteration fails with "
            "'Expected to have finished reduction in the prior iteration before starting a new one'",
            related=[related],
            fix=fix,
        )


def _freezes(ctx) -> bool:
    """The file turns gradients off somewhere (``requires_grad_(False)``, ``p.requires_grad = ...``):
    a frozen layer needs no gradient, and which one is frozen is not followed here."""
    if not mentions(ctx.sem, "requires_grad", "requires_grad_", text=ctx.src.text):
        return False
    from ..flow.helper_calls import calls_named

    for c in calls_named(ctx, "requires_grad_"):
        if isinstance(c.func, ast.Attribute):
            return True
    for st in ctx.sem.tree.body:
        for n in ast.walk(st):
            if isinstance(n, ast.Attribute) and n.attr == "requires_grad" and isinstance(
                    parent(n), (ast.Assign, ast.AugAssign)):
                return True
    return False


def _attrs_read_outside(ctx, classes) -> set[str]:
    """Attribute names read anywhere outside the file's classes (any receiver)."""
    spans = [(c.lineno, c.end_lineno) for c in classes.values()]
    out: set[str] = set()
    for n in ast.walk(ctx.sem.tree):
        if isinstance(n, ast.Attribute) and not any(a <= n.lineno <= b for a, b in spans):
            out.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and not any(a <= n.lineno <= b for a, b in spans):
            out.add(n.value)
    return out


def _module_class(ctx, e, at, classes, depth: int = 0):
    got = wrapped_class(ctx, e, at, depth)
    return got[1] if got is not None and got[0] is None and got[1].name in classes else None


def _plain_module(ctx, cls: ast.ClassDef, sem=None) -> bool:
    if len(cls.bases) != 1 or cls.keywords:
        return False
    if ((sem.qualname(cls.bases[0]) if sem is not None else ctx.qn(cls.bases[0])) or "") != "torch.nn.Module":
        return False
    names = {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return "forward" in names and "__init__" in names and not (names & {"__getattr__", "__getattribute__"})


def _param_kind(sem, value) -> str | None:
    if not isinstance(value, ast.Call):
        return None
    qn = sem.call_qualname(value) or ""
    if qn == "torch.nn.Parameter" or qn == "torch.nn.parameter.Parameter":
        rg = get_arg(value, 1, "requires_grad")
        if rg is not None and not (isinstance(rg, ast.Constant) and rg.value is True):
            return None
        return "an `nn.Parameter`"
    if qn.startswith("torch.nn."):
        layer = qn[len("torch.nn."):]
        if layer in _PARAM_LAYERS:
            return param_layer(value, layer)
    return None


# fields that never hold a node this rule looks at (identifiers, numbers, expression contexts,
# operators): the walk in ``_unused_attrs`` does not enter them
_NO_CHILD = frozenset({"ctx", "op", "ops", "id", "attr", "name", "arg", "module", "level", "kind", "type_comment",
                       "conversion", "is_async", "type_ignores", "lineno", "tag"})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
_SELF_HANDLERS = frozenset({"getattr", "setattr", "vars", "delattr", "hasattr"})


def _unused_attrs(ctx, cls: ast.ClassDef, sem=None):
    """(assignment, attribute, kind) for each parameter-holding ``self.X`` that ``__init__`` creates
    and nothing in the class uses (asked again by ``_wrapped_elsewhere``: memoised per class);
    ``sem``: the class's module when it is not this file."""
    return ctx.memo(("ddp209.unused_attrs", id(cls)), lambda: _unused_attrs_uncached(sem or ctx.sem, cls))


def _unused_attrs_uncached(sem, cls: ast.ClassDef):
    init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    created = []
    for st in init.body:  # unconditional assignments only
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            t = st.targets[0]
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                kind = _param_kind(sem, st.value)
                if kind is not None:
                    created.append((st, t.attr, kind))
    if not created:
        return []
    used: set[str] = set()
    # an attribute assigned twice in __init__ (``self.x = nn.Linear(); self.x = other``) is unclear
    counts: dict[str, int] = {}
    # every node of the class, in any order (the result does not depend on it): an explicit stack
    # with exact-class tests, several times cheaper than ``ast.walk`` with isinstance chains. Once
    # every created attribute is used the answer is known (none is unused): the walk stops there
    waiting = {attr for _st, attr, _kind in created}
    Attribute, Name, Call, Constant, AST = ast.Attribute, ast.Name, ast.Call, ast.Constant, ast.AST
    fields_of = _CHILD_FIELDS
    stack = [cls]
    pop, push = stack.pop, stack.append
    while stack:
        n = pop()
        t = n.__class__
        if t is Attribute:
            v = n.value
            if v.__class__ is Name and v.id == "self":
                if n.attr in _REFLECTIVE:
                    return []
                p = parent(n)
                if isinstance(p, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    counts[n.attr] = counts.get(n.attr, 0) + 1
                if not (isinstance(p, ast.Assign) and n in p.targets):
                    used.add(n.attr)
                    if n.attr in waiting:
                        waiting.discard(n.attr)
                        if not waiting:
                            return []
        elif t is Name:
            if n.id == "self":
                p = parent(n)
                if isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "super":
                    continue  # super(Net, self).__init__()
                if not isinstance(p, ast.Attribute) and not isinstance(p, ast.arguments) and not isinstance(p, ast.arg):
                    return []  # self handed over whole: what the callee touches is unknown
            continue  # no child nodes
        elif t is Call:
            f = n.func
            if f.__class__ is Name and f.id in _SELF_HANDLERS:
                return []
        elif t is Constant:
            if isinstance(n.value, str):
                used.add(n.value)  # a name spelled as a string may be looked up
                if n.value in waiting:
                    waiting.discard(n.value)
                    if not waiting:
                        return []
            continue
        fs = fields_of.get(t)
        if fs is None:
            fs = fields_of[t] = tuple(f for f in t._fields if f not in _NO_CHILD)
        for f in fs:
            v = getattr(n, f, None)
            if v.__class__ is list:
                for c in v:
                    if isinstance(c, AST):
                        push(c)
            elif isinstance(v, AST):
                push(v)
    return [(st, attr, kind) for st, attr, kind in created if attr not in used and counts.get(attr, 0) == 1]


def _make_fix(ctx, call: ast.Call, fup):
    if fup is not None:
        return ctx.fix(Applicability.UNSAFE, "Pass `find_unused_parameters=True`", [ctx.replace(fup, "True")])
    end = ctx.src.node_range(call).end
    # insert before the closing parenthesis
    line = ctx.src.line(end.line)
    if end.column == 0 or line[end.column - 1] != ")":
        return None
    before = ctx.text(call)[:-1].rstrip()
    sep = "" if before.endswith(("(", ",")) else ", "
    if before.endswith(","):
        sep = " "
    pos = Position(end.line, end.column - 1)
    return ctx.fix(Applicability.UNSAFE, "Pass `find_unused_parameters=True`",
                   [Edit(Range(pos, pos), f"{sep}find_unused_parameters=True")])


def _prepare_call(call) -> bool:
    """Accelerate's ``accelerator.prepare(...)`` (the other wraps are DDP calls or a helper's)."""
    return isinstance(call.func, ast.Attribute) and call.func.attr == "prepare"
