"""The version-tagged vocabulary of the modern torch.distributed stack: the calls that run a
collective without spelling one (FSDP2 ``fully_shard``, DTensor, DeviceMesh, the distributed
state-dict helpers, ``torch.distributed.checkpoint``, FSDP1's full state dicts, sharded gradient
clipping, group construction).

One table, read by both sides:
- the static rules (``analysis/flow/hidden.py`` turns a call into a collective site, so DDP104,
  DDP107 and DDP110 find ``param.full_tensor()`` or ``dcp.save(...)`` under a rank-varying
  condition the way they find ``dist.all_gather``; the DDP5xx rules ask what a call does);
- the runtime shim, which loads this file by path in the user's interpreter (stdlib only: it must
  never import ddp-lint) and wraps the ``runtime`` entries so that a rank blocked inside one is
  reported at the user's line, with the collective it was running.

Each entry (``Api``):
  ``qualnames``  every public spelling of the function (first = canonical); empty for a method
                 known only by its name;
  ``method``     the method name, for an entry reached as ``obj.method(...)`` (None for a function);
  ``receiver``   what ``obj`` must be for the method to count: ``"dtensor"`` (a DTensor: the method
                 name is DTensor's own), ``"fsdp2"`` (a module given to ``fully_shard``), ``"fsdp1"``
                 (an ``FullyShardedDataParallel`` module), ``"any"`` (the name is unique to the API);
  ``runs``       the collectives the call makes on every rank of its group (the names of
                 ``torch.distributed``'s ops);
  ``when``       None (always), or the condition under which it does (``COND_*`` below);
  ``since``      the torch version that made it a public collective-running API;
  ``verified``   the torch version on which a 2-process gloo run observed the collectives (the
                 profiler's ``c10d::``/``_c10d_functional::`` events), or None where the entry comes
                 from the documentation (CUDA-only paths, compile);
  ``runtime``    ``module:attribute`` the shim wraps to blame a rank blocked inside it (None: not
                 wrapped at run time).
"""
from __future__ import annotations

from collections import namedtuple

Api = namedtuple("Api", "key qualnames method receiver runs when since verified runtime note")

# conditions (``when``): the static side reads them from the call's arguments, the shim from the
# values it is given
COND_FULL_STATE_DICT = "full_state_dict"  # options=StateDictOptions(full_state_dict=True)
COND_BROADCAST_RANK0 = "broadcast_from_rank0"  # options=StateDictOptions(broadcast_from_rank0=True)
COND_FSDP1_FULL = "fsdp1_full_state_dict"  # under FSDP.state_dict_type(m, StateDictType.FULL_STATE_DICT)
COND_RUN_CHECK = "run_check"  # DTensor.from_local(..., run_check=True)
COND_SHARDED_PARAMS = "sharded_params"  # the parameters are DTensors (a fully_shard/TP model)
COND_GRAD = "with_grad"  # a forward with gradients / a backward of what it computed
COND_COMPILED_COLLECTIVE = "compiled_collective"  # the compiled function calls a collective

_DT = "torch.distributed.tensor."
_DT_OLD = "torch.distributed._tensor."
_SD = "torch.distributed.checkpoint.state_dict."
_DCP = "torch.distributed.checkpoint."
_FSDP1 = "torch.distributed.fsdp.FullyShardedDataParallel."
_FSDP1_OLD = "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel."
_D = "torch.distributed."


def _a(key, qualnames=(), method=None, receiver=None, runs=(), when=None, since="", verified=None,
       runtime=None, note=""):
    return Api(key, tuple(qualnames), method, receiver, tuple(runs), when, since, verified, runtime, note)


VOCAB = (
    # -- DTensor ---------------------------------------------------------------------------------
    _a("DTensor.full_tensor", method="full_tensor", receiver="any", runs=("all_gather",), since="2.4",
       verified="2.13", runtime="torch.distributed.tensor:DTensor.full_tensor",
       note="all-gathers every shard into a replicated plain tensor"),
    _a("DTensor.redistribute", method="redistribute", receiver="dtensor", runs=("all_gather", "all_to_all",
       "reduce_scatter", "all_reduce"), since="2.4", verified="2.13",
       runtime="torch.distributed.tensor:DTensor.redistribute",
       note="Shard->Replicate all-gathers, Partial->Replicate all-reduces, Shard(i)->Shard(j) all-to-all"),
    _a("distribute_tensor", (_DT + "distribute_tensor", _DT_OLD + "distribute_tensor"), runs=("scatter",),
       since="2.4", verified="2.13", runtime="torch.distributed.tensor:distribute_tensor",
       note="scatters (Shard) or broadcasts (Replicate) from the mesh's first rank"),
    _a("distribute_module", (_DT + "distribute_module", _DT_OLD + "distribute_module"), runs=("broadcast",),
       since="2.4", runtime="torch.distributed.tensor:distribute_module"),
    _a("DTensor.from_local", (_DT + "DTensor.from_local", _DT_OLD + "DTensor.from_local"), runs=("all_gather",),
       when=COND_RUN_CHECK, since="2.4", verified="2.13", note="run_check=True all-gathers to check the metadata"),
    _a("DTensor.full_like", (_DT + "full", _DT_OLD + "full"), runs=(), since="2.4",
       note="factory: every rank of the mesh must call it (same random seed offsets for rand)"),
    _a("parallelize_module", ("torch.distributed.tensor.parallel.parallelize_module",),
       runs=("broadcast",), since="2.4", runtime=None,
       note="tensor parallel: distributes the parameters; every rank of the mesh must call it"),
    # -- FSDP2 -----------------------------------------------------------------------------------
    _a("fully_shard", ("torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard"),
       runs=(), since="2.6", verified="2.13",
       note="no collective of its own; every forward all-gathers and every backward reduce-scatters"),
    _a("FSDPModule.forward", method="forward", receiver="fsdp2", runs=("all_gather",), when=COND_GRAD,
       since="2.6", verified="2.13", runtime="torch.distributed.fsdp._fully_shard._fsdp_state:FSDPState._pre_forward",
       note="the parameters are all-gathered before each forward"),
    _a("FSDPModule.backward", method="backward", receiver="fsdp2", runs=("reduce_scatter", "all_reduce"),
       when=COND_GRAD, since="2.6", verified="2.13", note="gradients are reduce-scattered in backward"),
    _a("FSDPModule.unshard", method="unshard", receiver="fsdp2", runs=("all_gather",), since="2.6",
       verified="2.13", runtime="torch.distributed.fsdp:FSDPModule.unshard"),
    _a("FSDPModule.reshard", method="reshard", receiver="fsdp2", runs=(), since="2.6", verified="2.13"),
    _a("register_fsdp_forward_method", ("torch.distributed.fsdp.register_fsdp_forward_method",
                                        "torch.distributed._composable.fsdp.register_fsdp_forward_method"),
       runs=(), since="2.6", note="makes a method other than forward all-gather like forward"),
    # -- distributed state dicts -------------------------------------------------------------------
    _a("get_model_state_dict", (_SD + "get_model_state_dict",), runs=("all_gather",), when=COND_FULL_STATE_DICT,
       since="2.2", verified="2.13", runtime="torch.distributed.checkpoint.state_dict:get_model_state_dict"),
    _a("get_optimizer_state_dict", (_SD + "get_optimizer_state_dict",), runs=("all_gather",),
       when=COND_FULL_STATE_DICT, since="2.2", verified="2.13",
       runtime="torch.distributed.checkpoint.state_dict:get_optimizer_state_dict"),
    _a("get_state_dict", (_SD + "get_state_dict",), runs=("all_gather",), when=COND_FULL_STATE_DICT,
       since="2.2", verified="2.13", runtime="torch.distributed.checkpoint.state_dict:get_state_dict"),
    _a("set_state_dict", (_SD + "set_state_dict",), runs=("broadcast",), when=COND_BROADCAST_RANK0,
       since="2.2", verified="2.13", runtime="torch.distributed.checkpoint.state_dict:set_state_dict"),
    _a("set_model_state_dict", (_SD + "set_model_state_dict",), runs=("broadcast",), when=COND_BROADCAST_RANK0,
       since="2.2", verified="2.13", runtime="torch.distributed.checkpoint.state_dict:set_model_state_dict"),
    _a("set_optimizer_state_dict", (_SD + "set_optimizer_state_dict",), runs=("broadcast",),
       when=COND_BROADCAST_RANK0, since="2.2",
       runtime="torch.distributed.checkpoint.state_dict:set_optimizer_state_dict"),
    # -- torch.distributed.checkpoint --------------------------------------------------------------
    _a("dcp.save", (_DCP + "save", _DCP + "state_dict_saver.save"), runs=("gather", "scatter", "all_gather"),
       since="2.2", verified="2.13", runtime="torch.distributed.checkpoint:save",
       note="the save plan is gathered on the coordinator and scattered back; a final all-gather commits"),
    _a("dcp.load", (_DCP + "load", _DCP + "state_dict_loader.load"), runs=("gather", "scatter", "all_gather"),
       since="2.2", verified="2.13", runtime="torch.distributed.checkpoint:load"),
    _a("dcp.async_save", (_DCP + "async_save", _DCP + "state_dict_saver.async_save"),
       runs=("gather", "scatter", "all_gather"), since="2.3", verified="2.13",
       runtime="torch.distributed.checkpoint:async_save",
       note="the collectives run in a background thread; every rank must call it and wait its future"),
    _a("dcp.save_state_dict", (_DCP + "save_state_dict", _DCP + "state_dict_saver.save_state_dict"),
       runs=("gather", "scatter", "all_gather"), since="2.0", note="deprecated spelling of dcp.save"),
    _a("dcp.load_state_dict", (_DCP + "load_state_dict", _DCP + "state_dict_loader.load_state_dict"),
       runs=("gather", "scatter", "all_gather"), since="2.0", note="deprecated spelling of dcp.load"),
    # -- FSDP1 -------------------------------------------------------------------------------------
    _a("FSDP.state_dict", method="state_dict", receiver="fsdp1", runs=("all_gather",), when=COND_FSDP1_FULL,
       since="1.12", note="FULL_STATE_DICT all-gathers every flat parameter"),
    _a("FSDP.summon_full_params", (_FSDP1 + "summon_full_params", _FSDP1_OLD + "summon_full_params"),
       method="summon_full_params", receiver="any", runs=("all_gather",), since="1.11"),
    _a("FSDP.full_optim_state_dict", (_FSDP1 + "full_optim_state_dict", _FSDP1_OLD + "full_optim_state_dict"),
       method="full_optim_state_dict", receiver="any", runs=("all_gather", "broadcast"), since="1.12"),
    _a("FSDP.optim_state_dict", (_FSDP1 + "optim_state_dict", _FSDP1_OLD + "optim_state_dict"),
       runs=("all_gather",), when=COND_FSDP1_FULL, since="2.0"),
    _a("FSDP.shard_full_optim_state_dict", (_FSDP1 + "shard_full_optim_state_dict",), runs=("broadcast",),
       since="1.12"),
    _a("FSDP.scatter_full_optim_state_dict", (_FSDP1 + "scatter_full_optim_state_dict",),
       method="scatter_full_optim_state_dict", receiver="any", runs=("broadcast", "scatter"), since="1.12"),
    _a("FSDP.clip_grad_norm_", method="clip_grad_norm_", receiver="fsdp1", runs=("all_reduce",), since="1.12"),
    _a("FSDP.forward", method="forward", receiver="fsdp1", runs=("all_gather",), when=COND_GRAD, since="1.11"),
    # -- gradient clipping / norms on sharded parameters -------------------------------------------
    _a("clip_grad_norm_", ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_"),
       runs=("all_reduce",), when=COND_SHARDED_PARAMS, since="2.4", verified="2.13",
       note="the norm of DTensor gradients is all-reduced over the mesh"),
    _a("get_total_norm", ("torch.nn.utils.get_total_norm",), runs=("all_reduce",), when=COND_SHARDED_PARAMS,
       since="2.6"),
    # -- DeviceMesh and groups ---------------------------------------------------------------------
    _a("init_device_mesh", ("torch.distributed.device_mesh.init_device_mesh",
                            "torch.distributed._tensor.device_mesh.init_device_mesh",
                            _D + "init_device_mesh"),
       runs=("new_group",), since="2.2", verified="2.13",
       note="creates one group per mesh dimension: every rank must call it with the same shape"),
    _a("DeviceMesh", ("torch.distributed.device_mesh.DeviceMesh", _D + "DeviceMesh"), runs=("new_group",), since="2.2"),
    _a("new_group", (_D + "new_group",), runs=("new_group",), since="1.0", verified="2.13",
       note="every rank of the default group must call it, in the same order"),
    _a("new_subgroups", (_D + "new_subgroups",), runs=("new_group",), since="1.11", verified="2.13"),
    _a("new_subgroups_by_enumeration", (_D + "new_subgroups_by_enumeration",), runs=("new_group",),
       since="1.11"),
    _a("split_group", (_D + "split_group",), runs=("new_group",), since="2.6",
       note="NCCL comm split: every rank of the parent group must call it"),
    # -- compile ---------------------------------------------------------------------------------
    _a("torch.compile", ("torch.compile",), runs=(), when=COND_COMPILED_COLLECTIVE, since="2.0",
       note="a compiled function that calls a collective runs it as a functional collective; "
            "compiling on some ranks only changes which collectives each rank runs"),
    _a("functional.all_reduce", ("torch.distributed._functional_collectives.all_reduce",), runs=("all_reduce",),
       since="2.1"),
    _a("functional.all_gather_tensor", ("torch.distributed._functional_collectives.all_gather_tensor",),
       runs=("all_gather",), since="2.1"),
    _a("functional.reduce_scatter_tensor", ("torch.distributed._functional_collectives.reduce_scatter_tensor",),
       runs=("reduce_scatter",), since="2.1"),
    _a("functional.all_to_all_single", ("torch.distributed._functional_collectives.all_to_all_single",),
       runs=("all_to_all",), since="2.1"),
    _a("functional.broadcast", ("torch.distributed._functional_collectives.broadcast",), runs=("broadcast",),
       since="2.1"),
    # -- object collectives through the mesh --------------------------------------------------------
    _a("DeviceMesh.get_group", method="get_group", receiver="mesh", runs=(), since="2.2", verified="2.13",
       note="no collective: the group was made by init_device_mesh"),
)

BY_QUALNAME = {q: a for a in VOCAB for q in a.qualnames}
# methods whose name alone identifies the API (only DTensor / FSDP1 define them)
BY_UNIQUE_METHOD = {a.method: a for a in VOCAB if a.method and a.receiver == "any"}
BY_METHOD = {}
for _api in VOCAB:
    if _api.method:
        BY_METHOD.setdefault(_api.method, []).append(_api)
del _api


def runs_collective(api) -> bool:
    """True when the entry runs a collective (or needs every rank: a group constructor)."""
    return bool(api.runs)


def frame_api(file: str, function: str):
    """The entry whose ``runtime`` target is the frame (file, function) of a Python stack, or None:
    the function's name, in a file of the target's module (or package)."""
    f = file.replace("\\", "/")
    for a in VOCAB:
        if not a.runtime:
            continue
        mod, attr = a.runtime.split(":", 1)
        if attr.rsplit(".", 1)[-1] != function:
            continue
        path = "/" + mod.replace(".", "/")
        if path + ".py" in f or path + "/" in f:
            return a
    return None


def runtime_targets():
    """(module, attribute path, Api) of the entries the shim wraps at run time."""
    out = []
    for a in VOCAB:
        if a.runtime:
            mod, attr = a.runtime.split(":", 1)
            out.append((mod, attr, a))
    return out
