import lightning.pytorch as pl
import torch


class TaggerModel(pl.LightningModule):
    def __init__(self, cfg, trainer=None):
        super().__init__()
        self.cfg = cfg
        self.encoder = torch.nn.Linear(16, 16)
        self.unused_head = torch.nn.Linear(16, 2)

    def training_step(self, batch, batch_idx):
        return self.encoder(batch).square().mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)
