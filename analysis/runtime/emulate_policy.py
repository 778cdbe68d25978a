"""When ``ddp-lint run`` emulates CUDA and NCCL on the CPU (``--emulate auto|on|off``).

Auto turns the emulation on when the script asks for NCCL or CUDA devices and the machine has fewer
GPUs than ranks. The question is answered from the script's text with the static engine's parser and
semantic index: torch is never imported here.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ..engine import parse
from ..io import SourceError, read_source
from ..semantic import Semantic, get_arg
from ..torch_api import backend_mentions_nccl
from .states import count

MODES = ("auto", "on", "off")

_CUDA_STR = re.compile(r"^cuda(:\d+)?$")
# calls that only ask whether CUDA is there; a script that adapts to a CPU-only machine with them
# (``"cuda" if torch.cuda.is_available() else "cpu"``) still shows its CUDA path by its other uses
_QUERY_ONLY = {"torch.cuda.is_available", "torch.cuda.device_count"}
_TEXT_NCCL = re.compile(r"""['"][^'"\n]*\bnccl\b""", re.IGNORECASE)
_TEXT_CUDA = re.compile(r"""torch\.cuda\.|\.cuda\(|['"]cuda(:\d+)?['"]""")


@dataclass
class ScriptNeeds:
    """What the script asks for, with 1-based lines for the messages."""

    nccl_lines: list[int] = field(default_factory=list)
    cuda_lines: list[int] = field(default_factory=list)
    parsed: bool = True

    @property
    def nccl(self) -> bool:
        return bool(self.nccl_lines)

    @property
    def cuda(self) -> bool:
        return bool(self.cuda_lines)


class _Ctx:
    """The little of analysis.context.Context that backend_mentions_nccl needs."""

    def __init__(self, sem: Semantic):
        self.sem = sem

    def qn(self, node):
        if isinstance(node, ast.Call):
            return self.sem.call_qualname(node)
        return self.sem.qualname(node)


def script_needs(text: str, filename: str = "<script>") -> ScriptNeeds:
    tree, _err = parse(text, filename)
    if tree is None:  # a file Python cannot parse: fall back on its words
        needs = ScriptNeeds(parsed=False)
        for i, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            if _TEXT_NCCL.search(line):
                needs.nccl_lines.append(i)
            if _TEXT_CUDA.search(line):
                needs.cuda_lines.append(i)
        return needs
    sem = Semantic(tree)
    ctx = _Ctx(sem)
    needs = ScriptNeeds()
    for qn in ("torch.distributed.init_process_group", "torch.distributed.new_group",
               "torch.distributed.distributed_c10d.init_process_group"):
        for call in sem.calls_to(qn):
            if backend_mentions_nccl(get_arg(call, 0 if qn.endswith("init_process_group") else 2, "backend"),
                                     ctx, sem.scope_of(call)):
                needs.nccl_lines.append(call.lineno)
    for call in sem.calls:
        qn = sem.call_qualname(call)
        f = call.func
        if qn and qn.startswith("torch.cuda.") and qn not in _QUERY_ONLY:
            needs.cuda_lines.append(call.lineno)
        elif isinstance(f, ast.Attribute) and f.attr == "cuda" and qn is None:
            needs.cuda_lines.append(call.lineno)  # x.cuda() / model.cuda(rank)
        elif qn == "torch.nn.parallel.DistributedDataParallel" and get_arg(call, 1, "device_ids") is not None:
            ids = get_arg(call, 1, "device_ids")
            if not (isinstance(ids, ast.Constant) and ids.value is None):
                needs.cuda_lines.append(call.lineno)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _CUDA_STR.match(node.value):
            needs.cuda_lines.append(node.lineno)
    needs.nccl_lines = sorted(set(needs.nccl_lines))
    needs.cuda_lines = sorted(set(needs.cuda_lines))
    return needs


def _lines(lines: list[int]) -> str:
    shown = ", ".join(map(str, lines[:3])) + (", ..." if len(lines) > 3 else "")
    return f"line{'s' if len(lines) > 1 else ''} {shown}"


def should_emulate(script_path: str, nproc: int, n_gpus: int, emulate_flag: str | None = "auto",
                   backend_flag: str | None = "auto") -> tuple[bool, str]:
    """(emulate?, why) for ``ddp-lint run``; the caller prefixes "emulated on CPU: " / "not emulated: "."""
    mode = (emulate_flag or "auto").lower()
    if mode not in MODES:
        raise ValueError(f"--emulate must be one of {', '.join(MODES)}, not {emulate_flag!r}")
    if mode == "on":
        return True, (f"--emulate on: {count(nproc, 'rank')} on the CPU over gloo, with {count(nproc, 'emulated GPU')} "
                      "and NCCL's rules enforced")
    if mode == "off":
        return False, "--emulate off: a real run"
    try:
        text = read_source(script_path)
    except (SourceError, OSError, UnicodeDecodeError, ValueError) as e:
        return False, f"cannot read {script_path}: {e}"
    needs = script_needs(text, script_path)
    asks = []
    if needs.nccl:
        asks.append(f"NCCL ({_lines(needs.nccl_lines)})")
    elif (backend_flag or "").lower() == "nccl":
        asks.append("NCCL (--backend nccl)")
    if needs.cuda:
        asks.append(f"CUDA devices ({_lines(needs.cuda_lines)})")
    if not asks:
        return False, "the script asks for neither NCCL nor CUDA devices"
    what = " and ".join(asks)
    gpus, ranks = count(n_gpus, "GPU"), count(nproc, "rank")
    if n_gpus >= nproc:
        return False, f"the script asks for {what}, and this machine has {gpus} for {ranks}"
    return True, (f"the script asks for {what}, but this machine has {gpus} for {ranks}; "
                  f"running {ranks} on the CPU over gloo with {count(nproc, 'emulated GPU')} and NCCL's "
                  "rules enforced")
