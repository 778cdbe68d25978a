import os


def configure_distributed(args):
    if args.launcher == "mpi":
        assert os.environ.get("OMPI_COMM_WORLD_NODE_RANK") is not None, "mpi variables missing"
        args.local_rank = os.environ["LOCAL_RANK"] = os.environ["OMPI_COMM_WORLD_NODE_RANK"]
        os.environ["RANK"] = os.environ["PMIX_RANK"]

    args.rank = int(os.getenv("RANK", "0"))
    args.world_size = int(os.getenv("WORLD_SIZE", "1"))
    return args
