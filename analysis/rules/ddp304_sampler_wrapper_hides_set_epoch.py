from __future__ import annotations

import ast

from ..model import Applicability, Edit, Position, Range, Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes
from ._loader import DATALOADER, is_loader_call, is_none, is_true, loader_arg, project_sampler

# the torch sampler classes; only DistributedSampler has ``set_epoch``
_SAMPLER_BASES = frozenset({
    "torch.utils.data.Sampler", "torch.utils.data.sampler.Sampler",
    "torch.utils.data.BatchSampler", "torch.utils.data.sampler.BatchSampler",
})
_EPOCH_SAMPLERS = frozenset({
    "torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler",
})
_SAMPLER_TYPES = _SAMPLER_BASES | _EPOCH_SAMPLERS
_DELEGATES = frozenset({"set_epoch", "__getattr__", "__getattribute__"})


class SamplerWrapperHidesSetEpoch(Rule):
    """
    ## What it does
    Checks for a sampler wrapper, a class whose `__iter__` walks a sampler it was given
    (`self._sampler = sampler` in `__init__`, then `for batch in self._sampler` / `iter(...)` /
    `yield from ...`), that defines no `set_epoch` to pass the epoch on, and no `__getattr__`
    that would forward it.

    The wrapper must also stand in for the sampler: a property or method returns an attribute of
    the wrapped object (`return self._sampler.sampler`, `.batch_size`, `.drop_last`), so code
    that reads the sampler interface from the loader meets the wrapper. It is a sampler wrapper
    when the value flow says so: the class subclasses torch's `Sampler` or
    `BatchSampler`, or the wrapped parameter is annotated with a torch sampler class, or an
    instance of the class is given to a `DataLoader` as `sampler=` / `batch_sampler=` in the same
    module. Its base classes must be known not to define `set_epoch` (none, `object`, torch's
    `Sampler` / `BatchSampler`, or classes of the same module that qualify themselves).

    The same loss happens one level up, in a composite: a class whose base (in this module or
    another, followed through imports) defines `set_epoch` as a no-op (`pass`), that stores the
    objects it wraps from `__init__` (`self.datasets = list(datasets)`) and forwards at least two
    of its public methods or properties to them under their own names (`def prefetch(...)`:
    `ds.prefetch(...)` for each `ds` in `self.datasets`), but does not override `set_epoch`:
    the inherited no-op swallows the epoch meant for the children.

    The same loss happens at the call: a `set_epoch` whose receiver holds only `loader.sampler`
    (also `getattr(loader, "sampler", None)`, in an epoch hook of another module, a method reading
    `self.loader.sampler`, followed by value flow to the `DataLoader(...)` through builders,
    tuples and callers) of loaders built with `batch_sampler=` and no `sampler=`, where the batch
    sampler was built around a shuffling `DistributedSampler` (torch's `BatchSampler` or a project
    class defining neither `set_epoch` nor `__getattr__`). The finding is on that call. Nothing is
    reported when another `set_epoch` call of the modules on the way (the hook's, the loader's,
    the sampler's, the callers' a few calls up) may reach the sampler:
    `loader.batch_sampler.sampler.set_epoch(epoch)`, or a batch sampler that forwards it.

    ## Why is this bad?
    Training loops and frameworks set the epoch through whatever sampler the loader holds, most
    often duck-typed: `if hasattr(loader.batch_sampler, "set_epoch"): ...set_epoch(epoch)`. A
    wrapper without `set_epoch` makes that test false, so the `DistributedSampler` inside never
    hears of the epoch and replays the same order every epoch on every rank, silently.

    A DataLoader given `batch_sampler=` makes its own `sampler` attribute a `SequentialSampler`
    over the dataset (which has no `set_epoch`): a hook that sets the epoch on `loader.sampler`
    behind `hasattr(..., "set_epoch")` skips silently, and one without the test raises.

    ## Example
    ```python
    class IndexRecordingBatchSampler:
        def __init__(self, batch_sampler):
            self._batch_sampler = batch_sampler

        def __iter__(self):
            for batch in self._batch_sampler:
                yield batch

        @property
        def sampler(self):
            return self._batch_sampler.sampler
    ```

    ## Use instead
    ```python
    class IndexRecordingBatchSampler:
        def __init__(self, batch_sampler):
            self._batch_sampler = batch_sampler

        def __iter__(self):
            for batch in self._batch_sampler:
                yield batch

        @property
        def sampler(self):
            return self._batch_sampler.sampler

        def set_epoch(self, epoch: int) -> None:
            if hasattr(self._batch_sampler, "set_epoch"):
                self._batch_sampler.set_epoch(epoch)
    ```

    For the loader's default sampler, set the epoch on the sampler inside the batch sampler:
    ```python
    loader.batch_sampler.sampler.set_epoch(epoch)
    ```

    ## Fix safety
    No fix is offered for a `set_epoch` on the loader's default sampler. The fix appends that `set_epoch` method to the class (for a composite, one that calls
    `super().set_epoch(epoch)` and then each wrapped object's `set_epoch`, where it has one). It is **unsafe**: code that tested
    `hasattr(wrapper, "set_epoch")` now takes the other branch, and the order of the samples
    changes from the next epoch on (which is the point).
    """

    code = "DDP304"
    name = "sampler-wrapper-hides-set-epoch"
    severity = Severity.WARNING
    fix_availability = "always"
    # every finding is about a class that defines ``__init__`` (a sampler wrapper stores the sampler
    # there; a composite stores what it forwards to)
    requires_text = ("__init__", "set_epoch")
    # an epoch hook of a training library may never spell "torch": its ``set_epoch`` call
    base_text = ("torch", "set_epoch")

    @classmethod
    def reach(cls, text, filename):
        # a sampler wrapper defines ``__iter__`` and names a sampler (a torch sampler class, a
        # ``sampler=`` keyword); a composite inherits a ``set_epoch`` defined in this file or in a
        # module its imports reach
        if "__iter__" in text and "sampler" in text.lower():
            return True, {}
        from ..flow.reach import reaches

        return reaches(filename, text, ("set_epoch",))
    node_types = (ast.ClassDef,)

    def finish(self, ctx) -> None:
        self._default_sampler(ctx)
        classes = {c.name: c for c in ctx.sem.by_type.get(ast.ClassDef, ())}
        for cls in ctx.sem.by_type.get(ast.ClassDef, ()):
            try:
                self._check(ctx, cls, classes)
            except RecursionError:  # pragma: no cover - a pathological class hierarchy
                continue

    def _check(self, ctx, cls: ast.ClassDef, classes: dict) -> None:
        got = _wrapped(cls)
        if got is None:
            self._composite(ctx, cls)
            return
        attr, param = got
        if not _forwards(cls, attr):
            return
        bases = _bases_known(ctx, cls, classes, set())
        if bases is None:
            return
        if not (bases or _annotated_sampler(ctx, param) or _given_to_loader(ctx, cls)):
            return
        ctx.report(
            _name_range(ctx, cls),
            f"sampler wrapper `{cls.name}` has no `set_epoch`: the epoch never reaches the wrapped "
            f"sampler `self.{attr}` (a DistributedSampler inside repeats its order every epoch)",
            fix=self._fix(ctx, cls, attr),
        )

    def _default_sampler(self, ctx) -> None:
        """A ``set_epoch`` that reaches only ``loader.sampler`` of loaders given ``batch_sampler=``
        (torch's default SequentialSampler) while the batch sampler wraps a shuffling
        DistributedSampler that nothing else gives the epoch (``flow.epoch_targets``)."""
        sets = [c for c in ctx.sem.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "set_epoch"]
        if not sets:
            return
        from ..flow import for_context
        from ..flow.epoch_targets import misdirected_set_epoch
        from ..flow.findings import node_related
        from ._common import other_call_sites

        ana = for_context(ctx)
        callers = other_call_sites(ctx, ana, methods=True, modules=True)
        for c in sets:
            got = misdirected_set_epoch(ana, ana.main, c, _batch_sampler_of, _shuffling_dist_sampler(ana), callers)
            if got is None:
                continue
            lv, ld, sv, sc = got
            ctx.report(
                c,
                f"`{ctx.text(c.func.value)}` here is the loader's `sampler`, which for a DataLoader built with "
                "`batch_sampler=` is torch's default SequentialSampler (no `set_epoch`): the shuffling "
                "DistributedSampler inside the batch sampler never gets the epoch and repeats its order every "
                "epoch; set it on that sampler (`loader.batch_sampler.sampler`, or the sampler itself), or give "
                "the batch sampler a `set_epoch` that forwards it and call that",
                related=[node_related(ctx, lv.path, ld, "the DataLoader built with `batch_sampler=`"),
                         node_related(ctx, sv.path, sc, "the DistributedSampler that never gets the epoch")],
            )

    def _composite(self, ctx, cls: ast.ClassDef) -> None:
        """A class that overrides its base's protocol by forwarding each method to the object(s) it
        wraps, where the base's ``set_epoch`` does nothing and the class does not forward it."""
        if not cls.bases or _defines_epoch(cls):
            return
        got = _forwarded(cls)
        if got is None:
            return
        attr, many = got
        from ..flow import for_context

        ana = for_context(ctx)
        view, seen = ana.main, 0
        bases = list(cls.bases)
        while bases and seen < 4:
            seen += 1
            found = ana.resolve_class(view, bases[0])
            if found is None:
                return
            view, base = found
            st = _method(base, "set_epoch")
            if st is not None:
                if not _no_op(st):
                    return
                break
            if any(isinstance(x, FUNC_TYPES) and x.name in ("__getattr__", "__getattribute__") for x in base.body):
                return
            bases = list(base.bases)
        else:
            return
        ctx.report(
            _name_range(ctx, cls),
            f"`{cls.name}` forwards its base's protocol to `self.{attr}` but not `set_epoch`: the "
            f"inherited `set_epoch` does nothing, so the wrapped dataset{'s never hear' if many else ' never hears'} "
            "of the epoch",
            fix=self._fix(ctx, cls, attr, many),
        )

    def _fix(self, ctx, cls: ast.ClassDef, attr: str, many: bool | None = None):
        last = cls.body[-1]
        end = (last.end_lineno or last.lineno) - 1
        first = cls.body[0]
        if first.lineno == cls.lineno or end + 1 >= len(ctx.src.lines) + 1:
            return None
        rest = ctx.src.line(end)[ctx.src.char_col(end, last.end_col_offset):].strip()
        if rest and not rest.startswith("#"):
            return None
        indent = ctx.src.indent_of(first.lineno - 1)
        step = indent[len(ctx.src.indent_of(cls.lineno - 1)):] or "    "
        nl = ctx.src.newline
        if many is None:
            code = (f"{nl}{indent}def set_epoch(self, epoch: int) -> None:{nl}"
                    f"{indent}{step}if hasattr(self.{attr}, \"set_epoch\"):{nl}"
                    f"{indent}{step}{step}self.{attr}.set_epoch(epoch){nl}")
        elif many:
            code = (f"{nl}{indent}def set_epoch(self, epoch):{nl}"
                    f"{indent}{step}super().set_epoch(epoch){nl}"
                    f"{indent}{step}for ds in self.{attr}:{nl}"
                    f"{indent}{step}{step}if hasattr(ds, \"set_epoch\"):{nl}"
                    f"{indent}{step}{step}{step}ds.set_epoch(epoch){nl}")
        else:
            code = (f"{nl}{indent}def set_epoch(self, epoch):{nl}"
                    f"{indent}{step}super().set_epoch(epoch){nl}"
                    f"{indent}{step}if hasattr(self.{attr}, \"set_epoch\"):{nl}"
                    f"{indent}{step}{step}self.{attr}.set_epoch(epoch){nl}")
        if end + 1 < len(ctx.src.lines):
            pos = Position(end + 1, 0)
            edit = Edit(Range(pos, pos), code)
        else:
            eol = Position(end, len(ctx.src.line(end)))
            edit = Edit(Range(eol, eol), nl + code.rstrip("\r\n"))
        return ctx.fix(Applicability.UNSAFE, f"Add `{cls.name}.set_epoch` forwarding to `self.{attr}`", [edit])


def _defines_epoch(cls: ast.ClassDef) -> bool:
    for st in cls.body:
        if isinstance(st, FUNC_TYPES) and st.name in _DELEGATES:
            return True
        if isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            if any(isinstance(t, ast.Name) and t.id in _DELEGATES for t in targets):
                return True
    for fn in (st for st in cls.body if isinstance(st, FUNC_TYPES)):
        for n in iter_scope_nodes(fn):
            if isinstance(n, (ast.Assign, ast.AnnAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if any(_self_attr(t) in _DELEGATES for t in targets):
                    return True
    return False


def _no_op(fn) -> bool:
    """The body does nothing: ``pass``, a docstring, ``...``, a bare ``return``."""
    for st in fn.body:
        if isinstance(st, ast.Pass) or (isinstance(st, ast.Return) and st.value is None):
            continue
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            continue
        return False
    return True


def _forwarded(cls: ast.ClassDef):
    """(attribute, is it a collection) when ``__init__`` stores a parameter (or ``list(param)`` /
    ``tuple(param)``) in ``self.<attribute>`` and at least two public methods or properties of
    the class forward to it under their own name (``def prefetch(...): ds.prefetch(...)`` for
    ``ds`` in ``self.datasets``, ``return self.datasets[0].collater(...)``); else None."""
    init = _method(cls, "__init__")
    if init is None:
        return None
    a = init.args
    params = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)[1:]}
    star = a.vararg.arg if a.vararg else None
    stored: dict[str, bool] = {}
    for n in iter_scope_nodes(init):
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        attr = _self_attr(n.targets[0])
        v = n.value
        many = False
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("list", "tuple") \
                and len(v.args) == 1 and not v.keywords:
            v, many = v.args[0], True
        if attr and isinstance(v, ast.Name) and (v.id in params or v.id == star):
            stored[attr] = many or v.id == star
    best = None
    # each public method read once, not once per stored attribute
    public = [_own_name_reads(fn) for fn in cls.body if isinstance(fn, FUNC_TYPES) and not fn.name.startswith("_")]
    public = [r for r in public if r[1]]  # a method that never reads its own name forwards nothing
    for attr, many in stored.items():
        count = 0
        for reads in public:
            if _forwards_own_name(reads, attr):
                count += 1
        if count >= 2:
            walked = any(isinstance(n, (ast.For, ast.comprehension)) and _mentions_attr(n.iter, attr)
                         for fn in cls.body if isinstance(fn, FUNC_TYPES) for n in ast.walk(fn))
            best = (attr, many or walked)
            break
    return best


def _mentions_attr(expr, attr: str) -> bool:
    return any(_self_attr(n) == attr for n in ast.walk(expr))


def _own_name_reads(fn) -> tuple[list, list]:
    """(the loops of ``fn`` as (iterable, target) pairs, the bases ``b`` of every ``b.<fn's own
    name>``, subscripts stripped), in one walk of ``fn``."""
    loops: list = []
    bases: list = []
    for n in ast.walk(fn):
        if isinstance(n, (ast.For, ast.comprehension)):
            loops.append((n.iter, n.target))
        elif isinstance(n, ast.Attribute) and n.attr == fn.name:
            base = n.value
            while isinstance(base, ast.Subscript):
                base = base.value
            bases.append(base)
    return loops, bases


def _forwards_own_name(reads: tuple[list, list], attr: str) -> bool:
    """The method (``_own_name_reads``) reads its own name off the wrapped object(s):
    ``self.<attr>``, ``self.<attr>[i]`` or a loop variable over ``self.<attr>``."""
    loops, bases = reads
    loop_vars: set[str] = set()
    for it, target in loops:
        if _mentions_attr(it, attr):
            loop_vars.update(t.id for t in ast.walk(target) if isinstance(t, ast.Name))
    for base in bases:
        if _self_attr(base) == attr or (isinstance(base, ast.Name) and base.id in loop_vars):
            return True
    return False


def _batch_sampler_of(view, call):
    """The ``batch_sampler=`` of a DataLoader construction given one and no ``sampler=``."""
    if not is_loader_call(view.sem, call) or loader_arg(call, "sampler") is not None:
        return None
    bs = loader_arg(call, "batch_sampler")
    return None if bs is None or is_none(bs) else bs


def _shuffling_dist_sampler(ana):
    def pred(view, call) -> bool:
        qn = view.sem.call_qualname(call) or ""
        if qn not in _EPOCH_SAMPLERS and not project_sampler(ana, view, call, tuple(_EPOCH_SAMPLERS)):
            return False
        shuffle = get_arg(call, 3, "shuffle")
        return shuffle is None or is_true(shuffle, view.sem)
    return pred


def _name_range(ctx, cls: ast.ClassDef) -> Range:
    line = cls.lineno - 1
    text = ctx.src.line(line)
    col = text.find(cls.name, text.find("class"))
    if col < 0:
        return Range(ctx.src.node_start(cls), ctx.src.node_start(cls))
    return Range(Position(line, col), Position(line, col + len(cls.name)))


def _method(cls: ast.ClassDef, name: str):
    return next((s for s in cls.body if isinstance(s, FUNC_TYPES) and s.name == name), None)


def _self_attr(e) -> str | None:
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return e.attr
    return None


def _wrapped(cls: ast.ClassDef):
    """(attribute, ``__init__`` parameter) when ``__iter__`` walks ``self.<attribute>`` and
    ``__init__`` sets that attribute from one of its parameters; the class itself defines no
    ``set_epoch`` (method, class attribute or ``self.set_epoch = ...``) nor ``__getattr__``."""
    init, it = _method(cls, "__init__"), _method(cls, "__iter__")
    if init is None or it is None:
        return None
    if _defines_epoch(cls):
        return None
    walked: set[str] = set()
    for n in iter_scope_nodes(it):
        if isinstance(n, (ast.For, ast.AsyncFor)):
            src = n.iter
            while isinstance(src, ast.Call) and isinstance(src.func, ast.Name) and src.func.id in (
                    "enumerate", "iter") and src.args:
                src = src.args[0]
            a = _self_attr(src)
        elif isinstance(n, ast.YieldFrom):
            a = _self_attr(n.value)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "iter" and n.args:
            a = _self_attr(n.args[0])
        else:
            a = None
        if a:
            walked.add(a)
    if not walked:
        return None
    params = {a.arg: a for a in (*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs)[1:]}
    for n in iter_scope_nodes(init):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Name) and n.value.id in params:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                a = _self_attr(t)
                if a in walked:
                    return a, params[n.value.id]
    return None


def _forwards(cls: ast.ClassDef, attr: str) -> bool:
    """The class presents an attribute of the wrapped sampler as its own: a property or method
    that returns ``self.<attr>.<name>`` (``sampler``, ``batch_size``, ``drop_last``...). Such a
    wrapper stands in for the sampler, so code that reads the sampler interface from it (and sets
    the epoch if ``set_epoch`` is there) meets it."""
    for fn in cls.body:
        if not isinstance(fn, FUNC_TYPES) or fn.name.startswith("__"):
            continue
        for n in iter_scope_nodes(fn):
            if isinstance(n, ast.Return) and isinstance(n.value, ast.Attribute) and _self_attr(n.value.value) == attr:
                return True
    return False


def _bases_known(ctx, cls: ast.ClassDef, classes: dict, seen: set):
    """True: some base is a torch sampler class without ``set_epoch``; False: no base but ``object``
    or module classes that qualify; None: some base is unknown or may define ``set_epoch``."""
    if id(cls) in seen:
        return None
    seen.add(id(cls))
    sampler = False
    for b in cls.bases:
        qn = ctx.qn(b) or ""
        if isinstance(b, ast.Name) and b.id == "object":
            continue
        if qn in _SAMPLER_BASES:
            sampler = True
            continue
        if isinstance(b, ast.Name) and b.id in classes:  # a class of this module
            base = classes[b.id]
            if any(isinstance(s, FUNC_TYPES) and s.name in _DELEGATES for s in base.body):
                return None
            got = _bases_known(ctx, base, classes, seen)
            if got is None:
                return None
            sampler = sampler or got
            continue
        return None
    if cls.keywords:
        return None  # a metaclass may add anything
    return sampler


def _annotated_sampler(ctx, param: ast.arg) -> bool:
    ann = param.annotation
    if ann is None:
        return False
    return any(isinstance(n, (ast.Name, ast.Attribute)) and (ctx.qn(n) or "") in _SAMPLER_TYPES for n in ast.walk(ann))


def _given_to_loader(ctx, cls: ast.ClassDef) -> bool:
    """An instance of ``cls`` reaches a DataLoader's ``sampler=`` / ``batch_sampler=`` in this
    module (constructed there, or through a name bound to the construction)."""
    from ..flow import for_context
    from ..flow.origins import origins

    loaders = ctx.sem.calls_to(DATALOADER)
    if not loaders:
        return False
    ana = for_context(ctx)
    for ld in loaders:
        for k in ld.keywords:
            if k.arg not in ("sampler", "batch_sampler"):
                continue
            for v, e in origins(ana, ana.main, k.value, ld):
                if v is ana.main and isinstance(e, ast.Call) and isinstance(e.func, ast.Name) \
                        and e.func.id == cls.name and ctx.sem.scope_of(e) is not None:
                    return True
    return False
