from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._common import const_int, const_str
from ..flow.kernel import LAUNCHERS, kernel_statement
from ._current_device import current_device_uses

# torch.cuda calls that initialise CUDA in the calling process (is_available/device_count do not)
_INITIALISING = tuple(f"torch.cuda.{n}" for n in (
    "set_device", "init", "synchronize", "current_device", "get_device_name", "get_device_properties",
    "get_device_capability", "mem_get_info", "memory_reserved", "max_memory_allocated", "current_stream",
    "Stream", "Event"))


class NotebookLauncherAfterCudaInit(Rule):
    """
    ## What it does
    Checks for Accelerate's `notebook_launcher(...)` started after the kernel's own process has
    initialised CUDA: a tensor or model moved to a GPU (`.cuda()`, `.to("cuda")`,
    `device="cuda"`), `torch.cuda.set_device(...)` or another `torch.cuda` call that initialises
    the driver, in an earlier cell (or earlier in the same cell), directly or in a function of
    the notebook that the cell calls. The function the launcher starts is where CUDA belongs.

    ## Why is this bad?
    `notebook_launcher` forks one process per GPU from the kernel, and a forked child cannot use
    a CUDA context its parent created. Accelerate checks first and refuses to start:

    ```
    ValueError: CUDA has been initialized before the `notebook_launcher` could create a forked
    subprocess. ...
    ```

    The kernel must then be restarted, and every cell that touched the GPU moved into the
    training function.

    ## Example
    ```python
    # cell 1
    model = Net().cuda()

    # cell 2
    def train():
        ...

    notebook_launcher(train, num_processes=2)
    ```

    ## Use instead
    ```python
    # cell 1
    def train():
        model = Net().to(Accelerator().device)
        ...

    # cell 2
    notebook_launcher(train, num_processes=2)
    ```

    ## Fix safety
    There is no fix: which cells' GPU work moves into the training function is the author's call.
    """

    code = "DDP601"
    name = "notebook-launcher-after-cuda-init"
    severity = Severity.ERROR
    requires_text = ("notebook_launcher",)

    def finish(self, ctx) -> None:
        launchers = ctx.calls_to(*LAUNCHERS)
        if not launchers:
            return
        sites = None
        for call in launchers:
            nproc = const_int(get_arg(call, 2, "num_processes"), ctx.sem)
            if nproc is not None and nproc <= 1:
                continue  # one process: the launcher runs the function in the kernel itself
            at = kernel_statement(ctx, call)
            if at is None:
                continue
            if sites is None:
                sites = _cuda_inits(ctx)
            before = [(n, why) for n, st, why in sites
                      if st.lineno < at.lineno or (st is at and (n.lineno, n.col_offset) < (call.lineno, call.col_offset))]
            if not before:
                continue
            first, why = before[0]
            ctx.report(call, f"`notebook_launcher` after this process initialised CUDA ({why}, line {first.lineno}): "
                             "its forked children cannot use the parent's CUDA context, so it refuses to start "
                             "(\"CUDA has been initialized before the `notebook_launcher`\"); move the GPU work "
                             "into the function it launches",
                       related=[(n, w) for n, w in before[:3]])


def _cuda_inits(ctx) -> list[tuple[ast.AST, ast.stmt, str]]:
    """(node, the module-level statement whose run reaches it, what it does), in source order,
    for the CUDA-initialising expressions that the kernel process runs itself."""
    out: dict[int, tuple] = {}
    for node, why in current_device_uses(ctx, eager_only=True):
        out.setdefault(id(node), (node, why))
    for c in ctx.calls_to(*_INITIALISING):
        out.setdefault(id(c), (c, f"`{ctx.qn(c)}(...)` initialises CUDA"))
    for c in ctx.sem.calls:
        f = c.func
        if isinstance(f, ast.Attribute) and id(c) not in out:
            if f.attr == "cuda" and ctx.qn(f.value) not in ("torch", "torch.cuda"):
                out[id(c)] = (c, "`.cuda(...)` moves to a GPU")
            elif f.attr == "to" and c.args and (const_str(c.args[0]) or "").startswith("cuda"):
                out[id(c)] = (c, f"`.to({c.args[0].value!r})` moves to a GPU")
        dev = const_str(get_arg(c, None, "device"))
        if dev is not None and dev.startswith("cuda") and id(c) not in out:
            out[id(c)] = (c, f"`device={dev!r}` allocates on a GPU")
    res = []
    for node, why in out.values():
        st = kernel_statement(ctx, node)
        if st is not None:
            res.append((node, st, why))
    res.sort(key=lambda t: (t[0].lineno, t[0].col_offset))
    return res
