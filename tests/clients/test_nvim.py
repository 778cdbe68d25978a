"""A real, headless Neovim (Debian's neovim 0.7) against the ddp-lint language server.

It opens the seed's problem 2, gets DDP001 and DDP101 at the right lines, applies both quick fixes
through Neovim's own LSP edit machinery (``vim.lsp.util.apply_workspace_edit``), writes the file,
and the written file checks clean for those codes.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXAMPLES, ROOT, require_executable

HERE = Path(__file__).resolve().parent


def editor_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    for k in ("XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"):
        env[k] = str(tmp_path / "xdg" / k.lower())
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir(exist_ok=True)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def check_clean(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddp_lint", "check", "--select", "DDP001,DDP101", str(path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_neovim_headless_quick_fixes(tmp_path):
    nvim = require_executable("nvim")
    work = tmp_path / "ws"
    work.mkdir()
    target = work / "seed_problem2_invalid_usage.py"
    shutil.copyfile(EXAMPLES / "seed_problem2_invalid_usage.py", target)
    result = tmp_path / "result.txt"
    env = editor_env(tmp_path)
    env.update(DDP_FILE=str(target), DDP_PYTHON=sys.executable, DDP_RESULT=str(result))
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
