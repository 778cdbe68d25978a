"""Can a file reach a collective? A text-level import graph, read without parsing.

The flow rules (DDP104, DDP107-DDP111) need a collective site: one in the checked file, or one in a
project module the file imports, directly or through the project's other modules (the flow layer
follows calls only through import statements: ``Analysis.module_view`` resolves them with
``project.resolve``). A site needs one of ``REACH_TEXT`` spelled in the module that holds it:
every explicit collective's qualified name is ``torch.distributed.*`` (a file's qualified names
come from its own imports), an implicit one needs a DDP/FSDP wrapper (``...Parallel``) or a
``ZeroRedundancyOptimizer``.

So ``reaches(path, text)`` is a necessary condition, decided on text alone: the text holds a
needle, or one of the modules its import statements may name (every ``import``/``from`` statement,
anywhere in the text, a superset of what the parser sees: comments and strings only add
candidates) resolves, with ``project.resolve``, to a file that holds one or reaches one. The
engine drops the flow rules from a file whose answer is no, so that file is not parsed for them.
The files consulted are returned, with their content hashes, as dependencies of the result (the
CLI cache re-checks the file when one of them changes), and so is every file an import looked for
and did not find, with the hash None (a module created there later may hold a site). Inside
``project.documents_only()`` only open documents are consulted.

Facts per file (its needles, its import candidates, its hash) are cached by modification time and
size (an open editor document's are read from its text on every query); resolutions and negative
answers for ``_TTL`` seconds and, for the negative ones, until an open document changes (a batch
run shares them; the editor sees a file created or saved outside it after at most ``_TTL``).
"""
from __future__ import annotations

import bisect
import os
import re
import threading
import time
import unicodedata

from .. import snapshot
from ..source import lowered, nfkc
from . import project

# (+ the methods whose name alone makes a hidden collective: runtime/shim_vocab.BY_UNIQUE_METHOD,
# e.g. ``w.full_tensor()`` in a helper that never imports torch.distributed; flow/hidden.py)
REACH_TEXT = ("distributed", "Parallel", "ZeroRedundancy", "full_tensor", "summon_full_params",
              "full_optim_state_dict",
              "ccelerat",  # Accelerate's collectives (``accelerator.gather``/``backward``..., flow/hidden.py)
              "deepspeed")  # ``deepspeed.comm``, torch.distributed's mirror (flow/bcast_sizes.py)
# What the modern-stack rules (DDP501, DDP503, DDP507, DDP508) need in the file or in a project module
# it imports: a sharding call (``fully_shard`` in ``apply_fsdp(model, mesh)`` of ``parallelize.py``)
# or a state-dict getter of ``torch.distributed.checkpoint``.
SHARD_TEXT = ("fully_shard", "parallelize_module", "FullyShardedDataParallel", "FSDP",
              "get_model_state_dict", "get_state_dict", "get_optimizer_state_dict")
# What DDP201 needs in the file or a module it imports: the DDP constructor a project helper may call
WRAP_TEXT = ("DistributedDataParallel",)
# every needle a file's facts record (``found``): a query asks about one of the sets above
_NEEDLES = tuple(dict.fromkeys(REACH_TEXT + SHARD_TEXT + WRAP_TEXT))
_TTL = 5.0
_MAX_NODES = 4096  # files visited by one query; past it the answer is yes (never a lost finding)

# ``from ..pkg.mod import (a, b)``: dots, module, and the imported names (a parenthesised list may
# span lines and hold comments; a plain one ends at the line's end unless continued with "\")
_FROM = re.compile(
    r"\bfrom((?:\s*\.)*)\s*((?:[\w. \t]|\\\r?\n)*?)\s*\bimport\b\s*(\((?:[^)#]|#[^\n]*)*\)|(?:[^\n\\;]|\\\r?\n)*)")
_IMPORT = re.compile(r"\bimport\b\s*((?:[^\n\\;]|\\\r?\n)*)")
_DOTTED = re.compile(r"[^\W\d]\w*(?:\s*\.\s*[^\W\d]\w*)*")

_lock = threading.Lock()
_facts: dict[str, tuple] = {}  # path -> (mtime_ns, size, checked_at, found, candidates, digest, {(needles, fold): holds})
_resolved: dict[tuple, tuple] = {}  # (folder, module, level, disk) -> (checked_at, path or None, absent)
_negative: dict[tuple, tuple] = {}  # (disk, needles, fold) -> (made_at, overlay generation, {path: answer}) (``_table``)


def holds(text: str, needles: tuple = REACH_TEXT) -> bool:
    """The text may hold a collective site itself (with ``needles``: one of those words)."""
    if any(n in text for n in needles):
        return True
    if not text.isascii():  # identifiers are NFKC-normalised by the parser
        t = nfkc(text)
        return any(n in t for n in needles)
    return False


def found(text: str) -> frozenset:
    """The needles of every set above that the text holds."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return frozenset(n for n in _NEEDLES if n in text)


def candidates(text: str) -> tuple[tuple[str, int], ...]:
    """(module, level) of every module an import statement of ``text`` may name (a superset)."""
    if "import" not in text:
        return ()
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    out: dict[tuple[str, int], None] = {}
    starts: list[int] = []  # the spans (module to names) of the from-statements, in text order
    ends: list[int] = []
    for m in _keyword_matches(_FROM, "from", text):
        level = m.group(1).count(".")
        mod = _SPACE_OR_CONT.sub("", m.group(2))
        out[(mod, level)] = None
        for n in _DOTTED.findall(m.group(3)):
            n = _SPACE.sub("", n)
            out[(f"{mod}.{n}" if mod else n, level)] = None
        starts.append(m.start(2))
        ends.append(m.end(3))
    for m in _keyword_matches(_IMPORT, "import", text):
        i = bisect.bisect_right(starts, m.start()) - 1
        if i >= 0 and m.start() < ends[i]:
            continue  # the ``import`` of a from-statement
        for n in _DOTTED.findall(m.group(1)):
            parts = _SPACE.sub("", n).split(".")
            for i in range(1, len(parts) + 1):
                out[(".".join(parts[:i]), 0)] = None
    return tuple(out)


_SPACE = re.compile(r"\s")
_SPACE_OR_CONT = re.compile(r"\s|\\")


def _keyword_matches(pattern: re.Pattern, word: str, text: str):
    """``pattern.finditer(text)`` for a pattern that starts with ``\\b`` + ``word``: a match can only
    start where ``word`` is spelled, so ``str.find`` jumps there (the regex engine would try every
    position: a pattern that starts with ``\\b`` has no literal prefix to search for)."""
    pos = 0
    find = text.find
    match = pattern.match
    while True:
        p = find(word, pos)
        if p < 0:
            return
        m = match(text, p)  # ``\\b`` looks at the character before ``p``
        if m is None:
            pos = p + 1
        else:
            yield m
            pos = m.end() if m.end() > p else p + 1


def _read(path: str):
    """(text, sha256 of the bytes) of a regular file of at most ``project.MAX_BYTES`` (larger files
    are not followed by the flow layer either), the editor's overlay when one is set; else None
    (``project.read``: the flow layer's own reader, which reads nothing from disk in
    ``project.documents_only``)."""
    return project.read(path)


def _file_facts(path: str, now: float, needles: tuple = REACH_TEXT, fold: bool = False):
    """(does ``path`` hold one of ``needles`` (lower-cased with ``fold``), candidates, digest), or
    None when it cannot be read. The needles of ``found`` are recorded on the first read; another
    set is answered once per file content and remembered beside them."""
    with project._lock:
        overlaid = path in project._overlays
    got = _facts.get(path)
    fresh = False
    if not overlaid and got is not None and got[0] != -1 and project.fresh(got[2], now, _TTL):
        fresh = True
    elif not overlaid:
        if not project.disk_allowed():
            return None  # only the open documents (the untrusted language server)
        try:
            st = os.stat(path)
        except OSError:
            return None
        if got is not None and got[0] == st.st_mtime_ns and got[1] == st.st_size:
            got = _facts[path] = (*got[:2], now, *got[3:])
            fresh = True
        stamp = (st.st_mtime_ns, st.st_size)
    else:  # an open document: its text is read again on every query (overlays are few)
        stamp = (-1, -1)
    text = None
    if not fresh:
        r = _read(path)
        if r is None:
            return None
        text, digest = r
        if len(_facts) > 65536:
            _facts.clear()
        got = _facts[path] = (*stamp, now, found(text), candidates(text), digest, {})
    has, cands, digest, extra = got[3:]
    if not fold and all(n in _NEEDLES for n in needles):
        return bool(has & frozenset(needles)), cands, digest
    key = (needles, fold)
    if key not in extra:
        if text is None:
            r = _read(path)
            if r is None or r[1] != digest:  # changed under us: the next query reads it again
                return None if r is None else (True, cands, digest)
            text = r[0]
        extra[key] = holds(text.lower() if fold else text, needles)
    return extra[key], cands, digest


def _resolve(path: str, module: str, level: int, now: float):
    """(the file ``module`` resolves to or None, what the resolution found absent: the negative
    dependencies of the answer, as ``project.resolve`` lists them)."""
    key = (os.path.dirname(path), project.declared_roots(path) if not level else (), module, level, project.disk_allowed())
    got = _resolved.get(key)
    if got is not None and project.fresh(got[0], now, _TTL):
        return got[1], got[2]
    absent: list[str] = []
    found = project.resolve(path, module, level, absent)
    if len(_resolved) > 262144:
        _resolved.clear()
    _resolved[key] = (now, found, tuple(absent))
    return found, absent


def reaches(path: str | None, text: str, needles: tuple = REACH_TEXT,
            fold: bool = False) -> tuple[bool, dict[str, str | None]]:
    """(may one of ``needles`` be spelled in this file or in a project module its imports reach,
    directly or transitively; for a no, {path: content hash, None for an import looked for and not
    found} of every other file the answer rests on). ``path`` None (an unsaved document): only the
    text counts, as in the flow layer, which follows no import without a path. ``needles``:
    ``REACH_TEXT`` (a collective site), ``SHARD_TEXT`` (a sharding call or a state-dict getter), or a
    rule's own (a writer a save helper calls, a base class's ``set_epoch``); ``fold``: lower-case
    needles matched case-insensitively. A necessary condition: comments and strings only add
    candidates. A yes carries no dependencies: its file is parsed, and the flow layer records what
    it reads."""
    if holds(lowered(text) if fold else text, needles):
        return True, {}
    if not path or path.startswith("<"):
        return False, {}
    path = os.path.abspath(path)
    with _lock:
        return _walk(path, text, time.monotonic(), needles, fold)


def _table(now: float, disk: bool, needles: tuple, fold: bool) -> tuple[dict, dict, dict]:
    """The answers of one needle set: {path: ``_YES`` | (own dependencies, successors) | None},
    with the memos that rest on it: {path: the merged dependencies of every file a "no" file
    reaches} (``_closure``) and {(path, text): a query's answer} (``_walk``); kept for ``_TTL``
    seconds and while no open document changes (a batch run shares them)."""
    key = (disk, needles, fold)
    got = _negative.get(key)
    if got is None or not project.fresh(got[0], now, _TTL) or got[1] != project.generation or len(got[2]) > 65536:
        if len(_negative) > 64:
            _negative.clear()
        got = _negative[key] = (now, project.generation, {}, {}, {})
    return got[2], got[3], got[4]


_YES = ("yes",)


_edge_memo: dict[tuple, tuple] = {}  # (path, disk, generation) -> (made_at, digest, edges): every needle set's


def _edges(p: str, cands, now: float, digest: str | None = None) -> tuple:
    """((file or None, absent marks), ...): where each import candidate of ``p`` resolves (with
    ``digest``, the content it was read with: shared by the tables of every needle set)."""
    key = (p, project.disk_allowed(), project.generation)
    if digest is not None:
        got = _edge_memo.get(key)
        if got is not None and got[1] == digest and project.fresh(got[0], now, _TTL):
            return got[2]
    edges = tuple(_resolve(p, mod, level, now) for mod, level in cands)
    if digest is not None:
        if len(_edge_memo) > 65536:
            _edge_memo.clear()
        _edge_memo[key] = (now, digest, edges)
    return edges


_starts: dict[str, tuple] = {}  # text -> candidates: the checked file, once for every rule that asks


def _start_candidates(text: str) -> tuple:
    got = _starts.get(text)
    if got is None:
        if len(_starts) > 8:
            _starts.clear()
        got = _starts[text] = candidates(text)
    return got


def _walk(path: str, text: str, now: float, needles: tuple = REACH_TEXT,
          fold: bool = False) -> tuple[bool, dict[str, str | None]]:
    """Reachability on the import graph, each file answered once per table (``_table``): the
    strongly connected components of the graph (Tarjan, iteratively) are decided as they close,
    a component holding a needle or importing one that does answers yes, the others no. Linear in
    the files and imports a batch run reaches, where a walk per file was quadratic on a package
    whose every module imports the package (torch). Past ``_MAX_NODES`` new files in one query
    the answer is yes (never a lost finding). The answer is memoised per (path, text) with the
    table (several rules ask the same question of a file; an answer past the budget is not kept:
    the next query goes on from the components decided so far) in a batch run's snapshot, where
    the disk does not change; the returned dependencies are shared, read-only."""
    disk = project.disk_allowed()
    table, closures, answers = _table(now, disk, needles, fold)
    key = (path, text, snapshot.deps) if snapshot._on else None
    got = answers.get(key) if key is not None else None
    if got is not None:
        return got
    first = _edges(path, _start_candidates(text), now)
    absent: dict[str, None] = {}
    for succ, marks in first:
        absent.update(dict.fromkeys(marks))
        if succ is not None and succ != path and not _solve(succ, table, now, needles, fold):
            return True, {}  # past the budget
    if any(succ is not None and table.get(succ) is _YES for succ, _m in first):
        got = True, {}
    elif not snapshot.deps:  # no, and nothing reads what it rests on (``snapshot.no_dependencies``)
        got = False, {}
    else:  # no: every file reachable answered no; the answer rests on all of them
        got = False, _no_deps(path, first, absent, table, closures)
    if key is not None:  # (the questions about one file come while it is checked: a few kept)
        while len(answers) >= 16:
            del answers[next(iter(answers))]
        answers[key] = got
    return got


def _no_deps(path: str, first, absent: dict, table: dict, closures: dict) -> dict:
    """The dependencies of a "no" from ``path``, whose import candidates resolve to ``first``:
    ``absent`` (its own imports looked for and not found), then the merged dependencies of each
    file it imports (``_closure``, memoised per file): every absent mark (None) and every file read
    (its content hash, which wins over an absent mark of the same path)."""
    merged = []
    for s in dict.fromkeys(s for s, _m in first if s is not None and s != path):
        if not isinstance(table.get(s), tuple):
            continue  # unreadable: not followed
        c = _closure(s, table, closures)
        if path in c[0]:  # the file is reached again through its imports: walk without it
            return _deps_without(path, first, absent, table)
        merged.append(c)
    deps: dict[str, str | None] = dict(absent)
    for marks, _read in merged:
        deps.update(marks)
    for _marks, read in merged:
        deps.update(read)
    return deps


def _closure(start: str, table: dict, closures: dict) -> tuple[dict, dict]:
    """({path: None | hash} of every absent mark and file read, {path: hash} of the files read)
    over the "no" files reachable from ``start`` (a "no" file reaches only "no" or unreadable
    files, all decided before it, so the memo holds for the table's life)."""
    got = closures.get(start)
    if got is None:
        got = closures[start] = _reached((start,), table)
    return got


def _deps_without(path: str, first, absent: dict, table: dict) -> dict:
    """``_no_deps`` by a walk that does not enter ``path`` itself (its own imports are ``first``)."""
    deps: dict[str, str | None] = dict(absent)
    deps.update(_reached([s for s, _m in first if s is not None], table, exclude=path)[0])
    if deps.get(path, 0) is None and isinstance(table.get(path), tuple):
        deps[path] = table[path][0][path]  # (a file read too, though the walk does not enter it)
    return deps


def _reached(starts, table: dict, exclude: str | None = None) -> tuple[dict, dict]:
    """The one walk of ``_closure`` and ``_deps_without``: ({path: None | hash} of every absent
    mark and file read, {path: hash} of the files read) over the "no" files reachable from
    ``starts``, never entering ``exclude``. A file read is a file, whatever import also looked for
    it absent: its hash wins over an absent mark of the same path."""
    deps: dict[str, str | None] = {}
    read: dict[str, str | None] = {}
    seen = set() if exclude is None else {exclude}
    work = list(starts)
    while work:
        p = work.pop()
        if p in seen:
            continue
        seen.add(p)
        got = table.get(p)
        if got is None or got is _YES:
            continue
        own, succs = got
        deps.update(own)
        read[p] = own[p]
        work.extend(succs)
    deps.update(read)
    return deps, read


def _solve(start: str, table: dict, now: float, needles: tuple, fold: bool) -> bool:
    """Decide ``start`` and every file it reaches that ``table`` lacks; False past the budget
    (the components closed so far stay decided)."""
    if start in table:
        return True
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    info: dict[str, tuple] = {}  # path -> (digest, edges)
    frames: list[list] = []

    def enter(p: str) -> bool:
        facts = _file_facts(p, now, needles, fold)
        if facts is None:
            table[p] = None  # unreadable: not followed (as the flow layer)
            return False
        has, cands, digest = facts
        if has:
            table[p] = _YES
            return False
        index[p] = low[p] = len(index)
        stack.append(p)
        on.add(p)
        edges = _edges(p, cands, now, digest)
        info[p] = (digest, edges)
        frames.append([p, iter(edges)])
        return True

    if not enter(start):
        return True
    while frames:
        if len(index) > _MAX_NODES:
            return False
        frame = frames[-1]
        v = frame[0]
        for succ, _marks in frame[1]:
            if succ is None or succ in table:
                continue
            if succ in index:
                if succ in on:
                    low[v] = min(low[v], index[succ])
                continue
            if enter(succ):
                break
        else:
            frames.pop()
            if frames:
                u = frames[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    members.append(w)
                    if w == v:
                        break
                yes = any(s is not None and table.get(s) is _YES for m in members for s, _m in info[m][1])
                for m in members:
                    if yes:
                        table[m] = _YES
                    else:  # (its own dependencies, ready to merge: the file and its absent marks)
                        digest, edges = info[m]
                        own = {a: None for _s, marks in edges for a in marks}
                        own[m] = digest
                        table[m] = (own, tuple(dict.fromkeys(s for s, _m in edges if s is not None)))
    return True
