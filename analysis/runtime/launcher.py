"""Launch a script under ``python -m torch.distributed.run`` through the rank shim, watch it, and
leave nothing running afterwards.

Never a shell: the command is an argument vector. Everything runs in its own session; on a timeout
each live rank is asked for its Python stack (SIGUSR1, see shim.py), then the whole tree is killed
with SIGKILL: the process group, every descendant seen while the run was alive, and every process
that carries this run's marker (``DDP_LINT_RUN_ID``) in its environment, even one that moved to a
session of its own or ignores SIGTERM. The private temp folder (mode 0700) is removed afterwards.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SHIM_PATH = str(Path(__file__).resolve().with_name("shim.py"))
OUTPUT_HEAD = 64 * 1024
OUTPUT_TAIL = 64 * 1024


# -- output ------------------------------------------------------------------------------------
class BoundedOutput:
    """Keeps the first and last bytes of a stream and counts the rest; never grows unbounded."""

    def __init__(self, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL):
        self._head_max, self._tail_max = head, tail
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.total = 0
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self.total += len(data)
            room = self._head_max - len(self._head)
            if room > 0:
                self._head += data[:room]
                data = data[room:]
            if not data:
                return
            self._tail.append(data)
            self._tail_len += len(data)
            while self._tail and self._tail_len - len(self._tail[0]) >= self._tail_max:
                self._tail_len -= len(self._tail.popleft())

    def text(self) -> str:
        with self._lock:
            tail = b"".join(self._tail)
            if len(tail) > self._tail_max:
                tail = tail[-self._tail_max:]
            dropped = self.total - len(self._head) - len(tail)
            head = bytes(self._head).decode("utf-8", "replace")
            tail_s = tail.decode("utf-8", "replace")
        if dropped > 0:
            return f"{head}\n[... {dropped} bytes of output omitted ...]\n{tail_s}"
        return head + tail_s

    @property
    def dropped(self) -> int:
        with self._lock:
            kept = len(self._head) + min(self._tail_len, self._tail_max)
            return max(0, self.total - kept)


def _drain(fd: int, buf: BoundedOutput, sink: Callable[[bytes], None] | None) -> None:
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                break
            if not chunk:
                break
            buf.write(chunk)
            if sink is not None:
                try:
                    sink(chunk)
                except Exception:
                    sink = None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


# -- /proc -------------------------------------------------------------------------------------
def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, starttime) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    r = data.rfind(b")")
    fields = data[r + 2:].split()
    try:
        return int(fields[1]), fields[0].decode(), int(fields[19])
    except (IndexError, ValueError):
        return None


def _all_pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return marker in env


def _proc_session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2:].split()[3])
    except (OSError, IndexError, ValueError):
        return None


# Roots (torchrun pids) of the runs this process has in flight; never claimed as orphans.
_ACTIVE_ROOTS: set[int] = set()
_SUBREAPER: bool | None = None


def become_subreaper() -> bool:
    """Make this process the child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a process that
    escapes a run by double-forking (even with ``setsid`` and an empty environment) is then
    re-parented to us instead of init, where the tracker finds and kills it."""
    global _SUBREAPER
    if _SUBREAPER is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _SUBREAPER = libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            _SUBREAPER = False
    return _SUBREAPER


def alive(pid: int) -> bool:
    st = _proc_stat(pid)
    return st is not None and st[1] not in ("Z", "X")


class ProcessTracker:
    """Remembers every descendant of the root (pid + start time, so a reused pid is never hit)."""

    def __init__(self, root: int, run_id: str):
        self.root = root
        self.marker = f"DDP_LINT_RUN_ID={run_id}\0".encode()
        self.known: dict[int, int] = {}
        self._me = os.getpid()
        self._my_session = os.getsid(0)
        st = _proc_stat(root)
        self._root_start = st[2] if st is not None else 0
        self.orphans: set[int] = set()  # escaped processes re-parented to us (see become_subreaper)

    def scan(self) -> None:
        stats = {}
        for pid in _all_pids():
            st = _proc_stat(pid)
            if st is not None:
                stats[pid] = st
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        todo = [self.root]
        # Orphans of this run re-parented to us: children of ours that are no run's root, started
        # after this run did, and not in our own session (a plain subprocess of ours is).
        for c in children.get(self._me, ()):
            if c in _ACTIVE_ROOTS or c in self.known or stats[c][2] < self._root_start:
                continue
            if stats[c][1] in ("Z", "X") or _proc_session(c) in (None, self._my_session):
                continue
            self.known[c] = stats[c][2]
            self.orphans.add(c)
            todo.append(c)
        while todo:
            p = todo.pop()
            for c in children.get(p, ()):
                if c not in self.known and c != self._me:
                    self.known[c] = stats[c][2]
                todo.append(c)

    def marked(self) -> dict[int, int]:
        out = {}
        for pid in _all_pids():
            if pid == self._me:
                continue
            if _has_marker(pid, self.marker):
                st = _proc_stat(pid)
                if st is not None and st[1] not in ("Z", "X"):
                    out[pid] = st[2]
        return out

    def living(self) -> dict[int, int]:
        out = {}
        for pid, start in list(self.known.items()):
            st = _proc_stat(pid)
            if st is not None and st[2] == start and st[1] not in ("Z", "X"):
                out[pid] = start
        out.update(self.marked())
        return out

    def kill_all(self, deadline_s: float = 3.0) -> int:
        """SIGKILL the root's group, every known descendant and every marked process, until none
        is left (or the deadline passes). Returns how many processes it signalled."""
        n = 0
        end = time.monotonic() + deadline_s
        while True:
            self.scan()
            targets = self.living()
            root_st = _proc_stat(self.root)
            if root_st is not None and root_st[1] not in ("Z", "X"):
                targets.setdefault(self.root, root_st[2])
            try:
                os.killpg(self.root, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if not targets:
                self._reap_orphans()
                return n
            for pid, start in targets.items():
                st = _proc_stat(pid)
                if st is None or st[2] != start:
                    continue
                try:
                    os.kill(pid, signal.SIGKILL)
                    n += 1
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > end:
                self._reap_orphans()
                return n
            time.sleep(0.02)

    def _reap_orphans(self) -> None:
        """Orphans became our children: collect their exit status so that no zombie is left."""
        for pid in list(self.orphans):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                self.orphans.discard(pid)
            except OSError:
                pass


# -- rank logs ---------------------------------------------------------------------------------
@dataclass
class RankData:
    rank: int
    events: list[dict] = field(default_factory=list)
    stack_usr1: str = ""
    stack_term: str = ""
    stack_fatal: str = ""
    stack_py: dict | None = None  # full-depth Python stacks (SIGUSR2), when the rank could answer
    hung: bool = False  # alive when the run was stopped (asked for its stack)
    pending: dict = field(default_factory=dict)  # seq -> call event of collectives not yet returned
    raised: dict = field(default_factory=dict)  # seq -> (call event, error) of collectives that raised
    last_site: dict | None = None  # call site of the latest collective seen (logged or "quiet")
    last_t: float = 0.0  # time of the latest record
    end_event: dict | None = None  # the rank's exception or exit record
    dropped: int = 0  # records not kept (past MAX_EVENTS)
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

    def poll(self) -> list[dict]:
        new = []
        for r, rd in self.ranks.items():
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
            return
        if k == "return":
            if rd.pending.pop(ev.get("seq"), None) is not None:
                rd._logged_returns += 1
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
                with open(os.path.join(self.dir, f"stack-{r}.py"), "rb") as f:
                    data = json.loads(f.read(16 * 1024 * 1024))
                rd.stack_py = data if isinstance(data, dict) else None
            except (OSError, ValueError):
                rd.stack_py = None


# -- the launch --------------------------------------------------------------------------------
@dataclass
class LaunchResult:
    argv: list[str]
    ranks: dict[int, RankData]
    returncode: int | None
    timed_out: bool = False
    cancelled: bool = False
    startup_failed: bool = False
    output: str = ""
    output_bytes: int = 0
    output_dropped: int = 0
    duration: float = 0.0
    ranks_up_after: float | None = None
    failure_seen_at: float | None = None
    log_dir: str = ""
    killed: int = 0


Progress = Callable[[str, "int | None"], None]


def user_env(environ) -> dict:
    """The user's environment for the ranks, without what ddp-lint's own process added: the VS
    Code extension puts its bundled libraries (pygls, lsprotocol, ...) on the server's PYTHONPATH
    and lists them in DDP_LINT_BUNDLE_PATHS; the user's script must not see them."""
    env = dict(environ)
    bundle = env.pop("DDP_LINT_BUNDLE_PATHS", None)
    if bundle and env.get("PYTHONPATH"):
        try:
            drop = {os.path.realpath(p) for p in json.loads(bundle) if isinstance(p, str)}
        except (ValueError, TypeError):
            drop = set()
        keep = [p for p in env["PYTHONPATH"].split(os.pathsep) if p and os.path.realpath(p) not in drop]
        if keep:
            env["PYTHONPATH"] = os.pathsep.join(keep)
        else:
            env.pop("PYTHONPATH")
    return env


def launch(
    python: str,
    script: str,
    script_args: list[str] | tuple[str, ...],
    nproc: int,
    timeout: float,
    *,
    cwd: str | None = None,
    env_extra: dict[str, str] | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    sink: Callable[[bytes], None] | None = None,
    startup_timeout: float = 120.0,
    failure_grace: float = 1.0,
) -> LaunchResult:
    """Run ``script`` on ``nproc`` ranks. ``timeout`` counts from the moment every rank runs the
    script (Python and torch started); ``startup_timeout`` bounds the start itself."""
    def report(msg: str, pct: int | None) -> None:
        if progress is not None:
            try:
                progress(msg, pct)
            except Exception:
                pass

    run_id = uuid.uuid4().hex
    tmp = tempfile.mkdtemp(prefix="ddp-lint-run-")  # mode 0700
    os.chmod(tmp, 0o700)
    # torchrun itself, started through the shim so that it dies with us (see shim._as_torchrun)
    argv = [python, SHIM_PATH, "--standalone", "--nproc-per-node", str(nproc),
            "--monitor-interval", "0.1", SHIM_PATH, script, *script_args]
    env = user_env(os.environ)
    env.update({
        "DDP_LINT_LOG_DIR": tmp,
        "DDP_LINT_TIMEOUT": repr(float(timeout)),
        "DDP_LINT_RUN_ID": run_id,
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "PYTHONUNBUFFERED": "1",
        "DDP_LINT_SHIM_ROLE": "torchrun",
        "DDP_LINT_PARENT_PID": str(os.getpid()),
    })
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("PYTHONSTARTUP", None)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(k, None)  # a run started from inside another torchrun is a fresh job
    if env_extra:
        env.update(env_extra)
    result = LaunchResult(argv=argv, ranks={}, returncode=None, log_dir=tmp)
    out = BoundedOutput()
    reader = LogReader(tmp, nproc)
    result.ranks = reader.ranks
    t0 = time.monotonic()
    try:
        if cancel is not None and cancel.is_set():
            result.cancelled = True
            return result
        report("starting", 0)
        become_subreaper()
        r_fd, w_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=w_fd, stderr=w_fd, cwd=cwd, env=env,
                start_new_session=True, close_fds=True,
            )
        except OSError as e:
            os.close(r_fd)
            os.close(w_fd)
            raise LaunchError(f"cannot start {python!r}: {e.strerror or e}") from None
        os.close(w_fd)
        _ACTIVE_ROOTS.add(proc.pid)
        drainer = threading.Thread(target=_drain, args=(r_fd, out, sink), daemon=True, name="ddp-lint-drain")
        drainer.start()
        tracker = ProcessTracker(proc.pid, run_id)
        try:
            _watch(proc, reader, tracker, result, nproc, timeout, startup_timeout, failure_grace, report, cancel, t0)
        finally:
            result.killed = tracker.kill_all()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass
            result.returncode = proc.returncode
            _ACTIVE_ROOTS.discard(proc.pid)
            drainer.join(timeout=2.0)
        if not result.cancelled:
            report("collecting", 95)
        reader.poll()
        reader.read_stacks()
        result.output = out.text()
        result.output_bytes = out.total
        result.output_dropped = out.dropped
        result.duration = time.monotonic() - t0
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class LaunchError(Exception):
    pass


def _watch(proc, reader, tracker, result, nproc, timeout, startup_timeout, failure_grace, report, cancel, t0):
    up_at = None
    deadline = t0 + startup_timeout
    last_scan = 0.0
    last_report = 0.0
    failure_at = None
    while True:
        now = time.monotonic()
        if cancel is not None and cancel.is_set():
            result.cancelled = True
            return
        if proc.poll() is not None:
            return
        for ev in reader.poll():
            k = ev.get("kind")
            if k == "exception" or (k == "exit" and ev.get("code") not in (0, None)):
                if failure_at is None:
                    failure_at = now
                    result.failure_seen_at = now - t0
        if up_at is None and all(rd.first("ready") is not None for rd in reader.ranks.values()):
            up_at = now
            result.ranks_up_after = now - t0
            deadline = now + timeout
            report(f"ranks up ({nproc} ranks)", 20)
        if now - last_scan > 0.25:
            tracker.scan()
            last_scan = now
        if up_at is not None and now - last_report >= 1.0:
            last_report = now
            frac = min(1.0, (now - up_at) / timeout) if timeout > 0 else 1.0
            report(f"waiting ({now - up_at:.0f} s of {timeout:g} s)", 20 + int(70 * frac))
        # a rank failed: the job is doomed; give the others a moment to fail too (or torchrun to
        # tear them down), then ask whoever still runs for its stack and stop everything
        if failure_at is not None and now - failure_at > failure_grace:
            _collect_stacks(reader)
            return
        # a rank left while another waits in a collective that needs it: that can never finish
        if up_at is not None and _doomed_wait(reader, failure_grace):
            if failure_at is None:
                failure_at = now
                result.failure_seen_at = now - t0
            _collect_stacks(reader)
            return
        if now >= deadline:
            result.timed_out = True
            result.startup_failed = up_at is None
            _collect_stacks(reader)
            return
        time.sleep(0.05)


def _doomed_wait(reader: LogReader, grace: float) -> bool:
    """True when a rank has exited and its process is gone while another rank has waited for
    longer than ``grace`` in a collective whose group includes it."""
    gone = set()
    for rd in reader.ranks.values():
        if rd.end_event is not None and rd.pid is not None and not alive(rd.pid):
            gone.add(rd.rank)
    if not gone:
        return False
    now = time.time()
    for rd in reader.ranks.values():
        if rd.rank in gone or rd.end_event is not None:
            continue
        for call in rd.pending.values():
            if call.get("async"):
                continue
            members = (call.get("group") or {}).get("ranks")
            if (members is None or gone.intersection(members)) and now - call.get("t", now) > grace:
                return True
    return False


def _collect_stacks(reader: LogReader, wait: float = 1.5) -> None:
    """SIGUSR1 every live rank (faulthandler in the shim dumps all threads), wait for the dumps."""
    asked = []
    for rd in reader.ranks.values():
        pid = rd.pid
        if pid is None or rd.ended or not alive(pid):
            continue
        try:
            os.kill(pid, signal.SIGUSR1)  # faulthandler: answers even when blocked in C
            rd.hung = True
            asked.append(rd)
        except (ProcessLookupError, PermissionError):
            pass
    if not asked:
        return
    end = time.monotonic() + wait
    sizes: dict[int, int] = {}
    stable_since = None
    while time.monotonic() < end:
        cur = {}
        for rd in asked:
            try:
                cur[rd.rank] = os.path.getsize(os.path.join(reader.dir, f"stack-{rd.rank}.usr1"))
            except OSError:
                cur[rd.rank] = 0
        if all(v > 0 for v in cur.values()):
            if cur == sizes:
                if stable_since is not None and time.monotonic() - stable_since > 0.1:
                    break
            else:
                stable_since = time.monotonic()
        sizes = cur
        time.sleep(0.03)
    # then the full Python stacks (SIGUSR2; sent only now: a SIGUSR2 that arrives together with
    # faulthandler's SIGUSR1 is lost). Only a rank that executes bytecode answers: a short wait
    py_asked = [rd for rd in asked if (rd.first("ready") or {}).get("py_stacks")]
    for rd in py_asked:
        try:
            os.kill(rd.pid, signal.SIGUSR2)
        except (ProcessLookupError, PermissionError, TypeError):
            pass
    end = time.monotonic() + 0.5
    while py_asked and time.monotonic() < end and not all(
            os.path.exists(os.path.join(reader.dir, f"stack-{rd.rank}.py")) for rd in py_asked):
        time.sleep(0.03)
    reader.poll()
