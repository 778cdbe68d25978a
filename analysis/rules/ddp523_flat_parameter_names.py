from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import parent
from ._common import other_call_sites, shard_or_callers_reach
from ..flow.modern import fsdp1_flat, hub

_STR_TESTS = frozenset({"startswith", "endswith", "find", "index", "split", "rsplit", "partition", "count",
                        "__contains__"})
_RE = frozenset({"re.search", "re.match", "re.fullmatch", "re.findall", "fnmatch.fnmatch", "fnmatch.fnmatchcase"})


class FlatParameterNames(Rule):
    """
    ## What it does
    Checks for parameters of an FSDP1 module (`FullyShardedDataParallel` without
    `use_orig_params=True`) chosen by their name or their number of dimensions: a loop or
    comprehension over `model.named_parameters()` that tests the name (`"bias" in name`,
    `name.endswith("norm.weight")`, `re.search(..., name)`), or over `model.parameters()` /
    `named_parameters()` that tests `p.ndim` / `p.dim()` / `len(p.shape)`. The model may be
    wrapped in another function or module and given to a helper that builds the groups.

    ## Why is this bad?
    With `use_orig_params=False` (the default) FSDP1 replaces each wrapped module's parameters by
    one `FlatParameter`: `named_parameters()` yields only names like
    `_fsdp_wrapped_module._flat_param`, and every flat parameter is 1-D. A name test never sees
    `bias`, `norm` or `embed`, so the no-decay group is empty and weight decay hits biases and
    norms; a dimension test puts every parameter in the 1-D group. Nothing fails: the recipe is
    silently not the one written (and one flat parameter mixes weights, biases and norms, so no
    split of flat parameters can be right).

    ## Example
    ```python
    model = FSDP(net, auto_wrap_policy=policy)
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "norm" in n]
    ```

    ## Use instead
    ```python
    model = FSDP(net, auto_wrap_policy=policy, use_orig_params=True)
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "norm" in n]
    ```

    ## Fix safety
    There is no automatic fix: `use_orig_params=True` changes what the optimizer and the state
    dicts see.
    """

    code = "DDP523"
    name = "fsdp1-flat-parameter-names"
    severity = Severity.WARNING
    requires_text = ("parameters",)

    reach = classmethod(shard_or_callers_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        callers = None
        for c in view.sem.calls:
            f = c.func
            if not (isinstance(f, ast.Attribute) and f.attr in ("named_parameters", "parameters")):
                continue
            walk = _walk(c)
            if walk is None:
                continue
            target, body = walk
            named = f.attr == "named_parameters"
            name_var, param_var = _vars(target, named)
            test = None
            for node in body:
                test = _name_test(view, node, name_var) or _dim_test(node, param_var)
                if test is not None:
                    break
            if test is None:
                continue
            if callers is None:
                callers = other_call_sites(ctx, an)
            wrap = fsdp1_flat(an, view, f.value, c, callers=callers)
            if wrap is None:
                continue
            wv, w = wrap
            what = "their names are `..._flat_param`" if test[1] == "name" else "every flat parameter is 1-D"
            ctx.report(test[0], f"`{ctx.text(test[0])}` sorts the parameters of an FSDP1 module wrapped without "
                                f"`use_orig_params=True`: they are flat parameters and {what}, so the test does not "
                                "see the original parameters; pass `use_orig_params=True`",
                       related=[(w, "wrapped here")] if wv is view else [])


def _walk(call):
    """(loop target, nodes to search) when ``call`` is the iterable of a ``for`` or of a
    comprehension's only generator."""
    p = parent(call)
    if isinstance(p, ast.For) and p.iter is call:
        return p.target, p.body
    if isinstance(p, ast.comprehension) and p.iter is call:
        comp = parent(p)
        if len(getattr(comp, "generators", ())) != 1:
            return None
        rest = [comp.key, comp.value] if isinstance(comp, ast.DictComp) else [comp.elt]
        return p.target, [*p.ifs, *rest]
    return None


def _vars(target, named):
    if named:
        if isinstance(target, ast.Tuple) and len(target.elts) == 2:
            a, b = target.elts
            return (a.id if isinstance(a, ast.Name) else None), (b.id if isinstance(b, ast.Name) else None)
        return None, None
    return None, (target.id if isinstance(target, ast.Name) else None)


def _is(node, name) -> bool:
    return name is not None and isinstance(node, ast.Name) and node.id == name


def _name_test(view, root, name):
    if name is None:
        return None
    for n in ast.walk(root):
        if isinstance(n, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) and \
                any(_is(x, name) for x in (n.left, *n.comparators)):
            return n, "name"
        if isinstance(n, ast.Call):
            g = n.func
            if isinstance(g, ast.Attribute) and g.attr in _STR_TESTS and _is(g.value, name):
                return n, "name"
            if (view.sem.call_qualname(n) or "") in _RE and any(_is(a, name) for a in n.args):
                return n, "name"
    return None


def _dim_test(root, p):
    if p is None:
        return None
    for n in ast.walk(root):
        if not isinstance(n, ast.Compare):
            continue
        for x in (n.left, *n.comparators):
            if isinstance(x, ast.Attribute) and x.attr == "ndim" and _is(x.value, p):
                return n, "dim"
            if isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute) and x.func.attr in ("dim", "ndimension") \
                    and _is(x.func.value, p):
                return n, "dim"
            if isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "len" and x.args and \
                    isinstance(x.args[0], ast.Attribute) and x.args[0].attr == "shape" and _is(x.args[0].value, p):
                return n, "dim"
    return None
