"""Turn what the ranks left behind (logs, stacks) into findings on the user's lines.

Input: the per-rank records of analysis/runtime/launcher.py (events written by shim.py and the
faulthandler dumps). Output: DDP901-DDP904 findings (plus the emulation's DDP905), merged across
ranks, root cause first, and a per-rank summary.
"""
from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field

from ..model import Finding, Range, Related, Severity

NAMES = {
    "DDP901": "rank-exception",
    "DDP902": "collective-mismatch",
    "DDP903": "hang",
    "DDP904": "rank-exited-early",
    "DDP905": "nccl-device-clash",
}
EMULATED_SUFFIX = " (emulated on CPU)"
DOCS_URL = "https://github.com/ddp-lint/ddp-lint/blob/main/docs/rules/{}.md"


# -- frames and stacks -------------------------------------------------------------------------
@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str = ""
    end_line: int | None = None
    col: int | None = None  # 0-based, as Python's traceback reports it
    end_col: int | None = None

    @staticmethod
    def of(d: dict | None) -> "Frame | None":
        if not d or not d.get("file") or not isinstance(d.get("line"), int):
            return None
        return Frame(d["file"], d["line"], d.get("function") or "", d.get("end_line"), d.get("col"), d.get("end_col"))


_THREAD_RE = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME_RE = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_faulthandler(text: str) -> tuple[dict[int, list[Frame]], int | None]:
    """{thread id: frames, innermost first} and the id of the thread that took the signal."""
    threads: dict[int, list[Frame]] = {}
    current = None
    cur: list[Frame] | None = None
    for line in text.splitlines():
        m = _THREAD_RE.match(line)
        if m:
            tid = int(m.group(2), 16)
            cur = threads[tid] = []  # a later dump of the same thread replaces an earlier one
            if m.group(1) == "Current thread":
                current = tid
            continue
        m = _FRAME_RE.match(line)
        if m and cur is not None:
            cur.append(Frame(m.group(1), int(m.group(2)), m.group(3).strip()))
        elif not line.strip():
            cur = None
    return threads, current


# -- what counts as the user's code ------------------------------------------------------------
class UserCode:
    def __init__(self, roots: list[str], lib_dirs: list[str], shim: str):
        self.roots = [os.path.join(os.path.abspath(r), "") for r in roots if r]
        self.libs = [os.path.join(os.path.abspath(p), "") for p in lib_dirs if p]
        self.shim = os.path.abspath(shim)

    def is_library(self, f: str) -> bool:
        if not f or f.startswith("<") or os.path.abspath(f) == self.shim:
            return True
        if "site-packages" in f or "dist-packages" in f:
            return True
        # the user's folder may hold a virtualenv: a library dir inside a root is still a library
        return any(f.startswith(p) for p in self.libs)

    def is_user(self, f: str) -> bool:
        if self.is_library(f):
            return False
        return any(f.startswith(r) for r in self.roots)

    def innermost(self, frames_innermost_first: list[Frame]) -> Frame | None:
        for fr in frames_innermost_first:
            if self.is_user(fr.file):
                return fr
        for fr in frames_innermost_first:
            if not self.is_library(fr.file):
                return fr
        return None

    def is_torch_distributed(self, f: str) -> bool:
        return "torch" in f and os.sep + "distributed" + os.sep in f


# -- per-rank state ----------------------------------------------------------------------------
@dataclass
class RankState:
    rank: int
    started: bool = False
    pid: int | None = None
    status: str = "not-started"  # ok exception exited crashed hung terminated killed not-started
    exit_code: int | None = None
    via: str | None = None  # for exited: return | SystemExit | os._exit
    site: Frame | None = None  # where the rank ended or is
    op: str | None = None  # collective the rank is in (unfinished or raised) at the end
    op_site: Frame | None = None
    op_raised: str | None = None
    exception: dict | None = None
    fatal: str | None = None
    t: float | None = None
    init: dict | None = None
    emulated: bool = False
    collectives: int = 0
    consequential: bool = False  # its error came from a peer going away / a timeout
    notes: list[str] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Blocked in a collective when the run ended (hung, torn down, or failed because of a peer)."""
        return self.op is not None and (self.status in ("hung", "terminated") or self.consequential)

    def summary(self) -> str:
        loc = _short(self.site) if self.site else "?"
        if self.status == "ok":
            return f"rank {self.rank}: finished cleanly ({self.collectives} collectives)"
        if self.status == "exception" and self.consequential:
            ex = self.exception or {}
            return (f"rank {self.rank}: failed in {self.op}() at {loc} after a peer went away or timed out "
                    f"({ex.get('type', 'exception')})")
        if self.status == "exception":
            ex = self.exception or {}
            return f"rank {self.rank}: {ex.get('type', 'exception')} at {loc}" + (f" in {self.op}()" if self.op else "")
        if self.status == "exited":
            return f"rank {self.rank}: exited with status {self.exit_code} ({self.via}) at {loc}"
        if self.status == "crashed":
            return f"rank {self.rank}: crashed ({self.fatal or 'fatal error'}) at {loc}"
        if self.status == "hung":
            where = f"blocked in {self.op}()" if self.op else "still running (not in a collective)"
            return f"rank {self.rank}: {where} at {loc}"
        if self.status == "terminated":
            where = f" while in {self.op}()" if self.op else ""
            return f"rank {self.rank}: stopped by torchrun after another rank failed{where}, at {loc}"
        if self.status == "killed":
            return f"rank {self.rank}: ended without a Python traceback (exit code {self.exit_code}), last seen at {loc}"
        return f"rank {self.rank}: never started"


def _short(fr: Frame | None) -> str:
    if fr is None:
        return "?"
    return f"{os.path.basename(fr.file)}:{fr.line}"


_PEER_RE = re.compile(
    r"connection (closed|reset|refused)|broken pipe|timed out|timeout|aborted|"
    r"peer|socket|ProcessGroup\w* is (shut ?down|aborted)|NCCL communicator was aborted|"
    r"wait timeout|recvBytes|sendBytes|Gloo connectFullMesh failed|failed to pass monitoredBarrier|"
    r"has exited|closed",
    re.I,
)
_TIMEOUT_RE = re.compile(r"timed out|timeout|failed to pass monitoredBarrier", re.I)
_MISMATCH_RE = re.compile(r"Detected mismatch between collectives", re.I)
_EXITCODE_RE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def build_states(ranks: dict, user: UserCode, output: str = "") -> dict[int, RankState]:
    exitcodes = {int(r): int(c) for r, c in _EXITCODE_RE.findall(output or "")}
    states: dict[int, RankState] = {}
    for r, rd in sorted(ranks.items()):
        st = RankState(r)
        states[r] = st
        # the reader keeps the collectives still running and those that raised; the ones that
        # returned are only counted (launcher.LogReader)
        calls: dict[int, dict] = {**{s: c for s, (c, _) in rd.raised.items()}, **rd.pending}
        raised: dict[int, str] = {s: e for s, (_, e) in rd.raised.items()}
        for ev in rd.events:
            k = ev.get("kind")
            if k == "start":
                st.started = True
                st.pid = ev.get("pid")
                st.emulated = bool(ev.get("emulate"))
            elif k == "init" and st.init is None:
                st.init = ev
            elif k == "exception":
                st.exception = ev
                st.t = ev.get("t")
            elif k == "exit":
                st.exit_code = ev.get("code")
                st.via = ev.get("via")
                st.t = ev.get("t")
                st._exit = ev  # type: ignore[attr-defined]
            elif k == "note" and ev.get("message"):
                st.notes.append(str(ev["message"]))
        st.collectives = rd.completed
        pending = list(calls.values())
        last_pending = max(pending, key=lambda c: c.get("seq", 0)) if pending else None
        if last_pending is not None:
            st.op = last_pending.get("op")
            st.op_site = Frame.of(last_pending)
            st.op_raised = raised.get(last_pending.get("seq"))
        main_tid = (rd.first("start") or {}).get("main_thread")

        def stack_site(text: str, main_tid=main_tid, rd=rd) -> tuple[Frame | None, list[Frame]]:
            threads, current = parse_faulthandler(text)
            frames = threads.get(main_tid) if main_tid in threads else threads.get(current, [])
            site = user.innermost(frames or [])
            if site is None or not user.is_user(site.file):
                # faulthandler stops at 100 frames: the full Python stack, when the rank gave one
                py = _py_main_stack(rd.stack_py, main_tid)
                if py:
                    psite = user.innermost(py)
                    if psite is not None and (site is None or user.is_user(psite.file)):
                        return psite, py
            return site, frames or []

        if st.exception is not None:
            st.status = "exception"
            st.exit_code = st.exception.get("exit_code", 1)
            frames = [Frame.of(f) for f in st.exception.get("frames") or []]
            st.site = user.innermost([f for f in reversed(frames) if f is not None])
            msg = st.exception.get("message") or ""
            if st.op_raised is not None and not _MISMATCH_RE.search(msg) and _PEER_RE.search(msg) \
                    and not _is_emulated(st.exception):
                st.consequential = True
        elif getattr(st, "_exit", None) is not None:
            st.status = "exited" if st.via != "return" or st.exit_code else "ok"
            frames = [Frame.of(f) for f in st._exit.get("frames") or []]  # type: ignore[attr-defined]
            st.site = user.innermost([f for f in reversed(frames) if f is not None])
        elif rd.stack_fatal.strip():
            st.status = "crashed"
            first = rd.stack_fatal.strip().splitlines()[0]
            st.fatal = first.replace("Fatal Python error: ", "").strip() or "fatal error"
            st.site, _ = stack_site(rd.stack_fatal)
            st.exit_code = exitcodes.get(r)
        elif rd.hung and rd.stack_usr1.strip():
            st.status = "hung"
            st.site, frames = stack_site(rd.stack_usr1)
            _op_from_stack(st, frames, user)
        elif rd.stack_term.strip():
            st.status = "terminated"
            st.site, frames = stack_site(rd.stack_term)
            _op_from_stack(st, frames, user)
        elif rd.hung:
            st.status = "hung"  # asked for its stack but it did not answer (stuck in C, signals blocked)
            st.site = st.op_site
        elif st.started:
            st.status = "killed"
            st.exit_code = exitcodes.get(r)
            st.site = st.op_site
        if st.site is None and st.op_site is not None:
            st.site = st.op_site
        if st.site is None and st.status == "hung":
            # no stack in time and no collective in flight in the log (past the log budget, quick
            # collectives are only counted): where its latest collective was called is the best
            # there is; a hung rank is never left out of the findings
            st.site = Frame.of(rd.last_site)
    return states


def _py_main_stack(data, main_tid) -> list[Frame]:
    """The main thread's frames from the shim's SIGUSR2 dump, innermost first."""
    if not isinstance(data, dict):
        return []
    threads = data.get("threads") or {}
    tid = main_tid if main_tid is not None else data.get("main_thread")
    frames = threads.get(str(tid)) or []
    out = [Frame.of(f) for f in frames if isinstance(f, dict)]
    return [f for f in reversed(out) if f is not None]


def _op_from_stack(st: RankState, frames: list[Frame], user: UserCode) -> None:
    """A rank the log shows outside any collective may still wait inside torch.distributed
    (DDP's constructor, a collective that is not wrapped): read that from its stack. A rank
    that is busy (its innermost frame is not torch.distributed) is not waiting."""
    if st.op is not None and st.op_site is not None and st.site is not None and st.op_site.line != st.site.line:
        # the log's unfinished call is not where the rank is now (an async op): trust the stack
        st.op = None
        st.op_site = None
    if st.op is not None or not frames or st.site is None:
        return
    try:
        idx = frames.index(st.site)
    except ValueError:
        return
    if idx == 0:
        return
    inner, callee = frames[0], frames[idx - 1]
    if not (user.is_torch_distributed(inner.file) or _is_ddp_file(inner.file)):
        return
    # the function the user called, not the decorators around it: the shim's recording wrapper (a
    # quick collective past the log budget is not in the log, so its name comes from here) and
    # torch's own (c10d_logger's ``wrapper``)
    j = idx - 1
    while j > 0 and (os.path.abspath(callee.file) == user.shim or callee.function in ("wrapper", "_fn", "inner")):
        j -= 1
        callee = frames[j]
    st.op = "DistributedDataParallel" if _is_ddp_file(callee.file) else callee.function
    st.op_site = st.site


def _is_ddp_file(f: str) -> bool:
    return f.replace(os.sep, "/").endswith("torch/nn/parallel/distributed.py")


def _is_emulated(exc: dict | None) -> bool:
    if not exc:
        return False
    return exc.get("type") == "EmulatedNcclError" or str(exc.get("qualname", "")).endswith(".EmulatedNcclError") \
        or "code" in (exc.get("extra") or {}) and str((exc.get("extra") or {}).get("code", "")).startswith("DDP9")


# -- messages ----------------------------------------------------------------------------------
def condense(exc_type: str, message: str, limit: int = 300) -> str:
    """One line: ``Type: reason``. NCCL errors are reduced to their reason."""
    msg = (message or "").strip()
    m = re.search(r"NCCL error in: [^,\n]*,\s*([^\n(]+?)\s*(\(run with NCCL_DEBUG[^)]*\))?,?\s*(NCCL version [^\n]*)?(\n|$)", msg)
    if m:
        reason = m.group(1).strip().rstrip(",")
        last = re.search(r"Last error:\s*\n?\s*(.+)", msg)
        if last:
            reason = f"{reason}: {last.group(1).strip()}"
        msg = f"NCCL {reason}"
    else:
        if _MISMATCH_RE.search(msg):
            msg = msg.split(".")[0]
        lines = [ln for ln in msg.splitlines() if ln.strip()]
        msg = lines[0].strip() if lines else ""
        msg = re.sub(r"\[[^\]]*\.(cpp|cc|h|hpp):\d+\]\s*", "", msg)  # C++ source locations
    if len(msg) > limit:
        msg = msg[: limit - 1] + "…"
    return f"{exc_type}: {msg}" if msg else exc_type


def rank_list(ranks) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _is_are(ranks) -> str:
    return "is" if len(ranks) == 1 else "are"


def _where(fr: Frame | None, primary: Frame | None) -> str:
    if fr is None:
        return "at an unknown line"
    if primary is not None and fr.file == primary.file:
        return f"at line {fr.line}"
    return f"at {os.path.basename(fr.file)}:{fr.line}"


# -- ranges ------------------------------------------------------------------------------------
class Sources:
    def __init__(self):
        self._cache: dict[str, list[str] | None] = {}

    def lines(self, path: str) -> list[str] | None:
        if path not in self._cache:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    self._cache[path] = f.read().splitlines()
            except OSError:
                self._cache[path] = None
        return self._cache[path]

    def range_of(self, fr: Frame) -> Range:
        line0 = max(fr.line - 1, 0)
        lines = self.lines(fr.file)
        text = lines[line0] if lines is not None and line0 < len(lines) else None
        if text is None:
            return Range.of(line0, 0, line0, 0)
        if fr.col is not None and fr.end_col is not None and (fr.end_line in (None, fr.line)):
            # traceback columns are UTF-8 byte offsets
            b = text.encode("utf-8")
            sc = len(b[: fr.col].decode("utf-8", "ignore"))
            ec = len(b[: fr.end_col].decode("utf-8", "ignore"))
            if ec > sc:
                return Range.of(line0, sc, line0, ec)
        start = len(text) - len(text.lstrip())
        end = len(text.rstrip())
        if end <= start:
            return Range.of(line0, 0, line0, len(text))
        return Range.of(line0, start, line0, end)

    def under_rank_guard(self, fr: Frame | None) -> bool:
        if fr is None:
            return False
        lines = self.lines(fr.file)
        if lines is None:
            return False
        try:
            tree = ast.parse("\n".join(lines))
        except (SyntaxError, ValueError, RecursionError):
            return False
        for node in ast.walk(tree):
            if isinstance(node, (ast.If, ast.IfExp)) and node.lineno < fr.line <= (node.end_lineno or 0):
                try:
                    test = ast.unparse(node.test)
                except Exception:
                    continue
                if re.search(r"rank", test, re.I):
                    return True
        return False


# -- findings ----------------------------------------------------------------------------------
@dataclass
class Analysis:
    findings: list[Finding]
    states: dict[int, RankState]
    notes: list[str]


def analyse(ranks: dict, *, user: UserCode, timed_out: bool, timeout: float, emulated: bool,
            output: str = "") -> Analysis:
    states = build_states(ranks, user, output)
    src = Sources()
    items: list[tuple[float, int, Finding]] = []  # (time, order, finding)
    explained: set[int] = set()  # ranks already covered by a finding
    end_t = max((rd.last_t for rd in ranks.values()), default=0.0) + 1.0

    def add(t, f: Finding):
        rule = f.details.get("static_rule") if isinstance(f.details, dict) else None
        if rule and rule not in f.message:
            f.message += f" (see {rule})"
        if emulated or f.emulated:
            f.emulated = True
            if EMULATED_SUFFIX not in f.message:
                f.message += EMULATED_SUFFIX
        items.append((t if t is not None else end_t, len(items), f))

    def finding(code, fr: Frame, message, ranks_, related=(), details=None, severity=Severity.ERROR):
        return Finding(
            code=code, name=NAMES.get(code, code.lower()), message=message, severity=severity,
            range=src.range_of(fr), filename=os.path.abspath(fr.file), related=tuple(related),
            url=DOCS_URL.format(code), ranks=tuple(sorted(ranks_)), details=details or {},
        )

    def rel(fr: Frame, msg: str, ranks_) -> Related:
        return Related(range=src.range_of(fr), message=msg, filename=os.path.abspath(fr.file), ranks=tuple(sorted(ranks_)))

    waiting = {r: s for r, s in states.items() if s.waiting and s.op_site is not None}

    def waiting_related(exclude: set[int], primary: Frame | None):
        groups: dict[tuple, list[int]] = {}
        for r, s in waiting.items():
            if r in exclude:
                continue
            groups.setdefault((s.op, s.op_site), []).append(r)
        out, texts = [], []
        for (op, fr), rs in sorted(groups.items(), key=lambda kv: min(kv[1])):
            out.append(rel(fr, f"{rank_list(rs)} {_is_are(rs)} waiting in {op}() here", rs))
            texts.append(f"{rank_list(rs)} {_is_are(rs)} waiting in {op}() {_where(fr, primary)}")
        return out, texts

    # 1. emulated NCCL errors (DDP905 and whatever code the emulation sets)
    groups: dict[tuple, list[int]] = {}
    for r, s in states.items():
        if s.status == "exception" and _is_emulated(s.exception) and s.site is not None:
            extra = s.exception.get("extra") or {}
            code = str(extra.get("code") or "DDP905")
            msg = s.exception.get("message") or s.exception.get("type")
            msg = msg.strip().splitlines()[0] if msg.strip() else "emulated NCCL error"
            groups.setdefault((code, s.site, msg), []).append(r)
    for (code, fr, msg), rs in groups.items():
        inits: dict[Frame, list[int]] = {}
        for r in rs:
            f0 = Frame.of(states[r].init)
            if f0 is not None:
                inits.setdefault(f0, []).append(r)
        related = [rel(f0, f"process group initialised here ({rank_list(irs)})", irs) for f0, irs in inits.items()]
        details = {"tracebacks": {str(r): states[r].exception.get("text", "") for r in rs},
                   "exception": states[rs[0]].exception.get("type")}
        hint = _hint(code, states[rs[0]], src)
        if hint:
            details["hint"], details["static_rule"] = hint
        extra = states[rs[0]].exception.get("extra") or {}
        details.update({k: v for k, v in extra.items() if k != "code"})
        f = finding(code, fr, msg, rs, related, details)
        f.emulated = True
        add(min(states[r].t or end_t for r in rs), f)
        explained.update(rs)

    # 2. collective mismatch: ranks in different collectives (DETAIL reports it, or the log shows it)
    in_coll = {r: s for r, s in states.items() if r not in explained and s.op is not None and s.op_site is not None
               and (s.waiting or (s.status == "exception" and (
                   _MISMATCH_RE.search((s.exception or {}).get("message") or "") or s.op_raised is not None
                   and _MISMATCH_RE.search(s.op_raised))))}
    detail_mismatch = any(_MISMATCH_RE.search((s.exception or {}).get("message") or "") for s in in_coll.values())
    by_op: dict[tuple, list[int]] = {}
    for r, s in in_coll.items():
        by_op.setdefault((s.op, s.op_site), []).append(r)
    ops = {op for op, _ in by_op}
    if len(ops) > 1 or (detail_mismatch and len(by_op) > 1):
        ordered = sorted(by_op.items(), key=lambda kv: (len(kv[1]), kv[0][1].file, kv[0][1].line))
        (pop, pfr), prs = ordered[0]
        others = ordered[1:]
        parts = [f"{rank_list(prs)} {_is_are(prs)} in {pop}() here"]
        related = []
        for (op, fr), rs in others:
            parts.append(f"{rank_list(rs)} {_is_are(rs)} in {op}() {_where(fr, pfr)}")
            related.append(rel(fr, f"{rank_list(rs)} {_is_are(rs)} in {op}() here", rs))
        all_rs = [r for _, rs in ordered for r in rs]
        hint = None
        if src.under_rank_guard(pfr):
            hint = (f"{pop}() runs under a rank condition, so only some ranks call it: every rank must call "
                    "the same collectives in the same order (static rule DDP104)")
        details = {"ops": {str(r): states[r].op for r in all_rs}, "hint": hint, "static_rule": "DDP104" if hint else None}
        errs = {str(r): (states[r].exception or {}).get("message") for r in all_rs if states[r].exception}
        if errs:
            details["errors"] = errs
        if detail_mismatch:
            details["detected_by"] = "TORCH_DISTRIBUTED_DEBUG=DETAIL"
        t = min((states[r].t for r in all_rs if states[r].t), default=None)
        add(t, finding("DDP902", pfr, ", ".join(parts), all_rs, related, details))
        explained.update(all_rs)

    # 3. rank exceptions and crashes (root causes), each with the ranks that waited for it
    groups = {}
    for r, s in states.items():
        if r in explained or s.site is None:
            continue
        if s.status == "exception" and not s.consequential:
            ex = s.exception or {}
            groups.setdefault(("exc", condense(ex.get("type", "Exception"), ex.get("message", "")), s.site), []).append(r)
        elif s.status == "crashed":
            groups.setdefault(("crash", f"crashed: {s.fatal}", s.site), []).append(r)
        elif s.status == "exited" and s.exit_code not in (0, None) and not waiting:
            msg = f"exited with status {s.exit_code} ({s.via})"
            groups.setdefault(("exit", msg, s.site), []).append(r)
        elif s.status == "killed" and (s.exit_code or 0) != 0:
            sig = ""
            if s.exit_code is not None and s.exit_code < 0:
                try:
                    import signal as _signal

                    sig = f", killed by {_signal.Signals(-s.exit_code).name}"
                except ValueError:
                    pass
            groups.setdefault(("killed", f"ended without a Python traceback (exit code {s.exit_code}{sig})", s.site), []).append(r)
    for (kind, msg, fr), rs in sorted(groups.items(), key=lambda kv: min(states[r].t or end_t for r in kv[1])):
        rel_list, texts = waiting_related(set(rs), fr)
        s0 = states[rs[0]]
        in_op = f" in {s0.op}()" if s0.op and s0.op_site is not None and s0.op_site.line == fr.line else ""
        message = f"{rank_list(rs)}: {msg}{in_op}"
        if texts:
            message += "; " + "; ".join(texts)
        details = {"kind": kind}
        if kind == "exc":
            details["exception"] = (s0.exception or {}).get("type")
            details["tracebacks"] = {str(r): (states[r].exception or {}).get("text", "") for r in rs}
        elif kind == "crash":
            details["stacks"] = {str(r): ranks[r].stack_fatal for r in rs}
        hint = _hint("DDP901", s0, src)
        if hint:
            details["hint"] = hint[0]
            details["static_rule"] = hint[1]
        add(min(states[r].t or end_t for r in rs), finding("DDP901", fr, message, rs, rel_list, details))
        explained.update(rs)
        explained.update(r for r in waiting if r not in rs)

    # 4. a rank exited while others still wait for it
    exited = {r: s for r, s in states.items() if r not in explained and s.status in ("exited", "ok") and s.site is not None}
    if waiting and exited:
        for r, s in sorted(exited.items()):
            rel_list, texts = waiting_related({r}, s.site)
            if not texts:
                continue
            how = {"return": "finished the script", "SystemExit": "called sys.exit", "os._exit": "called os._exit"}.get(s.via or "", "exited")
            where = "here" if s.via != "return" else ("after its last collective here" if s.collectives else "here")
            message = f"{rank_list([r])} {how} (status {s.exit_code}) {where} while " + "; ".join(texts)
            details = {"exit_code": s.exit_code, "via": s.via,
                       "hint": "every rank must take part in every collective; a rank that leaves early "
                               "makes the others wait until the timeout"}
            add(s.t, finding("DDP904", s.site, message, [r], rel_list, details))
            explained.add(r)
        explained.update(waiting)

    # 5. hang: ranks still blocked when the timeout fired
    hung = {r: s for r, s in states.items() if r not in explained and s.status == "hung"}
    hung.update({r: s for r, s in states.items() if r not in explained and s.consequential
                 and _TIMEOUT_RE.search((s.exception or {}).get("message") or "")})
    if hung and (timed_out or any(s.consequential for s in hung.values())):
        locs: dict[tuple, list[int]] = {}
        for r, s in hung.items():
            fr = s.op_site if s.op else s.site
            if fr is None:
                continue
            locs.setdefault((s.op, fr), []).append(r)
        # ranks outside any collective first: they are what the others wait for
        ordered = sorted(locs.items(), key=lambda kv: (kv[0][0] is not None, min(kv[1])))
        for i, ((op, fr), rs) in enumerate(ordered):
            others = [kv for j, kv in enumerate(ordered) if j != i]
            related = []
            texts = []
            for (oop, ofr), ors in others:
                what = f"waits in {oop}()" if oop else "is still running outside any collective"
                if len(ors) > 1:
                    what = what.replace("waits", "wait").replace("is still", "are still")
                related.append(rel(ofr, f"{rank_list(ors)} {what} here", ors))
                texts.append(f"{rank_list(ors)} {what} {_where(ofr, fr)}")
            if op is None:
                fn = fr.function if fr.function and fr.function != "<module>" else None
                message = (f"{rank_list(rs)} {_is_are(rs)} still running here"
                           f"{f' (in {fn}())' if fn else ''}, outside any collective, after the {timeout:g} s timeout")
            else:
                message = f"{rank_list(rs)} {'hangs' if len(rs) == 1 else 'hang'} in {op}() here: no progress within the {timeout:g} s timeout"
            if texts:
                message += "; " + "; ".join(texts)
            details = {"timeout": timeout,
                       "stacks": {str(r): ranks[r].stack_usr1 or ranks[r].stack_term for r in rs},
                       "state": "running" if op is None else "in-collective"}
            if op is not None and not others:
                nccl = any(str((states[r].init or {}).get("backend", "")).lower().find("nccl") >= 0 for r in rs)
                if nccl:
                    details["hint"] = ("all ranks wait in the same collective: ranks that share one GPU (no "
                                       "torch.cuda.set_device(local_rank)) hang like this (static rule DDP001)")
                    details["static_rule"] = "DDP001"
            add(None, finding("DDP903", fr, message, rs, related, details))
        explained.update(hung)

    items.sort(key=lambda x: (x[0], x[1]))
    findings = [f for _, _, f in items]
    notes = []
    for s in states.values():
        for n in s.notes:
            if n not in notes:
                notes.append(n)
    return Analysis(findings, states, notes)


def _hint(code: str, st: RankState, src: Sources):
    """(hint text, static rule code) linking a runtime failure to the static rule that explains it."""
    if code == "DDP905":
        return ("each rank needs its own GPU: call torch.cuda.set_device(local_rank) right after "
                "init_process_group (static rule DDP001)", "DDP001")
    ex = st.exception or {}
    text = (ex.get("text") or "") + " " + (st.op or "")
    if ex.get("type") == "IndexError" and re.search(r"all_gather_object|gather_object|all_gather\b|gather\b", text):
        return ("the output list must have one slot per rank (dist.get_world_size()) (static rule DDP101)", "DDP101")
    if "NCCL" in (ex.get("message") or "") and re.search(r"invalid usage|Duplicate GPU|same GPU", ex.get("message") or "", re.I):
        return ("two ranks use the same GPU: call torch.cuda.set_device(local_rank) (static rule DDP001)", "DDP001")
    return None
