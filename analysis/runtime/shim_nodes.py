"""ddp-lint's simulated nodes: starts one torchrun agent per node on this machine. Runs in the
user's interpreter, by path; stdlib only, imports nothing from ddp-lint.

``python shim_nodes.py N PYTHON SHIM TORCHRUN-OPTS... -- SHIM SCRIPT ARGS...``

Agent i runs ``PYTHON SHIM TORCHRUN-OPTS SHIM SCRIPT ARGS`` (the shim in its torchrun role, see
shim._as_torchrun), with ``{node}`` in the options replaced by i and ``{is_host}`` by 1 for agent 0
(it hosts the c10d rendezvous store) and 0 for the others. With DDP_LINT_NODE_GPUS ("0,1;2,3"),
agent i gets the i-th list as its CUDA_VISIBLE_DEVICES. The agents find each other through
torchrun's own rendezvous; this file only starts them and waits. It dies with ddp-lint
(PR_SET_PDEATHSIG) and each agent dies with it, so nothing outlives the run. Exit status: the first
agent's non-zero status, else 0.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def main(argv):
    if len(argv) < 4 or "--" not in argv:
        sys.stderr.write("usage: shim_nodes.py N PYTHON SHIM TORCHRUN-OPTS... -- SHIM SCRIPT ARGS...\n")
        return 2
    parent = os.environ.pop("DDP_LINT_PARENT_PID", "")
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent.isdigit() and os.getppid() != int(parent):  # ddp-lint died before the line above
        return 143
    n = int(argv[0])
    python, shim = argv[1], argv[2]
    cut = argv.index("--")
    opts, tail = argv[3:cut], argv[cut + 1:]
    env = dict(os.environ)
    env["DDP_LINT_SHIM_ROLE"] = "torchrun"
    env["DDP_LINT_PARENT_PID"] = str(os.getpid())
    # each node's own GPUs ("0,1;2,3": node 0 sees GPUs 0 and 1, node 1 GPUs 2 and 3)
    gpus = env.pop("DDP_LINT_NODE_GPUS", "")
    slices = gpus.split(";") if gpus else []
    procs = []
    for i in range(n):
        mine = [o.replace("{node}", str(i)).replace("{is_host}", "1" if i == 0 else "0") for o in opts]
        agent_env = dict(env)
        if len(slices) == n:
            agent_env["CUDA_VISIBLE_DEVICES"] = slices[i]
        try:
            procs.append(subprocess.Popen([python, shim, *mine, *tail], env=agent_env, stdin=subprocess.DEVNULL))
        except OSError as e:
            sys.stderr.write(f"ddp-lint: cannot start the agent of simulated node {i}: {e}\n")
            for p in procs:
                p.kill()
            return 1
        if i == 0:
            time.sleep(0.2)  # node 0 hosts the rendezvous store: let it listen first
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
