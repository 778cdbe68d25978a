from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ._common import const_int, const_str
from ..flow.kernel import in_notebook, kernel_statement

_LAUNCH_KEYS = frozenset({"RANK", "WORLD_SIZE"})


class InitInUnlaunchedNotebook(Rule):
    """
    ## What it does
    Checks, in a notebook, for `init_process_group(...)` that the kernel's own process runs (in a
    cell, or in a function a cell calls; not in a function started by `mp.spawn` or
    `notebook_launcher`) when nothing launched the kernel as a rank: the notebook never sets
    `RANK` / `WORLD_SIZE`, and the call does not name a one-process group (`world_size=1`).

    ## Why is this bad?
    A kernel is one process that no launcher started. With the default `env://` rendezvous the
    call fails at once (`environment variable RANK expected, but not set`); given a
    `world_size` above 1 it waits for peers that never come, and the kernel hangs until the
    timeout (30 minutes by default), with the cell showing `[*]`.

    ## Example
    ```python
    # a notebook cell
    dist.init_process_group("gloo")
    ```

    ## Use instead
    Start the ranks from the notebook, and initialise inside each:

    ```python
    def train(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        ...

    mp.spawn(train, args=(2,), nprocs=2)  # from a module: see DDP602
    ```

    or, to try the API in one process, a one-rank group:

    ```python
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT="29500")
    dist.init_process_group("gloo", rank=0, world_size=1)
    ```

    ## Fix safety
    There is no fix: whether the notebook should start ranks or run as one is the author's call.
    """

    code = "DDP603"
    name = "init-in-unlaunched-notebook"
    severity = Severity.ERROR
    requires_text = ("init_process_group",)

    def finish(self, ctx) -> None:
        if not in_notebook(ctx):
            return
        calls = ctx.dist_calls("init_process_group")
        if not calls or _sets_launch_env(ctx):
            return
        for call in calls:
            if kernel_statement(ctx, call) is None or _guarded(ctx, call):
                continue
            ws = get_arg(call, 3, "world_size")
            n = const_int(ws, ctx.sem)
            if ws is not None and n is None:
                continue  # a world size from elsewhere: cannot tell
            if n is not None and n == 1:
                continue
            if n is not None and n > 1:
                ctx.report(call, f"`init_process_group` in the notebook's own process with `world_size={n}`: "
                                 f"nothing launched {n - 1} more ranks, so the kernel waits for peers that never "
                                 "come (hangs until the timeout); start the ranks from the notebook (`mp.spawn`, "
                                 "`notebook_launcher`) and initialise inside each")
                continue
            method = const_str(get_arg(call, 1, "init_method"), ctx.sem)
            if get_arg(call, 5, "store") is not None or (method is not None and not method.startswith("env://")):
                continue
            ctx.report(call, "`init_process_group` in the notebook's own process, which no launcher started: "
                             "`RANK`/`WORLD_SIZE` are not set, so the env:// rendezvous fails (\"environment "
                             "variable RANK expected, but not set\"); start the ranks from the notebook "
                             "(`mp.spawn`, `notebook_launcher`), or pass `rank=0, world_size=1` for a one-process group")


def _env_key(node) -> str | None:
    s = const_str(node)
    return s if s in _LAUNCH_KEYS else None


def _sets_launch_env(ctx) -> bool:
    """The notebook sets RANK or WORLD_SIZE itself (``os.environ["RANK"] = ...``, ``setdefault``,
    ``update(RANK=...)`` / ``update({"RANK": ...})``, ``os.putenv``)."""
    def is_environ(e):
        return ctx.qn(e) == "os.environ"

    for st in ctx.sem.by_type.get(ast.Assign, ()):
        for t in st.targets:
            if isinstance(t, ast.Subscript) and is_environ(t.value) and _env_key(t.slice):
                return True
    for c in ctx.sem.calls:
        f = c.func
        if isinstance(f, ast.Attribute) and is_environ(f.value):
            if f.attr == "setdefault" and c.args and _env_key(c.args[0]):
                return True
            if f.attr == "update":
                if any(k.arg in _LAUNCH_KEYS for k in c.keywords):
                    return True
                if c.args and isinstance(c.args[0], ast.Dict) and any(_env_key(k) for k in c.args[0].keys):
                    return True
        elif ctx.qn(c) == "os.putenv" and c.args and _env_key(c.args[0]):
            return True
    return False


def _reads_env(node) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv"):
            return True
        if isinstance(n, ast.Name) and n.id in ("environ", "getenv"):
            return True
    return False


def _guarded(ctx, call) -> bool:
    """Under an ``if`` that reads the environment (``if "RANK" in os.environ:``), or in a ``try``
    with a handler: the author expects both outcomes."""
    child, p = call, parent(call)
    while p is not None and not isinstance(p, ast.Module):
        if isinstance(p, (ast.If, ast.While, ast.IfExp)) and child is not p.test and _reads_env(p.test):
            return True
        if isinstance(p, ast.Try) and p.handlers and child in p.body:
            return True
        child, p = p, parent(p)
    return False
