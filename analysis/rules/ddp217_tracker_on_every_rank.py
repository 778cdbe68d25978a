from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow.fs_effects import TRACK, TRACK_TEXT, effects_at, rank_specific, view_ctx
from ..flow.rank import rank0_guarded
from ..flow.models import LAUNCH_TEXT, distributed_program, is_distributed_script
from ._spawn import ACCELERATOR, in_launcher, outside_launched, runs_in_ranks
from ..flow.fs_ranks import rank_specific_path


class TrackerOnEveryRank(Rule):
    """
    ## What it does
    Checks a distributed program (one that calls `init_process_group`, wraps in DDP/FSDP, spawns
    its ranks, or builds an Accelerate `Accelerator`, which `accelerate launch` runs once per
    process; or one that starts the process group through a function of another module of the
    project, `ext_dist.init_distributed(...)` with `import extend_distributed as ext_dist`, also
    when that function starts it only for a world size read from the environment) for an experiment tracker that every rank opens: `wandb.init`,
    `comet_ml.Experiment` / `OfflineExperiment` / `ExistingExperiment` / `comet_ml.start`,
    `mlflow.start_run`, `neptune.init` / `init_run`, `clearml.Task.init`, `aim.Run`,
    `swanlab.init`, and a TensorBoard `SummaryWriter` (`torch.utils.tensorboard`, `tensorboardX`).
    The APIs are recognised by their qualified names (through imports and aliases).

    The call is flagged when no main-rank test keeps the other ranks out (`if rank == 0:`, an
    early `if rank != 0: return`, `@rank_zero_only`, a helper every call of which is guarded:
    `rank.rank0_guarded`; a flag the constructor turns off on the other ranks, `if rank != 0:
    self.use_wandb = False`, tested in another method), including a tracker opened before the distributed setup has decided
    which rank is the main one. A tracker opened in a function of another module of the project
    (`setup_logging(args)` in `utils.py` that calls `wandb.init`) is followed through the call
    (`flow.fs_effects`, effect kind `track`) and reported at the call every rank makes; in a
    program whose process group is started only in another module, the tracker call must be in
    the file itself.

    Not flagged: a run whose arguments depend on the rank (`name=f"rank{rank}"`, a
    `log_dir` with the rank in it), and `wandb.init(group=...)`, Weights & Biases' documented way
    to log from every process into one group of runs: both are one run per rank on purpose.
    Only the `group` keyword's presence and the value flow of the arguments decide; the file's
    words do not.

    ## Why is this bad?
    Every rank creates its own run: N runs (or N event files in one TensorBoard folder) per job,
    with curves that overlap or contradict each other, the configuration logged N times, and, for
    hosted trackers, N connections and rate limits. A rank other than the main one often logs
    nothing but still holds the run open, so the dashboard shows N-1 empty or crashed runs; and
    the trackers create their folders (`./wandb`, `./runs/...`, `mlruns/`) from every rank at once.

    ## Example
    ```python
    wandb.init(project="demo", config=vars(args))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    if rank == 0:
        wandb.init(project="demo", config=vars(args))
    ```

    ## Fix safety
    There is no fix: the main-rank test to use (global rank 0, `accelerator.is_main_process`, a
    trainer's flag) and where the rank is known depend on the program.
    """

    code = "DDP217"
    name = "tracker-on-every-rank"
    severity = Severity.WARNING
    # a distributed program that says so itself: a launch call, or an Accelerate ``Accelerator``;
    # or a tracker of the file in a program whose group a project module starts (``reach``)
    requires_text = (*LAUNCH_TEXT, "Accelerator", *TRACK_TEXT)

    @classmethod
    def reach(cls, text, filename):
        if any(n in text for n in (*LAUNCH_TEXT, "Accelerator")):
            return True, {}
        from ..flow.reach import reaches  # a project module that may start the group

        return reaches(filename, text, ("init_process_group",))

    def finish(self, ctx) -> None:
        own = is_distributed_script(ctx) or ctx.sem.calls_to(ACCELERATOR)
        if not (own or distributed_program(ctx)):
            return
        from ..flow import for_context

        an = None
        seen = set()
        for call in ctx.sem.calls:
            if an is None:
                an = for_context(ctx)
            effs = [e for e in effects_at(ctx, an, call, local=False) if e.kind == TRACK]
            if not effs:
                continue
            e = effs[0]
            if e.via and not own:
                continue  # the group and the tracker both elsewhere: the text gate sees neither
            if e.per_rank or _per_rank_run(ctx, call, e):
                continue
            if rank0_guarded(ctx, call) is not False or runs_in_ranks(ctx, call) is False \
                    or in_launcher(ctx, call) or outside_launched(ctx, call):
                continue
            if id(e.node) in seen and e.via:
                continue  # the same helper's tracker reached again: reported at its first call
            seen.add(id(e.node))
            self._report(ctx, call, e)

    def _report(self, ctx, call, e) -> None:
        opens = e.cache if e.path is None else f"a run in `{_short(ast.unparse(e.path))}`"
        if e.via:
            from ..flow.findings import node_span

            home = e.home.path or ""
            rng = node_span(ctx, home, e.node) if home else None
            chain = " -> ".join(e.via)
            ctx.report(
                call,
                f"`{ctx.text(call.func)}()` runs on every rank, and through `{chain}` `{e.api}` opens "
                f"{opens} on each of them: N runs per job, duplicated or conflicting logs; open the "
                f"tracker only on the main rank (`if rank == 0:`), after the distributed setup",
                related=[("file", home, rng, f"the `{e.api}` every rank runs")] if home and rng else (),
            )
            return
        ctx.report(
            call,
            f"`{ctx.text(call.func)}(...)` runs on every rank and opens {opens} on each of them: N runs "
            f"per job, duplicated or conflicting logs; open the tracker only on the main rank "
            f"(`if rank == 0:`), after the distributed setup",
        )


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def _per_rank_run(ctx, call, e) -> bool:
    """One run per rank on purpose: an argument of the tracker call (in its own module) or of the
    helper call that reaches it depends on the rank, or ``wandb.init(group=...)`` (runs grouped
    across processes)."""
    node = e.node
    if isinstance(node, ast.Call):
        args = [*node.args, *(k.value for k in node.keywords)]
        if node is call:
            if any(rank_specific_path(ctx, a, call) for a in args):
                return True
        elif e.home is not None and any(rank_specific(view_ctx(e.home), a, node) for a in args):
            return True
        if e.api == "wandb.init" and any(k.arg == "group" for k in node.keywords):
            return True
    return any(rank_specific_path(ctx, a, call) for a in e.args)
