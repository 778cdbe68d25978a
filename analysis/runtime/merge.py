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

from ..model import Finding, Position, Range, Related, Severity
from .logs import RankData

REPORT_VERSION = 1


class MergeError(ValueError):
    """A report that cannot be read; the message is for people."""


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
        rd.end_event = d.get("end_event")
        rd.dropped = int(d.get("dropped") or 0)
        rd._logged_returns = int(d.get("logged_returns") or 0)
        rd._quiet = int(d.get("quiet") or 0)
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


def read_report(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise MergeError(f"{path}: {e.strerror or e}") from None
    except ValueError as e:
        raise MergeError(f"{path}: not JSON ({e})") from None
    if isinstance(data, list):
        return {"findings": data, "ranks": [], "notes": []}
    if not isinstance(data, dict) or "ddp_lint_report" not in data:
        raise MergeError(f"{path}: not a ddp-lint report (write one with `ddp-lint run --report PATH` or "
                         "`--output-format json`)")
    return data


def merge(paths: list[str]):
    """Merge per-node reports into one api.RunResult (global ranks)."""
    from .api import EXIT_CLEAN, EXIT_FINDINGS, RankSummary, RunResult
    from .findings import analyse
    from .launcher import SHIM_PATH
    from .nodes import rank_places
    from .states import UserCode

    if not paths:
        raise MergeError("no reports given")
    reports = [(p, read_report(p)) for p in paths]
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
