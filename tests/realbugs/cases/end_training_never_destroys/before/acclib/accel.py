import functools

import torch
import torch.distributed


def on_main_process(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if self.is_main_process:
            return fn(self, *args, **kwargs)
    return wrapper


class Accel:
    def __init__(self, trackers=()):
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl")
        self.is_main_process = torch.distributed.get_rank() == 0
        self.trackers = list(trackers)

    @on_main_process
    def end_training(self):
        """Stop the trackers; call at the end of the script."""
        for tracker in self.trackers:
            tracker.finish()
