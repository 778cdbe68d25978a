import logging

import fsspec
import torch


def read_state(path, map_location="cpu"):
    if path.startswith("s3"):
        logging.info("fetching a remote state, this can be slow")
    handle = fsspec.open(path, "rb")
    with handle as fh:
        state = torch.load(fh)
    return state


def exists(path):
    try:
        with fsspec.open(path):
            pass
    except FileNotFoundError:
        return False
    return True
