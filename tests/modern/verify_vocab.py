"""Run by tests/test_modern_vocab.py under torch.distributed.run (2 ranks, gloo): calls each
``verified`` entry of analysis/runtime/shim_vocab.py and prints, on rank 0, one JSON line per entry
with the c10d / functional-collective operators the profiler saw. Loads the vocabulary by path,
as the shim does (no ddp_lint import)."""
import importlib.util
import json
import sys

import torch
import torch.distributed as dist

spec = importlib.util.spec_from_file_location("_vocab", sys.argv[1])
vocab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vocab)

import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,  # noqa: E402
                                                     get_optimizer_state_dict, get_state_dict,
                                                     set_model_state_dict, set_state_dict)
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (2,))
full = StateDictOptions(full_state_dict=True)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
fully_shard(model, mesh=mesh)
opt = torch.optim.Adam(model.parameters())
model(torch.randn(2, 4)).sum().backward()
opt.step()
msd, osd = get_state_dict(model, opt)
d = distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
ck = sys.argv[2]
out = {}


def grad_step():
    model(torch.randn(2, 4)).sum().backward()


CALLS = {
    "DTensor.full_tensor": lambda: d.full_tensor(),
    "DTensor.redistribute": lambda: d.redistribute(mesh, [Replicate()]),
    "distribute_tensor": lambda: distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)]),
    "DTensor.from_local": lambda: DTensor.from_local(torch.randn(2, 4), mesh, [Shard(0)], run_check=True),
    "fully_shard": lambda: fully_shard(torch.nn.Linear(2, 2), mesh=mesh),
    "FSDPModule.forward": lambda: model(torch.randn(2, 4)),
    "FSDPModule.backward": grad_step,
    "FSDPModule.unshard": lambda: model.unshard(),
    "FSDPModule.reshard": lambda: model.reshard(),
    "get_model_state_dict": lambda: get_model_state_dict(model, options=full),
    "get_optimizer_state_dict": lambda: get_optimizer_state_dict(model, opt, options=full),
    "get_state_dict": lambda: get_state_dict(model, opt, options=full),
    "set_state_dict": lambda: set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd),
    "set_model_state_dict": lambda: set_model_state_dict(model, msd),
    "dcp.save": lambda: dcp.save({"model": msd}, checkpoint_id=ck),
    "dcp.load": lambda: dcp.load({"model": msd}, checkpoint_id=ck),
    "dcp.async_save": lambda: dcp.async_save({"model": msd}, checkpoint_id=ck + "-async").result(),
    "clip_grad_norm_": lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0),
    "init_device_mesh": lambda: init_device_mesh("cpu", (2,)),
    "new_group": lambda: dist.new_group([0, 1]),
    "new_subgroups": lambda: dist.new_subgroups(1),
    "DeviceMesh.get_group": lambda: mesh.get_group(),
}
KEYS = ("c10d::", "_c10d_functional::", "gloo:")
for a in vocab.VOCAB:
    if not a.verified:
        continue
    fn = CALLS[a.key]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        fn()
    ops = sorted({e.name for e in p.events() if e.name.startswith(KEYS)})
    out[a.key] = ops
dist.barrier()
if rank == 0:
    print("VOCAB-RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
