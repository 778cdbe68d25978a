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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..io import atomic_write
from .logs import LogReader, RankData
from .proctree import _ACTIVE_ROOTS, ProcessTracker, alive, become_subreaper
from .states import count

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


FORWARD_BUFFER = 4 * 1024 * 1024


class Forwarder:
    """Hands the ranks' output to ``sink`` (a terminal, a pipe someone reads slowly) without ever
    blocking the drain, and so never the ranks: a bounded buffer, emptied by a thread of its own.
    What does not fit is dropped and counted; the stream says so where the gap is."""

    def __init__(self, sink: Callable[[bytes], None], limit: int = FORWARD_BUFFER):
        self._sink = sink
        self._limit = limit
        self._q: deque[bytes] = deque()
        self._size = 0
        self._gap = 0  # bytes dropped since the last chunk that fitted
        self.dropped = 0
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="ddp-lint-forward")
        self._thread.start()

    @staticmethod
    def notice(n: int) -> bytes:
        return (f"\n[ddp-lint: {n} bytes of the ranks' output were not shown here: this output was not "
                f"read fast enough; the run went on]\n").encode()

    def write(self, chunk: bytes) -> None:
        with self._cv:
            if self._closed:
                return
            if self._size + len(chunk) > self._limit:
                self._gap += len(chunk)
                self.dropped += len(chunk)
                return
            if self._gap:
                gap = self.notice(self._gap)
                self._q.append(gap)
                self._size += len(gap)
                self._gap = 0
            self._q.append(chunk)
            self._size += len(chunk)
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._q and not self._closed:
                    self._cv.wait()
                if not self._q:
                    return
                chunk = self._q.popleft()
            try:
                self._sink(chunk)
            except Exception:
                with self._cv:
                    self._q.clear()
                    self._closed = True
                return
            finally:
                with self._cv:
                    self._size -= len(chunk)
                    self._cv.notify_all()

    def close(self, wait: float = 1.0) -> None:
        """No more output; give the consumer up to ``wait`` seconds for what is buffered."""
        with self._cv:
            if self._gap:
                self._q.append(self.notice(self._gap))
                self._gap = 0
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=wait)


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
    forward_dropped: int = 0  # bytes the sink did not take in time (Forwarder)
    duration: float = 0.0
    ranks_up_after: float | None = None
    failure_seen_at: float | None = None
    log_dir: str = ""
    killed: int = 0
    deadlock: dict | None = None  # why the ranks' pending collectives cannot complete (deadlock())


Progress = Callable[[str, "int | None"], None]


# the run's sitecustomize.py for a self-spawning script: every Python child of this run (and only of
# this run: the folder is on PYTHONPATH of this run's processes alone) records itself (shim_spawn.py)
_SITECUSTOMIZE = """import os, sys
if os.environ.get("DDP_LINT_SELF_SPAWN") == "1" and os.environ.get("DDP_LINT_SHIM_ROLE") != "spawn-parent" \\
        and os.environ.get("DDP_LINT_LOG_DIR") and os.environ.get("DDP_LINT_RUN_ID"):
    try:
        import importlib.util as _u
        _s = _u.spec_from_file_location("_ddp_lint_shim_spawn", os.environ["DDP_LINT_SHIM_SPAWN"])
        _m = _u.module_from_spec(_s)
        _s.loader.exec_module(_m)
        _m.child()
    except Exception as _e:
        sys.stderr.write(f"ddp-lint shim: this process is not recorded: {_e!r}\\n")
"""


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
    nodes=None,
    rdzv_timeout: float = 0.0,
    module: str | None = None,
    self_spawn: bool = False,
) -> LaunchResult:
    """Run ``script`` on ``nproc`` ranks. ``timeout`` counts from the moment every rank runs the
    script (Python and torch started); ``startup_timeout`` bounds the start itself. ``nodes`` (a
    nodes.NodePlan) starts several torchrun agents, simulated or on a cluster; with
    ``rdzv_timeout``, the start-up bound counts from the rendezvous (the first rank that starts),
    which may take that long. With ``module`` the ranks run ``python -m module`` (``script`` is then
    its file, for the analysis). With ``self_spawn`` the script starts its own ranks: it runs as one
    plain process, and every Python child of the run records itself (shim_spawn.py)."""
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
    # --log-dir inside the private folder: torchrun's own ``torchelastic_*`` folder would otherwise
    # be left in $TMPDIR by every run
    target = ["-m", module] if module else [script]
    argv = [python, SHIM_PATH, "--standalone", "--nproc-per-node", str(nproc),
            "--monitor-interval", "0.1", "--log-dir", os.path.join(tmp, "torchelastic"),
            SHIM_PATH, *target, *script_args]
    if nodes is not None and nodes.multi:
        argv = nodes.argv(python, SHIM_PATH, tmp, target[0], [*target[1:], *script_args])
    if self_spawn:
        argv = [python, SHIM_PATH, *target, *script_args]
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
    if self_spawn:
        inject = os.path.join(tmp, "inject")
        os.mkdir(inject, 0o700)
        atomic_write(os.path.join(inject, "sitecustomize.py"), _SITECUSTOMIZE.encode("utf-8"))
        env.update({"DDP_LINT_SHIM_ROLE": "spawn-parent", "DDP_LINT_SELF_SPAWN": "1", "DDP_LINT_SCRIPT": script,
                    "DDP_LINT_SHIM_SPAWN": str(Path(SHIM_PATH).with_name("shim_spawn.py")),
                    "PYTHONPATH": inject + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")})
    result = LaunchResult(argv=argv, ranks={}, returncode=None, log_dir=tmp)
    out = BoundedOutput()
    reader = nodes.reader(tmp) if nodes is not None and nodes.multi else LogReader(tmp, 0 if self_spawn else nproc)
    reader.discover = self_spawn
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
        fwd = Forwarder(sink) if sink is not None else None
        drainer = threading.Thread(target=_drain, args=(r_fd, out, fwd.write if fwd else None), daemon=True,
                                   name="ddp-lint-drain")
        drainer.start()
        tracker = ProcessTracker(proc.pid, run_id)
        try:
            _watch(proc, reader, tracker, result, nproc, timeout, startup_timeout, failure_grace, report, cancel, t0,
                   rdzv_timeout)
        finally:
            result.killed = tracker.kill_all()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass
            result.returncode = proc.returncode
            _ACTIVE_ROOTS.discard(proc.pid)
            drainer.join(timeout=2.0)
            if fwd is not None:
                fwd.close(wait=0.0 if result.cancelled else 1.0)
                result.forward_dropped = fwd.dropped
        if not result.cancelled:
            report("collecting", 95)
        reader.poll()
        reader.read_stacks()
        try:  # torchrun's own messages (shim._as_torchrun): for the analysis and the report, not the terminal
            with open(os.path.join(tmp, "torchrun.err"), "rb") as f:
                out.write(f.read(OUTPUT_TAIL))
        except OSError:
            pass
        result.output = out.text()
        result.output_bytes = out.total
        result.output_dropped = out.dropped
        result.duration = time.monotonic() - t0
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class LaunchError(Exception):
    pass


def _watch(proc, reader, tracker, result, nproc, timeout, startup_timeout, failure_grace, report, cancel, t0,
           rdzv_timeout=0.0):
    up_at = None
    deadline = t0 + startup_timeout + rdzv_timeout
    rdzv_done = not rdzv_timeout
    last_scan = 0.0
    last_report = 0.0
    failure_at = None
    while True:
        now = time.monotonic()
        if cancel is not None and cancel.is_set():
            result.cancelled = True
            return
        reader.note_gone(alive)  # before torchrun's exit: when a rank killed outright died
        if proc.poll() is not None:
            return
        for ev in reader.poll():
            k = ev.get("kind")
            if k == "exception" or (k == "exit" and ev.get("code") not in (0, None)):
                if failure_at is None:
                    failure_at = now
                    result.failure_seen_at = now - t0
        if not rdzv_done and any(rd.first("start") is not None for rd in reader.ranks.values()):
            rdzv_done = True  # the agents met: ranks start only after the rendezvous
            deadline = now + startup_timeout
        if up_at is None and reader.all_ready():
            up_at = now
            result.ranks_up_after = now - t0
            deadline = now + timeout
            report(f"ranks up ({count(len(reader.ranks), 'rank')})", 20)
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
        # every rank is blocked in a collective that cannot complete (another op, another group,
        # another root on a peer it needs): a hang now, not after the timeout
        if up_at is not None and failure_at is None:
            stuck = deadlock(reader, min(failure_grace, 0.5))
            if stuck is not None:
                result.deadlock = stuck
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


# point-to-point calls pair different ops by design (send with recv), and an earlier isend may
# satisfy a recv: nothing is concluded while a rank is in one
_P2P_OPS = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}
_OP_ALIASES = {"_all_gather_base": "all_gather_into_tensor", "_reduce_scatter_base": "reduce_scatter_tensor"}


def deadlock(reader: LogReader, grace: float, now: float | None = None) -> dict[int, str] | None:
    """Why the run can no longer make progress ({blocked rank: what its collective waits for in
    vain, "rank 1 is in barrier() at line 9"}), or None. Every rank of the job is known here and
    each live one has waited longer than ``grace`` in a blocking collective (or has ended), and no
    pending collective can complete: for each one, a rank of its group is gone or is in another
    collective (another op, another group, another root). Conservative: a rank outside any recorded
    collective (busy, or in a call the shim does not record), a point-to-point call, an asynchronous
    one, or a job whose ranks are not all visible (another node) means no verdict."""
    now = time.time() if now is None else now
    ranks = reader.ranks
    try:
        world = {int((rd.first("start") or {}).get("world_size")) for rd in ranks.values()}
    except (TypeError, ValueError):
        return None
    if len(world) != 1 or set(ranks) != set(range(next(iter(world)))) or len(ranks) < 2:
        return None
    blocked: dict[int, dict] = {}
    gone: set[int] = set()
    for r, rd in ranks.items():
        if rd.end_event is not None:
            gone.add(r)
            continue
        if rd.pid is None or not alive(rd.pid):
            return None  # not started, or died without a word: the other checks' business
        calls = [c for c in rd.pending.values() if not c.get("async")]
        if len(calls) != 1:
            return None
        call = calls[0]
        if call.get("op") in _P2P_OPS or now - float(call.get("t") or now) <= grace:
            return None
        # new_group() pairs by call order: ranks that made different numbers of them (every return
        # logged, none only counted) are in different calls, whatever their lines say
        made = None if rd._quiet or call.get("local_sync") else sum(not c.get("local_sync") for c in rd.groups_made)
        blocked[r] = {**call, "_groups_made": made}
    if not blocked:
        return None
    world_ranks = sorted(ranks)

    def members(call):
        g = call.get("group")
        if g is None:
            return world_ranks
        got = g.get("ranks") if isinstance(g, dict) else None
        return sorted(got) if isinstance(got, list) and all(isinstance(x, int) for x in got) else None

    def same(a, b) -> bool | None:
        """Can these two pending calls be one collective? None: cannot tell."""
        if _OP_ALIASES.get(a.get("op"), a.get("op")) != _OP_ALIASES.get(b.get("op"), b.get("op")):
            return False
        ma, mb = members(a), members(b)
        if ma is None or mb is None:
            return None
        if ma != mb:
            return False
        ga, gb = a.get("group"), b.get("group")
        na = ga.get("name") if isinstance(ga, dict) else None
        nb = gb.get("name") if isinstance(gb, dict) else None
        if na is not None and nb is not None and na != nb:
            return False
        if isinstance(a.get("root"), int) and isinstance(b.get("root"), int) and a["root"] != b["root"]:
            return False
        na, nb = a.get("_groups_made"), b.get("_groups_made")
        if a.get("op") == "new_group" and na is not None and nb is not None and na != nb:
            return False
        return True

    why: dict[int, str] = {}
    for r, call in sorted(blocked.items()):
        mem = members(call)
        if mem is None:
            return None
        blocker = None
        for m in mem:
            if m == r:
                continue
            if m in gone:
                blocker = f"rank {m} has ended"
                break
            ok = same(call, blocked[m])
            if ok is None:
                return None
            if not ok:
                other = blocked[m]
                blocker = f"rank {m} is in {_call_text(other)}"
                break
        if blocker is None:
            return None  # this one can still complete
        why[r] = blocker
    return why


def _call_text(call: dict) -> str:
    g = call.get("group")
    grp = ""
    if isinstance(g, dict) and isinstance(g.get("ranks"), list):
        grp = f" on the group of ranks {', '.join(str(x) for x in g['ranks'])}"
    root = f" ({call.get('root_arg') or 'src'}={call['root']})" if isinstance(call.get("root"), int) else ""
    where = f" at line {call['line']}" if isinstance(call.get("line"), int) else ""
    nth = ""
    if call.get("op") == "new_group" and isinstance(call.get("_groups_made"), int):
        nth = f" (its new_group() call number {call['_groups_made'] + 1})"
    return f"{call.get('op')}(){root}{grp}{where}{nth}"


def _cut(log_dir: str, rank: int) -> bool:
    """faulthandler's dump of this rank stopped at its frame limit (or cannot be read)."""
    try:
        with open(os.path.join(log_dir, f"stack-{rank}.usr1"), "rb") as f:
            data = f.read(4 * 1024 * 1024)
    except OSError:
        return True
    return not data.strip() or b"\n  ...\n" in data or data.rstrip().endswith(b"\n  ...")


def _collect_stacks(reader: LogReader, wait: float = 3.0) -> None:
    """SIGUSR1 every live rank (faulthandler in the shim dumps all threads), wait for the dumps (the
    wait ends as soon as every dump is written and stable; its bound only matters on a loaded machine,
    where a rank may not be scheduled to run its handler for a second or more)."""
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
    # only where faulthandler's dump was cut at its 100 frames ("  ..."): an uncut dump holds the
    # whole stack already, and a rank blocked in C would keep us waiting the full 0.5 s for nothing
    py_asked = [rd for rd in asked if (rd.first("ready") or {}).get("py_stacks") and _cut(reader.dir, rd.rank)]
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
