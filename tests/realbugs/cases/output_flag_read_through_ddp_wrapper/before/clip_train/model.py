import torch
from torch import nn


class ClipModel(nn.Module):
    def __init__(self, dim=32, output_dict=False):
        super().__init__()
        self.visual = nn.Linear(dim, dim)
        self.text = nn.Linear(dim, dim)
        self.logit_scale = nn.Parameter(torch.ones([]))
        self.output_dict = output_dict

    def forward(self, image, text):
        out = (self.visual(image), self.text(text), self.logit_scale.exp())
        if self.output_dict:
            return {"image_features": out[0], "text_features": out[1], "logit_scale": out[2]}
        return out
