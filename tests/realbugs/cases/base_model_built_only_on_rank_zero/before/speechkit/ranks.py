import os


def is_global_rank_zero():
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0))) == 0
