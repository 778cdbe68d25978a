def check(rank):
    if rank == 1:
        raise ValueError("bad shard for rank 1")  # [raise]
