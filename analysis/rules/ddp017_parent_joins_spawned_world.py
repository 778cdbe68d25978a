from __future__ import annotations

from ..model import Severity
from ..registry import Rule


class ParentJoinsSpawnedWorld(Rule):
    """
    ## What it does
    Checks for a launcher that starts the world size's worth of processes with
    `torch.multiprocessing.spawn` / `start_processes` and then runs the worker function itself
    in the parent as one more member (`flow.spawn_members`):

    - the spawn call passes `join=False` (the parent goes on while the children run), and its
      `nprocs` (or an operand of `min(...)` there) is the very setting that the
      worker passes to `init_process_group(world_size=...)`, directly or through project helpers
      (this module or another), read from the object the launcher hands to both the children
      (`args=`) and its own call of the worker;
    - after the spawn, the same function (or, when a helper spawns, its caller after the call)
      calls the worker itself (`run_worker(-1, cfg)`: the parent keeps a member so that signals
      reach it), on the spawn's own path (not in the other branch of an `if`, nor in an
      `except`).

    The values are compared by what they read (`cfg.dist.world_size` through
    `dcfg = cfg.dist`, a tuple assignment, a helper's parameter), never by their names.

    ## Why is this bad?
    Spawned children plus the parent are `nprocs + 1` processes. With `nprocs` equal to the
    world size, one process too many joins a rendezvous sized for the world: the extra rank is
    out of range (`rank >= world_size`) or two processes claim one rank, and start-up fails or
    hangs. `min(torch.cuda.device_count(), world_size)` reaches the world size on any node with
    enough GPUs.

    ## Example
    ```python
    def run_worker(i, cfg):
        i = i + 1  # the parent is local rank 0
        dist.init_process_group("nccl", world_size=cfg.world_size, rank=i)
        ...

    ctx = mp.start_processes(run_worker, (cfg,), nprocs=cfg.world_size, join=False)
    run_worker(-1, cfg)
    ctx.join()
    ```

    ## Use instead
    ```python
    ctx = mp.start_processes(run_worker, (cfg,), nprocs=cfg.world_size - 1, join=False)
    run_worker(-1, cfg)
    ctx.join()
    ```

    ## Fix safety
    No fix is offered: whether the parent should keep a member, or the children should be the
    whole world, is the launcher's design.
    """

    code = "DDP017"
    name = "parent-joins-spawned-world"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("spawn", "start_processes")
    requires_text_all = (("multiprocessing",),)  # torch.multiprocessing.spawn / start_processes

    def finish(self, ctx) -> None:
        from ..flow.findings import node_related
        from ..flow.modern import hub
        from ..flow.spawn_members import parent_joined_spawns

        an, view = hub(ctx)
        for j in parent_joined_spawns(an, view):
            iv, init = j.init
            ctx.report(
                j.part,
                f"`nprocs` can be the world size that `{j.worker.name}` passes to `init_process_group` "
                f"(`{ctx.text(j.part)}`), and the parent then runs `{j.worker.name}` itself (line "
                f"{j.direct.lineno}): the children plus the parent are one process more than the world; "
                "start one fewer child",
                related=[node_related(ctx, iv.path, init, "the group's world size is set here"),
                         node_related(ctx, view.path, j.direct, "the parent runs the worker itself here")],
            )
