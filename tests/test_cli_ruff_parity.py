"""Issue 30 (a Ruff user's first hour, round 2) and issue 29 R10/R12: the flags, configuration files
and summaries a Ruff user expects, each with Ruff's meaning. docs/ruff-parity.md is the table."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT

P1 = "seed_problem1_hang.py"
P2 = "seed_problem2_invalid_usage.py"


def run(*args, cwd, input=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DDP_LINT_CACHE_DIR", None)
    return subprocess.run([sys.executable, "-m", "ddp_lint", *args], capture_output=True, text=True,
                          cwd=cwd, input=input, env=env)


def codes(stdout: str) -> set[str]:
    return {line.split(": ")[1].split()[0] for line in stdout.splitlines() if line.count(":") >= 3
            and line.split(": ")[1][:3] == "DDP"}


@pytest.fixture
def work(tmp_path):
    for n in (P1, P2):
        shutil.copy(EXAMPLES / n, tmp_path / n)
    return tmp_path


# -- 1. repeated flags accumulate --------------------------------------------------------------
def test_repeated_select_ignore_extend_select_accumulate(work):
    r = run("check", "--no-cache", "--select", "DDP001", "--select", "DDP101", P2, cwd=work)
    assert codes(r.stdout) == {"DDP001", "DDP101"}, r.stdout
    r = run("check", "--no-cache", "--ignore", "DDP001", "--ignore", "DDP004,DDP103", P2, cwd=work)
    assert codes(r.stdout) == {"DDP101"}, r.stdout
    r = run("check", "--no-cache", "--select", "DDP103", "--extend-select", "DDP001",
            "--extend-select", "DDP101", P2, cwd=work)
    assert codes(r.stdout) == {"DDP001", "DDP101", "DDP103"}, r.stdout


# -- 2. ddp-lint.toml / .ddp-lint.toml discovery, Ruff's precedence ------------------------------
def test_ddp_lint_toml_discovery_and_precedence(work):
    (work / "pyproject.toml").write_text('[tool.ddp-lint]\nignore = ["DDP001", "DDP004", "DDP103"]\n')
    r = run("check", "--no-cache", P2, cwd=work)
    assert codes(r.stdout) == {"DDP101"}
    # ddp-lint.toml (keys at top level) wins over pyproject.toml in the same folder
    (work / "ddp-lint.toml").write_text('ignore = ["DDP101", "DDP004", "DDP103"]\n')
    r = run("check", "--no-cache", P2, cwd=work)
    assert codes(r.stdout) == {"DDP001"}, r.stdout + r.stderr
    # .ddp-lint.toml wins over ddp-lint.toml
    (work / ".ddp-lint.toml").write_text('select = ["DDP103"]\n')
    r = run("check", "--no-cache", P2, cwd=work)
    assert codes(r.stdout) == {"DDP103"}, r.stdout + r.stderr
    # the nearest folder with a configuration decides: a pyproject.toml with [tool.ddp-lint] in a
    # subfolder wins over the parent's .ddp-lint.toml; one without the table does not count
    sub = work / "sub"
    sub.mkdir()
    shutil.copy(work / P2, sub / P2)
    (sub / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert codes(run("check", "--no-cache", f"sub/{P2}", cwd=work).stdout) == {"DDP103"}
    (sub / "pyproject.toml").write_text('[tool.ddp-lint]\nselect = ["DDP101"]\n')
    assert codes(run("check", "--no-cache", f"sub/{P2}", cwd=work).stdout) == {"DDP101"}
    # a broken ddp-lint.toml is a configuration error naming the file
    (work / ".ddp-lint.toml").write_text('select = ["NOPE"]\n')
    r = run("check", "--no-cache", P2, cwd=work)
    assert r.returncode == 2 and ".ddp-lint.toml" in r.stderr and "NOPE" in r.stderr


# -- issue 29 R10: discovery never climbs into a world-writable folder of another user -----------
def test_discovery_stops_below_world_writable_folder_of_another_user(tmp_path, monkeypatch, capsys):
    from ddp_lint.analysis.config import find_config, load_settings
    from ddp_lint.cli import main

    shared = tmp_path / "shared"
    proj = shared / "proj"
    proj.mkdir(parents=True)
    shutil.copy(EXAMPLES / P2, proj / P2)
    # another user planted a configuration that silences every rule
    (shared / "pyproject.toml").write_text('[tool.ddp-lint]\nignore = ["ALL"]\n')
    assert find_config(proj) == shared / "pyproject.toml"  # owned by us: it is obeyed
    os.chmod(shared, 0o1777)
    owner = os.stat(shared).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # we are now "another user"
    warns: list[str] = []
    assert find_config(proj, warns) is None
    assert len(warns) == 1 and "world-writable" in warns[0] and str(shared / "pyproject.toml") in warns[0]
    assert load_settings(proj).enabled_codes() >= {"DDP001", "DDP101"}
    monkeypatch.chdir(proj)
    rc = main(["check", "--no-cache", P2])
    out, err = capsys.readouterr()
    assert rc == 1 and "DDP001" in out, out + err
    assert "warning: ignoring" in err and "world-writable" in err
    # a ddp-lint.toml planted there is ignored the same way
    (shared / "pyproject.toml").unlink()
    (shared / "ddp-lint.toml").write_text('ignore = ["ALL"]\n')
    assert find_config(proj, warns) is None and "ddp-lint.toml" in warns[-1]
    # the user's own configuration inside the project still counts, and nothing is warned
    (proj / "ddp-lint.toml").write_text('select = ["DDP101"]\n')
    warns.clear()
    assert find_config(proj, warns) == proj / "ddp-lint.toml" and warns == []


# -- issue 29 R12: ALL in ignore and per-file-ignores ---------------------------------------------
def test_ignore_all_and_per_file_ignores_all(work):
    (work / "pyproject.toml").write_text('[tool.ddp-lint]\nignore = ["ALL"]\n')
    r = run("check", "--no-cache", ".", cwd=work)
    assert r.returncode == 0 and codes(r.stdout) == set(), r.stdout
    # extend-select on top of ignore = ALL turns codes back on, as in Ruff
    r = run("check", "--no-cache", "--extend-select", "DDP101", ".", cwd=work)
    assert codes(r.stdout) == {"DDP101"}, r.stdout
    (work / "pyproject.toml").write_text(f'[tool.ddp-lint]\nper-file-ignores = {{"{P1}" = ["ALL"]}}\n')
    r = run("check", "--no-cache", ".", cwd=work)
    assert r.returncode == 1 and P2 in r.stdout and P1 not in r.stdout, r.stdout
    r = run("check", "--no-cache", "--ignore", "ALL", ".", cwd=work)
    assert r.returncode == 0 and codes(r.stdout) == set()


# -- 3. flags and keys ---------------------------------------------------------------------------
def test_statistics(work):
    r = run("check", "--no-cache", "--statistics", ".", cwd=work)
    assert r.returncode == 1
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    got = {row[1].strip(): (int(row[0]), row[2]) for row in rows}
    assert got["DDP001"] == (2, "[*] nccl-without-set-device")
    assert got["DDP101"] == (1, "[*] gather-list-size")
    assert got["DDP103"] == (1, "rank-indexes-fixed-list")
    r = run("check", "--no-cache", "--statistics", "--output-format", "json", ".", cwd=work)
    data = {d["code"]: d for d in json.loads(r.stdout)}
    assert data["DDP001"] == {"code": "DDP001", "name": "nccl-without-set-device", "count": 2, "fixable": True}


def test_output_file(work):
    r = run("check", "--no-cache", "--output-format", "json", "--output-file", "out.json", ".", cwd=work)
    assert r.returncode == 1 and r.stdout == ""
    assert {d["code"] for d in json.loads((work / "out.json").read_text())} >= {"DDP001", "DDP101"}
    # never written through a symlink
    victim = work / "victim.txt"
    victim.write_text("keep")
    os.symlink(victim, work / "link.txt")
    r = run("check", "--no-cache", "-o", "link.txt", ".", cwd=work)
    assert r.returncode == 2 and "symbolic link" in r.stderr and victim.read_text() == "keep"


def test_exclude_and_extend_exclude_on_the_command_line(work):
    (work / "pyproject.toml").write_text(f'[tool.ddp-lint]\nextend-exclude = ["{P1}"]\n')
    r = run("check", "--no-cache", "--show-files", ".", cwd=work)
    assert r.stdout.split() == [P2]
    r = run("check", "--no-cache", "--extend-exclude", "seed_problem2*", ".", cwd=work)
    assert r.returncode == 0 and P1 not in r.stdout and P2 not in r.stdout
    # --exclude replaces the configured exclusions
    r = run("check", "--no-cache", "--show-files", "--exclude", "nothing_*", ".", cwd=work)
    assert sorted(r.stdout.split()) == [P1, P2]


def test_show_settings_and_show_files(work):
    (work / "ddp-lint.toml").write_text('select = ["DDP1"]\noutput-format = "full"\n')
    r = run("check", "--show-settings", ".", cwd=work)
    assert r.returncode == 0
    assert "ddp-lint.toml" in r.stdout and "output-format: full" in r.stdout
    assert "DDP101" in r.stdout and "DDP001," not in r.stdout
    r = run("check", "--show-files", ".", cwd=work)
    assert r.returncode == 0 and sorted(r.stdout.split()) == [P1, P2]


def test_add_noqa(work):
    r = run("check", "--no-cache", "--add-noqa", ".", cwd=work)
    assert r.returncode == 0 and "Added 6 noqa directives." in r.stderr, r.stderr
    assert "dist.init_process_group(\"nccl\")  # noqa: DDP001, DDP004" in (work / P1).read_text()
    r = run("check", "--no-cache", ".", cwd=work)
    assert r.returncode == 0 and "All checks passed!" in r.stdout, r.stdout
    r = run("check", "--no-cache", "--add-noqa", ".", cwd=work)
    assert "Added 0 noqa directives." in r.stderr


def test_config_key_value_override(work):
    (work / "pyproject.toml").write_text('[tool.ddp-lint]\nselect = ["DDP001"]\n')
    r = run("check", "--no-cache", "--config", 'select = ["DDP101"]', P2, cwd=work)
    assert codes(r.stdout) == {"DDP101"}, r.stdout + r.stderr
    r = run("check", "--no-cache", "--config", 'select = ["DDP101"]', "--config", 'extend-select = ["DDP103"]',
            P2, cwd=work)
    assert codes(r.stdout) == {"DDP101", "DDP103"}
    r = run("check", "--no-cache", "--config", 'select = "oops', P2, cwd=work)
    assert r.returncode == 2 and "KEY = VALUE" in r.stderr and "Traceback" not in r.stderr
    r = run("check", "--no-cache", "--config", "bogus-key = 1", P2, cwd=work)
    assert r.returncode == 2 and "bogus-key" in r.stderr


def test_cache_dir(work, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cachehere") / "c"
    r = run("check", "--cache-dir", str(cache), ".", cwd=work)
    assert r.returncode == 1
    assert cache.is_dir() and any(cache.iterdir())
    assert not (work / ".ddp-lint-cache").exists()


def test_output_format_config_key(work):
    (work / "ddp-lint.toml").write_text('output-format = "json"\n')
    r = run("check", "--no-cache", P2, cwd=work)
    assert {d["code"] for d in json.loads(r.stdout)} >= {"DDP001"}
    r = run("check", "--no-cache", "--output-format", "concise", P2, cwd=work)  # the flag wins
    assert r.stdout.startswith(P2)
    (work / "ddp-lint.toml").write_text('output-format = "xml"\n')
    r = run("check", "--no-cache", P2, cwd=work)
    assert r.returncode == 2 and "output-format" in r.stderr


def test_fix_and_diff_summaries_as_ruff(work):
    r = run("check", "--no-cache", "--diff", P2, cwd=work)
    assert r.returncode == 1 and "Would fix 3 errors." in r.stderr, r.stderr
    r = run("check", "--no-cache", "--fix", P2, cwd=work)
    assert r.returncode == 1 and "Found 4 errors (3 fixed, 1 remaining)." in r.stdout, r.stdout
    r = run("check", "--no-cache", "--fix", "--select", "DDP001", P1, cwd=work)
    assert r.returncode == 0 and "Found 1 error (1 fixed, 0 remaining)." in r.stdout, r.stdout


def test_empty_selection_warns(work):
    (work / "empty").mkdir()
    r = run("check", "--no-cache", "empty", cwd=work)
    assert r.returncode == 0 and "warning: no Python files found" in r.stderr


def test_exit_zero_and_quiet(work):
    r = run("check", "--no-cache", "--exit-zero", "-q", P2, cwd=work)
    assert r.returncode == 0 and "DDP001" in r.stdout and "Found" not in r.stdout, r.stdout


# -- 5. an unknown flag of check prints check's usage --------------------------------------------
def test_unknown_check_flag_prints_check_usage(work):
    r = run("check", "--bogus", ".", cwd=work)
    assert r.returncode == 2
    assert r.stderr.startswith("usage: ddp-lint check ") and "unrecognized arguments: --bogus" in r.stderr
    r = run("rule", "--bogus", cwd=work)
    assert r.returncode == 2 and r.stderr.startswith("usage: ddp-lint rule ")


# -- 6. pre-commit: the README's rev exists (tests/test_pre_commit.py runs the snippet, with --long) --
def test_readme_pre_commit_rev_is_a_ref_upstream_has():
    """The README's rev names the branch upstream has (the old `v0.1.0` named a tag that never
    existed, so pre-commit could not check the hook out)."""
    from tests.test_pre_commit import readme_snippet

    rev = re.search(r"^\s*rev:\s*(\S+)", readme_snippet(), re.M).group(1)
    assert rev == "main", f"README's rev {rev!r}: pre-commit could not check it out"


# -- 8. --version names the traversal ------------------------------------------------------------
def test_version_names_the_traversal(monkeypatch, capsys):
    from ddp_lint.analysis import semantic
    from ddp_lint.cli import main, traversal_name

    r = run("--version", cwd=ROOT)
    expect = "C extension" if getattr(semantic, "_speedups", None) is not None else "pure Python"
    assert r.returncode == 0 and r.stdout.strip().endswith(f"({expect} traversal)"), r.stdout
    monkeypatch.setattr(semantic, "_speedups", None, raising=False)
    assert traversal_name() == "pure Python"
    assert main(["--version"]) == 0 and "(pure Python traversal)" in capsys.readouterr().out
    monkeypatch.setattr(semantic, "_speedups", object(), raising=False)
    assert traversal_name() == "C extension"
    monkeypatch.delattr(semantic, "_speedups", raising=False)  # no extension at all: no attribute
    assert traversal_name() == "pure Python"
