"""``ddp-lint explain PATH...``: a failed job's artefacts, pinned to the user's lines per rank.

Inputs, found by content (never by name): Flight Recorder dumps (frdump.py), torchelastic error
files (``TORCHELASTIC_ERROR_FILE`` / ``@record``: JSON with ``message.extraInfo.py_callstack``) and
torchrun's root-cause summary text. The result is an api.RunResult with run's finding codes
(DDP901-904), so the CLI's formats and the editor's plumbing are run's.

Matching is per process group, as torch's Flight Recorder analyser (``torchfrtrace``) does: the
entries of every member rank with the same collective sequence id are one collective; they must
agree in type, sizes and dtypes. The first sequence id where they do not is a mismatch (DDP902;
when one side's entry is the other side's *next* collective, that side skipped one). The first one
some ranks never enqueued while others wait in it is a hang (DDP903) whose culprits are those ranks;
a member rank without a dump whose job summary shows it exited is a rank that left (DDP904).
"""
from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field

from ..launch_scripts import check_launch_script, looks_like_launch_script
from ..model import Finding, Related, Severity
from .findings import Sources, condense, rule_meta
from .frdump import Dump, DumpError, Entry, FrFrame, looks_like_pickle, read_dump
from .states import Frame, count, peer_loss, rank_list

MAX_FILES = 20_000
MAX_TEXT = 8 * 1024 * 1024

# frames of these are never the user's: torch, the interpreter's own library, launchers and the
# training frameworks that wrap the user's loop
_WRAPPER_PARTS = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "deepspeed",
                  "transformers", "composer", "torchelastic", "ignite")
_STDLIB_RE = re.compile(r"[/\\]lib[/\\]python\d+(\.\d+)?[/\\]")


def is_framework(path: str) -> bool:
    """A frame of torch, the standard library, an installed package or a known training framework."""
    if not path or path.startswith("<"):
        return True
    p = path.replace("\\", "/")
    if "/site-packages/" in p or "/dist-packages/" in p or _STDLIB_RE.search(path):
        return True
    parts = p.split("/")
    return any(w in parts[:-1] for w in _WRAPPER_PARTS)


_WRAPPER_NAMES = {"wrapper", "inner", "_fn", "decorate_context", "wrapped"}


def _calls(lines: list[str], line: int, name: str) -> bool:
    """Whether the statement starting at ``line`` (1-based; its continuation lines while brackets
    are open) names ``name``."""
    text, depth, i = "", 0, line - 1
    while i < len(lines) and i < line + 20:
        text += " " + lines[i]
        depth += sum(lines[i].count(c) for c in "([{") - sum(lines[i].count(c) for c in ")]}")
        if depth <= 0:
            break
        i += 1
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def user_frames(frames: list[FrFrame]) -> list[FrFrame]:
    """The entry's frames outside torch and framework wrappers, innermost first."""
    return [f for f in frames if not is_framework(f.file)]


# -- paths from another machine ----------------------------------------------------------------------
@dataclass
class PathMapper:
    """Cluster paths to the checkout: ``--path-map FROM=TO`` prefixes first, then the path itself
    when it exists here, then the longest suffix of it that exists under ``root``."""
    root: str
    maps: list[tuple[str, str]] = field(default_factory=list)
    _cache: dict = field(default_factory=dict)

    def map(self, path: str) -> str | None:
        if path in self._cache:
            return self._cache[path]
        out = None
        for src, dst in self.maps:
            s = src.rstrip("/\\")
            if path == s or path.startswith(s + "/") or path.startswith(s + "\\"):
                cand = dst.rstrip("/\\") + path[len(s):]
                out = cand if os.path.isfile(cand) else None
                break
        else:
            if os.path.isabs(path) and os.path.isfile(path):
                out = path
            else:
                parts = [p for p in re.split(r"[/\\]", path) if p and p not in (".", "..")]
                for i in range(len(parts)):
                    cand = os.path.join(self.root, *parts[i:])
                    if os.path.isfile(cand):
                        out = cand
                        break
        self._cache[path] = os.path.abspath(out) if out else None
        return self._cache[path]


def parse_path_maps(items) -> list[tuple[str, str]]:
    out = []
    for it in items or ():
        src, eq, dst = str(it).partition("=")
        if not eq or not src or not dst:
            raise ValueError(f"--path-map {it!r}: expected FROM=TO")
        out.append((src, dst))
    return out


# -- artefacts ---------------------------------------------------------------------------------------
@dataclass
class ErrorFile:
    path: str
    rank: int | None
    exc_type: str
    message: str
    frames: list[FrFrame]  # innermost first
    timestamp: int | None = None


@dataclass
class Artefacts:
    dumps: dict[int, Dump] = field(default_factory=dict)
    errors: list[ErrorFile] = field(default_factory=list)
    exits: dict[int, int] = field(default_factory=dict)  # rank -> exit code, from torchrun's summary
    error_ranks: dict[str, int] = field(default_factory=dict)  # error file path -> rank, from the summary
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # files that looked like artefacts but were not usable
    launch: list = field(default_factory=list)  # DDP701 findings of the launch scripts among the inputs
    reports: list[str] = field(default_factory=list)  # `ddp-lint run --report` files (merged with merge.py)
    launch_scripts: int = 0


def _walk(paths: list[str], notes: list[str]):
    n = 0
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
                for f in sorted(files):
                    n += 1
                    if n > MAX_FILES:
                        notes.append(f"more than {MAX_FILES} files: the rest were not read")
                        return
                    yield os.path.join(root, f)
        elif os.path.isfile(p):
            yield p
        else:
            notes.append(f"{p}: no such file or folder")


_TB_FRAME_RE = re.compile(r'^\s*File "(.+?)", line (\d+), in (.+)$')


def parse_traceback(text: str) -> list[FrFrame]:
    """A Python traceback's frames, innermost first."""
    out = [FrFrame(m.group(1), int(m.group(2)), m.group(3).strip())
           for m in map(_TB_FRAME_RE.match, (text or "").splitlines()) if m]
    return list(reversed(out))


def _error_file(path: str, data) -> ErrorFile | None:
    """torchelastic's error file: {"message": {"message": "Type: msg", "extraInfo": {"py_callstack": ...}}}."""
    if not isinstance(data, dict) or not isinstance(data.get("message"), (dict, str)):
        return None
    m = data["message"]
    if isinstance(m, str):
        return None
    text = m.get("message")
    extra = m.get("extraInfo") if isinstance(m.get("extraInfo"), dict) else {}
    if not isinstance(text, str) or "py_callstack" not in extra:
        return None
    exc_type, _, msg = text.partition(": ")
    if not re.fullmatch(r"[\w.]+", exc_type or ""):
        exc_type, msg = "Exception", text
    ts = extra.get("timestamp")
    try:
        ts = int(ts)
    except (TypeError, ValueError):
        ts = None
    rank = None
    mm = re.search(r"[/\\](\d+)[/\\][^/\\]+$", path)  # torchrun: .../attempt_0/<local rank>/error.json
    if mm:
        rank = int(mm.group(1))
    return ErrorFile(path, rank, exc_type.rsplit(".", 1)[-1], msg, parse_traceback(str(extra.get("py_callstack"))), ts)


_SUMMARY_RE = re.compile(
    r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)[^\n]*\n\s*error_file\s*:\s*(\S*)", re.IGNORECASE)


def collect(paths: list[str]) -> Artefacts:
    """Every usable artefact under ``paths``; what could not be used is a problem line, not an error."""
    a = Artefacts()
    for path in _walk(paths, a.notes):
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):  # a FIFO, a device (or a link to one): never opened
                a.notes.append(f"{path}: not a regular file, left out")
                continue
            size = st.st_size
            with open(path, "rb") as f:
                head = f.read(64)
        except OSError as e:
            a.problems.append(f"{path}: {e.strerror or e}")
            continue
        if looks_like_pickle(head):
            try:
                d = read_dump(path)
            except DumpError as e:
                a.problems.append(str(e))
                continue
            if d.rank in a.dumps:
                a.notes.append(f"two dumps of rank {d.rank}: {os.path.basename(a.dumps[d.rank].path)} is used, "
                               f"{os.path.basename(path)} is left out")
                continue
            a.dumps[d.rank] = d
            a.notes.extend(d.notes)
            continue
        if size > MAX_TEXT or b"\0" in head:
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        if text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            ef = _error_file(path, data)
            if ef is not None:
                a.errors.append(ef)
                continue
            if isinstance(data, dict) and "ddp_lint_report" in data:
                a.reports.append(path)
                continue
        if looks_like_launch_script(text):
            a.launch_scripts += 1
            a.launch.extend(check_launch_script(text, os.path.abspath(path)))
            continue
        for m in _SUMMARY_RE.finditer(text):
            r, code, ef = int(m.group(1)), int(m.group(3)), m.group(4)
            a.exits[r] = code
            if ef and ef != "<N/A>":
                a.error_ranks[os.path.basename(os.path.dirname(ef)) + "/" + os.path.basename(ef)] = r
    for ef in a.errors:  # the summary names each failed rank's error file: its global rank
        key = os.path.basename(os.path.dirname(ef.path)) + "/" + os.path.basename(ef.path)
        if key in a.error_ranks:
            ef.rank = a.error_ranks[key]
    return a


# -- matching ----------------------------------------------------------------------------------------
def _signature(e: Entry) -> tuple:
    return (e.op, _sizes_of(e, "in"), _sizes_of(e, "out"), tuple(sorted(set(e.input_dtypes or ()))),
            tuple(sorted(set(e.output_dtypes or ()))))


def _sizes_of(e: Entry, which: str):
    # the sizes torchfrtrace leaves out of the comparison for these types
    if which == "in" and e.op in ("all_to_all", "scatter"):
        return None
    if which == "out" and e.op in ("all_to_all", "gather"):
        return None
    v = e.input_sizes if which == "in" else e.output_sizes
    return json.dumps(v) if v is not None else None


def differs(a: Entry, b: Entry) -> str | None:
    """How two ranks' entries of one collective differ (type, sizes, dtypes), or None."""
    if a.op != b.op:
        return "type"
    if _sizes_of(a, "in") != _sizes_of(b, "in") or _sizes_of(a, "out") != _sizes_of(b, "out"):
        return "sizes"
    if a.input_dtypes is not None and b.input_dtypes is not None and a.op not in ("scatter", "broadcast") \
            and set(a.input_dtypes) != set(b.input_dtypes):
        return "dtype"
    if a.output_dtypes is not None and b.output_dtypes is not None and a.op != "gather" \
            and set(a.output_dtypes) != set(b.output_dtypes):
        return "dtype"
    return None


@dataclass
class Verdict:
    """The machine-readable result of matching one process group (compared with torchfrtrace's)."""
    pg: str
    desc: str
    seq: int
    kind: str  # mismatch | skip | never-enqueued | all-pending | missing-dump
    ranks: set[int]  # every member rank at fault or in the differing collective
    aspect: str | None = None


@dataclass
class RankView:
    rank: int
    last_completed: Entry | None = None
    first_pending: Entry | None = None
    never: tuple[str, int] | None = None  # (pg, seq) it never enqueued
    no_dump: bool = False


class Explainer:
    def __init__(self, art: Artefacts, mapper: PathMapper):
        self.a = art
        self.m = mapper
        self.src = Sources()
        self.findings: list[Finding] = []
        self.verdicts: list[Verdict] = []
        self.notes: list[str] = list(art.notes)
        self.changed: set[str] = set()
        self.unmapped: set[str] = set()
        self.views: dict[int, RankView] = {}
        # a SystemExit's error file: where a rank left (run --dump writes them; so can @record)
        self.exit_sites = {ef.rank: ef for ef in art.errors if ef.exc_type == "SystemExit" and ef.rank is not None}
        self.raised = {ef.rank: ef for ef in art.errors if ef.exc_type != "SystemExit" and ef.rank is not None}

    # where an entry was called, on this checkout
    def site(self, e: Entry) -> tuple[Frame | None, Frame | None]:
        """(the user's frame, its caller) for an entry, remapped to the checkout."""
        return self._frames(e.frames, e.time_created_ns)

    def _frames(self, frames: list[FrFrame], t_ns: int | None = None) -> tuple[Frame | None, Frame | None]:
        """The user's innermost frame and its caller (innermost first in ``frames``), on this checkout.
        A line that no longer calls what the job's frame inside it ran (``all_reduce``, the helper)
        marks its file as changed since the job ran."""
        out = []
        for i, f in enumerate(frames):
            if is_framework(f.file):
                continue
            local = self.m.map(f.file)
            if local is None:
                self.unmapped.add(f.file)
                continue
            callee = next((g.name for g in reversed(frames[:i]) if g.name not in _WRAPPER_NAMES), None)
            lines = self.src.lines(local)
            if lines is not None and (f.line > len(lines) or f.line < 1 or (
                    callee and not callee.startswith("<") and not _calls(lines, f.line, callee))):
                self.changed.add(local)
            out.append(Frame(local, f.line, f.name))
            if len(out) == 2:
                break
        return (out[0] if out else None), (out[1] if len(out) > 1 else None)

    def finding(self, code: str, fr: Frame, message: str, ranks, related=(), details=None) -> Finding:
        name, url = rule_meta(code)
        return Finding(code=code, name=name, message=message, severity=Severity.ERROR, range=self.src.range_of(fr),
                       filename=os.path.abspath(fr.file), related=tuple(related), url=url, ranks=tuple(sorted(ranks)),
                       details=details or {})

    def rel(self, fr: Frame, msg: str, ranks) -> Related:
        return Related(range=self.src.range_of(fr), message=msg, filename=os.path.abspath(fr.file),
                       ranks=tuple(sorted(ranks)))

    # -- process groups
    def groups(self) -> dict[str, dict]:
        """pg name -> {"desc", "members"}. torch 2.13's gloo groups record their config under another
        name than their entries (''), so a group without config takes its members from its
        description (default_pg: the world) or from the ranks that recorded it."""
        dumps = self.a.dumps
        cfg: dict[str, dict] = {}
        world: set[int] = set(dumps)
        for d in dumps.values():
            for name, c in d.pg_config.items():
                if c.get("ranks"):
                    world |= set(c["ranks"])
                    cfg.setdefault(name, {"desc": c["desc"], "members": set(c["ranks"])})
        out: dict[str, dict] = {}
        for d in dumps.values():
            for e in d.entries:
                if e.pg_name in out:
                    continue
                if e.pg_name in cfg:
                    out[e.pg_name] = {"desc": e.pg_desc, "members": set(cfg[e.pg_name]["members"])}
                elif e.pg_desc == "default_pg":
                    out[e.pg_name] = {"desc": e.pg_desc, "members": set(world)}
                else:
                    out[e.pg_name] = {"desc": e.pg_desc, "members": set()}
        for d in dumps.values():
            for e in d.entries:
                if not out[e.pg_name]["members"] or e.pg_desc != "default_pg" and e.pg_name not in cfg:
                    out[e.pg_name]["members"].add(d.rank)
        return out

    def run(self) -> None:
        dumps = self.a.dumps
        for r, d in dumps.items():
            self.views[r] = RankView(r)
            if d.gaps:
                lost = sum(b - a + 1 for a, b in d.gaps)
                self.notes.append(f"rank {r}'s dump misses {count(lost, 'entry', 'entries')} (record ids "
                                  + ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in d.gaps[:4])
                                  + "): its ring buffer was overwritten; raise TORCH_FR_BUFFER_SIZE")
        versions = {d.version for d in dumps.values()}
        if len(versions) > 1:
            self.notes.append("the dumps have different versions (" + ", ".join(
                f"rank {r}: {d.version}" for r, d in sorted(dumps.items())) + "); they were read field by field")
        for name, g in sorted(self.groups().items(), key=lambda kv: (kv[1]["desc"] != "default_pg", kv[0])):
            self.match_group(name, g["desc"], g["members"])
        for r in sorted(self.views):
            v = self.views[r]
            if r in dumps and v.last_completed is None and v.first_pending is None and v.never is None:
                es = dumps[r].entries
                v.last_completed = next((e for e in reversed(es) if e.completed), None)
                v.first_pending = next((e for e in es if not e.completed), None)
        self.error_files()
        if self.changed:
            self.notes.append("changed since the job ran (lines may have moved): " + ", ".join(
                sorted(os.path.relpath(p) if not os.path.relpath(p).startswith("..") else p for p in self.changed)))
        if self.unmapped:
            shown = sorted(self.unmapped)[:3]
            self.notes.append("not found in this checkout: " + ", ".join(shown)
                              + (f" and {len(self.unmapped) - 3} more" if len(self.unmapped) > 3 else "")
                              + "; give --path-map FROM=TO (or run explain from the checkout's root)")

    def match_group(self, pg: str, desc: str, members: set[int]) -> None:
        dumps = self.a.dumps
        per: dict[int, dict[int, Entry]] = {}
        for r in sorted(members):
            if r in dumps:
                per[r] = {e.seq: e for e in dumps[r].entries if e.pg_name == pg and not e.is_p2p}
        have = {r: s for r, s in per.items() if s}
        if not have:
            return
        missing = sorted(members - set(dumps))
        # what each rank's pg_status says it completed, recorded or not (a ring buffer that wrapped,
        # or `ddp-lint run --dump`, which records only what was still running)
        upto = {r: self._completed_upto(r, pg) for r in per}
        first = {r: min(s) for r, s in have.items()}
        start = min(first.values())
        end = max(max(s) for s in have.values())
        label = f"process group {desc}" if desc and desc != "undefined" else f"process group {pg}"
        if missing:
            self.notes.append(f"{label} has {count(len(members), 'rank')}, but there is no dump of {rank_list(missing)}: "
                              "collect the dumps of every node (TORCH_FR_DUMP_TEMP_FILE on a shared file system), or "
                              "the rank ended before it could dump")
        for seq in range(start, end + 1):
            present = {r: s[seq] for r, s in per.items() if seq in s}
            done = [r for r in per if seq not in per[r] and seq <= upto[r]]
            # before a rank's window and not known complete: the ranks cannot be compared here
            if any(seq not in per[r] and r not in done and r in first and seq < first[r] for r in per):
                continue
            absent = sorted(r for r in per if seq not in per[r] and r not in done)
            unknown = [r for r in absent if self._in_gap(r, per[r], seq)]
            absent = [r for r in absent if r not in unknown]
            if not present:
                continue
            # type / sizes / dtypes against the lowest rank's entry, as torchfrtrace does
            ref_rank = min(present)
            groups: dict[tuple, list[int]] = {}
            aspects = set()
            for r, e in sorted(present.items()):
                key = next((k for k in groups if differs(present[groups[k][0]], e) is None), None)
                if key is None:
                    key = _signature(e)
                    groups[key] = []
                    if r != ref_rank:
                        aspects.add(differs(present[ref_rank], e))
                groups[key].append(r)
            if len(groups) > 1:
                self.mismatch(pg, label, seq, present, list(groups.values()), per, aspects)
                return
            for r, e in present.items():
                if e.completed:
                    self.views[r].last_completed = e
            pending = {r: e for r, e in present.items() if not e.completed}
            # gloo marks a collective complete lazily (a dump taken right after it returned may
            # still say "scheduled"): a rank that went on to later collectives of this group is not
            # stuck in this one, so only a rank's last entry can be where it waits
            stuck = bool(pending) and all(seq == max(per[r]) for r in pending)
            if not absent and not missing and not pending:
                continue
            if absent and pending:
                self.never_enqueued(pg, label, seq, pending, absent, per)
                return
            if missing and stuck:
                self.missing_ranks(pg, label, seq, pending, missing)
                return
            if stuck and not absent:
                self.all_pending(pg, label, seq, pending)
                return
            if unknown:
                self.notes.append(f"{label}: collective #{seq} of {rank_list(unknown)} fell in a gap of "
                                  "the ring buffer")

    def _completed_upto(self, r: int, pg: str) -> int:
        d = self.a.dumps[r]
        ids = {e.pg_id for e in d.entries if e.pg_name == pg and e.pg_id is not None}
        best = -1
        for i in ids:
            v = (d.pg_status.get(str(i)) or {}).get("last_completed_collective")
            if isinstance(v, int) and not isinstance(v, bool):
                best = max(best, v)
        return best

    def _in_gap(self, r: int, seqs: dict[int, Entry], seq: int) -> bool:
        d = self.a.dumps[r]
        if not d.gaps:
            return False
        before = [e for s, e in seqs.items() if s < seq]
        after = [e for s, e in seqs.items() if s > seq]
        if not before or not after:
            return bool(after) and any(a <= max(e.record_id for e in after) for a, _ in d.gaps)
        lo, hi = max(e.record_id for e in before), min(e.record_id for e in after)
        return any(lo < a <= hi for a, _ in d.gaps)

    # -- findings
    def _desc(self, e: Entry) -> str:
        shape = ""
        if e.input_sizes:
            shape = " of shape " + ", ".join(str(list(s)) if isinstance(s, (list, tuple)) else str(s)
                                             for s in e.input_sizes[:3])
        dt = f" {'/'.join(sorted(set(map(str, e.input_dtypes))))}" if e.input_dtypes else ""
        return f"{e.op}(){shape}{dt}"

    def _loc_text(self, fr: Frame | None) -> str:
        if fr is None:
            return "(no frame of the user's code)"
        rel = os.path.relpath(fr.file)
        return f"at {rel if not rel.startswith('..') else fr.file}:{fr.line}"

    def mismatch(self, pg, label, seq, present, groups, per, aspects) -> None:
        sides = []
        for rs in groups:
            e = present[rs[0]]
            fr, caller = self.site(e)
            sides.append((rs, e, fr, caller))
        # one side's entry is the other side's next collective: that side skipped one
        skip = None
        for i, (rs, e, fr, _) in enumerate(sides):
            for j, (rs2, e2, _, _) in enumerate(sides):
                if i != j:
                    nxt = per[rs2[0]].get(seq + 1)
                    if nxt is not None and differs(nxt, e) is None and self.site(nxt)[0] == fr:
                        skip = (i, j)
        kind = "skip" if skip else "mismatch"
        all_ranks = sorted(r for rs, *_ in sides for r in rs)
        self.verdicts.append(Verdict(pg, label, seq, kind, set(all_ranks),
                                     ",".join(sorted(a for a in aspects if a))))
        primary = next(((rs, e, fr, c) for rs, e, fr, c in sides if fr is not None), None)
        if primary is None:
            self.notes.append(f"{label}: collective #{seq} differs between ranks, but no frame of the user's code "
                              "was recorded")
            return
        if skip:
            i, j = skip
            srs, se, sfr, _ = sides[i]
            ors, oe, ofr, _ = sides[j]
            primary = sides[j]
            msg = (f"{rank_list(srs)} skipped {oe.op}() here: {label}'s collective #{seq} is {self._desc(oe)} on "
                   f"{rank_list(ors)} but {self._desc(se)} on {rank_list(srs)} {self._loc_text(sfr)}, the "
                   f"collective that follows on {rank_list(ors)}")
        else:
            prs, pe, pfr, _ = primary
            others = [f"{self._desc(e)} on {rank_list(rs)} {self._loc_text(fr)}" for rs, e, fr, _ in sides
                      if rs is not prs]
            aspect = ", ".join(sorted(a for a in aspects if a)) or "type"
            msg = (f"mismatched collectives ({aspect}): {label}'s collective #{seq} is {self._desc(pe)} on "
                   f"{rank_list(prs)} here, but " + "; ".join(others))
        rel = []
        for rs, e, fr, caller in sides:
            if fr is not None and rs is not primary[0]:
                rel.append(self.rel(fr, f"{rank_list(rs)} called {self._desc(e)} here", rs))
            if caller is not None:
                rel.append(self.rel(caller, f"{rank_list(rs)} called it from here", rs))
        for rs, e, _, _ in sides:
            for r in rs:
                if e.completed:
                    self.views[r].last_completed = e
                else:
                    self.views[r].first_pending = e
        details = {"process_group": pg, "collective_seq_id": seq, "kind": kind,
                   "hint": "every rank must call the same collectives in the same order with the same shapes "
                           "and dtypes"}
        self.findings.append(self.finding("DDP902", primary[2], msg, all_ranks, rel, details))

    def _last(self, r: int, per) -> Entry | None:
        done = [e for s, e in sorted(per.get(r, {}).items()) if e.completed]
        return done[-1] if done else (sorted(per.get(r, {}).items())[-1][1] if per.get(r) else None)

    def never_enqueued(self, pg, label, seq, pending, absent, per) -> None:
        e0 = pending[min(pending)]
        fr, caller = self.site(e0)
        waiting = sorted(pending)
        self.verdicts.append(Verdict(pg, label, seq, "never-enqueued", set(absent)))
        rel, parts = [], []
        for r in absent:
            last = self._last(r, per)
            self.views[r].never = (pg, seq)
            self.views[r].last_completed = last if last is not None and last.completed else self.views[r].last_completed
            lfr, lcaller = self.site(last) if last is not None else (None, None)
            if lfr is not None:
                rel.append(self.rel(lfr, f"{rank_list([r])}'s last collective, {self._desc(last)}", [r]))
                if lcaller is not None:
                    rel.append(self.rel(lcaller, f"{rank_list([r])} called its last collective from here", [r]))
                parts.append(f"{rank_list([r])} never enqueued it (its last collective was {last.op}() "
                             f"{self._loc_text(lfr)})")
            else:
                parts.append(f"{rank_list([r])} never enqueued it")
        for r in waiting:
            self.views[r].first_pending = pending[r]
        if caller is not None:
            rel.append(self.rel(caller, f"{rank_list(waiting)} called it from here", waiting))
        if fr is None:
            self.notes.append(f"{label}: {rank_list(waiting)} wait in collective #{seq}, but no frame of the user's "
                              "code was recorded")
            return
        exited = [r for r in absent if self.a.exits.get(r) is not None or r in self.exit_sites or r in self.raised]
        msg = (f"{rank_list(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in {self._desc(e0)} here "
               f"({label}'s collective #{seq}, never completed); " + "; ".join(parts))
        details = {"process_group": pg, "collective_seq_id": seq, "culprits": absent, "state": "in-collective",
                   "waiting": waiting,
                   "hint": "the culprit is still busy elsewhere (a loop, a helper, I/O) or took a branch without "
                           "this collective: every rank must call it"}
        if exited:
            for r in exited:
                self.left(r, e0, fr, waiting, rel, details)
            return
        self.findings.append(self.finding("DDP903", fr, msg, sorted(set(waiting) | set(absent)), rel, details))

    def left(self, r: int, e0: Entry, fr: Frame, waiting: list[int], rel: list, details: dict) -> None:
        """DDP904: rank ``r`` exited while ``waiting`` wait in ``e0`` (at ``fr``); at its exit line when
        an error file (SystemExit) gives it."""
        code = self.a.exits.get(r)
        wait = "waits" if len(waiting) == 1 else "wait"
        raised = self.raised.get(r)
        site = self._frames(raised.frames)[0] if raised is not None else None
        if site is not None:  # it raised (its error file): DDP901 at its line, as run says it
            msg = (f"{rank_list([r])}: {condense(raised.exc_type, raised.message)}; {rank_list(waiting)} {wait} in "
                   f"{self._desc(e0)} {self._loc_text(fr)}")
            rel = [self.rel(fr, f"{rank_list(waiting)} {wait} in {e0.op}() here", waiting), *rel]
            dd = {k: v for k, v in details.items() if k != "hint"}
            self.findings.append(self.finding("DDP901", site, msg, [r], rel, {
                "exit_code": code, **dd, "exception": raised.exc_type, "error_file": raised.path}))
            return
        ef = self.exit_sites.get(r)
        if code is None and ef is not None:
            code = int(ef.message) if re.fullmatch(r"-?\d+", ef.message.strip() or "x") else ef.message.strip() or None
        site = self._frames(ef.frames)[0] if ef is not None else None
        d = {"exit_code": code, **details, "hint": "every rank must take part in every collective; a rank that "
             "leaves early makes the others wait until the timeout"}
        if site is not None:
            msg = (f"{rank_list([r])} exited (exit code {code}) here while {rank_list(waiting)} {wait} in "
                   f"{self._desc(e0)} {self._loc_text(fr)}")
            rel = [self.rel(fr, f"{rank_list(waiting)} {wait} in {e0.op}() here", waiting), *rel]
            self.findings.append(self.finding("DDP904", site, msg, [r], rel, d))
        else:
            self.findings.append(self.finding(
                "DDP904", fr, f"{rank_list([r])} exited (exit code {code}) before {self._desc(e0)} here, which "
                f"{rank_list(waiting)} {wait} in", [r], rel, d))

    def missing_ranks(self, pg, label, seq, pending, missing) -> None:
        e0 = pending[min(pending)]
        fr, caller = self.site(e0)
        waiting = sorted(pending)
        self.verdicts.append(Verdict(pg, label, seq, "missing-dump", set(missing)))
        for r in missing:
            self.views.setdefault(r, RankView(r, no_dump=True))
        for r in waiting:
            self.views[r].first_pending = pending[r]
        if fr is None:
            return
        rel = [self.rel(caller, f"{rank_list(waiting)} called it from here", waiting)] if caller else []
        exited = [r for r in missing if r in self.a.exits or r in self.exit_sites or r in self.raised]
        wait = "waits" if len(waiting) == 1 else "wait"
        for r in exited:
            self.left(r, e0, fr, waiting, rel, {"process_group": pg, "collective_seq_id": seq, "waiting": waiting,
                                                "no_dump": True})
        rest = [r for r in missing if r not in exited]
        if rest:
            msg = (f"{rank_list(waiting)} {wait} in {self._desc(e0)} here ({label}'s collective #{seq}, never "
                   f"completed); there is no dump of {rank_list(rest)}: it exited or its node was lost before "
                   "dumping, or its dump was not collected")
            self.findings.append(self.finding(
                "DDP903", fr, msg, sorted(set(waiting) | set(rest)), rel,
                {"process_group": pg, "collective_seq_id": seq, "missing_dumps": rest,
                 "hint": "torch writes each rank's dump on its own node (TORCH_FR_DUMP_TEMP_FILE): point it at a "
                         "shared folder, or collect every node's files"}))

    def all_pending(self, pg, label, seq, pending) -> None:
        e0 = pending[min(pending)]
        fr, caller = self.site(e0)
        ranks = sorted(pending)
        self.verdicts.append(Verdict(pg, label, seq, "all-pending", set(ranks)))
        for r in ranks:
            self.views[r].first_pending = pending[r]
        if fr is None:
            return
        rel = [self.rel(caller, f"{rank_list(ranks)} called it from here", ranks)] if caller else []
        msg = (f"{rank_list(ranks)} {'is' if len(ranks) == 1 else 'are all'} in {self._desc(e0)} here ({label}'s "
               f"collective #{seq}), which never completed")
        self.findings.append(self.finding("DDP903", fr, msg, ranks, rel, {
            "process_group": pg, "collective_seq_id": seq, "state": "in-collective",
            "hint": "every rank enqueued it: look at the network / NCCL (NCCL_DEBUG=INFO), or at ranks that "
                    "use the same GPU"}))

    def error_files(self) -> None:
        by_rank = {r: f for f in self.findings for r in [*f.details.get("waiting", ()), *f.ranks]}
        # a rank whose torch call lost its peer (Gloo's connectFullMesh, a closed connection) while
        # another rank exited or raised on its own: that rank's finding explains it (as ``run`` reads
        # it, states.peer_loss), so it is kept as its consequence, not reported as a second cause
        lost = [ef for ef in self.a.errors if ef.exc_type != "SystemExit" and peer_loss(ef.message)
                and ef.frames and is_framework(ef.frames[0].file)]
        causes = [ef for ef in self.a.errors if ef not in lost]
        deferred = [ef for ef in lost if any(c.rank != ef.rank for c in causes)]
        for ef in [*causes, *(ef for ef in lost if ef not in deferred)]:
            self._error_file(ef, by_rank)
        for ef in deferred:
            cause = next((f for f in self.findings if f.code in ("DDP901", "DDP904") and ef.rank not in f.ranks), None)
            if cause is None:
                self._error_file(ef, by_rank)  # the other rank's file gave no finding: this one stands alone
            else:
                cause.details.setdefault("exceptions", {})[str(ef.rank)] = condense(ef.exc_type, ef.message)

    def _error_file(self, ef: ErrorFile, by_rank: dict) -> None:
        """One rank's error file: a DDP901 / DDP904 finding, the consequence of a finding that already
        explains its rank, or a note when no frame of it is in this checkout."""
        if ef.exc_type == "SystemExit" and ef.rank in by_rank:
            return
        fr, caller = self._frames(ef.frames, ef.timestamp * 10**9 if ef.timestamp else None)
        if ef.rank in by_rank:  # raised in the collective a finding already explains: its consequence
            f = by_rank[ef.rank]
            f.details.setdefault("exceptions", {})[str(ef.rank)] = condense(ef.exc_type, ef.message)
            return
        if fr is None:
            self.notes.append(f"{ef.path}: {condense(ef.exc_type, ef.message)} (no frame of this checkout)")
            return
        ranks = [ef.rank] if ef.rank is not None else []
        who = rank_list(ranks) if ranks else "a rank"
        rel = [self.rel(caller, "called from here", ranks)] if caller else []
        if ef.exc_type == "SystemExit":
            code = ef.message.strip() or "0"
            self.findings.append(self.finding("DDP904", fr, f"{who} exited (exit code {code}) here", ranks, rel,
                                              {"exit_code": code, "error_file": ef.path}))
            return
        self.findings.append(self.finding(
            "DDP901", fr, f"{who} raised {condense(ef.exc_type, ef.message)}", ranks, rel,
            {"exception": ef.exc_type, "error_file": ef.path}))
        if ef.rank is not None:
            self.views.setdefault(ef.rank, RankView(ef.rank))

    def rank_text(self, v: RankView) -> tuple[str, Frame | None, str | None]:
        def at(e):
            fr, caller = self.site(e)
            via = f" (from {self._loc_text(caller)[3:]})" if caller is not None else ""
            return f"{e.op}() {self._loc_text(fr)}{via}" if fr else f"{e.op}()", fr

        parts = []
        site, op = None, None
        if v.no_dump and v.rank not in self.a.dumps:
            parts.append("no dump")
        if v.last_completed is not None:
            t, fr = at(v.last_completed)
            parts.append(f"last completed {t}")
            site = fr
        if v.first_pending is not None:
            t, fr = at(v.first_pending)
            parts.append(f"first pending {t}")
            site, op = fr, v.first_pending.op
        if v.never is not None:
            parts.append(f"never enqueued collective #{v.never[1]}")
        code = self.a.exits.get(v.rank)
        if code is not None:
            parts.append(f"exit code {code}")
        return f"rank {v.rank}: " + ("; ".join(parts) or "no collectives recorded"), site, op


def explain(paths: list[str], *, root: str | None = None, path_maps=()):
    """Explain the artefacts under ``paths`` as an api.RunResult (exit_code 2 with ``error`` when
    nothing usable was found)."""
    from .api import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, RankSummary, RunResult

    res = RunResult(multinode="explained")
    try:
        mapper = PathMapper(os.path.abspath(root or os.getcwd()), parse_path_maps(path_maps))
    except ValueError as e:
        res.error, res.exit_code = str(e), EXIT_ERROR
        return res
    art = collect(list(paths))
    if art.reports and not art.dumps and not art.errors:  # ddp-lint's own per-node reports: merge's job
        from .merge import MergeError, merge

        try:
            merged = merge(art.reports)
        except MergeError as e:
            res.error, res.exit_code = str(e), EXIT_ERROR
            return res
        merged.multinode = "explained"
        merged.script = ", ".join(paths)
        merged.findings += art.launch
        merged.notes.insert(0, f"read as `ddp-lint merge` of {count(len(art.reports), 'report')}")
        merged.exit_code = EXIT_FINDINGS if merged.findings else EXIT_CLEAN
        return merged
    if art.reports:
        art.notes.append(f"{count(len(art.reports), 'ddp-lint report')} left out: they are merged on their own "
                         "(`ddp-lint merge`), not together with Flight Recorder dumps")
    if not art.dumps and not art.errors and not art.launch_scripts:
        why = "; ".join(art.problems[:3] + art.notes[:3])
        res.error = ("no Flight Recorder dump or torchelastic error file found under " + ", ".join(paths)
                     + (f" ({why})" if why else ""))
        res.exit_code = EXIT_ERROR
        return res
    ex = Explainer(art, mapper)
    ex.run()
    res.findings = ex.findings + art.launch
    res.notes = [f"left out: {p}" for p in art.problems] + ex.notes
    res.raw = {"verdicts": [{"process_group": v.pg, "seq": v.seq, "kind": v.kind, "ranks": sorted(v.ranks),
                             "aspect": v.aspect} for v in ex.verdicts]}
    res.verdicts = ex.verdicts  # type: ignore[attr-defined]
    for r in sorted(ex.views):
        text, site, op = ex.rank_text(ex.views[r])
        res.ranks.append(RankSummary(rank=r, status="dump" if r in art.dumps else "no-dump", text=text,
                                     filename=site.file if site else None, line=site.line if site else None, op=op,
                                     exit_code=art.exits.get(r)))
    res.nproc = len(res.ranks)
    res.script = ", ".join(paths)
    res.exit_code = EXIT_FINDINGS if res.findings else EXIT_CLEAN
    return res
