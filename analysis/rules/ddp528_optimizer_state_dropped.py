from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ..flow.hidden import entry_of
from ..flow.modern import hub, uses_after
from ..flow.origins import origins
from ._common import other_call_sites

# methods that put an element into a list in place: a list built empty and filled later is not empty
_FILLS = frozenset({"append", "extend", "insert", "__iadd__"})


class OptimizerStateDropped(Rule):
    """
    ## What it does
    Checks for `set_state_dict(model, optimizers, model_state_dict=..., optim_state_dict=...)` whose
    `optimizers` is empty (`[]`, `()`, `list()`, or a name, a `self` attribute, a parameter or a
    helper's return that only ever holds an empty list or tuple, filled nowhere), while an optimizer
    state dict is passed; and for `get_state_dict(model, <empty>)` whose optimizer state dict (the
    second result) is used. The optimizers are followed through names, tuple unpacking, `self`
    attributes, parameters (also of methods called from another module) and helpers' returns.

    ## Why is this bad?
    `torch.distributed.checkpoint.state_dict` handles optimizers only when some are passed: with no
    optimizer, `set_state_dict` skips `optim_state_dict` without a word, and `get_state_dict`
    returns an empty optimizer state dict. A resumed run then goes on with fresh optimizer state and
    the learning rates and other `param_groups` settings of its constructor, not those of the
    checkpoint: the loss diverges from the uninterrupted run, and nothing fails.

    ## Example
    ```python
    def load_state_dict(self, state_dict):
        set_state_dict(
            self.model, [],
            model_state_dict=state_dict["model"], optim_state_dict=state_dict["optim"],
        )
    ```

    ## Use instead
    Pass the optimizers whose state the checkpoint holds:
    ```python
    def load_state_dict(self, state_dict):
        set_state_dict(
            self.model, self.optimizers,
            model_state_dict=state_dict["model"], optim_state_dict=state_dict["optim"],
        )
    ```
    or, to restore the model only, call `set_model_state_dict`.

    ## Fix safety
    There is no automatic fix: which optimizers the state belongs to is the program's choice.
    """

    code = "DDP528"
    name = "optimizer-state-dropped"
    severity = Severity.ERROR
    requires_text = ("set_state_dict", "get_state_dict")

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        callers = None
        for c in view.sem.calls:
            a = entry_of(view, c)
            if a is None or a.key not in ("set_state_dict", "get_state_dict") or not a.qualnames:
                continue
            opts = get_arg(c, 1, "optimizers")
            if opts is None:
                continue
            if a.key == "set_state_dict":
                osd = get_arg(c, None, "optim_state_dict")
                if osd is None or _empty_state(view, osd):
                    continue
            elif not _optim_result_used(view, c):
                continue
            if callers is None:
                callers = other_call_sites(ctx, an, methods=True)
            where = _always_empty(an, view, opts, c, callers)
            if where is None:
                continue
            ev, leaf = where
            related = [] if leaf is opts or ev is not view else [(leaf, "the optimizers are empty here")]
            if a.key == "set_state_dict":
                msg = (f"`set_state_dict` is given no optimizer (`{_short(ctx.text(opts))}` is empty) and an "
                       f"optimizer state dict (`{_short(ctx.text(osd))}`): it skips that state without a word, "
                       "so the resumed run keeps fresh optimizer state and its constructor's learning rates; "
                       "pass the optimizers the checkpoint holds (or call `set_model_state_dict`)")
            else:
                msg = (f"`get_state_dict` is given no optimizer (`{_short(ctx.text(opts))}` is empty), so the "
                       "optimizer state dict it returns is empty, and the checkpoint holds no optimizer state; "
                       "pass the optimizers (or call `get_model_state_dict`)")
            ctx.report(opts, msg, related=related)


def _always_empty(an, view, expr, at, callers):
    """(view, leaf) of an empty list or tuple when every value ``expr`` may hold is one, filled
    nowhere; None otherwise (also when nothing is known)."""
    leaves = origins(an, view, expr, at, callers=callers)
    if not leaves:
        return None
    first = None
    for lv, leaf in leaves:
        if not _empty_display(lv, leaf) or _filled(lv, leaf, view, expr):
            return None
        if first is None or lv is view:
            first = (lv, leaf)
    return first


def _empty_display(view, node) -> bool:
    if isinstance(node, (ast.List, ast.Tuple)):
        return not node.elts
    if isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Name):
        return node.func.id in ("list", "tuple") and view.sem.call_qualname(node) in (None, "", "list", "tuple",
                                                                                       "builtins.list", "builtins.tuple")
    return False


def _filled(view, leaf, qview, qexpr) -> bool:
    """The empty list ``leaf`` may be filled in place before the use ``qexpr`` of ``qview``: a name
    or attribute it is bound to, or ``qexpr`` itself, is filled in either module
    (``opts.append(o)``, ``self.opts += [o]``, ``opts[0:0] = [o]``). A tuple is never filled; a
    list that a helper returns is not followed (taken as filled)."""
    if isinstance(leaf, ast.Tuple):
        return False
    st = parent(leaf)
    keys = {_key(qexpr)} - {""}
    if isinstance(st, ast.Assign) and st.value is leaf:
        keys |= {_key(t) for t in st.targets} - {""}
    elif isinstance(st, (ast.AnnAssign, ast.NamedExpr)) and st.value is leaf:
        keys |= {_key(st.target)} - {""}
    elif not isinstance(st, (ast.arguments, ast.Call, ast.keyword)):
        return True  # returned or stored some other way: not followed
    return any(_fills(v, keys) for v in {id(view): view, id(qview): qview}.values())


def _fills(view, keys) -> bool:
    for n in ast.walk(view.sem.tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _FILLS:
            if _key(n.func.value) in keys:
                return True
        elif isinstance(n, ast.AugAssign):
            if _key(n.target) in keys:
                return True
        elif isinstance(n, ast.Assign):
            if any(isinstance(t, ast.Subscript) and _key(t.value) in keys for t in n.targets):
                return True
    return False


def _key(node) -> str:
    """``opts`` or ``self.opts`` (any load or store of it), "" for other expressions."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return ""


def _empty_state(view, expr) -> bool:
    """An optimizer state dict that is visibly nothing: ``None``, ``{}``, ``dict()``."""
    if isinstance(expr, ast.Constant) and expr.value is None:
        return True
    if isinstance(expr, ast.Dict) and not expr.keys:
        return True
    return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict"
            and not expr.args and not expr.keywords)


def _optim_result_used(view, call) -> bool:
    """``get_state_dict``'s second result (the optimizer state dict) is bound and read later, or
    the pair is used whole."""
    up = parent(call)
    if isinstance(up, ast.Assign) and up.value is call and len(up.targets) == 1:
        t = up.targets[0]
        if isinstance(t, (ast.Tuple, ast.List)):
            if len(t.elts) != 2:
                return False
            second = t.elts[1]
            if isinstance(second, ast.Name):
                return bool(uses_after(view.sem, second.id, up))
            if isinstance(second, ast.Attribute) and isinstance(second.value, ast.Name) and second.value.id == "self":
                return bool(uses_after(view.sem, f"self.{second.attr}", up))
            return True
        return True
    if isinstance(up, ast.Subscript) and up.value is call:
        return isinstance(up.slice, ast.Constant) and up.slice.value in (1, -1)
    return not isinstance(up, ast.Expr)


def _short(s: str) -> str:
    return s if len(s) <= 40 else s[:37] + "..."
