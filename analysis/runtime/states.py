"""Per-rank states: what each rank of a run did and where it ended, from its log and stack dumps.

Input: the per-rank records of analysis/runtime/logs.py (events written by shim.py and the
faulthandler dumps). Output: one :class:`RankState` per rank (status, site, the collective it was
in), which analysis/runtime/findings.py turns into findings.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from .shim_vocab import frame_api


# -- frames and stacks -------------------------------------------------------------------------
@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str = ""
    end_line: int | None = None
    col: int | None = None  # 0-based, as Python's traceback reports it
    end_col: int | None = None
    # the collective the shim's recording wrapper at this frame was called for (its stack dump says)
    op: str | None = field(default=None, compare=False)

    @staticmethod
    def of(d: dict | None) -> "Frame | None":
        if not d or not d.get("file") or not isinstance(d.get("line"), int):
            return None
        op = d.get("op") if isinstance(d.get("op"), str) and d.get("op") else None
        return Frame(d["file"], d["line"], d.get("function") or "", d.get("end_line"), d.get("col"), d.get("end_col"), op)


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
        if not f or f.startswith("<") or self.is_shim(f):
            return True
        if "site-packages" in f or "dist-packages" in f:
            return True
        # the user's folder may hold a virtualenv: a library dir inside a root is still a library
        return any(f.startswith(p) for p in self.libs)

    def is_shim(self, f: str) -> bool:
        """The rank shim and its by-path parts (shim_emulation*.py beside it)."""
        a = os.path.abspath(f)
        return a == self.shim or (os.path.dirname(a) == os.path.dirname(self.shim)
                                  and os.path.basename(a).startswith("shim"))

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
    op_root: tuple | None = None  # (src/dst argument name, value) of the rooted collective it is in
    exception: dict | None = None
    fatal: str | None = None
    t: float | None = None
    init: dict | None = None
    emulated: bool = False
    collectives: int = 0
    consequential: bool = False  # its error came from a peer going away / a timeout
    seen: Frame | None = None  # where the shim's sampler last saw it (a rank killed outright)
    # a rank killed outright: the freshest evidence of where it was ({source: sample|call|return, op,
    # t}) and how long before its death (seconds, when the launcher saw it die)
    last_seen: dict | None = None
    last_seen_age: float | None = None
    argparse: dict | None = None  # argparse's error, when the script's argument parser exited
    worker: Frame | None = None  # a DataLoader worker's raising line (then also the site)
    script: str | None = None
    ddp_states: list[dict] = field(default_factory=list)  # DDP models' fingerprints (shim_checks.py)
    stack: list[Frame] = field(default_factory=list)  # its main thread's frames at the end, innermost first
    groups_made: list[Frame] = field(default_factory=list)  # call sites of its new_group() calls that returned
    notes: list[str] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """Blocked in a collective when the run ended (hung, torn down, or failed because of a peer)."""
        return self.op is not None and (self.status in ("hung", "terminated") or self.consequential)

    def summary(self) -> str:
        loc = _short(self.site) if self.site else "?"
        if self.status == "ok":
            return f"rank {self.rank}: finished cleanly ({count(self.collectives or 0, 'collective')})"
        if self.status == "exception" and self.consequential:
            ex = self.exception or {}
            return (f"rank {self.rank}: failed in {self.op}() at {loc} after a peer went away or timed out "
                    f"({ex.get('type', 'exception')})")
        if self.status == "exception":
            ex = self.exception or {}
            return f"rank {self.rank}: {ex.get('type', 'exception')} at {loc}" + (f" in {op_text(self.op)}" if self.op else "")
        if self.status == "exited":
            return f"rank {self.rank}: exited with status {self.exit_code} ({self.via}) at {loc}"
        if self.status == "crashed":
            return f"rank {self.rank}: crashed ({self.fatal or 'fatal error'}) at {loc}"
        if self.status == "hung":
            where = f"blocked in {op_text(self.op)}" if self.op else "still running (not in a collective)"
            return f"rank {self.rank}: {where} at {loc}"
        if self.status == "terminated":
            where = f" while in {op_text(self.op)}" if self.op else ""
            return f"rank {self.rank}: stopped by torchrun after another rank failed{where}, at {loc}"
        if self.status == "killed":
            age = f" {self.last_seen_age:.1f} s before it died" if self.last_seen_age is not None else ""
            if self.exit_code == -9:
                return f"rank {self.rank}: killed (SIGKILL; likely the OOM killer), last seen at {loc}{age}"
            return (f"rank {self.rank}: ended without a Python traceback (exit code {self.exit_code}), "
                    f"last seen at {loc}{age}")
        return f"rank {self.rank}: never started"


def op_text(op: str | None) -> str:
    """How a collective is named in a message: DDP's own communication says so."""
    if op == "backward":
        return "backward() (DDP's gradient all-reduce)"
    if op == "DistributedDataParallel":
        return "DistributedDataParallel() (its constructor's broadcast)"
    if op == "DistributedDataParallel.forward":
        return "DDP's forward"
    if op.endswith(")"):  # already spelled (a hidden collective: "DTensor.full_tensor() (its all_gather)")
        return op
    return f"{op}()"


def _short(fr: Frame | None) -> str:
    if fr is None:
        return "?"
    return f"{os.path.basename(fr.file)}:{fr.line}"


_PEER_RE = re.compile(
    r"connection (closed|reset|refused)|broken pipe|timed out|timeout|aborted|"
    r"peer|socket|ProcessGroup\w* is (shut ?down|aborted)|NCCL communicator was aborted|"
    r"wait timeout|recvBytes|sendBytes|Gloo connectFullMesh failed|failed to pass monitoredBarrier|"
    r"has exited|closed|received errors while waiting for send/recv|remote process exited|"
    r"process group watchdog",
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
        # returned are only counted (logs.LogReader)
        calls: dict[int, dict] = {**{s: c for s, (c, _) in rd.raised.items()}, **rd.pending}
        raised: dict[int, str] = {s: e for s, (_, e) in rd.raised.items()}
        for ev in rd.events:
            k = ev.get("kind")
            if k == "start":
                st.started = True
                st.pid = ev.get("pid")
                st.emulated = bool(ev.get("emulate"))
                st.script = ev.get("script")
            elif k == "init" and st.init is None:
                st.init = ev
            elif k == "exception":
                st.exception = ev
                st.t = ev.get("t")
            elif k == "exit" and ev.get("code") and isinstance(ev.get("context"), dict) and st.argparse is None \
                    and st.exception is None and ev["context"].get("type") not in ("SystemExit", "KeyboardInterrupt"):
                # a handler caught the error and ended the rank with sys.exit(N): the error is what
                # happened, the exit call only where it ended (kept as ``exit_site``)
                st.exception = {**ev["context"], "exit_code": ev.get("code"),
                                "exit_site": (ev.get("frames") or [None])[-1]}
                st.t = ev.get("t")
            elif k == "exit":
                st.exit_code = ev.get("code")
                st.via = ev.get("via")
                st.t = ev.get("t")
                st._exit = ev  # type: ignore[attr-defined]
            elif k == "argparse":
                st.argparse = ev
            elif k == "ddp_state":
                st.ddp_states.append(ev)
            elif k == "note" and ev.get("message"):
                st.notes.append(str(ev["message"]))
        st.collectives = rd.completed
        st.groups_made = [f for f in (Frame.of(c) for c in getattr(rd, "groups_made", ()) if not c.get("local_sync"))
                          if f is not None]
        pending = list(calls.values())
        last_pending = max(pending, key=lambda c: c.get("seq", 0)) if pending else None
        if last_pending is not None:
            st.op = last_pending.get("op")
            st.op_site = Frame.of(last_pending)
            st.op_raised = raised.get(last_pending.get("seq"))
            if isinstance(last_pending.get("root"), int):
                st.op_root = (str(last_pending.get("root_arg") or "src"), last_pending["root"])
        main_tid = (rd.first("start") or {}).get("main_thread")
        st.seen = Frame.of(rd.seen) if isinstance(rd.seen, dict) else None
        if st.seen is not None and not user.is_user(st.seen.file):
            st.seen = None

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
            st.stack = [f for f in reversed(frames) if f is not None]
            st.site = user.innermost(st.stack)
            msg = st.exception.get("message") or ""
            # raised by torch (a recorded collective, DDP's all-reduce in backward, the DETAIL
            # wrapper's monitoredBarrier), not by the user's own code
            in_lib = st.op_raised is not None or (bool(frames) and frames[-1] is not None
                                                  and not user.is_user(frames[-1].file))
            if in_lib and peer_loss(msg) and not _is_emulated(st.exception):
                st.consequential = True
            elif _peer_error_in_chain(st):
                # the user's code caught the collective's peer error and raised its own from it
                st.consequential = True
            if st.op is None and (st.consequential or _MISMATCH_RE.search(msg)) and st.site is not None:
                op = _op_from_frames([f for f in frames if f is not None], st.site, user)
                if op:
                    st.op, st.op_site = op, st.site
            if st.op is not None and st.site is not None and not st.op.endswith(")"):
                _name_hidden(st, [f for f in frames if f is not None], user)
            worker = _worker_site(msg, user)
            if worker is not None:
                st.worker, st.site = worker, worker
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
            st.stack = list(frames)
            _op_from_stack(st, frames, user)
        elif rd.stack_term.strip():
            st.status = "terminated"
            st.site, frames = stack_site(rd.stack_term)
            st.stack = list(frames)
            _op_from_stack(st, frames, user)
        elif rd.hung:
            st.status = "hung"  # asked for its stack but it did not answer (stuck in C, signals blocked,
            # or not scheduled in time on a loaded machine): its collective, else the sampler's last sample
            st.site = st.op_site or st.seen
        elif st.started:
            st.status = "killed"
            st.exit_code = exitcodes.get(r, st.exit_code)
            st.site = st.seen or st.op_site
            _freshest(st, rd, user)
        if st.site is None and st.op_site is not None:
            st.site = st.op_site
        if st.site is None and st.status == "hung":
            # no stack in time and no collective in flight in the log (past the log budget, quick
            # collectives are only counted): where its latest collective was called is the best
            # there is; a hung rank is never left out of the findings
            st.site = Frame.of(rd.last_site)
    return states


def _freshest(st: RankState, rd, user: UserCode) -> None:
    """A rank killed outright leaves no traceback: place it at the freshest evidence, the collective
    log's last entry or exit, or the sampler's last sample (every 0.2 s), whichever is later."""
    cands = []
    seen = rd.seen if isinstance(rd.seen, dict) else None
    if st.seen is not None and isinstance(seen.get("t"), (int, float)):
        cands.append((float(seen["t"]), st.seen, {"source": "sample"}))
    coll = rd.last_coll if isinstance(getattr(rd, "last_coll", None), dict) else None
    fr = Frame.of(coll)
    if fr is not None and user.is_user(fr.file) and isinstance(coll.get("t"), (int, float)):
        cands.append((float(coll["t"]), fr, {"source": coll.get("phase") or "call", "op": coll.get("op")}))
    if not cands:
        return
    t, fr, info = max(cands, key=lambda c: c[0])
    st.site = fr
    st.last_seen = {**info, "t": t}
    gone = getattr(rd, "gone_at", None)
    if isinstance(gone, (int, float)) and gone >= t - 0.05:
        st.last_seen_age = max(0.0, gone - t)


def peer_loss(msg: str) -> bool:
    """A torch error that says a peer went away or timed out (a closed connection, Gloo's
    connectFullMesh, a watchdog timeout), not a mismatch of collectives: the consequence of what
    another rank did, when another rank's exit or exception explains it."""
    return bool(_PEER_RE.search(msg or "")) and not _MISMATCH_RE.search(msg or "")


def _peer_error_in_chain(st: RankState) -> bool:
    """The collective the rank was in raised a peer-gone/timeout error, and the exception the rank
    ended with was raised while handling it (its traceback text chains it)."""
    err = (st.op_raised or "").strip()
    if not err or _MISMATCH_RE.search(err) or not _PEER_RE.search(err):
        return False
    text = (st.exception or {}).get("text") or ""
    first = err.splitlines()[0][:200]
    return first in text and ("direct cause of the following exception" in text
                              or "During handling of the above exception" in text)


_ORIG_TB_FRAME_RE = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$', re.M)


def _worker_site(msg: str, user: UserCode) -> Frame | None:
    """A DataLoader worker's exception is re-raised in the rank with the worker's traceback as text
    ("Caught KeyError in DataLoader worker process 0. Original Traceback ..."): its innermost user
    line is where the problem is, not the ``for batch in loader`` line."""
    if "Original Traceback (most recent call last)" not in msg:
        return None
    tail = msg.split("Original Traceback (most recent call last)", 1)[1]
    frames = [Frame(m.group(1), int(m.group(2)), m.group(3).strip()) for m in _ORIG_TB_FRAME_RE.finditer(tail)]
    for fr in reversed(frames):
        if user.is_user(fr.file):
            return fr
    return None


def _name_hidden(st, frames_outer_first: list[Frame], user) -> None:
    """The collective a rank raised in was made by an API of the modern stack (DCP's
    ``gather_object``, FSDP2's pre-forward all-gather): name that API, the way the user called it."""
    try:
        below = frames_outer_first[frames_outer_first.index(st.site) + 1:]
    except ValueError:
        return
    api = _hidden_api(list(reversed(below)), user)
    if api is not None:
        st.op = f"{api.key}() (its {api.runs[0] if st.op.startswith('_') and api.runs else st.op})"


def _op_from_frames(frames_outer_first: list[Frame], site: Frame, user: UserCode) -> str | None:
    """The torch call a rank was in when it raised from library code below ``site``: DDP's gradient
    all-reduce (``backward``), DDP's forward or constructor, or a torch.distributed function."""
    try:
        below = frames_outer_first[frames_outer_first.index(site) + 1:]
    except ValueError:
        return None
    if not below:
        return None
    for fr in below:
        if _is_backward(fr):
            return "backward"
        if _is_ddp_file(fr.file):
            return "DistributedDataParallel" if fr.function == "__init__" else "DistributedDataParallel.forward"
        if user.is_torch_distributed(fr.file) and fr.function not in ("wrapper", "_fn", "inner") \
                and not user.is_shim(fr.file):
            return fr.function
    return None


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
    if not frames or st.site is None:
        return
    try:
        idx = frames.index(st.site)
    except ValueError:
        return
    if idx == 0:
        return
    if st.op is not None:
        # a recorded collective that an API of the modern stack made (``dcp.save``'s
        # ``gather_object``): name the API the user called too
        api = _hidden_api(frames[:idx], user) if not st.op.endswith(")") else None
        if api is not None:
            st.op = f"{api.key}() (its {st.op})"
        return
    inner, callee = frames[0], frames[idx - 1]
    if any(_is_backward(fr) for fr in frames[:idx]):
        # DDP's gradient all-reduce runs inside backward(), in C++: the Python stack ends in autograd
        st.op, st.op_site = "backward", st.site
        return
    api = _hidden_api(frames[:idx], user)
    if api is not None:
        # a collective hidden in an API of the modern stack (DTensor, FSDP2, DCP, the state-dict
        # helpers): the rank waits in a functional collective (``wait_tensor``) or a c10d call
        # under it; name the API the user called and the collective it runs (runtime/shim_vocab.py)
        st.op, st.op_site = f"{api.key}() (its {api.runs[0] if api.runs else 'collective'})", st.site
        return
    # the collective the shim recorded this call for: a rank sampled in the recording wrapper or in
    # torch's decorator around the collective (before it entered it, or on its way out) is in that
    # call, although no frame below names it
    recorded = next((fr.op for fr in frames[:idx] if fr.op and user.is_shim(fr.file)), None)
    if not (user.is_torch_distributed(inner.file) or _is_ddp_file(inner.file)):
        if recorded is not None and user.is_shim(inner.file):
            st.op, st.op_site = recorded, st.site
        return
    # the function the user called, not the decorators around it: the shim's recording wrapper (a
    # quick collective past the log budget is not in the log, so its name comes from here) and
    # torch's own (c10d_logger's ``wrapper``)
    j = idx - 1
    while j > 0 and (user.is_shim(callee.file) or callee.function in _DECORATORS):
        j -= 1
        callee = frames[j]
    if recorded is not None and (user.is_shim(callee.file) or callee.function in _DECORATORS):
        st.op = recorded
    else:
        st.op = "DistributedDataParallel" if _is_ddp_file(callee.file) else callee.function
    st.op_site = st.site


_DECORATORS = ("wrapper", "_fn", "inner")


def _hidden_api(frames: list[Frame], user):
    """The outermost frame (nearest the user's line) between the user and the innermost frame
    that is a vocabulary API, when the rank is inside torch.distributed (a functional
    collective's ``wait_tensor`` included) under it."""
    if not any(user.is_torch_distributed(fr.file) for fr in frames):
        return None
    for fr in reversed(frames):
        got = frame_api(fr.file, fr.function)
        if got is not None:
            return got
    return None


def _is_backward(fr: Frame) -> bool:
    f = fr.file.replace(os.sep, "/")
    return (f.endswith("torch/_tensor.py") and fr.function == "backward") or f.endswith("torch/autograd/__init__.py") \
        or (f.endswith("torch/autograd/graph.py") and fr.function == "_engine_run_backward")


def _is_ddp_file(f: str) -> bool:
    return f.replace(os.sep, "/").endswith("torch/nn/parallel/distributed.py")


def _is_emulated(exc: dict | None) -> bool:
    if not exc:
        return False
    return exc.get("type") == "EmulatedNcclError" or str(exc.get("qualname", "")).endswith(".EmulatedNcclError") \
        or "code" in (exc.get("extra") or {}) and str((exc.get("extra") or {}).get("code", "")).startswith("DDP9")


def count(n: int, word: str, plural: str | None = None) -> str:
    """``1 rank`` / ``2 ranks``: a number with its noun, singular for 1."""
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def rank_list(ranks) -> str:
    """``rank 3`` / ``ranks 0, 2``: the ranks a runtime message names."""
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)
