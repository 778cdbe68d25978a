from __future__ import annotations

import ast

from ..model import Applicability, Edit, Range, Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.assignments import reaching_assignment
from ._spawn import spawn_calls

_SCALAR_FUNCS = frozenset({"int", "float", "str", "len", "bool", "round", "max", "min", "abs", "sum", "dict"})
_SCALAR_QN = frozenset({"torch.cuda.device_count", "os.cpu_count", "multiprocessing.cpu_count",
                        "torch.distributed.get_world_size", "torch.device", "argparse.Namespace"})
_SCALAR_METHODS = frozenset({"parse_args", "device_count", "cpu_count", "get_world_size"})


class SpawnArgsNotTuple(Rule):
    """
    ## What it does
    Checks the `args` of `torch.multiprocessing.spawn(fn, args=...)` (and `start_processes`) for a
    single value instead of a tuple: `args=(world_size)` is just `world_size` in parentheses.
    A parenthesised value is flagged unless it is known to be a tuple or list (or is named like
    one, `spawn_args`); an unparenthesised one only when it is provably not a sequence (a number,
    `torch.cuda.device_count()`, `parser.parse_args()`).

    ## Why is this bad?
    Each spawned process calls `fn(i, *args)`. A non-iterable fails in every child, and the
    parent re-raises:

    ```
    torch.multiprocessing.spawn.ProcessRaisedException:
    -- Process 0 terminated with the following error:
    TypeError: Value after * must be an iterable, not int
    ```

    A string is iterable, so `args=("config.yaml")` passes one argument per character instead.

    ## Example
    ```python
    mp.spawn(main, args=(world_size), nprocs=world_size)
    ```

    ## Use instead
    ```python
    mp.spawn(main, args=(world_size,), nprocs=world_size)
    ```

    ## Fix safety
    The fix adds the trailing comma (`(world_size,)`). It is **safe**: the call could not work
    with a single non-sequence value.
    """

    code = "DDP401"
    name = "spawn-args-not-tuple"
    severity = Severity.ERROR
    fix_availability = "always"
    requires_text = ("spawn", "start_processes")
    requires_text_all = (("multiprocessing",),)  # torch.multiprocessing.spawn / start_processes

    def finish(self, ctx) -> None:
        for call in spawn_calls(ctx):
            val = get_arg(call, 1, "args")
            if val is None or isinstance(val, (ast.Tuple, ast.List, ast.Starred)):
                continue
            paren = _parenthesised(ctx, val)
            verdict = _not_a_sequence(ctx, val, call)
            if verdict is False or (verdict is None and not paren):
                continue
            if paren:
                end = ctx.src.node_end(val)
                fix = ctx.fix(Applicability.SAFE, "Make it a one-element tuple", [Edit(Range(end, end), ",")])
            else:
                fix = ctx.fix(Applicability.SAFE, "Make it a one-element tuple",
                              [ctx.replace(val, f"({ctx.text(val)},)")])
            ctx.report(
                val,
                f"`args={'(' if paren else ''}{ctx.text(val)}{')' if paren else ''}` is not a tuple: every "
                "spawned process fails with `TypeError: Value after * must be an iterable`; "
                f"write `({ctx.text(val)},)`",
                fix=fix,
            )


def _parenthesised(ctx, node: ast.AST) -> bool:
    """The value is wrapped in its own parentheses: `args=(x)`."""
    start = ctx.src.offset(ctx.src.node_start(node))
    end = ctx.src.offset(ctx.src.node_end(node))
    text = ctx.src.text
    i = start - 1
    while i >= 0 and text[i] in " \t\r\n":
        i -= 1
    j = end
    while j < len(text) and text[j] in " \t\r\n":
        j += 1
    if i < 0 or j >= len(text) or text[i] != "(" or text[j] != ")":
        return False
    # `mp.spawn((x))`-style call parentheses cannot reach here (args is never the first argument),
    # but make sure the "(" is not the call's own: it must come after the `args=` or the comma
    k = i - 1
    while k >= 0 and text[k] in " \t\r\n":
        k -= 1
    return k >= 0 and text[k] in "=,"


def _not_a_sequence(ctx, val: ast.AST, at: ast.AST, depth: int = 0) -> bool | None:
    """True: provably not a tuple/list; False: provably (or by name) a sequence; None: unknown."""
    if depth > 3:
        return None
    if isinstance(val, (ast.Tuple, ast.List, ast.ListComp, ast.GeneratorExp)):
        return False
    if isinstance(val, ast.Constant):
        return True  # numbers, None, and strings (iterated per character)
    if isinstance(val, (ast.JoinedStr, ast.Dict, ast.DictComp)):
        return True
    if isinstance(val, ast.BinOp) and not isinstance(val.op, ast.Add):
        return True
    if isinstance(val, ast.UnaryOp):
        return True
    if isinstance(val, ast.Call):
        f = val.func
        if isinstance(f, ast.Name) and f.id in _SCALAR_FUNCS:
            return True
        if (ctx.qn(val) or "") in _SCALAR_QN:
            return True
        if isinstance(f, ast.Attribute) and f.attr in _SCALAR_METHODS:
            return True
        if isinstance(f, ast.Name) and f.id in ("tuple", "list"):
            return False
        return None
    if isinstance(val, (ast.Name, ast.Attribute)):
        name = val.id if isinstance(val, ast.Name) else val.attr
        low = name.lower()
        if low.endswith(("args", "argv", "tuple", "params", "inputs")) and low != "args":
            return False
        if isinstance(val, ast.Name):
            st = reaching_assignment(ctx, val.id, at)
            if st is not None:
                return _not_a_sequence(ctx, st.value, st, depth + 1)
        return None
    return None
