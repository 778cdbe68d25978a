"""``ddp-lint explain`` on REAL Flight Recorder dumps (issue 27): tests/runtime/fr_jobs/proj run on
2 gloo ranks of torch 2.13 (which records gloo), for a mismatch, a rank that skips a collective, a
rank that exits early (under torchrun, whose root-cause summary is an artefact too) and a hang in
a helper of another file. Every rank dumps on demand (no watchdog timeout is waited for).

The job runs in ``<tmp>/<scenario>/job/proj`` (the "cluster"), which is deleted before explain
runs against a copy of the project elsewhere (the checkout): every line goes through the path
remapping. One module fixture starts the four jobs at once (~60 s on a busy 2-core machine).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_torch
from tests.runtime.fr_jobs.make import PROJ, make_jobs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.torch


def line_of(path: Path, needle: str) -> int:
    hits = [i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    require_torch()
    base = tmp_path_factory.mktemp("frjobs")
    made = make_jobs(base)
    checkout = base / "checkout"
    shutil.copytree(PROJ, checkout / "proj", ignore=shutil.ignore_patterns("__pycache__"))
    for sc, (dumps, proj, _log) in made.items():
        shutil.rmtree(proj.parent)  # the cluster's paths no longer exist here
    return base, checkout, {sc: v[0] for sc, v in made.items()}


def explain(checkout: Path, *args) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "ddp_lint", "explain", *map(str, args)], cwd=checkout,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return p.returncode, p.stdout, p.stderr


def run_json(checkout, dumps, *extra):
    rc, out, err = explain(checkout, dumps, "--output-format", "json", *extra)
    assert "Traceback" not in err, err
    return rc, json.loads(out), err


def test_dumps_are_real(jobs):
    _, _, dumps = jobs
    from analysis.runtime.frdump import read_dump

    for sc, d in dumps.items():
        files = sorted(p.name for p in d.iterdir() if p.name.startswith("trace_rank_"))
        assert files == (["trace_rank_0"] if sc == "exit" else ["trace_rank_0", "trace_rank_1"]), (sc, files)
        dump = read_dump(str(d / "trace_rank_0"))
        assert dump.version == "2.10" and dump.entries[0].backend == "gloo"


def test_mismatch(jobs):
    _, checkout, dumps = jobs
    rc, fs, _ = run_json(checkout, dumps["mismatch"])
    assert rc == 1 and [f["code"] for f in fs] == ["DDP902"]
    f = fs[0]
    train = checkout / "proj" / "train.py"
    assert f["filename"] == str(train) and f["location"]["row"] == line_of(train, "work = dist.all_reduce(t, async_op=True)")
    assert f["ranks"] == [0, 1] and "[4]" in f["message"] and "[2, 2]" in f["message"]
    assert f["details"]["collective_seq_id"] == 2


def test_skip(jobs):
    _, checkout, dumps = jobs
    rc, fs, _ = run_json(checkout, dumps["skip"])
    assert [f["code"] for f in fs] == ["DDP902"]
    f = fs[0]
    train = checkout / "proj" / "train.py"
    assert f["details"]["kind"] == "skip" and f["message"].startswith("rank 1 skipped all_reduce()")
    assert f["location"]["row"] == line_of(train, "dist.all_reduce(torch.ones(3)")  # the one rank 1 skipped
    assert [r["location"]["row"] for r in f["related"]][0] == line_of(train, "dist.broadcast(torch.ones(2)")


def test_exit_early(jobs):
    _, checkout, dumps = jobs
    rc, fs, _ = run_json(checkout, dumps["exit"])
    assert [f["code"] for f in fs] == ["DDP904"], fs
    f = fs[0]
    train = checkout / "proj" / "train.py"
    assert f["ranks"] == [1] and f["details"]["exit_code"] == 3
    assert f["location"]["row"] == line_of(train, "dist.all_reduce(torch.ones(6)")  # where rank 0 waits for it


def test_hang_in_helper_of_another_file(jobs):
    _, checkout, dumps = jobs
    rc, out, err = explain(checkout, dumps["hang"])
    assert rc == 1 and "Traceback" not in err
    helpers, train = checkout / "proj" / "helpers.py", checkout / "proj" / "train.py"
    rc, fs, _ = run_json(checkout, dumps["hang"])
    assert [f["code"] for f in fs] == ["DDP903"]
    f = fs[0]
    assert f["filename"] == str(helpers) and f["location"]["row"] == line_of(helpers, "dist.all_reduce(t)")
    assert f["ranks"] == [0, 1] and f["details"]["culprits"] == [1]
    rel = {(Path(r["filename"]).name, r["location"]["row"]) for r in f["related"]}
    assert ("train.py", line_of(train, "helpers.average(torch.ones(7))")) in rel  # rank 0's caller
    # per rank: rank 0 pending in the helper, rank 1 never enqueued it
    assert "rank 0: last completed all_reduce() at proj/helpers.py" in out
    assert "rank 1: last completed" in out and "never enqueued collective #2" in out


def test_path_map_overrides_and_unmapped_note(jobs, tmp_path):
    base, checkout, dumps = jobs
    other = tmp_path / "elsewhere"
    shutil.copytree(PROJ, other, ignore=shutil.ignore_patterns("__pycache__"))
    cluster = str(base / "hang" / "job" / "proj")
    rc, fs, _ = run_json(checkout, dumps["hang"], "--path-map", f"{cluster}={other}")
    assert fs[0]["filename"] == str(other / "helpers.py")
    rc, out, err = explain(tmp_path, dumps["hang"])  # from a folder without the project: nothing maps
    assert "not found in this checkout" in out and "--path-map" in out


def test_changed_file_is_noted(jobs, tmp_path):
    _, _, dumps = jobs
    co = tmp_path / "co"
    shutil.copytree(PROJ, co / "proj", ignore=shutil.ignore_patterns("__pycache__"))
    rc, out, _ = explain(co, dumps["mismatch"])
    assert "changed since the job ran" not in out
    h = co / "proj" / "train.py"
    h.write_text("# a new first line\n" + h.read_text())
    rc, out, _ = explain(co, dumps["mismatch"])
    assert "changed since the job ran" in out and "proj/train.py" in out


def test_sarif(jobs):
    _, checkout, dumps = jobs
    rc, out, _ = explain(checkout, dumps["hang"], "--output-format", "sarif")
    sarif = json.loads(out)
    res = sarif["runs"][0]["results"]
    assert [r["ruleId"] for r in res] == ["DDP903"] and res[0]["relatedLocations"]


def _torchfrtrace_verdict(folder: Path):
    """torchfrtrace's own analyser (torch.distributed.flight_recorder) on the same dumps: the first
    collective it does not pass, as (seq, ranks at fault). torch 2.13's gloo dumps record the
    default group's config under the name '' while its entries name it '0' (torchfrtrace then
    stops with a KeyError), so that one key is renamed first; nothing else is touched."""
    import pickle

    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig

    details = {}
    for p in sorted(folder.glob("trace_rank_*")):
        obj = pickle.loads(p.read_bytes())  # our own test's dumps
        cfg = dict(obj["pg_config"])
        names = {e["process_group"][0] for e in obj["entries"]}
        if "" in cfg and len(names) == 1 and not names & set(cfg):
            cfg[names.pop()] = cfg.pop("")
        r = int(p.name.rsplit("_", 1)[1])
        details[p.name] = {"host_name": f"host{r}", "rank": r, "entries": obj["entries"], "version": obj["version"],
                           "pg_config": cfg}
    args = JobConfig().parse_args(["unused", "--allow-incomplete-ranks"])
    db = build_db(details, args, next(iter(details.values()))["version"])
    for c in db.collectives:
        if not c.pass_check or c.missing_ranks:
            return c.collective_seq_id, set(c.mismatch_collectives or ()) | set(c.missing_ranks or ())
    return None


@pytest.mark.parametrize("scenario", ["mismatch", "skip", "hang"])
def test_agrees_with_torchfrtrace(jobs, scenario):
    _, checkout, dumps = jobs
    pytest.importorskip("torch.distributed.flight_recorder.components.builder")
    from analysis.runtime.explain import explain as explain_api

    theirs = _torchfrtrace_verdict(dumps[scenario])
    assert theirs is not None
    res = explain_api([str(dumps[scenario])], root=str(checkout))
    v = res.verdicts[0]
    assert v.seq == theirs[0]
    if v.kind in ("mismatch", "skip"):
        assert theirs[1] <= v.ranks and len(v.ranks) == 2  # torchfrtrace names one side as the culprit
    else:
        assert v.ranks == theirs[1]
