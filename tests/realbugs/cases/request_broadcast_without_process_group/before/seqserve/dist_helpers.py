import torch.distributed as dist


def default_group():
    return dist.group.WORLD


def share_object(obj, src_rank, group):
    """Send ``obj`` from ``src_rank`` to every rank of ``group`` and return what this rank got."""
    box = [obj]
    dist.broadcast_object_list(box, src=src_rank, group=group)
    return box[0]


def launch(cfg, main):
    if cfg.world_size > 1:
        dist.init_process_group("nccl", init_method=cfg.init_method, world_size=cfg.world_size, rank=cfg.rank)
        try:
            return main(cfg)
        finally:
            dist.destroy_process_group()
    return main(cfg)
