import torchvision
from torch import nn
from torchvision.ops.misc import FrozenBatchNorm2d

from detmodels.misc import NestedBatch


class BackboneBase(nn.Module):
    def __init__(self, body, num_channels):
        super().__init__()
        self.body = body
        self.num_channels = num_channels

    def forward(self, batch: NestedBatch):
        return self.body(batch.tensors)


class Backbone(BackboneBase):
    def __init__(self, name, dilation):
        body = getattr(torchvision.models, name)(
            replace_stride_with_dilation=[False, False, dilation],
            pretrained=True, norm_layer=FrozenBatchNorm2d)
        channels = 512 if name in ("resnet18", "resnet34") else 2048
        super().__init__(body, channels)
