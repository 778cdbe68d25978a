"""Emacs 28 (batch) + eglot 1.9 (Debian's emacs-nox, elpa-eglot) against the ddp-lint server,
configured by the eglot snippet copied verbatim out of docs/editors.md: the same scenario as the
Neovim test, through eglot's own edit machinery."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from test_nvim import check_clean, editor_env

from tests.clients.snippets import snippet
from tests.conftest import EXAMPLES, require, require_executable

HERE = Path(__file__).resolve().parent


def test_emacs_eglot_quick_fixes(tmp_path):
    emacs = require_executable("emacs")
    require(any(Path("/usr/share/emacs/site-lisp/elpa").glob("eglot-*")), "elpa-eglot is not installed")
    work = tmp_path / "ws"
    work.mkdir()
    target = work / "seed_problem2_invalid_usage.py"
    shutil.copyfile(EXAMPLES / "seed_problem2_invalid_usage.py", target)
    result = tmp_path / "result.txt"
    env = editor_env(tmp_path)
    init = tmp_path / "init.el"
    init.write_text(snippet("emacs-eglot"), encoding="utf-8")
    env.update(DDP_FILE=str(target), DDP_SNIPPET=str(init), DDP_RESULT=str(result))
    proc = subprocess.run([emacs, "--batch", "-Q", "-l", str(HERE / "eglot_ddp.el")], env=env, cwd=work,
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    log = result.read_text() if result.exists() else ""
    assert proc.returncode == 0, f"emacs failed ({proc.returncode}):\n{log}\nstderr:\n{proc.stderr[-3000:]}"
    got = dict(line.split(" ", 1) for line in log.splitlines() if " " in line)
    assert got.get("PASS") == "yes", log
    # 1-based line:column as Emacs shows them
    assert got["DDP001"].startswith("28:4 eglot-error"), log
    assert got["DDP101"].startswith("32:13 eglot-error"), log
    text = target.read_text(encoding="utf-8")
    assert "    torch.cuda.set_device(device_id)\n" in text
    assert "output = [None for _ in range(dist.get_world_size())]" in text
    r = check_clean(target)
    assert r.returncode == 0, r.stdout + r.stderr
