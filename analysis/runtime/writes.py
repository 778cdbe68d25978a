"""DDP908 same-file-from-several-ranks: two ranks wrote one file (shim_files.py records each rank's
``torch.save`` paths and files opened for writing).

A checkpoint saved by every rank, or by every node's local rank 0, to one path on a shared
filesystem: the writes race and the file holds whichever finished last, or a mix of them. Paths
under node-local folders (/tmp, /var/tmp, /dev/shm, $TMPDIR) are one file only for ranks of one
node: ranks of different nodes writing /tmp/x write two files on a real cluster.
"""
from __future__ import annotations

import os
import tempfile

from ..model import Severity
from .hints import with_rule
from .nodes import place_text, rank_places
from .states import Frame, UserCode, rank_list

_SPECIAL = ("/dev/", "/proc/", "/sys/")


def _node_local_dirs() -> list[str]:
    out = ["/tmp/", "/var/tmp/", "/dev/shm/"]
    try:
        out.append(os.path.join(os.path.realpath(tempfile.gettempdir()), ""))
    except OSError:
        pass
    return out


def _writes(b, user: UserCode) -> dict[str, dict[int, tuple[Frame, str, float]]]:
    """{real path: {rank: (user site, via, time)}} (a rank's first write of each path)."""
    out: dict[str, dict[int, tuple[Frame, str, float]]] = {}
    for r, rd in b.ranks.items():
        for ev in rd.events:
            if ev.get("kind") != "write":
                continue
            path = ev.get("real") or ev.get("path")
            if not isinstance(path, str) or path.startswith(_SPECIAL):
                continue
            frames = [Frame.of(f) for f in ev.get("frames") or [] if isinstance(f, dict)]
            site = user.innermost([f for f in frames if f is not None])
            if site is None:
                continue
            out.setdefault(path, {}).setdefault(r, (site, str(ev.get("via") or "open"), float(ev.get("t") or 0)))
    return out


def same_file_writes(b, user: UserCode) -> None:
    places = rank_places(b.ranks)
    multi = len({n for n, _ in places.values() if n is not None}) > 1
    local_dirs = _node_local_dirs()
    for path, by_rank in sorted(_writes(b, user).items()):
        groups = [by_rank]
        if any(path.startswith(d) for d in local_dirs):
            per_node: dict = {}
            for r, w in by_rank.items():
                per_node.setdefault(places.get(r, (None, None))[0], {})[r] = w
            groups = list(per_node.values())
        for g in groups:
            if len(g) < 2:
                continue
            _finding(b, path, g, places, multi)


def _finding(b, path: str, g: dict, places: dict, multi: bool) -> None:
    ranks = sorted(g)
    r0 = ranks[0]
    site, via, _ = g[r0]
    def one(r: int) -> str:
        return place_text(r, places)[len("rank "):] if multi else str(r)

    who = ", ".join(one(r) for r in ranks[:-1]) + f" and {one(ranks[-1])}"
    what = "torch.save()" if via == "torch.save" else "open() for writing"
    by_site: dict[Frame, list[int]] = {}
    for r in ranks:
        by_site.setdefault(g[r][0], []).append(r)
    related = [b.rel(fr, f"{rank_list(rs)} also write{'s' if len(rs) == 1 else ''} {os.path.basename(path)} here", rs)
               for fr, rs in by_site.items() if fr != site]
    nodes = sorted({places.get(r, (None, None))[0] for r in ranks if places.get(r, (None, None))[0] is not None})
    message = (f"ranks {who} {'both' if len(ranks) == 2 else 'all'} write {path} ({what}): the writes race and the file ends up with one "
               "rank's data, or a mix")
    if multi and len(nodes) > 1:
        message += f"; {len(nodes)} nodes write it, one file on a shared filesystem"
    guard = b.src.lines(site.file)
    guard_text = ""
    if guard and 0 < site.line <= len(guard):
        import ast

        try:
            tree = ast.parse("\n".join(guard))
            for node in ast.walk(tree):
                if isinstance(node, ast.If) and node.lineno < site.line <= (node.end_lineno or 0):
                    guard_text = ast.unparse(node.test)
        except (SyntaxError, ValueError, RecursionError):
            pass
    hint, static = ("let one rank write it (`if dist.get_rank() == 0:`), or put the rank in the file name"), None
    if "local_rank" in guard_text.lower() or "local" in guard_text.lower():
        hint = (f"`{guard_text}` is true once per node, not once per job: use the global rank "
                "(`dist.get_rank() == 0`) for files on a shared filesystem")
    elif via == "torch.save":
        hint, static = with_rule((hint, None), [site.file], "DDP202")
    details = {"path": path, "hint": hint,
               "writers": {str(r): {"node": places.get(r, (None, None))[0], "local_rank": places.get(r, (None, None))[1],
                                    "via": g[r][1], "line": g[r][0].line} for r in ranks}}
    if static:
        details["static_rule"] = static
    f = b.finding("DDP908", site, message, ranks, related, details, severity=Severity.WARNING)
    b.add(min(w[2] for w in g.values()) or None, f)
