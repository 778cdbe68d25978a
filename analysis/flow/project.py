"""Modules of the user's project, found from import statements and parsed on demand.

An import that resolves to a file of the same project (``from utils.dist import f``, ``import comm``)
is read, parsed and indexed once per content: views are cached by (path, content hash) in a small
in-process LRU. Roots searched, in order: the importing file's folder, the folder above its topmost
package (walking up while ``__init__.py`` exists), the folder above that one when the climb
ended under a folder without ``__init__.py`` (an implicit namespace package: ``REC/utils/`` imported
as ``REC.utils``), and the project root (the nearest folder above
holding ``pyproject.toml``, ``setup.py`` or ``.git``); the source folder of each project packaged right below the project root (``adapter/pyproject.toml``:
``adapter/src``, or ``adapter`` itself); and last, the folders the file itself puts on
``sys.path`` (``sys_path.py``: ``sys.path.insert(0, dirname(dirname(abspath(__file__))))``).
Nothing outside those roots is read: a third-party import stays unresolved (unknown).

Open editor documents can shadow the file on disk (``set_overlay``), so that an unsaved helper is
what its dependents see, and count as files of the project even before they are saved.

``documents_only()``: while a check runs inside it (the language server of an untrusted TCP client),
nothing is read from disk at all: imports resolve to the open documents only (the text the client
sent), and no file's existence is probed.

A relative import never climbs above the project root (the outermost of ``roots_for``): ``from
..........etc import f`` stays unresolved, as Python's "beyond top-level package" error.

``resolve(..., absent=list)`` lists what it probed and found absent before its answer (every candidate
file, or the first missing folder on the way to them): the check's *negative* dependencies
(``Analysis.dependencies`` reports them with the hash None; ``still_absent`` tests one), so that a
module created later, or one that shadows the module found before, invalidates a cached result.
"""
from __future__ import annotations

import ast
import contextlib
import contextvars
import os
import threading
import time
import warnings
from collections import OrderedDict

from ..io import SourceError, read_regular_file
from ..semantic import Semantic
from ..snapshot import current, fresh, snapshot  # noqa: F401 (the text-level memos, one flag for a batch run)
from .sys_path import declared_roots_of

MAX_BYTES = 1_000_000  # larger files are not followed (generated code, vendored blobs)
_LRU_SIZE = 256
_lock = threading.RLock()
_views: OrderedDict[tuple[str, str], "ModuleView"] = OrderedDict()
_stat_hash: dict[str, tuple[int, int, str]] = {}
_overlays: dict[str, str] = {}
_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_disk = contextvars.ContextVar("ddp_lint_project_disk", default=True)
# Views in use. A check running in one thread (the language server checks on two) may be walking
# a view's tree when another check evicts it (the file's text changed, or the cache is full); the
# eviction must not take the tree apart under it. So a view is retired, not released: it is
# released once every check that was running when it was retired has ended (``in_use``).
_active: set[int] = set()
_retired: list[tuple["ModuleView", frozenset]] = []
_tokens = iter(range(1 << 62))


@contextlib.contextmanager
def documents_only():
    """Within it (in this thread), the project is the open documents only: nothing is read or
    probed on disk (the language server with an untrusted client)."""
    token = _disk.set(False)
    try:
        yield
    finally:
        _disk.reset(token)


def disk_allowed() -> bool:
    return _disk.get()


def is_file(path: str) -> bool:
    """``path`` is an open document, or (when the disk may be read) a regular file."""
    with _lock:
        if path in _overlays:
            return True
    return _disk.get() and _probe(os.path.isfile, path)


_probes: dict[tuple, bool] = {}  # (test, path) -> answer, within one batch run's snapshot
_probes_run: list = [None]  # the snapshot those answers were found in


def _probe(test, path: str) -> bool:
    """``test(path)`` (``os.path.isfile``, ``isdir``, ``lexists``); asked once per path in a batch
    run's snapshot, where the disk is taken as unchanging (every file's imports probe the same
    package folders), else every time."""
    run = current()
    if run is None:
        return test(path)
    if _probes_run[0] != run:
        _probes.clear()
        _probes_run[0] = run
    key = (test, path)
    got = _probes.get(key)
    if got is None:
        if len(_probes) > 262144:
            _probes.clear()
        got = _probes[key] = test(path)
    return got


def overlay_text(path: str) -> str | None:
    with _lock:
        return _overlays.get(path)


def documents_under(folder: str) -> list[str]:
    """The open documents at or below ``folder``, sorted."""
    prefix = os.path.join(folder, "")
    with _lock:
        return sorted(p for p in _overlays if p.startswith(prefix))


def content_hash(text: str) -> str:
    """sha256 hex of the text's UTF-8 bytes (``cache.content_digest`` of the file on disk)."""
    import hashlib  # lazy, as in ``cache``: a check that reads no other file never hashes (start-up)

    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


generation = 0  # bumped by every overlay change (flow/reach.py's caches are keyed by it)


def set_overlay(path: str, text: str | None) -> None:
    """The text of an open (maybe unsaved) document; None removes it."""
    global generation
    path = os.path.abspath(path)
    with _lock:
        generation += 1
        if text is None:
            _overlays.pop(path, None)
        else:
            _overlays[path] = text


def read(path: str) -> tuple[str, str] | None:
    """(text, content hash) of ``path`` (the overlay when one is set), None when unreadable."""
    with _lock:
        text = _overlays.get(path)
    if text is not None:
        return text, content_hash(text)
    if not _disk.get():
        return None
    try:
        # a regular file only (never a FIFO, a device, /proc/kmsg), at most MAX_BYTES
        data, st = read_regular_file(path, limit=MAX_BYTES)
        text = data.decode("utf-8", "surrogateescape")
    except (OSError, SourceError, ValueError):
        return None
    import hashlib  # lazy (see ``content_hash``)

    digest = hashlib.sha256(data).hexdigest()  # the bytes, as the CLI cache validates them
    with _lock:
        _stat_hash[path] = (st.st_mtime_ns, st.st_size, digest)
    return text, digest


def current_hash(path: str) -> str | None:
    """The content hash of ``path`` now (stat fast path: unchanged mtime and size reuse the last
    hash). Used to validate cached analyses against their dependencies."""
    with _lock:
        text = _overlays.get(path)
        if text is not None:
            return content_hash(text)
        got = _stat_hash.get(path)
    if not _disk.get():
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    if got is not None and got[0] == st.st_mtime_ns and got[1] == st.st_size:
        return got[2]
    r = read(path)
    return r[1] if r else None


class ModuleView:
    """One module's tree with the indexes the flow analysis needs: module-level functions and
    classes, and what each imported name refers to."""

    def __init__(self, path: str | None, tree: ast.Module, sem: Semantic, digest: str, text: str = ""):
        self.path = path
        self.tree = tree
        self.sem = sem
        self.digest = digest
        self.text = text
        self.defs: dict[str, ast.AST] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        # local name -> (module, level, attribute or None)
        self.imports: dict[str, tuple[str, int, str | None]] = {}
        # ``from pkg.mod import *``: (module, level), in order; a name found nowhere else may come
        # from one of them
        self.star_imports: list[tuple[str, int]] = []
        self._seeded: bool | None = None
        self.memo: dict = {}  # per-view analysis results (summaries, values); cleared when stale
        self.dep_hashes: dict[str, str | None] = {}  # files whose content (None: absence) the memo depends on
        # this view's life, and those of the other views whose nodes the memo may hold: a memo that
        # outlives one of them holds nodes of a taken-apart tree, so it is stale (``stale``)
        self.life = Life()
        self.dep_lives: set[Life] = set()
        for st in _top_statements(tree):
            t = st.__class__
            if t is ast.FunctionDef or t is ast.AsyncFunctionDef:
                self.defs[st.name] = st
            elif t is ast.ClassDef:
                self.classes[st.name] = st
            elif t is ast.Import:
                for a in st.names:
                    if a.asname:
                        self.imports[a.asname] = (a.name, 0, None)
                    else:
                        top = a.name.split(".", 1)[0]
                        self.imports.setdefault(top, (top, 0, None))
            elif t is ast.ImportFrom:
                for a in st.names:
                    if a.name != "*":
                        self.imports[a.asname or a.name] = (st.module or "", st.level, a.name)
                    else:
                        self.star_imports.append((st.module or "", st.level))

    @property
    def seeded(self) -> bool:
        """The module's code names a seed (``torch.manual_seed``, ``set_seed``, ``args.seed``); a
        comment or a string does not count (``flow.mentions``)."""
        got = self._seeded
        if got is None:
            from .mentions import code_words
            got = self._seeded = ("seed" in self.text.lower() or not self.text) and any(
                "seed" in w.lower() for w in code_words(self.sem))
        return got

    def depends_on(self, other: "ModuleView") -> None:
        """This view's memo may hold nodes of ``other`` (a result computed through a call into it)."""
        if other is not self:
            self.dep_lives.add(other.life)

    def stale(self) -> bool:
        """A view whose nodes the memo may hold has been released since (evicted from the project
        cache, or the checked file's own view at the end of its check)."""
        return any(not life.alive for life in self.dep_lives)

    def forget(self) -> None:
        """Drop the memo and what it depended on."""
        self.memo.clear()
        self.dep_hashes.clear()
        self.dep_lives.clear()

    def release(self) -> None:
        self.life.alive = False
        self.forget()
        self.sem.release()


class Life:
    """Whether a view is still in use (its tree's parent pointers and fields intact)."""

    __slots__ = ("alive",)

    def __init__(self):
        self.alive = True


def _top_statements(tree: ast.Module):
    """Module-level statements, including those under module-level ``if``/``try`` (import
    fallbacks, ``if TYPE_CHECKING:``)."""
    out = []
    stack = list(reversed(tree.body))
    pop, add = stack.pop, out.append
    while stack:
        st = pop()
        add(st)
        if st.__class__ in _NESTING or isinstance(st, (ast.If, ast.Try)):
            for f in ("body", "orelse", "finalbody"):
                stack.extend(reversed(getattr(st, f, None) or ()))
            for h in getattr(st, "handlers", ()):
                stack.extend(reversed(h.body))
    return out


# the module-level statements whose blocks ``_top_statements`` enters
_NESTING = frozenset({ast.If, ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ())})


_ROOTS_TTL = 2.0
_roots_memo: dict[tuple, tuple] = {}  # (folder, disk, overlay generation) -> (when, roots, absent)


def roots_for(path: str, absent: list | None = None) -> list[str]:
    """The folders an absolute import is looked up in (see the module's docstring). ``absent``
    gets the ``__init__.py`` whose absence ended the package climb (one appearing there adds a
    root). Memoised per folder for ``_ROOTS_TTL`` seconds (a batch run asks for every import of
    every file; the open documents' generation is part of the key)."""
    here = os.path.dirname(os.path.abspath(path))
    with _lock:
        key = (here, _disk.get(), generation)
    now = time.monotonic()
    got = _roots_memo.get(key)
    if got is None or not fresh(got[0], now, _ROOTS_TTL):
        gone: list[str] = []
        got = (now, _roots_for(here, gone), tuple(gone))
        if len(_roots_memo) > 4096:
            _roots_memo.clear()
        _roots_memo[key] = got
    if absent is not None:
        absent.extend(got[2])
    return list(got[1])


def _roots_for(here: str, absent: list) -> list[str]:
    roots = [here]
    d = here
    while is_file(os.path.join(d, "__init__.py")):
        up = os.path.dirname(d)
        if up == d:
            break
        d = up
    else:
        if absent is not None:
            absent.append(os.path.join(d, "__init__.py"))
    if d not in roots:
        roots.append(d)
    ns = None
    if d != here and os.path.basename(d).isidentifier():
        # the package climb ended at a folder without ``__init__.py`` above a package: it may be
        # an implicit namespace package (``REC/trainer/`` importing ``REC.utils``), imported from
        # the folder above it; looked up last, after the package's own roots, and never above
        # the project root (a relative import must not climb out of the project)
        ns = os.path.dirname(d)
        if ns == d or ns in roots:
            ns = None
    top = None
    d = here
    for _ in range(8 if _disk.get() else 0):
        if any(os.path.exists(os.path.join(d, m)) for m in _PROJECT_MARKERS):
            top = d
            break
        up = os.path.dirname(d)
        if up == d:
            break
        d = up
    if ns is not None and (top is None or _within(ns, top)):
        roots.append(ns)
    if top is not None and top not in roots:
        roots.append(top)
    if top is not None:
        roots += [r for r in _subproject_roots(top) if r not in roots]
    return roots


def _subproject_roots(top: str) -> tuple[str, ...]:
    """The source folders of the projects packaged inside the project root ``top``: a folder right
    below it that holds its own ``pyproject.toml``, ``setup.py`` or ``setup.cfg`` (a monorepo's
    ``adapter/pyproject.toml``) is installed beside the main project, its packages imported by
    name; they sit in its ``src/`` (the src layout) or in the folder itself. Looked up last."""
    try:
        entries = sorted(os.scandir(top), key=lambda e: e.name)
    except OSError:
        return ()
    out = []
    for e in entries:
        if e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
            continue
        if any(_probe(os.path.isfile, os.path.join(e.path, m)) for m in _PROJECT_MARKERS[:3]):
            src = os.path.join(e.path, "src")
            out.append(src if _probe(os.path.isdir, src) else e.path)
    return tuple(out)


def scan_tops(roots: list[str]) -> tuple[str, ...]:
    """The folders a question about the project's other files scans (their calls of a function),
    from ``roots_for``: the folder above the topmost package and, for a package in a ``src/``
    layout (``repo/src/pkg``), also the folder holding ``src/``, whose ``tests/`` and scripts
    import the package (scanned second: the first keeps the package's own files within the scan's
    budget)."""
    top = roots[1] if len(roots) > 1 else roots[0]
    for r in roots[1:]:
        if os.path.basename(r) == "src" and _within(top, r) and os.path.dirname(r) != r:
            return top, os.path.dirname(r)
    return (top,)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(os.path.join(folder, ""))


def resolve(from_path: str, module: str, level: int, absent: list | None = None) -> str | None:
    """The file of ``module`` as imported from ``from_path`` (``level`` dots), or None. Every
    candidate probed and found absent before the answer is appended to ``absent``."""
    if not from_path or from_path.startswith("<"):
        return None
    parts = [p for p in module.split(".") if p] if module else []
    if level:
        base = os.path.dirname(os.path.abspath(from_path))
        for _ in range(level - 1):
            base = os.path.dirname(base)
        top = min(roots_for(from_path, absent), key=len)  # the project root: the outermost root
        if not _within(base, top):
            return None  # above the project root (Python: "beyond top-level package")
        bases = [base]
    else:
        if not parts or parts[0] in ("torch", "os", "sys", "numpy", "typing"):
            return None
        bases = roots_for(from_path, absent)
        bases += [r for r in declared_roots(os.path.abspath(from_path)) if r not in bases]
    for b in bases:
        if parts:
            stem = os.path.join(b, *parts)
            cands = (stem + ".py", os.path.join(stem, "__init__.py"))
        else:
            cands = (os.path.join(b, "__init__.py"),)  # ``from . import x``: the package itself
        for cand in cands:
            if is_file(cand):
                return os.path.abspath(cand)
        if absent is not None:
            absent.extend(_absent_marks(b, parts, cands))
    return None


_declared: dict[tuple[str, str], tuple[str, ...]] = {}


def declared_roots(path: str) -> tuple[str, ...]:
    """The folders the file ``path`` (absolute) puts on its own ``sys.path`` (``sys_path``), by its
    content hash (the open document's text when there is one)."""
    h = current_hash(path)
    if h is None:
        return ()
    key = (path, h)
    with _lock:
        got = _declared.get(key)
    if got is None:
        r = read(path)
        got = () if r is None else declared_roots_of(path, r[0])
        with _lock:
            if len(_declared) > 65536:
                _declared.clear()
            _declared[key] = got
    return got


def _is_dir(path: str) -> bool:
    """A folder on disk (when the disk may be read), or one holding an open document."""
    prefix = os.path.join(path, "")
    with _lock:
        if any(p.startswith(prefix) for p in _overlays):
            return True
    return _disk.get() and _probe(os.path.isdir, path)


def _absent_marks(base: str, parts: list, cands) -> list[str]:
    """What must stay absent for the candidates ``cands`` under ``base`` to stay absent: the first
    missing folder of the dotted path when there is one (``a/b`` for ``a.b.c`` when ``a`` has no
    ``b``: nothing below it can appear without it), else the candidates themselves (a missing
    ``stem/`` stands for its ``__init__.py``)."""
    d = base
    for p in parts[:-1]:
        d = os.path.join(d, p)
        if not _is_dir(d):
            return [d] if not (_disk.get() and _probe(os.path.lexists, d)) else list(cands)
    if parts:
        stem = os.path.join(d, parts[-1])
        if not _is_dir(stem) and not (_disk.get() and _probe(os.path.lexists, stem)):
            return [stem + ".py", stem]
    return list(cands)


def still_absent(path: str) -> bool:
    """A negative dependency holds: nothing importable is at ``path`` (no regular file, no folder,
    no open document at or below it)."""
    return not is_file(path) and not _is_dir(path)


def load(path: str) -> ModuleView | None:
    """The view of ``path`` at its current content (cached by content hash; an unchanged file,
    by modification time and size, is not read again)."""
    with _lock:
        fast = None if path in _overlays or not _disk.get() else _stat_hash.get(path)
    if fast is not None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        if fast[0] == st.st_mtime_ns and fast[1] == st.st_size:
            with _lock:
                v = _views.get((path, fast[2]))
                if v is not None:
                    _views.move_to_end((path, fast[2]))
                    return v
    r = read(path)
    if r is None:
        return None
    text, digest = r
    key = (path, digest)
    with _lock:
        v = _views.get(key)
        if v is not None:
            _views.move_to_end(key)
            return v
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text.lstrip("\ufeff"), filename=path)
        sem = Semantic(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    v = ModuleView(path, tree, sem, digest, text)
    with _lock:
        got = _views.get(key)
        if got is not None:  # another thread read the same content meanwhile: one view of it
            _views.move_to_end(key)
            sem.release()  # (ours was never handed out)
            return got
        old = [k for k in _views if k[0] == path]
        for k in old:
            _retire(_views.pop(k))
        _views[key] = v
        while len(_views) > _LRU_SIZE:
            _retire(_views.popitem(last=False)[1])
    return v


def _retire(v: ModuleView) -> None:
    """Release ``v`` now when no check is running, else once the checks running now have ended
    (under ``_lock``)."""
    if _active:
        _retired.append((v, frozenset(_active)))
    else:
        v.release()


@contextlib.contextmanager
def in_use():
    """The views loaded while this runs stay whole (their trees' parent pointers and fields) until
    it ends, whatever other threads evict meanwhile."""
    with _lock:
        token = next(_tokens)
        _active.add(token)
    try:
        yield
    finally:
        with _lock:
            _active.discard(token)
            ready = [v for v, seen in _retired if seen.isdisjoint(_active)]
            if ready:
                _retired[:] = [(v, seen) for v, seen in _retired if not seen.isdisjoint(_active)]
        for v in ready:
            v.release()


def clear() -> None:
    with _lock:
        for v in _views.values():
            _retire(v)
        _views.clear()
        _stat_hash.clear()
