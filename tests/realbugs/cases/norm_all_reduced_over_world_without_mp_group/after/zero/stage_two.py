import torch
import torch.distributed


class ShardedOptimizer:
    def __init__(self, optimizer, dp_group=None, mp_group=None):
        self.optimizer = optimizer
        self.dp_group = dp_group
        self.model_parallel_group = mp_group

    def _model_parallel_all_reduce(self, tensor, op):
        """All-reduce within the model parallel group, if there is one."""
        if self.model_parallel_group is None:
            pass
        else:
            torch.distributed.all_reduce(tensor=tensor, op=op, group=self.model_parallel_group)

    def grad_norm(self, grads):
        total = torch.zeros(1, device=grads[0].device)
        for g in grads:
            total += g.float().norm(2) ** 2
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=self.dp_group)
        self._model_parallel_all_reduce(total, torch.distributed.ReduceOp.SUM)
        return total.sqrt().item()
