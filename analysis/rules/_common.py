"""Shared vocabulary for rules: collective names, backend evaluation, small constant folding."""
from __future__ import annotations

import ast
import re
from bisect import bisect_right
from operator import attrgetter

from ..semantic import get_arg
from ..source import nfkc, per_text
from ..torch_api import (  # noqa: F401  (the torch vocabulary, shared with the runtime)
    ALL_COLLECTIVES,
    DDP_CLASS,
    FSDP1_CLASSES,
    DEVICE_SETTERS,
    OBJECT_COLLECTIVES,
    OBJECT_COLLECTIVES_WITH_DEVICE,
    TENSOR_COLLECTIVES,
    D,
    SPAWNS,
    backend_mentions_nccl,
    backend_parts,
    const_int,
    const_str,
    constant_of,
    qualify,
)


def init_backend_is_nccl(init: ast.Call, ctx) -> bool:
    return backend_mentions_nccl(get_arg(init, 0, "backend"), ctx, ctx.sem.scope_of(init))


# -- the calls the device rules read (DDP001, DDP003), in one pass --------------------------------

# callee name -> 2 (named like a device setter), 1 (like a distributed-setup helper), 0 (neither)
_PIN_NAME_KIND: dict[str, int] = {}
# the names of kind 0 among them (most callees: ``print``, ``append``...), for a set difference
_PLAIN_NAMES: set[str] = set()
DIST_SETUP = re.compile(r"(setup|init|prepare|configure)_?(dist|ddp|gpus?\b|cuda|devices?\b|env)", re.I)
PIN_HELPER = re.compile(r"(set|setup|init|select|pin|bind)_?(cuda_?|gpu_?)?device|init_device_mesh", re.I)


def pin_name_kind(n: str) -> int:
    """2 for a callee named like a device setter (``setup_device``, ``init_device_mesh``), 1 for
    one named like a distributed-setup helper (``init_distributed_mode``, ``setup_ddp``), else 0."""
    kind = _PIN_NAME_KIND.get(n)
    if kind is None:
        kind = _PIN_NAME_KIND[n] = 2 if PIN_HELPER.search(n) else 1 if DIST_SETUP.search(n) else 0
        if not kind:
            _PLAIN_NAMES.add(n)
        if len(_PIN_NAME_KIND) > 4096:  # a long-running server sees many names: stay bounded
            _PIN_NAME_KIND.clear()
            _PLAIN_NAMES.clear()
    return kind


# calls that may take a device as an argument: these qualified names (whose last part is the
# attribute when called as ``torch.cuda.set_device(...)``), and ``x.to(...)`` / ``x.cuda(...)``
DEVICE_CALL_QNS = frozenset({*DEVICE_SETTERS, "torch.cuda.device", "torch.device", DDP_CLASS, *FSDP1_CLASSES})
_DEVICE_CALL_ATTRS = frozenset({q.rpartition(".")[2] for q in DEVICE_CALL_QNS} | {"to", "cuda"})


_KEYWORDS = attrgetter("keywords")


class DeviceCalls:
    """A file's calls for the device rules (from ``Semantic.callee_index``), every list in
    ``sem.calls`` order:

    - ``device``: the calls that may take a device (``x.to(...)``, ``x.cuda(...)``, and those
      whose callee may be one of ``DEVICE_CALL_QNS``: callers check the qualified name);
    - ``moves``: the ``x.to(...)`` / ``x.cuda(...)`` calls;
    - ``device_kw``: ``(call, value)`` of the calls with a ``device=`` keyword;
    - ``named``: ``(call, name, kind)`` of the calls of a name that may pin the device
      (``pin_name_kind``)."""

    __slots__ = ("device", "moves", "device_kw", "named")

    def __init__(self, sem):
        # from the file's callee index (positions in ``sem.calls``), merged back into its order
        names, attrs, _, _ = sem.callee_index()
        calls = sem.calls
        dev = [i for a in _DEVICE_CALL_ATTRS for i in attrs.get(a, ())]
        for n, qn in sem.aliases.items():  # (a plain name's qualified name is its alias)
            if qn in DEVICE_CALL_QNS:
                dev += names.get(n, ())
        dev.sort()
        moves = attrs.get("cuda", []) + attrs.get("to", [])
        moves.sort()
        named: list[tuple[int, str, int]] = []
        kinds = _PIN_NAME_KIND
        # (``x.cuda()`` / ``x.to()`` are moves: "cuda" and "to" are of kind 0, like the names
        # already known to be, which the set difference leaves out without a lookup each)
        for by in (names, attrs):
            for n in by.keys() - _PLAIN_NAMES:
                k = kinds.get(n)
                if k is None:
                    k = pin_name_kind(n)
                if k:
                    named += [(i, n, k) for i in by[n]]
        named.sort()  # by position: each appears once
        device_kw: list[tuple[ast.Call, ast.expr]] = []
        for c in filter(_KEYWORDS, calls):  # (the calls without keywords are passed over in C)
            for k in c.keywords:
                if k.arg == "device":
                    device_kw.append((c, k.value))
                    break
        self.device = [calls[i] for i in dev]
        self.moves = [calls[i] for i in moves]
        self.device_kw = device_kw
        self.named = [(calls[i], n, k) for i, n, k in named]


def device_call_index(ctx) -> DeviceCalls:
    """The ``DeviceCalls`` of the file, once per check."""
    return ctx.memo("common.device_calls", lambda: DeviceCalls(ctx.sem))


def lines_within(nodes):
    """A test of a line number: is it on a line of one of ``nodes`` (from its first line to its
    last)? Their spans merged once, each test a bisection (a big file's nested blocks cost no more
    than their count)."""
    merged: list[list[int]] = []
    for lo, hi in sorted((n.lineno, n.end_lineno) for n in nodes):
        if merged and lo <= merged[-1][1]:
            if hi > merged[-1][1]:
                merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    starts = [m[0] for m in merged]

    def within(line: int) -> bool:
        i = bisect_right(starts, line) - 1
        return i >= 0 and line <= merged[i][1]
    return within


def is_simple_ref(node: ast.AST) -> bool:
    """A name, attribute chain or constant subscript: safe to repeat in generated code."""
    while True:
        if isinstance(node, ast.Name):
            return True
        if isinstance(node, ast.Attribute):
            node = node.value
            continue
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            node = node.value
            continue
        return False


def fixed_world_size(ctx) -> int | None:
    """A world size the file fixes by constant (init_process_group(world_size=2), mp.spawn(...,
    nprocs=2), a `world_size` property or module constant), if exactly one is stated; cached per
    check."""
    return ctx.memo("common.fixed_world_size", lambda: _fixed_world_size(ctx))


def _fixed_world_size(ctx) -> int | None:
    sizes = set()
    for c in ctx.calls_to(D + "init_process_group"):
        n = const_int(get_arg(c, None, "world_size"), ctx.sem)
        if n is not None:
            sizes.add(n)
    for c in ctx.calls_to("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"):
        n = const_int(get_arg(c, None, "nprocs"), ctx.sem)
        if n is not None:
            sizes.add(n)
    # ``def world_size(self): return 2`` (a multi-process test case) or ``WORLD_SIZE = 2``
    for fn in ctx.sem.functions.get("world_size", ()):
        if fn.body and isinstance(fn.body[-1], ast.Return):
            n = const_int(fn.body[-1].value)
            if n is not None:
                sizes.add(n)
    for name in ("world_size", "WORLD_SIZE", "NUM_PROCS", "nprocs", "NPROCS"):
        val = ctx.sem.single_value(name, ctx.sem.tree)
        n = const_int(val)
        if n is not None:
            sizes.add(n)
    return sizes.pop() if len(sizes) == 1 else None


def single_process_init(ctx, init: ast.Call) -> bool:
    """``init_process_group(..., world_size=1)``: ``flow.world.one_process_init``."""
    from ..flow.world import one_process_init

    return one_process_init(ctx.sem, init)


def gloo_only(ctx, init: ast.Call) -> bool:
    """The group's backend is the literal "gloo" (every device part) or ``dist.Backend.GLOO``."""
    expr = get_arg(init, 0, "backend")
    if isinstance(expr, ast.Name):
        expr = ctx.sem.single_value(expr.id, ctx.sem.scope_of(init))
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return all(p == "gloo" for p in backend_parts(expr.value))
    if isinstance(expr, ast.Attribute) and (ctx.qn(expr) or "").lower() == "torch.distributed.backend.gloo":
        return True
    c = constant_of(ctx.sem, expr) if expr is not None and not isinstance(expr, ast.Constant) else None
    if c is not None and isinstance(c.value, str):  # ``args.backend``, ``cfg["backend"]``
        return all(p == "gloo" for p in backend_parts(c.value))
    return False


# -- callers in other files of the project ----------------------------------------------------------

_SKIP_DIRS = frozenset({"venv", ".venv", "env", "site-packages", "node_modules", "__pycache__", "build", "dist",
                        ".git", ".tox", ".eggs"})
_MAX_SCAN_FILES = 300
_MAX_SCAN_DEPTH = 4
_listings: dict[tuple[str, int], tuple[str, ...]] = {}


def _py_files(root: str) -> tuple[str, ...]:
    """The ``.py`` files under ``root`` (a few levels deep, at most ``_MAX_SCAN_FILES``), cached per
    folder and its modification time."""
    import os

    try:
        key = (root, os.stat(root).st_mtime_ns)
    except OSError:
        return ()
    got = _listings.get(key)
    if got is not None:
        _listings.pop(key, None)  # the most recently used last (``_remember``)
        _listings[key] = got
        return got
    out: list[str] = []
    stack = [(root, 0)]
    while stack and len(out) < _MAX_SCAN_FILES:
        d, depth = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".") or e.name in _SKIP_DIRS:
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    if depth < _MAX_SCAN_DEPTH:
                        stack.append((e.path, depth + 1))
                elif e.name.endswith(".py") and e.is_file(follow_symlinks=False):
                    out.append(os.path.abspath(e.path))
            except OSError:
                continue
    got = _remember(_listings, key, tuple(out), 64)
    return got


def _remember(memo: dict, key, value, limit: int):
    """``memo[key] = value``, dropping the least recently used entries past ``limit`` (a hit moves
    its key to the end), not the whole memo: a batch run over a tree of many folders keeps the
    top folder's entries, which every file asks for, instead of rebuilding them."""
    memo.pop(key, None)
    while len(memo) >= limit:
        try:
            memo.pop(next(iter(memo)), None)
        except (StopIteration, RuntimeError):  # emptied or changed by another thread
            break
    memo[key] = value
    return value


def _project_files(top: str):
    """The ``.py`` files of the project under ``top`` on disk; only the open documents when the
    disk may not be read (``flow.project.documents_only``: the untrusted language server)."""
    from ..flow import project

    return _py_files(top) if project.disk_allowed() else tuple(project.documents_under(top))


_texts: dict[str, tuple[int, int, str]] = {}
_texts_bytes = [0]
_MAX_TEXT_BYTES = 64 * 1024 * 1024  # the texts kept (a large package's files are read once, not per rule)
_words: dict[str, tuple[int, int, frozenset]] = {}


def _stamp(path: str):
    """(mtime, size) of the file; in a batch run's snapshot (``analysis/snapshot.py``) the one
    already recorded is taken without asking the disk again. None when it cannot be read."""
    import os

    from .. import snapshot

    if snapshot._on:
        got = _texts.get(path) or _words.get(path)
        if got is not None:
            return got[0], got[1]
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _text_of(path: str) -> str | None:
    """The text of a project file, for the name prefilter: an open document's, else the file's
    (cached by modification time and size; only regular files up to ``flow.project.MAX_BYTES``)."""
    from ..flow import project
    from ..io import SourceError, read_regular_file

    got = project.overlay_text(path)
    if got is not None or not project.disk_allowed():
        return got
    stamp = _stamp(path)
    if stamp is None:
        return None
    got = _texts.get(path)
    if got is not None and got[:2] == stamp:
        return got[2]
    try:
        data, st = read_regular_file(path, limit=project.MAX_BYTES)
        text = data.decode("utf-8", "surrogateescape")
    except (OSError, SourceError):
        return None
    if _texts_bytes[0] + len(text) > _MAX_TEXT_BYTES:
        _texts.clear()
        _texts_bytes[0] = 0
    old = _texts.get(path)
    if old is not None:
        _texts_bytes[0] -= len(old[2])
    _texts[path] = (st.st_mtime_ns, st.st_size, text)
    _texts_bytes[0] += len(text)
    return text


# a word followed by a call's parenthesis or by ``as`` (``from m import f as g``): the names a file
# may call (a superset: comments and strings add words, ``Alias`` adds ``Ali``)
_CALLED = re.compile(r"\b(\w+)(?=\s*(?:\(|as\b))")


def _called_words(path: str) -> frozenset | None:
    """The words a project file may call (``_CALLED``), cached by modification time and size: a
    file none of whose words is one of the names holds no call of them and is not read further."""
    from ..flow import project

    text = project.overlay_text(path)
    if text is not None or not project.disk_allowed():
        return None if text is None else frozenset(_CALLED.findall(text))
    stamp = _stamp(path)
    if stamp is None:
        return None
    got = _words.get(path)
    if got is not None and got[:2] == stamp:
        return got[2]
    text = _text_of(path)
    if text is None:
        return None
    got = _texts.get(path)
    words = frozenset(_CALLED.findall(text))
    if len(_words) > 65536:
        _words.clear()
    _words[path] = (*(got[:2] if got is not None else stamp), words)
    return words


def _admits(text: str, needs) -> bool:
    """Every group of ``needs`` has one of its needles in ``text``."""
    return all(any(n in text for n in g) for g in needs)


# a module-level ``def``/``class`` starts a line (decorators are lines of their own)
_TOP_DEFS = re.compile(r"^\f*(?:async[ \t]+def|def|class)(?:[ \t]|\\\r?\n)+([^\W\d]\w*)", re.M)
_TOP_CLASSES = re.compile(r"^\f*class(?:[ \t]|\\\r?\n)+([^\W\d]\w*)", re.M)


def _top_def_names(text: str) -> frozenset:
    return frozenset(_TOP_DEFS.findall(text))


def _top_class_names(text: str) -> frozenset:
    return frozenset(_TOP_CLASSES.findall(text))


_candidates: dict[tuple, tuple] = {}  # (project folder, needs) -> (when, (files, index, deps), what it read)
_CANDIDATES_TTL = 5.0


def _admitting_files(folder: str, needs, disk: bool) -> tuple:
    """(files, index, deps) for the project files under ``folder`` whose text holds a needle of
    each group of ``needs``: ``files`` is ((path, text), ...), ``index`` maps every identifier of
    their texts to the paths that spell it, ``deps`` is {path: content hash}. Memoised for
    ``_CANDIDATES_TTL`` seconds per (folder, needs) when the disk may be read: a batch run reads
    and indexes a folder once, not once per file of it. Past that, the folder is listed and its
    files read again (``_text_of``: by modification time and size); the index is made again only
    when a file or a text differs from those it was made from (an editor's every check)."""
    import hashlib
    import time

    from ..flow import project

    key = (folder, needs)
    now = time.monotonic()
    got = _candidates.get(key) if disk else None
    if got is not None:
        _candidates.pop(key, None)  # the most recently used last (``_remember``)
        _candidates[key] = got
    if got is None or not project.fresh(got[0], now, _CANDIDATES_TTL):
        read = tuple((path, _text_of(path)) for path in _project_files(folder))
        if got is not None and len(read) == len(got[2]) and all(
                p == q and t is u for (p, t), (q, u) in zip(read, got[2])):
            got = (now, got[1], got[2])  # the same files and texts (the same objects): the same index
        else:
            found, index, deps = [], {}, {}
            for path, t in read:
                if t is not None and _admits(t, needs):
                    found.append((path, t))
                    deps[path] = hashlib.sha256(t.encode("utf-8", "surrogateescape")).hexdigest()
                    for w in _words_of(path, t):
                        index.setdefault(w, []).append(path)
            got = (now, (tuple(found), index, deps), read)
        if disk:  # (only the open documents otherwise: few, and they change)
            _remember(_candidates, key, got, 256)
    return got[1]


_WORD = re.compile(r"\w+")
_word_sets: dict[str, tuple[int, int, frozenset]] = {}  # path -> (mtime, size, its identifiers)


def _words_of(path: str, text: str) -> frozenset:
    """The identifiers of a project file's text, cached by modification time and size like
    ``_called_words`` (an open document's text is scanned every time): the indexes of every folder
    and needle set that hold the file share them, instead of scanning the text again for each."""
    entry = _texts.get(path)
    if entry is None or entry[2] is not text:  # not the text read from disk (an open document)
        return frozenset(_WORD.findall(text))
    got = _word_sets.get(path)
    if got is not None and got[:2] == entry[:2]:
        return got[2]
    words = frozenset(_WORD.findall(text))
    if len(_word_sets) > 65536:
        _word_sets.clear()
    _word_sets[path] = (entry[0], entry[1], words)
    return words


def callers_may_exist(text: str, filename: str | None, needs, classes_only: bool = False):
    """The text-level gate of a rule whose finding needs ``project_callers(ctx, names, needs)``:
    False when no other file of the project holds a needle of each group of ``needs`` and one of
    the module-level function or class names (``classes_only``: class names) that ``text`` defines,
    so the file need not be parsed for it. Returns (may exist, {path: content hash} of the
    candidate callers read: every one, so that a change in any of them re-checks the file)."""
    import os

    from ..flow import project

    if not filename or filename.startswith("<") or not project.is_file(os.path.abspath(filename)):
        return False, {}
    names = per_text("top classes" if classes_only else "top defs", nfkc(text),
                     _top_class_names if classes_only else _top_def_names)
    if not names:
        return False, {}
    here = os.path.abspath(filename)
    roots = project.roots_for(here)
    disk = project.disk_allowed()
    # the file's own folder too: the scan of ``top`` stops at ``_MAX_SCAN_FILES``
    deps: dict[str, str] = {}
    hit = False
    for folder in dict.fromkeys((os.path.dirname(here), *project.scan_tops(roots))):
        _files, index, fdeps = _admitting_files(folder, needs, disk)
        deps.update(fdeps)
        if not hit and any(p != here for n in names for p in index.get(n, ())):
            hit = True
    deps.pop(here, None)
    return hit, deps


def shown_path(ctx, path: str) -> str:
    """``path`` as a finding shows it: relative to the checked file's folder (itself where no
    relative path exists, another drive)."""
    import os

    try:
        return os.path.relpath(path, os.path.dirname(os.path.abspath(ctx.filename)))
    except ValueError:
        return path


def spells_ddp(text: str) -> bool:
    """``text`` spells ``DistributedDataParallel`` (NFKC-normalised, as Python reads names)."""
    return "DistributedDataParallel" in text or (not text.isascii() and "DistributedDataParallel" in nfkc(text))


def ddp_or_callers_reach(cls, text: str, filename: str | None):
    """``Rule.reach`` of a rule that needs a DDP wrapper: built in this file (``spells_ddp``),
    returned by a helper of a project module this file imports, directly or transitively
    (``model = wrap(model)`` of ``utils.py``: ``flow.reach.reaches`` with ``WRAP_TEXT``), or passed
    by a caller of the project that spells it (``callers_may_exist``). For a no, the files both
    answers read."""
    if spells_ddp(text):
        return True, {}
    from ..flow.reach import WRAP_TEXT, reaches  # lazy: only files the text gate admits

    imported, deps = reaches(filename, text, WRAP_TEXT)
    if imported:
        return True, {}
    more, more_deps = callers_may_exist(text, filename, (("DistributedDataParallel",),))
    return more, {} if more else {**deps, **more_deps}


# a caller that gives this file a sharded or distributed value spells one of these
_SHARD_CALLER_NEEDLES = ("distributed", "fully_shard", "DTensor", "mesh", "FSDP")


def shard_or_callers_reach(cls, text: str, filename: str | None):
    """``Rule.reach`` of a modern-stack rule whose sharded value may come from an imported module
    (``flow.modern.shard_reach``) or from a caller in another file (``callers_may_exist``): yes
    when either may hold; for a no, the dependencies of both answers."""
    from ..flow.modern import shard_reach  # lazy: only files the text gate admits

    may, deps = shard_reach(cls, text, filename)
    if may:
        return True, {}
    more, more_deps = callers_may_exist(text, filename, (_SHARD_CALLER_NEEDLES,))
    return more, {} if more else {**deps, **more_deps}


_call_index: dict[tuple, tuple] = {}  # (folder, snapshot) -> (listing, {called word: [positions]})


def _calling(folder: str, names: frozenset) -> list:
    """The files of ``_project_files(folder)``, in its order, whose ``_called_words`` hold one of
    ``names``; in a batch run's snapshot (the files do not change), from an index of those words
    made once per folder, instead of a scan of every file for every question."""
    from .. import snapshot

    files = _project_files(folder)
    key = (folder, snapshot.current())
    got = _call_index.get(key)
    if got is None or got[0] is not files:
        index: dict[str, list[int]] = {}
        for i, p in enumerate(files):
            w = _words.get(p)  # (in the snapshot: no stat, no call)
            for word in (w[2] if w is not None else _called_words(p)) or ():
                index.setdefault(word, []).append(i)
        got = _remember(_call_index, key, (files, index), 64)
    index = got[1]
    return [files[i] for i in sorted({i for n in names for i in index.get(n, ())})]


def _project_words(here: str, top: str) -> dict:
    """{path: ``_called_words``} of the files of ``here``'s folder, then of ``top`` (outside a
    batch run's index; ``project_callers`` keeps it for the check)."""
    import os

    from .. import snapshot

    known = _words if snapshot._on else {}
    return {p: (known[p][2] if p in known else _called_words(p))
            for p in dict.fromkeys((*_project_files(os.path.dirname(here)), *_project_files(top)))}


def project_callers(ctx, names, needs=(), unknown: bool = False, target=None) -> list:
    """Calls, in the other files of this project, of this file's module-level functions or classes
    named in ``names``: ``[(caller_ctx, call, def_node)]`` (a class resolves to its ``__init__``).
    ``needs``: groups of needles, one of each the caller's text must hold (what the rule requires
    of a caller; a file without them is not parsed).

    The project is the folder above this file's topmost package (as ``flow.project`` finds it);
    only files whose text names one of ``names`` are parsed (a package may re-export them), through the
    flow layer (so they count as dependencies of this check). ``caller_ctx`` is a read-only
    context of the caller's file: rule helpers can query it; nothing is reported on it.
    ``unknown``: also a call by one of the names that resolves to no function, as
    ``(caller_ctx, call, None)`` (a caller that may be one). ``target``: the view of another
    module of the project whose functions or classes ``names`` names, instead of this file's (its
    calls in this file count then too, with ``ctx`` as their context)."""
    import os

    from .. import snapshot
    from ..context import Context
    from ..flow import for_context, project
    from ..source import SourceText

    names = frozenset(names)
    if not names or not ctx.filename or ctx.filename.startswith("<") \
            or not project.is_file(os.path.abspath(ctx.filename)):
        return []

    def build():
        here = os.path.abspath(ctx.filename)
        roots = project.roots_for(here)
        tops = project.scan_tops(roots)
        top = tops[0]
        an = for_context(ctx)
        out = []
        # the file's own folder first: the scan of ``top`` stops at ``_MAX_SCAN_FILES``; a call of
        # one of the names, or an import renaming one: a file that only spells the word (``init``
        # in ``__init__``) is not parsed, nor counted against the module budget
        if snapshot._on and project.disk_allowed():  # the files are fixed: their words indexed
            paths = dict.fromkeys((*_calling(os.path.dirname(here), names),
                                   *(p for t in tops for p in _calling(t, names))))
        else:  # every file's words once per check (each rule's question asked the disk again)
            words = {}
            for t in tops:
                words.update(ctx.memo(("project_callers.words", here, t), lambda t=t: _project_words(here, t)))
            paths = (p for p, w in words.items() if not names.isdisjoint(w or ()))
        for path in paths:
            if path == here:
                if target is None or (needs and not _admits(ctx.src.text, needs)):
                    continue
                view, caller = an.main, ctx  # another module's function called by the checked file
            else:
                text = _text_of(path)
                if text is None or (needs and not _admits(text, needs)):
                    continue
                rel = os.path.relpath(path, top)
                if rel.startswith("..") and not os.path.relpath(path, tops[-1]).startswith(".."):
                    rel = os.path.relpath(path, tops[-1])  # beside ``src/``: loaded by its path below
                if rel.startswith(".."):
                    continue
                mod = rel[:-3].replace(os.sep, ".")
                if mod.endswith(".__init__"):
                    mod = mod[: -len(".__init__")]
                view = an.module_view(an.main, mod, 0)  # loaded as a dependency of this check
                if view is None or view.path != path:
                    view = an.view_of(path)  # outside this file's roots: ``tests/`` beside ``src/``
                if view is None or view is an.main or view is target or view.path != path:
                    continue
                caller = None
            for call in view.sem.calls:
                if not isinstance(call.func, (ast.Name, ast.Attribute)):
                    continue
                tail = call.func.id if isinstance(call.func, ast.Name) else call.func.attr
                if tail not in names and tail not in view.imports:
                    continue
                res = an.resolve_call(view, call)
                if res is None and unknown and tail in names:
                    if caller is None:
                        caller = Context(SourceText(view.text), view.sem, path)
                    out.append((caller, call, None))
                    continue
                if res is None or res[0] is not (an.main if target is None else target):
                    continue
                node = res[1]
                owner = getattr(node, "_p", None)
                name = owner.name if node.name == "__init__" and isinstance(owner, ast.ClassDef) else node.name
                if name not in names:
                    continue
                if caller is None:
                    caller = Context(SourceText(view.text), view.sem, path)
                out.append((caller, call, node))
        return out

    return ctx.memo(("common.project_callers", names, needs, unknown, getattr(target, "path", None)), build)


def other_call_sites(ctx, an, methods: bool = False, modules: bool = False):
    """``origins``' ``callers``: for a module-level function or class of the checked file (its
    ``__init__``), the (view, call) pairs of its calls in the project's other files
    (``project_callers``, memoised per check); nothing for other modules' functions unless
    ``modules`` (then their calls outside their own module too: a data module's
    ``get_loaders(state)`` that the training script calls). ``methods``: also for a method of a
    module-level class (``Trainer(cfg).fit(loader)`` of a script)."""
    def get(view, fn):
        if (view is not an.main and not (modules and view.path)) \
                or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return []
        owner = getattr(fn, "_p", None)
        if isinstance(owner, ast.ClassDef) and fn.name == "__init__" and isinstance(getattr(owner, "_p", None), ast.Module):
            name = owner.name
        elif isinstance(owner, ast.Module):
            name = fn.name
        elif methods and isinstance(owner, ast.ClassDef) and isinstance(getattr(owner, "_p", None), ast.Module):
            name = fn.name
        else:
            return []
        out = []
        for cctx, call, node in project_callers(ctx, (name,), target=None if view is an.main else view):
            cv = an.view_of(cctx.filename) if node is fn else None
            if cv is not None and cv.sem is cctx.sem:
                out.append((cv, call))
        return out

    return get


def helper_returns(ctx, call: ast.Call, pred, depth: int = 0):
    """For ``call`` (no arguments) of a function of this file or of another file of the project
    (``from utils.comm import num_gpus``; a method of the class through ``self.``): the value of
    ``pred(hctx, expr, fn, depth)`` for its returned expression, when every ``return`` of it gives
    the same non-None answer; else None. ``hctx`` is a rule context over the helper's own module,
    so ``pred`` may recurse into the helper's own helpers with it (``depth`` bounds that)."""
    if depth > 2 or call.args or call.keywords or not isinstance(call.func, (ast.Name, ast.Attribute)):
        return None
    from ..semantic import iter_scope_nodes

    got = resolve_helper(ctx, call)
    if got is None:
        return None
    main, ana, view, view2, fn = got
    hctx = ctx if view2 is view else _helper_context(main, view2)
    rets = [n for n in iter_scope_nodes(fn) if isinstance(n, ast.Return)]
    if not rets or any(r.value is None for r in rets) \
            or any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in iter_scope_nodes(fn)):
        return None
    answers = {pred(hctx, r.value, fn, depth + 1) for r in rets}
    if len(answers) != 1:
        return None
    return answers.pop()


def resolve_helper(ctx, call: ast.Call):
    """(main context, the check's flow analysis, the view ``call`` is in, the callee's view, the
    callee) when ``call`` runs a plain function or method of the project (not a constructor), from
    ``ctx`` (a rule context, or a ``_helper_context`` over another module); else None."""
    from ..flow import for_context  # lazy: only calls a rule asks about load the project

    main = getattr(ctx, "_helper_main", ctx)
    ana = for_context(main)
    view = getattr(ctx, "_helper_view", None) or ana.main
    got = ana.resolve_call(view, call)
    if got is None:
        return None
    view2, fn = got
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == "__init__":
        return None
    return main, ana, view, view2, fn


def _helper_context(main, view):
    """A rule context over another module of the project (one per module and check)."""
    from ..context import Context
    from ..source import SourceText

    def build():
        c = Context(SourceText(view.text), view.sem, view.path)
        c._helper_main = main
        c._helper_view = view
        return c
    return main.memo(("common.helper_ctx", view.path), build)


_MAX_ALL_FILES = 4000


def _every_py_file(top: str) -> tuple | None:
    """Every ``.py`` file under ``top`` (any depth, skipping ``_SKIP_DIRS`` and hidden folders), or
    None when there are more than ``_MAX_ALL_FILES``: a complete listing or none."""
    import os

    out: list[str] = []
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in _SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                if os.path.isfile(p) and not os.path.islink(p):
                    out.append(os.path.abspath(p))
        if len(out) > _MAX_ALL_FILES:
            return None
    return tuple(out)


def project_files_naming(ctx, words, also=(), partial: bool = False) -> list | None:
    """Every file of this project (this one included, first) whose text holds one of ``words`` as
    a whole word (and each of ``also``): ``[(context, view)]``, the others loaded through the flow layer (so they count as
    dependencies of this check). None when the answer may be incomplete: the file is not on disk,
    the project has more than ``_MAX_ALL_FILES`` files, or a file holding a word could not be
    loaded as a module of the project (its uses of the word are unknown). With ``partial``, the
    files that could be read (at least this one, when it is on disk)."""
    import os

    from ..context import Context
    from ..flow import for_context, project
    from ..source import SourceText

    if not ctx.filename or ctx.filename.startswith("<") or not project.is_file(os.path.abspath(ctx.filename)):
        return None
    here = os.path.abspath(ctx.filename)
    roots = project.roots_for(here)
    top = roots[1] if len(roots) > 1 else roots[0]
    listing = _every_py_file(top) if project.disk_allowed() else tuple(project.documents_under(top))
    an = for_context(ctx)
    if listing is None:
        return [(ctx, an.main)] if partial else None
    pat = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(w) for w in sorted(words)) + r")(?!\w)")
    out = [(ctx, an.main)]
    for path in listing:
        if path == here:
            continue
        text = _text_of(path)
        if text is None or not pat.search(text):
            continue
        if any(not re.search(r"(?<!\w)" + re.escape(w) + r"(?!\w)", text) for w in also):
            continue
        view = None
        for root in roots:  # the module name it has under the innermost root that holds it
            rel = os.path.relpath(path, root)
            if rel.startswith(".."):
                continue
            mod = rel[:-3].replace(os.sep, ".")
            if mod.endswith(".__init__"):
                mod = mod[: -len(".__init__")]
            view = an.module_view(an.main, mod, 0)
            if view is not None and view.path == path:
                break
        if (view is None or view.path != path) and partial:
            # not importable as a module (a test folder without ``__init__``), or past the number of
            # modules one check explores: read it all the same, every time (the answer must not
            # depend on what other rules explored first)
            view = an.view_of(path, direct=True)
            if view is None or view is an.main:
                continue
        if view is None or view is an.main or view.path != path:
            return None
        out.append((Context(SourceText(view.text), view.sem, path), view))
    return out


def _install_callers_hook() -> None:
    """The flow layer's hub asks the project's other modules for the calls of the checked file's
    constructors (``flow.instances.element_classes``: a ``callbacks`` parameter that a script
    fills) through this scan; the flow layer cannot import the rules (they sit above it)."""
    from .. import flow

    flow.CALLERS_HOOK = other_call_sites


_install_callers_hook()
