import torch
import torch.distributed as dist


class PPOTrainer:
    def __init__(self, model, optimizer, target_kl):
        self.model = model
        self.optimizer = optimizer
        self.target_kl = target_kl

    def train_minibatch(self, batch):
        loss, kl = self.model(batch)
        loss.backward()
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
        self.optimizer.step()
        return kl

    def _early_stop(self, kl):
        kl = torch.tensor(float(kl))
        dist.all_reduce(kl)
        kl = kl / dist.get_world_size()
        return kl.item() > 1.5 * self.target_kl

    def step(self, batches):
        for batch in batches:
            kl = self.train_minibatch(batch)
            if self._early_stop(kl):
                self.optimizer.zero_grad()
                break
