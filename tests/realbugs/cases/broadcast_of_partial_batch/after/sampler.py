import torch
import torch.distributed as dist


class ClusterSampler:
    def __init__(self, clusters, global_batch_size):
        self.clusters = clusters
        self.global_batch_size = global_batch_size

    def next_batch(self):
        if dist.get_rank() == 0:
            batch = []
            for cluster in self.clusters:
                batch += cluster[: self.global_batch_size - len(batch)]
            batch += [-1] * (self.global_batch_size - len(batch))
            batch = torch.tensor(batch, dtype=torch.long, device="cuda")
        else:
            batch = torch.empty(self.global_batch_size, dtype=torch.long, device="cuda")
        dist.broadcast(batch, 0)
        batch = batch[batch != -1]
        return batch.tolist()
