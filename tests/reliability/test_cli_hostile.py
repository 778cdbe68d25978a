"""The CLI on hostile files: undecodable bytes, binary junk, NULs, BOM + CRLF round trips through
--fix, legacy encodings, FIFOs, odd file names, a closed pipe. Always a clear message and the
documented exit status (0 clean, 1 findings, 2 error); never a traceback, a hang or lost bytes."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT

P2 = EXAMPLES / "seed_problem2_invalid_usage.py"


def run(*args, cwd=None, input=None, timeout=60):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "ddp_lint", *args], capture_output=True, cwd=cwd or ROOT,
                          input=input, env=env, timeout=timeout)


def clean_error(r, *needles):
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, (r.returncode, err, r.stdout)
    assert "Traceback" not in err and "Traceback" not in r.stdout.decode("utf-8", "replace"), err
    for n in needles:
        assert n in err.lower(), err
    return err


@pytest.mark.parametrize("data,needle", [
    (b"import torch\nx = '\xff\xfe'\n", "not valid utf-8"),
    (b"\xff\xfe\x00i\x00m\x00p\x00o\x00r\x00t\x00", "utf-8"),  # UTF-16 with its BOM
    (b"\x80abc\n", "utf-8"),  # invalid on the first line, where the coding cookie would be
    (bytes(range(256)) * 8, "utf-8"),
    (b"# -*- coding: bogus-codec -*-\nx = 1\n", "bogus-codec"),
    (b"\xef\xbb\xbf# -*- coding: latin-1 -*-\nx = 1\n", "encoding"),  # a BOM contradicting the cookie
    (b"\xef\xbb\xbfx = '\xff'\n", "utf-8"),
])
def test_undecodable_files(tmp_path, data, needle):
    bad = tmp_path / "bad.py"
    bad.write_bytes(data)
    good = tmp_path / "good.py"
    shutil.copy(P2, good)
    err = clean_error(run("check", str(bad)), needle)
    assert "bad.py" in err
    # the other files of the same run are still checked and reported
    r = run("check", str(bad), str(good))
    clean_error(r, needle)
    assert b"DDP001" in r.stdout and b"DDP101" in r.stdout
    # and on stdin
    clean_error(run("check", "-", input=data), needle)


def test_nul_byte_on_disk_is_a_finding(tmp_path):
    f = tmp_path / "nul.py"
    f.write_bytes(b"import torch.distributed as dist\ndist.init_process_group()\n\x00\n")
    r = run("check", str(f))
    assert r.returncode == 1 and b"nul.py:3:1: DDP000" in r.stdout, r.stdout


def test_fix_keeps_bom_crlf_and_every_other_byte(tmp_path):
    src = P2.read_bytes().replace(b"\n", b"\r\n")
    f = tmp_path / "p2.py"
    f.write_bytes(b"\xef\xbb\xbf" + src)
    os.chmod(f, 0o640)
    r = run("check", "--fix", "--unsafe-fixes", str(f))
    assert r.returncode in (0, 1), r.stderr
    out = f.read_bytes()
    assert out.startswith(b"\xef\xbb\xbf") and not out.startswith(b"\xef\xbb\xbf\xef\xbb\xbf")
    assert b"\n" not in out.replace(b"\r\n", b""), "a bare LF was introduced"
    assert b"set_device" in out
    # only inserted/replaced lines differ: every original line is still there, in order
    old_lines = src.split(b"\r\n")
    new_lines = out[3:].split(b"\r\n")
    it = iter(new_lines)
    missing = [ln for ln in old_lines if "gather_objects]" not in ln.decode() and not any(ln == n for n in it)]
    assert not missing, missing
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o640
    assert not list(tmp_path.glob(".*tmp")), "temporary file left behind"


def test_fix_keeps_a_legacy_encoding(tmp_path):
    text = "# -*- coding: latin-1 -*-\n# café\n" + P2.read_text(encoding="utf-8")
    f = tmp_path / "lat.py"
    f.write_bytes(text.encode("latin-1"))
    r = run("check", "--fix", str(f))
    assert r.returncode in (0, 1), r.stderr
    out = f.read_bytes()
    assert b"caf\xe9" in out and b"set_device" in out
    out.decode("latin-1")


def test_fifo_does_not_hang(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    clean_error(run("check", str(fifo), timeout=30), "not a regular file")
    # inside a folder walk it is skipped, never opened
    shutil.copy(P2, tmp_path / "p2.py")
    r = run("check", str(tmp_path), timeout=30)
    assert r.returncode == 1 and b"DDP001" in r.stdout and b"Traceback" not in r.stderr
    # and the reader itself refuses it without blocking (the language server reads files too)
    from ddp_lint.analysis.io import SourceError, read_source_file

    with pytest.raises(SourceError, match="not a regular file"):
        read_source_file(str(fifo))


@pytest.mark.parametrize("name", ["with space.py", "quote'\"s.py", "$(touch PWNED).py", "`touch PWNED`.py",
                                  "-leading-dash.py", "semi;colon&amp|pipe.py", "ünïcødé 中文.py", "new\nline.py"])
def test_odd_file_names(tmp_path, name):
    f = tmp_path / name
    shutil.copy(P2, f)
    args = ["check", "--output-format", "json", "--", name] if name.startswith("-") else \
        ["check", "--output-format", "json", name]
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    import json

    got = json.loads(r.stdout)
    assert {g["code"] for g in got} >= {"DDP001", "DDP101"}
    assert all(g["filename"].endswith(name) for g in got)
    assert not (tmp_path / "PWNED").exists()
    r = run("check", "--fix", "--", name, cwd=tmp_path)
    assert r.returncode in (0, 1) and b"get_world_size()" in f.read_bytes(), r.stderr
    assert not (tmp_path / "PWNED").exists()


def test_closed_stdout_pipe(tmp_path):
    for i in range(200):
        shutil.copy(P2, tmp_path / f"f{i}.py")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "ddp_lint", "check", str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    p.stdout.readline()
    p.stdout.close()  # like `ddp-lint check . | head -1`
    _, err = p.communicate(timeout=60)
    assert b"Traceback" not in err, err.decode()
    assert p.returncode in (1, 2, 120, -13)


def test_unknown_rule_and_bad_flags():
    r = run("rule", "DDP99999")
    clean_error(r, "unknown rule")
    r = run("check", "--select", "\x1b[31mRED", str(P2))
    clean_error(r)


# -- issue 12: --fix writes -------------------------------------------------------------------------
FIXED_LINE = "    torch.cuda.set_device(device_id)"


def test_fix_never_writes_through_a_planted_temp_symlink(tmp_path):
    """Issue 12.1: the fixed text went to `.<name>.ddp-lint.tmp` opened with open(..., "wb"), which
    follows a symlink a cloned repository ships there (to ~/.bashrc, or a usercustomize.py)."""
    repo, home = tmp_path / "repo", tmp_path / "home"
    repo.mkdir(), home.mkdir()
    victim = home / ".bashrc"
    victim.write_text("# the user's shell setup\n")
    shutil.copy(P2, repo / "train.py")
    for name in (".train.py.ddp-lint.tmp", ".train.py.tmp", "train.py.tmp"):
        os.symlink(victim, repo / name)
    r = run("check", "--fix", "train.py", cwd=repo)
    assert r.returncode == 1, r.stderr
    assert victim.read_text() == "# the user's shell setup\n"
    assert not (repo / "train.py").is_symlink() and FIXED_LINE in (repo / "train.py").read_text()
    assert sorted(os.listdir(repo)) == sorted([".train.py.ddp-lint.tmp", ".train.py.tmp", "train.py", "train.py.tmp"])


def test_fix_on_a_symlinked_source_fixes_the_target_and_keeps_the_link(tmp_path):
    """Issue 12.1: os.replace(tmp, "link.py") turned the link into a regular file."""
    real = tmp_path / "real"
    real.mkdir()
    shutil.copy(P2, real / "target.py")
    os.symlink("real/target.py", tmp_path / "link.py")
    r = run("check", "--fix", "link.py", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert os.path.islink(tmp_path / "link.py") and os.readlink(tmp_path / "link.py") == "real/target.py"
    assert FIXED_LINE in (real / "target.py").read_text()
    assert sorted(os.listdir(real)) == ["target.py"]


def test_fix_past_the_file_size_limit_is_one_line_per_file(tmp_path):
    """Issue 12.5, a real EFBIG: with RLIMIT_FSIZE below one file's size, that file's write fails;
    one line names it, the other file is fixed, nothing is left behind, no traceback."""
    import resource
    import signal

    small = tmp_path / "small.py"
    big = tmp_path / "big.py"
    shutil.copy(P2, small)
    big.write_text(P2.read_text() + "# padding\n" * 20_000)  # ~200 KB
    original_big = big.read_bytes()
    limit = 64 * 1024

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-m", "ddp_lint", "check", "--fix", "big.py", "small.py"],
                       capture_output=True, cwd=tmp_path, env=env, timeout=60, preexec_fn=limit_file_size)
    err = r.stderr.decode()
    assert r.returncode == 2, (err, r.stdout)
    assert err.splitlines() == ["ddp-lint: error: big.py: cannot write the fix: File too large"], err
    assert "Traceback" not in err + r.stdout.decode()
    assert big.read_bytes() == original_big
    assert FIXED_LINE in small.read_text()
    assert sorted(os.listdir(tmp_path)) == ["big.py", "small.py"]


# -- issue 12.10 / 12.12 / 17.6: configuration ------------------------------------------------------
@pytest.mark.parametrize("toml,needle", [
    ("tool = 5\n", "`tool` must be a table"),
    ('tool = "ddp-lint"\n', "`tool` must be a table"),
    ('[tool.ddp-lint]\nselect = [\n', "pyproject.toml:3: invalid toml"),
    ('[tool.ddp-lint]\nselect = ["DDP1"]\nignore = [DDP101]\n', "pyproject.toml:3:11: invalid toml"),
])
def test_broken_pyproject_exits_2_naming_the_file(tmp_path, toml, needle):
    (tmp_path / "pyproject.toml").write_text(toml)
    shutil.copy(P2, tmp_path / "p2.py")
    r = run("check", "p2.py", cwd=tmp_path)
    clean_error(r, needle.lower(), str(tmp_path / "pyproject.toml").lower())
    assert r.stdout == b""


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "folder"])
def test_config_on_a_fifo_or_device_does_not_hang(tmp_path, kind):
    """Issue 12.12: `check --config FIFO` hung; `--config /dev/zero` died with MemoryError."""
    if kind == "fifo":
        cfg = tmp_path / "ddp-lint.toml"
        os.mkfifo(cfg)
    elif kind == "folder":
        cfg = tmp_path
    else:
        cfg = kind
    shutil.copy(P2, tmp_path / "p2.py")
    r = run("check", "--config", str(cfg), "p2.py", cwd=tmp_path, timeout=20)
    clean_error(r, "cannot read configuration")
