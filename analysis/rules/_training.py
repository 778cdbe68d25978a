"""Training-step helpers shared by DDP207/DDP208/DDP209: which expressions hold the DDP wrapper,
grad-disabled regions, backward calls and what they depend on (one function, plain assignments)."""
from __future__ import annotations

import ast

from ..flow.models import is_ddp_wrapper
from ..flow.return_deps import names_in, names_reaching, target_names
from ..semantic import param_names, parent, subtree


_NO_GRAD = ("torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad")
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def ddp_holder(ctx, expr: ast.AST, at: ast.AST) -> bool:
    """``expr`` (a name or ``self.attr``) provably holds the DDP wrapper at ``at``: bound to it
    here, a parameter every call of this file fills with it, or a parameter of a module-level
    function (or of a method of a module-level class) that this file never calls and every call
    from the project's other files fills with it (``engine.py: def train_one_epoch(model, ...)``
    called by ``main.py`` with the wrapper, ``trainer.train_epoch(model=ddp_model)``)."""
    if is_ddp_wrapper(ctx, expr, at) is not None:
        return True
    return _self_attr_wrapped_in_init(ctx, expr, at) or _param_from_project(ctx, expr, at) \
        or _ctor_param_from_project(ctx, expr, at)


def _ctor_param_from_project(ctx, expr, at) -> bool:
    """``self.model`` of a module-level class that this file never constructs, whose only binding is
    ``self.model = model`` at the top of ``__init__`` (``model`` never rebound there), and every
    construction of which in the project's other files passes the wrapper for ``model``
    (``Trainer(ddp_model, opt)`` of a script)."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return False
    cls = next((a for a in ctx.sem.ancestors(at) if isinstance(a, ast.ClassDef)), None)
    if cls is None or not isinstance(parent(cls), ast.Module) or cls.decorator_list:
        return False
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None or any(isinstance(c.func, ast.Name) and c.func.id == cls.name for c in ctx.sem.calls):
        return False
    binds = []
    for n in subtree(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if any(isinstance(x, ast.Attribute) and x.attr == expr.attr and isinstance(x.value, ast.Name)
                       and x.value.id == "self" for x in subtree(t)):
                    binds.append(n)
    if len(binds) != 1 or binds[0] not in init.body or not isinstance(binds[0], ast.Assign) \
            or len(binds[0].targets) != 1 or not isinstance(binds[0].value, ast.Name):
        return False
    name = binds[0].value.id
    pos = [a.arg for a in (*init.args.posonlyargs, *init.args.args)][1:]
    if name not in pos or ctx.sem.assignments(init).get(name):
        return False
    memo = ctx.memo("training.ctor_param_from_project", dict)
    key = (id(init), name)
    if key not in memo:
        memo[key] = _every_caller_passes_wrapper(ctx, init, name, pos, callee=cls.name)
    return memo[key]


def _param_from_project(ctx, expr, at) -> bool:
    if not isinstance(expr, ast.Name):
        return False
    fn = next((a for a in ctx.sem.ancestors(at) if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fn is None or ctx.sem.assignments(fn).get(expr.id):
        return False
    owner = parent(fn)
    # a module-level function, or a method of a module-level class (``trainer.train_epoch(model=m)``
    # of a script: ``project_callers`` resolves the call through the instance's class), or its
    # ``__init__`` (``PPOTrainer(ddp_model, opt)`` of a script)
    method = isinstance(owner, ast.ClassDef) and isinstance(parent(owner), ast.Module) and not fn.decorator_list
    if not isinstance(owner, ast.Module) and not method:
        return False
    pos = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)][1 if method else 0:]
    if expr.id not in pos and expr.id not in [a.arg for a in fn.args.kwonlyargs]:
        return False
    callee = owner.name if method and fn.name == "__init__" else fn.name
    if any(isinstance(c.func, ast.Name) and c.func.id == callee
           or method and isinstance(c.func, ast.Attribute) and c.func.attr == callee for c in ctx.sem.calls):
        return False  # called in this file: ``is_ddp_wrapper`` already judged those calls
    memo = ctx.memo("training.param_from_project", dict)
    key = (id(fn), expr.id)
    if key not in memo:
        memo[key] = _every_caller_passes_wrapper(ctx, fn, expr.id, pos, callee=callee if callee != fn.name else None)
    return memo[key]


def _every_caller_passes_wrapper(ctx, fn, name: str, pos: list[str], callee: str | None = None) -> bool:
    """Every call of ``fn`` (``callee``: the class whose ``__init__`` it is) in the project's other
    files passes the DDP wrapper for its parameter ``name``."""
    from ._common import project_callers  # lazy: reads the project's other files

    sites = [(caller, call) for caller, call, node in project_callers(ctx, {callee or fn.name}) if node is fn]
    if not sites:
        return False
    for caller, call in sites:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return False
        arg = next((k.value for k in call.keywords if k.arg == name), None)
        if arg is None and name in pos and pos.index(name) < len(call.args):
            arg = call.args[pos.index(name)]
        if not isinstance(arg, (ast.Name, ast.Attribute)) or is_ddp_wrapper(caller, arg, call) is None:
            return False
    return True


def _self_attr_wrapped_in_init(ctx, expr, at) -> bool:
    """``self.model = model.to(gpu); ...; self.model = DDP(self.model, ...)`` in ``__init__`` (the
    trainer-class shape), read in another method: the last binding in ``__init__`` is the wrapper and
    no other method rebinds it."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return False
    fn = next((a for a in ctx.sem.ancestors(at) if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef) or fn.name == "__init__":
        return False
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return False
    last = None
    for n in subtree(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            tgts = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in tgts:
                for x in subtree(t):
                    if isinstance(x, ast.Attribute) and x.attr == expr.attr and isinstance(x.value, ast.Name) \
                            and x.value.id == "self":
                        owner = next((a for a in ctx.sem.ancestors(n) if isinstance(a, (ast.FunctionDef,
                                                                                       ast.AsyncFunctionDef))), None)
                        if owner is not init or n not in init.body:
                            return False  # rebound elsewhere, or conditionally
                        if last is None or n.lineno > last.lineno:
                            last = n
    if not (isinstance(last, ast.Assign) and isinstance(last.value, ast.Call)):
        return False
    if ctx.qn(last.value) == "torch.nn.parallel.DistributedDataParallel":
        return True
    from ..flow.models import returns_ddp  # ``self.model = wrap(self.model)``: a project helper's wrapper

    return returns_ddp(ctx, last.value)


def grad_disabled(ctx, node: ast.AST) -> bool:
    """Inside ``with torch.no_grad()`` / ``inference_mode()`` or a function decorated with them
    (or with ``set_grad_enabled(...)``, whose argument is unknown)."""
    for a in ctx.sem.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                e = item.context_expr
                qn = ctx.qn(e.func if isinstance(e, ast.Call) else e) or ""
                if qn in _NO_GRAD or qn.endswith("set_grad_enabled"):
                    return True
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in a.decorator_list:
                qn = ctx.qn(d.func if isinstance(d, ast.Call) else d) or ""
                if qn in _NO_GRAD or qn.endswith("set_grad_enabled"):
                    return True
            return False
    return False


def enclosing_function(node: ast.AST):
    p = parent(node)
    while p is not None:
        if isinstance(p, _FUNCS):
            return p
        p = parent(p)
    return None


def backward_calls(ctx, fn: ast.AST) -> list[ast.Call]:
    """``x.backward()`` / ``torch.autograd.backward(x)`` calls directly in ``fn`` (one pass over
    the file's calls per check, indexed by function)."""
    return ctx.memo("training.backward_calls", lambda: _backward_index(ctx)).get(id(fn), [])


def _backward_index(ctx) -> dict[int, list[ast.Call]]:
    from ..flow.helper_calls import calls_named

    out: dict[int, list[ast.Call]] = {}
    for c in calls_named(ctx, "backward"):  # ``x.backward()``, ``backward(x)``
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr == "backward":
            if not (isinstance(f.value, ast.Call) or ctx.qn(f.value) is None) \
                    and ctx.qn(c) != "torch.autograd.backward":
                continue  # `torch.backward`-like module paths that are not autograd's
        elif not (isinstance(f, ast.Name) and f.id == "backward" and ctx.qn(c) == "torch.autograd.backward"):
            continue
        fn = enclosing_function(c)
        if fn is not None:
            out.setdefault(id(fn), []).append(c)
    return out


def backward_names(ctx, fn: ast.AST) -> frozenset:
    """The names whose values reach a ``backward`` call of ``fn``: those its receiver or arguments
    read, and, backwards through the plain assignments of ``fn``, the names their values read (a
    superset: order and kills are ignored, as ``flows_to``). One pass per function."""
    memo = ctx.memo("training.backward_names", dict)
    got = memo.get(id(fn))
    if got is not None:
        return got
    stmts = (st for st in subtree(fn) if isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign))
             and enclosing_function(st) is fn)
    memo[id(fn)] = got = names_reaching(backward_calls(ctx, fn), stmts)
    return got


def reaches_backward(ctx, node: ast.AST, fn: ast.AST) -> bool:
    """The value of ``node`` (an expression of ``fn``) reaches one of its ``backward`` calls: inside
    it, or bound by its statement to a name of ``backward_names``."""
    ids = ctx.memo("training.backward_ids", dict)
    back = ids.get(id(fn))
    if back is None:
        back = ids[id(fn)] = frozenset(id(b) for b in backward_calls(ctx, fn))
    p = parent(node)
    while p is not None and not isinstance(p, ast.stmt):
        if id(p) in back:
            return True
        p = parent(p)
    return isinstance(p, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and bool(target_names(p) & backward_names(ctx, fn))


def flows_to(ctx, source: ast.AST, sink: ast.AST, fn: ast.AST) -> bool:
    """The value of ``source`` (an expression in ``fn``) reaches ``sink`` through plain
    assignments in ``fn`` (in source order; a superset, since it ignores kills)."""
    if any(n is source for n in subtree(sink)):
        return True
    st = ctx.sem.statement_of(source)
    if not isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return False
    tainted = target_names(st)
    stmts = sorted((s for s in subtree(fn) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                    and s.lineno > st.lineno and enclosing_function(s) is fn), key=lambda s: s.lineno)
    for s in stmts:
        if s.value is not None and names_in(s.value) & tainted:
            tainted |= target_names(s)
    return bool(names_in(sink) & tainted)


def module_ref(e):
    """The name or ``self.<attr>`` a module expression reads, through the ``nn.Module`` methods that
    return the module itself (``model.cuda(gpu)``, ``self.net.to(device)``): ``"model"`` or
    ``("self", "net")``; None for anything else."""
    from ..flow.wrapped import SELF_RETURNING

    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in SELF_RETURNING:
        e = e.func.value
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return ("self", e.attr)
    return None


def ddp_wraps(ctx) -> list[tuple]:
    """(``DDP(...)`` call, ref of the module it wraps, ref of what it is bound to) of the file's
    wraps: ``self.model_ddp = DDP(self.model, ...)`` gives (call, ("self", "model"), ("self",
    "model_ddp")); the bound ref is None when the wrapper is not assigned to a name or attribute."""
    def build():
        from ..flow.modern import hub
        from ..flow.wrap_sites import wrap_sites

        out = []
        main = hub(ctx)[1]
        for site in wrap_sites(ctx):  # ``DDP(...)``, or a project helper's (``wrap(net)``)
            c = site.call
            arg, where = site.arg(main, 0, "module")
            if where is not main:
                arg = None  # the module is read in the helper's module: no ref of this file
            st = parent(c)
            while isinstance(st, (ast.IfExp, ast.BoolOp)):  # ``DDP(m) if distributed else None``
                st = parent(st)
            bound = module_ref(st.targets[0]) if isinstance(st, ast.Assign) and len(st.targets) == 1 else None
            out.append((c, module_ref(arg) if arg is not None else None, bound))
        return out
    return ctx.memo("training.ddp_wraps", build)


_OPTIM_PREFIX = ("torch.optim.", "apex.optimizers.", "bitsandbytes.optim.", "transformers.AdamW")


def params_reach_optimizer(ctx, ref, fn) -> ast.Call | None:
    """The optimizer built in ``fn`` (a ``torch.optim`` class, ...) that ``ref``'s parameters
    (``ref.parameters()`` / ``ref.named_parameters()``) reach: inside its arguments, through plain
    assignments (``groups = [dict(params=m.parameters())]``) or a list that receives them
    (``groups.append(dict(params=m.parameters()))``), or ``opt.add_param_group(...)``. ``ctx``: a
    rule's context or a view of the program model (``fn`` of another module): what has ``sem``."""
    calls = [n for n in subtree(fn) if isinstance(n, ast.Call) and enclosing_function(n) is fn]
    opts = [c for c in calls if (ctx.sem.call_qualname(c) or "").startswith(_OPTIM_PREFIX)]
    if not opts:
        return None
    for p in calls:
        f = p.func
        if not (isinstance(f, ast.Attribute) and f.attr in ("parameters", "named_parameters")
                and module_ref(f.value) == ref):
            continue
        src = p
        st = ctx.sem.statement_of(p)
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute):
            m = st.value.func
            if m.attr == "add_param_group":
                return st.value
            if m.attr in ("append", "extend", "insert") and isinstance(m.value, ast.Name):
                src = m.value  # the list that receives them
        for o in opts:
            if o.lineno < st.lineno:
                continue
            if isinstance(src, ast.Name):
                if any(isinstance(n, ast.Name) and n.id == src.id for n in subtree(o)) or any(
                        flows_to(ctx, a, o, fn) for a in _binders(ctx, src.id, fn)):
                    return o
            elif flows_to(ctx, src, o, fn):
                return o
    return None


def _binders(ctx, name: str, fn) -> list:
    """The values bound to ``name`` by plain assignments of ``fn``."""
    out = []
    for s in subtree(fn):
        if isinstance(s, ast.Assign) and enclosing_function(s) is fn and any(
                isinstance(t, ast.Name) and t.id == name for t in s.targets):
            out.append(s.value)
    return out


def callers_pass_wrapper(ctx, value, at, depth: int = 0) -> list:
    """[(view, ``DDP(...)`` call)] when ``value`` is a parameter of a module-level function (or of
    the ``__init__`` of a module-level class, called as ``Cls(...)``) that a caller in another file
    of the project calls with a value that may be the wrapper (directly, or through the caller's
    own parameter, one file further). ``value`` may also be ``self.<attr>`` that the class's
    ``__init__`` binds to one of its parameters (``self.autoencoder = autoencoder``,
    ``flow.wrapped.init_param_bindings``): the class's constructor calls are asked about it."""
    if isinstance(value, ast.Attribute):
        from ..flow.modern import hub
        from ..flow.wrapped import init_param_bindings

        an, view = hub(ctx)
        for name in init_param_bindings(an, view, value, at):
            got = callers_pass_wrapper(ctx, name, name, depth)
            if got:
                return got
        return []
    fn = ctx.sem.enclosing_function(at)
    if not isinstance(value, ast.Name) or fn is None or value.id not in param_names(fn) \
            or ctx.sem.assignments(fn).get(value.id):
        return []
    owner = parent(fn)
    if isinstance(owner, ast.ClassDef) and fn.name == "__init__" and isinstance(parent(owner), ast.Module):
        name = owner.name
    elif isinstance(owner, ast.Module):
        name = fn.name
    else:
        return []
    from ..flow.calls import call_args
    from ..flow.modern import hub
    from ..flow.wrapped import wrap_origins
    from ._common import project_callers  # lazy: reads the project's other files

    for caller, call, node in project_callers(ctx, {name}):
        if node is not fn:
            continue
        arg = next((a for p, a in call_args(call, fn) if p == value.id), None)
        if not isinstance(arg, (ast.Name, ast.Attribute)):
            continue
        an2, view2 = hub(caller)
        wraps, _always = wrap_origins(an2, view2, arg, call, ordered=False)
        if wraps:
            return wraps
        if depth < 1:
            got = callers_pass_wrapper(caller, arg, call, depth + 1)
            if got:
                return got
    return []


def ddp_wraps_of(ctx, holder, at) -> list:
    """[(view, ``DDP(...)`` call)] of the ``DistributedDataParallel`` wrappers that ``holder`` (a
    name or ``self.<attr>``) may hold at ``at``: through its origins in this module (a conditional
    wrap, ``if distributed: model = DDP(model)``, counts: the distributed path sees it), or, for a
    parameter (or a ``self.<attr>`` that ``__init__`` binds to one), through the calls of a caller
    in another module of the project (``callers_pass_wrapper``). A wrap of this module on the other
    branch of a test that ``at`` sits under does not count; nor does Accelerate's ``prepare``."""
    from ..flow.modern import hub
    from ..flow.wrapped import bound_at, contradicts, guards, wrap_origins
    from ..torch_api import DDP_CLASS

    if not (isinstance(holder, ast.Name) or module_ref(holder) is not None) or isinstance(holder, ast.Call):
        return []
    an, view = hub(ctx)
    wraps, _always = wrap_origins(an, view, holder, at, ordered=False)
    # (a wrap made by a project helper is judged at the helper's call: ``wrapped.Origin``)
    wraps = [o for o in wraps if (o[0].sem.call_qualname(o[1]) or "") == DDP_CLASS
             and not (bound_at(o)[0] is view and contradicts(guards(bound_at(o)[1]), guards(at)))]
    if wraps:
        return wraps
    return [(w, c) for w, c in callers_pass_wrapper(ctx, holder, at) if (w.sem.call_qualname(c) or "") == DDP_CLASS]
