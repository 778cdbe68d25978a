"""Notebook glue for the DDP6xx rules: is the file a notebook, and what runs in the kernel's own
process (module-level code, and the functions of the file it calls, transitively), in which
module-level statement (a notebook's cells run top to bottom)."""
from __future__ import annotations

import ast

from ..io import is_notebook  # (not ..notebook: its JSON and cell machinery is for notebooks only)
from ..semantic import FUNC_TYPES, parent


def in_notebook(ctx) -> bool:
    return is_notebook(ctx.filename)


def top_statement(node: ast.AST) -> ast.stmt | None:
    """The module-level statement that contains ``node``."""
    n = node
    while n is not None:
        p = parent(n)
        if isinstance(p, ast.Module):
            return n
        n = p
    return None


def kernel_functions(ctx) -> dict[int, ast.stmt]:
    """id(def) -> the first module-level statement whose run calls it, for the functions of this
    file the kernel process itself runs (called by name from module-level code, or from such a
    function). A function only passed somewhere (``mp.spawn(train)``) is not among them."""
    return ctx.memo("notebook.kernel_functions", lambda: _kernel_functions(ctx))


def _kernel_functions(ctx) -> dict[int, ast.stmt]:
    sem = ctx.sem
    out: dict[int, ast.stmt] = {}
    work: list[tuple[ast.AST, ast.stmt]] = []

    def called(scope, root_of):
        for c in sem.scope_calls(scope):
            if not isinstance(c.func, ast.Name):
                continue
            for d in sem.functions.get(c.func.id, ()):
                if not isinstance(d, FUNC_TYPES) or not isinstance(parent(d), ast.Module):
                    continue
                root = root_of(c)
                if root is None:
                    continue
                if id(d) not in out or out[id(d)].lineno > root.lineno:
                    out[id(d)] = root
                    work.append((d, root))

    called(sem.tree, top_statement)
    seen = 0
    while work and seen < 10000:
        seen += 1
        d, root = work.pop()
        called(d, lambda _c, r=root: r)
    return out


def kernel_statement(ctx, node: ast.AST) -> ast.stmt | None:
    """The module-level statement during whose run the kernel process runs ``node``; None when
    the kernel never runs it itself (a spawn target, a method, an unused function)."""
    fn = ctx.sem.enclosing_function(node)
    if fn is None:
        scope = ctx.sem.scope_of(node)
        return top_statement(node) if isinstance(scope, ast.Module) else None
    return kernel_functions(ctx).get(id(fn))


# Accelerate's launcher of the training function's processes from a notebook
LAUNCHERS = ("accelerate.notebook_launcher", "accelerate.launchers.notebook_launcher")


def one_process_notebook(ctx) -> bool:
    """A notebook that never starts ``notebook_launcher``: its kernel is one process, where
    ``accelerator.prepare`` returns the model itself."""
    if not (ctx.filename or "").endswith(".ipynb"):
        return False
    return not ctx.sem.calls_to(*LAUNCHERS)
