"""analysis findings -> LSP diagnostics (and back, for the fix carried in ``Diagnostic.data``)."""
from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types as t

from ..analysis.model import Applicability, Finding, Severity
from ..analysis.output import display_message, related_message
from .documents import Document, shift_range

SOURCE = "ddp-lint"
RUNTIME_SOURCE = "ddp-lint (runtime)"

SEVERITY = {
    Severity.ERROR: t.DiagnosticSeverity.Error,
    Severity.WARNING: t.DiagnosticSeverity.Warning,
    Severity.INFO: t.DiagnosticSeverity.Information,
    Severity.HINT: t.DiagnosticSeverity.Hint,
}


def uri_to_path(uri: str) -> str | None:
    """Local path of a ``file:`` URI; None for any other scheme."""
    p = urlparse(uri)
    if p.scheme != "file":
        return None
    if p.netloc and p.netloc not in ("", "localhost"):
        return None
    return os.path.normpath(unquote(p.path)) if unquote(p.path) else None


def path_to_uri(path: str) -> str:
    return Path(os.path.abspath(path)).as_uri()


def shift_finding(f: Finding, ch) -> Finding | None:
    """``f`` after a line change, or None when the change touched its lines. Related locations
    in the same file move too (or are dropped); the fix is dropped (its edits are stale)."""
    r = shift_range(f.range, ch)
    if r is None:
        return None
    related = []
    for rel in f.related:
        if rel.filename is not None and rel.filename != f.filename:
            related.append(rel)
            continue
        rr = shift_range(rel.range, ch)
        if rr is not None:
            related.append(type(rel)(rr, rel.message, rel.filename, rel.ranks))
    if r is f.range and len(related) == len(f.related) and f.fix is None:
        return f
    return Finding(f.code, f.name, f.message, f.severity, r, f.filename, tuple(related), None, f.url,
                   f.ranks, f.emulated, f.details)


def runtime_message(f: Finding) -> str:
    return display_message(f)


def to_diagnostic(f: Finding, doc: Document, enc, *, runtime: bool = False, with_fix: bool = False,
                  related_support: bool = True, lines_of=None, cell_doc=None) -> t.Diagnostic:
    """``lines_of(filename) -> Document | None`` gives the text of other files (for related
    locations in other files, which runtime findings have); ``cell_doc(number) -> Document |
    None`` the other cells of a notebook (for related locations in them)."""
    data: dict = {}
    if with_fix and f.fix is not None and f.fix.edits:
        data["fix"] = {
            "applicability": f.fix.applicability.value,
            "title": f.fix.message,
            "edits": [
                {"range": _range_json(doc.range_to_client(e.range, enc)), "newText": e.content}
                for e in f.fix.edits
            ],
        }
        data["version"] = doc.version
    related = None
    if related_support and f.related:
        related = []
        for rel in f.related:
            other_cell = cell_doc(rel.cell) if cell_doc is not None and rel.cell not in (None, f.cell) else None
            if other_cell is not None:
                rdoc, ruri = other_cell, other_cell.uri
            elif rel.filename is None or rel.filename == f.filename:
                rdoc, ruri = doc, doc.uri
            else:
                rdoc = lines_of(rel.filename) if lines_of else None
                ruri = path_to_uri(rel.filename)
            rng = rdoc.range_to_client(rel.range, enc) if rdoc is not None else _naive(rel.range)
            msg = related_message(rel) if runtime else rel.message
            related.append(t.DiagnosticRelatedInformation(location=t.Location(uri=ruri, range=rng), message=msg))
    return t.Diagnostic(
        range=doc.range_to_client(f.range, enc),
        message=runtime_message(f) if runtime else f.message,
        severity=SEVERITY.get(f.severity, t.DiagnosticSeverity.Warning),
        code=f.code,
        code_description=t.CodeDescription(href=f.url) if f.url else None,
        source=RUNTIME_SOURCE if runtime else SOURCE,
        related_information=related,
        data=data or None,
    )


def _naive(r) -> t.Range:
    return t.Range(start=t.Position(line=max(r.start.line, 0), character=max(r.start.column, 0)),
                   end=t.Position(line=max(r.end.line, 0), character=max(r.end.column, 0)))


def _range_json(r: t.Range) -> list[int]:
    return [r.start.line, r.start.character, r.end.line, r.end.character]


def range_from_json(v) -> t.Range:
    sl, sc, el, ec = (int(x) for x in v)
    return t.Range(start=t.Position(line=sl, character=sc), end=t.Position(line=el, character=ec))


def fix_of(f: Finding, doc: Document, enc) -> dict | None:
    """The quick fix of ``f`` in the form ``fix_from_data`` returns (its edits in the client's
    units for ``doc``'s current text); None when ``f`` has no edits."""
    if f.fix is None or not f.fix.edits:
        return None
    return {"applicability": f.fix.applicability, "title": f.fix.message or "Fix",
            "edits": [t.TextEdit(range=doc.range_to_client(e.range, enc), new_text=e.content) for e in f.fix.edits],
            "version": doc.version}


def fix_from_data(data) -> dict | None:
    """The fix carried in ``Diagnostic.data``, validated (data comes back from the client)."""
    if not isinstance(data, dict):
        return None
    fix = data.get("fix")
    if not isinstance(fix, dict):
        return None
    try:
        app = Applicability(fix["applicability"])
        edits = [t.TextEdit(range=range_from_json(e["range"]), new_text=str(e["newText"])) for e in fix["edits"]]
        return {"applicability": app, "title": str(fix.get("title") or "Fix"), "edits": edits,
                "version": data.get("version")}
    except (KeyError, TypeError, ValueError):
        return None
