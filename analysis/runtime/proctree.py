"""The processes of one run, found through /proc: every descendant seen while the run was alive, and
every process that carries the run's marker (``DDP_LINT_RUN_ID``) in its environment, so that
nothing outlives the run (analysis/runtime/launcher.py kills them all at the end)."""
from __future__ import annotations

import os
import signal
import time


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
