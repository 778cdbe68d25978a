"""Glue between the rules and the semantic layer (``analysis.flow``): the scopes of a file, and the
words that name a divergence's cause chain in messages."""
from __future__ import annotations

import ast
import os

from ..flow import for_context
from ..flow.control import divergences
from ..model import Position, Range
from ..registry import NoCase

# the flow rules need a collective site: a torch.distributed import ("distributed"), a DDP/FSDP
# wrapper ("...Parallel"), a ZeroRedundancyOptimizer, or a project helper module ("dist", "comm")
FLOW_TEXT = (NoCase("dist"), "comm", "Parallel", "ZeroRedundancy")


def scopes(ctx) -> list[ast.AST]:
    def build():
        out = [ctx.sem.tree]
        for defs in ctx.sem.functions.values():
            out.extend(defs)
        out.sort(key=lambda n: getattr(n, "lineno", 0))
        return out
    return ctx.memo("flow.scopes", build)


def all_divergences(ctx):
    def build():
        an = for_context(ctx)
        out = []
        for s in scopes(ctx):
            out.extend(divergences(an, an.main, s))
        return out
    return ctx.memo("flow.divergences", build)


def text(ctx, node: ast.AST, limit: int = 60) -> str:
    t = " ".join(ctx.text(node).split())
    return t if len(t) <= limit else t[: limit - 3] + "..."


def effect_words(ctx, site) -> str:
    """"`all_gather_object` (through `evaluate` -> `all_gather_metrics`, utils/dist.py:7)"."""
    e = main_effect(site)
    words = e.what
    if e.via:
        chain = " -> ".join(f"`{v}`" for v in e.via)
        here = os.path.abspath(ctx.filename) if not ctx.filename.startswith("<") else None
        where = f"line {e.line}" if e.path in (None, here) else f"{_short(e.path)}:{e.line}"
        words += f" (through {chain}, {where})"
    return words


def main_effect(site):
    """The effect to name: an explicit collective when the site has one."""
    return next((e for e in site.effects if e.what == f"`{e.op}`"), site.effects[0])


def _short(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def source_words(ctx, value) -> str:
    here = os.path.abspath(ctx.filename) if not ctx.filename.startswith("<") else None
    return value.src.text(here)


def effect_related(ctx, site):
    """Related location of the collective inside the callee (another file when it lives there)."""
    e = main_effect(site)
    if not e.via:
        return []
    here = os.path.abspath(ctx.filename) if not ctx.filename.startswith("<") else None
    rng = Range(Position(e.line - 1, e.col), Position(e.end_line - 1, e.end_col))
    if e.path in (None, here):
        return [(rng, "the collective inside the callee")]
    return [("file", e.path, rng, "the collective inside the callee")]


def source_related(ctx, value):
    here = os.path.abspath(ctx.filename) if not ctx.filename.startswith("<") else None
    src = value.src
    if src.path not in (None, here) or src.line <= 0:
        return []
    line = src.line - 1
    return [(Range(Position(line, 0), Position(line, len(ctx.src.line(line)))), "source of the rank variance")]
