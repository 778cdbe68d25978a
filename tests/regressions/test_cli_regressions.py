"""Reproducers for CLI / file-reading bugs found by tests/reliability/test_cli_hostile.py."""
from __future__ import annotations

import os
import shutil
import threading

import pytest

from ddp_lint.cli import iter_python_files
from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.io import SourceError, decode_bytes, read_source_file
from tests.conftest import EXAMPLES


def test_fifo_in_a_folder_walk_is_skipped(tmp_path):
    """`ddp-lint check DIR` hung forever when DIR held a FIFO named *.py (open() blocks)."""
    os.mkfifo(tmp_path / "pipe.py")
    shutil.copy(EXAMPLES / "seed_problem2_invalid_usage.py", tmp_path / "p2.py")
    files, errors = iter_python_files([str(tmp_path)], Settings())
    assert [os.path.basename(f) for f in files] == ["p2.py"] and not errors
    files, errors = iter_python_files([str(tmp_path / "pipe.py")], Settings())
    assert not files and errors == [f"{tmp_path / 'pipe.py'}: not a regular file or folder"]


def test_reading_a_fifo_never_blocks(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(pytest.raises(SourceError, read_source_file, str(fifo))))
    t.start()
    t.join(10)
    assert not t.is_alive(), "read_source_file blocked on a FIFO"
    assert "not a regular file" in str(got[0].value)
    with pytest.raises(SourceError, match="is a directory"):
        read_source_file(str(tmp_path))


@pytest.mark.parametrize("data", [b"\x80abc\n", b"\xff\xfe\x00i\x00", bytes(range(256))],
                         ids=["bad-first-byte", "utf16", "all-bytes"])
def test_undecodable_first_line_says_utf8(data):
    """tokenize's 'invalid or missing encoding declaration' is now a message a user can act on."""
    with pytest.raises(SourceError, match="not valid utf-8"):
        decode_bytes(data, "x.py")


# -- issue 12: `check --fix` writes ---------------------------------------------------------------
# A fixable file: DDP001 / DDP004 have safe fixes.
FIXABLE = EXAMPLES / "seed_problem2_invalid_usage.py"


def _fixable(path, extra: str = ""):
    path.write_text(FIXABLE.read_text() + extra)
    return path


def _leftovers(folder):
    return sorted(n for n in os.listdir(folder) if "ddp-lint" in n or n.endswith(".tmp"))


def _main(*argv):
    from ddp_lint.cli import main

    return main(list(argv))


def test_fix_skips_a_file_edited_while_it_was_checked(tmp_path, monkeypatch, capsys):
    """Issue 12.4: the file was read, analysed, then replaced; a save made in between was lost."""
    import ddp_lint.analysis.engine as engine

    src = _fixable(tmp_path / "train.py")
    other = _fixable(tmp_path / "other.py")
    users_save = FIXABLE.read_text() + "# saved by the user while ddp-lint ran\n"
    real = engine.check_source
    edited = []

    def check_then_user_saves(text, path, *a, **k):
        res = real(text, path, *a, **k)
        if path.endswith("train.py") and not edited:
            edited.append(1)
            src.write_text(users_save)
        return res

    monkeypatch.setattr(engine, "check_source", check_then_user_saves)
    rc = _main("check", "--fix", str(src), str(other))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert src.read_text() == users_save  # the user's edit survives
    assert "train.py: not fixed: it changed on disk" in err and err.count("\n") == 1, err
    assert "    torch.cuda.set_device(device_id)" in other.read_text()  # the other file is still fixed
    assert _leftovers(tmp_path) == []


def test_fix_notices_a_same_size_same_mtime_edit(tmp_path, monkeypatch, capsys):
    """The content hash catches an edit that keeps the size and the mtime (and the inode)."""
    import ddp_lint.analysis.engine as engine

    src = _fixable(tmp_path / "train.py")
    real = engine.check_source
    edited = []

    def check_then_edit_in_place(text, path, *a, **k):
        res = real(text, path, *a, **k)
        if not edited:
            edited.append(1)
            st = os.stat(src)
            data = bytearray(src.read_bytes())
            data[data.index(b"rank")] = ord("R")  # same size
            with open(src, "r+b") as fh:  # same inode
                fh.write(data)
            os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
            edited.append(bytes(data))
        return res

    monkeypatch.setattr(engine, "check_source", check_then_edit_in_place)
    rc = _main("check", "--fix", str(src))
    err = capsys.readouterr().err
    assert rc == 2 and "changed on disk" in err, err
    assert src.read_bytes() == edited[1]
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("code,where", [
    ("ENOSPC", "fsync"), ("EDQUOT", "fsync"), ("EFBIG", "write"), ("EISDIR", "replace")])
def test_a_failed_fix_write_is_one_line_and_the_other_files_are_fixed(tmp_path, monkeypatch, capsys, code, where):
    """Issue 12.5: a failed write gave a traceback, stopped the other files and left a temp copy."""
    import errno

    a = _fixable(tmp_path / "a.py")
    b = _fixable(tmp_path / "b.py")
    c = _fixable(tmp_path / "c.py")
    original_b = b.read_bytes()
    num = getattr(errno, code)

    def name_of(fd):
        return os.readlink(f"/proc/self/fd/{fd}")

    if where == "fsync":
        real = os.fsync

        def fake(fd):
            if ".b.py." in name_of(fd):
                raise OSError(num, os.strerror(num))
            return real(fd)
        monkeypatch.setattr(os, "fsync", fake)
    elif where == "write":
        import io as _io
        real_write = _io.BufferedWriter.write

        class Writer(_io.BufferedWriter):
            pass

        real_fdopen = os.fdopen

        def fdopen(fd, *args, **kw):
            fh = real_fdopen(fd, *args, **kw)
            if ".b.py." in name_of(fd):
                raw = fh.detach()

                class Failing(_io.BufferedWriter):
                    def write(self, data):
                        raise OSError(num, os.strerror(num))
                return Failing(raw)
            return fh
        monkeypatch.setattr(os, "fdopen", fdopen)
        del real_write, Writer
    else:
        real_replace = os.replace

        def fake_replace(src, dst, *args, **kw):
            if str(dst).endswith("b.py"):
                raise IsADirectoryError(num, os.strerror(num))
            return real_replace(src, dst, *args, **kw)
        monkeypatch.setattr(os, "replace", fake_replace)
    rc = _main("check", "--fix", str(a), str(b), str(c))
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.splitlines() == [f"ddp-lint: error: {b}: cannot write the fix: {os.strerror(num)}"], err
    assert "Traceback" not in out + err
    assert b.read_bytes() == original_b
    assert "    torch.cuda.set_device(device_id)" in a.read_text()
    assert "    torch.cuda.set_device(device_id)" in c.read_text()
    assert _leftovers(tmp_path) == []
    assert f"{b.name}:" in out  # b's findings are still reported (its text is unchanged)


def test_fix_temp_file_never_wider_than_the_source(tmp_path, monkeypatch):
    """Issue 12.5: a 0600 source got a 0644 temporary copy (open(..., "wb") under umask 022)."""
    os.umask(0o022)
    src = _fixable(tmp_path / "secret.py")
    os.chmod(src, 0o600)
    seen = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        seen.append(("fsync", os.fstat(fd).st_mode & 0o777))
        return real_fsync(fd)

    def replace(s, d, *a, **k):
        seen.append(("replace", os.stat(s).st_mode & 0o777))
        return real_replace(s, d, *a, **k)

    def opened(path, mode="r", *a, **k):  # a temp file opened by name (as before the fix)
        fh = open(path, mode, *a, **k)
        if "w" in mode:
            seen.append(("open", os.fstat(fh.fileno()).st_mode & 0o777))
        return fh

    import ddp_lint.analysis.io as io_module

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(io_module, "open", opened, raising=False)
    assert _main("check", "--fix", "-q", str(src)) == 1
    assert seen and all(mode & ~0o600 == 0 for _, mode in seen), seen
    assert os.stat(src).st_mode & 0o777 == 0o600 and "    torch.cuda.set_device(device_id)" in src.read_text()


# -- issue 12.10 / 17.6: configuration errors ----------------------------------------------------
@pytest.mark.parametrize("toml,needle", [
    ("tool = 5\n", "`tool` must be a table"),
    ('tool = "ddp-lint"\n', "`tool` must be a table"),
    ("[tool]\nddp-lint = 5\n", "`tool.ddp-lint` must be a table"),
    ('[tool.ddp-lint]\nselect = ["DDP1"\n', ":3: invalid TOML"),
    ('[project]\nname = "x"\n[tool.ddp-lint\n', ":3:15: invalid TOML"),
])
def test_broken_pyproject_is_one_config_error_for_cli_and_server(tmp_path, toml, needle):
    from ddp_lint.analysis.config import ConfigError, load_settings
    from ddp_lint.lsp_server.settings import ProjectSettings, ServerSettings

    (tmp_path / "pyproject.toml").write_text(toml)
    sub = tmp_path / "pkg"
    sub.mkdir()
    with pytest.raises(ConfigError) as e:
        load_settings(sub)
    assert str(tmp_path / "pyproject.toml") in str(e.value) and needle in str(e.value), e.value
    # the server: defaults plus one error message naming the file, never an exception (which
    # silenced every diagnostic of the folder)
    projects = ProjectSettings()
    settings, err = projects.for_folder(str(sub), ServerSettings())
    assert err and str(tmp_path / "pyproject.toml") in err and needle in err
    assert settings.enabled_codes()  # defaults apply


def test_config_file_that_is_a_fifo_or_a_device_is_refused(tmp_path):
    """Issue 12.12: --config on a FIFO hung; on /dev/zero it died with MemoryError."""
    from ddp_lint.analysis.config import ConfigError, load_settings

    fifo = tmp_path / "pyproject.toml"
    os.mkfifo(fifo)
    got = []

    def load(p):
        try:
            load_settings(tmp_path, p)
        except ConfigError as e:
            got.append(str(e))

    for p in (fifo, "/dev/zero"):
        t = threading.Thread(target=load, args=(p,), daemon=True)
        t.start()
        t.join(10)
        assert not t.is_alive(), f"reading {p} as configuration blocked"
    assert len(got) == 2 and all("not a regular file" in g for g in got), got
    with pytest.raises(ConfigError, match="is a directory"):
        load_settings(tmp_path, tmp_path)


# -- issue 17.10: syntax of a newer Python ----------------------------------------------------------
def test_newer_python_syntax_names_the_python_it_needs():
    from ddp_lint.analysis.rules.ddp000_syntax_error import newer_python_hint

    # line 1 passes the text gate (a file no rule could fire on is not parsed: no DDP000)
    text = ("import torch  # torch.distributed init_process_group\n"
            "def first[T](xs: list[T]) -> T:\n    return xs[0]\ntype Pair = tuple[int, int]\n")
    assert "Python 3.12" in newer_python_hint(text, 2, (3, 11)) and "3.11" in newer_python_hint(text, 2, (3, 11))
    assert "Python 3.12" in newer_python_hint(text, 4, (3, 10))
    assert newer_python_hint(text, 2, (3, 12)) is None and newer_python_hint(text, 1, (3, 11)) is None
    assert "3.14" in newer_python_hint("try:\n    pass\nexcept ValueError, TypeError:\n    pass\n", 3, (3, 13))
    # PEP 701: an f-string that reuses its own quote, or holds a backslash, inside a replacement field
    assert "PEP 701" in newer_python_hint('msg = f"{cfg["name"]}: {n}"\n', 1, (3, 11))
    assert "PEP 701" in newer_python_hint("out = f'{chr(10).join(xs)}{\"\\n\".join(ys)}'\n", 1, (3, 11))
    assert newer_python_hint('msg = f"{cfg["name"]}"\n', 1, (3, 12)) is None
    assert newer_python_hint("a = f'{{x}}' + f'{y}' + 'z\\n'\n", 1, (3, 11)) is None  # valid 3.11: no hint
    import sys

    from ddp_lint.analysis.engine import check_source

    findings = check_source(text, "new.py").findings
    if sys.version_info < (3, 12):
        assert [f.code for f in findings] == ["DDP000"]
        assert "this is Python 3.12 syntax" in findings[0].message
        assert f"runs on Python {sys.version_info[0]}.{sys.version_info[1]}" in findings[0].message
    else:
        assert not [f for f in findings if f.code == "DDP000"]
