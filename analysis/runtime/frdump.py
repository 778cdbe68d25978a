"""Flight Recorder dumps, read safely: ``ddp-lint explain``'s input from a cluster job.

A dump is one pickle per rank (``<prefix><rank>``; ``TORCH_FR_DUMP_TEMP_FILE`` names the prefix),
written by torch's watchdog on a timeout or on demand by
``torch._C._distributed_c10d._dump_fr_trace()``. It comes from another machine, so it is loaded
with :class:`SafeUnpickler`: builtins and containers only (no ``find_class``, no persistent ids,
so no callable can ever be reached and nothing in the file runs), bounded in size, depth and
number of objects. What it holds is then checked field by field into :class:`Dump` /
:class:`Entry`; every problem is a :class:`DumpError` whose message is for people.

Versions 2.2 to 2.10 are read (torch 2.13 writes 2.10); fields a version lacks are ``None``.
"""
from __future__ import annotations

import io
import os
import pickle
import re
import stat
from dataclasses import dataclass, field

MAX_BYTES = 512 * 1024 * 1024  # a dump of 20,000 entries with 64 frames each is ~200 MB
MAX_DEPTH = 16  # a real dump nests 5 deep (dump > entries > entry > frames > frame)
MAX_OBJECTS = 20_000_000
SUPPORTED = ((2, 2), (2, 10))  # the versions whose fields are known
_ALLOWED = (dict, list, tuple, str, bytes, int, float, bool, type(None))
PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


class DumpError(ValueError):
    """A file that is not a usable Flight Recorder dump; the message is for people."""


class SafeUnpickler(pickle.Unpickler):
    """Builtins and containers only: any global (class, function) or persistent id is refused, so
    no REDUCE / BUILD / NEWOBJ / INST / OBJ / EXT opcode can reach a callable."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a dump holds data only")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused a persistent id: a dump holds data only")


def safe_loads(data: bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
               max_objects: int = MAX_OBJECTS):
    """The object in ``data`` (data types only), or DumpError. Never runs anything from ``data``."""
    if len(data) > max_bytes:
        raise DumpError(f"larger than {max_bytes // (1024 * 1024)} MiB")
    try:
        obj = SafeUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        if str(e).startswith("refused"):
            raise DumpError(f"not a Flight Recorder dump ({e})") from None
        raise DumpError(f"truncated or not a pickle ({str(e)[:120]})") from None
    except MemoryError:
        raise DumpError("not a Flight Recorder dump (it asks for more memory than it holds)") from None
    except (EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
            UnicodeDecodeError, RecursionError, ImportError, struct_error()) as e:
        raise DumpError(f"truncated or not a pickle ({type(e).__name__}: {str(e)[:120]})") from None
    check_shape(obj, max_depth=max_depth, max_objects=max_objects)
    return obj


def struct_error():
    import struct

    return struct.error


def check_shape(obj, *, max_depth: int = MAX_DEPTH, max_objects: int = MAX_OBJECTS) -> None:
    """Data types only, at most ``max_depth`` deep and ``max_objects`` objects (a pickle that
    shares one list many times would otherwise be walked exponentially): iterative, no recursion."""
    stack = [(obj, 1)]
    seen = 0
    while stack:
        o, d = stack.pop()
        seen += 1
        if seen > max_objects:
            raise DumpError(f"more than {max_objects} objects")
        if not isinstance(o, _ALLOWED):
            raise DumpError(f"holds a {type(o).__name__}, not data")
        if isinstance(o, (dict, list, tuple)):
            if d > max_depth:
                raise DumpError(f"nested deeper than {max_depth} levels")
            if isinstance(o, dict):
                for k, v in o.items():
                    stack.append((k, d + 1))
                    stack.append((v, d + 1))
            else:
                stack.extend((x, d + 1) for x in o)


# -- the dump's content --------------------------------------------------------------------------
@dataclass(frozen=True)
class FrFrame:
    file: str
    line: int
    name: str = ""


@dataclass
class Entry:
    rank: int
    record_id: int
    pg_name: str  # process_group[0]
    pg_desc: str  # process_group[1]
    pg_id: int | None
    seq: int  # collective_seq_id (or p2p_seq_id for a p2p op)
    is_p2p: bool
    backend: str
    op: str  # all_reduce, broadcast, send, ...
    meta: str | None  # "0->1" of a send
    input_sizes: list | None
    output_sizes: list | None
    input_dtypes: list | None
    output_dtypes: list | None
    state: str
    retired: bool | None
    completed: bool
    frames: list[FrFrame]
    time_created_ns: int | None = None
    timeout_ms: int | None = None

    @property
    def key(self) -> tuple:
        return (self.pg_name, self.is_p2p, self.seq)


@dataclass
class Dump:
    path: str
    rank: int
    version: str
    entries: list[Entry]
    pg_config: dict[str, dict]  # pg name -> {"desc": str, "ranks": list[int]}
    pg_status: dict[str, dict]
    notes: list[str] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)  # missing record_id ranges (inclusive)

    @property
    def version_tuple(self) -> tuple[int, int]:
        return parse_version(self.version)


def parse_version(v) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)\.(\d+)", str(v))
    if not m:
        raise DumpError(f"unknown dump version {v!r}")
    return int(m.group(1)), int(m.group(2))


_RANK_RE = re.compile(r"(\d+)(?:\.pkl|\.pickle)?$")


def rank_of(path: str) -> int | None:
    """The rank a dump's file name ends with (torch writes ``<prefix><rank>``)."""
    m = _RANK_RE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def looks_like_pickle(head: bytes) -> bool:
    return head[:2] in PICKLE_MAGIC


def read_dump(path: str, *, rank: int | None = None, max_bytes: int = MAX_BYTES) -> Dump:
    """One rank's dump, checked; DumpError with the file's name otherwise."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise DumpError(f"{path}: not a regular file")
        size = st.st_size
        if size > max_bytes:
            raise DumpError(f"{path}: larger than {max_bytes // (1024 * 1024)} MiB")
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise DumpError(f"{path}: {e.strerror or e}") from None
    try:
        obj = safe_loads(data, max_bytes=max_bytes)
    except DumpError as e:
        raise DumpError(f"{path}: {e}") from None
    r = rank if rank is not None else rank_of(path)
    if r is None:
        raise DumpError(f"{path}: the file name does not end with the rank (torch writes <prefix><rank>)")
    try:
        return to_dump(obj, path, r)
    except DumpError as e:
        raise DumpError(f"{path}: {e}") from None


def _int(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise DumpError(f"{what} is {type(v).__name__}, not an integer")
    return v


def _opt_list(v):
    return list(v) if isinstance(v, (list, tuple)) else None


def _ranks(v) -> list[int] | None:
    """pg_config's ranks: a string "[0, 1]" (as torch writes it) or a list; never eval'd."""
    if isinstance(v, str):
        if not re.fullmatch(r"\s*\[\s*(\d+\s*(,\s*\d+\s*)*)?\]\s*", v):
            return None
        return [int(x) for x in re.findall(r"\d+", v)]
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return list(v)
    return None


def to_dump(obj, path: str, rank: int) -> Dump:
    if not isinstance(obj, dict) or "entries" not in obj or "version" not in obj:
        raise DumpError("not a Flight Recorder dump (no 'entries' and 'version')")
    version = obj["version"]
    if not isinstance(version, str):
        raise DumpError(f"the version is {type(version).__name__}, not a string")
    vt = parse_version(version)
    notes = []
    if vt < SUPPORTED[0]:
        raise DumpError(f"dump version {version} is older than 2.2 (the oldest this reads); re-run with torch >= 2.4")
    if vt > SUPPORTED[1]:
        notes.append(f"{os.path.basename(path)}: dump version {version} is newer than 2.10; read as 2.10")
    raw_entries = obj["entries"]
    if not isinstance(raw_entries, (list, tuple)):
        raise DumpError("'entries' is not a list")
    pg_config: dict[str, dict] = {}
    raw_cfg = obj.get("pg_config")
    if isinstance(raw_cfg, dict):
        for name, c in raw_cfg.items():
            if not isinstance(c, dict):
                continue
            ranks = _ranks(c.get("ranks"))
            pg_config[str(name)] = {"desc": str(c.get("desc", "")), "ranks": ranks, "name": str(c.get("name", name))}
    pg_status = {str(k): v for k, v in obj["pg_status"].items() if isinstance(v, dict)} \
        if isinstance(obj.get("pg_status"), dict) else {}
    entries = []
    bad = 0
    for i, e in enumerate(raw_entries):
        try:
            entries.append(to_entry(e, rank, pg_status))
        except DumpError as err:
            bad += 1
            if bad <= 3:
                notes.append(f"{os.path.basename(path)}: entry {i} left out ({err})")
    if bad > 3:
        notes.append(f"{os.path.basename(path)}: {bad} entries left out in all")
    entries.sort(key=lambda x: x.record_id)
    gaps = []
    for a, b in zip(entries, entries[1:]):
        if b.record_id > a.record_id + 1:
            gaps.append((a.record_id + 1, b.record_id - 1))
    return Dump(path, rank, version, entries, pg_config, pg_status, notes, gaps)


def to_entry(e, rank: int, pg_status: dict) -> Entry:
    if not isinstance(e, dict):
        raise DumpError(f"an entry is {type(e).__name__}, not a dict")
    name = e.get("profiling_name")
    if not isinstance(name, str) or ":" not in name:
        raise DumpError(f"profiling_name {name!r} is not '<backend>:<op>'")
    backend, _, rest = name.partition(":")
    parts = rest.split(" ", 1)
    op, meta = parts[0], (parts[1] if len(parts) > 1 else None)
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) == 2:
        pg_name, pg_desc = str(pg[0]), str(pg[1])
    else:
        raise DumpError("process_group is not (name, description)")
    is_p2p = e.get("is_p2p")
    if not isinstance(is_p2p, bool):  # before 2.5 (or so): by the op's name
        is_p2p = op in ("send", "recv")
    seq_key = "p2p_seq_id" if is_p2p else "collective_seq_id"
    seq = e.get(seq_key, e.get("seq_id"))
    seq = _int(seq, seq_key)
    record_id = _int(e.get("record_id"), "record_id")
    state = e.get("state")
    state = state if isinstance(state, str) else "scheduled"
    retired = e.get("retired") if isinstance(e.get("retired"), bool) else None
    pg_id = e.get("pg_id") if isinstance(e.get("pg_id"), int) and not isinstance(e.get("pg_id"), bool) else None
    completed = state == "completed" or bool(retired)
    st = pg_status.get(str(pg_id)) if pg_id is not None else None
    if not completed and st and not is_p2p:
        last = st.get("last_completed_collective")
        if isinstance(last, int) and not isinstance(last, bool) and 0 <= seq <= last:
            completed = True
    frames = []
    for fr in e.get("frames") or ():
        if isinstance(fr, dict) and isinstance(fr.get("filename"), str) and isinstance(fr.get("line"), int) \
                and not isinstance(fr.get("line"), bool):
            frames.append(FrFrame(fr["filename"], fr["line"], str(fr.get("name") or "")))
    tc = e.get("time_created_ns")
    to = e.get("timeout_ms")
    return Entry(rank=rank, record_id=record_id, pg_name=pg_name, pg_desc=pg_desc, pg_id=pg_id, seq=seq,
                 is_p2p=is_p2p, backend=backend, op=op, meta=meta, input_sizes=_opt_list(e.get("input_sizes")),
                 output_sizes=_opt_list(e.get("output_sizes")), input_dtypes=_opt_list(e.get("input_dtypes")),
                 output_dtypes=_opt_list(e.get("output_dtypes")), state=state, retired=retired, completed=completed,
                 frames=frames, time_created_ns=tc if isinstance(tc, int) else None,
                 timeout_ms=to if isinstance(to, int) else None)
