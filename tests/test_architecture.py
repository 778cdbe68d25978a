"""The layering that docs/architecture.md states, enforced.

The rules are read from the ``import-rules`` block of docs/architecture.md, so the document and this
test cannot drift apart: each line is ``MODULE-PATTERN : ALLOWED ...``, the first pattern that matches
a module wins, and an allowed entry is ``stdlib``, a third-party top-level name, or a project module
prefix. Every import counts, module-level or lazy (inside a function); only module-level imports
count for import circles too (a lazy import is a loop deferred, not broken); only imports under
``if TYPE_CHECKING:`` are left out of the circle check.
"""
from __future__ import annotations

import ast
import fnmatch
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"ddp_lint": ROOT / "ddp_lint", "ddp_lint.analysis": ROOT / "analysis",
           "ddp_lint.lsp_server": ROOT / "lsp_server"}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            mods[".".join((pkg, *rel))] = path
    return mods


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _rules() -> list[tuple[str, list[str]]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    m = re.search(r"```text import-rules\n(.*?)```", text, re.S)
    assert m, "docs/architecture.md has no ```text import-rules block"
    rules = []
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pattern, _, allowed = line.partition(":")
            rules.append((pattern.strip(), allowed.split()))
    return rules


RULES = _rules()


def _rule_for(module: str) -> list[str]:
    for pattern, allowed in RULES:
        if fnmatch.fnmatchcase(module, pattern) or module == pattern or module.startswith(pattern + "."):
            return allowed
    raise AssertionError(f"no import rule in docs/architecture.md covers {module}")


def _walk(node: ast.AST, skip_type_checking: bool):
    for child in ast.iter_child_nodes(node):
        if skip_type_checking and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            yield from (n for c in child.orelse for n in [c, *_walk(c, True)])
            continue
        yield child
        yield from _walk(child, skip_type_checking)


def _imports(module: str, runtime_only: bool) -> list[tuple[str, int]]:
    """(imported module, line) for every import of ``module``, at any depth; relative imports
    resolved. ``runtime_only`` leaves out ``if TYPE_CHECKING:`` imports."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if _is_package(module) else module.rpartition(".")[0]
    out = []
    for node in _walk(tree, runtime_only):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                assert base, f"{path}:{node.lineno}: relative import above the top package"
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, node.lineno))
            for a in node.names:  # `from . import x` / `from .pkg import sub` import submodules
                if f"{mod}.{a.name}" in MODULES:
                    out.append((f"{mod}.{a.name}", node.lineno))
    return out


def _allowed(imported: str, allowed: list[str]) -> bool:
    top = imported.split(".")[0]
    if top in ("ddp_lint",):
        return any(imported == a or imported.startswith(a + ".") for a in allowed if a.startswith("ddp_lint"))
    if top in sys.stdlib_module_names or top == "__future__":
        return "stdlib" in allowed
    return top in allowed


def test_every_import_follows_the_documented_layers():
    bad = []
    for module in MODULES:
        allowed = _rule_for(module)
        for imported, line in _imports(module, runtime_only=False):
            if not _allowed(imported, allowed):
                bad.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {module} imports {imported}")
    assert not bad, "imports the layers of docs/architecture.md forbid:\n" + "\n".join(bad)


def test_no_rule_imports_another_rule():
    """A query two rules share lives in ``analysis/flow/`` (or a ``rules/_*.py`` glue module), never
    in one rule's file that another imports."""
    rule = re.compile(r"ddp_lint\.analysis\.rules\.ddp\d")
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line}: imports {i}"
           for m in MODULES if rule.match(m) for i, line in _imports(m, runtime_only=False)
           if rule.match(i) and i != m]
    assert not bad, "a rule imports another rule's file:\n" + "\n".join(bad)


def _find_circle(graph: dict[str, list[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in graph.get(m, ()):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_circle():
    graph = {m: sorted({i for i, _ in _imports(m, runtime_only=True) if i in MODULES and i != m}) for m in MODULES}
    circle = _find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_circle_finder_can_fail():
    assert _find_circle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert _find_circle({"a": ["b", "c"], "b": ["c"], "c": []}) is None


def test_the_rules_reject_a_forbidden_import():
    """The checker itself can fail: analysis importing the server or pygls is caught."""
    rule = _rule_for("ddp_lint.analysis.engine")
    assert not _allowed("ddp_lint.lsp_server.server", rule)
    assert not _allowed("pygls.lsp.server", rule)
    assert not _allowed("torch", rule)
    assert not _allowed("ddp_lint.cli", rule)
    assert _allowed("ddp_lint.analysis.model", rule) and _allowed("os.path", rule)
    shim = _rule_for("ddp_lint.analysis.runtime.shim")
    assert _allowed("torch.distributed", shim) and not _allowed("ddp_lint.analysis.model", shim)


def test_source_files_stay_small():
    big = [f"{p.relative_to(ROOT)} ({n} lines)" for p in MODULES.values()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > 900]
    assert not big, "source files over 900 lines: " + ", ".join(big)


def test_every_package_is_in_pyproject():
    """A subpackage missing from pyproject's package list is left out of the wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {m for m in MODULES if _is_package(m)}
    assert packages <= listed, f"packages missing from pyproject.toml: {sorted(packages - listed)}"
