"""A count a helper equalises across ranks only when given an optional group (flow/optional_syncs.py),
in a class of one module whose loop runs the forward and backward of an FSDP2 module that a
script of another module shards and hands to the class's constructor (DDP110)."""
from __future__ import annotations

import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import project

SEL = Settings(select=["DDP110"])

BUDGET = """
    import torch
    import torch.distributed as dist


    def group_by_budget(utterances, max_frames, dp_group=None):
        frames = sum(u.shape[0] for u in utterances)
        count = torch.tensor(max(1, -(-frames // max_frames)))
        if dp_group is not None:
            dist.all_reduce(count, op=dist.ReduceOp.MAX, group=dp_group)
        k = min(int(count), len(utterances))
        out = [[] for _ in range(k)]
        for i, u in enumerate(utterances):
            out[i % k].append(u)
        return out
"""

NETS = """
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard


    def shard(net, mesh):
        for layer in net.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(net, mesh=mesh)
        return net
"""

LEARNER = """
    import torch

    from speech.budget import group_by_budget


    class Learner:
        def __init__(self, net, optim, mesh):
            self.net, self.optim = net, optim
            self.dp = mesh.get_group("dp")

        def update(self, utterances):
            batches = group_by_budget(utterances, 3000{extra})
            self.optim.zero_grad()
            for batch in batches:
                feats = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True)
                self.net(feats).mean().backward()
            self.optim.step()
"""

MAIN = """
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from speech.learner import Learner
    from speech.nets import shard


    def main(net, data):
        dist.init_process_group("nccl")
        mesh = init_device_mesh("cuda", (dist.get_world_size(),), mesh_dim_names=("dp",))
        model = {model}
        learner = Learner(model, torch.optim.AdamW(model.parameters()), mesh)
        for utterances in data:
            learner.update(utterances)
"""


def _write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def _project(tmp_path, extra="", model="shard(net, mesh)"):
    project.clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "speech/__init__.py", "")
    _write(tmp_path, "speech/budget.py", BUDGET)
    _write(tmp_path, "speech/nets.py", NETS)
    _write(tmp_path, "train.py", MAIN.format(model=model))
    return _write(tmp_path, "speech/learner.py", LEARNER.format(extra=extra))


def _findings(path):
    res = check_source(path.read_text(), str(path), SEL)
    assert not res.errors, res.errors
    return [(f.code, f.range.start.line + 1, f.message) for f in res.findings]


def test_count_left_unsynced_runs_fsdp2_collectives_a_varying_number_of_times(tmp_path):
    got = _findings(_project(tmp_path))
    assert [(c, line) for c, line, _m in got] == [("DDP110", 15)]
    msg = got[0][2]
    assert "`group_by_budget()`" in msg and "`dp_group` is given" in msg and "FSDP2" in msg


def test_call_that_passes_the_group_is_clean(tmp_path):
    assert _findings(_project(tmp_path, extra=", dp_group=self.dp")) == []
    assert _findings(_project(tmp_path, extra=", self.dp")) == []


def test_module_that_is_not_sharded_runs_no_collective(tmp_path):
    assert _findings(_project(tmp_path, model="net")) == []
