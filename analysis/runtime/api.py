"""The run action's API, shared by ``ddp-lint run`` and the language server.

``run_script(...)`` never raises on user input: a missing file, an interpreter without torch or a
launcher that cannot start come back as ``RunResult(exit_code=2, error=...)``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..model import Finding
from . import launcher
from . import nodes as node_planner
from .findings import analyse
from .nodes import NodeOptions
from .states import UserCode, count

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR, EXIT_CANCELLED = 0, 1, 2, 130


@dataclass
class RankSummary:
    rank: int
    status: str  # ok | exception | exited | crashed | hung | terminated | killed | not-started
    text: str  # one line for people
    filename: str | None = None
    line: int | None = None  # 1-based
    op: str | None = None
    exit_code: int | None = None
    pid: int | None = None
    node: int | None = None  # GROUP_RANK: the torchrun agent (node) the rank ran on
    local_rank: int | None = None
    cell: int | None = None  # a notebook run: the cell (1-based); ``line`` is then inside it

    def to_json(self) -> dict:
        out = {"rank": self.rank, "status": self.status, "text": self.text, "filename": self.filename,
               "line": self.line, "op": self.op, "exit_code": self.exit_code, "node": self.node,
               "local_rank": self.local_rank}
        if self.cell is not None:
            out["cell"] = self.cell
        return out


@dataclass
class RunResult:
    findings: list[Finding] = field(default_factory=list)
    exit_code: int = EXIT_CLEAN  # 0 clean, 1 findings, 2 could not run, 130 cancelled
    emulated: bool = False
    notes: list[str] = field(default_factory=list)
    cancelled: bool = False
    ranks: list[RankSummary] = field(default_factory=list)
    error: str | None = None  # why the run could not happen (exit_code 2)
    script: str = ""
    module: str | None = None  # ``-m PACKAGE.MODULE``: script is then its file
    launched: str = "torchrun"  # how the ranks were started: torchrun, or self-spawning (the script's own)
    nproc: int = 0
    timeout: float = 0.0
    timed_out: bool = False
    duration: float = 0.0
    output: str = ""  # the ranks' and torchrun's output: head and tail, bounded
    output_bytes: int = 0
    argv: list[str] = field(default_factory=list)
    emulate_reason: str | None = None
    nnodes: int = 1  # nodes of the job (simulated or real)
    node_rank: int | None = None  # this node's, on a real multi-node job (else None)
    multinode: str = "single"  # single | simulated | cluster
    raw: dict = field(default_factory=dict)  # {rank: its records} for ``ddp-lint merge`` (merge.py)


Progress = Callable[[str, "int | None"], None]


def gpu_count(python: str | None = None) -> int:
    """Local GPUs without importing torch here: CUDA_VISIBLE_DEVICES, the NVIDIA driver's /proc
    entries, then ``nvidia-smi -L``."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    n = None
    try:
        n = len([d for d in os.listdir("/proc/driver/nvidia/gpus") if d.strip()])
    except OSError:
        pass
    if n is None:
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
                n = sum(1 for ln in out.stdout.splitlines() if ln.startswith("GPU "))
            except (OSError, subprocess.SubprocessError):
                n = 0
        else:
            n = 0
    if vis is not None:
        vis = vis.strip()
        if vis == "" or vis.startswith("-1"):
            return 0
        ids = [v for v in vis.split(",") if v.strip()]
        cut = next((i for i, v in enumerate(ids) if v.strip().startswith("-")), len(ids))
        return min(cut, n) if n else 0
    return n


_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def module_file(module: str, cwd: str) -> Path | None:
    """The file ``python -m MODULE`` runs, looked up from ``cwd`` (the folder ``-m`` puts first)."""
    base = Path(cwd).joinpath(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__main__.py"):
        if cand.is_file():
            return Path(os.path.abspath(cand))
    return None


def uses_object_collectives(path: str) -> int | None:
    """The first line calling a pickling collective (they need numpy in torch 2.13), or None."""
    import ast

    from ..io import read_text_lenient
    from ..torch_api import OBJECT_COLLECTIVES, OBJECT_COLLECTIVES_WITH_DEVICE

    names = set(OBJECT_COLLECTIVES) | set(OBJECT_COLLECTIVES_WITH_DEVICE)
    text = read_text_lenient(path)  # a regular file only: a FIFO or a device never blocks the run
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if name in names:
                return node.lineno
    return None


def self_spawning(path: str) -> int | None:
    """The line where the script starts its own ranks, or None: a call of torch.multiprocessing's
    ``spawn`` / ``start_processes``, or a ``multiprocessing.Process`` in a script that sets
    MASTER_ADDR itself. Such a script runs as one plain process (it makes its own world)."""
    import ast

    from ..io import read_text_lenient

    text = read_text_lenient(path)  # a regular file only: a FIFO or a device never blocks the run
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    alias: dict[str, str] = {}  # local name -> qualified module or function
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                alias[a.asname or a.name] = f"{node.module}.{a.name}"

    def qual(e) -> str | None:
        if isinstance(e, ast.Name):
            return alias.get(e.id)
        if isinstance(e, ast.Attribute):
            base = qual(e.value)
            return f"{base}.{e.attr}" if base else None
        return None

    sets_master = "MASTER_ADDR" in text
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            q = qual(node.func) or ""
            if q in ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes",
                     "torch.multiprocessing.spawn.spawn", "torch.multiprocessing.spawn.start_processes"):
                return node.lineno
            if sets_master and q in ("multiprocessing.Process", "torch.multiprocessing.Process"):
                return node.lineno
    return None


_PROBE = ("import importlib.util as u, sys\n"
          "for n in sys.argv[1:]:\n"
          "    try:\n"
          "        print(n, 'ok' if u.find_spec(n) else 'missing')\n"
          "    except Exception:\n"
          "        print(n, 'missing')\n")


def _probe_modules(python: str, names: tuple[str, ...]) -> tuple[dict[str, bool], str]:
    """Which of ``names`` the interpreter ``python`` can import, asked of that interpreter itself.

    Never answered in process: a virtual environment's ``python`` resolves to the same base binary
    as ddp-lint's own, yet sees other site-packages (issue 28), so only the target knows. One short
    subprocess for every name at once. ``({}, why)`` when it could not be run."""
    try:
        p = subprocess.run([python, "-c", _PROBE, *names], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        return {}, f"cannot run {python!r}: {e}"
    if p.returncode != 0:
        return {}, (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    found = {}
    for line in p.stdout.splitlines():
        name, _, verdict = line.partition(" ")
        if name in names and verdict in ("ok", "missing"):
            found[name] = verdict == "ok"
    return found, ""


def _emulation_decision(script, nproc, n_gpus, emulate, backend) -> tuple[bool, str | None, list[str]]:
    notes = []
    try:
        from . import emulate_policy  # written by the emulation; optional
    except ImportError:
        if emulate == "on":
            notes.append("--emulate on was asked for, but this build has no CPU emulation; running for real")
        return False, None, notes
    try:
        ok, reason = emulate_policy.should_emulate(script, nproc, n_gpus, emulate, backend)
    except Exception as e:  # the policy must never stop a run
        notes.append(f"emulation policy failed ({e!r}); running without emulation")
        return False, None, notes
    return bool(ok), reason, notes


def run_script(
    script: str,
    *,
    nproc: int | None = None,
    timeout: float = 60.0,
    backend: str = "auto",
    emulate: str = "auto",
    python: str | None = None,
    script_args=(),
    cwd: str | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    sink: Callable[[bytes], None] | None = None,
    startup_timeout: float = 120.0,
    nodes: NodeOptions | None = None,
    rdzv_timeout: float = 600.0,
    module: str | None = None,
    rank_prefix: bool = False,
    keep_records: bool = False,
) -> RunResult:
    """Run ``script`` on ``nproc`` ranks under torchrun and map what went wrong to its lines.

    ``timeout`` counts from the moment every rank runs the script; ``progress(message, percent)``
    is called at starting, ranks up, waiting (about once a second) and collecting; setting
    ``cancel`` kills every process within 2 s and returns ``cancelled=True``. ``sink`` receives
    the ranks' raw output as it arrives (the result keeps a bounded head and tail of it);
    ``rank_prefix`` puts ``[rank N] `` before each line a rank prints through sys.stdout/stderr.

    ``nodes`` (nodes.NodeOptions): ``nnodes`` alone simulates that many nodes of ``nproc`` ranks
    on this machine; with ``rdzv_endpoint`` this is one node of a real job (torchrun's rendezvous
    options pass through unchanged). Under SLURM (srun) they are derived from its environment.
    On a real job the start-up bound counts from the rendezvous, which may take ``rdzv_timeout``.

    A notebook (``.ipynb``) runs as its code cells exported to a script (``notebook_run.py``);
    its findings name the cell and the line in it."""
    if module is None and str(script).lower().endswith(".ipynb"):
        from .notebook_run import run_notebook

        kw = dict(nproc=nproc, timeout=timeout, backend=backend, emulate=emulate, python=python,
                  script_args=script_args, cwd=cwd, progress=progress, cancel=cancel, sink=sink,
                  startup_timeout=startup_timeout, nodes=nodes, rdzv_timeout=rdzv_timeout, rank_prefix=rank_prefix)
        return run_notebook(script, cwd, lambda exported: run_script(exported, **kw), RunResult)
    res = RunResult(timeout=float(timeout))

    def fail(msg: str) -> RunResult:
        res.error = msg
        res.exit_code = EXIT_ERROR
        res.notes.append(msg)
        return res

    if module is not None:  # ``ddp-lint run -m PACKAGE.MODULE``, as ``python -m`` / ``torchrun -m``
        if not _MODULE_RE.match(module or ""):
            return fail(f"invalid module name {module!r}")
        found = module_file(module, cwd or os.getcwd())
        if found is None:
            return fail(f"no module {module!r} under {cwd or os.getcwd()} (-m runs a module of the current "
                        "folder, as python -m does)")
        script = str(found)
        res.module = module
    try:
        path = Path(script).expanduser()
        if not path.is_absolute():
            path = Path(cwd or os.getcwd()) / path
        path = Path(os.path.abspath(path))
    except (OSError, ValueError) as e:
        return fail(f"invalid script path {script!r}: {e}")
    res.script = str(path)
    if not path.is_file():
        return fail(f"{script}: no such file" if not path.exists() else f"{script}: not a file")
    if backend not in ("auto", "nccl", "gloo"):
        return fail(f"unknown backend {backend!r} (auto, nccl or gloo)")
    if emulate not in ("auto", "on", "off"):
        return fail(f"unknown emulate mode {emulate!r} (auto, on or off)")
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        return fail(f"invalid timeout {timeout!r}")
    if not timeout > 0:
        return fail("the timeout must be a positive number of seconds")
    py = python or sys.executable
    if os.sep not in py:
        found = shutil.which(py)
        if not found:
            return fail(f"interpreter {py!r} not found on PATH")
        py = found
    if not (os.path.isfile(py) and os.access(py, os.X_OK)):
        return fail(f"interpreter {py!r} is not an executable file")
    found, why = _probe_modules(py, ("torch", "numpy"))
    ok = found.get("torch", False)
    if not ok:
        return fail(f"torch is not installed for {py} ({why})" if why else
                    f"torch is not installed for {py}; pass --python with the interpreter that has your torch")
    obj_line = uses_object_collectives(str(path))
    if obj_line is not None and found.get("numpy") is False:
        return fail(f"{path.name}:{obj_line} uses an object collective, which needs numpy under torch, and numpy "
                    f"is not installed for {py}; install it first: {py} -m pip install numpy")
    spawn_line = self_spawning(str(path)) if nodes is None or not getattr(nodes, "nnodes", None) else None
    if spawn_line is not None:
        res.launched = "self-spawning"
    n_gpus = gpu_count()
    if nproc is None:
        nproc = n_gpus if n_gpus >= 2 else 2
    if not isinstance(nproc, int) or nproc < 1:
        return fail(f"--nproc must be a positive number, got {nproc!r}")
    if nproc > 64:
        return fail(f"--nproc {nproc} is more ranks than a local run can take (at most 64)")
    try:
        # SLURM's environment is read only when options were given (the CLI always gives them): a
        # run from the editor stays on this machine
        node_plan = node_planner.plan(nodes, nproc) if nodes is not None else node_planner.NodePlan("single", 1, nproc)
    except node_planner.NodeError as e:
        return fail(str(e))
    res.notes.extend(node_plan.notes)
    res.nnodes, res.node_rank, res.multinode = node_plan.nnodes, node_plan.node_rank, node_plan.mode
    res.nproc = nproc
    # simulated nodes need GPUs for every rank of every node
    emulated, reason, notes = _emulation_decision(str(path), node_plan.world if node_plan.mode == "simulated" else nproc,
                                                  n_gpus, emulate, backend)
    if emulated and reason and node_plan.mode == "simulated":
        reason = reason.replace(f"with {count(node_plan.world, 'emulated GPU')}",
                                f"with {count(nproc, 'emulated GPU')} per node")
    res.notes.extend(notes)
    res.emulated, res.emulate_reason = emulated, reason
    if reason and (emulated or emulate == "on"):
        res.notes.append(reason)
    env_extra = {"DDP_LINT_BACKEND": backend}
    if rank_prefix:  # each line a rank prints gets "[rank N] " (the shim's shim_output.py)
        env_extra["DDP_LINT_RANK_PREFIX"] = "1"
    if node_plan.mode == "simulated":
        slices = None if emulated else node_planner.gpu_slices(n_gpus, node_plan.nnodes, nproc,
                                                                os.environ.get("CUDA_VISIBLE_DEVICES"))
        if emulated:
            res.notes.append(f"each simulated node has its own {nproc} emulated GPU{'s' if nproc != 1 else ''} "
                             f"(cuda:0..cuda:{nproc - 1}), as {node_plan.nnodes} real machines would")
        elif slices:
            env_extra["DDP_LINT_NODE_GPUS"] = ";".join(slices)
            res.notes.append("each simulated node has its own GPUs: " +
                             ", ".join(f"node {i}: {s}" for i, s in enumerate(slices)) + " (CUDA_VISIBLE_DEVICES)")
        elif n_gpus:
            res.notes.append(f"the {node_plan.nnodes} simulated nodes share this machine's {n_gpus} "
                             f"GPU{'s' if n_gpus != 1 else ''} (fewer than {node_plan.world}): device numbers are not "
                             "per node as on a real cluster; --emulate on gives each node its own")
    if emulated:
        env_extra.update({"DDP_LINT_EMULATE": "1", "DDP_LINT_EMU_NGPUS": str(nproc)})
    workdir = cwd or os.getcwd()
    try:
        lr = launcher.launch(py, str(path), [str(a) for a in script_args], nproc, timeout, cwd=workdir,
                             env_extra=env_extra, progress=progress, cancel=cancel, sink=sink,
                             startup_timeout=startup_timeout, nodes=node_plan,
                             rdzv_timeout=rdzv_timeout if node_plan.mode == "cluster" else 0.0,
                             module=module, self_spawn=spawn_line is not None)
    except launcher.LaunchError as e:
        return fail(str(e))
    except OSError as e:
        return fail(f"cannot run: {e}")
    res.argv, res.duration, res.timed_out = lr.argv, lr.duration, lr.timed_out
    if lr.deadlock:
        res.notes.append(f"stopped without waiting for the {timeout:g} s timeout: no rank's collective could "
                         "complete ("
                         + "; ".join(f"rank {r}'s, as {why}" for r, why in sorted(lr.deadlock.items())) + ")")
    if spawn_line is not None:
        res.nproc = len(lr.ranks)
    res.output, res.output_bytes = lr.output, lr.output_bytes
    if lr.output_dropped:
        res.notes.append(f"the run printed {lr.output_bytes} bytes; only the first and last "
                         f"{launcher.OUTPUT_HEAD // 1024} KiB are kept")
    if lr.forward_dropped:
        res.notes.append(f"{lr.forward_dropped} bytes of the ranks' output were not forwarded: its reader did not "
                         "keep up (the ranks were never held back; the run's result is unaffected)")
    if lr.cancelled:
        res.cancelled = True
        res.exit_code = EXIT_CANCELLED
        res.notes.append("cancelled; every process of the run was stopped")
        return res
    roots = [str(path.parent)]
    if str(path).startswith(os.path.join(os.path.abspath(workdir), "")):
        roots.append(os.path.abspath(workdir))
    lib_dirs = []
    for rd in lr.ranks.values():
        s = rd.first("start")
        if s:
            lib_dirs = s.get("lib_dirs") or []
            break
    user = UserCode(roots, lib_dirs, launcher.SHIM_PATH)
    try:
        an = analyse(lr.ranks, user=user, timed_out=lr.timed_out, timeout=timeout, emulated=emulated,
                     output=lr.output, deadlock=lr.deadlock)
    except Exception as e:  # a bug in the mapping must not lose the run (or crash the server)
        import traceback

        res.notes.append(f"ddp-lint could not map this run to lines ({type(e).__name__}: {e}); "
                         "please report it with the script")
        res.notes.append(traceback.format_exc(limit=5))
        res.exit_code = EXIT_CLEAN if lr.returncode == 0 else EXIT_FINDINGS
        return res
    res.findings = an.findings
    res.notes.extend(n for n in an.notes if n not in res.notes)
    places = node_planner.rank_places(lr.ranks)
    for r, st in sorted(an.states.items()):
        node, local = places.get(r, (None, None))
        res.ranks.append(RankSummary(
            rank=r, status=st.status, text=st.summary(), filename=os.path.abspath(st.site.file) if st.site else None,
            line=st.site.line if st.site else None, op=st.op, exit_code=st.exit_code, pid=st.pid,
            node=node, local_rank=local))
    if node_plan.multi or keep_records:  # keep_records: ``run --dump`` (frwrite.py) needs them too
        from .logs import raw_ranks

        res.raw = raw_ranks(lr.ranks, roots=roots, lib_dirs=lib_dirs)
        seen = {n for n, _ in places.values() if n is not None}
        if node_plan.mode == "cluster" and len(seen) == 1:
            (res.node_rank,) = seen  # the rendezvous's word: c10d orders the nodes itself
            if node_plan.node_rank is not None and res.node_rank != node_plan.node_rank:
                res.notes.append(f"torchrun's {node_plan.torchrun_opts[node_plan.torchrun_opts.index('--rdzv-backend') + 1]} "
                                 f"rendezvous made this node {res.node_rank} (--node-rank {node_plan.node_rank} "
                                 "is only used by the static rendezvous)")
        if node_plan.mode == "cluster" and 0 < len(lr.ranks) < nproc:
            res.notes.append(f"only {len(lr.ranks)} of this node's {nproc} ranks started")
    started = sum(1 for st in an.states.values() if st.started)
    expected = nproc * node_plan.nnodes if node_plan.mode == "simulated" else nproc
    if started == 0:
        tail = "\n".join(lr.output.strip().splitlines()[-15:])
        why = "the ranks did not start" + (f" within {startup_timeout:g} s" if lr.startup_failed else "")
        return fail(f"{why}; torchrun said:\n{tail}" if tail else why)
    if lr.startup_failed:
        res.notes.append(f"only {started} of {count(expected, 'rank')} started within {startup_timeout:g} s")
    if res.findings:
        res.exit_code = EXIT_FINDINGS
    elif lr.returncode not in (0, None) and all(st.status == "ok" for st in an.states.values()):
        res.notes.append(f"every rank finished the script, but torchrun exited with status {lr.returncode} "
                         "(a rank died while the interpreter shut down; the run's output has the details)")
    elif lr.returncode not in (0, None) or any(st.status not in ("ok",) for st in an.states.values()):
        res.exit_code = EXIT_FINDINGS
        res.notes.append(f"the run did not finish cleanly (torchrun exit status {lr.returncode}), "
                         "but no rank failure could be pinned to a line")
    return res
