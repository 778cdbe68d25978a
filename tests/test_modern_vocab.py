"""The version-tagged vocabulary of hidden collectives (analysis/runtime/shim_vocab.py): its shape,
that the shim can load it by path without ddp-lint, that its runtime targets exist in the installed
torch, and that its ``verified`` entries do (and do not) run collectives on a real 2-rank gloo job."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.conftest import ROOT, require_torch

from ddp_lint.analysis.runtime import shim_vocab as V

VOCAB_FILE = ROOT / "analysis" / "runtime" / "shim_vocab.py"
_OPS = {"all_gather", "all_reduce", "reduce_scatter", "all_to_all", "broadcast", "scatter", "gather", "new_group"}


def test_vocabulary_shape():
    assert len(V.VOCAB) >= 40
    keys = [a.key for a in V.VOCAB]
    assert len(keys) == len(set(keys))
    conds = {getattr(V, n) for n in dir(V) if n.startswith("COND_")}
    for a in V.VOCAB:
        assert re.fullmatch(r"\d+\.\d+", a.since), a
        assert set(a.runs) <= _OPS, a
        assert a.when is None or a.when in conds, a
        assert a.qualnames or a.method, a
        assert a.verified in (None, "2.13"), a
        assert all(q.startswith("torch.") for q in a.qualnames), a
    # one spelling maps to one entry
    spellings = [q for a in V.VOCAB for q in a.qualnames]
    assert len(spellings) == len(set(spellings))
    assert sum(1 for a in V.VOCAB if a.runs) >= 35


def test_shim_loads_vocabulary_by_path_without_ddp_lint(tmp_path):
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('_v', {str(VOCAB_FILE)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert not [k for k in sys.modules if k.startswith('ddp_lint')]\n"
        "assert 'torch' not in sys.modules\n"
        "print(len(m.VOCAB), len(m.runtime_targets()))\n"
    )
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    n, t = map(int, r.stdout.split())
    assert n == len(V.VOCAB) and t == len(V.runtime_targets()) and t >= 10


def test_runtime_targets_exist_in_torch():
    require_torch()
    import importlib

    for mod, attr, a in V.runtime_targets():
        obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
        assert callable(obj), a.key


def test_function_qualnames_resolve_in_torch():
    require_torch()
    import importlib

    missing = []
    for a in V.VOCAB:
        for q in a.qualnames[:1]:
            parts = q.split(".")
            for i in range(len(parts) - 1, 0, -1):
                try:
                    obj = importlib.import_module(".".join(parts[:i]))
                except ImportError:
                    continue
                try:
                    for p in parts[i:]:
                        obj = getattr(obj, p)
                except AttributeError:
                    missing.append(q)
                break
    assert not missing, missing


def test_verified_entries_on_gloo(tmp_path):
    """The entries tagged ``verified="2.13"``: a 2-rank gloo run sees a collective in each that
    says it runs one (its condition met), and none in those that say they run none."""
    require_torch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK"))}
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(ROOT / "tests" / "modern" / "verify_vocab.py"), str(VOCAB_FILE), str(tmp_path / "ck")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    line = next((l for l in r.stdout.splitlines() if l.startswith("VOCAB-RESULT ")), None)
    assert line is not None, r.stdout[-2000:] + r.stderr[-4000:]
    seen = json.loads(line[len("VOCAB-RESULT "):])
    by_key = {a.key: a for a in V.VOCAB}
    for key, ops in seen.items():
        a = by_key[key]
        collective = [o for o in ops if o.startswith(("c10d::", "_c10d_functional::"))]
        # the probe meets every condition but broadcast_from_rank0 (set_*_state_dict run plain)
        met = a.when != V.COND_BROADCAST_RANK0
        if a.runs and met and a.runs != ("new_group",) and key != "dcp.async_save":
            assert collective, f"{key}: no collective seen ({ops})"
        if not a.runs or not met:
            assert not collective, f"{key}: collectives {ops} for an entry that says it runs none"
