"""Checking many files: cache lookups, the text gate and parsing in worker processes.

``check_files`` splits the files into chunks. Each worker (forked, so it shares the loaded rules,
settings and cache index without pickling them) reads a file, tags its bytes, answers from the
cache when the tag matches, otherwise decodes, gates and checks it, and returns compact results:
findings as plain lists (``cache.encode_findings``), never the file's text. The parent decodes
them, stores misses in the cache and saves it once.
"""
from __future__ import annotations

import os

from .cache import Cache, content_tag, decode_findings, encode_findings
from .io import SourceError, decode_bytes, is_notebook, read_regular_file

_MAX_SOURCE_BYTES = 256 * 1024 * 1024

# set in the parent before the workers fork (or by the initializer on spawn platforms)
_settings = None
_cache: Cache | None = None


def _read(path: str) -> bytes:
    """The file's bytes; SourceError with the same messages as ``io.read_source_file``."""
    try:
        return read_regular_file(path, limit=_MAX_SOURCE_BYTES)[0]
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory") from None
    except OSError as e:
        raise SourceError(f"{path}: cannot read: {e.strerror or e}") from None


def check_one(path: str):
    """(kind, payload...) for one file: ("hit", encoded) | ("ok", tag, encoded, findings, deps) |
    ("err", message). ``encoded`` is None when the findings could not be encoded (then
    ``findings`` holds the objects)."""
    from .engine import check_source

    try:
        data = _read(path)
    except SourceError as e:
        return ("err", str(e))
    cache = _cache
    tag = None
    if cache is not None and cache.enabled:
        tag = content_tag(data, cache.key)
        abspath = os.path.abspath(path)
        if cache.expected(abspath) == tag:
            got = cache.lookup(abspath, tag, path)
            if got is not None:
                return ("hit", cache.entries[abspath][2])
    try:
        sf = decode_bytes(data, path)
    except SourceError as e:
        return ("err", str(e))
    if is_notebook(path):  # the code cells as one module, findings in cells
        from .notebook import NotebookError, check_notebook  # lazy: most runs have no notebook

        try:
            findings, _, _, deps = check_notebook(sf.text, path, _settings)
        except NotebookError as e:
            return ("err", str(e))
    else:
        res = check_source(sf.text, path, _settings)
        findings, deps = res.findings, list(res.dependencies)
        if res.errors:
            _warn_internal(path, res.errors)
    enc = encode_findings(findings)
    return ("ok", tag, enc, None if enc is not None else findings, deps)


def _warn_internal(path: str, errors: list[str]) -> None:
    """A rule that failed on this file (a bug of ours) is said on stderr, with the rule's code and
    the exception, rather than passed over in silence: the other rules' findings still print."""
    import sys

    for e in errors:
        code, _, tb = e.partition(": ")
        last = tb.strip().splitlines()[-1] if tb.strip() else "unknown error"
        sys.stderr.write(f"ddp-lint: warning: internal error in {code} on {path} ({last}); its findings "
                         "for this file are missing: please report this bug\n")


def _probe(path: str):
    """("hit", encoded) when the cache answers for ``path``; None otherwise (unreadable too: the
    worker reports that)."""
    try:
        data = _read(path)
    except SourceError:
        return None
    abspath = os.path.abspath(path)
    tag = content_tag(data, _cache.key)
    if _cache.expected(abspath) == tag and _cache.lookup(abspath, tag, path) is not None:
        return ("hit", _cache.entries[abspath][2])
    return None


def _work(chunk: list[tuple[int, str]]):
    return [(i, check_one(p)) for i, p in chunk]


def _init(settings, cache) -> None:
    global _settings, _cache
    _settings, _cache = settings, cache


def _chunks(items: list[tuple[int, str]], n_workers: int) -> list[list]:
    """Largest files first, in chunks of about equal bytes (several per worker), so that no worker
    is left with a heavy tail while the others idle; small files travel many to a chunk."""
    sized = []
    for i, p in items:
        try:
            size = os.stat(p).st_size
        except OSError:
            size = 0
        sized.append((size, i, p))
    sized.sort(key=lambda t: -t[0])
    total = sum(t[0] for t in sized)
    budget = max(total // (n_workers * 16), 1)
    chunks: list[list] = []
    cur: list = []
    cur_bytes = 0
    for size, i, p in sized:
        cur.append((i, p))
        cur_bytes += size + 2048  # a per-file cost: open, read, gate
        if cur_bytes >= budget or len(cur) >= 256:
            chunks.append(cur)
            cur, cur_bytes = [], 0
    if cur:
        chunks.append(cur)
    return chunks


def check_files(files: list[str], settings, jobs: int = 0, cache: Cache | None = None):
    """[(path, findings, error)] in the order of ``files``."""
    _init(settings, cache)
    from .snapshot import no_dependencies, snapshot

    # one run reads the disk once (before forking: the workers inherit it); without a cache nothing
    # reads a check's dependencies, so the reach gates' "no" answers skip collecting them
    with snapshot(), no_dependencies(cache is None or not cache.enabled):
        return _check_files(files, settings, jobs, cache)


def _check_files(files: list[str], settings, jobs: int, cache: Cache | None):
    n = jobs or os.cpu_count() or 1
    indexed = list(enumerate(files))
    raw: dict[int, tuple] = {}
    pending = indexed
    if cache is not None and cache.enabled and cache.entries:
        # files the cache knows are probed here (read + keyed hash: far cheaper than starting
        # workers); only misses and unknown files go to the workers, which read and gate them
        pending = []
        for i, p in indexed:
            if cache.expected(os.path.abspath(p)) is None:
                pending.append((i, p))
                continue
            r = _probe(p)
            if r is None:
                pending.append((i, p))
            else:
                raw[i] = r
    if n <= 1 or len(pending) < 2 * n or len(pending) < 8:
        for i, p in pending:
            raw[i] = check_one(p)
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        from .engine import _rule_instance
        from .registry import all_rules

        # load and instantiate every rule before forking, so the workers share them (only here:
        # a run the cache answers, or a serial one, loads just the rules its files' gates admit)
        for code, rule in all_rules().items():
            if rule.static:
                _rule_instance(code)

        try:
            ctx = mp.get_context("fork")
        except ValueError:  # pragma: no cover - non-POSIX
            ctx = None
        with cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init,
                                    initargs=(settings, cache)) as ex:
            for part in ex.map(_work, _chunks(pending, n)):
                for i, r in part:
                    raw[i] = r
    out = []
    for i, path in indexed:
        r = raw[i]
        kind = r[0]
        if kind == "err":
            out.append((path, [], r[1]))
            continue
        abspath = os.path.abspath(path)
        if kind == "hit":
            out.append((path, decode_findings(r[1], path), None))
            cache.touch(abspath)
            cache.hits += 1
            continue
        _, tag, enc, objs, deps = r
        findings = decode_findings(enc, path) if enc is not None else objs
        if cache is not None and cache.enabled and tag is not None:
            cache.store(abspath, tag, enc, deps)
            cache.misses += 1
        out.append((path, findings, None))
    if cache is not None:
        cache.save()
    return out
