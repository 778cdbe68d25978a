import logging
import os

from seqtrain.distributed import utils as distributed_utils

log = logging.getLogger(__name__)


def verify_checkpoint_directory(save_dir: str) -> None:
    """Create ``save_dir`` if needed and make sure this rank can write to it."""
    if not os.path.exists(save_dir):
        os.makedirs(save_dir, exist_ok=True)
    probe = os.path.join(save_dir, f"probe{distributed_utils.global_rank()}")
    try:
        with open(probe, "w"):
            pass
    except OSError:
        log.warning("cannot write into checkpoint directory %s", save_dir)
        raise
    else:
        os.remove(probe)
