import torch
from torch import nn


class ChatVisionModel(nn.Module):
    def __init__(self, vision, language, image_token_id):
        super().__init__()
        self.vision = vision
        self.language = language
        self.image_token_id = image_token_id

    def forward(self, pixel_values, input_ids, image_flags):
        embeds = self.language.embed(input_ids)
        vit = self.vision(pixel_values)[image_flags == 1]
        n_images = pixel_values.shape[0]
        b, n, c = embeds.shape
        embeds = embeds.reshape(b * n, c)

        if torch.dist.is_initialized() and torch.distributed.get_rank() == 0:
            print(f"images in batch: {n_images}, per sample: {n_images / b}, tokens: {n}")

        flat_ids = input_ids.reshape(b * n)
        chosen = flat_ids == self.image_token_id
        embeds[chosen] = vit.reshape(-1, c)
        return self.language(embeds.reshape(b, n, c))
