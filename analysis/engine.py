"""The static check: parse once, traverse once, run the enabled rules, filter by noqa.

The text gate comes first: a file whose text no enabled rule's gate admits (``Rule.gate_of``: "torch"
plus the rule's declared needles) is not parsed at all, so it has no finding, not even DDP000 (a
syntax error is reported only for files that pass the gate: a file that cannot contain a
torch.distributed mistake is not ddp-lint's to judge). Inside a parsed file each rule runs only when
its own gate admits the text, so gated and ungated runs find the same things by construction, and
``tests/test_gate.py`` checks every declaration against every fixture and the bench corpus.

``check_source`` never raises on user input: a syntax error, a NUL byte or pathological nesting
becomes one DDP000 finding; a bug inside one rule is recorded in ``CheckResult.errors`` and the
other rules still report.
"""
from __future__ import annotations

import ast
import gc
import re
import time
import unicodedata
import warnings
from dataclasses import dataclass, field

from _thread import allocate_lock  # `threading` costs start-up; a lock is all the pause needs

from .config import Settings
from .model import Finding, Position, Range, Severity
from .registry import DOCS_BASE_URL, NoCase, load_rule, rule_index
from .source import lowered, nfkc

# The analysis modules (context, semantic, source, noqa) are imported by the first file that passes
# the text gate: a run whose files are all gated out never loads them (start-up, issue 31).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from .source import SourceText

SYNTAX_CODE = "DDP000"
SYNTAX_NAME = "syntax-error"

_DEFAULT_SETTINGS = Settings()
_EOL = re.compile(r"\r\n|\r|\n")
_instances: dict[str, object] = {}


@dataclass
class CheckResult:
    findings: list[Finding]
    syntax_error: Finding | None = None
    errors: list[str] = field(default_factory=list)  # internal rule failures (bugs), for logs
    source: SourceText | None = None
    # Other files whose content this result depends on, as (absolute path, sha256 hex of its bytes,
    # ``cache.content_digest``): a cross-file analysis that reads an imported project module reports
    # it here, and the CLI cache (analysis/cache.py) stores the list with the findings and re-checks
    # this file when any of them changed or is gone. Empty for per-file rules.
    dependencies: list[tuple[str, str | None]] = field(default_factory=list)  # None: probed, absent
    gated_out: bool = False  # no enabled rule's text gate admitted the file: it was not parsed


def _rule_instance(code: str):
    inst = _instances.get(code)
    if inst is None:
        inst = _instances[code] = load_rule(code)()  # imports this rule's module only
    return inst


# -- the text gate -------------------------------------------------------------------------------
_gate_cache: dict[frozenset, tuple] = {}


def _gates(codes: frozenset[str]) -> tuple:
    """((code, groups), ...) for the static rules among ``codes``, cached per selection."""
    got = _gate_cache.get(codes)
    if got is None:
        idx = rule_index()  # no rule module imported to gate a file
        got = tuple((c, idx[c][3]) for c in sorted(codes) if c in idx and idx[c][2])
        if len(_gate_cache) > 256:
            _gate_cache.clear()
        _gate_cache[codes] = got
    return got


def _admitted(text: str, gates) -> list[str]:
    memo: dict[str, bool] = {}
    lower = None
    out = []
    get = memo.get
    for code, groups in gates:
        for group in groups:
            for n in group:
                if get(n):  # a needle already found decides the group without scanning the text
                    break
            else:
                for n in group:
                    hit = get(n)
                    if hit is None:
                        if isinstance(n, NoCase):
                            if lower is None:
                                lower = lowered(text)
                            hit = n.lower() in lower
                        else:
                            hit = n in text
                        memo[n] = hit
                    if hit:
                        break
                else:
                    break  # no needle of this group: the rule cannot fire
        else:
            out.append(code)
    return out


def admitted_codes(text: str, codes: frozenset[str]) -> list[str]:
    """The codes among ``codes`` whose text gate admits ``text`` (in code order)."""
    gates = _gates(codes)
    if not gates:
        return []
    out = _admitted(text, gates)
    if len(out) < len(gates) and not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        # identifiers are NFKC-normalised by the parser: a full-width "ｔｏｒｃｈ" is `torch`. The raw
        # text's matches stand; the normalised text may admit more (a text already in that form,
        # most non-ASCII sources, would only be scanned twice).
        more = set(_admitted(nfkc(text), gates))
        if more - set(out):
            out = [c for c, _ in gates if c in more or c in out]
    return out


def passes_gate(text: str, codes: frozenset[str], filename: str | None = None) -> bool:
    """True when at least one rule among ``codes`` may fire on ``text`` (the file is worth parsing).
    With ``filename``, the reach gate of the flow rules counts too (``admitted_for``)."""
    if filename is None:
        return bool(admitted_codes(text, codes))
    return bool(admitted_for(text, codes, filename)[0])


def admitted_for(text: str, codes: frozenset[str], filename: str | None) -> tuple[list[str], dict[str, str]]:
    """The codes whose text gate admits ``text`` and, for a rule that ``requires_reach``, whose
    collective site may be reached from the file (``flow.reach``); with the other files that
    answer read, {path: content hash}, for the cache."""
    out = admitted_codes(text, codes)
    if not out:
        return out, {}
    idx = rule_index()
    keep: list[str] = []
    deps: dict[str, str] = {}
    collective = None
    for c in out:
        _m, _on, _static, _groups, requires_reach, own = idx[c]
        if requires_reach:
            if collective is None:
                from .flow.reach import reaches  # lazy: only files a flow rule's text gate admits

                collective = reaches(filename, text)
            got = collective
        elif own:
            got = load_rule(c).reach(text, filename)
        else:
            got = None
        if got is None or got[0]:
            keep.append(c)
        else:
            deps.update(got[1])
    return keep, (deps if len(keep) < len(out) else {})


def parse(text: str, filename: str = "<unknown>"):
    """ast.parse that turns every failure into (None, DDP000 finding)."""
    src_for_ast = text[1:] if text.startswith("\ufeff") else text
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for invalid escapes etc.
            return ast.parse(src_for_ast, filename=filename), None
    except SyntaxError as e:
        if e.lineno is None and "\0" in text:  # 3.11.4+: a NUL byte is a SyntaxError without position
            return None, _nul_error(src_for_ast, e)
        from .rules.ddp000_syntax_error import newer_python_hint

        hint = newer_python_hint(src_for_ast, e.lineno)
        return None, ("syntax error: " + (e.msg or "invalid syntax") + (f": {hint}" if hint else ""),
                      e.lineno, e.offset, e.end_lineno, e.end_offset)
    except ValueError as e:  # "source code string cannot contain null bytes"
        return None, _nul_error(src_for_ast, e)
    except (RecursionError, MemoryError):
        return None, ("syntax error: the file is nested too deeply for Python's parser", 1, 1, None, None)


def _nul_error(text: str, e: Exception):
    """Position (1-based, like SyntaxError) of the first NUL byte, counting lines as ast does."""
    off = max(text.find("\0"), 0)
    line = 1 + sum(1 for _ in _EOL.finditer(text, 0, off))
    last = [m.end() for m in _EOL.finditer(text, 0, off)]
    col = off - (last[-1] if last else 0)
    return (f"syntax error: {getattr(e, 'msg', None) or e}", line, col + 1, None, None)


def _syntax_finding(src: SourceText, filename: str, info) -> Finding:
    msg, lineno, offset, end_lineno, end_offset = info
    nlines = len(src.lines)
    line = min(max((lineno or 1) - 1, 0), nlines - 1)
    text_line = src.line(line)
    # SyntaxError.offset is 1-based and counts characters (the BOM-stripped text on line 0)
    col = max((offset or 1) - 1, 0) + (1 if (line == 0 and src.bom) else 0)
    col = min(col, len(text_line))
    end = Position(line, min(col + 1, len(text_line))) if col < len(text_line) else Position(line, col)
    if end_lineno is not None and end_offset is not None and end_lineno - 1 == line:
        ec = min(max(end_offset - 1, col), len(text_line))
        if ec > col:
            end = Position(line, ec)
    return Finding(
        code=SYNTAX_CODE,
        name=SYNTAX_NAME,
        message=msg,
        severity=Severity.ERROR,
        range=Range(Position(line, col), end),
        filename=filename,
        url=f"{DOCS_BASE_URL}{SYNTAX_CODE}.md",
    )


# The cyclic garbage collector is paused while one check builds and walks its tree: ast.parse
# allocates a GC-tracked object per node, and with the collector on CPython rescans the growing tree
# again and again while parsing (a 10,000-line script parses about 1.4x slower with the GC on).
# The nodes carry parent pointers (cycles); when this check parsed the tree itself it unlinks them
# before returning (Semantic.release), so the dead tree is freed by reference counting right here
# instead of lingering as cyclic garbage that full collections must find later.
_gc_lock = allocate_lock()
_gc_depth = 0
_gc_was_enabled = False


def _gc_pause() -> None:
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1


def _gc_resume() -> None:
    global _gc_depth
    with _gc_lock:
        _gc_depth -= 1
        if _gc_depth == 0 and _gc_was_enabled:
            gc.enable()


def check_source(
    text: str,
    filename: str = "<stdin>",
    settings: Settings | None = None,
    *,
    codes: frozenset[str] | None = None,
    apply_noqa: bool = True,
    tree: ast.Module | None = None,
    gate: bool = True,
) -> CheckResult:
    """``gate=False`` parses every file and runs every enabled rule whatever the text (the
    reference run the gate tests compare against)."""
    settings = settings or _DEFAULT_SETTINGS
    if not settings.read_project_files:
        from .flow import project

        # the gate's reach and the flow layer see only the open documents (untrusted server)
        with project.documents_only():
            return _check(text, filename, settings, codes, apply_noqa, tree, gate)
    return _check(text, filename, settings, codes, apply_noqa, tree, gate)


def _check(text, filename, settings, codes, apply_noqa, tree, gate) -> CheckResult:
    if codes is None:
        codes = settings.enabled_codes(filename)
    deps = None
    if gate:
        admitted, deps = admitted_for(text, codes, filename)
        if not admitted:
            return CheckResult([], gated_out=True, dependencies=sorted(deps.items()))
    else:
        idx = rule_index()
        admitted = [c for c in sorted(codes) if c in idx and idx[c][2]]
    from .flow import project

    _gc_pause()
    try:
        with project.in_use():  # another thread's check must not release a view this one reads
            result = _check_source(text, filename, settings, admitted, apply_noqa, tree, codes)
    finally:
        _gc_resume()
    if deps:  # the flow rules were gated out by what the imported modules hold
        result.dependencies = sorted({**dict(deps), **dict(result.dependencies)}.items())
    return result


UNUSED_NOQA = "DDP005"  # judges the other rules' findings against the noqa comments, after them


def _check_source(text, filename, settings, admitted, apply_noqa, tree, codes=frozenset()) -> CheckResult:
    from .context import Context
    from .noqa import file_exemption
    from .semantic import Semantic
    from .source import SourceText

    src = SourceText(text)
    owned = tree is None  # parsed here: nobody else can hold the tree once the rules are done
    if tree is None:
        tree, err = parse(text, filename)
        if tree is None:
            f = _syntax_finding(src, filename, err)
            return CheckResult([f], syntax_error=f, source=src)
    result = CheckResult([], source=src)
    rules = [_rule_instance(c) for c in admitted]
    if not rules:
        return result
    wanted = set()
    for r in rules:
        wanted.update(r.node_types)
    try:
        sem = Semantic(tree, wanted, owned=owned)
    except RecursionError:
        f = _syntax_finding(src, filename, ("syntax error: the file is nested too deeply to analyse", 1, 1, None, None))
        return CheckResult([f], syntax_error=f, source=src)
    ctx = Context(src, sem, filename)
    start = time.thread_time()
    skipped: list[str] = []
    big = len(sem._nodes or ()) > MAX_NODES
    for r in rules:
        # the work cap: past ``MAX_NODES`` the rules that follow collectives through the program
        # (the flow rules) are not run, and past ``WORK_BUDGET_S`` of CPU no further rule starts;
        # either way the file gets one finding that says so, never an endless check
        if (big and r.requires_reach) or time.thread_time() - start > WORK_BUDGET_S:
            skipped.append(r.code)
            continue
        ctx._rule = r
        try:
            for t in r.node_types:
                for node in sem.by_type.get(t, ()):
                    r.visit(node, ctx)
            r.finish(ctx)
        except Exception:  # a rule bug must never take the others down
            import traceback  # lazy: only a rule bug needs it (start-up of the CLI)

            result.errors.append(f"{r.code}: {traceback.format_exc()}")
            ctx.findings = [f for f in ctx.findings if f.code != r.code]
    if skipped:
        ctx.findings.append(_too_large(src, filename, len(sem._nodes or ()), big, skipped))
    an = ctx._memo.get("flow.analysis")
    if an is not None:
        result.dependencies = list(an.dependencies())
    if owned:
        # break the cycles of this check's analyses (the flow layer's hub and its evaluators point
        # at each other), so that they and the tree go at once by reference counting instead of
        # waiting for the cyclic collector (about 5,000 objects a check)
        if an is not None:
            an.release()
        ctx._memo.clear()
        sem.release()
    findings = ctx.findings
    if UNUSED_NOQA in admitted:
        try:
            findings = findings + _rule_instance(UNUSED_NOQA).directive_findings(src, filename, findings, codes)
        except Exception:  # a rule bug must never take the others down
            import traceback

            result.errors.append(f"{UNUSED_NOQA}: {traceback.format_exc()}")
    if apply_noqa and findings:
        findings = [f for f in findings if not _suppressed(f, src)]
        exempt = file_exemption(text)  # `# ddp-lint: noqa` (every code) or `# ddp-lint: noqa: CODES`
        if exempt is not None:
            findings = [f for f in findings if not (exempt == "all" or f.code in exempt)]
    if settings.severity:
        for f in findings:
            lvl = settings.severity.get(f.code)
            if lvl:
                f.severity = Severity(lvl)
    findings.sort(key=Finding.sort_key)
    result.findings = findings
    return result


# The per-file work cap (issue 31): every rule is linear in the file's size, so these only stop a
# file far outside what a person writes (generated code) from holding the editor or a CI run.
MAX_NODES = 3_000_000  # syntax-tree nodes (about 300,000 lines of code)
WORK_BUDGET_S = 30.0  # CPU seconds of rules for one file


def _too_large(src: SourceText, filename: str, nodes: int, big: bool, skipped: list[str]) -> Finding:
    why = (f"{nodes:,} syntax-tree nodes, over the cap of {MAX_NODES:,}" if big
           else f"the rules took over {WORK_BUDGET_S:g} s of CPU")
    return Finding(
        code=SYNTAX_CODE,
        name=SYNTAX_NAME,
        message=f"file too large to analyse fully ({why}): {', '.join(skipped)} not run on it",
        severity=Severity.WARNING,
        range=Range(Position(0, 0), Position(0, min(1, len(src.line(0))))),
        filename=filename,
        url=f"{DOCS_BASE_URL}{SYNTAX_CODE}.md",
    )


def _suppressed(f: Finding, src: SourceText) -> bool:
    from .noqa import parse_noqa

    got = parse_noqa(src.line(f.noqa_row))
    return got is not None and (got == "all" or f.code in got)


def check_file(path: str, settings: Settings | None = None) -> CheckResult:
    from .io import read_source

    text = read_source(path)
    return check_source(text, path, settings)
