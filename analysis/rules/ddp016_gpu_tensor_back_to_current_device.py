from __future__ import annotations

from ..model import Applicability, Severity
from ..registry import Rule
from ..flow.round_trips import current_device_chosen, host_source, is_bare_cuda_move, known_on_gpu


class GpuTensorBackToCurrentDevice(Rule):
    """
    ## What it does
    Checks for a tensor that the code knows to be on a GPU (`if x.is_cuda:`,
    `x.device.type == "cuda"`, `assert x.is_cuda`, or an earlier `if not x.is_cuda: return ...`)
    being copied to the host (`x.cpu()`, `x.detach().to("cpu")`) for some work and sent back with a
    bare `.cuda()` (or `.to("cuda")`). The host copy is followed through tensor methods, `torch.*`
    functions of it, local names (also one element of a tuple assignment) and project helpers that
    return a host copy of their parameter (`def to_host(t): return t.detach().cpu()`, in this
    module or another one).

    A function that chooses the current device itself (`with torch.cuda.device(x.device):` around
    the move, `torch.cuda.set_device(...)` before it in the same function, or
    `torch.set_default_device(...)` in the module) is left alone.

    ## Why is this bad?
    `.cuda()` without an index moves to `torch.cuda.current_device()`, not to the GPU the tensor
    came from. In a process that drives `cuda:3` without making it current (a rank whose device is
    placed explicitly, a model split over GPUs, a library called from such code) the result lands
    on `cuda:0`: every rank of the node allocates on GPU 0, and the next operation mixing it with
    the original tensor fails with

    ```
    RuntimeError: Expected all tensors to be on the same device, but found at least two devices,
    cuda:3 and cuda:0!
    ```

    ## Example
    ```python
    def running_total(values):
        if values.is_cuda:
            return values.cpu().cumsum(0).cuda()
        return values.cumsum(0)
    ```

    ## Use instead
    ```python
    def running_total(values):
        if values.is_cuda:
            return values.cpu().cumsum(0).to(values.device)
        return values.cumsum(0)
    ```

    ## Fix safety
    The fix replaces the bare move with `.to(<tensor>.device)`. It is **safe**: where the current
    device is the tensor's own, nothing changes; elsewhere the result now comes back to the GPU it
    was taken from, which the code established it was on.
    """

    code = "DDP016"
    name = "gpu-tensor-back-to-current-device"
    severity = Severity.WARNING
    fix_availability = "always"
    requires_text = ("cuda",)

    def finish(self, ctx) -> None:
        an = None
        for call in ctx.sem.calls:
            if not is_bare_cuda_move(ctx, call):
                continue
            if ctx.sem.enclosing_function(call) is None:
                continue
            if an is None:
                from ..flow import for_context
                an = for_context(ctx)
            src = host_source(ctx, an, an.main, call.func.value, call)
            if src is None:
                continue
            name, host = src
            test = known_on_gpu(ctx.sem, call, name)
            if test is None or current_device_chosen(ctx, call):
                continue
            move = f"`.{call.func.attr}({ctx.text(call.args[0]) if call.args else ''})`"
            fix = ctx.fix(Applicability.SAFE, f"Move it back with `.to({name}.device)`",
                          [ctx.replace(call, f"{ctx.text(call.func.value)}.to({name}.device)")])
            ctx.report(
                call.func,
                f"{move} sends this host copy of `{name}` (`{ctx.text(host)[:40]}` at line {host.lineno}) to the "
                f"current CUDA device, not back to `{name}`'s GPU (`{ctx.text(test)[:40]}` at line "
                f"{test.lineno} says it is on one): where `{name}` is not on the current device (a rank "
                f"that places its tensors on `cuda:<local_rank>` without `set_device`), the result lands "
                f"on cuda:0; use `.to({name}.device)`",
                related=[(host, "the host copy is made here"), (test, "the tensor is on a GPU here")],
                fix=fix,
            )
