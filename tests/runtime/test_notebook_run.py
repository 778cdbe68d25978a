"""``ddp-lint run NOTEBOOK.ipynb``: the code cells run as a script, findings come back in cells."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, require_torch


def code(src):
    return {"cell_type": "code", "execution_count": None, "id": "c", "metadata": {}, "outputs": [], "source": src}


def write(path, cells):
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n")


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ddp_lint", "run", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=240)


def test_rank_exception_maps_to_cell_and_line(tmp_path):
    require_torch()
    nb = tmp_path / "train.ipynb"
    # a helper module beside the notebook: the exported script imports it as the kernel would
    (tmp_path / "helpers.py").write_text("def failing_rank():\n    return 1\n")
    write(nb, [code("%matplotlib inline\n!nvidia-smi\nimport torch\nimport torch.distributed as dist\n"
                    "from helpers import failing_rank"),
               {"cell_type": "markdown", "id": "m", "metadata": {}, "source": "notes"},
               code("dist.init_process_group('gloo')\nrank = dist.get_rank()"),
               code("if rank == failing_rank():\n    raise RuntimeError('boom')\ndist.barrier()\n"
                    "dist.destroy_process_group()")])
    before = nb.read_text()
    r = run("train.ipynb", "--nproc", "2", "--timeout", "30", "--output-format", "json", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(r.stdout)
    f = next(d for d in data if d["code"] == "DDP901")
    assert f["filename"].endswith("train.ipynb") and f["cell"] == 4 and f["location"]["row"] == 2, f
    assert f["related"][0]["cell"] == 4 and f["related"][0]["location"]["row"] == 3
    assert "ddp-lint-run" not in r.stdout and "line 3 of cell 4" in f["message"], f["message"]
    assert nb.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["__pycache__", "helpers.py", "train.ipynb"] or \
        sorted(os.listdir(tmp_path)) == ["helpers.py", "train.ipynb"]  # the exported script is gone
    t = run("train.ipynb", "--nproc", "2", "--timeout", "30", cwd=tmp_path)
    assert "train.ipynb:cell 4:2:5: DDP901" in t.stdout, t.stdout
    assert "rank 1: RuntimeError at train.ipynb:cell 4:2" in t.stdout, t.stdout
    assert "ddp-lint-run" not in t.stdout  # the exported script's name never shows


@pytest.mark.parametrize("content,msg", [("{oops", "invalid JSON"),
                                         ('{"cells": [], "nbformat": 4}', "no Python code cells")])
def test_bad_notebook_is_a_clear_error(tmp_path, content, msg):
    (tmp_path / "bad.ipynb").write_text(content)
    r = run("bad.ipynb", cwd=tmp_path)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
