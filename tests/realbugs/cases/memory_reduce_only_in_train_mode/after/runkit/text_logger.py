import torch
import torch.distributed as dist


class TextLogger:
    def __init__(self, interval=10):
        self.interval = interval

    def _max_memory_mb(self, runner):
        mem = torch.cuda.max_memory_allocated()
        mem_mb = torch.tensor([mem / (1 << 20)], dtype=torch.int, device=torch.device("cuda"))
        if runner.world_size > 1:
            dist.reduce(mem_mb, 0, op=dist.ReduceOp.MAX)
        return mem_mb.item()

    def log(self, runner):
        record = {}
        # train mode if this rank's buffer holds a "time" entry
        mode = "train" if "time" in runner.log_buffer.output else "val"
        record["mode"] = mode
        record["iter"] = runner.inner_iter + 1
        memory = None
        if torch.cuda.is_available():
            memory = self._max_memory_mb(runner)
        if mode == "train":
            record["time"] = runner.log_buffer.output["time"]
            if memory is not None:
                record["memory"] = memory
        for name, val in runner.log_buffer.output.items():
            record.setdefault(name, val)
        return record
