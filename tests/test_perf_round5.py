"""Performance round 5 (issue 31): the shortcuts give the answers of the code they stand in for.

* ``noqa.may_list`` is a superset of ``line_directives``' codes (DDP005 skips the tokenizer on a no);
* ``passes.classes_of`` finds the classes in ``ast.walk``'s order without walking the expressions;
* ``reach``'s merged dependencies of a "no" (memoised per imported file) equal the walk's;
* ``_common._calling`` (an index of the called words) lists the files the scan did, in its order.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

from ddp_lint.analysis import noqa, snapshot
from ddp_lint.analysis.flow import passes, project, reach
from ddp_lint.analysis.rules import _common

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "tests" / "fixtures").rglob("*.py")) + sorted((ROOT / "analysis").rglob("*.py"))


def test_may_list_is_a_superset_of_the_directives():
    texts = [p.read_text(encoding="utf-8", errors="surrogateescape") for p in SOURCES]
    texts += [
        "x = 1  # noqa: DDP001\n",
        "x = 1  # NOQA:ddp104, E501\n",
        "s = '# noqa: E501'  # noqa: ddp999\n",
        "y = (1,  # noqa: F401,\n     2)  # noqa: DDP101\n",
        "z = 2  # noqa: E501\n",
        "a = 1  #noqa:\n# DDP001\n",
    ]
    seen = 0
    for text in texts:
        ddp = any(c.startswith("DDP") for _r, _s, _e, codes in noqa.line_directives(text) for c, _a, _b in codes)
        if ddp:
            seen += 1
            assert noqa.may_list(text, "DDP"), text[:200]
    assert seen >= 3
    assert not noqa.may_list("z = 2  # noqa: E501\n", "DDP")
    assert not noqa.may_list("a = 1  # noqa\n", "DDP")


class _Sem:
    def __init__(self, tree):
        self.tree = tree
        self.wanted = frozenset()


def test_classes_of_keeps_the_order_of_ast_walk():
    src = (
        "class A:\n    class B:\n        pass\n    def f(self):\n        class C: pass\n"
        "try:\n    class D: pass\nexcept E:\n    class F: pass\nelse:\n    class G: pass\nfinally:\n"
        "    class H: pass\n"
        "match x:\n    case 1:\n        class I: pass\n"
        "if c:\n    class J: pass\nelse:\n    with m:\n        class K: pass\n"
        "for i in y:\n    class L: pass\nelse:\n    class M: pass\n"
        "async def g():\n    async with m:\n        class N: pass\n"
    )
    trees = [ast.parse(src)] + [ast.parse(p.read_text(encoding="utf-8")) for p in SOURCES]
    for tree in trees:
        want = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        got = passes.classes_of(_Sem(tree))
        assert [id(n) for n in got] == [id(n) for n in want]


def _old_deps(path, first, absent, table):
    """The walk of round 4, for comparison."""
    deps = dict(absent)
    seen = {path}
    work = [s for s, _m in first if s is not None]
    while work:
        p = work.pop()
        if p in seen:
            continue
        seen.add(p)
        got = table.get(p)
        if got is None or got is reach._YES:
            continue
        own, succs = got
        deps.update(own)
        work.extend(succs)
    for p in seen:
        if p in deps and deps[p] is None and isinstance(table.get(p), tuple):
            deps[p] = table[p][0][p]
    return deps


def _clear():
    reach._facts.clear(), reach._resolved.clear(), reach._negative.clear(), reach._edge_memo.clear()
    project.clear()


def test_merged_dependencies_equal_the_walk(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("")
    files = {
        "pkg/__init__.py": "from . import a\n",
        "pkg/a.py": "from . import b\nimport pkg.missing\nfrom .sub import c\n",
        "pkg/b.py": "from . import a\nfrom .sub import d\nimport nothere.x\n",  # a cycle a <-> b
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "from .. import b\nfrom . import d\n",
        "pkg/sub/d.py": "import os\nfrom . import gone\n",
        "pkg/main.py": "from . import a, b\nfrom .sub import c, d\nfrom . import main\nimport pkg.sub.e\n",
        "pkg/e.py": "from . import e2\n",
        "pkg/e2.py": "from . import e\nfrom . import main\n",  # main is reached again through e
        "pkg/hit.py": "from . import a\nimport torch.distributed as dist\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    texts = {str(tmp_path / rel): text for rel, text in files.items()}
    texts[str(tmp_path / "pkg/main2.py")] = "from . import e\nfrom .sub import c\n"
    (tmp_path / "pkg/main2.py").write_text(texts[str(tmp_path / "pkg/main2.py")])
    for on in (False, True):
        _clear()
        ctx = snapshot.snapshot() if on else _null()
        with ctx:
            for order in (sorted(texts), sorted(texts, reverse=True)):
                for path in order:
                    text = texts[path]
                    got, deps = reach.reaches(path, text)
                    again = reach.reaches(path, text)
                    assert again == (got, deps)
                    if got:
                        continue
                    table, _c, _a = reach._table(0.0, project.disk_allowed(), reach.REACH_TEXT, False)
                    first = reach._edges(os.path.abspath(path), reach.candidates(text), 0.0)
                    absent = {}
                    for _s, marks in first:
                        absent.update(dict.fromkeys(marks))
                    assert deps == _old_deps(os.path.abspath(path), first, absent, table), path
                    assert path not in deps
            assert not reach.reaches(str(tmp_path / "pkg/main.py"), texts[str(tmp_path / "pkg/main.py")])[0]
            assert reach.reaches(str(tmp_path / "pkg/hit.py"), texts[str(tmp_path / "pkg/hit.py")])[0]
    _clear()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_calling_index_lists_what_the_scan_found(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    names = ["alpha", "beta", "gamma"]
    for i in range(12):
        d = tmp_path / f"d{i % 3}"
        d.mkdir(exist_ok=True)
        body = "".join(f"{names[(i + k) % 3]}(x)\n" for k in range(i % 3))
        (d / f"m{i}.py").write_text(body + "y = beta\n")
    _common._call_index.clear()
    with snapshot.snapshot():
        for folder in (str(tmp_path), str(tmp_path / "d1")):
            files = _common._project_files(folder)
            for want in ({"alpha"}, {"beta"}, {"alpha", "gamma"}, {"delta"}):
                scan = [p for p in files if not frozenset(want).isdisjoint(_common._called_words(p) or ())]
                assert _common._calling(folder, frozenset(want)) == scan
    _common._call_index.clear()
