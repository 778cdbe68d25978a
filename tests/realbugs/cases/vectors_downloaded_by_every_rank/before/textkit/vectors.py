import os
import urllib.request

import torch

URLS = {"glove": "https://example.org/glove.pt"}


def load(name, cache):
    path = os.path.join(cache, name + ".pt")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        urllib.request.urlretrieve(URLS[name], path)
    return torch.load(path, map_location="cpu")
