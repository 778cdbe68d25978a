"""ddp-lint: static and runtime checks for torch.distributed / DistributedDataParallel misuse.

This package is editor-agnostic: it never imports pygls or lsprotocol, and the static check path
never imports torch.
"""
__version__ = "0.1.0"
