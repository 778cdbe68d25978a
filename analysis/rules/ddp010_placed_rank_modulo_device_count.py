from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow.modern import hub
from ..flow.origins import origins
from ..flow.rank_kinds import (
    PLACED_LOCAL_ENV, PLACED_RANK_ENV, device_sinks, env_keys_of, is_device_count, local_rank_env_reads,
)


class PlacedRankModuloDeviceCount(Rule):
    """
    ## What it does
    Checks for a device index computed as the global rank of SLURM or MPI (`SLURM_PROCID`,
    `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `PMIX_RANK`) modulo the node's device count
    (`torch.cuda.device_count()`, or another accelerator's): `torch.cuda.set_device(proc_id %
    num_gpus)`, `torch.device("cuda", rank % torch.cuda.device_count())`, DDP's `device_ids`.

    Both operands are followed by value flow (`flow/origins.py`: assignments, `int(...)`, tuple
    unpacking, conditional expressions); every non-constant origin of the rank must be one of those
    environment variables and every origin of the divisor a device count. The rank of `torchrun`
    (`RANK`, `dist.get_rank()`) is not flagged: torchrun numbers each node's processes
    consecutively, so `RANK % device_count()` differs between a node's processes. A function that
    also reads the node-local rank (`SLURM_LOCALID`, `LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`) is not
    flagged: there the modulo is the fallback for a launcher that does not set it.

    ## Why is this bad?
    `rank % num_gpus` is the process's place on its node only when the launcher puts consecutive
    ranks on the same node. SLURM and MPI choose the placement per job: with `srun
    --distribution=cyclic` (or `plane`, `arbitrary`), `mpirun --map-by node` or a rank file, two
    processes of one node get the same GPU (NCCL: "Duplicate GPU detected", or both train on
    one GPU and run out of memory) while another GPU stays idle. The launcher already tells each
    process its node-local rank: `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`.

    ## Example
    ```python
    proc_id = int(os.environ["SLURM_PROCID"])
    num_gpus = torch.cuda.device_count()
    torch.cuda.set_device(proc_id % num_gpus)
    ```

    ## Use instead
    ```python
    local_rank = int(os.environ["SLURM_LOCALID"])
    torch.cuda.set_device(local_rank)
    ```

    ## Fix safety
    No fix is offered: which node-local variable the job's launcher sets (and a fallback for a
    launcher that sets none) is not visible in the code.
    """

    code = "DDP010"
    name = "placed-rank-modulo-device-count"
    severity = Severity.WARNING
    requires_text = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
    requires_text_all = (("device_count",),)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        seen = set()
        sem = ctx.sem
        # the functions that read the node-local rank: there the modulo is the fallback for a
        # launcher that does not set it
        with_local = {id(sem.enclosing_function(r)) for r in local_rank_env_reads(view)}
        for site, _call, _what in device_sinks(view):
            for v, e in [(view, site), *origins(an, view, site, site)[:16]]:
                if v is not view or not (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mod)) or id(e) in seen:
                    continue
                keys = env_keys_of(an, view, e.left, e)
                if not keys or not keys <= PLACED_RANK_ENV or not is_device_count(an, view, e.right, e):
                    continue
                seen.add(id(e))
                if id(sem.enclosing_function(e)) in with_local:
                    continue
                key = sorted(keys)[0]
                local = PLACED_LOCAL_ENV[key]
                related = [] if e is site else [(site, "used as the device index here")]
                ctx.report(
                    e,
                    f"the device index is `{key}` modulo the device count: that is this process's place on its "
                    f"node only when the launcher puts consecutive ranks on one node; with another placement "
                    f"(`srun --distribution=cyclic`, `mpirun --map-by node`) two processes of a node pick the "
                    f"same GPU. Use the launcher's node-local rank (`{local}`)",
                    related=related,
                )
