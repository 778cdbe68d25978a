from __future__ import annotations

import os

from ..model import Severity
from ..registry import Rule
from ..flow.config_devices import device_default_gaps, set_in
from ..flow.modern import hub
from ..flow.rank_kinds import program_views
from ..flow.testing import is_test_file
from ._common import project_files_naming


class DeviceFieldDefaultUnderTorchrun(Rule):
    """
    ## What it does
    Checks for a function that configures a configuration object for `torchrun` (it stores the
    launcher's global `RANK` / `WORLD_SIZE`, read from the environment, into attributes of a
    parameter whose class is a dataclass) without setting the dataclass field that the program
    pins as the CUDA device (`torch.cuda.set_device(cfg.device)`, `torch.device("cuda", ...)`,
    DDP's `device_ids`), when that field's default is a constant (`device: int = 0`).

    The class of a value is read from annotations: the parameter's (`cfg: TrainConfig`) and the
    dataclass fields' (`cfg.dist.device` where `TrainConfig.dist: DistConfig`), across the project
    modules the file imports (`flow/config_devices.py`); without one, from the value itself: the
    construction that builds it (`cfg = TrainConfig()`, a factory function's return, `self.cfg`
    built in `__init__`), followed through assignments and the calls that pass it on
    (`setup(cfg)`, also into a helper of another module). A default read from a module constant or
    a config entry that holds an integer counts as a constant default too. On the torchrun path the field keeps its
    default unless an assignment sets it: in the function (plain or tuple assignment), in a project
    helper the function hands the object to (an unknown callee given the object counts as setting
    it), or anywhere else in the program or in a project module that names the field; so does a
    construction of the class or a `dataclasses.replace` naming the field, and a `setattr` that may
    name it (not a field-by-field copy of a parsed namespace: `setattr(cfg, k, getattr(args, k))`
    carries what the command line gives every process alike). An assignment that belongs to another launcher's path does
    not count: one inside a function that reads another launcher's global rank (`SLURM_PROCID`,
    `OMPI_COMM_WORLD_RANK`; the `SLURM_LOCALID` stored there exists on SLURM only), a torch_xla
    ordinal, or a parameter that the callers fill with the field itself (`pin(cfg.device)` then
    `cfg.device = index`). Test files are skipped.

    ## Why is this bad?
    `torchrun` starts one process per GPU with the same command line; what tells them apart is the
    environment (`RANK`, `LOCAL_RANK`). A device field that only a command-line option or its
    default fills is the same on every process, so every rank of a node calls `set_device(0)`: all
    of them allocate on GPU 0 (out of memory), and NCCL fails with "Duplicate GPU detected" or hangs.

    ## Example
    ```python
    def setup_from_torchrun(cfg: DistConfig):
        cfg.rank = int(os.environ["RANK"])
        cfg.world_size = int(os.environ["WORLD_SIZE"])

    torch.cuda.set_device(cfg.device)  # DistConfig.device defaults to 0
    ```

    ## Use instead
    ```python
    def setup_from_torchrun(cfg: DistConfig):
        cfg.rank = int(os.environ["RANK"])
        cfg.world_size = int(os.environ["WORLD_SIZE"])
        cfg.device = int(os.environ["LOCAL_RANK"])
    ```

    ## Fix safety
    No fix is offered: where the local rank belongs (this function, the field's default) is the
    project's choice.
    """

    code = "DDP014"
    name = "device-field-default-under-torchrun"
    severity = Severity.ERROR
    requires_text = ("RANK", "WORLD_SIZE")

    def finish(self, ctx) -> None:
        if is_test_file(ctx.filename):
            return
        an, view = hub(ctx)
        gaps = device_default_gaps(an, program_views(an, view))
        here = os.path.dirname(os.path.abspath(ctx.filename)) if ctx.filename and not ctx.filename.startswith("<") \
            else None
        for (sv, fn, _param, (clv, cls), _stores, read), attr, (cv, decl), (uv, use) in gaps:
            if sv is not view:
                continue
            # a module outside this file's program (one that imports it) may set the field
            others = [v for _c, v in (project_files_naming(ctx, [attr]) or [])]
            if set_in(an, others, clv, cls, attr):
                continue
            related = []
            for v, node, what in ((cv, decl, f"`{attr}` is declared here, default `{_default(decl)}`"),
                                  (uv, use, "and pinned as the device here")):
                if v is view:
                    related.append((node, what))
                else:
                    related.append(("file", v.path, _range(v, node), what))
            where = f"line {use.lineno}" if uv is view else \
                f"{os.path.relpath(uv.path, here) if here and uv.path else uv.path}:{use.lineno}"
            ctx.report(
                read,
                f"`{fn.name}` configures a torchrun run from the launcher's environment but never sets `{attr}`, which keeps its "
                f"default on every process and is pinned as the CUDA device ({where}): every rank of a node "
                f"uses the same GPU. Set it from `LOCAL_RANK`",
                related=related,
            )


def _default(decl) -> str:
    import ast

    v = decl.value
    if isinstance(v, ast.Call):
        v = next((k.value for k in v.keywords if k.arg == "default"), v)
    return ast.unparse(v)


def _range(view, node):
    from ..source import SourceText

    return SourceText(view.text).node_range(node)
