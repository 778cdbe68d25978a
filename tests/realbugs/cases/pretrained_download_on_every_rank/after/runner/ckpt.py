import os

import torch
import torch.distributed as dist
from torch.utils import model_zoo

ZOO_URLS = {"resnet50_extra": "https://example.org/weights/resnet50_extra.pth"}


def rank_and_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def fetch_once_per_node(url):
    rank, world = rank_and_world()
    rank = int(os.environ.get("LOCAL_RANK", rank))
    if rank == 0:
        state = model_zoo.load_url(url)
    if world > 1:
        dist.barrier()
        if rank > 0:
            state = model_zoo.load_url(url)
    return state


def load_weights(model, filename, map_location=None, strict=False):
    if filename.startswith("zoo://"):
        name = filename[6:]
        state = fetch_once_per_node(ZOO_URLS[name])
    elif filename.startswith(("http://", "https://")):
        state = fetch_once_per_node(filename)
    else:
        if not os.path.isfile(filename):
            raise IOError(f"{filename} is not a checkpoint file")
        state = torch.load(filename, map_location=map_location)
    if "state_dict" in state:
        state = state["state_dict"]
    model.load_state_dict(state, strict=strict)
    return state
