"""The project's shell launchers of a program: what each one passes for a command-line option, and
whether it made that folder first (``mkdir -p $OUT`` then ``torchrun train.py --output_dir $OUT``).

A launch is a logical line (continuations joined, read as shell words: ``launch_scripts._words``,
so a comment never counts) of a ``*.sh`` file of the project that names the program's file as a
word: its path relative to the script's folder, or a tail of its path (``../../step1/main.py``
for ``examples/step1/main.py``), or its bare name. The scripts are those under the folder that
``project.scan_tops`` gives for the program (the repository's top), at most ``_MAX_SCRIPTS`` of
them, read through ``project.read`` (an open editor document's text) and recorded as dependencies
of the check.
"""
from __future__ import annotations

import os
import re
import time

from .. import snapshot

_MAX_SCRIPTS = 200
_MAX_DIRS = 2000
_TTL = 2.0
_SKIP = frozenset({".git", ".hg", ".venv", "venv", "env", "node_modules", "__pycache__", "build", "dist", ".tox",
                   "site-packages"})
_scripts: dict[str, tuple] = {}  # top folder -> (when, snapshot run, script paths)
_VAR = re.compile(r"\$\{(\w+)\}")


def scripts_under(top: str) -> tuple[str, ...]:
    """The ``*.sh`` files under ``top`` (hidden and environment folders skipped), sorted; listed once
    a batch run and at most every ``_TTL`` seconds in the language server."""
    now, run = time.monotonic(), snapshot.current()
    got = _scripts.get(top)
    if got is not None and got[1] == run and (run is not None or now - got[0] < _TTL):
        return got[2]
    found: list[str] = []
    dirs = 0
    for folder, names, files in os.walk(top):
        names[:] = sorted(n for n in names if not n.startswith(".") and n not in _SKIP)
        dirs += 1
        found.extend(os.path.join(folder, f) for f in sorted(files) if f.endswith(".sh"))
        if dirs >= _MAX_DIRS or len(found) >= _MAX_SCRIPTS:
            break
    if len(_scripts) > 256:
        _scripts.clear()
    out = tuple(found[:_MAX_SCRIPTS])
    _scripts[top] = (now, run, out)
    return out


def _norm(word: str) -> str:
    w = _VAR.sub(r"$\1", word)
    return w.rstrip("/") if len(w) > 1 else w


def _names_program(word: str, script_dir: str, program: str) -> bool:
    if not word.endswith(".py") or word.startswith("-"):
        return False
    if os.path.basename(word) != os.path.basename(program):
        return False
    if "/" not in word:
        return True
    if os.path.normpath(os.path.join(script_dir, word)) == program:
        return True
    tail = [p for p in word.split("/") if p not in ("", ".", "..")]
    return program.replace(os.sep, "/").endswith("/" + "/".join(tail))


def _value(words: list[str], options) -> str | None:
    for i, w in enumerate(words):
        for o in options:
            if w == o and i + 1 < len(words):
                return words[i + 1]
            if w.startswith(o + "="):
                return w[len(o) + 1:]
    return None


def launches_make_option_folder(program: str, options, an=None) -> bool:
    """Every launch of ``program`` by a shell script of its project passes one of ``options`` (the
    option strings of one argparse option) with a folder that the script made on an earlier line
    (``mkdir`` of it or of a folder below it), and there is at least one launch."""
    from ..launch_scripts import _logical_lines, _words
    from .project import disk_allowed, read, roots_for, scan_tops

    if not program or program.startswith("<") or not disk_allowed():
        return False
    program = os.path.abspath(program)
    seen = False
    for script in scripts_under(scan_tops(roots_for(program))[0]):
        got = read(script)
        if got is None:
            continue
        text, digest = got
        if an is not None:
            an.depend_on_files({script: digest})
        made: list[str] = []
        for _ln, line in _logical_lines(text):
            words = _words(line)
            if not words:
                continue
            if words[0] == "mkdir":
                made.extend(_norm(w) for w in words[1:] if not w.startswith("-"))
                continue
            if not any(_names_program(w, os.path.dirname(script), program) for w in words):
                continue
            seen = True
            v = _value(words, options)
            if v is None:
                return False
            v = _norm(v)
            if not any(m == v or m.startswith(v + "/") for m in made):
                return False
    return seen
