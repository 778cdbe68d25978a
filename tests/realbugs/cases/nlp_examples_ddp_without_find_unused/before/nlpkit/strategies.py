from lightning.pytorch.strategies import DDPStrategy


class TextDDPStrategy(DDPStrategy):
    """DDP with a few text-model specific tweaks."""
