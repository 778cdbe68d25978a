from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, parent
from ..source import SourceText
from ..flow.bindings import reaching
from ..flow.instances import _self_bindings
from ..flow.modern import PARALLELIZE, hub, origins
from ._common import other_call_sites
from ..flow.tp_plans import (colwise_reach, module_class, plan_styles, style_keeps_local_shard, submodule_owner,
                             walked_callees)

_LINEAR = {"torch.nn.Linear": (1, "out_features"), "torch.nn.modules.linear.Linear": (1, "out_features"),
           "torch.nn.Embedding": (1, "embedding_dim"), "torch.nn.modules.sparse.Embedding": (1, "embedding_dim")}
_LOSSES = frozenset({"torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss"})
# methods that keep the class dimension of logits (only its place or the other dimensions change)
_SAME_CLASSES = frozenset({"view", "reshape", "flatten", "float", "double", "half", "bfloat16", "contiguous", "to",
                           "type_as", "log_softmax"})
_RESHAPES = frozenset({"view", "reshape"})


class TpLocalShardGlobalShape(Rule):
    """
    ## What it does
    Checks the modules that `parallelize_module(module, mesh, plan)` gives a `ColwiseParallel()`
    style with its default local output (`use_local_output=True`, output sharded on the last
    dimension): where the class that owns such a submodule reshapes its output
    (`self.wq(x).view(...)`, `.reshape(...)`, `torch.reshape`, `.unflatten(-1, ...)`), followed
    through local names, tuple unpacking and helper methods (`self._split_heads(self.wq(x))`,
    also of a projection a loop or a comprehension walks: `(self._split_heads(p(x)) for p in
    (self.wq, self.wk, self.wv))`), with trailing sizes that multiply to the projection's full
    `out_features` as the class builds it (`self.n_heads` and `self.head_dim` of
    `nn.Linear(dim, dim)`, `dim // n_heads`, also stored together: `self.h, self.hd = ...`), and
    no `-1` among them.

    The plan may be a dict display, a name filled by `plan[key] = style` stores (also in a loop
    over literal names: `for n in ("wq", "wk"): plan[f"attn.{n}"] = ColwiseParallel()`), a
    helper's return (in this module or another) or a dict comprehension over literal names; the
    module may be a loop variable over the blocks of a `ModuleList` / `ModuleDict`, or a parameter
    of a helper (`apply_tp(model, mesh)` in `parallel/tp.py`, a method) that only another module's
    call passes (`apply_tp(Transformer(cfg), mesh)` in `train.py`), and the class may live in
    another module.

    ## Why is this bad?
    `ColwiseParallel` shards the projection's weight by output features: with the default local
    output, each rank's result holds `out_features / tp` features, i.e. `n_heads / tp` heads. A
    reshape to the global head count asks for `tp` times more elements than the tensor has, and
    the first forward raises `RuntimeError: shape '[...]' is invalid for input of size ...` on
    every rank (or, where the sizes happen to divide, silently mixes tokens into the batch
    dimension).

    A cross-entropy that reads such a submodule's output as the logits (in the class's own
    methods, or of the model whose `forward` returns that output) is reported at the plan's style,
    the line to change; a plan entry whose key a loop over something else than literal names builds
    (`plan[f"blocks.{i}.up"]`) is left out, and the other entries are still read.

    The rule is silent when the project changes the attribute after construction
    (`block.attention.n_heads = n_heads // tp`), when the class divides it itself, and when the
    style keeps a global view of the output (`use_local_output=False`: a `DTensor`, reshaped with
    global sizes; `output_layouts=Replicate()`).

    ## Example
    ```python
    class SelfAttention(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads, self.per_head = heads, width // heads
            self.query = nn.Linear(width, width)
            ...

        def forward(self, x):
            b, t, _ = x.shape
            q = self.query(x).view(b, t, self.heads, self.per_head)
            ...

    parallelize_module(block, tp_mesh, {"attn.query": ColwiseParallel(), "attn.out": RowwiseParallel()})
    ```

    ## Use instead
    ```python
            q = self.query(x).view(b, t, -1, self.per_head)  # the local head count
    ```
    or set `block.attn.heads = heads // tp_mesh.size()` after `parallelize_module`.

    ## Fix safety
    There is no automatic fix: whether to infer the head count (`-1`) or store the local one is
    the author's choice.
    """

    code = "DDP524"
    name = "tp-local-shard-global-shape"
    severity = Severity.ERROR
    requires_text = ("parallelize_module",)
    reach = classmethod(colwise_reach)  # the plan may be built by a helper of another module

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        calls = ctx.calls_to(*PARALLELIZE)
        if not calls:
            return
        callers = other_call_sites(ctx, an, methods=True)  # a module only the project's other files pass (asked lazily)
        owners: dict[int, tuple] = {}  # id(class) -> (view, class, {leaf: style call}, parallelize call)
        sharded: dict[int, set] = {}  # id(node) of a module sharded in place -> its local leaves
        for c in calls:
            module, plan = get_arg(c, 0, "module"), get_arg(c, 2, "parallelize_plan")
            if module is None or plan is None:
                continue
            if isinstance(plan, ast.Call) and isinstance(module, ast.Attribute):
                if not style_keeps_local_shard(view, plan):
                    continue
                owner = module_class(an, view, module.value, c, callers=callers)
                if owner is not None:
                    owners.setdefault(id(owner[1]), (*owner, {}, c))[2].setdefault(module.attr, plan)
                    self._instances(an, view, module.value, c, {module.attr}, sharded)
                continue
            entries = plan_styles(an, view, plan, c)
            root = module_class(an, view, module, c, callers=callers) if entries else None
            if root is None:
                continue
            top = set()
            for key, style, sv in entries:
                path = key.split(".")
                if not path[-1].isidentifier() or not style_keeps_local_shard(sv, style):
                    continue
                owner = submodule_owner(an, *root, path)
                if owner is not None:
                    owners.setdefault(id(owner[1]), (*owner, {}, c))[2].setdefault(path[-1], style)
                    if len(path) == 1:
                        top.add(path[0])
            if top:
                self._instances(an, view, module, c, top, sharded)
        done = set()
        for ov, cls, leaves, pcall in owners.values():
            for node, names, what in self._global_reshapes(an, view, ov, cls, leaves):
                if id(node) in done:
                    continue
                done.add(id(node))
                self._report(ctx, view, ov, node, names, what, leaves[names[0]], pcall)
            for node, names in self._local_logits_losses(an, view, ov, cls, leaves, sharded):
                if id(node) in done:
                    continue
                done.add(id(node))
                self._report(ctx, view, ov, node, names, None, leaves[names[0]], pcall)

    @staticmethod
    def _instances(an, view, module, call, leaves, sharded):
        """Record the module values ``parallelize_module`` shards in place (the origins of its
        argument) and its return, with the leaves of their own class it leaves local."""
        keys = [id(call)]
        if isinstance(module, ast.Call):
            keys.append(id(module))
        elif isinstance(module, (ast.Name, ast.Attribute)):
            keys.extend(id(e) for _, e in origins(an, view, module, call, limit=4))
        for k in keys:
            sharded.setdefault(k, set()).update(leaves)

    def _local_logits_losses(self, an, view, ov, cls, leaves, sharded):
        """(loss call, leaves) where a cross-entropy's input is the output of a local-colwise leaf:
        in the class's own methods, or in the checked module as the output of a call of an
        instance whose ``forward`` returns that leaf's output."""
        any_leaf = dict.fromkeys(leaves, (0, ""))
        for m in cls.body:
            if isinstance(m, FUNC_TYPES) and m.name != "__init__":
                for c in iter_scope_nodes(m):
                    if isinstance(c, ast.Call) and ov.sem.call_qualname(c) in _LOSSES and c.args:
                        got = self._leaf_of(an, ov, cls, _peel(c.args[0]), c, any_leaf)
                        if got is not None:
                            yield c, got[1]
        fwd = _method(cls, "forward")
        rets = [n.value for n in iter_scope_nodes(fwd) if isinstance(n, ast.Return)] if fwd is not None else []
        if not rets or any(r is None for r in rets):
            return
        names = set()
        for r in rets:
            got = self._leaf_of(an, ov, cls, _peel(r), r, any_leaf)
            if got is None:
                return
            names.update(got[1])
        for c in view.sem.calls:
            if view.sem.call_qualname(c) not in _LOSSES or not c.args:
                continue
            x = _peel(c.args[0])
            leaves_of = [(view, x)] if isinstance(x, ast.Call) else origins(an, view, x, c, limit=4)
            if leaves_of and all(isinstance(e, ast.Call) and _calls_sharded(an, v, _peel(e), names, sharded)
                                 for v, e in leaves_of):
                yield c, tuple(sorted(names))

    def _report(self, ctx, view, ov, node, names, what, style, pcall):
        which = ", ".join(f"`self.{n}`" for n in names)
        head = f"{which} {'is' if len(names) == 1 else 'are'} `ColwiseParallel` with a local output: each rank holds "
        if what is None:
            msg = (head + "1/tp of the classes, but the loss reads them as all the classes (use "
                   "`use_local_output=False` with `loss_parallel()`, or `output_layouts=Replicate()`)")
        else:
            msg = (head + f"1/tp of the {what} output features, but `{ast.unparse(node)[:80]}` reshapes it to the "
                   "global size (use -1 for the head count, or store the local count after `parallelize_module`)")
        if what is None and _in(view, style):
            # the logits: the style is the line to change (``output_layouts=Replicate()``), the loss shows it
            why = "the loss that reads the local logits"
            if _in(view, node):
                related = [(node, why)]
            elif ov.path != view.path and _in(ov, node):
                related = [("file", ov.path, SourceText(ov.text).node_range(node), why)]
            else:
                related = []
            ctx.report(style, msg, related=related)
            return
        if _in(view, node):
            ctx.report(node, msg, related=[(style, "the style that shards it")] if _in(view, style) else [])
            return
        at = style if _in(view, style) else pcall
        src = SourceText(ov.text)
        ctx.report(at, msg, related=[("file", ov.path, src.node_range(node), "the reshape with the global size")])

    def _global_reshapes(self, an, view, ov, cls, leaves):
        """(reshape call, leaf, out_features text) in the methods of ``cls`` whose receiver is the
        output of a local-colwise leaf and whose trailing sizes multiply to its full width."""
        widths = {}
        init = _method(cls, "__init__")
        if init is None:
            return
        for leaf in leaves:
            vals = _self_bindings(cls).get(leaf, ())
            if len(vals) != 1 or not isinstance(vals[0], ast.Call):
                continue
            spec = _LINEAR.get(ov.sem.call_qualname(vals[0]))
            if spec is None:
                continue
            out = get_arg(vals[0], *spec)
            w = _Eval(ov, cls, init).value(out, init) if out is not None else None
            if w is not None:
                widths[leaf] = (w, ast.unparse(out))
        if not widths:
            return
        for m in cls.body:
            if not isinstance(m, FUNC_TYPES) or m.name == "__init__":
                continue
            for c in iter_scope_nodes(m):
                if not isinstance(c, ast.Call):
                    continue
                got = _reshape_parts(ov, c)
                if got is None:
                    continue
                recv, sizes = got
                got = self._leaf_of(an, ov, cls, recv, c, widths)
                if got is None:
                    continue
                leaf, names = got
                ev = _Eval(ov, cls, init)
                if self._global_sizes(ev, sizes, m, widths[leaf][0]) and not _reassigned(view, ov, cls, ev.attrs):
                    yield c, names, f"`{widths[leaf][1]}`"

    @staticmethod
    def _leaf_of(an, ov, cls, recv, at, widths):
        """A leaf whose output every origin of ``recv`` is (``self.<leaf>(x)`` in ``cls``; leaves of
        one width alike: ``q, k, v`` through one helper)."""
        found, names = None, set()
        got = [(ov, recv)] if isinstance(recv, ast.Call) else origins(an, ov, recv, at, limit=4)
        if not got:
            return None
        for v, e in got:
            if v is not ov or not isinstance(e, ast.Call):
                return None
            # ``proj(x)`` of ``for proj in (self.wq, self.wk)``: each module the loop walks
            callees = walked_callees(ov, e) or [e.func]
            for f in callees:
                if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self"
                        and f.attr in widths):
                    return None
                fn = ov.sem.enclosing_function(e)
                if fn is None or parent(fn) is not cls or (found is not None and widths[found][0] != widths[f.attr][0]):
                    return None  # outside the class, or leaves of different widths
                found = f.attr if found is None else found
                names.add(f.attr)
        return found, tuple(sorted(names))

    @staticmethod
    def _global_sizes(ev, sizes, fn, width) -> bool:
        """The trailing sizes that the class's construction fixes multiply to ``width``; every
        leading one is -1 or a plain read (a name, ``x.shape[i]``, ``x.size(i)``)."""
        prod, i = None, len(sizes)
        while i > 0:
            got = ev.value(sizes[i - 1], fn)
            if got is None:
                break
            prod = got if prod is None else _mul(prod, got)
            i -= 1
        if prod is None or prod != width:
            return False
        for e in sizes[:i]:
            if _minus_one(e) or isinstance(e, ast.Name) or _size_read(e):
                continue
            return False
        return True


def _peel(e):
    """The tensor a chain of shape and type methods (``.view(-1, v)``, ``.float()``) or an index
    (``logits[:, :-1]``) starts from."""
    while True:
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _SAME_CLASSES:
            e = e.func.value
        elif isinstance(e, ast.Subscript):
            e = e.value
        else:
            return e


def _calls_sharded(an, view, call, names, sharded) -> bool:
    """``call`` calls (``model(x)``) a module that ``parallelize_module`` sharded, every one of
    its values, with ``names`` among the leaves it left local (not a replica kept unsharded)."""
    f = call.func
    if not isinstance(f, (ast.Name, ast.Attribute)):
        return False
    got = origins(an, view, f, call, limit=4)
    return bool(got) and all(names <= sharded.get(id(e), set()) for _, e in got)


def _in(view, node) -> bool:
    return any(n is node for n in view.sem.calls) if isinstance(node, ast.Call) else False


def _method(cls, name):
    return next((m for m in cls.body if isinstance(m, FUNC_TYPES) and m.name == name), None)


def _minus_one(e) -> bool:
    return isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) and isinstance(e.operand, ast.Constant) \
        and e.operand.value == 1


def _size_read(e) -> bool:
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape":
        return True
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "size" and len(e.args) == 1


def _reshape_parts(view, c):
    """(receiver, [size expressions]) of ``x.view(...)``/``x.reshape(...)``/``torch.reshape(x, s)``/
    ``x.unflatten(-1, s)``/``torch.unflatten(x, -1, s)``; None otherwise or when the sizes are not
    written out."""
    f = c.func
    qn = view.sem.call_qualname(c)
    if qn == "torch.reshape" and len(c.args) == 2:
        recv, sizes = c.args[0], _elts(c.args[1])
    elif qn == "torch.unflatten" and len(c.args) == 3 and _minus_one(c.args[1]):
        recv, sizes = c.args[0], _elts(c.args[2])
    elif qn is None and isinstance(f, ast.Attribute) and f.attr in _RESHAPES and c.args and not c.keywords:
        recv = f.value
        sizes = _elts(c.args[0]) if len(c.args) == 1 else list(c.args)
    elif qn is None and isinstance(f, ast.Attribute) and f.attr == "unflatten" and len(c.args) == 2 \
            and _minus_one(c.args[0]):
        recv, sizes = f.value, _elts(c.args[1])
    else:
        return None
    if not sizes or any(isinstance(e, ast.Starred) for e in sizes):
        return None
    return recv, sizes


def _elts(e):
    return list(e.elts) if isinstance(e, (ast.Tuple, ast.List)) else [e]


# -- the sizes a class's construction fixes, as products of its constructor's parameters ------------
# A value is (coefficient, ((atom, exponent), ...)); ``a // b`` divides (the sizes divide evenly).

def _mul(a, b, sign: int = 1):
    coef = a[0] * (b[0] if sign > 0 else 1 / b[0])
    ex = dict(a[1])
    for atom, n in b[1]:
        ex[atom] = ex.get(atom, 0) + sign * n
    return coef, tuple(sorted((k, v) for k, v in ex.items() if v))


class _Eval:
    """Sizes as the class ``cls`` builds them: constants, ``__init__``'s parameters and their
    attributes (``cfg.n_heads``), ``self.<attr>`` stored once in ``__init__``, local names bound
    once, ``*``, ``//`` and ``/``. ``attrs``: the ``self`` attributes read on the way."""

    def __init__(self, view, cls, init):
        from fractions import Fraction  # lazy: only a class that tensor parallelism shards gets here (start-up)

        self.view, self.cls, self.init, self.fraction = view, cls, init, Fraction
        self.attrs: set[str] = set()
        self.depth = 0

    def value(self, e, fn):
        self.depth += 1
        try:
            return self._value(e, fn) if self.depth < 24 else None
        finally:
            self.depth -= 1

    def _value(self, e, fn):
        if isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool) and e.value > 0:
            return self.fraction(e.value), ()
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Mult, ast.FloorDiv, ast.Div)):
            a, b = self.value(e.left, fn), self.value(e.right, fn)
            if a is None or b is None:
                return None
            return _mul(a, b, 1 if isinstance(e.op, ast.Mult) else -1)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "int" and len(e.args) == 1 \
                and "int" not in self.view.defs:
            return self.value(e.args[0], fn)
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and e.value.id == "self":
                return self._self_attr(e.attr)
            root = e
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and fn is self.init and self._is_param(root.id):
                return self.fraction(1), ((ast.unparse(e), 1),)
            return None
        if isinstance(e, ast.Name):
            if fn is self.init and self._is_param(e.id):
                return self.fraction(1), ((e.id, 1),)
            kind, evs = reaching(self.view, e.id, e)
            if kind != "events" or not evs or len(evs) != 1:
                return None
            st = evs[0]
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                    and self.view.sem.enclosing_function(st) is fn:
                return self.value(st.value, fn)
        return None

    def _is_param(self, name: str) -> bool:
        a = self.init.args
        return any(p.arg == name for p in (*a.posonlyargs, *a.args[1:], *a.kwonlyargs))

    def _self_attr(self, attr: str):
        vals = _self_bindings(self.cls).get(attr, ())
        if len(vals) != 1 or vals[0] is None:
            return None
        st = parent(vals[0])
        if self.view.sem.enclosing_function(st) is not self.init:
            return None
        self.attrs.add(attr)
        return self.value(vals[0], self.init)


def _reassigned(view, ov, cls, attrs) -> bool:
    """Some code outside ``cls.__init__`` stores one of ``attrs`` on an object
    (``block.attn.heads = heads // tp``, ``setattr(m, "heads", ...)``), in the checked module or
    the class's module; ``self.heads = ...`` in another class stores that class's own."""
    if not attrs:
        return False
    init = _method(cls, "__init__")
    for v in {id(view): view, id(ov): ov}.values():
        for n in ast.walk(v.sem.tree):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and n.attr in attrs:
                fn = v.sem.enclosing_function(n)
                if v is ov and fn is init:
                    continue
                if isinstance(n.value, ast.Name) and n.value.id == "self" and fn is not None \
                        and parent(fn) is not cls:
                    continue  # another class's own attribute of that name
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr" \
                    and len(n.args) == 3 and isinstance(n.args[1], ast.Constant) and n.args[1].value in attrs:
                return True
    return False
