__all__ = ["PlainTrainer"]


class PlainTrainer:
    def __init__(self, model, loader, optimizer):
        self.model = model
        self.loader = loader
        self.optimizer = optimizer

    def run_step(self):
        loss = self.model(next(iter(self.loader)))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
