import json
import threading
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch


class JsonLinesDataset(torch.utils.data.Dataset):
    """One JSON document per line; documents are read lazily through a byte-offset index."""

    def __init__(self, path: str, encode: Optional[Callable] = None, rebuild=False):
        self.path = path
        self.encode = encode
        self.local = threading.local()
        self.index_file = Path(f"{path}.offsets.npy")
        if self.index_file.exists() and not rebuild:
            self.offsets = np.load(self.index_file)
        else:
            self.offsets = self._scan_offsets(path)
            np.save(self.index_file, self.offsets)

    def _scan_offsets(self, path):
        offsets = [0]
        with open(path, "rb") as fh:
            for line in fh:
                offsets.append(offsets[-1] + len(line))
        return np.asarray(offsets[:-1], dtype=np.int64)

    def _handle(self):
        if not hasattr(self.local, "fh"):
            self.local.fh = open(self.path, "rb")
        return self.local.fh

    def __len__(self):
        return len(self.offsets)

    def __getitem__(self, idx):
        fh = self._handle()
        fh.seek(int(self.offsets[idx]))
        doc = json.loads(fh.readline())
        return self.encode(doc["text"]) if self.encode else doc["text"]
