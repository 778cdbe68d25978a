import torch

from clip_train.model import ClipModel


def is_clip(model):
    return isinstance(model, ClipModel)


def to_dict(out):
    image, text, scale = out
    return {"image_features": image, "text_features": text, "logit_scale": scale}


def train_one_epoch(model, loader, loss_fn, optimizer, device):
    model.train()
    for images, texts in loader:
        images, texts = images.to(device), texts.to(device)
        out = model(images, texts)
        if is_clip(model) and not model.output_dict:
            out = to_dict(out)
        losses = loss_fn(**out)
        optimizer.zero_grad()
        losses.backward()
        optimizer.step()
