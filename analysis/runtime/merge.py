"""Per-node reports of a multi-node run, and ``ddp-lint merge`` that joins them.

On a real cluster every node's ``ddp-lint run --report PATH`` sees only its own ranks. Its report
(JSON, written by :func:`write_report`) carries, besides that node's findings, the records of its
ranks (``raw``: the shim's events and stack dumps, bounded). ``merge`` puts the ranks of every node
together and analyses the whole job again, with global ranks: a collective mismatch between two
nodes, or the node that failed first while the others waited, is then one finding, as in a
one-machine run. Reports without records (``ddp-lint run --output-format json`` output: a list of
findings) are merged finding by finding: identical findings of several nodes become one with the
union of their ranks.
"""
from __future__ import annotations

import json
import os
import re

from ..model import Finding, Position, Range, Related, Severity
from .logs import MAX_GROUPS_MADE, RankData

REPORT_VERSION = 1

# bounds of a report ``merge`` accepts (a node's report is far below them; see validate_report)
MAX_REPORT_BYTES = 256 * 1024 * 1024
MAX_WORLD_SIZE = 100_000  # ranks of a job (the SLURM host cap, nodes.MAX_HOSTS)
MAX_MISSING_RANKS = 4096  # ranks of the world size without records (each costs an analysed placeholder)
MAX_ITEMS = 100_000  # findings, notes, rank summaries, events, pending and raised calls of one rank...
MAX_TEXT = 4 * 1024 * 1024  # characters of one string (a stack dump is cut at 256 KiB when written)
MAX_LINE = 10_000_000  # a row or column


class MergeError(ValueError):
    """A report that cannot be read; the message is for people."""


# -- the schema of a report, checked before anything of it is used ---------------------------------
def _kind(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


class _Checker:
    """Walks a report and raises MergeError naming the first value that is not as ``write_report``
    writes it (``node0.json: raw.ranks["3"].events[7]: expected an object, got a string``)."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, what: str):
        raise MergeError(f"{self.path}: {where or 'the report'}: {what}")

    def typed(self, v, where, *types, optional=True):
        if v is None and optional:
            return v
        if isinstance(v, bool) and bool not in types:
            self.fail(where, f"expected {' or '.join(_kind(t()) for t in types)}, got {_kind(v)}")
        if not isinstance(v, types):
            self.fail(where, f"expected {' or '.join(_kind(t()) for t in types)}, got {_kind(v)}")
        return v

    def text(self, v, where, limit=MAX_TEXT, optional=True):
        if self.typed(v, where, str, optional=optional) is not None and len(v) > limit:
            self.fail(where, f"longer than {limit} characters")

    def integer(self, v, where, lo=0, hi=MAX_LINE, optional=True):
        if self.typed(v, where, int, optional=optional) is not None and not lo <= v <= hi:
            self.fail(where, f"{v} is out of bounds ({lo}..{hi})")

    def number(self, v, where):
        if self.typed(v, where, int, float) is not None and not (0 <= v < 1e12):
            self.fail(where, f"{v} is out of bounds")

    def items(self, v, where, kind=list, limit=MAX_ITEMS):
        if self.typed(v, where, kind) is None:
            return ()
        if len(v) > limit:
            self.fail(where, f"more than {limit} entries")
        return v.items() if kind is dict else enumerate(v)

    def rank(self, v, where):
        self.integer(v, where, 0, MAX_WORLD_SIZE - 1, optional=False)

    def location(self, v, where, optional=False):
        if self.typed(v, where, dict, optional=optional) is not None:
            self.integer(v.get("row"), f"{where}.row", 1, optional=False)
            self.integer(v.get("column"), f"{where}.column", 1, optional=False)

    def finding(self, f, where):
        from ..model import Severity

        self.typed(f, where, dict, optional=False)
        code = f.get("code")
        self.text(code, f"{where}.code", 16, optional=False)
        if not re.fullmatch(r"[A-Za-z]{1,8}[0-9]{1,6}", code):
            self.fail(f"{where}.code", f"{code!r} is not a rule code")
        self.text(f.get("name"), f"{where}.name", 100)
        self.text(f.get("message"), f"{where}.message", 65536)
        self.text(f.get("filename"), f"{where}.filename", 4096)
        self.text(f.get("url"), f"{where}.url", 4096)
        if f.get("severity") is not None and f.get("severity") not in {s.value for s in Severity}:
            self.fail(f"{where}.severity", f"{str(f.get('severity'))[:40]!r} is not a severity")
        self.location(f.get("location"), f"{where}.location")
        self.location(f.get("end_location"), f"{where}.end_location", optional=True)
        self.typed(f.get("emulated"), f"{where}.emulated", bool)
        self.typed(f.get("details"), f"{where}.details", dict)
        for i, r in self.items(f.get("ranks"), f"{where}.ranks"):
            self.rank(r, f"{where}.ranks[{i}]")
        for i, r in self.items(f.get("related"), f"{where}.related", limit=1000):
            w = f"{where}.related[{i}]"
            self.typed(r, w, dict, optional=False)
            self.location(r.get("location"), f"{w}.location")
            self.location(r.get("end_location"), f"{w}.end_location", optional=True)
            self.text(r.get("message"), f"{w}.message", 65536)
            self.text(r.get("filename"), f"{w}.filename", 4096)
            for j, x in self.items(r.get("ranks"), f"{w}.ranks"):
                self.rank(x, f"{w}.ranks[{j}]")

    def event(self, ev, where):
        self.typed(ev, where, dict, optional=False)
        if ev.get("kind") == "start" and ev.get("world_size") is not None:
            ws = ev["world_size"]
            if isinstance(ws, str):
                ws = int(ws) if ws.isdigit() and len(ws) <= 9 else -1
            self.integer(ws, f"{where}.world_size", 0, MAX_WORLD_SIZE)

    def rank_records(self, key, d, where):
        if not (isinstance(key, str) and key.isdigit() and len(key) <= 9 and int(key) < MAX_WORLD_SIZE):
            self.fail(where, f"{str(key)[:40]!r} is not a rank")
        self.typed(d, where, dict, optional=False)
        for i, ev in self.items(d.get("events"), f"{where}.events"):
            self.event(ev, f"{where}.events[{i}]")
        for k, ev in self.items(d.get("pending"), f"{where}.pending", dict):
            self.event(ev, f"{where}.pending[{k!r}]")
        for i, ev in self.items(d.get("groups_made"), f"{where}.groups_made"):
            self.event(ev, f"{where}.groups_made[{i}]")
        for k, v in self.items(d.get("raised"), f"{where}.raised", dict):
            if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], dict) and isinstance(v[1], str)):
                self.fail(f"{where}.raised[{k!r}]", "expected [call, error]")
        for k in ("stack_usr1", "stack_term", "stack_fatal"):
            self.text(d.get(k), f"{where}.{k}")
        for k in ("stack_py", "last_site", "end_event"):
            self.typed(d.get(k), f"{where}.{k}", dict)
        self.typed(d.get("hung"), f"{where}.hung", bool)
        self.number(d.get("last_t"), f"{where}.last_t")
        for k in ("dropped", "logged_returns", "quiet"):
            self.integer(d.get(k), f"{where}.{k}", 0, 1 << 62)

    def report(self, data):
        if isinstance(data, list):  # ``--output-format json``: findings only
            for i, f in self.items(data, ""):
                self.finding(f, f"[{i}]")
            return
        self.typed(data, "", dict, optional=False)
        version = data.get("ddp_lint_report")
        self.integer(version, "ddp_lint_report", 1, 1 << 30, optional=False)
        if version > REPORT_VERSION:
            self.fail("ddp_lint_report", f"version {version} is newer than this ddp-lint reads "
                                         f"({REPORT_VERSION}); merge with the ddp-lint that wrote it")
        self.text(data.get("script"), "script", 4096)
        self.text(data.get("multinode"), "multinode", 40)
        for k in ("nnodes", "nproc", "node_rank"):
            self.integer(data.get(k), k, 0, MAX_WORLD_SIZE)
        self.integer(data.get("exit_code"), "exit_code", -255, 255)
        for k in ("emulated", "timed_out"):
            self.typed(data.get(k), k, bool)
        for k in ("timeout", "duration"):
            self.number(data.get(k), k)
        for i, n in self.items(data.get("notes"), "notes", limit=1000):
            self.text(n, f"notes[{i}]", 65536, optional=False)
        for i, f in self.items(data.get("findings"), "findings"):
            self.finding(f, f"findings[{i}]")
        for i, r in self.items(data.get("ranks"), "ranks", limit=MAX_WORLD_SIZE):
            w = f"ranks[{i}]"
            self.typed(r, w, dict, optional=False)
            self.rank(r.get("rank"), f"{w}.rank")
            for k in ("status", "text", "filename", "op"):
                self.text(r.get(k), f"{w}.{k}", 65536)
            for k in ("line", "node", "local_rank"):
                self.integer(r.get(k), f"{w}.{k}")
            self.integer(r.get("exit_code"), f"{w}.exit_code", -255, 255)
        raw = self.typed(data.get("raw"), "raw", dict)
        if raw:
            for k in ("roots", "lib_dirs"):
                for i, x in self.items(raw.get(k), f"raw.{k}", limit=10_000):
                    self.text(x, f"raw.{k}[{i}]", 4096, optional=False)
            for key, d in self.items(raw.get("ranks"), "raw.ranks", dict, limit=MAX_WORLD_SIZE):
                self.rank_records(key, d, f"raw.ranks[{key!r}]" if isinstance(key, str) else "raw.ranks")


def validate_report(data, path: str) -> None:
    """Raise MergeError unless ``data`` has the shape and bounds of a report ``ddp-lint run --report``
    (or ``--output-format json``) writes: types, list lengths, string sizes, ranks and the world size
    below ``MAX_WORLD_SIZE``. Nothing of a report is used before this passed."""
    _Checker(path).report(data)


# -- rank records ----------------------------------------------------------------------------------
def _seq(k):
    try:
        return int(k)
    except (TypeError, ValueError):
        return k


def load_ranks(raw: dict) -> dict[int, RankData]:
    out = {}
    for key, d in (raw.get("ranks") or {}).items():
        r = int(key)
        rd = RankData(r)
        rd.events = [e for e in d.get("events") or [] if isinstance(e, dict)]
        rd.pending = {_seq(k): v for k, v in (d.get("pending") or {}).items()}
        rd.raised = {_seq(k): (v[0], v[1]) for k, v in (d.get("raised") or {}).items()
                     if isinstance(v, list) and len(v) == 2}
        for k in ("stack_usr1", "stack_term", "stack_fatal"):
            setattr(rd, k, str(d.get(k) or ""))
        rd.stack_py = d.get("stack_py") if isinstance(d.get("stack_py"), dict) else None
        rd.hung = bool(d.get("hung"))
        rd.last_site = d.get("last_site")
        rd.last_t = float(d.get("last_t") or 0.0)
        rd.last_coll = d.get("last_coll") if isinstance(d.get("last_coll"), dict) else None
        rd.gone_at = float(d["gone_at"]) if isinstance(d.get("gone_at"), (int, float)) else None
        rd.end_event = d.get("end_event")
        rd.dropped = int(d.get("dropped") or 0)
        rd._logged_returns = int(d.get("logged_returns") or 0)
        rd._quiet = int(d.get("quiet") or 0)
        rd.groups_made = [e for e in d.get("groups_made") or [] if isinstance(e, dict)][:MAX_GROUPS_MADE]
        out[r] = rd
    return out


# -- findings as JSON and back -----------------------------------------------------------------------
def _pos(d) -> Position:
    return Position(max(int(d.get("row", 1)) - 1, 0), max(int(d.get("column", 1)) - 1, 0))


def finding_from_json(d: dict) -> Finding:
    """A runtime finding from ``finding_to_json``'s form (its message already has the see/emulated parts)."""
    from ..output import EMULATED_SUFFIX

    msg = str(d.get("message", ""))  # back to the bare message: display_message adds these again
    emulated = bool(d.get("emulated"))
    if emulated and msg.endswith(EMULATED_SUFFIX):
        msg = msg[: -len(EMULATED_SUFFIX)]
    rule = (d.get("details") or {}).get("static_rule") if isinstance(d.get("details"), dict) else None
    if rule and msg.endswith(f" (see {rule})"):
        msg = msg[: -len(f" (see {rule})")]
    try:
        related = tuple(
            Related(range=Range(_pos(r["location"]), _pos(r.get("end_location") or r["location"])),
                    message=str(r.get("message", "")), filename=r.get("filename"),
                    ranks=tuple(int(x) for x in r.get("ranks") or ()))
            for r in d.get("related") or ())
        return Finding(
            code=str(d["code"]), name=str(d.get("name") or d["code"].lower()), message=msg,
            severity=Severity(d.get("severity", "error")),
            range=Range(_pos(d["location"]), _pos(d.get("end_location") or d["location"])),
            filename=str(d.get("filename") or "<unknown>"), related=related, url=d.get("url"),
            ranks=tuple(int(x) for x in d.get("ranks") or ()), emulated=emulated,
            details=dict(d.get("details") or {}),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise MergeError(f"not a ddp-lint finding ({type(e).__name__}: {e})") from None


# -- reports ---------------------------------------------------------------------------------------
def report_json(res) -> dict:
    """One node's report (api.RunResult) as JSON-ready data."""
    from ..output import finding_to_json

    return {
        "ddp_lint_report": REPORT_VERSION, "script": res.script, "nnodes": res.nnodes, "node_rank": res.node_rank,
        "multinode": res.multinode, "nproc": res.nproc, "emulated": res.emulated, "timeout": res.timeout,
        "timed_out": res.timed_out, "duration": res.duration, "exit_code": res.exit_code, "notes": res.notes,
        "ranks": [rs.to_json() for rs in res.ranks], "findings": [finding_to_json(f) for f in res.findings],
        "raw": res.raw,
    }


def report_path(template: str, res) -> str:
    """``{node}`` in a report path becomes this node's rank (its SLURM node id, --node-rank, or the
    node of its first rank)."""
    node = res.node_rank
    if node is None:
        node = next((rs.node for rs in res.ranks if rs.node is not None), 0)
    return template.replace("{node}", str(node))


def write_report(template: str, res) -> str:
    path = report_path(template, res)
    rep = report_json(res)
    try:
        data = json.dumps(rep, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (an undecodable file name): \u escapes are exact
        data = json.dumps(rep, ensure_ascii=True, default=str).encode("ascii")
    from ..io import atomic_write

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # a new 0600 temporary file (mkstemp) in the folder, then os.replace; a symlink at PATH is refused
    atomic_write(path, data + b"\n")
    return path


class NotAFile(MergeError):
    """A report path that is a FIFO, a device or a socket: skipped, never read."""


def read_report(path: str):
    """A validated report. Only a regular file under ``MAX_REPORT_BYTES`` is read (never blocking on
    a FIFO: ``NotAFile``); anything else is a MergeError with a message for people."""
    import stat

    from ..io import SourceError, read_regular_file

    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode) and st.st_size > MAX_REPORT_BYTES:
            raise MergeError(f"{path}: larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB; not a report")
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            raise NotAFile(f"{path}: not a regular file (a FIFO, socket or device is never read); skipped")
        raw, _ = read_regular_file(path, "report")  # O_NONBLOCK, and regular files only
        if len(raw) > MAX_REPORT_BYTES:
            raise MergeError(f"{path}: larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB; not a report")
        data = json.loads(raw.decode("utf-8"))
    except MergeError:
        raise
    except IsADirectoryError:
        raise MergeError(f"{path}: is a directory") from None
    except SourceError as e:
        raise NotAFile(f"{e}; skipped") from None
    except OSError as e:
        raise MergeError(f"{path}: {e.strerror or e}") from None
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise MergeError(f"{path}: not JSON ({str(e)[:200]})") from None
    if isinstance(data, dict) and "ddp_lint_report" not in data or not isinstance(data, (dict, list)):
        raise MergeError(f"{path}: not a ddp-lint report (write one with `ddp-lint run --report PATH` or "
                         "`--output-format json`)")
    validate_report(data, path)
    if isinstance(data, list):
        return {"findings": data, "ranks": [], "notes": []}
    return data


def merge(paths: list[str]):
    """Merge per-node reports into one api.RunResult (global ranks). Each report is validated
    (``read_report``); one that is not a regular file is skipped with a note."""
    if not paths:
        raise MergeError("no reports given")
    reports, skipped = [], []
    for p in paths:
        try:
            reports.append((p, read_report(p)))
        except NotAFile as e:
            skipped.append(str(e))
    if not reports:
        raise MergeError("; ".join(skipped) + "; no report left to merge")
    try:
        res = _merge(reports)
    except MergeError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError) as e:
        # the schema was checked; what is left is an event whose fields a rank never writes
        raise MergeError(f"the reports' rank records are not what `ddp-lint run --report` writes "
                         f"({type(e).__name__}: {str(e)[:200]})") from None
    res.notes[:0] = skipped
    return res


def _merge(reports):
    from .api import EXIT_CLEAN, EXIT_FINDINGS, RankSummary, RunResult
    from .findings import analyse
    from .launcher import SHIM_PATH
    from .nodes import rank_places
    from .states import UserCode

    res = RunResult()
    res.multinode = "merged"
    first = next((d for _, d in reports if d.get("script")), {})
    res.script = first.get("script", "")
    res.emulated = any(d.get("emulated") for _, d in reports)
    res.timed_out = any(d.get("timed_out") for _, d in reports)
    res.timeout = max((float(d.get("timeout") or 0) for _, d in reports), default=0.0)
    res.duration = max((float(d.get("duration") or 0) for _, d in reports), default=0.0)
    for _, d in reports:
        for n in d.get("notes") or []:
            if n not in res.notes:
                res.notes.append(n)
    scripts = {d.get("script") for _, d in reports if d.get("script")}
    if len(scripts) > 1:
        res.notes.append(f"the reports are of different scripts: {', '.join(sorted(scripts))}")
    if all(isinstance(d.get("raw"), dict) and d["raw"].get("ranks") for _, d in reports):
        ranks: dict[int, RankData] = {}
        roots, libs = [], []
        for p, d in reports:
            raw = d["raw"]
            for r, rd in load_ranks(raw).items():
                if r in ranks:
                    res.notes.append(f"rank {r} is in more than one report; {os.path.basename(p)}'s is left out")
                    continue
                ranks[r] = rd
            roots += [x for x in raw.get("roots") or [] if x not in roots]
            libs += [x for x in raw.get("lib_dirs") or [] if x not in libs]
        world = max((_int((rd.first("start") or {}).get("world_size")) or 0 for rd in ranks.values()), default=0)
        if world - len(ranks) > MAX_MISSING_RANKS:
            raise MergeError(f"the reports say the job had {world} ranks but hold the records of {len(ranks)}: "
                             f"merge the reports of every node (at most {MAX_MISSING_RANKS} ranks may be missing)")
        missing = [r for r in range(world) if r not in ranks]
        for r in missing:
            ranks[r] = RankData(r)  # never started, or its node's report is missing
        if missing:
            res.notes.append(f"no records of rank{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(map(str, missing))}: a node's report is missing, or its ranks never started")
        an = analyse(ranks, user=UserCode(roots, libs, SHIM_PATH), timed_out=res.timed_out, timeout=res.timeout,
                     emulated=res.emulated)
        res.findings = an.findings
        res.notes.extend(n for n in an.notes if n not in res.notes)
        places = rank_places(ranks)
        for r, st in sorted(an.states.items()):
            node, local = places.get(r, (None, None))
            res.ranks.append(RankSummary(
                rank=r, status=st.status, text=st.summary(),
                filename=os.path.abspath(st.site.file) if st.site else None, line=st.site.line if st.site else None,
                op=st.op, exit_code=st.exit_code, node=node, local_rank=local))
        res.nnodes = len({n for n, _ in places.values() if n is not None}) or len(reports)
    else:
        res.notes.append("some reports carry no rank records (`--output-format json` output): their findings "
                         "are merged as they are; write reports with `ddp-lint run --report PATH` for a "
                         "whole-job analysis")
        merged: dict[tuple, Finding] = {}
        for p, d in reports:
            for fj in d.get("findings") or []:
                f = finding_from_json(fj)
                key = (f.code, f.filename, f.range.start.line, f.message)
                if key in merged:
                    g = merged[key]
                    g.ranks = tuple(sorted(set(g.ranks) | set(f.ranks)))
                else:
                    merged[key] = f
            for rj in d.get("ranks") or []:
                if isinstance(rj, dict) and isinstance(rj.get("rank"), int) \
                        and all(rs.rank != rj["rank"] for rs in res.ranks):
                    res.ranks.append(RankSummary(**{k: rj.get(k) for k in (
                        "rank", "status", "text", "filename", "line", "op", "exit_code", "node", "local_rank")}))
        res.findings = sorted(merged.values(), key=lambda f: (f.filename, f.range.start.line, f.code))
        res.ranks.sort(key=lambda rs: rs.rank)
        res.nnodes = len(reports)
    res.nproc = len(res.ranks)
    res.exit_code = EXIT_FINDINGS if res.findings else EXIT_CLEAN
    return res


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
