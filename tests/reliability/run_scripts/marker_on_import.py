"""Running this file creates a marker file next to it. The language server must never run it
unless asked to."""
import pathlib

import torch.distributed as dist

pathlib.Path(__file__).with_suffix(".RAN").write_text("this file was executed\n")
dist.init_process_group("nccl")
