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
    rng = span(ctx, e.path, e.line, e.col, e.end_line, e.end_col)
    if e.path in (None, here):
        return [(rng, "the collective inside the callee")]
    return [("file", e.path, rng, "the collective inside the callee")]


def _here(ctx):
    return os.path.abspath(ctx.filename) if not ctx.filename.startswith("<") else None


_SOURCES: dict[str, tuple] = {}  # path -> (the project's module view, its SourceText)


def _source_of(ctx, path):
    """The text of ``path`` as columns are counted in it: this check's own source, or a module of
    the project as the flow analysis read it (None when it cannot be read)."""
    if path in (None, _here(ctx)):
        return ctx.src
    from . import project
    from ..source import SourceText

    view = project.load(path)
    if view is None:
        return None
    got = _SOURCES.get(path)
    if got is None or got[0] is not view:
        if len(_SOURCES) > 256:
            _SOURCES.clear()
        got = _SOURCES[path] = (view, SourceText(view.text))
    return got[1]


def span(ctx, path, line: int, col: int, end_line: int, end_col: int) -> Range:
    """The range of an AST position (1-based lines, UTF-8 byte columns as ``ast`` gives them) in
    the file at ``path``, in code points as every range of a finding is."""
    src = _source_of(ctx, path)
    if src is None:
        return Range(Position(line - 1, col), Position(end_line - 1, end_col))
    return Range(Position(line - 1, src.char_col(line - 1, col)),
                 Position(end_line - 1, src.char_col(end_line - 1, end_col)))


def node_span(ctx, path, node) -> Range:
    return span(ctx, path, node.lineno, node.col_offset, node.end_lineno or node.lineno,
                node.end_col_offset if node.end_col_offset is not None else node.col_offset)


def node_related(ctx, path, node, msg):
    """A related location for ``node`` of the module at ``path`` (this file or another)."""
    if path in (None, _here(ctx)):
        return (node, msg)
    return ("file", path, node_span(ctx, path, node), msg)


def source_related(ctx, value):
    """The source of the variance (in this file or another module of the project), and the call
    that passes it into the function where it matters (a call-site context)."""
    here = _here(ctx)
    src = value.src
    out = []
    if src.line > 0 and (text := _source_of(ctx, src.path)) is not None and src.line <= len(text.lines):
        # in another module (a sampler's partition, a helper's local value): where the fix goes
        line = src.line - 1
        rng = Range(Position(line, 0), Position(line, len(text.line(line))))
        out.append((rng, "source of the rank variance") if src.path in (None, here)
                   else ("file", src.path, rng, "source of the rank variance"))
    if src.call is not None:
        out.append(node_related(ctx, src.call_path, src.call, "the call that passes the rank-varying value"))
    return out


def where(ctx, path, node) -> str:
    """"line 12" in this file, "utils/dist.py:12" in another."""
    line = getattr(node, "lineno", 0)
    return f"line {line}" if path in (None, _here(ctx)) else f"{_short(path)}:{line}"


def vtext(view, node, limit: int = 60) -> str:
    """The source text of ``node`` in ``view`` (any module), on one line, shortened."""
    try:
        t = ast.get_source_segment(view.text, node) if view.text else None
    except Exception:  # pragma: no cover - positions out of range
        t = None
    if t is None:
        try:
            t = ast.unparse(node)
        except Exception:  # pragma: no cover
            t = "?"
    t = " ".join(t.split())
    return t if len(t) <= limit else t[: limit - 3] + "..."


def call_words(ctx, d) -> str:
    """What the call that leads into another file's function passes it (a divergence found under
    a call-site context): "`net` (a DDP-wrapped module) and `batch` (rank-varying)"."""
    c = d.ctx
    parts = [f"`{name}` (a DDP-wrapped module)" for name in c.wraps]
    parts += [f"`{name}` (rank-varying)" for name in c.binds]
    parts += [f"`{name}` (this rank's data)" for name in sorted(c.loaders)]
    parts += [f"the instance whose `{attr}` is a DDP-wrapped module" for attr in c.self_wraps][:1]
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else "arguments"


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
