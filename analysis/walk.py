"""The folder walk for ``ddp-lint check PATH...``: which files to check.

- Files named on the command line are always checked (a missing one is an error).
- Folders are walked in sorted order without following symlinked folders (so no folder loop), skipping
  hidden folders, the ``exclude`` globs, and, with ``respect-gitignore`` (the default, as in Ruff),
  what git ignores: ``.gitignore`` files of the repository (from its root down to each folder),
  ``.git/info/exclude``, and ``.ignore`` files (those also outside a repository).
- A walked ``*.py`` that is a dangling symlink, a symlink loop or not a regular file (FIFO, socket,
  device) is skipped; a symlink loop or a file that is not regular gets a warning saying so, and the
  rest of the tree is still checked.
- A walked ``*.py`` that is a symlink to a file outside the walked folder is checked, but ``--fix``
  does not rewrite it (``WalkResult.tree``): it is reported instead.

Paths are matched against the exclude globs relative to the settings' root without resolving
symlinks per file (``Path.resolve`` raises RuntimeError on a loop and costs several system calls).
"""
from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path


PY_SUFFIXES = (".py", ".pyi", ".ipynb")  # notebooks too, as Ruff's default include since 0.6


@dataclass
class WalkResult:
    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a named path that cannot be checked (exit 2)
    warnings: list[str] = field(default_factory=list)  # something skipped in a walk (the rest is checked)
    # a walked file -> the real folder its walk started from: a fix never leaves it (io.write_source's
    # ``inside``), so a symlinked ``*.py`` pointing out of the tree is reported, not rewritten
    tree: dict[str, str] = field(default_factory=dict)


# -- gitignore -----------------------------------------------------------------------------------
class _Pattern:
    __slots__ = ("regex", "negate", "dir_only")

    def __init__(self, regex, negate: bool, dir_only: bool):
        self.regex = regex
        self.negate = negate
        self.dir_only = dir_only


def _translate(pat: str) -> str:
    """A gitignore glob (no leading '!', no trailing '/') to a regex over '/'-separated paths."""
    anchored = "/" in pat
    if pat.startswith("/"):
        pat = pat[1:]
    out = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            if pat.startswith("**", i):
                before_ok = i == 0 or pat[i - 1] == "/"
                after = pat[i + 2:i + 3]
                if before_ok and after == "/":
                    out.append("(?:.*/)?")
                    i += 3
                    continue
                if before_ok and after == "":
                    out.append(".*")
                    i += 2
                    continue
                out.append("[^/]*")
                i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pat.find("]", i + 2 if pat[i + 1:i + 2] in ("!", "^") else i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pat[i + 1:j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pat[i]))
        else:
            out.append(re.escape(c))
        i += 1
    body = "".join(out)
    if anchored:
        return "^" + body + "$"
    return "^(?:.*/)?" + body + "$"


def parse_ignore_lines(lines) -> list[_Pattern]:
    pats = []
    for raw in lines:
        line = raw.rstrip("\n").rstrip("\r")
        if not line or line.startswith("#"):
            continue
        # trailing spaces are ignored unless escaped
        while line.endswith(" ") and not line.endswith("\\ "):
            line = line[:-1]
        if not line:
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        try:
            pats.append(_Pattern(re.compile(_translate(line)), negate, dir_only))
        except re.error:
            continue  # a pattern git would not match either
    return pats


def _read_ignore_file(path: str) -> list[_Pattern]:
    from .io import SourceError, read_regular_file

    try:
        data = read_regular_file(path, limit=4 * 1024 * 1024)[0]
    except (OSError, SourceError):
        return []
    return parse_ignore_lines(data.decode("utf-8", "replace").splitlines())


class IgnoreStack:
    """Ignore files in effect for one folder: (base folder, patterns) from outermost to innermost."""

    def __init__(self, layers: tuple = ()):
        self.layers = layers

    def push(self, base: str, pats: list[_Pattern]) -> "IgnoreStack":
        return IgnoreStack(self.layers + ((base, pats),)) if pats else self

    def ignored(self, path: str, is_dir: bool) -> bool:
        # the innermost file with a matching pattern decides; in a file, the last match wins
        for base, pats in reversed(self.layers):
            rel = os.path.relpath(path, base).replace(os.sep, "/")
            if rel.startswith("../"):
                continue
            for p in reversed(pats):
                if p.dir_only and not is_dir:
                    continue
                if p.regex.match(rel):
                    return not p.negate
        return False


def _repo_root(folder: str) -> str | None:
    d = folder
    while True:
        if os.path.lexists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _initial_stack(folder: str) -> IgnoreStack:
    """Ignore files from the repository root down to ``folder``'s parent, plus info/exclude."""
    stack = IgnoreStack()
    repo = _repo_root(folder)
    if repo is not None:
        stack = stack.push(repo, _read_ignore_file(os.path.join(repo, ".git", "info", "exclude")))
    chain = []
    d = os.path.dirname(folder)
    while True:
        chain.append(d)
        if d == repo or os.path.dirname(d) == d:
            break
        d = os.path.dirname(d)
    if repo is None:
        return stack  # .gitignore counts only inside a git repository (as for git and Ruff)
    for d in reversed(chain):
        stack = _push_folder(stack, d, in_repo=True)
    return stack


def _push_folder(stack: IgnoreStack, folder: str, in_repo: bool) -> IgnoreStack:
    if in_repo:
        stack = stack.push(folder, _read_ignore_file(os.path.join(folder, ".gitignore")))
    return stack.push(folder, _read_ignore_file(os.path.join(folder, ".ignore")))


# -- exclusion -----------------------------------------------------------------------------------
def _root_rel(path: str, root_abs: str | None) -> str:
    if root_abs is not None:
        rel = os.path.relpath(path, root_abs)
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return path.replace(os.sep, "/")


_EXCLUDERS: dict[tuple, tuple] = {}


def _excluder(patterns) -> tuple:
    """(name regex, root-relative path regex) equivalent to ``Settings.is_excluded``'s fnmatch
    loop over the globs (``fnmatch(name, pat)`` or ``config._glob_match(rel, pat)``), compiled once:
    the loop costs more than the rest of a warm run on a 2,000-file tree."""
    key = tuple(patterns)
    got = _EXCLUDERS.get(key)
    if got is None:
        name_parts, rel_parts = [], []
        for pat in key:
            name_parts.append(fnmatch.translate(pat))  # also _glob_match's bare-name clause
            rel_parts.append(fnmatch.translate(pat))
            rel_parts.append(fnmatch.translate(pat.rstrip("/") + "/*"))
        never = r"(?!)"
        got = (re.compile("|".join(name_parts) or never), re.compile("|".join(rel_parts) or never))
        if len(_EXCLUDERS) > 64:
            _EXCLUDERS.clear()
        _EXCLUDERS[key] = got
    return got


def _excluded(name: str, path_abs: str, settings, root_abs: str | None) -> bool:
    name_re, rel_re = _excluder(settings.exclude)
    if name_re.match(name):
        return True
    return rel_re.match(_root_rel(path_abs, root_abs)) is not None


def _abs_root(settings) -> str | None:
    root = getattr(settings, "root", None)
    if root is None:
        return None
    try:
        return os.path.realpath(root)
    except (OSError, ValueError):
        return os.path.abspath(root)


# -- the walk ------------------------------------------------------------------------------------
def collect_files(paths: list[str], settings, respect_gitignore: bool | None = None) -> WalkResult:
    """Files to check (named files always; folders walked with exclusions), errors and warnings."""
    if respect_gitignore is None:
        respect_gitignore = getattr(settings, "respect_gitignore", True)
    out = WalkResult()
    root_abs = _abs_root(settings)
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as e:
            if e.errno == errno.ELOOP:
                out.errors.append(f"{p}: symlink loop")
            elif os.path.lexists(p):
                out.errors.append(f"{p}: {e.strerror or e}")
            else:
                out.errors.append(f"{p}: no such file or directory")
            continue
        if stat.S_ISREG(st.st_mode):
            out.files.append(p)
        elif stat.S_ISDIR(st.st_mode):
            _walk_dir(p, settings, respect_gitignore, root_abs, out)
        else:
            out.errors.append(f"{p}: not a regular file or folder")
    return out


def _join(folder: str, name: str) -> str:
    return name if folder == "." else os.path.join(folder, name)


def _walk_dir(top: str, settings, respect_gitignore: bool, root_abs: str | None, out: WalkResult) -> None:
    top = str(Path(top))  # "./src/" -> "src", as the paths were always shown
    top_abs = os.path.realpath(top)  # the real folder: parent ignore files and root-relative globs
    stack = _initial_stack(top_abs) if respect_gitignore else IgnoreStack()
    in_repo = respect_gitignore and _repo_root(top_abs) is not None
    # (display path, real absolute path, ignore stack); the display path keeps the user's spelling
    todo = [(top, top_abs, stack)]
    while todo:
        shown, real, stack = todo.pop()
        if respect_gitignore:
            stack = _push_folder(stack, real, in_repo)
        try:
            with os.scandir(shown) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            out.warnings.append(f"{shown}: cannot list folder: {e.strerror or e}")
            continue
        subdirs = []
        for ent in entries:
            name = ent.name
            real_child = os.path.join(real, name)
            try:
                is_dir = ent.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if name.startswith(".") or _excluded(name, real_child, settings, root_abs):
                    continue
                if respect_gitignore and stack.ignored(real_child, True):
                    continue
                subdirs.append((_join(shown, name), real_child))
                continue
            if not name.endswith(PY_SUFFIXES):
                continue
            if _excluded(name, real_child, settings, root_abs):
                continue
            if respect_gitignore and stack.ignored(real_child, False):
                continue
            path = _join(shown, name)
            try:
                st = os.stat(path)  # follows a symlinked file to its target
            except OSError as e:
                if e.errno == errno.ELOOP:
                    out.warnings.append(f"{path}: symlink loop, skipped")
                continue  # a dangling symlink or a file removed during the walk
            if stat.S_ISREG(st.st_mode):  # never open a FIFO, socket or device found in a walk
                out.files.append(path)
                out.tree[path] = top_abs
            else:
                out.warnings.append(f"{path}: not a regular file (a FIFO, socket or device), skipped")
        for d in reversed(subdirs):
            todo.append((d[0], d[1], stack))
