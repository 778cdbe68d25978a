import logging
import os

from seqtrain import blob_store
from seqtrain.distributed import utils as dist_utils

log = logging.getLogger(__name__)


def load_checkpoint(cfg, trainer):
    """Restore the trainer from the newest checkpoint, fetching it from the blob store if asked."""
    suffix = trainer.checkpoint_suffix
    path = cfg.restore_file
    if cfg.remote_dir and cfg.restore_file == "checkpoint_last.pt":
        # every rank fetches its own part into the local save_dir
        path = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
        blob_store.fetch_latest(cfg.remote_dir, path, suffix + ".pt")
    elif os.environ.get("REQUEUED"):
        candidate = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
        if os.path.isfile(candidate):
            path = candidate

    log.info("rank %d loading checkpoint from %s", dist_utils.global_rank(), path)
    state = trainer.load_checkpoint(
        path,
        reset_optimizer=cfg.reset_optimizer,
    )
    if state is not None and "epoch" in state:
        trainer.epoch = state["epoch"]
    return state
