"""A script's own ``sys.path`` entries are import roots (``flow.sys_path``): ``tools/train.py`` that
puts the folder above it on the path imports the project's package from there."""
from __future__ import annotations

import os
import textwrap

import pytest

from ddp_lint.analysis.flow import project
from ddp_lint.analysis.flow.project import declared_roots

HEADS = {
    "dirname_abspath": "sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))",
    "join_dotdot": "sys.path.append(os.path.join(os.path.dirname(__file__), '..'))",
    "join_pardir": "sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir)))",
    "pathlib_parents": "sys.path.append(str(Path(__file__).resolve().parents[1]))",
    "pathlib_name": "ROOT = Path(__file__).parent.parent\nif str(ROOT) not in sys.path:\n    sys.path.append(str(ROOT))",
    "osp_plus": "sys.path.insert(0, osp.dirname(osp.realpath(__file__)) + '/../')",
    "pathlib_div": "sys.path.append(str(Path(__file__).parent / '..'))",
    "from_imports": "from os.path import dirname, abspath\nsys.path.insert(0, dirname(dirname(abspath(__file__))))",
    "sys_alias": "import sys as _s\n_s.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))",
}
NOT_ROOTS = {
    "cwd_relative": "sys.path.append('..')",
    "elsewhere": "sys.path.append('/opt/elsewhere/code')",
    "comment_only": "# sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))",
    "string_only": "HELP = 'sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))'",
    "environment": "sys.path.append(os.environ['CODE_ROOT'])",
    "unknown_module": "sys.path.append(paths.dirname(paths.dirname(__file__)))",
    "other_list": "search = []\nsearch.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))",
}
PRELUDE = "import os\nimport os.path as osp\nimport sys\nfrom pathlib import Path\n"


def _layout(tmp_path, head: str):
    root = tmp_path / "repo"
    (root / "mypkg").mkdir(parents=True)
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "engine.py").write_text("def run():\n    return 1\n")
    (root / "tools").mkdir()
    # a project marker in the script's own folder: its roots end there, so only what the script
    # declares leads to the package (without it the folders above a folder of scripts are roots)
    (root / "tools" / "setup.cfg").write_text("")
    script = root / "tools" / "train.py"
    script.write_text(PRELUDE + textwrap.dedent(head) + "\nfrom mypkg.engine import run\n")
    return root, str(script)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_declared_root_resolves_the_sibling_package(tmp_path, name):
    root, script = _layout(tmp_path, HEADS[name])
    assert declared_roots(script) == (str(root),)
    assert project.resolve(script, "mypkg.engine", 0) == str(root / "mypkg" / "engine.py")


@pytest.mark.parametrize("name", sorted(NOT_ROOTS))
def test_no_root_from_what_is_not_a_known_folder(tmp_path, name):
    _root, script = _layout(tmp_path, NOT_ROOTS[name])
    assert declared_roots(script) == ()
    assert project.resolve(script, "mypkg.engine", 0) is None


def test_an_edit_of_the_line_changes_the_answer(tmp_path):
    root, script = _layout(tmp_path, HEADS["dirname_abspath"])
    assert project.resolve(script, "mypkg.engine", 0) is not None
    with open(script, "w") as f:  # a different size: the stat fast path sees the change
        f.write(PRELUDE + "\nfrom mypkg.engine import run\n")
    assert declared_roots(script) == ()
    assert project.resolve(script, "mypkg.engine", 0) is None


def test_an_open_document_is_read_not_the_disk(tmp_path):
    root, script = _layout(tmp_path, NOT_ROOTS["cwd_relative"])
    project.set_overlay(script, PRELUDE + HEADS["join_dotdot"] + "\n")
    try:
        assert declared_roots(script) == (str(root),)
    finally:
        project.set_overlay(script, None)
    assert declared_roots(script) == ()


def test_unparsable_file_declares_nothing(tmp_path):
    root, script = _layout(tmp_path, HEADS["dirname_abspath"])
    with open(script, "a") as f:
        f.write("def broken(:\n")
    assert declared_roots(script) == ()
    assert os.path.isdir(root)
