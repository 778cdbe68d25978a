"""The persistent findings cache of ``ddp-lint check``: ``.ddp-lint-cache/`` in the project root.

Layout: ``.ddp-lint-cache/v<FORMAT>/<key>.json``, one *pack* per (ddp-lint version and code, Python version,
settings, user key). A pack maps a file's absolute path to
``[content tag, last used (epoch s), findings, dependencies]``:

* the content tag is a keyed BLAKE2b digest of the file's bytes (the key is a per-user secret in
  ``$XDG_CACHE_HOME/ddp-lint/cache-key``, created 0600 on first use): a cache shipped inside a cloned
  repository never matches, so it cannot hide findings; an entry is used only when the tag of the
  bytes just read matches;
* ``dependencies`` is the list of (path, sha256 hex) that the engine reported in
  ``CheckResult.dependencies`` (cross-file analyses): every one is re-hashed on lookup, and a change
  or a missing file is a miss; (path, None) is a *negative* dependency, a file (or folder) an import
  probed and found absent: a file or folder there now (a module created, or one shadowing the module
  found) is a miss; a digest ``ls:...`` is a folder's listing (``listing_digest``: a file added,
  removed or renamed there is a miss);
* a pack stores each distinct dependency once (``deps``: [path, digest]) and an entry refers to
  them by id: a list of ids, or, for a long list, the hex of a bit mask of ids (a package whose
  every module imports the package gives thousands of files the same closure of imports); each
  dependency is checked at most once a run;
* findings are stored as plain JSON lists (never pickle: the folder is in the user's project).

Safety:
* writes go to a fresh temp file (``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600) in the same folder and
  are moved into place with ``os.replace``; concurrent runs therefore never see a half-written pack,
  and the last writer wins (a lost update is only a later miss). Before writing, the pack on disk is
  re-read and merged, so two runs on different subfolders keep each other's entries;
* the cache folder must be a real folder owned by the user (not a symlink); packs are opened with
  ``O_NOFOLLOW`` and must be regular files under the size cap;
* anything unreadable, malformed or of another format is ignored (a miss), never a crash;
* bounded: entries not used for ``MAX_AGE_S`` or whose file is gone are dropped when a pack is
  written, a pack keeps at most ``MAX_ENTRIES`` (least recently used go first), packs not used for
  ``MAX_AGE_S`` are deleted, and the folder is kept under ``MAX_TOTAL_BYTES``.
"""
from __future__ import annotations

import os
import stat
import sys
import time

from .io import SourceError, read_regular_file
from .model import Applicability, Edit, Finding, Fix, Position, Range, Related, Severity

CACHE_DIR_NAME = ".ddp-lint-cache"
FORMAT = 2  # 2: dependencies interned in one table per pack (ids, or a bit mask of ids)
MAX_AGE_S = 30 * 24 * 3600
MAX_ENTRIES = 100_000
MAX_PACK_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024


# -- digests -------------------------------------------------------------------------------------
def content_digest(data: bytes) -> str:
    """sha256 hex of a file's bytes: what engines report in ``CheckResult.dependencies``."""
    import hashlib  # lazy, as below: a --no-cache run of gated-out files never hashes (start-up)

    return hashlib.sha256(data).hexdigest()


def file_digest(path: str) -> str | None:
    try:
        data = _read_regular(path, MAX_PACK_BYTES * 4, nofollow=False)
    except OSError:
        return None
    return None if data is None else content_digest(data)


LISTING = "ls:"  # the prefix of a folder listing's digest


def listing_digest(names) -> str:
    """The digest of a folder's listing (``os.listdir``'s names, in any order)."""
    data = "\0".join(sorted(names)).encode("utf-8", "surrogateescape")
    return LISTING + content_digest(data)


def dependency_holds(path: str, digest: str | None) -> bool:
    """A dependency still holds: the file has the same content, the folder the same listing, or
    nothing importable appeared where an import found nothing (``digest`` None)."""
    if digest is None:
        return not _importable(path)
    if digest.startswith(LISTING):
        try:
            return listing_digest(os.listdir(path)) == digest
        except (OSError, ValueError):
            return False
    return file_digest(path) == digest


_user_key: bytes | None = None


def user_key() -> bytes | None:
    """The per-user secret that keys content tags; None when it cannot be read or created."""
    global _user_key
    if _user_key is not None:
        return _user_key
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "ddp-lint")
    path = os.path.join(folder, "cache-key")
    try:
        key = _read_regular(path, 4096, nofollow=True)
        if key is None or len(key) < 32:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            new = os.urandom(32)
            tmp = _write_temp(folder, new)
            try:
                os.link(tmp, path)  # never replaces a key another run created meanwhile
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
            key = _read_regular(path, 4096, nofollow=True)
            if key is None or len(key) < 32:
                return None
        _user_key = key[:64]
    except OSError:
        return None
    return _user_key


def content_tag(data: bytes, key: bytes) -> str:
    import hashlib

    return hashlib.blake2b(data, key=key[:64], digest_size=20).hexdigest()


# -- low-level file helpers ----------------------------------------------------------------------
def _read_regular(path: str, limit: int, nofollow: bool = True) -> bytes | None:
    """The bytes of a regular file no larger than ``limit``; None for anything else."""
    try:
        return read_regular_file(path, limit=limit, nofollow=nofollow)[0]
    except (OSError, SourceError):
        return None


def _write_temp(folder: str, data: bytes) -> str:
    """A new 0600 file with ``data`` in ``folder`` (never an existing path, never through a link):
    ``io.write_temp``, the one writer of every file ddp-lint writes."""
    from .io import write_temp

    return write_temp(folder, data, prefix=".tmp-", suffix="")


def _safe_dir(path: str, create: bool) -> bool:
    """``path`` is (or was just made) a real folder owned by this user, not a symlink."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return False
        try:
            st = os.lstat(path)
        except OSError:
            return False
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return False
    return True


# -- findings <-> JSON ---------------------------------------------------------------------------
def _r(r: Range) -> list:
    return [r.start.line, r.start.column, r.end.line, r.end.column]


def _range(v) -> Range:
    a, b, c, d = v
    if not all(type(x) is int for x in (a, b, c, d)):
        raise ValueError("range")
    return Range(Position(a, b), Position(c, d))


def encode_findings(findings: list[Finding]) -> list | None:
    """Plain lists for JSON; None when a finding carries what the cache does not keep."""
    out = []
    for f in findings:
        if f.ranks or f.emulated or f.details:
            return None  # runtime findings are never cached
        fix = None
        if f.fix is not None:
            fix = [f.fix.applicability.value, f.fix.message, [[_r(e.range), e.content] + ([e.cell] if e.cell is not None else [])
                                                             for e in f.fix.edits]]
        related = [[_r(x.range), x.message, x.filename, list(x.ranks)] + ([x.cell] if x.cell is not None else [])
                   for x in f.related]
        # a notebook finding's cell rides as a ninth item (the eight-item form is the other files')
        out.append([f.code, f.name, f.message, f.severity.value, _r(f.range), related, fix, f.url]
                   + ([f.cell] if f.cell is not None else []))
    return out


def decode_findings(data, filename: str) -> list[Finding]:
    """Findings from ``encode_findings``' lists; raises (ValueError, TypeError...) on bad data."""
    out = []
    for code, name, message, severity, rng, related, fix, url, *cell in data:
        if not (isinstance(code, str) and isinstance(name, str) and isinstance(message, str)):
            raise ValueError("finding")
        rel = []
        for rr, msg, fn, ranks, *rcell in related:
            if not isinstance(msg, str) or (fn is not None and not isinstance(fn, str)):
                raise ValueError("related")
            rel.append(Related(_range(rr), msg, fn, tuple(int(x) for x in ranks), _cell(rcell)))
        fx = None
        if fix is not None:
            app, fmsg, edits = fix
            if not isinstance(fmsg, str):
                raise ValueError("fix")
            eds = []
            for er, content, *ecell in edits:
                if not isinstance(content, str):
                    raise ValueError("edit")
                eds.append(Edit(_range(er), content, _cell(ecell)))
            fx = Fix(Applicability(app), fmsg, tuple(eds))
        if url is not None and not isinstance(url, str):
            raise ValueError("url")
        out.append(Finding(code=code, name=name, message=message, severity=Severity(severity), range=_range(rng),
                           filename=filename, related=tuple(rel), fix=fx, url=url, cell=_cell(cell)))
    return out


def _cell(extra: list) -> int | None:
    if not extra:
        return None
    if len(extra) != 1 or type(extra[0]) is not int:
        raise ValueError("cell")
    return extra[0]


# -- keys ----------------------------------------------------------------------------------------
_code_fp: str | None = None


def code_fingerprint() -> str:
    """ddp-lint's version plus the size and mtime of every module of the analysis package, so a
    changed rule (a development tree, an upgrade without a version bump) never reuses findings."""
    global _code_fp
    if _code_fp is None:
        import hashlib

        from . import __version__

        h = hashlib.sha256(f"{__version__}|{sys.version_info[:2]}|{FORMAT}".encode())
        here = os.path.dirname(os.path.abspath(__file__))
        for path in fingerprint_files():
            try:
                st = os.stat(path)
            except OSError:
                continue
            h.update(f"{os.path.relpath(path, here)}:{st.st_size}:{st.st_mtime_ns};".encode())
        _code_fp = h.hexdigest()
    return _code_fp


def fingerprint_files() -> list[str]:
    """The modules whose change invalidates cached findings: the analysis package and every
    subpackage of it (``rules/``, ``flow/``, ...)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    try:
        subs = sorted(d for d in os.listdir(here) if os.path.isfile(os.path.join(here, d, "__init__.py")))
    except OSError:
        return out
    for folder in (here, *(os.path.join(here, d) for d in subs)):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        out.extend(os.path.join(folder, n) for n in names if n.endswith(".py"))
    return out


def settings_fingerprint(settings) -> str:
    """Every public setting (a new one is covered without a change here), as canonical JSON."""
    import dataclasses

    data = {}
    for f in dataclasses.fields(settings):
        if not f.name.startswith("_"):
            data[f.name] = getattr(settings, f.name)
    import json  # lazy, as below: a --no-cache run never reads or writes a pack (start-up)

    return json.dumps(data, sort_keys=True, default=str)


# -- the cache -----------------------------------------------------------------------------------
class Cache:
    """One pack of the cache folder, loaded at start, saved once at the end of a run."""

    def __init__(self, folder: str, settings):
        self.folder = folder
        self.key = user_key()
        self.enabled = self.key is not None and _safe_dir(folder, create=True)
        self.entries: dict[str, list] = {}
        self.updated: dict[str, list] = {}
        self.table: list = []  # the pack's dependencies, [path, digest]: entries refer to them by id
        self._ok: dict[int, bool] = {}  # id -> the dependency still holds (checked once a run)
        self._bad_mask: int | None = None
        self.hits = self.misses = 0
        self.pack_path = None
        if not self.enabled:
            return
        vdir = os.path.join(folder, f"v{FORMAT}")
        if not _safe_dir(vdir, create=True):
            self.enabled = False
            return
        self._mark_folder()
        import hashlib

        ident = hashlib.blake2b(f"{code_fingerprint()}|{settings_fingerprint(settings)}".encode(),
                                key=self.key[:64], digest_size=16).hexdigest()
        self.pack_path = os.path.join(vdir, f"{ident}.json")
        self.entries, self.table = self._load()

    def _mark_folder(self) -> None:
        # git ignores the folder (as Ruff does for .ruff_cache); CACHEDIR.TAG tells backup tools
        for name, data in ((".gitignore", b"# created by ddp-lint\n*\n"),
                           ("CACHEDIR.TAG", b"Signature: 8a477f597d28d172789f06886806bc55\n"
                                            b"# created by ddp-lint: .ddp-lint-cache/\n")):
            p = os.path.join(self.folder, name)
            if os.path.lexists(p):
                continue
            try:
                tmp = _write_temp(self.folder, data)
                try:
                    os.link(tmp, p)
                except OSError:
                    pass
                finally:
                    os.unlink(tmp)
            except OSError:
                pass

    def _load(self) -> tuple[dict[str, list], list]:
        raw = _read_regular(self.pack_path, MAX_PACK_BYTES)
        if raw is None:
            return {}, []
        import json

        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                return {}, []
            entries, table = data.get("entries"), data.get("deps")
            if not isinstance(entries, dict) or not isinstance(table, list):
                return {}, []
            return entries, table
        except (ValueError, UnicodeDecodeError, RecursionError):
            return {}, []

    # dependencies ------------------------------------------------------------------------------
    def _holds(self, i: int) -> bool:
        """Dependency ``i`` of the table still holds: the file has the same content, or nothing
        importable appeared where an import found nothing."""
        got = self._ok.get(i)
        if got is None:
            dep = self.table[i]
            if not (isinstance(dep, list) and len(dep) == 2 and isinstance(dep[0], str)):
                raise ValueError("malformed dependency")
            path, digest = dep
            got = self._ok[i] = dependency_holds(path, digest)
        return got

    def _deps_hold(self, ref) -> bool:
        if isinstance(ref, str):  # a bit mask of ids: every dependency of the table is checked once
            if self._bad_mask is None:
                bad = 0
                for i in range(len(self.table)):
                    if not self._holds(i):
                        bad |= 1 << i
                self._bad_mask = bad
            return not (int(ref, 16) & self._bad_mask)
        for i in ref or ():
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.table):
                raise ValueError("malformed dependency id")
            if not self._holds(i):
                return False
        return True

    def _refs_to_deps(self, ref, table: list) -> list:
        """The [path, digest] pairs an entry's reference names in ``table``."""
        if isinstance(ref, str):
            bits = bin(int(ref, 16))[:1:-1]  # lowest bit first
            return [table[i] for i, b in enumerate(bits) if b == "1"]
        return [table[i] for i in ref or ()]

    # lookups -----------------------------------------------------------------------------------
    def expected(self, path: str) -> str | None:
        """The stored content tag for ``path`` (absolute), for workers to compare against."""
        e = self.entries.get(path)
        if isinstance(e, list) and len(e) == 4 and isinstance(e[0], str):
            return e[0]
        return None

    def lookup(self, abspath: str, tag: str, shown: str) -> list[Finding] | None:
        """Findings stored for ``abspath`` when its content tag and every dependency still match;
        None for a miss (absent, changed, a dependency changed, or a corrupted entry)."""
        e = self.entries.get(abspath)
        try:
            if not isinstance(e, list) or len(e) != 4 or e[0] != tag:
                return None
            if abspath in self.updated:  # stored by this run: its dependencies are [path, digest]
                for dep_path, digest in e[3] or ():
                    if dependency_holds(dep_path, digest):
                        continue
                    return None
            elif not self._deps_hold(e[3]):
                return None
            return decode_findings(e[2], shown)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
            return None  # a corrupted entry is a miss

    def touch(self, abspath: str) -> None:
        """A hit: refresh its "last used" at most daily, so a warm run writes nothing."""
        e = self.entries.get(abspath)
        now = int(time.time())
        if isinstance(e, list) and len(e) == 4 and (not isinstance(e[1], int) or now - e[1] > 86400) \
                and abspath not in self.updated:
            try:
                deps = self._refs_to_deps(e[3], self.table)
            except (ValueError, TypeError, IndexError):
                return
            self.updated[abspath] = [e[0], now, e[2], deps]

    def store(self, abspath: str, tag: str, encoded: list | None, deps) -> None:
        if encoded is None:
            return
        self.updated[abspath] = [tag, int(time.time()), encoded, [list(d) for d in deps or ()]]

    # saving ------------------------------------------------------------------------------------
    def save(self) -> None:
        if not self.enabled or not self.updated:
            return
        try:
            on_disk, disk_table = self._load()  # merge what a concurrent run wrote meanwhile
            table = list(self.table)  # ids of the loaded entries stay valid: the table only grows
            same = disk_table == self.table
            ids = {(d[0], d[1]): i for i, d in enumerate(table) if isinstance(d, list) and len(d) == 2}
            merged = dict(self.entries)
            for k, v in on_disk.items():
                cur = merged.get(k)
                if not _newer(cur, v):
                    if not same:  # another run's table: its ids are re-interned in ours
                        try:
                            v = [*v[:3], self._intern(self._refs_to_deps(v[3], disk_table), table, ids)]
                        except (ValueError, TypeError, IndexError, KeyError):
                            continue
                    merged[k] = v
            for k, v in self.updated.items():
                merged[k] = [*v[:3], self._intern(v[3], table, ids)]
            merged = self._prune(merged)
            import json

            data = json.dumps({"format": FORMAT, "deps": table, "entries": merged},
                              separators=(",", ":")).encode()
            if len(data) > MAX_PACK_BYTES:
                return
            folder = os.path.dirname(self.pack_path)
            tmp = _write_temp(folder, data)
            try:
                os.replace(tmp, self.pack_path)
            except OSError:
                os.unlink(tmp)
                raise
            self._prune_folder()
        except OSError:
            pass  # a read-only or full disk: the run's result stands, only the cache is not kept

    @staticmethod
    def _intern(deps, table: list, ids: dict):
        """An entry's reference to ``deps`` ([path, digest] pairs) in ``table`` (added as needed):
        the ids, or the hex of their bit mask when that is shorter."""
        out = []
        for d in deps or ():
            key = (d[0], d[1])
            i = ids.get(key)
            if i is None:
                i = ids[key] = len(table)
                table.append([d[0], d[1]])
            out.append(i)
        if len(out) > 64:
            mask = 0
            for i in out:
                mask |= 1 << i
            return format(mask, "x")
        return out

    def _prune(self, entries: dict) -> dict:
        now = time.time()
        out = {}
        for k, v in entries.items():
            if not (isinstance(v, list) and len(v) == 4 and isinstance(v[1], int)):
                continue
            if k not in self.updated and (now - v[1] > MAX_AGE_S or not os.path.exists(k)):
                continue  # stale: not used for a month, or the file is gone
            out[k] = v
        if len(out) > MAX_ENTRIES:
            keep = sorted(out.items(), key=lambda kv: kv[1][1], reverse=True)[:MAX_ENTRIES]
            out = dict(keep)
        return out

    def _prune_folder(self) -> None:
        vdir = os.path.dirname(self.pack_path)
        now = time.time()
        packs = []
        try:
            names = os.listdir(vdir)
        except OSError:
            return
        for n in names:
            p = os.path.join(vdir, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if n.startswith(".tmp-"):
                if now - st.st_mtime > 3600:  # left behind by a killed run
                    _unlink(p)
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if p != self.pack_path and now - st.st_mtime > MAX_AGE_S:
                _unlink(p)
                continue
            packs.append((st.st_mtime, st.st_size, p))
        total = sum(s for _, s, _ in packs)
        for _, size, p in sorted(packs):
            if total <= MAX_TOTAL_BYTES:
                break
            if p == self.pack_path:
                continue
            _unlink(p)
            total -= size


def _importable(path: str) -> bool:
    """A regular file or a folder is at ``path`` (what breaks a negative dependency)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)


def _newer(a, b) -> bool:
    try:
        return a is not None and a[1] >= b[1]
    except (TypeError, IndexError):
        return a is not None


def _unlink(p: str) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def cache_folder(settings, cwd: str | None = None) -> str:
    """``.ddp-lint-cache`` in the project root: the folder of the configuration file, else the
    current folder (as Ruff). ``DDP_LINT_CACHE_DIR`` overrides it."""
    env = os.environ.get("DDP_LINT_CACHE_DIR")
    if env:
        return env
    root = getattr(settings, "root", None)
    base = str(root) if root is not None else (cwd or os.getcwd())
    return os.path.join(base, CACHE_DIR_NAME)
