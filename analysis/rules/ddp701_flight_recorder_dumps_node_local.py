from ..model import Severity
from ..registry import Rule


class FlightRecorderDumpsNodeLocal(Rule):
    """
    ## What it does
    Reads launch scripts (sbatch and shell scripts, `torchrun` command lines; never Python files)
    that turn torch's Flight Recorder on (`TORCH_FR_BUFFER_SIZE`, or the older
    `TORCH_NCCL_TRACE_BUFFER_SIZE`, set to a positive number) and start distributed ranks
    (`torchrun`, `python -m torch.distributed.run`, `srun`/`mpirun` of python), and reports
    `TORCH_FR_DUMP_TEMP_FILE` (or the older `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`) left at its default,
    `/tmp/nccl_trace_rank_`, or set to another node-local folder (`/tmp`, `/var/tmp`, `/dev/shm`,
    `$TMPDIR`, `$SLURM_TMPDIR`). The script is read as shell words: a variable named in a comment
    never counts; `#SBATCH --export=...` lines count as assignments. `ddp-lint check job.sbatch`
    reads a launch script named on its command line, and `ddp-lint explain` the launch scripts among
    its inputs.

    ## Why is this bad?
    When a job hangs, the watchdog of every rank writes a dump of its recent collectives: the one
    artefact that tells which rank stopped where (`ddp-lint explain`). Written to `/tmp` of each
    node, the dumps go away with the job's nodes, or are spread over nodes you cannot reach.

    ## Example
    ```bash
    #!/bin/bash
    #SBATCH --nodes=4
    export TORCH_FR_BUFFER_SIZE=2000
    srun torchrun --nnodes 4 --nproc-per-node 8 train.py
    ```

    ## Use instead
    ```bash
    #!/bin/bash
    #SBATCH --nodes=4
    export TORCH_FR_BUFFER_SIZE=2000
    export TORCH_FR_DUMP_TEMP_FILE=$HOME/fr/$SLURM_JOB_ID/trace_rank_
    mkdir -p $HOME/fr/$SLURM_JOB_ID
    srun torchrun --nnodes 4 --nproc-per-node 8 train.py
    ```

    ## Fix safety
    No fix: which shared folder to use is the user's choice.
    """

    code = "DDP701"
    name = "flight-recorder-dumps-node-local"
    severity = Severity.WARNING
    static = False  # not a Python rule: analysis/launch_scripts.py reads the launch scripts
