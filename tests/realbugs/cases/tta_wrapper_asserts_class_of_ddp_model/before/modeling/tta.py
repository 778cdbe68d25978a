from torch import nn


class TwoStageDetector(nn.Module):
    def forward(self, batch):
        return batch


class DetectorWithAugment(nn.Module):
    def __init__(self, cfg, model, batch_size=3):
        super().__init__()
        assert isinstance(model, TwoStageDetector), "augmentation needs a TwoStageDetector, got {}".format(type(model))
        self.cfg = cfg
        self.model = model
        self.batch_size = batch_size

    def forward(self, inputs):
        return [self.model(x) for x in inputs]
