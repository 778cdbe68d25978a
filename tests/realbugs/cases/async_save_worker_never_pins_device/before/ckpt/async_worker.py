import logging

import torch
import torch.multiprocessing as mp


class BackgroundSaver:
    def __init__(self, rank):
        self.rank = rank
        ctx = mp.get_context("spawn")
        self.queue = ctx.Queue()
        self.proc = ctx.Process(target=BackgroundSaver.serve, args=(self.rank, self.queue, logging.INFO))
        self.proc.start()

    @staticmethod
    def serve(rank, queue, level):
        log = logging.getLogger(__name__)
        log.setLevel(level)
        log.info("saver for rank %d started", rank)
        while True:
            job = queue.get()
            if job == "STOP":
                break
            fn, fn_args = job
            fn(*fn_args)
            torch.cuda.synchronize()
