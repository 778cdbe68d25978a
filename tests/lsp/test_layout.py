"""The server's modules form no import cycle, and none of them is a room too big to read."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "lsp_server"
MAX_LINES = 900


def _module_level_imports(tree: ast.Module):
    """Import statements executed when the module is imported (function bodies and
    ``if TYPE_CHECKING:`` blocks excluded)."""
    todo = list(tree.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            yield n
        elif isinstance(n, ast.If):
            test = ast.unparse(n.test)
            if "TYPE_CHECKING" not in test:
                todo.extend(n.body)
            todo.extend(n.orelse)
        elif isinstance(n, ast.Try):
            todo.extend(n.body + n.orelse + n.finalbody)
            for h in n.handlers:
                todo.extend(h.body)
        elif isinstance(n, (ast.With, ast.ClassDef)):
            todo.extend(n.body)


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in PKG.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for p in PKG.glob("*.py"):
        deps = set()
        for n in _module_level_imports(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, ast.ImportFrom):
                if n.level == 1:
                    if n.module:
                        deps.add(n.module.split(".")[0])
                    else:
                        deps.update(a.name for a in n.names)
                elif n.level == 0 and (n.module or "").startswith("ddp_lint.lsp_server."):
                    deps.add(n.module.split(".")[2])
            else:
                for a in n.names:
                    if a.name.startswith("ddp_lint.lsp_server."):
                        deps.add(a.name.split(".")[2])
        graph[p.stem] = {d for d in deps if d in mods and d != p.stem}
    return graph


def _cycle(graph):
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_lsp_server():
    graph = _graph()
    assert {"server", "runtime", "commands", "diagnostics"} <= set(graph)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_room_too_big():
    big = {p.name: n for p in PKG.glob("*.py") if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, f"files over {MAX_LINES} lines under lsp_server/: {big}"
