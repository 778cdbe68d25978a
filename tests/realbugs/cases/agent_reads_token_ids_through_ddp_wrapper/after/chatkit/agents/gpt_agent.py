import torch
from torch import nn

from chatkit.agents.base import GeneratorAgent


class GptModel(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.START_IDX = vocab["<s>"]
        self.END_IDX = vocab["</s>"]
        self.NULL_IDX = vocab["<pad>"]
        self.embed = nn.Embedding(len(vocab), 16)

    def forward(self, tokens):
        return self.embed(tokens)


class GptAgent(GeneratorAgent):
    def __init__(self, opt, shared=None):
        if opt.get("add_start_token") and not opt.get("add_special_tokens"):
            raise RuntimeError("add_start_token requires add_special_tokens")
        super().__init__(opt, shared)
        inner = self.model.module if hasattr(self.model, "module") else self.model
        self.START_IDX = inner.START_IDX
        self.END_IDX = inner.END_IDX
        self.NULL_IDX = inner.NULL_IDX

    def build_model(self):
        return GptModel(self.vocab)
