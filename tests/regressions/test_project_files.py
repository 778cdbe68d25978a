"""Issue 29 (security and reliability, round 3): the files cross-file analysis reads.

* R2: relative imports never climb above the project root; ``documents_only`` (the untrusted
  language server) reads nothing from disk.
* R3: the cache records negative dependencies: a module created later where an import looked for it
  (absent before, or shadowing the one found) invalidates the cached result.
* R6: only regular files are read, with a size cap, everywhere the checker reads: a FIFO, a device
  or a /proc file never blocks or is read, and the reason a file is skipped is said.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from ddp_lint.analysis import cache as cache_mod
from ddp_lint.analysis.config import ConfigError, Settings, load_settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import project
from ddp_lint.analysis.io import SourceError, read_regular_file
from tests.conftest import ROOT

HELPER = ("import torch.distributed as dist\n"
          "\n"
          "\n"
          "def sync_value(t):\n"
          "    dist.all_reduce(t)\n")
CLEAN_HELPER = "def sync_value(t):\n    return t\n"
TRAIN = ("import torch\n"
         "import torch.distributed as dist\n"
         "from {mod} import sync_value\n"
         "\n"
         "\n"
         "def main():\n"
         "    dist.init_process_group('gloo')\n"
         "    t = torch.ones(1)\n"
         "    if dist.get_rank() == 0:\n"
         "        sync_value(t)\n"
         "\n"
         "\n"
         "main()\n")


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DDP_LINT_CACHE_DIR", raising=False)
    monkeypatch.setattr(cache_mod, "_user_key", None)
    project.clear()
    yield
    project.clear()


def _codes(text, path, settings=None):
    return sorted(f.code for f in check_source(text, str(path), settings).findings)


def _cli(cwd, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "ddp_lint", "check", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


# -- R2: relative imports stay inside the project ------------------------------------------------
def test_relative_import_never_climbs_above_the_project_root(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text(HELPER)
    proj = tmp_path / "proj"
    (proj / "pkg" / "sub").mkdir(parents=True)
    (proj / "pyproject.toml").write_text("")
    (proj / "pkg" / "__init__.py").write_text("")
    (proj / "pkg" / "sub" / "__init__.py").write_text("")
    (proj / "shared.py").write_text(HELPER)
    here = proj / "pkg" / "sub" / "train.py"
    # inside the project: found (the project root is the top)
    assert project.resolve(str(here), "shared", 3) == str(proj / "shared.py")
    assert _codes(TRAIN.format(mod="...shared"), here) == ["DDP104"]
    # one level above the root, and as many dots as it takes to reach "/": never resolved
    assert project.resolve(str(here), "outside.secret", 4) is None
    depth = len(here.parts)
    assert project.resolve(str(here), "tmp", depth + 5) is None
    target = ".".join(outside.parts[1:]) + ".secret"
    assert (outside / "secret.py").is_file()
    assert project.resolve(str(here), target, depth + 3) is None  # from "/" down to the file
    assert _codes(TRAIN.format(mod="....outside.secret"), here) == []


def test_documents_only_reads_nothing_from_disk(tmp_path):
    (tmp_path / "secret_helper.py").write_text(HELPER)
    here = tmp_path / "train.py"
    text = TRAIN.format(mod="secret_helper")
    assert _codes(text, here) == ["DDP104"]  # trusted: the helper on disk is followed
    project.clear()
    untrusted = Settings(read_project_files=False)
    reads = []
    real = project.read_regular_file
    project.read_regular_file = lambda *a, **k: reads.append(a) or real(*a, **k)
    try:
        assert _codes(text, here, untrusted) == []
        assert not reads, reads
        # the client's own documents are the project
        project.set_overlay(str(tmp_path / "secret_helper.py"), HELPER)
        try:
            assert _codes(text, here, untrusted) == ["DDP104"]
        finally:
            project.set_overlay(str(tmp_path / "secret_helper.py"), None)
        assert not reads, reads
    finally:
        project.read_regular_file = real


# -- R3: negative dependencies -----------------------------------------------------------------------
def test_negative_dependencies_are_reported(tmp_path):
    here = tmp_path / "train.py"
    res = check_source(TRAIN.format(mod="helper"), str(here))
    deps = dict(res.dependencies)
    assert deps.get(str(tmp_path / "helper.py"), "x") is None
    assert deps.get(str(tmp_path / "helper"), "x") is None  # the folder of helper/__init__.py
    # a dotted path under a missing folder: the folder stands for everything below it
    res = check_source(TRAIN.format(mod="pkg.sub.helper"), str(here))
    assert [p for p, h in res.dependencies if h is None and "pkg" in p] == [str(tmp_path / "pkg")]


def test_a_long_lived_process_sees_a_module_created_under_a_helper(tmp_path):
    """The language server keeps the summaries of the helpers it analysed (by content): a module
    that a helper imports, created later, must clear them."""
    (tmp_path / "helper.py").write_text("from inner import sync_value\n\n\ndef outer(t):\n    sync_value(t)\n")
    here = tmp_path / "train.py"
    text = TRAIN.format(mod="helper").replace("sync_value", "outer")
    assert _codes(text, here) == []
    (tmp_path / "inner.py").write_text(HELPER)
    assert _codes(text, here) == ["DDP104"]


def test_cache_sees_a_module_created_after_a_clean_check(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(TRAIN.format(mod="helper"))
    r = _cli(tmp_path, "train.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / ".ddp-lint-cache").is_dir()
    (tmp_path / "helper.py").write_text(HELPER)  # the imported module appears: a hang now
    r = _cli(tmp_path, "train.py")
    assert r.returncode == 1 and "DDP104" in r.stdout, r.stdout + r.stderr
    assert _cli(tmp_path, "--no-cache", "train.py").stdout == r.stdout


def test_cache_sees_a_package_created_after_a_clean_check(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(TRAIN.format(mod="pkg.helper"))
    assert _cli(tmp_path, "train.py").returncode == 0
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helper.py").write_text(HELPER)
    r = _cli(tmp_path, "train.py")
    assert r.returncode == 1 and "DDP104" in r.stdout, r.stdout + r.stderr


# a script without a collective site's needle ("distributed"...): the flow rules run on it only
# when a module it imports may hold one (``flow.reach``, the second text gate)
GATED = ("import os\n"
         "import torch\n"
         "from helper_comm import sync_value\n"
         "\n"
         "\n"
         "def main(t):\n"
         "    if int(os.environ['RANK']) == 0:\n"
         "        sync_value(t)\n")


def test_cache_sees_a_module_created_after_the_gate_dropped_the_flow_rules(tmp_path):
    """The text gate (``flow.reach``) follows the imports too: a result it gated out while the
    module was missing must not outlive the module's creation."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(GATED)
    res = check_source(GATED, str(tmp_path / "train.py"))
    assert (str(tmp_path / "helper_comm.py"), None) in res.dependencies, res.dependencies  # (flow rules gated out)
    assert _cli(tmp_path, "train.py").returncode == 0
    (tmp_path / "helper_comm.py").write_text(HELPER)
    r = _cli(tmp_path, "train.py")
    assert r.returncode == 1 and "DDP104" in r.stdout, r.stdout + r.stderr


def test_the_gate_reads_nothing_from_disk_for_an_untrusted_client(tmp_path):
    (tmp_path / "helper_comm.py").write_text(HELPER)
    here = str(tmp_path / "train.py")
    assert _codes(GATED, here) == ["DDP104"]
    reads = []
    real = project.read_regular_file
    project.read_regular_file = lambda *a, **k: reads.append(a) or real(*a, **k)
    try:
        res = check_source(GATED, here, Settings(read_project_files=False))
        assert not res.findings and not [p for p, h in res.dependencies if h is not None]
        assert not reads, reads
    finally:
        project.read_regular_file = real


def test_cache_sees_a_module_that_shadows_the_one_found(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "helper.py").write_text(CLEAN_HELPER)  # found through the project root
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text(TRAIN.format(mod="helper"))
    r = _cli(tmp_path, "scripts/train.py")
    assert r.returncode == 0, r.stdout + r.stderr
    # a helper beside the script comes first on the search path
    (tmp_path / "scripts" / "helper.py").write_text(HELPER)
    r = _cli(tmp_path, "scripts/train.py")
    assert r.returncode == 1 and "DDP104" in r.stdout, r.stdout + r.stderr


def test_cache_sees_a_folder_becoming_a_package(tmp_path):
    """An ``__init__.py`` added beside the script makes the folder above it a search root."""
    (tmp_path / ".git").mkdir()
    app = tmp_path / "tools" / "app"
    app.mkdir(parents=True)
    (app / "train.py").write_text(TRAIN.format(mod="helper"))
    (tmp_path / "tools" / "helper.py").write_text(HELPER)
    assert _cli(tmp_path, "tools/app/train.py").returncode == 0
    (app / "__init__.py").write_text("")
    r = _cli(tmp_path, "tools/app/train.py")
    assert r.returncode == 1 and "DDP104" in r.stdout, r.stdout + r.stderr


def test_cache_sees_an_unparseable_module_fixed(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(TRAIN.format(mod="helper"))
    (tmp_path / "helper.py").write_text(HELPER + "def broken(:\n")
    assert _cli(tmp_path, "train.py").returncode == 0
    (tmp_path / "helper.py").write_text(HELPER)
    r = _cli(tmp_path, "train.py")
    assert r.returncode == 1 and "DDP104" in r.stdout, r.stdout + r.stderr


# -- R6: never block, never read what is not a regular file --------------------------------------
def _finishes(fn, *args, timeout=10):
    got = []
    t = threading.Thread(target=lambda: got.append(fn(*args)), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)}{args} blocked"
    return got[0]


@pytest.fixture
def specials(tmp_path):
    """A FIFO, a link to /dev/zero, a link to a /proc file and a link to the FIFO, all named like
    modules."""
    os.mkfifo(tmp_path / "fifo_mod.py")
    os.symlink("/dev/zero", tmp_path / "zero_mod.py")
    os.symlink("/proc/self/status", tmp_path / "proc_mod.py")
    os.symlink(tmp_path / "fifo_mod.py", tmp_path / "fifo_link.py")
    return [tmp_path / n for n in ("fifo_mod.py", "zero_mod.py", "proc_mod.py", "fifo_link.py")]


@pytest.mark.timeout(60)
def test_project_reader_never_blocks_nor_reads_a_device(specials):
    from ddp_lint.analysis.rules._common import _text_of

    for p in specials:
        assert _finishes(project.read, str(p)) is None, p
        assert _finishes(project.load, str(p)) is None, p
        assert _finishes(project.current_hash, str(p)) is None, p
        assert _finishes(_text_of, str(p)) is None, p


@pytest.mark.timeout(60)
def test_a_module_replaced_by_a_fifo_does_not_hang_the_next_check(tmp_path):
    """A long-lived process (the language server) re-validates the helpers it analysed before:
    one replaced by a FIFO must be skipped, not opened."""
    (tmp_path / "helper.py").write_text("from inner import sync_value\n\n\ndef outer(t):\n    sync_value(t)\n")
    (tmp_path / "inner.py").write_text(HELPER)
    here = tmp_path / "train.py"
    text = TRAIN.format(mod="helper").replace("sync_value", "outer")
    assert _codes(text, here) == ["DDP104"]
    os.unlink(tmp_path / "inner.py")
    os.mkfifo(tmp_path / "inner.py")
    assert _finishes(_codes, text, here) == []


@pytest.mark.parametrize("what", ["fifo", "zero", "proc"])
def test_the_reader_says_why(tmp_path, specials, what):
    p = {"fifo": specials[0], "zero": specials[1], "proc": specials[2]}[what]
    with pytest.raises(SourceError) as e:
        read_regular_file(p)
    assert {"fifo": "not a regular file", "zero": "not a regular file", "proc": "/proc or /sys"}[what] in str(e.value)
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(2048)
    with pytest.raises(SourceError, match="too large"):
        read_regular_file(big, limit=1024)


@pytest.mark.timeout(120)
def test_check_walk_skips_special_files_with_a_reason_and_goes_on(tmp_path, specials):
    (tmp_path / "ok.py").write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n"
                                    "dist.all_gather_object([None] * 2, 1)\n")
    r = _cli(tmp_path, "--no-cache", ".")
    out = r.stdout + r.stderr
    assert "Traceback" not in out
    assert "ok.py" in out and "DDP101" in out, out  # the rest of the walk is checked
    for name in ("fifo_mod.py", "zero_mod.py", "fifo_link.py"):
        assert f"{name}: not a regular file" in out, out
    assert "proc_mod.py: not read: a /proc or /sys file" in out, out


@pytest.mark.timeout(60)
def test_pyproject_that_is_a_kernel_file_or_too_large_is_one_config_error(tmp_path):
    os.symlink("/proc/self/status", tmp_path / "pyproject.toml")
    with pytest.raises(ConfigError, match=r"/proc or /sys file"):
        load_settings(tmp_path, tmp_path / "pyproject.toml")
    with pytest.raises(ConfigError, match=r"pyproject.toml: cannot read configuration: a /proc or /sys file"):
        load_settings(tmp_path)  # found by discovery, as `check` and the server look for it
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(64 * 1024 * 1024)
    with pytest.raises(ConfigError, match="too large"):
        load_settings(tmp_path, big)
    r = _cli(tmp_path, "--no-cache", "--config", str(big), ".")
    assert r.returncode == 2 and "too large" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.timeout(60)
def test_run_side_source_readers_never_block(specials):
    """``ddp-lint run`` reads the script (is it self-spawning, does it use object collectives) and
    the files named in the ranks' stacks or a merged report (their lines): a FIFO, a device or a
    /proc file there is not read."""
    from ddp_lint.analysis.runtime.api import self_spawning, uses_object_collectives
    from ddp_lint.analysis.runtime.findings import Sources

    for p in specials:
        assert _finishes(self_spawning, str(p)) is None, p
        assert _finishes(uses_object_collectives, str(p)) is None, p
        assert _finishes(Sources().lines, str(p)) is None, p
