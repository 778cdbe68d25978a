import logging

import torch

log = logging.getLogger(__name__)


def store_custom(obj, path, index=0):
    target = f"{path}/custom_{index}.pkl"
    torch.save(obj.state_dict(), target)


def restore_custom(obj, path, index=0):
    target = f"{path}/custom_{index}.pkl"
    log.info("restoring %s from %s", type(obj).__name__, target)
    obj.load_state_dict(torch.load(target))
