from ..model import Severity
from ..registry import Rule


class SyntaxErrorRule(Rule):
    """
    ## What it does
    Reports a file that Python cannot parse (mid-typing, a NUL byte, an undecodable file, or
    nesting deeper than CPython's parser allows). It is reported once, at the error's position.
    Syntax of a newer Python than the one running ddp-lint (type parameters and `type` aliases, or an
    f-string that reuses its own quote inside `{...}`: 3.12, under Python 3.11, say) is reported as
    such, with the version the file needs.

    ## Why is this bad?
    Python raises `SyntaxError` before any rank starts, and no other rule can look at the file.

    ## Example
    ```python
    dist.all_gather_object(output, metrics
    ```

    ## Use instead
    ```python
    dist.all_gather_object(output, metrics)
    ```

    ## Fix safety
    There is no fix.

    The same code, as a warning at the top of the file, says that a file was too large to analyse
    fully: over 3,000,000 syntax-tree nodes (about 300,000 lines: generated code) the rules that
    follow collectives through the program are not run, and once the rules have spent 30 s of CPU
    on one file no further rule starts. The message names the rules that were not run.

    In the language server, the findings of the last file version that parsed are kept (not
    re-published) while the file has a syntax error, so that typing a line does not make every
    other diagnostic flicker away.
    """

    code = "DDP000"
    name = "syntax-error"
    severity = Severity.ERROR
    static = False


# -- syntax newer than the running Python ---------------------------------------------------------
# (pattern on the line of the error, Python version that accepts it, what it is). Checked only when
# the running Python is older than that version and the file fails to parse on that line, so a
# match can only turn "invalid syntax" into "invalid syntax *here*, which Python 3.x accepts".
_NEWER_SYNTAX = (
    (r"^\s*type\s+[A-Za-z_]\w*\s*(\[[^\]]*\])?\s*=", (3, 12), "a `type` alias statement, PEP 695"),
    (r"^\s*(async\s+)?def\s+[A-Za-z_]\w*\s*\[", (3, 12), "type parameters on a function, PEP 695"),
    (r"^\s*class\s+[A-Za-z_]\w*\s*\[", (3, 12), "type parameters on a class, PEP 695"),
    (r"^\s*except\s*\*?\s*[A-Za-z_][\w.]*\s*,\s*[A-Za-z_][\w.,\s]*:", (3, 14),
     "`except` with several exception types and no parentheses, PEP 758"),
)


def newer_python_hint(text: str, lineno: int | None, version: tuple[int, int] | None = None) -> str | None:
    """When the line of a syntax error uses syntax of a newer Python than ``version`` (default: the
    running one), say which: "this is Python 3.12 syntax (...), and ddp-lint runs on Python 3.11; ..."."""
    import re
    import sys

    if not lineno:
        return None
    version = version or sys.version_info[:2]
    lines = text.splitlines()
    if not 0 < lineno <= len(lines):
        return None
    line = lines[lineno - 1]
    found = next(((needs, what) for pattern, needs, what in _NEWER_SYNTAX
                  if version < needs and re.match(pattern, line)), None)
    if found is None and version < (3, 12) and _pep701_fstring(line):
        found = (3, 12), "an f-string whose `{...}` reuses its own quote or holds a backslash, PEP 701"
    if found is None:
        return None
    needs, what = found
    here = ".".join(map(str, version))
    v = f"{needs[0]}.{needs[1]}"
    return (f"this is Python {v} syntax ({what}), and ddp-lint runs on Python {here}; "
            f"run ddp-lint with Python {v} or newer to check this file")


def _pep701_fstring(line: str) -> bool:
    """The line holds an f-string with its own quote character, or a backslash, inside a
    replacement field (``f"{x["k"]}"``, ``f"{'\\n'.join(xs)}"``): valid only from Python 3.12."""
    import re

    for m in re.finditer(r"(?<![\w])[rRbB]?[fF][rRbB]?(\"\"\"|'''|\"|')", line):
        q = m.group(1)
        depth, i = 0, m.end()
        while i < len(line):
            if depth == 0 and line.startswith(q, i):
                break
            ch = line[i]
            if ch == "{":
                if depth == 0 and line.startswith("{{", i):
                    i += 2
                    continue
                depth += 1
            elif ch == "}" and depth:
                depth -= 1
            elif depth and (ch == "\\" or line.startswith(q, i)):
                return True
            i += 1
    return False
