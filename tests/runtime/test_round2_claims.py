"""The symptoms quoted in the round-2 rule docs (DDP101, DDP111, DDP207, DDP208, DDP209), observed
on the installed torch with 2 CPU ranks (Gloo): if torch changes them, the docs must change too."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from ddp_lint.analysis.registry import all_rules
from tests.conftest import require_torch

SCRIPT = Path(__file__).resolve().parent / "scripts" / "round2_claims.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_round2_symptoms_match_the_docs():
    require_torch()
    env = dict(os.environ, MASTER_PORT=str(_free_port()), MASTER_ADDR="127.0.0.1")
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=240, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    r0, r1 = got["0"], got["1"]
    rules = all_rules()
    # DDP111: the TypeError every rank raises
    for r in (r0, r1):
        assert "Expected parameter `tensor` of type torch.Tensor but got <class 'float'>" in r["DDP111"]
    assert "Expected parameter `tensor` of type torch.Tensor" in rules["DDP111"].docs()
    # DDP101: the non-destination rank's ValueError, quoted verbatim
    assert r1["DDP101"] == "Argument ``gather_list`` must NOT be specified on non-destination ranks."
    assert r1["DDP101"] in rules["DDP101"].docs()
    # DDP207: a forward through .module leaves the gradients unsynchronised
    assert r0["DDP207_synced"] is False
    # DDP208: no_sync() around the backward alone still synchronises; around the forward it does not
    assert r0["DDP208_synced"] is True and r0["no_sync_synced"] is False
    # DDP209: the reducer error on the second iteration
    start = "Expected to have finished reduction in the prior iteration before starting a new one."
    assert r0["DDP209"].startswith(start) and "find_unused_parameters=True" in r0["DDP209"]
    assert start in " ".join(rules["DDP209"].docs().split())
