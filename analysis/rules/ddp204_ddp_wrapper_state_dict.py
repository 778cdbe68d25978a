from __future__ import annotations

import ast

from ..model import Applicability, Edit, Range, Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ..flow.assignments import dominates, reaching_assignment, reaching_value
from ..flow.models import is_ddp_wrapper
from ..flow.mentions import mentions, names_string
from ._common import ddp_or_callers_reach, shown_path


# the file strips or adds the prefix itself: ``k.replace("module.", "")``, ``consume_prefix_...``
def _handles_prefix(sem, text: str | None = None) -> bool:
    """The file's code strips or adds the ``module.`` prefix itself (a string value starting with
    ``module.``, or ``consume_prefix_in_state_dict_if_present``); comments, docstrings and messages
    do not count (``flow.mentions``)."""
    return mentions(sem, "consume_prefix_in_state_dict_if_present", text=text) or names_string(
        sem, lambda s: s.startswith("module."), text=text, needle="module.")


class DdpWrapperStateDict(Rule):
    """
    ## What it does
    Checks for `torch.save(...)` of `ddp_model.state_dict()` where `ddp_model` holds the
    `DistributedDataParallel` wrapper, directly or inside a dict (also one built lines before the
    save: the finding is at the `.state_dict()` call, the line to change), through a variable or
    `self.<attr>`, or as the parameter of a checkpoint helper (`def save_checkpoint(net, path)`) that
    every call in the file passes the wrapper. A checkpoint helper of another project file
    (`from utils.checkpoint import save_checkpoint`) that saves `<param>.state_dict()` is reported at
    the call that passes it the wrapper (`save_checkpoint(ddp_model, ...)`), unless its module
    handles the prefix or the script loads the checkpoint back into the same wrapper.

    A `self.<attr>` counts when it holds the wrapper on some path: a trainer that builds
    `self.model = Net()` and then, maybe only when a process group is up, `self.model =
    DDP(self.model)` in `__init__` or a setup method `__init__` calls (a tuple assignment too), with
    no binding that unwraps it (`self.model.module`, `getattr(self.model, "module", ...)`), and saves
    `self.model.state_dict()` in another method, directly or through a helper it passes
    `self.model`. The wrapper may also come from a helper of another project module that returns
    it (`model = wrap(model)` with `def wrap(m): return DDP(m, device_ids=[rank])` in `utils.py`). The distributed run writes `module.` keys that its own unwrapped load (resume, or
    a single-process `--mode predict`) cannot read.

    A file that loads the checkpoint back into the same wrapper (`ddp_model.load_state_dict(...)`,
    or hands the wrapper to a restore helper such as `restart_from_checkpoint(path, model=ddp_model)`)
    or handles the prefix itself (mentions `"module."` or calls
    `consume_prefix_in_state_dict_if_present`) is not flagged. A load counts only where the name it
    passes holds the wrapper there: a resume that loads into the plain model before
    `model = DDP(model)` wraps it (`load_checkpoint(path, model)` first, the wrap after; a tuple
    assignment `model, step = DDP(model), 0` too) reads the very checkpoint the wrapper's save
    makes unreadable, and is reported.

    ## Why is this bad?
    The wrapper's keys all start with `module.`. Loading the checkpoint into the plain model (for
    inference, evaluation, or a run with another world size) fails:

    ```
    RuntimeError: Error(s) in loading state_dict for ResNet:
        Missing key(s) in state_dict: "conv1.weight", "bn1.weight", ...
        Unexpected key(s) in state_dict: "module.conv1.weight", "module.bn1.weight", ...
    ```

    ## Example
    ```python
    ddp_model = DDP(model, device_ids=[local_rank])
    ...
    torch.save(ddp_model.state_dict(), "model.pt")
    ```

    ## Use instead
    ```python
    torch.save(ddp_model.module.state_dict(), "model.pt")
    ```

    ## Fix safety
    The fix saves `ddp_model.module.state_dict()`. It is **safe** where the wrapping always
    happens before the save: the checkpoint then holds the plain model's keys, loadable anywhere.
    Where the wrap is conditional (`if args.distributed: model = DDP(model)`), `.module` would
    not exist on the other path, so no fix is offered
    (save `getattr(model, "module", model).state_dict()` by hand).
    """

    code = "DDP204"
    name = "ddp-wrapper-state-dict"
    severity = Severity.WARNING
    fix_availability = "sometimes"
    # the wrap: in this file, or in a helper of a project module it imports (``model = wrap(model)``),
    # or in a caller that passes the wrapper (``reach``)
    requires_text = ("DistributedDataParallel", "import")
    requires_text_all = (("save", "ckpt", "checkpoint"),)  # torch.save, or a checkpoint helper of the project
    reach = classmethod(ddp_or_callers_reach)

    def finish(self, ctx) -> None:
        if _handles_prefix(ctx.sem, ctx.src.text):
            return
        self._project_savers(ctx)
        saves = ctx.calls_to("torch.save")
        if not saves:
            return
        for save in saves:
            obj = get_arg(save, 0, "obj")
            if obj is None:
                continue
            for sd_call, holder, ddp_assign in _wrapper_state_dicts(ctx, obj, save):
                if _loaded_back(ctx, holder, ddp_assign):
                    continue
                fix = None
                if dominates(ddp_assign, sd_call):
                    end = ctx.src.node_end(holder)
                    fix = ctx.fix(Applicability.SAFE, "Save the wrapped module's state: `.module.state_dict()`",
                                  [Edit(Range(end, end), ".module")])
                h = ctx.text(holder)
                # at the ``.state_dict()`` read through the wrapper: the line a fix edits, also when
                # the dict holding it is built lines before the save
                ctx.report(
                    sd_call,
                    f"`{h}` {'is' if fix is not None else 'holds'} the DDP wrapper"
                    f"{'' if fix is not None else ' where it is wrapped'}: its state_dict keys carry a `module.` prefix "
                    "and will not load into the plain model; save "
                    + (f"`{h}.module.state_dict()`" if fix is not None else
                       f"the wrapped module's state (`{h}.module` where it is wrapped, e.g. "
                       f"`getattr({h}, \"module\", {h}).state_dict()`)"),
                    related=[(ddp_assign, "wrapped in DistributedDataParallel here"),
                             *([] if save.lineno == sd_call.lineno else [(save, "saved by `torch.save` here")])],
                    fix=fix,
                )


    @staticmethod
    def _project_savers(ctx) -> None:
        """``save_checkpoint(ddp_model, path)``: a function of another project file that saves
        ``<param>.state_dict()`` of the parameter this call fills with the DDP wrapper."""
        from ..flow.wrap_sites import wrap_sites  # ``DDP(...)``, or a project helper's wrapper

        ddp = [w.call for w in wrap_sites(ctx)]
        if not ddp:
            return
        from ..flow import for_context  # lazy: only DDP files that call helpers with the wrapper

        ana = for_context(ctx)
        # only calls of names imported from a module that may be the project's own reach another file
        imports = {k for k, (mod, level, _attr) in ana.main.imports.items()
                   if level or mod.split(".", 1)[0] not in _NOT_PROJECT}
        if not imports:
            return
        # the names (``model``, ``self.model``) that some assignment binds to the wrapper: a cheap
        # filter before asking, per argument, whether it holds the wrapper at that call
        bound = {ctx.text(t) for c in ddp for t in _targets_of(c)}
        bound_names = {b for b in bound if b.isidentifier()}
        bound_tails = {b.rsplit(".", 1)[-1] for b in bound - bound_names}
        for call in ctx.sem.calls:
            f = call.func
            if not (call.args or call.keywords) or not (
                    (isinstance(f, ast.Name) and f.id in imports)
                    or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in imports)):
                continue
            if not any((isinstance(a, ast.Name) and a.id in bound_names)
                       or (isinstance(a, ast.Attribute) and a.attr in bound_tails)
                       for a in (*call.args, *(k.value for k in call.keywords))):
                continue
            if not isinstance(call.func, (ast.Name, ast.Attribute)) or (ctx.qn(call) or "").startswith("torch."):
                continue
            passed = [(i, None, a) for i, a in enumerate(call.args)] + [(None, k.arg, k.value) for k in call.keywords]
            held = [(i, kw, a, st) for i, kw, a in passed if isinstance(a, (ast.Name, ast.Attribute))
                    and (a.id if isinstance(a, ast.Name) else ctx.text(a)) in bound
                    and (st := _bound_wrapper(ctx, a, call)) is not None]
            if not held or any(isinstance(a, ast.Starred) for a in call.args):
                continue
            got = ana.resolve_call(ana.main, call)
            if got is None or got[0] is ana.main or got[0].path is None:
                continue
            view, fn = got
            if _handles_prefix(view.sem, view.text) or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = [x.arg for x in (*fn.args.posonlyargs, *fn.args.args)]
            if isinstance(getattr(fn, "_p", None), ast.ClassDef) and names and names[0] in ("self", "cls"):
                names = names[1:]
            for i, kw, arg, st in held:
                pname = kw if kw is not None else (names[i] if i < len(names) else None)
                if pname is None or _loaded_back(ctx, arg, st):
                    continue
                save = _saves_state_dict_of(view, fn, pname)
                if save is None:
                    continue
                from ..source import SourceText  # noqa: PLC0415  (only for the other file's range)

                h = ctx.text(arg)
                ctx.report(
                    arg,
                    f"`{h}` is the DDP wrapper, and `{fn.name}` saves its `{pname}.state_dict()` "
                    f"({shown_path(ctx, view.path)} line {save.lineno}): the keys carry a `module.` prefix and will "
                    f"not load into the plain model; pass `{h}.module`",
                    related=[("file", view.path, SourceText(view.text).node_range(save),
                              "the checkpoint is written here"),
                             (st, "wrapped in DistributedDataParallel here")],
                )
                break


def _targets_of(value: ast.AST) -> list[ast.AST]:
    """The targets ``value`` is bound to: ``x = value``, or its place in ``x, y = value, other``."""
    p = parent(value)
    if isinstance(p, ast.Assign):
        return list(p.targets)
    st = parent(p) if isinstance(p, ast.Tuple) else None
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Tuple) \
            and len(st.targets[0].elts) == len(p.elts):
        return [st.targets[0].elts[p.elts.index(value)]]
    return []


def _bound_wrapper(ctx, a, call):
    """The ``X = DDP(...)`` that binds ``a`` at ``call`` in the same scope (or ``self.X``), without
    following parameters to their callers (the cheap question, asked of every call)."""
    if isinstance(a, ast.Name):
        v = reaching_value(ctx, a.id, call)  # ``model = DDP(net)``, ``model, step = DDP(net), 0``
        if isinstance(v, ast.Call) and (ctx.qn(v) == DDP_QN or any(w.call is v for w in _wrap_sites(ctx))):
            st = parent(v)
            while st is not None and not isinstance(st, ast.stmt):
                st = parent(st)
            return st
        return None
    return is_ddp_wrapper(ctx, a, call, may=True)


DDP_QN = "torch.nn.parallel.DistributedDataParallel"


def _wrap_sites(ctx):
    from ..flow.wrap_sites import wrap_sites  # ``model = wrap(model)`` of a project helper too

    return wrap_sites(ctx)
_NOT_PROJECT = frozenset({"torch", "torchvision", "numpy", "os", "sys", "math", "time", "json", "logging", "random",
                          "argparse", "collections", "functools", "itertools", "typing", "pathlib", "shutil",
                          "datetime", "copy", "pickle", "warnings", "dataclasses", "tqdm", "yaml", "wandb",
                          "transformers", "timm", "re", "subprocess", "__future__"})


def _saves_state_dict_of(view, fn, pname: str):
    """The ``torch.save`` of ``fn`` whose object holds ``<pname>.state_dict()`` (directly, in a
    dict / list, or through a name assigned once), with ``pname`` never rebound in ``fn``."""
    memo = view.memo.setdefault("ddp204.saves_state_dict_of", {})
    key = (id(fn), pname)
    if key not in memo:
        memo[key] = _saves_state_dict_uncached(view, fn, pname)
    return memo[key]


def _saves_state_dict_uncached(view, fn, pname: str):
    sem = view.sem
    if sem.assignments(fn).get(pname):
        return None
    for c in sem.calls_to("torch.save"):
        if sem.enclosing_function(c) is not fn:
            continue
        obj = get_arg(c, 0, "obj")
        if obj is None:
            continue
        if isinstance(obj, ast.Name):
            obj = sem.single_value(obj.id, fn)
            if obj is None:
                continue
        for e in _saved_parts(obj):
            if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "state_dict" \
                    and not e.args and not e.keywords and isinstance(e.func.value, ast.Name) \
                    and e.func.value.id == pname:
                return c
    return None


def _saved_parts(obj: ast.AST) -> list[ast.AST]:
    """The values a saved object is made of: a dict display's values, a list/tuple's elements,
    ``dict(k=v)``'s keyword values; else the object itself."""
    if isinstance(obj, ast.Dict):
        return [v for v in obj.values if v is not None]
    if isinstance(obj, (ast.List, ast.Tuple)):
        return list(obj.elts)
    if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "dict":
        return [k.value for k in obj.keywords]
    return [obj]


def _wrapper_state_dicts(ctx, obj: ast.AST, save: ast.Call, depth: int = 0):
    """(state_dict call, the wrapper expression, its DDP assignment) inside the saved object."""
    if depth > 2:
        return
    if isinstance(obj, ast.Name):
        st = reaching_assignment(ctx, obj.id, save)
        if st is not None:
            yield from _wrapper_state_dicts(ctx, st.value, save, depth + 1)
        return
    for e in _saved_parts(obj):
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "state_dict" \
                and not e.args and not e.keywords:
            holder = e.func.value
            st = is_ddp_wrapper(ctx, holder, save, may=True)
            if st is not None:
                yield e, holder, st
        elif isinstance(e, ast.Name) and depth < 2 and e is not obj:
            yield from _wrapper_state_dicts(ctx, e, save, depth + 1)


_RESTORE_WORDS = ("load", "restore", "resume", "restart", "checkpoint", "ckpt")


def _loaded_back(ctx, holder: ast.AST, ddp_assign: ast.stmt) -> bool:
    """The file loads a state dict into the same wrapper (``ddp.load_state_dict(...)``, or hands the
    wrapper to a ``restart_from_checkpoint(..., state_dict=ddp)``-style helper): the checkpoint is
    meant for it."""
    want = ctx.text(holder)
    same_scope = lambda c: ctx.sem.scope_of(c) is ctx.sem.scope_of(ddp_assign) or want.startswith("self.")  # noqa: E731
    for c in ctx.sem.calls:
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr == "load_state_dict" and ctx.text(f.value) == want:
            if same_scope(c):
                return True
        fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if any(w in fname.lower() for w in _RESTORE_WORDS) and "save" not in fname.lower() and same_scope(c):
            for a in (*c.args, *(k.value for k in c.keywords)):
                if isinstance(a, (ast.Name, ast.Attribute)) and ctx.text(a) == want \
                        and not _other_binding(ctx, a, ddp_assign):
                    return True
    return False


def _other_binding(ctx, a: ast.AST, ddp_assign: ast.stmt) -> bool:
    """``a`` (a name) reaches this use only through bindings other than the wrapping one: the plain
    model that a resume loads into before ``model = DDP(model)`` wraps it is not the wrapper."""
    if not isinstance(a, ast.Name):
        return False
    from ..flow import for_context
    from ..flow.bindings import reaching

    kind, evs = reaching(for_context(ctx).main, a.id, a)
    # the parameter itself (``def fit(self, net): load(net, p); net = DDP(net)``) is the plain model
    return kind == "param" or (kind == "events" and bool(evs) and ddp_assign not in evs)
