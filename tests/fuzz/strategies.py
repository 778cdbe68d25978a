"""Hypothesis strategies: DDP-flavoured Python programs, token-level mutations, text transforms.

The DDP program generator composes the statements the rules look at (process-group set-up,
device pinning, object and tensor collectives, DDP wrapping, list mutations, rank guards) under
random import styles, nesting (functions, classes, if/for/with/try, one-line compound statements,
``;``-joined statements), comments, ``# noqa`` markers, indentation (spaces or tabs), line endings
(LF, CRLF, lone CR) and a BOM. Programs are usually valid Python, so the rules and their fixes run.
"""
from __future__ import annotations

import io
import tokenize

from hypothesis import strategies as st

# (import block, prefix for torch.distributed functions, spelling of the DDP class)
IMPORT_STYLES = (
    ("import os\nimport torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n",
     "dist.", "DDP"),
    ("import torch\nimport torch.distributed\n", "torch.distributed.", "torch.nn.parallel.DistributedDataParallel"),
    ("import torch\nfrom torch import distributed as D\nimport torch.nn as nn\n", "D.", "nn.parallel.DistributedDataParallel"),
    ("import torch\nfrom torch.distributed import *\n", "", "torch.nn.parallel.DistributedDataParallel"),
    ('"""Module docstring."""\nfrom __future__ import annotations\nimport torch.distributed as dist\n', "dist.", "DDP"),
    ("import torch.distributed.distributed_c10d as c10d\nimport torch\n", "c10d.", "torch.nn.parallel.DistributedDataParallel"),
    ("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nimport torch, torch.distributed as dist\n", "dist.", "DDP"),
    ("", "dist.", "DDP"),  # no imports at all: names are unresolved, nothing may fire
)

BACKENDS = ('"nccl"', '"gloo"', 'backend="nccl"', '"cpu:gloo,cuda:nccl"', "BACKEND", '"nccl" if cuda else "gloo"',
            "{d}Backend.NCCL", 'backend="nccl", device_id=torch.device("cuda", local_rank)', "", '"nccl", world_size=2')

SIMPLE = (
    "{d}init_process_group({backend})",
    'BACKEND = "nccl"',
    "rank = {d}get_rank()",
    'local_rank = int(os.environ["LOCAL_RANK"])',
    "device_id = rank % torch.cuda.device_count()",
    "torch.cuda.set_device(device_id)",
    "torch.cuda.set_device(local_rank)",
    'os.environ["CUDA_VISIBLE_DEVICES"] = str(local_rank)',
    "output = [None for _ in range(3)]",
    "output = [None] * 4",
    "output = [None for _ in range({d}get_world_size())]",
    'output = ["a", "b"]',
    "output = list(range(2))",
    'objs = ["foo", 12, {{1: 2}}]',
    "output = [None for _ in objs]",
    "output.append(None)",
    "tensors = [torch.zeros(2) for _ in range(3)]",
    "{d}all_gather_object(output, rank)",
    "{d}all_gather_object([None, None, None], {{'rank': rank}})",
    "{d}all_gather_object(object_list=output, obj=rank)",
    "{d}all_gather_object(output, objs[{d}get_rank()], group=pg)",
    "{d}gather_object(rank, output, dst=0)",
    "{d}all_gather(tensors, t)",
    "{d}all_gather([torch.empty(1)] * 3, t)",
    "{d}gather(t, tensors, dst=0)",
    "{d}barrier()",
    "{d}barrier(device_ids=[local_rank])",
    "{d}broadcast_object_list(objs)",
    "{d}broadcast_object_list(objs, src=0, device=dev)",
    "{d}all_reduce(t)",
    "model = {ddp}(model.to(device_id), device_ids=[device_id])",
    "model = {ddp}(model, device_ids=[local_rank], output_device=local_rank)",
    "model = model.cuda(local_rank)",
    "sampler = torch.utils.data.distributed.DistributedSampler(ds)",
    "sampler.set_epoch(epoch)",
    "torch.save(model.state_dict(), 'ckpt.pt')",
    "{d}destroy_process_group()",
    "pg = {d}new_group([0, 1])",
    "t = torch.ones(1).cuda()",
    "print(output)",
    "pass",
    "x = {{'k': [1, (2, 3)], **kw}}",
    "del output[0]",
    "output += [None]",
    "lambda: {d}barrier()",
    "f'{{rank!r:>{{width}}}}'",
)
HEADERS = (
    "if __name__ == \"__main__\":", "def main(local_rank, world_size):", "def worker(rank):",
    "async def amain():", "class Trainer:", "if rank == 0:", "if {d}get_rank() == 0:",
    "for epoch in range(3):", "while False:", "with torch.no_grad():", "with torch.cuda.device(local_rank):",
    "@decorator\ndef decorated():", "match cmd:\n{i}case 1:",
)
# compound statements made of several clauses, each (header, body)
MULTI = (("if rank == 0:", "else:"), ("if x:", "elif y:", "else:"), ("try:", "except Exception as e:"),
         ("try:", "except (ValueError, OSError):", "else:", "finally:"), ("for i in y:", "else:"))
# statements valid only in some places (a syntax error elsewhere, which is fine but rarer)
RARE = ("return output", "global output", "yield rank", "await coro()", "nonlocal rank", "break")
TRAILERS = ("", "  # a comment", "  # noqa", "  # noqa: DDP001", "  # noqa: DDP101, DDP001", "  # 注释 🎉",
            "  # type: ignore", ";", "  \\\n")


def _PINS(stmt: str) -> bool:
    return "set_device" in stmt or "CUDA_VISIBLE_DEVICES" in stmt or "cuda.device(" in stmt


@st.composite
def ddp_programs(draw) -> str:
    imports, d, ddp = draw(st.sampled_from(IMPORT_STYLES))
    backend = draw(st.sampled_from(BACKENDS)).format(d=d)

    pool = SIMPLE if draw(st.booleans()) else tuple(s for s in SIMPLE if not _PINS(s))

    def simple():
        s = draw(st.sampled_from(pool)).format(d=d, ddp=ddp, backend=backend)
        if draw(st.integers(0, 9)) == 0:  # two statements on one line
            s += "; " + draw(st.sampled_from(pool)).format(d=d, ddp=ddp, backend=backend)
        trailer = draw(st.sampled_from(TRAILERS))
        if trailer in (";", "  \\\n") and draw(st.booleans()):
            trailer = ""
        return s + (trailer if trailer != "  \\\n" else "")

    def block(depth: int) -> list:
        items = []
        for _ in range(draw(st.integers(1, 6 if depth else 14))):
            k = draw(st.integers(0, 9))
            if k < 7 or depth >= 3:
                items.append(simple() if draw(st.integers(0, 40)) else draw(st.sampled_from(RARE)))
            elif k == 7:  # one-line compound statement
                items.append(draw(st.sampled_from(("if x: ", "for i in y: ", "while 0: ", "with m: "))) + simple())
            elif k == 8:
                header = draw(st.sampled_from(HEADERS)).format(d=d, i="    ")
                items.append((header, block(depth + 1)))
            else:
                for header in draw(st.sampled_from(MULTI)):
                    items.append((header, block(depth + 1)))
            if draw(st.integers(0, 7)) == 0:
                items.append("")  # a blank line
        return items

    body = block(0)
    if draw(st.booleans()):
        body.insert(draw(st.integers(0, min(3, len(body)))), f"{d}init_process_group({backend})")
    unit = draw(st.sampled_from(("    ", "  ", "\t")))
    lines: list[str] = []

    def render(items, level):
        for it in items:
            if isinstance(it, tuple):
                header, inner = it
                for i, h in enumerate(header.split("\n")):
                    lines.append(unit * (level + (1 if "case" in h and i else 0)) + h.strip())
                render(inner, level + (2 if "match" in header else 1))
            else:
                lines.append(unit * level + it if it else "")

    render(body, 0)
    text = imports + "\n".join(lines) + draw(st.sampled_from(("\n", "", "\n\n")))
    eol = draw(st.sampled_from(("\n", "\n", "\r\n", "\r")))
    if eol != "\n":
        text = text.replace("\n", eol)
    if draw(st.integers(0, 5)) == 0:
        text = "\ufeff" + text
    return text


# -- token-level mutations ----------------------------------------------------------------------
VOCAB = ("(", ")", "[", "]", "{", "}", ":", ",", ".", "=", "==", "if", "else", "def", "lambda", "dist",
         "all_gather_object", "init_process_group", "'nccl'", '"', "'''", "#", "\\", "\n", "\n    ", "\t",
         " ", "None", "*", "**", "@", "->", "async", "await", "yield", "0", "1e", "\x00", "\ufeff", "é", "😀",
         "\r", "\r\n", "f'{", "}", "import", "from", "as", "torch", "set_device", ";", "rank", "noqa")


def token_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the text's tokens (best effort: stops at the first tokenizer error)."""
    starts = [0]
    for line in io.StringIO(text).readlines():
        starts.append(starts[-1] + len(line))
    spans = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.ENDMARKER, tokenize.DEDENT):
                continue
            (sl, sc), (el, ec) = tok.start, tok.end
            if sl - 1 >= len(starts) or el - 1 >= len(starts):
                break
            s, e = starts[sl - 1] + sc, starts[el - 1] + ec
            if e > s:
                spans.append((s, min(e, len(text))))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return spans or [(0, len(text))]


@st.composite
def token_mutations(draw, text: str) -> str:
    spans = token_spans(text)
    for _ in range(draw(st.integers(1, 4))):
        spans = token_spans(text) if len(spans) == 0 else spans
        i = draw(st.integers(0, len(spans) - 1))
        s, e = spans[i]
        s, e = min(s, len(text)), min(e, len(text))
        op = draw(st.sampled_from(("delete", "duplicate", "insert", "swap")))
        if op == "delete":
            text = text[:s] + text[e:]
        elif op == "duplicate":
            text = text[:e] + text[s:e] + text[e:]
        elif op == "insert":
            text = text[:s] + draw(st.sampled_from(VOCAB)) + text[s:]
        else:
            j = draw(st.integers(0, len(spans) - 1))
            s2, e2 = spans[j]
            if e <= s2 and e2 <= len(text):
                text = text[:s] + text[s2:e2] + text[e:s2] + text[s:e] + text[e2:]
        spans = token_spans(text)
    return text
