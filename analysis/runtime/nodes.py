"""Multi-node runs: simulated nodes on one machine, torchrun pass-through and SLURM.

ddp-lint never launches ranks itself: every node is one torchrun agent, joined to the others by
torchrun's own c10d rendezvous.

* Simulated (``--nnodes N`` without ``--rdzv-endpoint``): N agents on this machine, a c10d
  rendezvous on a free localhost port, each agent one node with ``--nproc`` ranks. They are started
  by shim_nodes.py (run by path in the user's interpreter), so that the launcher still watches one
  process tree; the ranks' logs land in one folder under their global ranks.
* Real cluster (``--rdzv-endpoint HOST:PORT``): the rendezvous options go to torchrun unchanged; this
  node only sees its own ranks, whose global ranks are known once they start (a :class:`NodeLogReader`
  finds their logs). Each node writes its report; ``ddp-lint merge`` joins them.
* SLURM: under ``srun`` (SLURM_JOB_ID, SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST) the number of
  nodes, this node's rank and the rendezvous endpoint (the first host of the node list) are derived.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .logs import LogReader, RankData

NODES_SHIM = str(Path(__file__).resolve().with_name("shim_nodes.py"))
DEFAULT_RDZV_PORT = 29400  # torchrun's own default for c10d


class NodeError(ValueError):
    """A multi-node option that cannot work; the message is for people."""


# -- SLURM node lists ----------------------------------------------------------------------------
def _split_top(s: str) -> list[str]:
    """Split at commas outside brackets: ``a1,b[2-3]`` -> ``["a1", "b[2-3]"]``."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise NodeError(f"unbalanced ']' in node list {s!r}")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise NodeError(f"unbalanced '[' in node list {s!r}")
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


MAX_HOSTS = 100_000  # a node list that names more hosts is refused
_MAX_DIGITS = 18  # a host number longer than this is not a host number


def _too_large(whole: str) -> NodeError:
    return NodeError(f"node list {whole!r} names more than {MAX_HOSTS} hosts")


def _ranges(body: str, whole: str) -> tuple[list[tuple], int]:
    """The ranges of one bracket group, ``(first, last, step, width)`` each, and how many numbers
    they make: counted, nothing built."""
    out, n = [], 0
    for part in body.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d{1,%d})(?:-(\d{1,%d}))?(?::(\d{1,%d}))?" % ((_MAX_DIGITS,) * 3), part)
        if not m:
            raise NodeError(f"cannot read {part!r} in node list {whole!r}")
        lo, hi, step = m.group(1), m.group(2), int(m.group(3) or 1)
        if hi is None:
            out.append((int(lo), int(lo), 1, len(lo)))
            n += 1
            continue
        width = len(lo) if lo.startswith("0") or len(lo) == len(hi) else 0
        a, b = int(lo), int(hi)
        if b < a or step < 1:
            raise NodeError(f"empty range {part!r} in node list {whole!r}")
        out.append((a, b, step, width))
        n += (b - a) // step + 1
    return out, n


def _expand_range(body: str, whole: str) -> list[str]:
    ranges, n = _ranges(body, whole)
    if n > MAX_HOSTS:
        raise _too_large(whole)
    return [str(i).zfill(w) for a, b, step, w in ranges for i in range(a, b + 1, step)]


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compact host list, expanded like ``scontrol show hostnames``: ``gpu[01-03,07]`` ->
    gpu01 gpu02 gpu03 gpu07; ``a1,b[2-3]`` -> a1 b2 b3; ``n[1-2]-ib[0-1]`` -> n1-ib0 n1-ib1 ...
    (several bracket groups: the first one varies slowest). Zero padding is kept. More than
    ``MAX_HOSTS`` hosts is refused while expanding: every item's size is counted before anything of
    it is built, so ``n[0-99999][0-99999]`` costs nothing."""
    s = (nodelist or "").strip()
    if not s:
        raise NodeError("the node list is empty")
    hosts: list[str] = []
    for item in _split_top(s):
        groups = []  # literal strings and bracket bodies, in order
        size = 1
        for p in re.split(r"(\[[^\]]*\])", item):
            if not p:
                continue
            if p.startswith("["):
                n = _ranges(p[1:-1], s)[1]
                if not n:
                    raise NodeError(f"empty brackets in node list {s!r}")
                size *= n
            elif "[" in p or "]" in p:
                raise NodeError(f"cannot read node list {s!r}")
            if len(hosts) + size > MAX_HOSTS:
                raise _too_large(s)
            groups.append(p)
        combos = [""]
        for p in groups:
            choices = _expand_range(p[1:-1], s) if p.startswith("[") else [p]
            combos = [c + x for c in combos for x in choices]
        hosts.extend(combos)
    return hosts


def slurm_hosts(nodelist: str, scontrol: str | None = None) -> list[str]:
    """The hosts of a node list: ``scontrol show hostnames`` when it is there, parsed otherwise."""
    exe = scontrol if scontrol is not None else shutil.which("scontrol")
    if exe:
        try:
            p = subprocess.run([exe, "show", "hostnames", nodelist], capture_output=True, text=True,
                               timeout=20, stdin=subprocess.DEVNULL)
            hosts = [h.strip() for h in p.stdout.split() if h.strip()]
            if p.returncode == 0 and hosts:
                return hosts
        except (OSError, subprocess.SubprocessError):
            pass
    return expand_nodelist(nodelist)


# -- what the options and the environment ask for ------------------------------------------------
@dataclass
class NodeOptions:
    """``ddp-lint run``'s multi-node options, as given (None = not given)."""

    nnodes: int | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_backend: str | None = None


@dataclass
class NodePlan:
    """How the run's torchrun agents are started."""

    mode: str  # "single" | "simulated" | "cluster"
    nnodes: int = 1
    nproc: int = 1
    node_rank: int | None = None  # this node's, on a cluster (None: given by the rendezvous)
    torchrun_opts: list[str] = field(default_factory=list)  # a cluster node's rendezvous options
    notes: list[str] = field(default_factory=list)
    slurm: bool = False

    @property
    def world(self) -> int:
        return self.nnodes * self.nproc

    @property
    def multi(self) -> bool:
        return self.mode != "single"

    def argv(self, python: str, shim: str, log_dir: str, script: str, script_args) -> list[str]:
        """The command line that starts this node's agent(s), everything through the shim."""
        common = ["--nproc-per-node", str(self.nproc), "--monitor-interval", "0.1"]
        tail = [shim, script, *script_args]
        if self.mode == "single":
            return [python, shim, "--standalone", *common, "--log-dir", os.path.join(log_dir, "torchelastic"), *tail]
        if self.mode == "cluster":
            return [python, shim, *self.torchrun_opts, *common, "--log-dir", os.path.join(log_dir, "torchelastic"), *tail]
        port = free_port()
        opts = ["--nnodes", str(self.nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", f"ddp-lint-{os.path.basename(log_dir)}", "--local-addr", "127.0.0.1",
                "--max-restarts", "0", "--rdzv-conf", "is_host={is_host}", *common,
                "--log-dir", os.path.join(log_dir, "torchelastic-{node}")]
        return [python, NODES_SHIM, str(self.nnodes), python, shim, *opts, "--", *tail]

    def reader(self, log_dir: str) -> LogReader:
        if self.mode == "cluster":
            return NodeLogReader(log_dir, self.nproc)
        return LogReader(log_dir, self.world)


def gpu_slices(n_gpus: int, nnodes: int, nproc: int, visible: str | None = None) -> list[str] | None:
    """Each simulated node's own GPUs (its CUDA_VISIBLE_DEVICES) when the machine has enough for
    every rank: node i gets GPUs i*nproc .. (i+1)*nproc-1, so that ``device_count()`` is ``nproc``
    on every node and cuda:nproc fails there as on a real node. None when there are too few."""
    if n_gpus < nnodes * nproc:
        return None
    ids = [v.strip() for v in (visible or "").split(",") if v.strip()] if visible else []
    ids = ids[:n_gpus] if len(ids) >= nnodes * nproc else [str(i) for i in range(n_gpus)]
    return [",".join(ids[i * nproc:(i + 1) * nproc]) for i in range(nnodes)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _endpoint_ok(ep: str) -> bool:
    host, _, port = ep.rpartition(":")
    if not host:
        return bool(ep.strip())  # a host alone: torchrun's default port
    return bool(host.strip("[]")) and port.isdigit() and 0 < int(port) < 65536


def slurm_options(environ, scontrol: str | None = None) -> NodeOptions | None:
    """Under ``srun``: nnodes, this node's rank and the rendezvous endpoint (the first host of the
    node list, torchrun's c10d port) from SLURM's environment; None outside a job step (a batch
    script itself is not one: ``srun`` starts the steps) or with one node.

    The step's own values come first (SLURM_STEP_NUM_NODES, SLURM_STEP_NODELIST: a step may use part
    of the allocation), then the job's (SLURM_NNODES / SLURM_JOB_NUM_NODES, SLURM_JOB_NODELIST)."""
    env = environ
    if not env.get("SLURM_JOB_ID") or not (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")):
        return None
    raw = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES") or ""
    if not raw:
        return None
    try:
        nnodes = int(raw)
    except ValueError:
        raise NodeError(f"SLURM says {raw!r} nodes: not a number") from None
    if nnodes <= 1:
        return None
    tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
    if tasks and tasks.isdigit() and int(tasks) > nnodes:
        raise NodeError(f"srun started {tasks} tasks on {nnodes} nodes: `ddp-lint run` starts one torchrun agent "
                        "per node and needs one task per node (srun --ntasks-per-node=1)")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    hosts = slurm_hosts(nodelist, scontrol) if nodelist else []
    if not hosts:
        raise NodeError("SLURM_JOB_NODELIST is not set: cannot tell the rendezvous host")
    me = env.get("SLURMD_NODENAME")
    if me and me in hosts[:nnodes]:
        node_rank = hosts.index(me)
    else:
        try:
            node_rank = int(env.get("SLURM_NODEID", ""))
        except ValueError:
            raise NodeError("SLURM says several nodes, but neither SLURMD_NODENAME nor SLURM_NODEID tells which "
                            "one this is: start ddp-lint through srun (one task per node)") from None
    port = env.get("DDP_LINT_RDZV_PORT") or str(DEFAULT_RDZV_PORT)
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    return NodeOptions(nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=f"{hosts[0]}:{port}",
                       rdzv_id=f"ddp-lint-slurm-{env.get('SLURM_JOB_ID')}.{step}", rdzv_backend="c10d")


def plan(opts: NodeOptions, nproc: int, environ=None, scontrol: str | None = None) -> NodePlan:
    """Decide how to start the run. Raises NodeError with a message for people."""
    environ = os.environ if environ is None else environ
    given = opts.rdzv_endpoint is not None or opts.node_rank is not None or opts.rdzv_id is not None \
        or opts.rdzv_backend is not None
    if opts.nnodes is None and not given:
        slurm = slurm_options(environ, scontrol)
        if slurm is not None:
            p = plan(slurm, nproc, environ={}, scontrol=scontrol)
            p.slurm = True
            p.notes.append(f"SLURM job {environ.get('SLURM_JOB_ID')}: node {slurm.node_rank} of {slurm.nnodes}, "
                           f"rendezvous at {slurm.rdzv_endpoint}")
            return p
        return NodePlan("single", 1, nproc)
    nnodes = opts.nnodes if opts.nnodes is not None else 1
    if not isinstance(nnodes, int) or nnodes < 1:
        raise NodeError(f"--nnodes must be a positive number, got {nnodes!r}")
    if opts.rdzv_endpoint is None:
        if given:
            raise NodeError("--node-rank, --rdzv-id and --rdzv-backend need --rdzv-endpoint HOST:PORT (a real "
                            "multi-node job); without it, --nnodes N simulates N nodes on this machine")
        if nnodes == 1:
            return NodePlan("single", 1, nproc)
        if nnodes * nproc > 64:
            raise NodeError(f"--nnodes {nnodes} x --nproc {nproc} is more ranks than a simulated run can take "
                            "(at most 64)")
        return NodePlan("simulated", nnodes, nproc)
    ep = opts.rdzv_endpoint.strip()
    if not _endpoint_ok(ep):
        raise NodeError(f"--rdzv-endpoint {opts.rdzv_endpoint!r}: expected HOST:PORT")
    backend = opts.rdzv_backend or "c10d"
    if opts.node_rank is not None and not (0 <= opts.node_rank < nnodes):
        raise NodeError(f"--node-rank {opts.node_rank} is not in 0..{nnodes - 1}")
    tr = ["--nnodes", str(nnodes)]
    if opts.node_rank is not None:
        tr += ["--node-rank", str(opts.node_rank)]
    tr += ["--rdzv-backend", backend, "--rdzv-endpoint", ep]
    if opts.rdzv_id is not None:
        tr += ["--rdzv-id", opts.rdzv_id]
    tr += ["--max-restarts", "0"]
    return NodePlan("cluster", nnodes, nproc, node_rank=opts.node_rank, torchrun_opts=tr)


# -- a cluster node's logs -------------------------------------------------------------------------
class NodeLogReader(LogReader):
    """The logs of this node's ranks, whose global ranks are only known once they start: every
    ``rank-<R>.jsonl`` in the folder is read. ``ranks`` holds the ranks seen so far."""

    def __init__(self, log_dir: str, nproc: int):
        super().__init__(log_dir, 0)
        self.expected = nproc

    def _discover(self) -> None:
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for n in names:
            m = re.fullmatch(r"rank-(\d+)\.jsonl", n)
            if m and int(m.group(1)) not in self.ranks:
                self.ranks[int(m.group(1))] = RankData(int(m.group(1)))

    def poll(self) -> list[dict]:
        self._discover()
        return super().poll()

    def all_ready(self) -> bool:
        return len(self.ranks) >= self.expected and super().all_ready()


def rank_places(ranks: dict) -> dict[int, tuple[int | None, int | None]]:
    """{global rank: (node, local rank)} from the ranks' start records (GROUP_RANK, LOCAL_RANK)."""
    out = {}
    for r, rd in ranks.items():
        s = rd.first("start") or {}
        out[r] = (_int(s.get("group_rank")), _int(s.get("local_rank")))
    return out


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def place_text(rank: int, places: dict) -> str:
    """``rank 2 (node 1, local 0)``; ``rank 2`` when the node is not known."""
    node, local = places.get(rank, (None, None))
    if node is None:
        return f"rank {rank}"
    return f"rank {rank} (node {node}, local {local if local is not None else '?'})"
