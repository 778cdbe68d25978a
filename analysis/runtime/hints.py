"""Hints that teach (issue 28, point 8), for the runtime findings of analysis/runtime/findings.py:

- ``static_confirms(path, code)``: a hint names a static rule only when that rule, run on the
  script, reports it (``ddp-lint check`` would have caught this failure without running);
- ``missing_file_hint``: a ``FileNotFoundError`` on a rank of another node than the one that wrote
  the file under a job-wide rank guard (``if rank == 0:``): a multi-node hazard, not a typo.
"""
from __future__ import annotations

import ast
import os
import re

from .nodes import place_text, rank_places
from .states import Frame, rank_list

_CONFIRMED: dict[tuple[str, str], bool] = {}
_MISSING_RE = re.compile(r"No such file or directory: '([^']+)'")
_WRITERS = {"save", "write_text", "write_bytes", "dump", "save_pretrained", "to_csv", "savez", "copyfile", "copy"}


def static_confirms(path: str | None, code: str) -> bool:
    """``code``'s static rule reports something in ``path`` (once per file and code)."""
    if not path or not os.path.isfile(path):
        return False
    key = (os.path.abspath(path), code)
    got = _CONFIRMED.get(key)
    if got is None:
        from ..config import Settings
        from ..engine import check_source
        from ..io import SourceError, read_source

        try:
            text = read_source(path)
            got = any(f.code == code for f in check_source(text, path, Settings(select=[code])).findings)
        except (SourceError, ValueError, RecursionError):
            got = False
        _CONFIRMED[key] = got
    return got


def with_rule(hint: tuple[str, str | None], paths, code: str) -> tuple[str, str | None]:
    """``hint`` with "(static rule CODE)" added when that rule reports one of ``paths``."""
    text, _ = hint
    if any(static_confirms(p, code) for p in dict.fromkeys(p for p in paths if p)):
        return f"{text} (static rule {code}, which `ddp-lint check` reports on this script)", code
    return hint


def _is_write(call: ast.Call) -> bool:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name == "open":
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wx")
    return name in _WRITERS


def _global_guard_of(test: ast.AST) -> str | None:
    try:
        text = ast.unparse(test)
    except Exception:
        return None
    return text if re.search(r"rank|main_process|is_main|master", text, re.I) and not re.search(r"local", text, re.I) \
        else None


def _guarded_writes(b, files) -> list[tuple[Frame, str]]:
    """Writes (``torch.save``, ``open(..., "w")``, ``.write_text``...) under an ``if`` on a job-wide
    rank (not the local one) in the given user files: (site, the condition)."""
    out = []
    for path in dict.fromkeys(files):
        lines = b.src.lines(path)
        if lines is None:
            continue
        try:
            tree = ast.parse("\n".join(lines))
        except (SyntaxError, ValueError, RecursionError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.If):
                continue
            cond = _global_guard_of(node.test)
            if cond is None:
                continue
            for stmt in node.body:
                for c in ast.walk(stmt):
                    if isinstance(c, ast.Call) and _is_write(c):
                        out.append((Frame(path, c.lineno, ""), cond))
    return out


def missing_file_hint(b, rs: list[int]) -> tuple[str, list] | None:
    """(hint, related) when ranks ``rs`` failed with FileNotFoundError on a node where the file's
    writer does not run: written under a job-wide rank guard (``rank == 0``) on another node. The
    writer is known from the ranks' write records (shim_files.py) when its node is part of this
    run; else the script's own writes under such a guard, when the failing ranks run on a node
    without rank 0 (their local rank is not their global rank)."""
    s0 = b.states[rs[0]]
    ex = s0.exception or {}
    msg = ex.get("message") or ""
    if ex.get("type") != "FileNotFoundError" and "No such file or directory" not in msg:
        return None
    m = _MISSING_RE.search(msg)
    missing = m.group(1) if m else None
    places = rank_places(b.ranks)
    failing_nodes = {places.get(r, (None, None))[0] for r in rs}
    rels = []
    writer = None  # (rank, site, condition)
    if missing is not None and b.user is not None:
        want = os.path.basename(missing)
        for r, rd in sorted(b.ranks.items()):
            node = places.get(r, (None, None))[0]
            if node is None or node in failing_nodes:
                continue
            for ev in rd.events:
                p = ev.get("real") or ev.get("path")
                if ev.get("kind") != "write" or not isinstance(p, str) or os.path.basename(p) != want:
                    continue
                frames = [Frame.of(f) for f in ev.get("frames") or [] if isinstance(f, dict)]
                site = b.user.innermost([f for f in frames if f is not None])
                if site is not None:
                    writer = (r, site, b.src.rank_guard(site))
                    break
            if writer is not None:
                break
    if writer is not None:
        r, site, cond = writer
        if cond is not None and re.search(r"local", cond, re.I):
            return None  # once per node already: another cause
        rels.append(b.rel(site, f"{place_text(r, places)} wrote it here" + (f", under `{cond}`" if cond else ""), [r]))
        where = f"{place_text(r, places)} wrote it" + (f" under `{cond}`" if cond else "") + " on another node"
    else:
        # no record of the write here (a per-node run): the failing ranks run on a node without
        # rank 0, and the script writes a file under a job-wide rank guard
        if not all(places.get(r, (None, None))[1] is not None and places[r][1] != r for r in rs):
            return None
        files = [fr.file for fr in s0.stack if b.user is not None and b.user.is_user(fr.file)] + [s0.script]
        writes = _guarded_writes(b, [f for f in files if f])
        if not writes:
            return None
        site, cond = writes[0]
        rels.append(b.rel(site, f"written here only where `{cond}` (rank 0, on the first node)", []))
        where = f"the script writes it under `{cond}` (line {site.line}), on rank 0's node only"
    what = f"`{missing}`" if missing else "the file"
    hint = (f"{what} is missing on {rank_list(rs)}: {where}, and a node-local path (/tmp, a local disk) "
            "exists only on the node that wrote it. Write it once per node (`if local_rank == 0:`, with "
            "local_rank = int(os.environ['LOCAL_RANK']), then a barrier) or write it to a path that every node "
            "shares")
    return hint, rels
