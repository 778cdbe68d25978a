"""Launch scripts (sbatch, shell, ``torchrun`` command lines): where the Flight Recorder dumps go.

``check_launch_script(text, path)`` -> DDP701 findings. A script that turns the Flight Recorder on
(``TORCH_FR_BUFFER_SIZE`` or the older ``TORCH_NCCL_TRACE_BUFFER_SIZE`` set to a positive number)
and launches distributed ranks (``torchrun``, ``python -m torch.distributed.run`` / ``.launch``,
``srun``/``mpirun`` of python) but leaves ``TORCH_FR_DUMP_TEMP_FILE`` (or the older
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``) at its default ``/tmp/nccl_trace_rank_`` or points it at
another node-local folder (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``$TMPDIR``, ``$SLURM_TMPDIR``)
writes each rank's dump on its own node, where it is lost with the node.

The script is read as shell words (``shlex``, comments dropped), so a variable named in a comment
or in a string never decides a finding; ``#SBATCH --export=...`` lines are read as assignments.
Editor-agnostic, stdlib only.
"""
from __future__ import annotations

import re
import shlex

from .model import Finding, Range, Severity

BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
_NODE_LOCAL = re.compile(r"^(/tmp|/var/tmp|/dev/shm|/run|\$\{?TMPDIR\b|\$\{?SLURM_TMPDIR\b|\$\{?TMP\b|\$\{?LOCAL_?SCRATCH\b)(/|$|\})")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True, posix=True)
    except ValueError:  # an unclosed quote: the rest of the line as plain words
        return line.split("#", 1)[0].split()


def _logical_lines(text: str):
    """(1-based line, text) with backslash continuations joined."""
    buf, start = "", None
    for i, raw in enumerate(text.splitlines(), 1):
        if start is None:
            start = i
        if raw.endswith("\\") and not raw.endswith("\\\\"):
            buf += raw[:-1] + " "
            continue
        yield start, buf + raw
        buf, start = "", None
    if buf:
        yield start, buf


def _is_launcher(word: str) -> bool:
    return word.endswith("torchrun") or word in _LAUNCHERS


def torchrun_lines(text: str) -> list[list[str]]:
    """The shell words of each line of ``text`` that starts ranks with ``torchrun`` / ``python -m
    torch.distributed.run`` (or ``.launch``), from the launcher's word on."""
    out = []
    for _ln, line in _logical_lines(text):
        words = _words(line)
        at = next((i for i, w in enumerate(words) if _is_launcher(w)), None)
        if at is not None:
            out.append(words[at:])
    return out


def one_node_launch(words: list[str]) -> bool:
    """A ``torchrun`` command line (``torchrun_lines``) that starts one node: ``--standalone``, or
    ``--nnodes`` absent or ``1`` (``1:1``)."""
    for i, w in enumerate(words):
        if w == "--standalone":
            return True
        if w == "--nnodes" or w.startswith("--nnodes="):
            value = w.split("=", 1)[1] if "=" in w else (words[i + 1] if i + 1 < len(words) else "")
            return value in ("1", "1:1")
    return True


def looks_like_launch_script(text: str) -> bool:
    head = text[:200]
    return head.startswith("#!") and re.match(r"#!\s*\S*(ba|z|k|da)?sh\b|#!\s*/usr/bin/env\s+(ba|z)?sh\b", head) is not None \
        or "#SBATCH" in text


def check_launch_script(text: str, path: str) -> list[Finding]:
    assigned: dict[str, tuple[int, str, int, int]] = {}  # var -> (line, value, col, end col)
    launches: list[int] = []
    lines = text.splitlines()
    for ln, line in _logical_lines(text):
        stripped = line.lstrip()
        if stripped.startswith("#SBATCH"):
            m = re.search(r"--export=(\S+)", stripped)
            if m:
                for part in m.group(1).split(","):
                    a = _ASSIGN.match(part)
                    if a:
                        _note(assigned, a.group(1), a.group(2), ln, lines)
            continue
        words = _words(line)
        i = 0
        if words and words[0] in ("export", "declare", "local", "env", "set"):
            i = 1
            while i < len(words) and words[i].startswith("-"):
                i += 1
        while i < len(words):
            a = _ASSIGN.match(words[i])
            if not a:
                break
            _note(assigned, a.group(1), a.group(2), ln, lines)
            i += 1
        rest = words[i:]
        if any(_is_launcher(w) for w in rest) or (
                rest and rest[0] in ("srun", "mpirun", "mpiexec") and any(re.search(r"python[\d.]*$", w) for w in rest)):
            launches.append(ln)
    if not launches:
        return []
    buf = next(((v, assigned[v]) for v in BUFFER_VARS if v in assigned), None)
    if buf is None or not re.fullmatch(r"\s*\d+\s*", buf[1][1] or "") or int(buf[1][1]) <= 0:
        return []  # the recorder is off (or set from elsewhere): no dumps to lose
    where = next(((v, assigned[v]) for v in FILE_VARS if v in assigned), None)
    from .registry import get_rule

    rule = get_rule("DDP701")
    name, url = (rule.name, rule.url()) if rule else ("flight-recorder-dumps-node-local", None)
    if where is None:
        ln, _, c0, c1 = buf[1]
        msg = (f"{buf[0]} turns the Flight Recorder on, but {FILE_VARS[0]} is not set: every rank dumps to "
               "/tmp/nccl_trace_rank_<rank> on its own node, where the dumps are lost with the node; point it at a "
               "shared folder")
    else:
        ln, value, c0, c1 = where[1]
        if not _NODE_LOCAL.match(value.strip("'\"")):
            return []
        msg = (f"{where[0]} points at {value!s}, a node-local folder: each rank's Flight Recorder dump stays on its "
               "node and is lost with it; point it at a shared folder (a path every node and you can read)")
    return [Finding(code="DDP701", name=name, message=msg, severity=Severity.WARNING,
                    range=Range.of(ln - 1, c0, ln - 1, c1), filename=path, url=url,
                    details={"launch_lines": launches,
                             "hint": "for example: export TORCH_FR_DUMP_TEMP_FILE=$HOME/fr/$SLURM_JOB_ID/trace_rank_ "
                                     "(then `ddp-lint explain $HOME/fr/$SLURM_JOB_ID`)"})]


def _note(assigned: dict, var: str, value: str, ln: int, lines: list[str]) -> None:
    text = lines[ln - 1] if 0 < ln <= len(lines) else ""
    c0 = text.find(var)
    c0 = max(c0, 0)
    c1 = len(text.rstrip()) if c0 == 0 and not text.startswith(var) else min(len(text.rstrip()), c0 + len(var) + 1 + len(value))
    assigned[var] = (ln, value, c0, max(c1, c0 + len(var)))
