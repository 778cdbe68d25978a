"""Pathological documents: deep nesting, huge files, NUL bytes, BOM, CRLF / lone CR, tabs, non-ASCII
identifiers, Unicode line separators. The engine answers (DDP000 when Python cannot parse), ranges
stay in bounds, and findings land on the same code whatever the encoding details."""
from __future__ import annotations

import bisect
import builtins
import io
import keyword
import re
import threading
import tokenize

import pytest

from ddp_lint.analysis.engine import check_source
from tests.fuzz.support import ALL, Doc, check, check_invariants, corpus_files, read

SEED2 = next(p for p in corpus_files() if p.name == "seed_problem2_invalid_usage.py")
# the second line passes the text gate (a file no rule could fire on is not parsed at all)
HEADER = "import torch\nimport torch.distributed as dist; from torch.distributed import init_process_group\n"


def only_syntax_error(text: str):
    (f,) = check_invariants(text, fixes=False)
    assert f.code == "DDP000" and f.message.startswith("syntax error: ")
    return f


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("(", ")"), ("{", "}")])
def test_1000_nested_brackets(opener, closer):
    f = only_syntax_error(HEADER + "x = " + opener * 1000 + closer * 1000 + "\n")
    assert "nested" in f.message


def test_1000_nested_ifs():
    text = HEADER + "".join(" " * i + "if x:\n" for i in range(1000)) + " " * 1000 + "dist.barrier()\n"
    f = only_syntax_error(text)
    assert "indentation" in f.message


@pytest.mark.parametrize("expr", [
    "+".join(["1"] * 100_000),  # a left-deep BinOp chain
    "dist" + ".a" * 100_000,
    "f" + "()" * 100_000,
    "not " * 100_000 + "x",
    "lambda: " * 10_000 + "0",
    "-" * 100_000 + "1",
    "'nccl' if x else " * 20_000 + "'gloo'",
])
def test_too_deep_for_the_parser_is_a_finding(expr):
    """CPython's parser gives up with RecursionError / MemoryError: a clear DDP000, not a crash."""
    f = only_syntax_error(HEADER + "y = " + expr + "\n")
    assert "nested" in f.message or "too" in f.message


@pytest.mark.parametrize("n", [500, 1500, 2500])
def test_deep_but_parsable_expressions_reach_the_rules(n):
    """Deep trees that *do* parse go through the one traversal and every rule without recursion
    errors (rule crashes would show in CheckResult.errors, which check() asserts empty)."""
    text = (HEADER + 'dist.init_process_group("nccl")\n'
            + "out = [None]" + " * 1" * n + "\n"
            + "dist.all_gather_object(out, " + " + ".join(["1"] * n) + ")\n"
            + "dist.init_process_group(" + "'nccl' if x else " * min(n, 900) + "'gloo')\n")
    codes = [f.code for f in check_invariants(text)]
    assert "DDP000" not in codes and "DDP001" in codes


def test_deep_nesting_in_a_worker_thread():
    """The language server analyses off the event loop, in threads with their own (smaller) stacks."""
    results, errors = [], []

    def work():
        try:
            for text in (HEADER + "x = " + "[" * 1000 + "]" * 1000,
                         HEADER + "y = " + "+".join(["1"] * 100_000),
                         HEADER + "out = [None]" + " * 1" * 2500 + "\ndist.all_gather_object(out, 1)\n"):
                results.append(check_source(text, "t.py", ALL).findings)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert not t.is_alive() and not errors and len(results) == 3


def test_50000_line_file():
    body = read(SEED2).split('if __name__ == "__main__":')[0]
    fn = ("\ndef step_{i}(rank):\n    out = [None for _ in range(3)]\n"
          "    dist.all_gather_object(out, rank)\n    return out  # é 中文 🎉\n")
    n = 10_000
    text = body + "".join(fn.format(i=i) for i in range(n)) + 'dist.init_process_group("nccl")\n'
    assert text.count("\n") >= 50_000
    findings = check_invariants(text, fixes=False)
    ddp101 = [f for f in findings if f.code == "DDP101"]
    assert len(ddp101) == n
    doc = Doc(text)
    for f in ddp101[:: n // 50]:
        r = f.range
        assert text[doc.offset(r.start.line, r.start.column):doc.offset(r.end.line, r.end.column)] \
            == "[None for _ in range(3)]"
    assert [f.code for f in findings].count("DDP001") == 1


@pytest.mark.parametrize("where", ["start", "middle", "end", "in a string", "in a comment", "many"])
def test_nul_bytes(where):
    text = read(SEED2)
    mid = text.index("dist.all_gather_object")
    text = {
        "start": "\0" + text,
        "middle": text[:mid] + "\0" + text[mid:],
        "end": text + "\0",
        "in a string": text.replace('"foo"', '"f\0o"'),
        "in a comment": text.replace("# any picklable object", "# any \0 object"),
        "many": "\0".join(text.split("\n")[:5]) + "\0" * 1000,
    }[where]
    f = only_syntax_error(text)
    assert "null bytes" in f.message
    first = text.index("\0")
    doc = Doc(text)
    assert doc.offset(f.range.start.line, f.range.start.column) == first


# -- the same program, spelled differently --------------------------------------------------------
def _spans(text: str, findings) -> list[tuple[str, str]]:
    doc = Doc(text)
    return [(f.code, " ".join(_COMMENT.sub("", text[doc.offset(f.range.start.line, f.range.start.column):
                                                    doc.offset(f.range.end.line, f.range.end.column)]).split()))
            for f in findings]  # comments and whitespace (incl. line endings, tabs) normalised


_COMMENT = re.compile(r"#[^\r\n]*")


PREFIX = "変数ñ_"  # non-ASCII, kept in front of the old name so that name heuristics still match


def _rename(text: str) -> tuple[str, list[int]]:
    """Prefix every variable-like NAME token with PREFIX (keywords, keyword arguments and names
    after a dot are kept: they are API spellings). Returns the new text and the old offsets."""
    starts = [0]
    for line in io.StringIO(text).readlines():
        starts.append(starts[-1] + len(line))
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    offsets = []
    depth = 0
    for i, tok in enumerate(toks):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        if tok.type != tokenize.NAME or keyword.iskeyword(tok.string) or keyword.issoftkeyword(tok.string):
            continue
        prev = toks[i - 1].string if i else ""
        nxt = toks[i + 1].string if i + 1 < len(toks) else ""
        if prev == "." or (depth and nxt == "=") or tok.string in dir(builtins) or tok.string in _API_NAMES:
            continue
        offsets.append(starts[tok.start[0] - 1] + tok.start[1])
    for off in reversed(offsets):
        text = text[:off] + PREFIX + text[off:]
    return text, offsets


def _old_offset(new: int, inserted: list[int]) -> int:
    """Offset in the original text of offset ``new`` of the renamed text."""
    k = bisect.bisect_left([o + i * len(PREFIX) for i, o in enumerate(inserted)], new)
    return new - k * len(PREFIX)


# module names and imported API names keep their spelling
_API_NAMES = {"torch", "os", "sys", "dist", "nn", "mp", "DDP", "D", "c10d", "torchvision", "logging", "DataLoader",
              "DistributedSampler", "Dataset", "TensorDataset", "DistributedDataParallel", "F", "optim", "np",
              "init_process_group", "all_gather_object", "barrier", "get_rank", "get_world_size", "FSDP",
              "annotations", "functools", "time", "self", "cls", "datetime", "argparse", "random", "math", "json", "pickle"}


def _mixed_eol(t: str) -> str:
    lines = t.split("\n")
    out = []
    for i, ln in enumerate(lines[:-1]):
        eol = ("\r\n", "\r", "\n")[i % 3]
        if eol == "\r" and i + 1 < len(lines) and (lines[i + 1] == "" or lines[i + 1].startswith("\n")):
            eol = "\r\n"  # "\r" then an empty line's "\n" would read as one "\r\n"
        out.append(ln + eol)
    return "".join(out) + lines[-1]


VARIANTS = {
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "lone-cr": lambda t: t.replace("\n", "\r"),
    "mixed-eol": lambda t: _mixed_eol(t),
    "bom": lambda t: "\ufeff" + t,
    "bom-crlf": lambda t: "\ufeff" + t.replace("\n", "\r\n"),
    "tabs": lambda t: re.sub(r"(?m)^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), t),
    "form-feed": lambda t: t.replace("\n\n", "\n\x0c\n"),
    "unicode-separators-in-comments": lambda t: re.sub(r"(?m)^(\s*)#", "\\1# \u2028 \u2029 \x1c \x85", t),
    "cjk-comments": lambda t: re.sub(r"(?m)^(\s*)(\S)", lambda m: f"{m.group(1)}# 注释 😀 emoji\n{m.group(1)}{m.group(2)}"
                                     if m.group(2) != "#" else m.group(0), t, count=0),
}


COMMENT_FINDINGS = {"DDP005"}  # rules whose findings sit on a comment


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("path", [p for p in corpus_files() if p.suffix == ".py" and "bad_" in p.name or
                                  p.name.startswith(("seed_problem", "fix_"))],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_variants_find_the_same_code(path, variant):
    text = read(path)
    base = check(text)
    if any(f.code == "DDP000" for f in base):
        pytest.skip("not a parsable fixture")
    new = VARIANTS[variant](text)
    got = check_invariants(new)
    assert _spans(new, got) == _spans(text, base), f"{variant} changes what is found"
    if variant in ("crlf", "lone-cr", "mixed-eol", "form-feed", "unicode-separators-in-comments"):
        # a finding ON a comment (DDP005, the noqa directive itself) moves when the variant writes into
        # that comment; its line must not, and every other finding must keep its exact range
        def spans(fs):
            return [(f.code, f.range.start.line) if variant == "unicode-separators-in-comments" and
                    f.code in COMMENT_FINDINGS else (f.code, f.range) for f in fs]
        assert spans(got) == spans(base)
    elif variant != "cjk-comments":  # same lines; tabs and a BOM shift columns
        lines = lambda fs: [(f.code, f.range.start.line, f.range.end.line) for f in fs]  # noqa: E731
        assert lines(got) == lines(base)


@pytest.mark.parametrize("path", [p for p in corpus_files() if p.name.startswith(("seed_problem", "bad_", "fix_"))
                                  and p.suffix == ".py"], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_non_ascii_identifiers(path):
    """Columns count code points: a non-ASCII prefix on every variable shifts the columns after it
    on each line. Rules may legitimately judge renamed variables differently (names carry meaning),
    so this does not compare findings; it maps each finding back to the original text and checks
    that it covers exactly the same code."""
    text = read(path)
    if any(f.code == "DDP000" for f in check(text)):
        pytest.skip("not a parsable fixture")
    new, inserted = _rename(text)
    got = check_invariants(new)  # (a file without variables is checked unchanged)
    doc, ndoc = Doc(text), Doc(new)
    for f in got:
        r = f.range
        s, e = ndoc.offset(r.start.line, r.start.column), ndoc.offset(r.end.line, r.end.column)
        assert text[_old_offset(s, inserted):_old_offset(e, inserted)] == new[s:e].replace(PREFIX, ""), (
            f"{f.code} range {r} does not cover whole code points/names: {new[s:e]!r}")
        # the line of the finding is the same line in both texts
        assert doc.starts[r.start.line] <= _old_offset(s, inserted)
