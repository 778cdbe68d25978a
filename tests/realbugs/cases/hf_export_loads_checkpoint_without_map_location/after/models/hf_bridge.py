import tempfile
from pathlib import Path

import torch


def fetch(remote, local):
    Path(local).write_bytes(Path(remote).read_bytes())


class HFBridge:
    @staticmethod
    def config_from_checkpoint(ckpt_path):
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "ckpt.pt"
            fetch(ckpt_path, str(local))
            state = torch.load(local, map_location="cpu")
            return state["state"]["integrations"]["hf"]["config"]


def export_to_hf(ckpt_path, out_dir):
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "ckpt.pt"
        fetch(str(ckpt_path), str(local))
        full = torch.load(local, map_location="cpu")
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        torch.save(full["state"]["model"], Path(out_dir) / "weights.bin")
