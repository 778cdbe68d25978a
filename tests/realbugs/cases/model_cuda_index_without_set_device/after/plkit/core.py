import torch


class Module(torch.nn.Module):
    def configure_optimizers(self):
        return [torch.optim.SGD(self.parameters(), lr=0.1)]
