"""The per-rank records of one run: the JSON-lines logs the shim writes (rank-<RANK>.jsonl, see
shim.py's header) and its stack dumps, read incrementally while the run goes on."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field


# -- rank logs ---------------------------------------------------------------------------------
MAX_GROUPS_MADE = 256  # new_group() calls remembered per rank
@dataclass
class RankData:
    rank: int
    events: list[dict] = field(default_factory=list)
    stack_usr1: str = ""
    stack_term: str = ""
    stack_fatal: str = ""
    stack_py: dict | None = None  # full-depth Python stacks (SIGUSR2), when the rank could answer
    seen: dict | None = None  # where the shim's sampler last saw the main thread (seen-<RANK>)
    hung: bool = False  # alive when the run was stopped (asked for its stack)
    pending: dict = field(default_factory=dict)  # seq -> call event of collectives not yet returned
    raised: dict = field(default_factory=dict)  # seq -> (call event, error) of collectives that raised
    last_site: dict | None = None  # call site of the latest collective seen (logged or "quiet")
    last_t: float = 0.0  # time of the latest record
    # the freshest collective evidence: {file, line, function, op, t, phase: call|return} of the latest
    # collective entered or returned from (a rank killed outright is placed at this or ``seen``)
    last_coll: dict | None = None
    gone_at: float | None = None  # wall time the launcher first saw the rank's process gone
    end_event: dict | None = None  # the rank's exception or exit record
    dropped: int = 0  # records not kept (past MAX_EVENTS)
    # call records of the new_group() calls that returned, in order (capped): a rank that made one
    # more than its peers, under a rank condition, pairs the next ones wrongly (findings.py)
    groups_made: list = field(default_factory=list)
    _logged_returns: int = 0
    _quiet: int = 0
    _kinds: set = field(default_factory=set)
    _offset: int = 0
    _partial: bytes = b""

    @property
    def completed(self) -> int:
        """Collectives that returned: the logged ones plus the shim's "quiet" count."""
        return self._logged_returns + self._quiet

    def first(self, kind: str) -> dict | None:
        return next((e for e in self.events if e.get("kind") == kind), None)

    def last(self, kind: str) -> dict | None:
        return next((e for e in reversed(self.events) if e.get("kind") == kind), None)

    @property
    def pid(self) -> int | None:
        s = self.first("start")
        return s.get("pid") if s else None

    @property
    def ended(self) -> bool:
        return self.end_event is not None


class LogReader:
    """Reads the per-rank logs incrementally while the run is alive. Memory stays bounded however
    long the run: a collective that returned is only counted, and ``events`` keeps every other
    record up to MAX_EVENTS (then the first of each kind and the rank's last word)."""

    MAX_EVENTS = 5000
    MAX_RAISED = 256

    def __init__(self, log_dir: str, nproc: int):
        self.dir = log_dir
        self.ranks = {r: RankData(r) for r in range(nproc)}
        self.discover = False  # a self-spawning script: ranks are found as their logs appear

    def all_ready(self) -> bool:
        """Every rank runs the script (its ``ready`` record is in). A self-spawning script's ranks
        are known only once init_process_group named them: none yet is still start-up."""
        if self.discover and not self.ranks:
            return False
        return all(rd.first("ready") is not None for rd in self.ranks.values())

    def poll(self) -> list[dict]:
        new = []
        if self.discover:
            try:
                for name in os.listdir(self.dir):
                    if name.startswith("rank-") and name.endswith(".jsonl") and name[5:-6].isdigit():
                        self.ranks.setdefault(int(name[5:-6]), RankData(int(name[5:-6])))
            except OSError:
                pass
        for r, rd in list(self.ranks.items()):
            path = os.path.join(self.dir, f"rank-{r}.jsonl")
            try:
                with open(path, "rb") as f:
                    f.seek(rd._offset)
                    data = f.read()
            except OSError:
                continue
            if not data:
                continue
            rd._offset += len(data)
            data = rd._partial + data
            lines = data.split(b"\n")
            rd._partial = lines.pop()
            for line in lines:
                if not line.strip():
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if isinstance(ev, dict):
                    self._take(rd, ev)
                    new.append(ev)
        return new

    def _take(self, rd: RankData, ev: dict) -> None:
        k = ev.get("kind")
        t = ev.get("t")
        if isinstance(t, (int, float)) and t > rd.last_t:
            rd.last_t = float(t)
        if k == "call":
            rd.pending[ev.get("seq")] = ev
            rd.last_site = ev
            _evidence(rd, ev, t, "call")
            return
        if k == "return":
            call = rd.pending.pop(ev.get("seq"), None)
            if call is not None:
                rd._logged_returns += 1
                _evidence(rd, call, t, "return")
                if call.get("op") == "new_group" and len(rd.groups_made) < MAX_GROUPS_MADE:
                    rd.groups_made.append(call)
            return
        if k == "raise":
            call = rd.pending.pop(ev.get("seq"), None)
            if call is not None:
                rd.raised[ev.get("seq")] = (call, ev.get("error") or "")
                while len(rd.raised) > self.MAX_RAISED:
                    rd.raised.pop(next(iter(rd.raised)))
            return
        if k == "quiet":
            n = ev.get("completed")
            if isinstance(n, int) and n > rd._quiet:
                rd._quiet = n
            if isinstance(ev.get("site"), dict):
                rd.last_site = ev["site"]
            return
        if k in ("exception", "exit") and rd.end_event is None:
            rd.end_event = ev
        if len(rd.events) >= self.MAX_EVENTS and k not in ("exception", "exit") and k in rd._kinds:
            rd.dropped += 1
            return
        rd._kinds.add(k)
        rd.events.append(ev)

    def note_gone(self, alive) -> None:
        """Remember when each started, unfinished rank's process was first seen gone (``alive(pid)``
        false): how long before its death a rank killed outright was last seen."""
        for rd in self.ranks.values():
            if rd.gone_at is None and rd.end_event is None and rd.pid is not None and not alive(rd.pid):
                rd.gone_at = time.time()

    def read_stacks(self) -> None:
        for r, rd in self.ranks.items():
            for kind in ("usr1", "term", "fatal"):
                try:
                    with open(os.path.join(self.dir, f"stack-{r}.{kind}"), "rb") as f:
                        txt = f.read(4 * 1024 * 1024).decode("utf-8", "replace")
                except OSError:
                    txt = ""
                setattr(rd, f"stack_{kind}", txt)
            try:
                with open(os.path.join(self.dir, f"seen-{r}"), "rb") as f:
                    seen = json.loads(f.read(8192).decode("utf-8", "replace").strip() or "null")
                rd.seen = seen if isinstance(seen, dict) else None
            except (OSError, ValueError):
                rd.seen = None
            try:
                with open(os.path.join(self.dir, f"stack-{r}.py"), "rb") as f:
                    data = json.loads(f.read(16 * 1024 * 1024))
                rd.stack_py = data if isinstance(data, dict) else None
            except (OSError, ValueError):
                rd.stack_py = None


def _evidence(rd: RankData, site: dict, t, phase: str) -> None:
    if isinstance(site, dict) and site.get("file") and isinstance(site.get("line"), int) \
            and isinstance(t, (int, float)) and (rd.last_coll is None or t >= rd.last_coll["t"]):
        rd.last_coll = {"file": site["file"], "line": site["line"], "function": site.get("function") or "",
                        "op": site.get("op"), "t": float(t), "phase": phase}


_STACK_CAP = 256 * 1024  # bytes of each stack dump kept in a per-node report


def raw_ranks(ranks: dict, *, roots, lib_dirs) -> dict:
    """The records of this node's ranks, as JSON-ready data (see :func:`load_ranks`)."""
    out = {}
    for r, rd in ranks.items():
        if rd.first("start") is None:
            continue  # never started here: a merge tells it from the world size
        out[str(r)] = {
            "events": rd.events, "pending": {str(k): v for k, v in rd.pending.items()},
            "raised": {str(k): [c, e] for k, (c, e) in rd.raised.items()},
            "stack_usr1": rd.stack_usr1[-_STACK_CAP:], "stack_term": rd.stack_term[-_STACK_CAP:],
            "stack_fatal": rd.stack_fatal[-_STACK_CAP:], "stack_py": rd.stack_py, "hung": rd.hung,
            "last_site": rd.last_site, "last_t": rd.last_t, "last_coll": rd.last_coll, "gone_at": rd.gone_at,
            "end_event": rd.end_event, "dropped": rd.dropped,
            "logged_returns": rd._logged_returns, "quiet": rd._quiet, "groups_made": rd.groups_made,
        }
    return {"roots": list(roots), "lib_dirs": list(lib_dirs), "ranks": out}
