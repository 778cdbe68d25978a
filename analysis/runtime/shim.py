"""ddp-lint rank shim. Runs INSIDE each rank, in the user's interpreter.

Started by path (``python -m torch.distributed.run ... /path/to/shim.py SCRIPT ARGS``); it needs
only the standard library and torch, and imports nothing from ddp-lint.

Environment contract (set by the launcher, analysis/runtime/launcher.py):
  DDP_LINT_LOG_DIR      folder for the per-rank JSON-lines logs (rank-<RANK>.jsonl)
  DDP_LINT_TIMEOUT      seconds; the process-group timeout is shortened to this
  DDP_LINT_EMULATE      "1" to install the CUDA/NCCL emulation (section EMULATION below)
  DDP_LINT_EMU_NGPUS    number of GPUs the emulated machine has

Hooks between the sections (kept as module globals so both sections can use them):
  _PRE_COLLECTIVE_HOOKS  list of callables(op_name, args, kwargs, site) run before every recorded
                         torch.distributed collective; a hook may raise to fail that call.
  _log_event(kind, **fields)  append one JSON line to this rank's log (flushed immediately).
"""
# ruff: noqa
from __future__ import annotations

import os
import sys

_PRE_COLLECTIVE_HOOKS: list = []

# ================================ RECORDING (owned by the runner) ================================


def _log_event(kind, **fields):  # replaced by the runner implementation
    pass


# ================================ EMULATION (owned by the emulation) =============================


def _emulation_install():  # replaced by the emulation implementation
    pass


# ================================ END EMULATION ==================================================


def main(argv=None):  # replaced by the runner implementation
    raise SystemExit("ddp-lint shim: not implemented yet")


if __name__ == "__main__":
    main()
