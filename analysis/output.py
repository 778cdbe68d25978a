"""Output formats: text (one finding per line), JSON in Ruff's schema, SARIF 2.1.0."""
from __future__ import annotations

import json
import sys

from .model import Applicability, Finding


def _loc(pos) -> dict:
    return {"row": pos.line + 1, "column": pos.column + 1}


def finding_to_json(f: Finding) -> dict:
    fix = None
    if f.fix is not None:
        fix = {
            "applicability": f.fix.applicability.value,
            "message": f.fix.message,
            "edits": [
                {"content": e.content, "location": _loc(e.range.start), "end_location": _loc(e.range.end)}
                for e in f.fix.edits
            ],
        }
    return {
        "code": f.code,
        "message": f.message,
        "filename": f.filename,
        "location": _loc(f.range.start),
        "end_location": _loc(f.range.end),
        "fix": fix,
        "url": f.url,
        "noqa_row": f.noqa_row + 1,
        "severity": f.severity.value,
        "related": [
            {"filename": r.filename or f.filename, "location": _loc(r.range.start),
             "end_location": _loc(r.range.end), "message": r.message}
            for r in f.related
        ],
    }


def format_text_line(f: Finding) -> str:
    mark = " [*]" if f.fix is not None and f.fix.applicability is not Applicability.DISPLAY_ONLY else ""
    return f"{f.filename}:{f.range.start.line + 1}:{f.range.start.column + 1}: {f.code}{mark} {f.message}"


def print_findings(findings: list[Finding], fmt: str, fixed_files: int = 0, quiet: bool = False,
                   unsafe_hint: bool = True, out=None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        out.write(json.dumps([finding_to_json(f) for f in findings], indent=2, ensure_ascii=False) + "\n")
        return
    if fmt == "sarif":
        out.write(json.dumps(to_sarif(findings), indent=2, ensure_ascii=False) + "\n")
        return
    for f in findings:
        out.write(format_text_line(f) + "\n")
    if quiet:
        return
    n = len(findings)
    safe = sum(1 for f in findings if f.fix and f.fix.applicability is Applicability.SAFE)
    unsafe = sum(1 for f in findings if f.fix and f.fix.applicability is Applicability.UNSAFE)
    if fixed_files:
        out.write(f"Fixed {fixed_files} file{'s' if fixed_files != 1 else ''}.\n")
    if n == 0:
        out.write("All checks passed!\n")
        return
    out.write(f"Found {n} error{'s' if n != 1 else ''}.\n")
    if safe:
        out.write(f"[*] {safe} fixable with the `--fix` option")
        if unsafe and unsafe_hint:
            out.write(f" ({unsafe} hidden fix{'es' if unsafe != 1 else ''} can be enabled with `--unsafe-fixes`)")
        out.write(".\n")
    elif unsafe and unsafe_hint:
        out.write(f"No fixes available ({unsafe} hidden fix{'es' if unsafe != 1 else ''} can be enabled with "
                  "the `--unsafe-fixes` option).\n")


def to_sarif(findings: list[Finding]) -> dict:
    from . import __version__
    from .registry import all_rules

    rules = all_rules()
    used = sorted({f.code for f in findings} | set(rules))
    rule_index = {c: i for i, c in enumerate(used)}
    level = {"error": "error", "warning": "warning", "info": "note", "hint": "note"}

    def region(r):
        return {"startLine": r.start.line + 1, "startColumn": r.start.column + 1,
                "endLine": r.end.line + 1, "endColumn": r.end.column + 1}

    results = []
    for f in findings:
        res = {
            "ruleId": f.code,
            "ruleIndex": rule_index[f.code],
            "level": level.get(f.severity.value, "warning"),
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": f.filename.replace("\\", "/")},
                                                "region": region(f.range)}}],
        }
        if f.related:
            res["relatedLocations"] = [
                {"id": i, "message": {"text": r.message},
                 "physicalLocation": {"artifactLocation": {"uri": (r.filename or f.filename).replace("\\", "/")},
                                      "region": region(r.range)}}
                for i, r in enumerate(f.related)
            ]
        if f.fix is not None and f.fix.applicability is not Applicability.DISPLAY_ONLY:
            res["fixes"] = [{
                "description": {"text": f.fix.message},
                "artifactChanges": [{
                    "artifactLocation": {"uri": f.filename.replace("\\", "/")},
                    "replacements": [{"deletedRegion": region(e.range), "insertedContent": {"text": e.content}}
                                     for e in f.fix.edits],
                }],
            }]
        results.append(res)
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ddp-lint",
                "version": __version__,
                "informationUri": "https://github.com/ddp-lint/ddp-lint",
                "rules": [
                    {"id": c, "name": rules[c].name if c in rules else c,
                     "shortDescription": {"text": rules[c].name if c in rules else c},
                     "fullDescription": {"text": rules[c].docs().split("\n\n")[1] if c in rules else c},
                     "helpUri": rules[c].url() if c in rules else None,
                     "defaultConfiguration": {"level": level.get(rules[c].severity.value, "warning")}
                     if c in rules else {}}
                    for c in used
                ],
            }},
            "results": results,
        }],
    }
