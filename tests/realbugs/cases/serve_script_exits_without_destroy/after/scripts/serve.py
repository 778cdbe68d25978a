import argparse

import torch
import torch.distributed as dist


class SyncWorker:
    def init_comm(self, host, port, world_size):
        torch.distributed.init_process_group(
            "nccl", init_method=f"tcp://{host}:{port}", world_size=world_size, rank=world_size - 1)

    def update_weight(self, name, shape):
        buf = torch.empty(shape, device="cuda")
        torch.distributed.broadcast(buf, src=0)
        return name, buf


def main(opts, build_engine, run_server):
    engine = build_engine(opts.model, worker=SyncWorker)
    app = {"engine": engine}
    run_server(app, host=opts.host, port=opts.port)

    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    main(p.parse_args(), None, None)
