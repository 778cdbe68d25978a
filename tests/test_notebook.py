"""Notebooks (.ipynb) in the CLI: the code cells as one module, findings in cells, fixes that edit
only cell sources (analysis/notebook.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

from ddp_lint.analysis.notebook import Notebook, NotebookError, mask_cell


def run(*args, cwd=None, input=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "ddp_lint", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, input=input, env=env)


def code(src, **extra):
    return {"cell_type": "code", "execution_count": None, "id": extra.pop("id", "c"), "metadata": {},
            "outputs": extra.pop("outputs", []), "source": src, **extra}


def write_nb(path, cells, indent=1, trailing="\n", meta=None):
    nb = {"cells": cells, "metadata": meta if meta is not None else
          {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
           "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    text = json.dumps(nb, indent=indent, ensure_ascii=False) + trailing
    path.write_text(text, encoding="utf-8")
    return text


OUTPUT = {"output_type": "stream", "name": "stdout", "text": ["héllo\n"]}

CELLS = [
    {"cell_type": "markdown", "id": "m0", "metadata": {}, "source": ["# Training\n"]},
    code(["%matplotlib inline\n", "!pip install tqdm\n", "import os\n", "import torch\n",
          "import torch.distributed as dist\n", "os.environ.setdefault('WORLD_SIZE', '1')"], id="c1",
         outputs=[OUTPUT]),
    code(["dist.init_process_group('nccl')\n", "model = torch.nn.Linear(2, 2).cuda()\n",
          "x = torch.zeros(2).cuda()\n", "dist.all_reduce(x)"], id="c2"),
    code("dist.all_gather_object([None] * 2, 1)\n", id="c3"),
]


@pytest.fixture
def nb(tmp_path):
    p = tmp_path / "train.ipynb"
    write_nb(p, CELLS)
    return p


def test_findings_name_cell_and_line(nb):
    r = run("check", "--no-cache", str(nb))
    assert r.returncode == 1, r.stderr
    # the init_process_group is line 1 of cell 3 (cells count markdown too, as in Ruff)
    assert f"{nb}:cell 3:1:1: DDP001 [*] " in r.stdout, r.stdout
    assert "line 2 of cell 3" in r.stdout  # the message's own line numbers are in cells too


def test_json_has_cell_and_cell_relative_rows(nb):
    r = run("check", "--no-cache", "--output-format", "json", str(nb))
    data = json.loads(r.stdout)
    ddp001 = next(d for d in data if d["code"] == "DDP001")
    assert ddp001["cell"] == 3
    assert ddp001["location"] == {"row": 1, "column": 1} and ddp001["noqa_row"] == 1
    assert {rel.get("cell") for rel in ddp001["related"]} == {3, 4}
    edits = ddp001["fix"]["edits"]
    assert edits[0]["cell"] == 3 and edits[0]["location"]["row"] == 2


def test_plain_files_have_null_cell(tmp_path):
    (tmp_path / "a.py").write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n"
                                   "import torch\nx = torch.zeros(1).cuda()\ndist.all_reduce(x)\n")
    data = json.loads(run("check", "--no-cache", "--output-format", "json", str(tmp_path / "a.py")).stdout)
    assert data and all(d["cell"] is None for d in data)


def test_noqa_in_a_cell(tmp_path):
    p = tmp_path / "n.ipynb"
    cells = [code(["import torch\n", "import torch.distributed as dist\n",
                   "dist.init_process_group('nccl')  # noqa: DDP001, DDP004, DDP603\n"]),
             code(["x = torch.zeros(1).cuda()\n", "dist.all_reduce(x)\n"])]
    write_nb(p, cells)
    r = run("check", "--no-cache", str(p))
    assert r.returncode == 0, r.stdout
    write_nb(p, [code(cells[0]["source"][:2] + ["dist.init_process_group('nccl')  # noqa: DDP004, DDP603\n"]), cells[1]])
    assert "DDP001" in run("check", "--no-cache", str(p)).stdout


def test_magics_are_masked_not_errors(tmp_path):
    p = tmp_path / "m.ipynb"
    write_nb(p, [code(["%%bash\n", "echo hi\n"]),
                 code(["%%time\n", "import torch\n", "files = !ls\n", "torch.zeros?\n",
                       "for i in range(2):\n", "    %time print(i)\n", "import torch.distributed as dist\n",
                       "dist.init_process_group('gloo', rank=0, world_size=1)\n", "dist.destroy_process_group()\n"])])
    r = run("check", "--no-cache", str(p))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "DDP000" not in r.stdout


def test_mask_keeps_lines_and_columns():
    src = "import torch\n%time x = 1\n  !ls\ny = 2"
    m = mask_cell(src)
    assert m.splitlines()[0] == "import torch" and m.splitlines()[3] == "y = 2"
    assert len(m.splitlines()) == 4 and m.splitlines()[2] == "  pass"
    assert mask_cell("%%bash\necho 1\n") == "\n\n"
    assert mask_cell("a = '%d' % 3\n") == "a = '%d' % 3\n"  # Python as it is: untouched
    # automagics without their % (``pip install``), only in a cell that does not parse
    assert mask_cell("pip install torch\nimport torch") == "pass\nimport torch"
    assert mask_cell("cd data\nx = 1\n") == "pass\nx = 1\n"
    assert mask_cell("pip = 3\nls = pip - 1\n") == "pip = 3\nls = pip - 1\n"


def test_syntax_error_in_a_cell_is_placed_in_it(tmp_path):
    p = tmp_path / "s.ipynb"
    write_nb(p, [code("import torch.distributed as dist\n"), code(["x = 1\n", "def f(:\n"])])
    r = run("check", "--no-cache", str(p))
    assert f"{p}:cell 2:2:" in r.stdout and "DDP000" in r.stdout, r.stdout


def test_fix_edits_only_cell_sources(nb):
    before = nb.read_text(encoding="utf-8")
    r = run("check", "--no-cache", "--fix", "--unsafe-fixes", str(nb))
    assert r.returncode == 0, r.stdout + r.stderr
    after = nb.read_text(encoding="utf-8")
    old, new = json.loads(before), json.loads(after)
    assert after.endswith("}\n") and after.startswith('{\n "cells": [\n  {')  # indent 1, newline kept
    assert "héllo" in after  # non-ASCII stays as written
    for a, b in zip(old["cells"], new["cells"]):
        assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
    assert old["metadata"] == new["metadata"] and len(old["cells"]) == len(new["cells"])
    assert new["cells"][1]["source"][:2] == ["%matplotlib inline\n", "!pip install tqdm\n"]  # magics kept
    assert "torch.cuda.set_device" in "".join(new["cells"][2]["source"])
    assert isinstance(new["cells"][3]["source"], str)  # a string source stays a string
    assert "destroy_process_group" in new["cells"][3]["source"]
    assert not [n for n in os.listdir(nb.parent) if n.endswith(".tmp")]


@pytest.mark.parametrize("indent,trailing", [(2, ""), (4, "\n")])
def test_fix_keeps_indentation_and_trailing_newline(tmp_path, indent, trailing):
    p = tmp_path / "i.ipynb"
    write_nb(p, CELLS, indent=indent, trailing=trailing)
    r = run("check", "--no-cache", "--fix", str(p))
    assert "Fixed 1 file." in r.stdout, r.stdout + r.stderr
    text = p.read_text()
    assert "destroy_process_group" in text
    assert text.endswith("}" + trailing)
    assert text.splitlines()[1].startswith(" " * indent + '"') and not text.splitlines()[1].startswith(" " * (indent + 1))


def test_fix_through_symlink_replaces_target_not_link(tmp_path, nb):
    link = tmp_path / "link.ipynb"
    link.symlink_to(nb.name)
    run("check", "--no-cache", "--fix", str(link))
    assert link.is_symlink() and "destroy_process_group" in nb.read_text()


def test_diff_shows_cells_and_writes_nothing(nb):
    before = nb.read_text()
    r = run("check", "--no-cache", "--diff", str(nb))
    assert r.returncode == 1
    assert f"--- a/{nb}:cell 4" in r.stdout and "+dist.destroy_process_group()" in r.stdout, r.stdout
    assert nb.read_text() == before


def test_full_format_shows_the_cell_lines(nb):
    r = run("check", "--no-cache", "--output-format", "full", str(nb))
    assert "1 | dist.init_process_group('nccl')" in r.stdout, r.stdout


@pytest.mark.parametrize("content,msg", [
    ("{not json", "invalid JSON"),
    ('{"cells": [], "nbformat": 3}', "nbformat 3"),
    ('[1, 2]', "no list of cells"),
    ('{"cells": [{"cell_type": "code", "source": 5}], "nbformat": 4}', "source is not text"),
])
def test_broken_notebooks_get_a_clear_message(tmp_path, content, msg):
    p = tmp_path / "bad.ipynb"
    p.write_text(content)
    for extra in ([], ["--fix"]):
        r = run("check", "--no-cache", *extra, str(p))
        assert r.returncode == 2
        assert msg in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert p.read_text() == content


def test_folder_walk_finds_notebooks_and_excludes_apply(tmp_path):
    write_nb(tmp_path / "a.ipynb", CELLS)
    (tmp_path / "skip").mkdir()
    write_nb(tmp_path / "skip" / "b.ipynb", CELLS)
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-lint]\nexclude = ["skip"]\n'
                                             '[tool.ddp-lint.per-file-ignores]\n"*.ipynb" = ["DDP004"]\n')
    r = run("check", "--no-cache", ".", cwd=tmp_path)
    assert "a.ipynb:cell 3:1:1: DDP001" in r.stdout, r.stdout
    assert "b.ipynb" not in r.stdout and "DDP004" not in r.stdout


def test_cache_keeps_cells(tmp_path):
    write_nb(tmp_path / "a.ipynb", CELLS)
    first = run("check", "--output-format", "json", ".", cwd=tmp_path).stdout
    second = run("check", "--output-format", "json", ".", cwd=tmp_path).stdout
    assert first == second and '"cell": 3' in second


def test_stdin_notebook(tmp_path):
    text = write_nb(tmp_path / "a.ipynb", CELLS)
    r = run("check", "--no-cache", "-", "--stdin-filename", "x.ipynb", input=text)
    assert "x.ipynb:cell 3:1:1: DDP001" in r.stdout, r.stdout + r.stderr


def test_non_python_kernel_has_no_code():
    nb = Notebook.parse(json.dumps({"cells": [code("dist.init_process_group('nccl')")], "nbformat": 4,
                                    "metadata": {"language_info": {"name": "R"}}}))
    assert nb.source == "" and nb.numbers == []


def test_not_a_notebook_error_type():
    with pytest.raises(NotebookError):
        Notebook.parse("[]", "x.ipynb")


# -- the notebook rules' fixtures as real notebooks ------------------------------------------------
def _notebook_fixtures():
    from tests.test_fixtures import FIXTURES

    return [pytest.param(p.parent.name, p, id=f"{p.parent.name}/{p.name}")
            for p in sorted(FIXTURES.glob("*/*.ipynb.py"))]


@pytest.mark.parametrize("code_,path", _notebook_fixtures())
def test_notebook_fixture_as_a_real_notebook(tmp_path, code_, path):
    """Each ``*.ipynb.py`` fixture, its ``# %%`` lines as cell breaks, written as a notebook (a
    markdown cell first): the same findings, each in its cell at its line there."""
    from tests.test_fixtures import EXPECT_RE

    from ddp_lint.analysis.config import Settings
    from ddp_lint.analysis.notebook import check_notebook

    cells: list[list[str]] = [[]]
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("# %%"):
            cells.append([])
        else:
            cells[-1].append(line)
    expected = sorted((k + 2, i + 1) for k, lines in enumerate(cells) for i, line in enumerate(lines)
                      if (m := EXPECT_RE.search(line)) and code_ in m.group(1).replace(" ", "").split(","))
    nb_cells = [{"cell_type": "markdown", "id": "md", "metadata": {}, "source": "# fixture"}]
    nb_cells += [code("\n".join(lines).rstrip("\n"), id=f"c{k}") for k, lines in enumerate(cells)]
    target = tmp_path / path.name[:-3]
    text = write_nb(target, nb_cells)
    findings, _, _, _ = check_notebook(text, str(target), Settings(select=[code_]))
    got = sorted((f.cell, f.range.start.line + 1) for f in findings if f.code == code_)
    if path.name.startswith("bad_"):
        assert expected and got == expected
    else:
        assert got == []


def test_rule_docs_print_for_notebook_rules():
    for c in ("DDP601", "DDP602", "DDP603"):
        r = run("rule", c)
        assert r.returncode == 0 and "## Why is this bad?" in r.stdout and f"({c})" in r.stdout


def test_notebook_rules_silent_in_scripts(tmp_path):
    from ddp_lint.analysis.config import Settings
    from ddp_lint.analysis.engine import check_source

    text = (FIXTURE_DIR / "DDP602" / "bad_spawn_notebook_target.ipynb.py").read_text()
    assert not check_source(text, str(tmp_path / "x.py"), Settings(select=["DDP602"])).findings
    assert check_source(text, str(tmp_path / "x.ipynb"), Settings(select=["DDP602"])).findings


from tests.test_fixtures import FIXTURES as FIXTURE_DIR  # noqa: E402


def test_bom_and_crlf_notebook_round_trip(tmp_path):
    p = tmp_path / "bom.ipynb"
    text = write_nb(p, CELLS)
    p.write_bytes(("\ufeff" + text.replace("\n", "\r\n")).encode("utf-8"))
    r = run("check", "--no-cache", "--fix", str(p))
    assert "Fixed 1 file." in r.stdout, r.stdout + r.stderr
    data = p.read_bytes().decode("utf-8")
    assert data.startswith("\ufeff{\r\n") and data.endswith("}\r\n") and "\n" not in data.replace("\r\n", "")
    assert "destroy_process_group" in data
