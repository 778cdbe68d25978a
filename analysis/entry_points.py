"""Where a script starts, for the editor's "Run with N ranks" code lenses: the module-level
``if __name__ == "__main__":`` blocks and the functions of the file that it hands to
``torch.multiprocessing.spawn`` / ``start_processes``. Editor-agnostic: positions are 0-based
lines, as in ``model.py``."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from types import SimpleNamespace


@dataclass(frozen=True)
class EntryPoint:
    line: int  # 0-based line of the ``if`` or the ``def``
    kind: str  # "main" | "spawn-target"
    name: str  # "__main__" or the function's name


def entry_points(text: str, filename: str = "<string>") -> list[EntryPoint]:
    """The file's entry points, in line order; none when it does not parse."""
    from .engine import parse
    from .rules._spawn import is_main_guard, spawn_calls, target_def
    from .semantic import Semantic

    tree, _ = parse(text, filename)
    if tree is None:
        return []
    out: dict[int, EntryPoint] = {}
    for st in tree.body:
        if isinstance(st, ast.If) and is_main_guard(st.test):
            out[st.lineno - 1] = EntryPoint(st.lineno - 1, "main", "__main__")
    if "spawn" in text or "start_processes" in text:
        sem = Semantic(tree, (ast.Call, ast.FunctionDef, ast.AsyncFunctionDef))
        try:
            ctx = SimpleNamespace(sem=sem)
            for call in spawn_calls(ctx):
                d = target_def(ctx, call)
                if d is not None:
                    line = min([d.lineno] + [x.lineno for x in d.decorator_list]) - 1
                    out.setdefault(line, EntryPoint(line, "spawn-target", d.name))
        finally:
            sem.release()
    return [out[k] for k in sorted(out)]
