"""How a flow finding reads: the words and related locations that name a divergence's cause (the
rank-varying value and where it comes from) and its effect (the collective, also inside a
callee), and ``report_divergence``, the one builder of a finding about a divergent site.
"""
from __future__ import annotations

import ast
import os

from ..model import Position, Range
from .uniformity import _short


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


def report_divergence(ctx, d, anchor: ast.AST, subject: str, skip: str, where: str, site_label: str,
                      related=()) -> None:
    """Report divergence ``d`` (``control.Divergence``) at ``anchor``:
    "<subject> is rank-varying (<source>); <skip><collective> in `<site>` <where>", with the
    related locations ``related``, the source of the variance, the site (``site_label``) and the
    collective inside the callee."""
    site = d.site
    ctx.report(
        anchor,
        f"{subject} is rank-varying ({source_words(ctx, d.value)}); "
        f"{skip}{effect_words(ctx, site)} in `{text(ctx, site.node)}` {where}",
        related=[*related, *source_related(ctx, d.value), (site.node, site_label), *effect_related(ctx, site)],
    )
