"""Jupyter notebooks (``.ipynb``, nbformat 4) as one Python module, as Ruff reads them.

The code cells, in cell order, are one module: each cell's source (a newline added when it has
none) follows the previous one, so the module's lines are the cells' lines, cell after cell. A cell
that does not parse has its IPython syntax masked line for line (same number of lines, unmasked
lines unchanged): a line magic (``%time``), a shell escape (``!pip``, ``x = !ls``), a help request
(``obj?``) becomes ``pass`` at the same indentation; a cell magic (``%%bash``) masks its whole
cell, except the magics whose body is Python (``%%time``, ``%%capture``...), which mask their
first line only. A notebook whose kernel is not Python has no code cells.

One mapping, used by the CLI, the language server and the runtime runner:

- ``Notebook.parse(text)`` reads a file's JSON (``NotebookError`` with a one-line reason when it
  is not JSON or not nbformat 4); ``Notebook.from_cells`` builds one from cells an editor holds.
- ``locate`` turns a module position into (code cell, position inside the cell); ``to_cells``
  turns findings into cell findings (``Finding.cell``, 1-based over all cells as Ruff counts,
  positions relative to the cell), their related locations and fix edits too.
- ``cell_edits`` splits a fix's module edits into per-cell edits (None when an edit crosses a
  cell boundary or touches a masked line); ``fix_all`` applies fixes in rounds as
  ``fixes.fix_all`` does, editing only cell sources; ``dumps`` writes the JSON back with the
  file's indentation and trailing newline, outputs, metadata and ids untouched.
"""
from __future__ import annotations

import ast
import bisect
import dataclasses
import json
import re
import warnings

from .io import NOTEBOOK_SUFFIX, is_notebook  # noqa: F401  # re-exported: the notebook API
from .model import Edit, Finding, Fix, Position, Range
from .source import SourceText


# Cell magics whose body is Python (as in Ruff): only their first line is masked.
PYTHON_CELL_MAGICS = frozenset({"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"})

_LINE_REF = re.compile(r"(?<!\.py )(?<!\.pyi )\bline (\d+)\b")
_ASSIGN_ESCAPE = re.compile(r"^[\w.,\s()\[\]*]+=\s*[!%]")


class NotebookError(ValueError):
    """The file is not a notebook ddp-lint can read; the message is one line, with the path."""


def _parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _split_keep(text: str) -> list[tuple[str, str]]:
    """(line, line ending) pairs; the line endings are those ``SourceText`` splits on."""
    out = []
    for m in re.finditer(r"([^\r\n]*)(\r\n|\r|\n|$)", text):
        if m.group(0) == "" and m.start() == len(text):
            break
        out.append((m.group(1), m.group(2)))
    return out


# IPython's automagics and shell aliases that run without a ``%`` (``pip install x``): in a cell
# that does not parse, a line made of one of these names, a space and a word is a command (as
# Python, two names in a row are a syntax error anyway)
_AUTOMAGIC = re.compile(r"^(?:pip|conda|mamba|cd|ls|pwd|env|cat|mkdir|rmdir|rm|mv|cp|ll|less|man|"
                        r"alias|unalias|pushd|popd|dhist|bookmark|load_ext|reload_ext|time|timeit|"
                        r"matplotlib|autoreload|run|debug|who|whos|history)\s+[-\w./~'\"]")


def _is_magic(stripped: str) -> bool:
    if not stripped or stripped.startswith("#"):
        return False
    if stripped[0] in "%!?":
        return True
    if _ASSIGN_ESCAPE.match(stripped) or _AUTOMAGIC.match(stripped):
        return True
    return stripped.rstrip().endswith("?")


def mask_cell(text: str) -> str:
    """The cell's text with IPython syntax masked; the same number of lines, and every line that
    is not masked unchanged. A cell that parses as Python is returned as it is."""
    if _parses(text):
        return text
    lines = _split_keep(text)
    out = []
    first = lines[0][0].lstrip() if lines else ""
    start = 0
    if first.startswith("%%"):
        m = re.match(r"%%(\w+)", first)
        if m is None or m.group(1) not in PYTHON_CELL_MAGICS:
            return "".join(end for _, end in lines)  # not Python: every line blank
        out.append("pass" + lines[0][1])
        start = 1
    cont = False
    for line, end in lines[start:]:
        stripped = line.lstrip()
        if cont:  # the continuation of a masked line (a trailing backslash)
            out.append(end)
            cont = line.endswith("\\")
            continue
        if _is_magic(stripped):
            out.append(line[: len(line) - len(stripped)] + "pass" + end)
            cont = line.endswith("\\")
            continue
        out.append(line + end)
    return "".join(out)


def _source_text(cell: dict) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        if not all(isinstance(s, str) for s in src):
            raise NotebookError("a cell's source is not text")
        return "".join(src)
    if not isinstance(src, str):
        raise NotebookError("a cell's source is not text")
    return src


def _is_python(raw: dict) -> bool:
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        return True
    info = meta.get("language_info")
    if isinstance(info, dict) and isinstance(info.get("name"), str) and info["name"]:
        return info["name"].lower() == "python"
    spec = meta.get("kernelspec")
    if isinstance(spec, dict) and isinstance(spec.get("language"), str) and spec["language"]:
        return spec["language"].lower() == "python"
    return True


@dataclasses.dataclass
class Notebook:
    """``numbers[k]``: the 1-based number (among all cells) of the k-th code cell; ``texts[k]``
    its source; ``masked[k]`` the source as Python; ``starts[k]`` its first module line."""

    numbers: list[int]
    texts: list[str]
    masked: list[str]
    source: str
    starts: list[int]
    offsets: list[int]  # module offset where each code cell starts, plus the module's length
    added_newline: list[bool]
    raw: dict | None = None  # the parsed JSON (None: built from an editor's cells)
    text: str | None = None  # the file's text

    # -- building --------------------------------------------------------------------------------
    @classmethod
    def from_cells(cls, cells: list[tuple[int, str]], raw: dict | None = None, text: str | None = None) -> "Notebook":
        numbers, texts, masked, starts, offsets, added = [], [], [], [], [], []
        parts: list[str] = []
        line = offset = 0
        for number, src in cells:
            m = mask_cell(src)
            add = bool(m) and not m.endswith(("\n", "\r"))
            body = m + "\n" if add else m
            numbers.append(number)
            texts.append(src)
            masked.append(m)
            starts.append(line)
            offsets.append(offset)
            added.append(add)
            parts.append(body)
            line += len(_split_keep(body))
            offset += len(body)
        offsets.append(offset)
        return cls(numbers, texts, masked, "".join(parts), starts, offsets, added, raw, text)

    @classmethod
    def parse(cls, text: str, path: str = "<notebook>") -> "Notebook":
        try:
            raw = json.loads(text[1:] if text.startswith("\ufeff") else text)  # a BOM: kept on writing
        except json.JSONDecodeError as e:
            raise NotebookError(f"{path}: not a valid notebook: invalid JSON ({e.msg} at line {e.lineno}, "
                                f"column {e.colno})") from None
        except (ValueError, RecursionError) as e:
            raise NotebookError(f"{path}: not a valid notebook: invalid JSON ({e})") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
            raise NotebookError(f"{path}: not a valid notebook: no list of cells (nbformat 4 expected)")
        fmt = raw.get("nbformat")
        if fmt != 4 or isinstance(fmt, bool):
            raise NotebookError(f"{path}: not a supported notebook: nbformat {fmt!r}; only nbformat 4 is "
                                "read (convert it with `jupyter nbconvert --to notebook`)")
        cells = []
        python = _is_python(raw)
        for i, cell in enumerate(raw["cells"]):
            if not isinstance(cell, dict):
                raise NotebookError(f"{path}: not a valid notebook: cell {i + 1} is not an object")
            if cell.get("cell_type") != "code" or not python:
                continue
            try:
                cells.append((i + 1, _source_text(cell)))
            except NotebookError as e:
                raise NotebookError(f"{path}: not a valid notebook: cell {i + 1}: {e}") from None
        return cls.from_cells(cells, raw, text)

    # -- positions -------------------------------------------------------------------------------
    def index_of_line(self, line: int) -> int | None:
        """The code cell (index into ``numbers``) holding module line ``line``."""
        if not self.starts:
            return None
        k = bisect.bisect_right(self.starts, line) - 1
        return max(k, 0)

    def locate(self, pos: Position) -> tuple[int, Position] | None:
        """(code cell index, position relative to it) of a module position."""
        k = self.index_of_line(pos.line)
        if k is None:
            return None
        return k, Position(pos.line - self.starts[k], pos.column)

    def _rel_range(self, k: int, r: Range) -> Range:
        s = self.starts[k]
        end = r.end
        if k + 1 < len(self.starts) and end.line >= self.starts[k + 1]:
            # a range running to the start of the next cell ends at the end of this cell
            last = self.starts[k + 1] - 1 - s
            end = Position(last + s, len(_split_keep(self.masked[k])[last][0]) if self.masked[k] else 0)
        return Range(Position(r.start.line - s, r.start.column), Position(end.line - s, end.column))

    def _lines_in(self, k: int) -> int:
        end = self.starts[k + 1] if k + 1 < len(self.starts) else len(_split_keep(self.source))
        return end - self.starts[k]

    def cell_edit(self, e: Edit) -> tuple[int, Range, str]:
        """A module edit as (code cell index, range in the cell's own text, content), as
        ``cell_edits`` splits them for ``--fix``: an insertion at a cell boundary ends the cell
        before it; the newline the module added after a cell's last line is not the cell's, so
        an insertion after it becomes one before it (``"X\n"`` at the start of the next line ->
        ``"\nX"`` at the end of the last line)."""
        r = e.range
        k = self.index_of_line(r.start.line)
        if r.start == r.end and r.start.column == 0 and k > 0 and r.start.line == self.starts[k]:
            k -= 1
            while k > 0 and self._lines_in(k) == 0:
                k -= 1
        n = self._lines_in(k)
        rel = lambda p: Position(p.line - self.starts[k], p.column)  # noqa: E731
        start, end, content = rel(r.start), rel(r.end), e.content
        if self.added_newline[k] and n:
            last = _split_keep(self.masked[k] + "\n")[n - 1][0]
            if start.line >= n:  # after the added newline
                start = end = Position(n - 1, len(last))
                content = "\n" + (content[:-1] if content.endswith("\n") else content)
            elif end.line >= n:  # a range running through the added newline stops before it
                end = Position(n - 1, len(last))
                if content.endswith("\n"):
                    content = content[:-1]
        return k, Range(start, end), content

    def module_position(self, k: int, pos: Position) -> Position:
        return Position(self.starts[k] + pos.line, pos.column)

    # -- findings --------------------------------------------------------------------------------
    def to_cells(self, findings: list[Finding], module_file: str | None = None,
                 filename: str | None = None) -> list[Finding]:
        """Findings in cell coordinates (``cell`` set; ranges, related locations and fix edits
        relative to their cells). With ``module_file`` (the file a run executed the module as),
        only its findings and locations are moved, and they are renamed ``filename``; the
        other files' are left alone."""
        import os

        def ours(name):
            if module_file is None:
                return True
            return name is not None and os.path.abspath(name) == os.path.abspath(module_file)

        out = []
        for f in findings:
            k = self.index_of_line(f.range.start.line) if ours(f.filename) else None
            if k is None:
                if module_file is not None and f.related:
                    f = dataclasses.replace(f, related=tuple(
                        dataclasses.replace(r, filename=filename, range=self._rel_range(rk, r.range),
                                            cell=self.numbers[rk])
                        if ours(r.filename) and (rk := self.index_of_line(r.range.start.line)) is not None else r
                        for r in f.related))
                out.append(f)
                continue
            related = []
            for r in f.related:
                same = r.filename is None or r.filename == f.filename or ours(r.filename) and module_file is not None
                rk = self.index_of_line(r.range.start.line) if same else None
                if rk is None:
                    related.append(r)
                else:
                    related.append(dataclasses.replace(
                        r, range=self._rel_range(rk, r.range), cell=self.numbers[rk],
                        filename=filename if module_file is not None and r.filename is not None else r.filename))
            fix = f.fix
            if fix is not None:
                edits = []
                for e in fix.edits:
                    ek, er, content = self.cell_edit(e)
                    edits.append(Edit(er, content, self.numbers[ek]))
                fix = Fix(fix.applicability, fix.message, tuple(edits))
            out.append(dataclasses.replace(f, message=self.cell_lines(f.message), range=self._rel_range(k, f.range),
                                           related=tuple(related), fix=fix, cell=self.numbers[k],
                                           filename=filename if module_file is not None else f.filename))
        return out

    def cell_lines(self, message: str) -> str:
        """A message's module line numbers (``line 7``; not another file's ``util.py line 7``)
        as the cell and line a notebook shows (``line 2 of cell 3``)."""
        def sub(m):
            k = self.index_of_line(int(m.group(1)) - 1)
            if k is None:
                return m.group(0)
            return f"line {int(m.group(1)) - self.starts[k]} of cell {self.numbers[k]}"

        return _LINE_REF.sub(sub, message) if "line " in message else message

    # -- edits -----------------------------------------------------------------------------------
    def cell_edits(self, edits, src: SourceText | None = None) -> dict[int, list[tuple[int, int, str]]] | None:
        """Module edits as {code cell index: [(start, end, content)] in offsets of the cell's
        module text}; None when an edit crosses a cell boundary or touches a masked line."""
        src = src or SourceText(self.source)
        out: dict[int, list] = {}
        n = len(self.numbers)
        for e in edits:
            s, t = src.offset(e.range.start), src.offset(e.range.end)
            # an insertion at a cell boundary ends the cell before it (it runs at the same point of
            # the program; "insert after the cell's last statement" stays in that cell)
            k = (bisect.bisect_left(self.offsets, s) if s == t else bisect.bisect_right(self.offsets, s)) - 1
            k = min(max(k, 0), n - 1) if n else -1
            if k < 0:
                return None
            a, b = self.offsets[k], self.offsets[k + 1]
            if not (a <= s <= t <= b):
                return None
            if self.masked[k] != self.texts[k]:
                lines_m = _split_keep(self.masked[k])
                lines_t = _split_keep(self.texts[k])
                first = e.range.start.line - self.starts[k]
                last = e.range.end.line - self.starts[k]
                for i in range(first, min(last, len(lines_m) - 1) + 1):
                    if i < len(lines_m) and i < len(lines_t) and lines_m[i] != lines_t[i]:
                        return None
            out.setdefault(k, []).append((s - a, t - a, e.content))
        return out

    def apply(self, per_cell: dict[int, list[tuple[int, int, str]]]) -> "Notebook":
        """A new notebook with the cell edits applied to the cells' own sources (magics kept)."""
        texts = list(self.texts)
        for k, spans in per_cell.items():
            # unmasked lines are the same in the masked and the real text, and no edit touches a
            # masked line; masking keeps the line count but not the columns, so edits are moved
            # from masked-text offsets to real-text offsets line by line
            real = texts[k] + ("\n" if self.added_newline[k] else "")
            masked = self.masked[k] + ("\n" if self.added_newline[k] else "")
            spans = sorted((_moved(masked, real, s), _moved(masked, real, t), c) for s, t, c in spans)
            parts, last = [], 0
            for s, t, c in spans:
                parts.append(real[last:s])
                parts.append(c)
                last = max(last, t)
            parts.append(real[last:])
            new = "".join(parts)
            if self.added_newline[k] and new.endswith("\n"):
                new = new[:-1]
            texts[k] = new
        raw = self.raw
        if raw is not None:
            raw = _with_sources(raw, dict(zip(self.numbers, texts)))
        return Notebook.from_cells(list(zip(self.numbers, texts)), raw, self.text)  # the file's layout

    def dumps(self) -> str:
        """The notebook's JSON with the current cell sources; indentation, key order, non-ASCII
        characters and the trailing newline as in the file that was read."""
        if self.raw is None:
            raise ValueError("a notebook built from cells has no file")
        return _dump_like(self.raw, self.text or "")

    def cell_text(self, number: int) -> str | None:
        try:
            return self.texts[self.numbers.index(number)]
        except ValueError:
            return None


def _moved(masked: str, real: str, off: int) -> int:
    """A masked-text offset on an unmasked line (or a line boundary) as a real-text offset."""
    if masked == real:
        return off
    ml, rl = _split_keep(masked), _split_keep(real)
    pos = 0
    rpos = 0
    for (m, me), (r, re_) in zip(ml, rl):
        if off <= pos + len(m) + len(me):
            col = off - pos
            return rpos + (col if col <= len(m) else len(r) + (col - len(m)))
        pos += len(m) + len(me)
        rpos += len(r) + len(re_)
    return rpos + (off - pos)


def _with_sources(raw: dict, texts: dict[int, str]) -> dict:
    cells = []
    for i, cell in enumerate(raw["cells"]):
        new = texts.get(i + 1)
        if new is None or new == _source_text(cell):
            cells.append(cell)
            continue
        cell = dict(cell)
        if isinstance(cell.get("source"), list):
            cell["source"] = new.splitlines(keepends=True)
        else:
            cell["source"] = new
        cells.append(cell)
    out = dict(raw)
    out["cells"] = cells
    return out


def _indent_of(text: str):
    m = re.search(r"\{\r?\n([ \t]+)\"", text)
    if m is None:
        return None if text.lstrip().startswith("{") and "\n" not in text.strip() else 1
    ws = m.group(1)
    return ws if "\t" in ws else len(ws)


def _dump_like(raw: dict, text: str) -> str:
    ascii_only = text.isascii() and "\\u" in text
    out = json.dumps(raw, indent=_indent_of(text), ensure_ascii=ascii_only)
    if text.startswith("\ufeff"):
        out = "\ufeff" + out
    if "\r\n" in text:
        out = out.replace("\n", "\r\n")
    m = re.search(r"(\r?\n)*\Z", text)
    return out + (m.group(0) if m else "")


def cell_diff(old: str, new: str, path: str) -> list[str]:
    """Unified diffs of the code cells that a fix changed, one per cell (``a/PATH:cell N``)."""
    import difflib

    try:
        a, b = Notebook.parse(old, path), Notebook.parse(new, path)
    except NotebookError:
        return list(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))
    out: list[str] = []
    new_texts = dict(zip(b.numbers, b.texts))
    for number, text in zip(a.numbers, a.texts):
        t2 = new_texts.get(number, text)
        if t2 == text:
            continue
        x, y = text.splitlines(True), t2.splitlines(True)
        if x and not x[-1].endswith("\n"):
            x[-1] += "\n"
        if y and not y[-1].endswith("\n"):
            y[-1] += "\n"
        out.extend(difflib.unified_diff(x, y, f"a/{path}:cell {number}", f"b/{path}:cell {number}"))
    return out


def fix_all(nb: Notebook, check, unsafe: bool = False, findings: list[Finding] | None = None):
    """Apply fixes in rounds (``fixes.fix_all``'s rounds, on the notebook's module), editing only
    cell sources. ``check`` analyses a module text. -> (notebook, findings fixed)."""
    from .fixes import MAX_ROUNDS, apply_fix_round

    fixed: list[Finding] = []
    if findings is None:
        findings = check(nb.source)
    for _ in range(MAX_ROUNDS):
        src = SourceText(nb.source)
        ok = {id(f) for f in findings if f.fix is not None and nb.cell_edits(f.fix.edits, src) is not None}
        new, applied = apply_fix_round(nb.source, findings, unsafe, only=lambda f: id(f) in ok)
        if not applied or new == nb.source:
            break
        edits, seen = [], set()
        for f in applied:
            if f.fix not in seen:
                seen.add(f.fix)
                edits.extend(f.fix.edits)
        per_cell = nb.cell_edits(edits, src)
        if per_cell is None:  # pragma: no cover - each fix was checked above
            break
        nb = nb.apply(per_cell)
        fixed.extend(applied)
        findings = check(nb.source)
    return nb, fixed


def check_notebook(text: str, path: str, settings, fix_mode: bool = False, unsafe: bool = False):
    """Check a notebook file's text. -> (findings in cells after the fixes, new file text or None,
    findings in cells before the fixes, module dependencies). Raises ``NotebookError``."""
    from .engine import check_source

    nb = Notebook.parse(text, path)
    res = check_source(nb.source, path, settings)
    before = res.findings
    findings, new_text = before, None
    new_nb = nb
    if fix_mode and any(f.fix for f in before):
        codes = settings.enabled_codes(path) if settings is not None else None

        def check(t):
            return check_source(t, path, settings, codes=codes).findings

        new_nb, fixed = fix_all(nb, check, unsafe, before)
        if fixed and new_nb.source != nb.source:
            new_text = new_nb.dumps()
            findings = check(new_nb.source)
    return new_nb.to_cells(findings), new_text, nb.to_cells(before), list(res.dependencies)
