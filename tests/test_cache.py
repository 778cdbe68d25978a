"""The findings cache (analysis/cache.py) and the batch checker (analysis/batch.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ddp_lint.analysis import cache as cache_mod
from ddp_lint.analysis.batch import check_files
from ddp_lint.analysis.cache import Cache, content_digest
from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from tests.conftest import ROOT

BAD = ("import torch.distributed as dist\n"
       "dist.init_process_group('nccl')\n"
       "dist.all_gather_object([None] * 2, 1)\n")
GOOD = "import torch\nx = torch.zeros(2)\n"


@pytest.fixture(autouse=True)
def _user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DDP_LINT_CACHE_DIR", raising=False)
    monkeypatch.setattr(cache_mod, "_user_key", None)


@pytest.fixture
def tree(tmp_path):
    from bench.gen import write_tree

    root = tmp_path / "proj"
    root.mkdir()
    write_tree(root / "src", 40, seed=3)
    (root / "bad.py").write_text(BAD)
    (root / "good.py").write_text(GOOD)
    return root


def files_of(root):
    return sorted(str(p) for p in root.rglob("*.py") if ".ddp-lint-cache" not in p.parts)


def key(results):
    return [(p, sorted((f.code, f.range, f.message, f.fix) for f in fs), e) for p, fs, e in results]


def reference(files, settings):
    out = []
    for p in files:
        text = open(p, encoding="utf-8").read()
        out.append((p, check_source(text, p, settings, gate=False).findings, None))
    return key(out)


def run_cached(root, settings, files=None, jobs=1):
    c = Cache(str(root / ".ddp-lint-cache"), settings)
    res = check_files(files or files_of(root), settings, jobs, c)
    return res, c


def test_warm_run_is_identical_and_hits(tree):
    s = Settings()
    files = files_of(tree)
    ref = reference(files, s)
    cold, c1 = run_cached(tree, s, files)
    assert key(cold) == ref and c1.misses == len(files) and c1.hits == 0
    warm, c2 = run_cached(tree, s, files)
    assert key(warm) == ref and c2.hits == len(files) and c2.misses == 0
    par, _ = run_cached(tree, s, files, jobs=2)  # workers answer from the same cache
    assert key(par) == ref
    assert any(fs for _, fs, _ in warm)  # the tree has findings


def test_parallel_uncached_equals_sequential(tree):
    s = Settings(select=["ALL"])
    files = files_of(tree)
    assert key(check_files(files, s, 2, None)) == key(check_files(files, s, 1, None)) == reference(files, s)


def test_content_change_invalidates(tree):
    s = Settings()
    run_cached(tree, s)
    (tree / "good.py").write_text(BAD)
    res, c = run_cached(tree, s)
    assert c.misses == 1
    got = dict((p, fs) for p, fs, _ in res)
    assert {"DDP001", "DDP101"} <= {f.code for f in got[str(tree / "good.py")]}


def test_settings_change_invalidates(tree):
    run_cached(tree, Settings())
    res, c = run_cached(tree, Settings(select=["DDP101"]))
    assert c.hits == 0
    assert {f.code for _, fs, _ in res for f in fs} == {"DDP101"}
    res, c = run_cached(tree, Settings(severity={"DDP101": "error"}))
    assert c.hits == 0


def test_version_change_invalidates(tree, monkeypatch):
    s = Settings()
    run_cached(tree, s)
    import ddp_lint.analysis as pkg

    monkeypatch.setattr(pkg, "__version__", "999.0")
    monkeypatch.setattr(cache_mod, "_code_fp", None)
    _, c = run_cached(tree, s)
    assert c.hits == 0
    monkeypatch.undo()
    cache_mod._code_fp = None


def test_dependencies_are_validated(tmp_path):
    dep = tmp_path / "helpers.py"
    dep.write_text("def f(): pass\n")
    src = tmp_path / "a.py"
    src.write_text(BAD)
    s = Settings()
    c = Cache(str(tmp_path / ".ddp-lint-cache"), s)
    data = src.read_bytes()
    tag = cache_mod.content_tag(data, c.key)
    findings = check_source(BAD, str(src), s).findings
    c.store(str(src), tag, cache_mod.encode_findings(findings), [(str(dep), content_digest(dep.read_bytes()))])
    c.save()
    c2 = Cache(str(tmp_path / ".ddp-lint-cache"), s)
    assert c2.lookup(str(src), tag, str(src)) == findings
    # each run (a Cache) checks a dependency once: the next run sees the change
    dep.write_text("def f(): return 1\n")
    assert Cache(str(tmp_path / ".ddp-lint-cache"), s).lookup(str(src), tag, str(src)) is None
    dep.unlink()
    assert Cache(str(tmp_path / ".ddp-lint-cache"), s).lookup(str(src), tag, str(src)) is None


def test_a_test_module_added_beside_a_script_is_a_miss(tmp_path):
    # DDP007 leaves a script of a test suite alone (a ``tests`` folder with test modules): the answer
    # reads the folder's listing, a dependency of the cached result
    folder = tmp_path / "proj" / "tests"
    folder.mkdir(parents=True)
    script = folder / "two_gpu_check.py"
    script.write_text("import os\nimport torch.distributed as dist\n"
                      "dist.init_process_group('nccl', rank=int(os.environ['LOCAL_RANK']), world_size=2)\n")
    s = Settings(select=["DDP007"])
    res, _ = run_cached(tmp_path / "proj", s)
    assert [f.code for _, fs, _ in res for f in fs] == ["DDP007"]
    (folder / "test_groups.py").write_text("def test_x():\n    pass\n")
    res, c = run_cached(tmp_path / "proj", s, [str(script)])
    assert c.misses == 1 and [f.code for _, fs, _ in res for f in fs] == []
    res, c = run_cached(tmp_path / "proj", s, [str(script)])
    assert c.hits == 1 and [f.code for _, fs, _ in res for f in fs] == []
    (folder / "test_groups.py").unlink()
    res, c = run_cached(tmp_path / "proj", s, [str(script)])
    assert c.misses == 1 and [f.code for _, fs, _ in res for f in fs] == ["DDP007"]


def test_a_long_dependency_list_is_a_mask_of_one_table(tmp_path):
    """Thousands of files share one closure of imports: a pack stores each dependency once, and an
    entry with many refers to them by a bit mask; a change in any one of them is still a miss."""
    deps = []
    for i in range(100):
        p = tmp_path / f"m{i}.py"
        p.write_text(f"X = {i}\n")
        deps.append((str(p), content_digest(p.read_bytes())))
    deps.append((str(tmp_path / "absent.py"), None))
    s = Settings()
    c = Cache(str(tmp_path / ".ddp-lint-cache"), s)
    srcs = []
    for k in range(3):
        src = tmp_path / f"s{k}.py"
        src.write_text(BAD)
        tag = cache_mod.content_tag(src.read_bytes(), c.key)
        c.store(str(src), tag, cache_mod.encode_findings(check_source(BAD, str(src), s).findings), deps)
        srcs.append((src, tag))
    c.save()
    data = json.loads(open(c.pack_path, "rb").read())
    assert len(data["deps"]) == len(deps) and all(isinstance(e[3], str) for e in data["entries"].values())
    for src, tag in srcs:
        assert Cache(str(tmp_path / ".ddp-lint-cache"), s).lookup(str(src), tag, str(src)) is not None
    (tmp_path / "m57.py").write_text("X = -1\n")
    assert Cache(str(tmp_path / ".ddp-lint-cache"), s).lookup(str(srcs[0][0]), srcs[0][1], "x") is None
    (tmp_path / "m57.py").write_text("X = 57\n")
    (tmp_path / "absent.py").write_text("")
    assert Cache(str(tmp_path / ".ddp-lint-cache"), s).lookup(str(srcs[1][0]), srcs[1][1], "x") is None


def test_engine_result_has_empty_dependencies_by_default():
    # no file was read: the only dependencies are the modules the reach gates looked for and did not
    # find (DDP501's: a `fully_shard` helper module may be created next to the script later)
    deps = check_source(BAD, "a.py").dependencies
    assert all(h is None for _p, h in deps), deps
    assert check_source(BAD, "<unsaved>").dependencies == []


@pytest.mark.parametrize("garbage", [b"\x00\xff not json", b"[]", b'{"format": 1, "entries": []}',
                                     b'{"format": 1, "entries": {"%s": [1, 2, 3, 4]}}',
                                     b'{"format": 1, "entries": {"%s": ["TAG", 0, [["x"]], []]}}'])
def test_corrupted_cache_is_ignored(tree, garbage):
    s = Settings()
    files = files_of(tree)
    ref = reference(files, s)
    _, c = run_cached(tree, s, files)
    bad = str(tree / "bad.py")
    payload = garbage.replace(b"%s", bad.encode())
    if b"TAG" in payload:
        payload = payload.replace(b"TAG", c.entries.get(bad, c.updated.get(bad))[0].encode()
                                  if bad in c.entries else c.updated[bad][0].encode())
    with open(c.pack_path, "wb") as fh:
        fh.write(payload)
    res, _ = run_cached(tree, s, files)
    assert key(res) == ref


def test_shipped_cache_from_another_user_never_matches(tree, tmp_path, monkeypatch):
    s = Settings()
    run_cached(tree, s)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other-user"))
    monkeypatch.setattr(cache_mod, "_user_key", None)
    _, c = run_cached(tree, s)
    assert c.hits == 0


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_cache_folder_is_not_used(tree, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tree / ".ddp-lint-cache")
    _, c = run_cached(tree, Settings())
    assert not c.enabled and list(target.iterdir()) == []


def test_bounded_and_stale_entries_pruned(tree, monkeypatch):
    s = Settings()
    monkeypatch.setattr(cache_mod, "MAX_ENTRIES", 10)
    _, c = run_cached(tree, s)
    assert len(json.loads(open(c.pack_path, "rb").read())["entries"]) == 10
    monkeypatch.setattr(cache_mod, "MAX_ENTRIES", 100_000)
    _, c = run_cached(tree, s)
    (tree / "good.py").unlink()
    (tree / "bad.py").write_text(BAD + "# changed\n")  # a run that writes the pack prunes it
    run_cached(tree, s, [str(tree / "bad.py")])
    entries = json.loads(open(c.pack_path, "rb").read())["entries"]
    assert str(tree / "good.py") not in entries and str(tree / "bad.py") in entries


def _cli(root, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "ddp_lint", "check", *args, "."], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_runs_agree_and_leave_a_valid_cache(tree):
    ref = _cli(tree, "--no-cache").communicate(timeout=300)
    assert not (tree / ".ddp-lint-cache").exists()  # --no-cache writes nothing
    procs = [_cli(tree, "-j", "2" if i % 2 else "1") for i in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 1 for p in procs)
    assert all(o[0] == ref[0] for o in outs), "a concurrent run printed other findings"
    assert all("Traceback" not in o[1] for o in outs)
    packs = list((tree / ".ddp-lint-cache" / f"v{cache_mod.FORMAT}").iterdir())
    assert [p.name for p in packs if p.name.startswith(".tmp-")] == []
    for p in packs:
        json.loads(p.read_bytes())
    warm = _cli(tree).communicate(timeout=300)
    assert warm[0] == ref[0]
    assert (tree / ".ddp-lint-cache" / ".gitignore").read_text().strip().endswith("*")


def test_no_cache_flag_is_documented():
    r = subprocess.run([sys.executable, "-m", "ddp_lint", "check", "--help"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "--no-cache" in r.stdout and "--no-respect-gitignore" in r.stdout


def test_code_fingerprint_covers_every_analysis_subpackage():
    # a change to the flow layer (or any other subpackage the rules import) changes findings, so
    # it must invalidate the cache just like a change to a rule module
    files = {os.path.relpath(p, os.path.dirname(cache_mod.__file__)) for p in cache_mod.fingerprint_files()}
    assert os.path.join("rules", "ddp003_global_rank_as_device.py") in files
    assert os.path.join("flow", "models.py") in files
    assert "engine.py" in files
