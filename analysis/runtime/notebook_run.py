"""``ddp-lint run NOTEBOOK.ipynb``: the notebook's code cells (magics masked, line for line:
``analysis/notebook.py``) are written to a script next to the notebook, so that its imports of
modules beside it work as in the kernel; the script runs like any other file, and every finding,
related location and rank summary of it is mapped back to the notebook's cell and line. The
script is a new hidden file (``mkstemp``: never an existing name, never through a symlink), and
it is removed when the run ends; the notebook itself is never written."""
from __future__ import annotations

import os
import re
import tempfile

from ..io import SourceError, read_source_file
from ..notebook import Notebook, NotebookError


def export(nb: Notebook, folder: str, stem: str) -> str:
    """Write the module to a new hidden script in ``folder`` (the system's temporary folder when
    that is not writable); returns its path."""
    for d in (folder, None):
        try:
            fd, path = tempfile.mkstemp(prefix=f".{stem}.", suffix=".ddp-lint-run.py", dir=d)
        except OSError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(nb.source)
        return path
    raise OSError("no folder to write the exported script to")


def run_notebook(script: str, cwd: str | None, run, result_cls):
    path = os.path.abspath(os.path.join(cwd or os.getcwd(), os.path.expanduser(script)))
    res = result_cls()

    def fail(msg: str):
        res.error, res.exit_code = msg, 2
        res.notes.append(msg)
        res.script = path
        return res

    try:
        nb = Notebook.parse(read_source_file(path).text, script)
    except (SourceError, NotebookError) as e:
        return fail(str(e))
    if not nb.numbers:
        return fail(f"{script}: no Python code cells to run")
    try:
        exported = export(nb, os.path.dirname(path), os.path.splitext(os.path.basename(path))[0])
    except OSError as e:
        return fail(f"cannot export the notebook's code cells to a script: {e}")
    try:
        res = run(exported)
    finally:
        try:
            os.unlink(exported)
        except OSError:
            pass
    res.script = path
    shown = re.compile(r"(?:" + re.escape(exported) + "|" + re.escape(os.path.basename(exported)) + r")"
                       r"(?::(\d+)|(\", line )(\d+))?")

    def rename(text):
        """The exported script's name in a text (``NAME:LINE``, a traceback's ``"NAME", line N``),
        as the notebook's cell and line; lists and dicts (a finding's details) recursively."""
        if isinstance(text, dict):
            return {k: rename(v) for k, v in text.items()}
        if isinstance(text, (list, tuple)):
            return type(text)(rename(v) for v in text)
        if not isinstance(text, str) or os.path.basename(exported) not in text:
            return text

        def sub(m):
            n = m.group(1) or m.group(3)
            full = m.group(0).startswith(exported)
            name = path if full else os.path.basename(path)
            k = nb.index_of_line(int(n) - 1) if n else None
            if k is None:
                return name + (m.group(0)[len(exported if full else os.path.basename(exported)):])
            line = int(n) - nb.starts[k]
            if m.group(2):
                return f"{name}\", cell {nb.numbers[k]}, line {line}"
            return f"{name}:cell {nb.numbers[k]}:{line}"
        return shown.sub(sub, text)

    import dataclasses

    res.findings = [dataclasses.replace(f, message=rename(f.message), details=rename(f.details), related=tuple(
        dataclasses.replace(r, message=rename(r.message)) for r in f.related))
        for f in nb.to_cells(res.findings, module_file=exported, filename=path)]
    for r in res.ranks:
        if r.filename and os.path.abspath(r.filename) == os.path.abspath(exported) and r.line:
            k = nb.index_of_line(r.line - 1)
            if k is not None:
                line = r.line - nb.starts[k]
                r.filename, r.line, r.cell = path, line, nb.numbers[k]
        r.text = rename(r.text)
    res.output = rename(res.output)
    res.notes = [rename(n) for n in res.notes]
    res.argv = [a.replace(exported, path) for a in res.argv]
    return res
