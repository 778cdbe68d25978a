from __future__ import annotations

import ast

from ..model import Applicability, Edit, Position, Range, Severity
from ..registry import NoCase, Rule
from ..semantic import FUNC_TYPES, iter_scope_nodes
from ._loader import DATALOADER

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

    ## Why is this bad?
    Training loops and frameworks set the epoch through whatever sampler the loader holds, most
    often duck-typed: `if hasattr(loader.batch_sampler, "set_epoch"): ...set_epoch(epoch)`. A
    wrapper without `set_epoch` makes that test false, so the `DistributedSampler` inside never
    hears of the epoch and replays the same order every epoch on every rank, silently.

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

    ## Fix safety
    The fix appends that `set_epoch` method to the class. It is **unsafe**: code that tested
    `hasattr(wrapper, "set_epoch")` now takes the other branch, and the order of the samples
    changes from the next epoch on (which is the point).
    """

    code = "DDP304"
    name = "sampler-wrapper-hides-set-epoch"
    severity = Severity.WARNING
    fix_availability = "always"
    # a wrapper defines ``__iter__``; the sampler evidence is a torch sampler class or ``sampler=``
    requires_text_all = (("__iter__",),)
    requires_text = (NoCase("sampler"),)
    node_types = (ast.ClassDef,)

    def finish(self, ctx) -> None:
        classes = {c.name: c for c in ctx.sem.by_type.get(ast.ClassDef, ())}
        for cls in ctx.sem.by_type.get(ast.ClassDef, ()):
            try:
                self._check(ctx, cls, classes)
            except RecursionError:  # pragma: no cover - a pathological class hierarchy
                continue

    def _check(self, ctx, cls: ast.ClassDef, classes: dict) -> None:
        got = _wrapped(cls)
        if got is None:
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

    def _fix(self, ctx, cls: ast.ClassDef, attr: str):
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
        code = (f"{nl}{indent}def set_epoch(self, epoch: int) -> None:{nl}"
                f"{indent}{step}if hasattr(self.{attr}, \"set_epoch\"):{nl}"
                f"{indent}{step}{step}self.{attr}.set_epoch(epoch){nl}")
        if end + 1 < len(ctx.src.lines):
            pos = Position(end + 1, 0)
            edit = Edit(Range(pos, pos), code)
        else:
            eol = Position(end, len(ctx.src.line(end)))
            edit = Edit(Range(eol, eol), nl + code.rstrip("\r\n"))
        return ctx.fix(Applicability.UNSAFE, f"Add `{cls.name}.set_epoch` forwarding to `self.{attr}`", [edit])


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
    for s in cls.body:
        if isinstance(s, FUNC_TYPES) and s.name in _DELEGATES:
            return None
        if isinstance(s, (ast.Assign, ast.AnnAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if any(isinstance(t, ast.Name) and t.id in _DELEGATES for t in targets):
                return None
    for fn in (s for s in cls.body if isinstance(s, FUNC_TYPES)):
        for n in iter_scope_nodes(fn):
            if isinstance(n, (ast.Assign, ast.AnnAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if any(_self_attr(t) in _DELEGATES for t in targets):
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
