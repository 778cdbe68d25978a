"""Output formats, as Ruff names them: ``concise`` (one finding per line, the default), ``full``
(source line with a caret, fix preview, related locations), ``json`` (Ruff's schema), ``sarif``
(2.1.0), ``github`` (workflow-command annotations) and ``junit`` (XML)."""
from __future__ import annotations

import sys

import re

from .model import Applicability, Finding
from .urls import REPOSITORY_URL

# -- control characters in human output ----------------------------------------------------------
# C0 (newline, ESC, BEL...), DEL and C1 controls, lone surrogates (undecodable file names), bidi
# overrides and isolates, line/paragraph separators, and the XML non-characters U+FFFE/U+FFFF.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069"
                          "\ud800-\udfff\ufffe\uffff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(m) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def printable(s) -> str:
    """``s`` with every control character written as an escape (``\\n``, ``\\x1b``, ``\\u202e``).

    The one place that makes text from outside (file names, messages, merged reports, source
    lines) safe for a terminal, a CI log and XML: a newline cannot forge another output line (or a
    GitHub Actions ``::error`` command), an ESC/OSC sequence or a BEL never reaches the terminal, and
    the junit format stays well-formed. Every human format uses it; JSON and SARIF stay exact."""
    s = str(s)
    return _UNPRINTABLE.sub(_escape_char, s) if _UNPRINTABLE.search(s) else s


def _loc(pos) -> dict:
    return {"row": pos.line + 1, "column": pos.column + 1}


EMULATED_SUFFIX = " (emulated on CPU)"


def is_runtime(f: Finding) -> bool:
    """A ``ddp-lint run`` finding (DDP9xx): it carries ranks, emulation and details."""
    from .registry import rule_index  # the generated index: no rule module imported to print a finding

    entry = rule_index().get(f.code.upper())
    return (not entry[2]) if entry is not None else f.code.upper().startswith("DDP9")


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


def where(f: Finding) -> str:
    """``FILE:LINE:COL``, or ``FILE:cell N:LINE:COL`` in a notebook (as Ruff writes it)."""
    cell = f"cell {f.cell}:" if f.cell is not None else ""
    return f"{f.filename}:{cell}{f.range.start.line + 1}:{f.range.start.column + 1}"


def _cell_text(text: str | None, f: Finding) -> str | None:
    """The source lines a finding's range refers to: its cell's, in a notebook."""
    if text is None or f.cell is None:
        return text
    from .notebook import Notebook, NotebookError

    try:
        return Notebook.parse(text).cell_text(f.cell)
    except NotebookError:
        return None


def finding_to_json(f: Finding) -> dict:
    fix = None
    if f.fix is not None:
        fix = {
            "applicability": f.fix.applicability.value,
            "message": f.fix.message,
            "edits": [
                {"content": e.content, "location": _loc(e.range.start), "end_location": _loc(e.range.end),
                 **({"cell": e.cell} if e.cell is not None else {})}
                for e in f.fix.edits
            ],
        }
    out = {
        "code": f.code,
        "message": display_message(f, ranks=False),
        "filename": f.filename,
        "cell": f.cell,
        "location": _loc(f.range.start),
        "end_location": _loc(f.range.end),
        "fix": fix,
        "url": f.url,
        "noqa_row": f.noqa_row + 1,
        "severity": f.severity.value,
        "related": [
            {"filename": r.filename or f.filename, "location": _loc(r.range.start),
             "end_location": _loc(r.range.end), "message": r.message,
             **({"cell": r.cell} if r.cell is not None else {})}
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
    return printable(f"{where(f)}: {f.code}{mark} {display_message(f)}")


def print_findings(findings: list[Finding], fmt: str, fixed_files: int = 0, quiet: bool = False,
                   unsafe_hint: bool = True, out=None, sources: dict | None = None,
                   fixed_findings: int | None = None) -> None:
    """Write ``findings`` in format ``fmt``. ``sources`` (filename -> text) feeds the ``full``
    format's source lines; a file missing from it gets the concise line only. ``fixed_findings``
    (``--fix``): the summary counts the fixed and the remaining findings, as Ruff's does."""
    out = out or sys.stdout
    if fmt == "json" or fmt == "sarif":
        import json  # lazy: the text formats never need it (start-up)
    if fmt == "json":
        out.write(json.dumps([finding_to_json(f) for f in findings], indent=2, ensure_ascii=False) + "\n")
        return
    if fmt == "sarif":
        out.write(json.dumps(to_sarif(findings), indent=2, ensure_ascii=False) + "\n")
        return
    if fmt == "github":
        for f in findings:
            out.write(format_github(f) + "\n")
        return
    if fmt == "junit":
        out.write(to_junit(findings))
        return
    for f in findings:
        if fmt == "full":
            out.write(format_full(f, _cell_text((sources or {}).get(f.filename), f)) + "\n")
        else:
            out.write(format_text_line(f) + "\n")
    if quiet:
        return
    n = len(findings)
    safe = sum(1 for f in findings if f.fix and f.fix.applicability is Applicability.SAFE)
    unsafe = sum(1 for f in findings if f.fix and f.fix.applicability is Applicability.UNSAFE)
    if fixed_files:
        out.write(f"Fixed {fixed_files} file{'s' if fixed_files != 1 else ''}.\n")
    if fixed_findings:
        total = n + fixed_findings
        out.write(f"Found {total} error{'s' if total != 1 else ''} ({fixed_findings} fixed, {n} remaining).\n")
        if n == 0:
            return
    elif n == 0:
        out.write("All checks passed!\n")
        return
    else:
        out.write(f"Found {n} error{'s' if n != 1 else ''}.\n")
    if safe:
        out.write(f"[*] {safe} fixable with the `--fix` option")
        if unsafe and unsafe_hint:
            out.write(f" ({unsafe} hidden fix{'es' if unsafe != 1 else ''} can be enabled with `--unsafe-fixes`)")
        out.write(".\n")
    elif unsafe and unsafe_hint:
        out.write(f"No fixes available ({unsafe} hidden fix{'es' if unsafe != 1 else ''} can be enabled with "
                  "the `--unsafe-fixes` option).\n")


# -- full ----------------------------------------------------------------------------------------
def _lines(text: str) -> list[str]:
    from .source import SourceText

    return SourceText(text).lines


def format_full(f: Finding, text: str | None) -> str:
    """Ruff's ``full`` format: the concise line, the source around the finding with a caret under
    it, the fix as a preview (``-`` old / ``+`` new lines), and every related location."""
    out = [format_text_line(f)]
    lines = _lines(text) if text is not None else None
    if lines is not None and 0 <= f.range.start.line < max(len(lines), 1):
        sl, el = f.range.start.line, min(f.range.end.line, len(lines) - 1)
        first, last = max(0, sl - 1), min(len(lines) - 1, el + 1)
        width = len(str(last + 1))
        pad = " " * width
        out.append(f"{pad} |")
        for i in range(first, last + 1):
            line = lines[i].replace("\t", " ")
            out.append(f"{i + 1:>{width}} | {printable(line)}".rstrip())
            if sl <= i <= el:
                a = f.range.start.column if i == sl else len(lines[i]) - len(lines[i].lstrip())
                b = f.range.end.column if i == el else len(lines[i])
                if i == sl and lines[i].startswith("\ufeff"):
                    a, b = max(0, a - 1), max(0, b - 1)  # the BOM is not printed
                    line = line[1:]
                a, b = len(printable(line[:a])), len(printable(line[:b]))  # columns of the escaped line
                carets = max(1, b - a)
                label = f" {f.code}" if i == el else ""
                out.append(f"{pad} | {' ' * a}{'^' * carets}{label}")
        out.append(f"{pad} |")
        if f.fix is not None:
            out.extend(_fix_preview(f, text, pad))
    elif f.fix is not None:
        out.append(printable(f"  = help: {f.fix.message}"))
    for r in f.related:
        at = (r.filename or f.filename) + (f":cell {r.cell}" if r.cell is not None else "")
        out.append(printable(f"  = note: {at}:{r.range.start.line + 1}:{r.range.start.column + 1}: {r.message}"))
    return "\n".join(out) + "\n"


def _fix_preview(f: Finding, text: str, pad: str) -> list[str]:
    from .fixes import apply_edits

    kind = {"safe": "Safe fix", "unsafe": "Unsafe fix", "display-only": "Suggested fix (not applied)"}
    out = [printable(f"{pad} = help: {f.fix.message}"), "", f"  {kind.get(f.fix.applicability.value, 'Fix')}:"]
    edits = f.fix.edits
    if f.cell is not None:  # a notebook: the preview shows the finding's cell
        edits = [e for e in edits if e.cell in (None, f.cell)]
        if not edits:
            return out[:1]
    try:
        new = apply_edits(text, edits)
    except (ValueError, IndexError):
        return out[:1]
    import difflib

    old_l, new_l = text.splitlines(), new.splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_l, new_l, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for i in range(i1, i2):
            out.append(f"  {i + 1:>{len(pad)}} - {printable(old_l[i])}".rstrip())
        for j in range(j1, j2):
            out.append(f"  {j + 1:>{len(pad)}} + {printable(new_l[j])}".rstrip())
    return out


# -- github --------------------------------------------------------------------------------------
def _gh_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(s: str) -> str:
    return _gh_data(s).replace(":", "%3A").replace(",", "%2C")


def format_github(f: Finding) -> str:
    """A GitHub Actions workflow command; GitHub shows it as an annotation on the line. Control
    characters are escaped first (``printable``): no ESC/BEL reaches the log, no newline a command."""
    level = {"error": "error", "warning": "warning"}.get(f.severity.value, "notice")
    props = ",".join([
        f"title={_gh_prop(printable(f'ddp-lint ({f.code})'))}",
        f"file={_gh_prop(printable(f.filename))}",
        f"line={f.range.start.line + 1}", f"col={f.range.start.column + 1}",
        f"endLine={f.range.end.line + 1}", f"endColumn={f.range.end.column + 1}",
    ])
    return f"::{level} {props}::{_gh_data(printable(f'{where(f)}: {f.code} {f.message}'))}"


# -- junit ---------------------------------------------------------------------------------------
def to_junit(findings: list[Finding]) -> str:
    """JUnit XML: one test suite per file, one failing test case per finding (Ruff's layout)."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="ddp-lint", tests=str(len(findings)),
                      failures=str(len(findings)), errors="0")
    if not findings:
        suite = ET.SubElement(root, "testsuite", name="ddp-lint", tests="1", disabled="0", errors="0",
                              failures="0", package="org.ddp-lint")
        ET.SubElement(suite, "testcase", name="No errors found")
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.filename, []).append(f)
    for filename, fs in by_file.items():
        filename = printable(filename)  # XML 1.0 cannot carry most control characters, even escaped
        suite = ET.SubElement(root, "testsuite", name=filename, tests=str(len(fs)), disabled="0",
                              errors="0", failures=str(len(fs)), package="org.ddp-lint")
        for f in fs:
            line, col = f.range.start.line + 1, f.range.start.column + 1
            case = ET.SubElement(suite, "testcase", name=printable(f"org.ddp-lint.{f.code}"), classname=filename,
                                 line=str(line), column=str(col))
            fail = ET.SubElement(case, "failure", message=printable(f.message))
            fail.text = printable(f"line {line}, col {col}, {f.message}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


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
                "informationUri": REPOSITORY_URL,
                "rules": [_sarif_rule(c, rules.get(c), level) for c in used],
            }},
            "results": results,
        }],
    }


def _doc_sections(docs: str) -> dict[str, str]:
    """``## Heading`` -> section body (Markdown, stripped)."""
    out: dict[str, str] = {}
    head, body = "", []
    for line in docs.splitlines():
        if line.startswith("## "):
            out[head] = "\n".join(body).strip()
            head, body = line[3:].strip(), []
        else:
            body.append(line)
    out[head] = "\n".join(body).strip()
    return out


def _one_line(md: str) -> str:
    return " ".join(md.split())


_ACRONYMS = {"nccl": "NCCL", "ddp": "DDP", "cpu": "CPU", "gpu": "GPU", "cuda": "CUDA", "syncbn": "SyncBN"}


def _drop_asides(text: str) -> str:
    """Remove parenthetical asides outside `code spans`: "Checks for X (a, `f()`) that" -> "Checks
    for X that"; parentheses inside a code span (`dist.get_rank()`) stay."""
    out: list[str] = []
    depth, in_code = 0, False
    for ch in text:
        if ch == "`":
            in_code = not in_code
        elif not in_code and ch == "(":
            if depth == 0:
                while out and out[-1] == " ":
                    out.pop()
            depth += 1
            continue
        elif not in_code and ch == ")" and depth:
            depth -= 1
            continue
        if depth == 0:
            out.append(ch)
    return "".join(out) if depth == 0 and not in_code else text


def rule_summary(rule, limit: int = 160) -> str:
    """One line: the first sentence of the rule's "What it does" section, without its parenthetical
    asides and, when still long, cut before its first colon or semicolon (the list that follows)."""
    import re

    what = _one_line(_doc_sections(rule.docs()).get("What it does", ""))
    m = re.search(r"(?<![.])(?<!e\.g)(?<!i\.e)(?<!vs)\.(?=\s|$)", what)
    first = (what[:m.start()] if m else what).rstrip(".")
    first = _drop_asides(first)
    for sep in (", for example", ": ", "; ", " — "):
        if len(first) > limit and sep in first:
            first = first[:first.index(sep)]
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    if not first:
        words = [_ACRONYMS.get(w, w) for w in rule.name.split("-")]
        first = " ".join(words)
        first = first[:1].upper() + first[1:]
    return first if first.endswith("…") else first + "."


def _sarif_rule(code: str, rule, level: dict) -> dict:
    if rule is None:
        return {"id": code, "name": code, "shortDescription": {"text": code}}
    docs = rule.docs()
    what = _doc_sections(docs).get("What it does", "") or rule.name
    return {
        "id": code,
        "name": rule.name,
        "shortDescription": {"text": rule_summary(rule)},
        "fullDescription": {"text": _one_line(what), "markdown": what},
        "help": {"text": docs, "markdown": docs},
        "helpUri": rule.url(),
        "defaultConfiguration": {"level": level.get(rule.severity.value, "warning")},
        "properties": {"tags": [rule.severity.value], "fix": rule.fix_availability},
    }
