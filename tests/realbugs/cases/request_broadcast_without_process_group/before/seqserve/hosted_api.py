import logging
import queue
import random
import threading

import torch

from seqserve import dist_helpers

log = logging.getLogger("seqserve.hosted_api")
PENDING = queue.Queue()
engine = None


def serve_batches(max_items=8):
    while True:
        batch = []
        try:
            while len(batch) < max_items:
                batch.append(PENDING.get(timeout=0.05))
        except queue.Empty:
            pass
        if not batch:
            continue
        request = {"prompts": [item["prompt"] for item in batch], "seed": random.randint(1, 9999)}
        # every rank must run the same generation call
        dist_helpers.share_object(
            request,
            src_rank=0,
            group=dist_helpers.default_group(),
        )
        outputs = engine.generate(**request)
        for item, out in zip(batch, outputs):
            item["reply"].put(out)


def worker_main(cfg):
    global engine
    torch.manual_seed(random.randint(1, 9999))
    engine = cfg.build_engine()
    log.info("engine ready on rank %s", cfg.rank)
    request = dist_helpers.share_object(
        None, src_rank=0, group=dist_helpers.default_group()
    )
    if torch.distributed.get_rank() == 0:
        log.info("serving requests")
        worker = threading.Thread(target=serve_batches, daemon=True)
        worker.start()
        cfg.run_http_server()
    else:
        while True:
            request = dist_helpers.share_object(
                None, src_rank=0, group=dist_helpers.default_group()
            )
            engine.generate(**request)


def cli_main(cfg):
    dist_helpers.launch(cfg, worker_main)
