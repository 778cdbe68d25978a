"""Submodules that a model's ``forward`` runs on some training steps only, and DDP wrappers that do
not tolerate it.

Asked by DDP209 (issue 25), with ``ddp_options.strict_ddp_off`` for the wrapper side:

- ``step_skipped(hub, view, cls, arg_varies)``: which parameterised submodules (``self.head =
  nn.Linear(...)``, an ``nn.Sequential`` of such layers, a project ``nn.Module`` class that creates
  one) does the class's ``forward`` (or a method it calls on ``self``) use only under a test that
  changes from step to step: a test on tensor data (``mask.any()``, ``loss.item() > t``,
  ``x.sum() > 0``, ``x[mask].numel()``, ``len(idx)`` of a ``nonzero()``), or on a ``forward``
  argument for which ``arg_varies(name, index)`` says the callers pass a per-step value (see
  ``step_value``). A test on a config flag, ``self.training``, a constructor option or
  ``self.x is not None`` is the same on every step and never counts; a use on both branches of
  the same test, in a method ``forward`` does not reach, or any reflective access in the methods
  ``forward`` runs (``self.parameters()``, ``getattr(self, ...)``, ``self`` handed to a helper)
  leaves it alone.
- ``guarded_heads(hub, view, cls, skips)``: the walk under ``step_skipped``, with the asker's
  judgement of a test (``default_branches`` asks it about tests the default configuration
  decides).
- ``wrapped_class(ctx, e, at)`` / ``constructor_call(ctx, e, at)``: the class of this file (or of
  the project, through a ``from`` import) whose instance a module expression holds, and the call
  that built it, through ``.to()`` / ``.cuda()`` chains, ``convert_sync_batchnorm`` and names
  assigned once (DDP207, DDP209); ``wrapped_classes`` asks ``origins`` instead.
- ``step_value(view, expr, at)``: the caller side, is an argument computed from a loop counter of
  a loop around the call (``it < warmup`` with ``it += 1`` in the loop, ``step % k == 0`` with
  ``step`` a ``for`` target over ``range``/the index of ``enumerate``)?
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, Semantic, get_arg, parent
from .assignments import reaching_assignment
from .bindings import LOOPS, reaching, target_path


# torch.nn layers that own trainable parameters unless told otherwise (kw -> the value that drops them)
PARAM_LAYERS = {
    "Linear": None, "Bilinear": None, "LazyLinear": None,
    "Conv1d": None, "Conv2d": None, "Conv3d": None,
    "ConvTranspose1d": None, "ConvTranspose2d": None, "ConvTranspose3d": None,
    "Embedding": None, "EmbeddingBag": None,
    "LayerNorm": "elementwise_affine", "GroupNorm": "affine",
    "BatchNorm1d": "affine", "BatchNorm2d": "affine", "BatchNorm3d": "affine", "SyncBatchNorm": "affine",
    "LSTM": None, "GRU": None, "RNN": None, "LSTMCell": None, "GRUCell": None, "RNNCell": None,
    "MultiheadAttention": None, "PReLU": None,
    "TransformerEncoderLayer": None, "TransformerDecoderLayer": None, "Transformer": None,
}
_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})
# touching these on self reaches every parameter (or hides which are used)
REFLECTIVE = frozenset({"children", "named_children", "modules", "named_modules", "parameters",
                         "named_parameters", "_modules", "_parameters", "__dict__", "apply", "state_dict",
                         "__getattr__", "__getattribute__", "buffers", "named_buffers"})
_SELF_HANDLERS = frozenset({"getattr", "setattr", "vars", "delattr", "hasattr"})
_CHAIN = frozenset({"to", "cuda", "float", "half", "double", "bfloat16", "train", "cpu", "to_empty"})
# tensor methods whose result is this step's data, tested as a truth value
_DATA_TRUTH = frozenset({"any", "all", "item"})
_REDUCTIONS = frozenset({"sum", "max", "min", "mean", "amax", "amin", "count_nonzero"})
_COUNTS = frozenset({"numel", "nelement"})
_SELECTORS = frozenset({"nonzero", "masked_select", "argwhere", "unique"})


# -- which class the DDP call wraps ----------------------------------------------------------------

def wrapped_classes(hub, view, expr, at, callers=None) -> list:
    """(view, ClassDef) of project classes whose instance ``expr`` may hold: through names,
    parameters filled by callers, ``.to()``/``.cuda()`` chains and ``convert_sync_batchnorm``."""
    out, seen = [], set()
    for cv, cls, _v, _c in wrapped_constructions(hub, view, expr, at, callers):
        if id(cls) not in seen:
            seen.add(id(cls))
            out.append((cv, cls))
    return out


def wrapped_constructions(hub, view, expr, at, callers=None, depth: int = 0) -> list:
    """(class view, ClassDef, view of the call, the constructor call) for each construction of a
    project class whose instance ``expr`` may hold (see ``wrapped_classes``)."""
    from .origins import origins

    if depth > 3 or expr is None:
        return []
    out = []
    for lv, le in origins(hub, view, expr, at, callers=callers):
        e = le
        while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _CHAIN:
            e = e.func.value
        if e is not le:
            # ``build_model(cfg).to(device)``: what the stripped value may hold (a factory's returns)
            out.extend(wrapped_constructions(hub, lv, e, le, callers, depth + 1))
            continue
        if not isinstance(e, ast.Call):
            continue
        qn = lv.sem.call_qualname(e) or ""
        if qn.endswith("convert_sync_batchnorm") and e.args:
            out.extend(wrapped_constructions(hub, lv, e.args[0], e, callers, depth + 1))
            continue
        got = hub.resolve_call(lv, e)
        if got is not None and got[1].name == "__init__" and isinstance(parent(got[1]), ast.ClassDef):
            out.append((got[0], parent(got[1]), lv, e))
    return out


def wrapped_class(ctx, e, at, depth: int = 0):
    """The class whose instance ``e`` is: ``Net().cuda()``, ``convert_sync_batchnorm(Net())``, or a
    name bound to one. ``(None, ClassDef)`` for a class of this file, ``(view, ClassDef)`` for one
    that an import of this project resolves to (``from models.seg import SegNet``); None when unknown."""
    e = constructor_call(ctx, e, at, depth)
    if e is not None:
        if not isinstance(e.func, ast.Name) or e.func.id in ctx.sem.aliases and e.func.id not in _imported_names(ctx):
            return None
        local = next((st for st in ctx.sem.tree.body if isinstance(st, ast.ClassDef) and st.name == e.func.id), None)
        if local is not None:
            return None, local
        if e.func.id not in _imported_names(ctx):
            return None
        from . import for_context

        an = for_context(ctx)
        got = an.resolve_call(an.main, e)  # a class of another project file resolves to its __init__
        if got is None or got[0] is an.main:
            return None
        cls = parent(got[1])
        return (got[0], cls) if isinstance(cls, ast.ClassDef) else None
    return None


def constructor_call(ctx, e, at, depth: int = 0):
    """The call that built the module ``e`` holds: through ``.to()`` / ``.cuda()`` chains,
    ``convert_sync_batchnorm(...)`` and names assigned once before ``at``; None when unknown."""
    if e is None or depth > 4:
        return None
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _CHAIN:
        e = e.func.value
    if isinstance(e, ast.Call):
        qn = ctx.qn(e) or ""
        if qn.endswith("convert_sync_batchnorm") and e.args:
            return constructor_call(ctx, e.args[0], at, depth + 1)
        return e
    if isinstance(e, ast.Name):
        st = reaching_assignment(ctx, e.id, at)  # `model = Net().cuda(); model = DDP(model, ...)`
        if st is None:
            return None
        return constructor_call(ctx, st.value, st, depth + 1)
    return None


def _imported_names(ctx) -> frozenset:
    def build():
        out = set()
        for st in ctx.sem.tree.body:
            if isinstance(st, ast.ImportFrom) and st.module and st.module.split(".", 1)[0] not in ("torch", "__future__"):
                out.update(a.asname or a.name for a in st.names)
        return frozenset(out)
    return ctx.memo("step_branches.imported_names", build)


# -- parameterised submodules ---------------------------------------------------------------------

def param_layer(value: ast.Call, layer: str) -> str | None:
    """Words for ``value``, a construction of the ``torch.nn`` layer ``layer`` (a key of
    ``PARAM_LAYERS``), when it keeps its trainable parameters (``nn.LayerNorm(d)``, not
    ``nn.LayerNorm(d, elementwise_affine=False)``), else None."""
    off = PARAM_LAYERS[layer]
    if off is not None:
        v = get_arg(value, None, off)
        if v is not None and not (isinstance(v, ast.Constant) and v.value is True):
            return None
    return f"`nn.{layer}`"


def param_kind(hub, view, value, depth: int = 0) -> str | None:
    """Words for a module construction that owns trainable parameters, else None."""
    if not isinstance(value, ast.Call) or depth > 3:
        return None
    qn = view.sem.call_qualname(value) or ""
    if qn.startswith("torch.nn."):
        layer = qn[len("torch.nn."):]
        if layer in PARAM_LAYERS:
            return param_layer(value, layer)
        if layer in _CONTAINERS:
            for n in ast.walk(value):
                if n is not value and isinstance(n, ast.Call) and param_kind(hub, view, n, depth + 1):
                    return f"`nn.{layer}` with parameters"
        return None
    got = hub.resolve_call(view, value)
    if got is None or got[1].name != "__init__":
        return None
    cls = parent(got[1])
    if not isinstance(cls, ast.ClassDef) or len(cls.bases) != 1:
        return None
    if (got[0].sem.qualname(cls.bases[0]) or "") != "torch.nn.Module":
        return None
    for st in got[1].body:
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and param_kind(hub, got[0], st.value, depth + 1):
            return f"`{cls.name}`"
    return None


# -- which uses sit under a per-step test ---------------------------------------------------------

def _methods(cls):
    return {f.name: f for f in cls.body if isinstance(f, FUNC_TYPES)}


def step_skipped(hub, view, cls: ast.ClassDef, arg_varies) -> list:
    """[(assign statement, attribute, kind, test)] for each parameterised submodule that
    ``forward`` runs only under a per-step test (see the module docstring)."""
    fwd = _methods(cls).get("forward")

    def skips(fn, test, runs_when):
        return _varies(view, fn, test, arg_varies if fn is fwd else None)
    return guarded_heads(hub, view, cls, skips)


def guarded_heads(hub, view, cls: ast.ClassDef, skips) -> list:
    """[(assign statement, attribute, kind, test)] for each parameterised submodule of ``cls``
    that ``forward`` (or a method it calls on ``self``) runs only under a test for which
    ``skips(function, test, runs_when)`` holds: the use runs only when ``bool(test)`` is
    ``runs_when`` (the asker judges whether that may not happen: a per-step test in
    ``step_skipped``, a test the default configuration decides against in
    ``default_branches``). Each use of the submodule must sit under such a test."""
    methods = _methods(cls)
    fwd, init = methods.get("forward"), methods.get("__init__")
    if fwd is None or init is None:
        return []
    created = created_heads(hub, view, init)
    if not created:
        return []
    # methods reached from forward through ``self.m(...)``, with the calls that reach them
    reached = {"forward": []}
    todo = ["forward"]
    while todo:
        m = methods[todo.pop()]
        for n in ast.walk(m):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                    and n.func.value.id == "self" and n.func.attr in methods and n.func.attr != "__init__":
                if n.func.attr not in reached:
                    reached[n.func.attr] = []
                    todo.append(n.func.attr)
                reached[n.func.attr].append(n)
    # (reflective access in the methods forward runs may reach every parameter: the class is left
    # alone; in ``__init__`` or a method forward never runs (``self.apply(init)``) it gives no
    # gradient)
    uses: dict[str, list] = {}
    for name, m in methods.items():
        run = name in reached
        for n in ast.walk(m):
            if isinstance(n, ast.Name) and n.id == "self":
                p = parent(n)
                if isinstance(p, (ast.arg, ast.arguments)):
                    continue
                if isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "super":
                    continue
                if not isinstance(p, ast.Attribute):
                    if run:
                        return []  # self handed over whole
                    continue
                if p.attr in REFLECTIVE and run:
                    return []
                if p.attr in created and name != "__init__":
                    uses.setdefault(p.attr, []).append((name, p))
            elif run and isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _SELF_HANDLERS:
                return []
    out = []
    for attr, (st, kind) in created.items():
        us = uses.get(attr)
        if not us or any(m not in reached for m, _ in us):
            continue  # never used (the other check), or used by a method forward does not reach
        tests = []
        for m, node in us:
            t = _guard(hub, view, methods, reached, m, node, skips, attr, 0)
            if t is None:
                tests = None
                break
            tests.append(t)
        if tests:
            out.append((st, attr, kind, tests[0]))
    return out


def created_heads(hub, view, init) -> dict:
    """attribute -> (statement, kind) for each ``self.<attribute>`` that ``__init__`` binds once, at
    its top level, to a submodule with parameters (``param_kind``)."""
    created: dict = {}
    for st in init.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            t = st.targets[0]
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                if t.attr in created:
                    created[t.attr] = None
                    continue
                kind = param_kind(hub, view, st.value)
                created[t.attr] = (st, kind) if kind else None
    return {a: v for a, v in created.items() if v is not None}


def _guard(hub, view, methods, reached, mname, node, skips, attr, depth):
    """The test that ``node`` (in method ``mname``) runs under and that ``skips`` accepts, or
    None when it may run on every step (or on the other branch of the same test too)."""
    fn = methods[mname]
    t = local_guard(view, fn, node, skips, attr)
    if t is not None:
        return t
    if mname == "forward" or depth > 3:
        return None
    calls = reached.get(mname) or []
    if not calls:
        return None
    got = None
    for c in calls:
        owner = Semantic.enclosing_function(c)
        if owner is None or owner.name not in reached:
            return None
        g = _guard(hub, view, methods, reached, owner.name, c, skips, attr, depth + 1)
        if g is None:
            return None
        got = got or g
    return got


def local_guard(view, fn, node, skips, attr):
    """The test (an ``if``/``while``/conditional expression, an ``and``/``or`` operand, an earlier
    ``if <test>: return``) of ``fn`` that ``node`` runs under and that ``skips(fn, test,
    runs_when)`` accepts, the other branch not using ``self.<attr>``; None when there is none."""
    child, p = node, parent(node)
    while p is not None:
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and child is not p.test:
            in_body = child in _as_list(p.body) or child is p.body
            if skips(fn, p.test, in_body):
                other = p.orelse if in_body else p.body
                if not _mentions_attr(other, attr):
                    return p.test
        elif isinstance(p, ast.BoolOp) and child is not p.values[0]:
            # ``a and head(x)`` runs the head when ``a`` is true, ``a or head(x)`` when it is false
            runs_when = isinstance(p.op, ast.And)
            for v in p.values[:p.values.index(child)]:
                if skips(fn, v, runs_when):
                    return v
        # an earlier ``if <test>: return`` in an enclosing block skips it
        for blk in ("body", "orelse", "finalbody"):
            stmts = getattr(p, blk, None)
            if isinstance(stmts, list) and child in stmts:
                for st in stmts[:stmts.index(child)]:
                    if isinstance(st, ast.If) and st.body and isinstance(st.body[-1], ast.Return) \
                            and not st.orelse and skips(fn, st.test, False):
                        return st.test
        if p is fn or isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return None
        child, p = p, parent(p)
    return None


def _as_list(x):
    return x if isinstance(x, list) else [x]


def _mentions_attr(nodes, attr: str) -> bool:
    for top in _as_list(nodes):
        for n in ast.walk(top):
            if isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.value, ast.Name) and n.value.id == "self":
                return True
    return False


def _varies(view, fn, test, arg_varies, depth: int = 0) -> bool:
    """``test`` may change from step to step: a test on tensor data of this step, or on a
    forward argument that the callers pass a per-step value for."""
    if depth > 4:
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _varies(view, fn, test.operand, arg_varies, depth + 1)
    if isinstance(test, ast.BoolOp):
        return any(_varies(view, fn, v, arg_varies, depth + 1) for v in test.values)
    if isinstance(test, ast.Compare):
        if any(isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for o in test.ops):
            return False
        return any(_data_scalar(view, fn, s) or _varying_name(view, fn, s, arg_varies, depth)
                   for s in (test.left, *test.comparators))
    if isinstance(test, ast.Call):
        return _data_truth(view, fn, test) or _data_scalar(view, fn, test)
    if isinstance(test, ast.Name):
        return _varying_name(view, fn, test, arg_varies, depth)
    return False


def _varying_name(view, fn, e, arg_varies, depth) -> bool:
    if not isinstance(e, ast.Name):
        return False
    kind, evs = reaching(view, e.id, e)
    if kind == "param" and evs is fn and arg_varies is not None:
        names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        idx = names.index(e.id) - 1 if e.id in names else None
        return bool(arg_varies(e.id, idx))
    if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) and len(evs[0].targets) == 1 \
            and isinstance(evs[0].targets[0], ast.Name):
        return _varies(view, fn, evs[0].value, arg_varies, depth + 1)
    return False


def _data_truth(view, fn, call) -> bool:
    """``x.any()``, ``x.all()``, ``x.item()``, ``torch.any(x)`` on this step's tensor data."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in _DATA_TRUTH and not call.args:
        return _is_data(view, fn, f.value)
    qn = view.sem.call_qualname(call) or ""
    if qn in ("torch.any", "torch.all", "torch.is_nonzero") and call.args:
        return _is_data(view, fn, call.args[0])
    return False


def _data_scalar(view, fn, e) -> bool:
    """A number read off this step's tensor data: ``x.item()``, ``x.sum()``, a count of a mask
    selection (``x[mask].numel()``, ``len(idx)`` of ``nonzero()``)."""
    if isinstance(e, ast.BinOp):
        return _data_scalar(view, fn, e.left) or _data_scalar(view, fn, e.right)
    if not isinstance(e, ast.Call):
        return False
    f = e.func
    if isinstance(f, ast.Attribute) and f.attr in ("item", "any", "all") and not e.args:
        return _is_data(view, fn, f.value)
    if isinstance(f, ast.Attribute) and f.attr in _REDUCTIONS and not e.args and not e.keywords:
        return _is_data(view, fn, f.value)
    if isinstance(f, ast.Attribute) and f.attr in _COUNTS and not e.args:
        return _selection(view, fn, f.value)
    if isinstance(f, ast.Name) and f.id == "len" and view.sem.qualname(f) in (None, "len") and len(e.args) == 1:
        return _selection(view, fn, e.args[0])
    qn = view.sem.call_qualname(e) or ""
    if qn in ("torch.sum", "torch.count_nonzero") and e.args:
        return _is_data(view, fn, e.args[0])
    return False


def _bound(view, fn, e: ast.Name):
    """The one value a local name of ``fn`` is bound to before ``e`` (None when not exactly one)."""
    kind, evs = reaching(view, e.id, e)
    if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) and len(evs[0].targets) == 1:
        t = evs[0].targets[0]
        if isinstance(t, ast.Name):
            return evs[0].value
    return None


def _selection(view, fn, e, depth: int = 0) -> bool:
    """``e`` is a data-dependent selection: ``x[mask]`` with a boolean tensor mask,
    ``x.nonzero()``, ``torch.where(cond)``, or a name bound to one."""
    if depth > 4:
        return False
    if isinstance(e, ast.Name):
        v = _bound(view, fn, e)
        return v is not None and _selection(view, fn, v, depth + 1)
    if isinstance(e, ast.Subscript):
        s = e.slice
        return _mask(view, fn, s, depth) and _is_data(view, fn, e.value)
    if isinstance(e, ast.Call):
        f = e.func
        if isinstance(f, ast.Attribute) and f.attr in _SELECTORS:
            return _is_data(view, fn, f.value)
        qn = view.sem.call_qualname(e) or ""
        if qn in ("torch.nonzero", "torch.where", "torch.masked_select", "torch.argwhere") and e.args \
                and (qn != "torch.where" or len(e.args) == 1):
            return _is_data(view, fn, e.args[0])
        if isinstance(f, ast.Attribute) and f.attr in ("squeeze", "view", "flatten", "reshape", "long", "tolist"):
            return _selection(view, fn, f.value, depth + 1)
    return False


def _mask(view, fn, s, depth) -> bool:
    if isinstance(s, ast.Compare) and len(s.ops) == 1 and not isinstance(s.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
        return _is_data(view, fn, s.left)
    if isinstance(s, ast.Name):
        v = _bound(view, fn, s)
        return v is not None and (_mask(view, fn, v, depth + 1) or _selection(view, fn, v, depth + 1))
    return False


def _is_data(view, fn, e, depth: int = 0) -> bool:
    """``e`` is computed from this step's tensors: ``fn``'s (non-self) parameters, what a
    submodule of ``self`` returns, and expressions over them (a name bound once before)."""
    if depth > 8 or e is None:
        return False
    if isinstance(e, ast.Name):
        kind, evs = reaching(view, e.id, e)
        if kind == "param":
            return evs is fn and e.id not in ("self", "cls")
        if kind == "events" and evs and all(isinstance(x, ast.Assign) and len(x.targets) == 1 for x in evs):
            return all(_is_data(view, fn, x.value, depth + 1) for x in evs)
        return False
    if isinstance(e, ast.Call):
        f = e.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            return True  # a submodule's (or method's) output
        if isinstance(f, ast.Attribute):
            return _is_data(view, fn, f.value, depth + 1)
        qn = view.sem.call_qualname(e) or ""
        if qn.startswith("torch.") and e.args:
            return any(_is_data(view, fn, a, depth + 1) for a in e.args)
        return False
    if isinstance(e, ast.Attribute):
        if isinstance(e.value, ast.Name) and e.value.id == "self":
            return False
        if e.attr in ("shape", "device", "dtype", "ndim", "is_cuda"):
            return False
        return _is_data(view, fn, e.value, depth + 1)
    if isinstance(e, ast.Subscript):
        return _is_data(view, fn, e.value, depth + 1)
    if isinstance(e, ast.BinOp):
        return _is_data(view, fn, e.left, depth + 1) or _is_data(view, fn, e.right, depth + 1)
    if isinstance(e, ast.UnaryOp):
        return _is_data(view, fn, e.operand, depth + 1)
    if isinstance(e, ast.Compare):
        return _is_data(view, fn, e.left, depth + 1)
    return False


# -- the callers' side: a per-step argument ------------------------------------------------------

def step_value(view, expr, at, depth: int = 0) -> bool:
    """``expr`` (an argument at the call ``at``) is computed from a counter of a loop around the
    call: a ``for`` target over ``range(...)``, the index of ``enumerate(...)``, or a name the loop
    body increments (``it += 1``)."""
    if depth > 4 or expr is None:
        return False
    if isinstance(expr, ast.Name):
        if _loop_counter(view, expr.id, at):
            return True
        kind, evs = reaching(view, expr.id, expr if hasattr(expr, "lineno") else at)
        if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) and len(evs[0].targets) == 1:
            # ``flag = it < warmup``, ``flag, w = it < warmup, 0.5``
            v = _element(evs[0].value, target_path(evs[0].targets[0], expr.id))
            return v is not None and step_value(view, v, evs[0], depth + 1)
        return False
    if isinstance(expr, ast.Compare):
        if any(isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for o in expr.ops):
            return False
        return any(step_value(view, s, at, depth + 1) for s in (expr.left, *expr.comparators))
    if isinstance(expr, ast.BinOp):
        return step_value(view, expr.left, at, depth + 1) or step_value(view, expr.right, at, depth + 1)
    if isinstance(expr, ast.BoolOp):
        return any(step_value(view, v, at, depth + 1) for v in expr.values)
    if isinstance(expr, ast.UnaryOp):
        return step_value(view, expr.operand, at, depth + 1)
    return False


def _element(value, path):
    """The part of ``value`` a tuple target's ``path`` picks (None when not a plain display)."""
    if path is None:
        return None
    for i in path:
        if not isinstance(value, (ast.Tuple, ast.List)) or i >= len(value.elts) \
                or any(isinstance(e, ast.Starred) for e in value.elts):
            return None
        value = value.elts[i]
    return value


def _loop_counter(view, name: str, at) -> bool:
    p = parent(at)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
        if isinstance(p, LOOPS):
            if isinstance(p, (ast.For, ast.AsyncFor)) and _counts(view, p, name):
                return True
            for n in ast.walk(p):
                if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name \
                        and isinstance(n.op, ast.Add):
                    return True
        p = parent(p)
    return False


def _counts(view, loop, name: str) -> bool:
    it = loop.iter
    if not isinstance(it, ast.Call) or not isinstance(it.func, ast.Name):
        return False
    q = view.sem.qualname(it.func)
    if it.func.id == "range" and q in (None, "range"):
        return isinstance(loop.target, ast.Name) and loop.target.id == name
    if it.func.id == "enumerate" and q in (None, "enumerate"):
        t = loop.target
        return isinstance(t, ast.Tuple) and t.elts and isinstance(t.elts[0], ast.Name) and t.elts[0].id == name
    return False


def wrapper_calls(hub, views, ddp_view, ddp_call) -> list:
    """(view, call) of the calls, in ``views``, of a value that may hold the wrapper ``ddp_call``
    builds (``model(x, with_aux=...)``): its forward calls."""
    from .wrap_views import bound_at
    from .wrapped import wrap_origins

    out = []
    for v in views:
        for c in v.sem.calls:
            f = c.func
            if not (isinstance(f, ast.Name) or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                                                and f.value.id == "self")):
                continue
            if _grad_off(v, c):
                continue  # no reducer work without autograd: whatever it skips is fine
            found, _all = wrap_origins(hub, v, f, c)
            # (a wrap a project helper makes is its call: ``wrap_sites.bound_at``)
            if any(o[0] is ddp_view and o[1] is ddp_call or bound_at(o)[1] is ddp_call for o in found):
                out.append((v, c))
    return out


def _grad_off(view, node) -> bool:
    """``node`` runs under ``torch.no_grad()`` / ``torch.inference_mode()`` (a ``with`` around it
    or a decorator of its function)."""
    p = parent(node)
    while p is not None:
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for it in p.items:
                e = it.context_expr
                if (view.sem.call_qualname(e) if isinstance(e, ast.Call) else view.sem.qualname(e)) in _NO_GRAD:
                    return True
        if isinstance(p, FUNC_TYPES):
            for d in p.decorator_list:
                if (view.sem.call_qualname(d) if isinstance(d, ast.Call) else view.sem.qualname(d)) in _NO_GRAD:
                    return True
        p = parent(p)
    return False


_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.grad_mode.no_grad"})


def passed_arg(call, fwd, name: str, idx):
    """The argument a forward call passes for ``forward``'s parameter ``name`` (index ``idx``
    after ``self``), or None."""
    for k in call.keywords:
        if k.arg == name:
            return k.value
    if idx is not None and idx < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:idx + 1]):
        return call.args[idx]
    return None
