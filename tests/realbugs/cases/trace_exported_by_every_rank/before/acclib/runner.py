from contextlib import contextmanager

import torch
import torch.distributed as dist


class ProfileSettings:
    def __init__(self, trace_path=None):
        self.trace_path = trace_path


class Runner:
    def __init__(self):
        self.rank = dist.get_rank() if dist.is_initialized() else 0

    @property
    def is_main(self):
        return self.rank == 0

    def wait(self):
        if dist.is_initialized():
            dist.barrier()

    @contextmanager
    def profile(self, settings=None):
        settings = settings or ProfileSettings()
        prof = torch.profiler.profile()
        with prof:
            yield prof

        if settings.trace_path is not None:
            prof.export_chrome_trace(settings.trace_path)
