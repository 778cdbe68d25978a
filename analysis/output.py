"""Output formats: text (one finding per line), JSON in Ruff's schema, SARIF 2.1.0."""
from __future__ import annotations

import json
import sys

from .model import Applicability, Finding


def _loc(pos) -> dict:
    return {"row": pos.line + 1, "column": pos.column + 1}


EMULATED_SUFFIX = " (emulated on CPU)"


def is_runtime(f: Finding) -> bool:
    """A ``ddp-lint run`` finding (DDP9xx): it carries ranks, emulation and details."""
    from .registry import get_rule

    rule = get_rule(f.code)
    return (not rule.static) if rule is not None else f.code.upper().startswith("DDP9")


def ranks_suffix(ranks) -> str:
    """`` [rank 1]`` / `` [ranks 0, 1]``; empty for no ranks."""
    if not ranks:
        return ""
    return f" [{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(str(r) for r in ranks)}]"


def display_message(f: Finding, *, ranks: bool = True) -> str:
    """The one place a finding's message is assembled for people (CLI text, JSON, the editor).
    Static findings: the message. Runtime findings add, from their fields: the static rule that
    explains them, whether the run was emulated, and (``ranks``) the ranks."""
    msg = f.message
    if not is_runtime(f):
        return msg
    details = f.details if isinstance(f.details, dict) else {}
    rule = details.get("static_rule")
    if rule:
        msg += f" (see {rule})"
    if f.emulated:
        msg += EMULATED_SUFFIX
    if ranks:
        msg += ranks_suffix(f.ranks)
    return msg


def related_message(r) -> str:
    """A related location's message; its ranks are added unless the text already names them
    (the runtime's own related messages start with their rank list)."""
    if r.ranks and "rank" not in r.message.lower():
        return r.message + ranks_suffix(r.ranks)
    return r.message


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
    out = {
        "code": f.code,
        "message": display_message(f, ranks=False),
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
    if is_runtime(f):  # ranks are fields here, not text
        out.update({"name": f.name, "ranks": list(f.ranks), "emulated": f.emulated, "details": f.details})
        for rj, r in zip(out["related"], f.related):
            rj["ranks"] = list(r.ranks)
    return out


def format_text_line(f: Finding) -> str:
    mark = " [*]" if f.fix is not None and f.fix.applicability is not Applicability.DISPLAY_ONLY else ""
    return f"{f.filename}:{f.range.start.line + 1}:{f.range.start.column + 1}: {f.code}{mark} {display_message(f)}"


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
