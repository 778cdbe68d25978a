"""Turn the ranks' states into findings on the user's lines: DDP901-DDP904 (plus the emulation's
DDP905), merged across ranks, root cause first.

One function per finding kind (device clash, mismatch, failure, early exit, hang), in that order,
each over a :class:`Builder` that knows the run's states, the sources and the ranks already
explained by an earlier kind. Names and URLs come from the rule registry (rules/ddp90x_*.py); the
message shown to the user (rank lists, "(emulated on CPU)", "(see DDPxxx)") is assembled once, by
analysis/output.py, from the finding's fields.
"""
from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

from ..model import Finding, Range, Related, Severity
from ..registry import get_rule
from .hints import missing_file_hint, with_rule
from .placement import bypass_texts, finished_past, left_loop, subset_new_group
from .placement import went_past as _went_past
from .placement import where as _where
from .states import (
    _MISMATCH_RE,
    _TIMEOUT_RE,
    Frame,
    RankState,
    UserCode,
    _is_emulated,
    build_states,
    count,
    op_text,
    rank_list,
)


# -- messages ----------------------------------------------------------------------------------
def condense(exc_type: str, message: str, limit: int = 300) -> str:
    """One line: ``Type: reason``. NCCL errors are reduced to their reason."""
    msg = (message or "").strip()
    m = re.search(r"NCCL error in: [^,\n]*,\s*([^\n(]+?)\s*(\(run with NCCL_DEBUG[^)]*\))?,?\s*(NCCL version [^\n]*)?(\n|$)", msg)
    if m:
        reason = m.group(1).strip().rstrip(",")
        last = re.search(r"Last error:\s*\n?\s*(.+)", msg)
        if last:
            reason = f"{reason}: {last.group(1).strip()}"
        msg = f"NCCL {reason}"
    elif _MISMATCH_RE.search(msg):
        fps = fingerprints(msg)
        msg = "Detected mismatch between collectives on ranks" + (f": {mismatch_facts(fps, msg)}" if fps else "")
    elif re.match(r"Caught \w+ in DataLoader worker process \d+", msg):
        worker = re.match(r"Caught \w+ in (DataLoader worker process \d+)", msg).group(1)
        last = [ln for ln in msg.splitlines() if ln.strip()][-1].strip()
        if last.startswith(exc_type + ":"):
            last = last[len(exc_type) + 1:].strip()
        elif last == exc_type:
            last = ""
        msg = f"{last} (raised in {worker})".strip()
    elif _UNUSED_RE.search(msg):
        names = unused_parameters(msg)
        msg = ("DDP's reducer found parameters that received no gradient in the previous iteration"
               + (f" ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})" if names else "")
               + ": they were not used to compute the loss")
    else:
        lines = [ln for ln in msg.splitlines() if ln.strip()]
        msg = lines[0].strip() if lines else ""
        msg = re.sub(r"\[[^\]]*\.(cpp|cc|h|hpp):\d+\]\s*", "", msg)  # C++ source locations
    if len(msg) > limit:
        msg = msg[: limit - 1] + "…"
    return f"{exc_type}: {msg}" if msg else exc_type


_FP_RE = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), OpType=(\w+)"
                    r"(?:, TensorShape=\[([^\]]*)\])?(?:, TensorDtypes=(\w+))?")
_UNUSED_RE = re.compile(r"Expected to have finished reduction in the prior iteration", re.I)


def fingerprints(msg: str) -> dict[int, dict]:
    """DETAIL's collective fingerprints per rank: {rank: {op, shape, dtype, seq}}."""
    out = {}
    for m in _FP_RE.finditer(msg or ""):
        out[int(m.group(1))] = {"seq": int(m.group(2)), "op": m.group(3).lower(), "shape": m.group(4),
                                "dtype": m.group(5)}
    return out


def mismatch_facts(fps: dict[int, dict], msg: str = "") -> str:
    """``rank 0 allreduce of shape [5] vs rank 1 allreduce of shape [4]``: each rank's own
    fingerprint (the one its own error names first); torch's "differ in" text otherwise."""
    parts = []
    for r, fp in sorted(fps.items()):
        shape = f" of shape [{fp['shape']}]" if fp.get("shape") is not None else ""
        parts.append(f"rank {r} {fp['op']}{shape}")
    text = " vs ".join(parts)
    m = re.search(r"Collectives differ in the following aspects:\s*(.+)", msg or "")
    if m and len(fps) < 2:
        aspect = re.sub(r"\s+", " ", m.group(1)).strip()
        aspect = re.sub(r"^Tensor\s+", "", aspect)
        aspect = re.sub(r"(\S)vs\s", r"\1 vs ", aspect)
        text += f" ({aspect[:120]})"
    return text


def unused_parameters(msg: str) -> list[str]:
    m = re.search(r"Parameters which did not receive grad for rank \d+:\s*([^\n]+)", msg or "")
    return [n.strip() for n in m.group(1).split(",") if n.strip()] if m else []


def _is_are(ranks) -> str:
    return "is" if len(ranks) == 1 else "are"


# -- ranges ------------------------------------------------------------------------------------
class Sources:
    def __init__(self):
        self._cache: dict[str, list[str] | None] = {}

    def lines(self, path: str) -> list[str] | None:
        if path not in self._cache:
            from ..io import read_text_lenient

            # a path from the ranks' logs (or a merged report): only a regular file is read
            text = read_text_lenient(path)
            self._cache[path] = text.splitlines() if text is not None else None
        return self._cache[path]

    def range_of(self, fr: Frame) -> Range:
        line0 = max(fr.line - 1, 0)
        lines = self.lines(fr.file)
        text = lines[line0] if lines is not None and line0 < len(lines) else None
        if text is None:
            return Range.of(line0, 0, line0, 0)
        if fr.col is not None and fr.end_col is not None and (fr.end_line in (None, fr.line)):
            # traceback columns are UTF-8 byte offsets
            b = text.encode("utf-8")
            sc = len(b[: fr.col].decode("utf-8", "ignore"))
            ec = len(b[: fr.end_col].decode("utf-8", "ignore"))
            if ec > sc:
                return Range.of(line0, sc, line0, ec)
        start = len(text) - len(text.lstrip())
        end = len(text.rstrip())
        if end <= start:
            return Range.of(line0, 0, line0, len(text))
        return Range.of(line0, start, line0, end)

    def script_end(self, script: str | None) -> Frame | None:
        """The script's last statement (descending into a final ``if __name__ == "__main__":``):
        where a rank that finished the script ended."""
        if not script:
            return None
        lines = self.lines(script)
        if lines is None:
            return None
        try:
            tree = ast.parse("\n".join(lines))
        except (SyntaxError, ValueError, RecursionError):
            return None
        body = tree.body
        node = None
        while body:
            node = body[-1]
            if isinstance(node, ast.If) and not node.orelse:
                body = node.body
                continue
            break
        if node is None:
            return None
        return Frame(script, node.lineno, "<module>")

    def under_rank_guard(self, fr: Frame | None) -> bool:
        return self.rank_guard(fr) is not None

    def rank_guard(self, fr: Frame | None) -> str | None:
        """The text of the innermost ``if`` around ``fr`` whose test mentions a rank, or None."""
        if fr is None:
            return None
        lines = self.lines(fr.file)
        if lines is None:
            return None
        try:
            tree = ast.parse("\n".join(lines))
        except (SyntaxError, ValueError, RecursionError):
            return None
        found = None
        for node in ast.walk(tree):
            if isinstance(node, (ast.If, ast.IfExp)) and node.lineno < fr.line <= (node.end_lineno or 0):
                try:
                    test = ast.unparse(node.test)
                except Exception:
                    continue
                if re.search(r"rank", test, re.I) and (found is None or node.lineno > found[0]):
                    found = (node.lineno, test)
        return found[1] if found else None


# -- findings ----------------------------------------------------------------------------------
@dataclass
class Analysis:
    findings: list[Finding]
    states: dict[int, RankState]
    notes: list[str]


def rule_meta(code: str) -> tuple[str, str | None]:
    """(name, docs URL) of a runtime code, from the rule registry (rules/ddp90x_*.py)."""
    rule = get_rule(code)
    if rule is None:
        return code.lower(), None
    return rule.name, rule.url()


class Builder:
    """What every finding kind needs: the states, the sources, the findings so far (with their
    times, for root-cause-first order) and the ranks an earlier kind already explained."""

    def __init__(self, ranks: dict, states: dict[int, RankState], *, emulated: bool, timed_out: bool,
                 timeout: float):
        self.ranks = ranks
        self.states = states
        self.src = Sources()
        self.emulated = emulated
        self.timed_out = timed_out
        self.timeout = timeout
        self.items: list[tuple[float, int, Finding]] = []  # (time, order, finding)
        self.explained: set[int] = set()
        self.end_t = max((rd.last_t for rd in ranks.values()), default=0.0) + 1.0
        self.waiting = {r: s for r, s in states.items() if s.waiting and s.op_site is not None}
        self.user: UserCode | None = None
        self.deadlock: dict | None = None  # rank -> why its collective cannot complete

    def t_of(self, rs) -> float:
        return min(self.states[r].t or self.end_t for r in rs)

    def add(self, t, f: Finding) -> None:
        if self.emulated:
            f.emulated = True
        self.items.append((t if t is not None else self.end_t, len(self.items), f))

    def finding(self, code, fr: Frame, message, ranks_, related=(), details=None,
                severity=Severity.ERROR) -> Finding:
        name, url = rule_meta(code)
        return Finding(
            code=code, name=name, message=message, severity=severity,
            range=self.src.range_of(fr), filename=os.path.abspath(fr.file), related=tuple(related),
            url=url, ranks=tuple(sorted(ranks_)), details=details or {},
        )

    def rel(self, fr: Frame, msg: str, ranks_) -> Related:
        return Related(range=self.src.range_of(fr), message=msg, filename=os.path.abspath(fr.file),
                       ranks=tuple(sorted(ranks_)))

    def waiting_related(self, exclude: set[int], primary: Frame | None):
        groups: dict[tuple, list[int]] = {}
        for r, s in self.waiting.items():
            if r in exclude:
                continue
            groups.setdefault((s.op, s.op_site), []).append(r)
        out, texts = [], []
        for (op, fr), rs in sorted(groups.items(), key=lambda kv: min(kv[1])):
            out.append(self.rel(fr, f"{rank_list(rs)} {_is_are(rs)} waiting in {op_text(op)} here", rs))
            texts.append(f"{rank_list(rs)} {_is_are(rs)} waiting in {op_text(op)} {_where(fr, primary)}")
        return out, texts

    def result(self) -> Analysis:
        self.items.sort(key=lambda x: (x[0], x[1]))
        notes: list[str] = []
        for s in self.states.values():
            for n in s.notes:
                if n not in notes:
                    notes.append(n)
        return Analysis([f for _, _, f in self.items], self.states, notes)


def analyse(ranks: dict, *, user: UserCode, timed_out: bool, timeout: float, emulated: bool,
            output: str = "", deadlock: dict | None = None) -> Analysis:
    """``deadlock``: the launcher stopped the run before the timeout because no rank's collective
    could complete (launcher.deadlock says why): a hang all the same."""
    b = Builder(ranks, build_states(ranks, user, output), emulated=emulated, timed_out=timed_out,
                timeout=timeout)
    b.user = user
    b.deadlock = deadlock
    for kind in (device_clashes, mismatches, failures, early_exits, hangs, silent_divergences):
        kind(b)
    from .writes import same_file_writes  # DDP908, from the files the ranks wrote

    same_file_writes(b, user)
    return b.result()


def device_clashes(b: Builder) -> None:
    """Emulated NCCL errors (DDP905 and whatever code the emulation sets)."""
    states = b.states
    groups: dict[tuple, list[int]] = {}
    for r, s in states.items():
        if s.status == "exception" and _is_emulated(s.exception) and s.site is not None:
            extra = s.exception.get("extra") or {}
            code = str(extra.get("code") or "DDP905")
            msg = s.exception.get("message") or s.exception.get("type")
            msg = msg.strip().splitlines()[0] if msg.strip() else "emulated NCCL error"
            msg = _ORDINAL_RE.sub(")", msg)  # one finding for every rank that asked for a missing GPU
            groups.setdefault((code, s.site, msg), []).append(r)
    for (code, fr, msg), rs in groups.items():
        missing = sorted({str((states[r].exception.get("extra") or {}).get("device")) for r in rs
                          if (states[r].exception.get("extra") or {}).get("kind") == "invalid-device-ordinal"},
                         key=lambda d: (len(d), d))
        if missing and msg.endswith(")"):
            msg = msg[:-1] + f"; {', '.join(missing)} {'does' if len(missing) == 1 else 'do'} not exist)"
        waiting_rel, texts = b.waiting_related(set(rs), fr)
        if texts:
            msg = f"{rank_list(rs)}: {msg}; " + "; ".join(texts)
        inits: dict[Frame, list[int]] = {}
        for r in rs:
            f0 = Frame.of(states[r].init)
            if f0 is not None:
                inits.setdefault(f0, []).append(r)
        related = [b.rel(f0, f"process group initialised here ({rank_list(irs)})", irs) for f0, irs in inits.items()]
        related += waiting_rel
        details = {"tracebacks": {str(r): states[r].exception.get("text", "") for r in rs},
                   "exception": states[rs[0]].exception.get("type")}
        hint = _hint(code, states[rs[0]], b.src)
        if hint:
            details["hint"], details["static_rule"] = hint
        extra = states[rs[0]].exception.get("extra") or {}
        details.update({k: v for k, v in extra.items() if k != "code"})
        f = b.finding(code, fr, msg, rs, related, details)
        f.emulated = True
        b.add(b.t_of(rs), f)
        b.explained.update(rs)
        if texts:
            b.explained.update(r for r in b.waiting if r not in rs)


_ORDINAL_RE = re.compile(r"; cuda:\d+ does not exist\)$")


def mismatches(b: Builder) -> None:
    """Ranks in different collectives (DETAIL reports it, or the log shows it): DDP902."""
    states = b.states
    in_coll = {r: s for r, s in states.items() if r not in b.explained and s.op is not None and s.op_site is not None
               and (s.waiting or (s.status == "exception" and (
                   _MISMATCH_RE.search((s.exception or {}).get("message") or "") or s.op_raised is not None
                   and _MISMATCH_RE.search(s.op_raised))))}
    detail_mismatch = any(_MISMATCH_RE.search((s.exception or {}).get("message") or "") for s in in_coll.values())
    by_op: dict[tuple, list[int]] = {}
    for r, s in in_coll.items():
        by_op.setdefault((s.op, s.op_site), []).append(r)
    ops = {op for op, _ in by_op}
    mismatched = [r for r, s in in_coll.items() if _MISMATCH_RE.search((s.exception or {}).get("message") or "")]
    if not (len(ops) > 1 or (detail_mismatch and (len(by_op) > 1 or len(mismatched) > 1))):
        return
    torch_msg = next(((states[r].exception or {}).get("message") for r in sorted(mismatched)), None)
    fps = {}
    for r in sorted(mismatched):  # each rank's own fingerprint, from its own error
        own = fingerprints((states[r].exception or {}).get("message") or "").get(r)
        if own:
            fps[r] = own
    if len(fps) < 2:
        fps = fingerprints(torch_msg or "")
    ordered = sorted(by_op.items(), key=lambda kv: (len(kv[1]), kv[0][1].file, kv[0][1].line))
    went_past = _went_past(b, ordered)
    if went_past is not None:  # the collective the other ranks went past leads
        ordered.sort(key=lambda kv: kv[0] != went_past[0])
    (pop, pfr), prs = ordered[0]
    others = ordered[1:]
    if not others:  # the same call on every rank, with different tensors (DETAIL's fingerprints)
        parts = [f"{rank_list(prs)} call {op_text(pop)} here with different arguments"
                 + (f": {mismatch_facts(fps, torch_msg)}" if fps else "")]
    else:
        parts = [f"{rank_list(prs)} {_is_are(prs)} in {op_text(pop)} here"]
    related = []
    for (op, fr), rs in others:
        parts.append(f"{rank_list(rs)} {_is_are(rs)} in {op_text(op)} {_where(fr, pfr)}")
        related.append(b.rel(fr, f"{rank_list(rs)} {_is_are(rs)} in {op_text(op)} here", rs))
    if went_past is not None:
        _, past_rs, bys = went_past
        text, rels = bypass_texts(b, bys, past_rs, pop, pfr)
        parts.append(text)
        related.extend(rels)
    all_rs = [r for _, rs in ordered for r in rs]
    ng = subset_new_group(b) if any(states[r].op == "new_group" for r in all_rs) else None
    if ng is not None:
        parts.append(ng[0])
        related.extend(ng[1])
    if others and fps:
        parts.append(f"torch saw {mismatch_facts(fps)}")
    hint = None
    guard = b.src.rank_guard(pfr)
    if guard is None and went_past is not None:
        guard = next((x.condition for x in went_past[2] if x.kind == "if" and re.search(r"rank", x.condition, re.I)),
                     None)
    if guard is not None:
        hint = (f"{op_text(pop)} runs under a rank condition, so only some ranks call it: every rank must call "
                "the same collectives in the same order (static rule DDP104)")
        if re.search(r"local", guard, re.I):
            hint = (f"{op_text(pop)} runs under `{guard}`, which is true on one rank per node, not once per job: "
                    "every rank must call the same collectives in the same order (static rule DDP104)")
    details = {"ops": {str(r): states[r].op for r in all_rs}, "hint": hint, "static_rule": "DDP104" if hint else None}
    if {op for (op, _), _ in ordered} <= _P2P:
        # point-to-point calls are rank-dependent by nature: what must agree is the pairing
        details["hint"] = ("every send() needs a matching recv() on its peer: the peer ranks (dst/src), the tag and "
                           "the tensor's size must agree on both sides")
        details["static_rule"] = None
    errs = {str(r): (states[r].exception or {}).get("message") for r in all_rs if states[r].exception}
    if errs:
        details["errors"] = errs
    if detail_mismatch:
        details["detected_by"] = "TORCH_DISTRIBUTED_DEBUG=DETAIL"
        details["torch_message"] = torch_msg
    roots = root_clash(states, all_rs) if hint is None else None
    if roots:
        parts.append(roots[0])
        details["hint"], details["static_rule"] = roots[1], "DDP108"
    if pop == "DistributedDataParallel.forward" and guard is not None:
        details["hint"] = ("a forward through the DDP wrapper on some ranks only (an evaluation on rank 0) runs DDP's "
                           "own collectives (the buffer broadcast) that the other ranks never join: evaluate with "
                           "model.module(...) there, or run the evaluation on every rank (static rule DDP104)")
    if details["hint"] is None and went_past is not None and all(x.kind != "if" for x in went_past[2]):
        details["hint"] = ("a decision taken on one rank only (a NaN loss, an empty batch or shard, a failed check) "
                           "made it skip a collective that its peers made: take such decisions on every rank "
                           "together (all_reduce the flag first), or make the collective unconditional")
    if details["hint"] is None and any(states[r].op == "backward" for r in all_rs):
        details["hint"] = ("one side is DDP's own gradient all-reduce in backward(): a collective that only "
                           "some ranks run between forward and backward (logging a metric under a rank "
                           "condition) meets it; run it on every rank, or after the optimizer step")
    if ng is not None:
        details["hint"], details["static_rule"] = NEW_GROUP_HINT, "DDP104"
    t = min((states[r].t for r in all_rs if states[r].t), default=None)
    b.add(t, b.finding("DDP902", pfr, ", ".join(parts), all_rs, related, details))
    b.explained.update(all_rs)


_P2P = {"send", "recv", "isend", "irecv"}
NEW_GROUP_HINT = ("call new_group() on every rank, in the same order and outside any rank condition, even on "
                  "the ranks left out of the new group (they get a non-member handle), and use the group under "
                  "the condition instead (static rule DDP104, which `ddp-lint check` reports without running)")


def _failure_groups(b: Builder) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = {}
    for r, s in b.states.items():
        if r in b.explained or s.site is None:
            continue
        if s.status == "exception" and not s.consequential:
            ex = s.exception or {}
            groups.setdefault(("exc", condense(ex.get("type", "Exception"), ex.get("message", "")), s.site), []).append(r)
        elif s.status == "crashed":
            groups.setdefault(("crash", f"crashed: {s.fatal}", s.site), []).append(r)
        elif s.status == "exited" and s.exit_code not in (0, None) and not b.waiting:
            msg = f"exited with status {s.exit_code} ({s.via})"
            if s.argparse and s.exit_code == 2:
                msg = f"exited with status 2: its argument parser said: {str(s.argparse.get('message'))[:300]}"
            groups.setdefault(("exit", msg, s.site), []).append(r)
        elif s.status == "killed" and (s.exit_code or 0) > 0 and not b.waiting:  # signals: early_exits
            sig = ""
            if s.exit_code is not None and s.exit_code < 0:
                try:
                    import signal as _signal

                    sig = f", killed by {_signal.Signals(-s.exit_code).name}"
                except ValueError:
                    pass
            groups.setdefault(("killed", f"ended without a Python traceback (exit code {s.exit_code}{sig}); "
                                         f"{_last_seen_text(s)}", s.site), []).append(r)
    return groups


def failures(b: Builder) -> None:
    """Rank exceptions and crashes (root causes), each with the ranks that waited for it: DDP901."""
    states = b.states
    groups = _failure_groups(b)
    stopped = [] if b.timed_out else sorted(r for r, s in states.items() if s.status in ("terminated", "hung")
                                            and not s.waiting and s.site is not None and r not in b.explained)
    for (kind, msg, fr), rs in sorted(groups.items(), key=lambda kv: b.t_of(kv[1])):
        rel_list, texts = b.waiting_related(set(rs), fr)
        for r2 in stopped:  # busy elsewhere (not yet in a collective) when torchrun ended the job
            rel_list.append(b.rel(states[r2].site, f"{rank_list([r2])} was still running here (outside any "
                                                   f"collective) when the job was stopped after {rank_list(rs)} failed",
                                  [r2]))
        stopped = []
        s0 = states[rs[0]]
        in_op = f" in {op_text(s0.op)}" if s0.op and s0.op_site is not None and s0.op_site.line == fr.line else ""
        message = f"{rank_list(rs)}: {msg}{in_op}"
        if texts:
            message += "; " + "; ".join(texts)
        details = {"kind": kind}
        ended = Frame.of((s0.exception or {}).get("exit_site")) if kind == "exc" else None
        if ended is not None and b.user is not None and b.user.is_user(ended.file):
            rel_list.append(b.rel(ended, f"{rank_list(rs)} caught it and ended with sys.exit({s0.exit_code}) here", rs))
        if kind == "exc":
            details["exception"] = (s0.exception or {}).get("type")
            details["torch_message"] = (s0.exception or {}).get("message")
            details["tracebacks"] = {str(r): (states[r].exception or {}).get("text", "") for r in rs}
            if s0.worker is not None:
                loop = _exception_user_site(s0, b)
                if loop is not None and loop != fr:
                    rel_list.append(b.rel(loop, f"{rank_list(rs)} {_is_are(rs)} iterating the DataLoader here "
                                                "(the error was raised in its worker process)", rs))
        elif kind == "exit" and s0.argparse:
            details["argparse"] = s0.argparse.get("message")
        elif kind == "crash":
            details["stacks"] = {str(r): b.ranks[r].stack_fatal for r in rs}
        hint = _hint("DDP901", s0, b.src)
        missing = missing_file_hint(b, rs) if not hint else None
        if missing is not None:
            details["hint"] = missing[0]
            rel_list.extend(missing[1])
        elif hint:
            details["hint"] = hint[0]
            if hint[1]:
                details["static_rule"] = hint[1]
        elif world_size_hint(fr, b.src, len(b.states)):
            details["hint"] = world_size_hint(fr, b.src, len(b.states))
        b.add(b.t_of(rs), b.finding("DDP901", fr, message, rs, rel_list, details))
        b.explained.update(rs)
        b.explained.update(r for r in b.waiting if r not in rs)


def early_exits(b: Builder) -> None:
    """A rank exited, or was killed by a signal, while others still wait for it: DDP904."""
    killed = any(s.status == "killed" and (s.exit_code or 0) < 0 for s in b.states.values())
    if not b.waiting and not killed:
        return
    exited = {}
    for r, s in b.states.items():
        if r in b.explained or s.status not in ("exited", "ok", "killed"):
            continue
        if s.site is None and s.status != "killed":
            s.site = b.src.script_end(s.script)
        if s.site is not None:
            exited[r] = s
    found = False
    for r, s in sorted(exited.items()):
        static = None
        rel_list, texts = b.waiting_related({r}, s.site)
        signal_death = s.status == "killed" and (s.exit_code or 0) < 0
        if not texts and signal_death:
            # the others may not show what they waited in (torchrun tore them down first): they
            # were stopped because this rank died
            # (a peer whose stack did not come in time on a loaded machine: the sampler's last sample)
            for r2, s2 in sorted(b.states.items()):
                at = s2.site or s2.seen
                if r2 != r and at is not None and (s2.status in ("terminated", "hung") or s2.consequential):
                    rel_list.append(b.rel(at, f"{rank_list([r2])} was stopped here after {rank_list([r])} died", [r2]))
                    texts.append(f"{rank_list([r2])} was stopped {_where(at, s.site)}")
        if not texts and not signal_death:
            continue
        if s.status == "killed":
            message = f"{rank_list([r])} {_killed_text(s.exit_code)}; {_last_seen_text(s)}" + (
                ", while " + "; ".join(texts) if texts else "")
        else:
            how = {"return": "finished the script", "SystemExit": "called sys.exit",
                   "os._exit": "called os._exit"}.get(s.via or "", "exited")
            where = "here" if s.via != "return" else ("after its last collective here" if s.collectives else "here")
            message = f"{rank_list([r])} {how} (status {s.exit_code}) {where} while " + "; ".join(texts)
            ng = subset_new_group(b) if s.via == "return" else None
            if ng is not None:
                message += ": " + ng[0]
                rel_list.extend(ng[1])
                static = (NEW_GROUP_HINT, "DDP104")
            left = left_loop(b, r, s, texts, rel_list) if s.via == "return" and ng is None else None
            if left is None and s.via == "return" and ng is None:
                left = finished_past(b, r, s, rel_list)
            if left is not None:
                message, site = left
                last = ("made its last collective call here, then finished the script" if s.collectives
                        else "finished the script here")
                rel_list.append(b.rel(s.site, f"{rank_list([r])} {last}", [r]))
                # the peers' wait at the finding's own line is the finding itself, not a related line
                rel_list = [x for x in rel_list if not (x.filename == os.path.abspath(site.file)
                                                        and x.range.start.line == site.line - 1
                                                        and r not in x.ranks)]
                s.site = site
                static = _exit_rule(message)
        details = {"exit_code": s.exit_code, "via": s.via or s.status,
                   **({"last_seen": {**s.last_seen, "age": s.last_seen_age}} if s.last_seen else {}),
                   "hint": "every rank must take part in every collective; a rank that leaves early "
                           "makes the others wait until the timeout"}
        if static is not None:
            details["hint"], details["static_rule"] = static
        b.add(s.t, b.finding("DDP904", s.site, message, [r], rel_list, details))
        b.explained.add(r)
        found = True
    if found:
        b.explained.update(b.waiting)


def hangs(b: Builder) -> None:
    """Ranks still blocked when the timeout fired: DDP903."""
    states, timeout = b.states, b.timeout
    hung = {r: s for r, s in states.items() if r not in b.explained and s.status == "hung"}
    hung.update({r: s for r, s in states.items() if r not in b.explained and s.consequential
                 and _TIMEOUT_RE.search((s.exception or {}).get("message") or "")})
    if not (hung and (b.timed_out or b.deadlock or any(s.consequential for s in hung.values()))):
        return
    if any(s.consequential for s in hung.values()):
        # torch's own timeout fired on a waiting rank: a rank torchrun then stopped while it was busy
        # outside any collective is the one the others waited for
        hung.update({r: s for r, s in states.items() if r not in b.explained and s.status == "terminated"
                     and s.op is None and s.site is not None})
    locs: dict[tuple, list[int]] = {}
    for r, s in hung.items():
        fr = s.op_site if s.op else s.site
        if fr is None:
            continue
        locs.setdefault((s.op, fr), []).append(r)
    # ranks outside any collective first: they are what the others wait for
    ordered = sorted(locs.items(), key=lambda kv: (kv[0][0] is not None, min(kv[1])))
    running = any(op is None for (op, _), _ in ordered)
    for i, ((op, fr), rs) in enumerate(ordered):
        if running and op is not None:
            continue  # waiting for a rank that is still running elsewhere: a related location of its finding
        others = [kv for j, kv in enumerate(ordered) if j != i]
        related = []
        texts = []
        for (oop, ofr), ors in others:
            what = f"waits in {op_text(oop)}" if oop else "is still running outside any collective"
            if len(ors) > 1:
                what = what.replace("waits", "wait").replace("is still", "are still")
            related.append(b.rel(ofr, f"{rank_list(ors)} {what} here", ors))
            texts.append(f"{rank_list(ors)} {what} {_where(ofr, fr)}")
        if op is None:
            fn = fr.function if fr.function and fr.function != "<module>" else None
            when = f"after the {timeout:g} s timeout" if b.timed_out else "when torch's timeout fired on the others"
            verb = _is_are(rs) if b.timed_out else ("was" if len(rs) == 1 else "were")
            message = (f"{rank_list(rs)} {verb} still running here"
                       f"{f' (in {fn}())' if fn else ''}, outside any collective, {when}")
            waited = [states[r2].exception for (oop, _), ors in others if oop is not None for r2 in ors
                      if states[r2].consequential and states[r2].exception]
            if not b.timed_out and waited:
                message += f" ({condense(waited[0].get('type', 'Exception'), waited[0].get('message', ''), 160)})"
        elif b.deadlock and not b.timed_out:
            why = [] if root_clash(states, rs) else sorted({b.deadlock[r] for r in rs if r in b.deadlock})
            message = (f"{rank_list(rs)} {'hangs' if len(rs) == 1 else 'hang'} in {op_text(op)} here: the call cannot "
                       f"complete{' (' + '; '.join(why) + ')' if why else ''}, found without waiting for the "
                       f"{timeout:g} s timeout")
        elif b.timed_out:
            message = f"{rank_list(rs)} {'hangs' if len(rs) == 1 else 'hang'} in {op_text(op)} here: no progress within the {timeout:g} s timeout"
        else:  # torch gave up first (its own timeout or monitoredBarrier): say what it said, not ours
            ex = states[rs[0]].exception or {}
            message = (f"{rank_list(rs)} {'was' if len(rs) == 1 else 'were'} stuck in {op_text(op)} here until torch "
                       f"gave up ({condense(ex.get('type', 'Exception'), ex.get('message', ''), 160)})")
        roots = root_clash(states, rs) if op is not None else None
        if roots:
            message += f"; {roots[0]}"
        if texts:
            message += "; " + "; ".join(texts)
        ng = subset_new_group(b) if op == "new_group" else None
        if ng is not None:
            message += ": " + ng[0]
            related.extend(ng[1])
        details = {"timeout": timeout,
                   "stacks": {str(r): b.ranks[r].stack_usr1 or b.ranks[r].stack_term
                              for r in sorted(rs + ([r2 for (oop, _), ors in others if oop is not None for r2 in ors]
                                                    if running else []))},
                   "state": "running" if op is None else "in-collective"}
        ws = world_size_hint(fr, b.src, len(states))
        if ng is not None:
            details["hint"], details["static_rule"] = NEW_GROUP_HINT, "DDP104"
        elif ws:
            details["hint"] = ws
        elif roots:
            details["hint"], details["static_rule"] = roots[1], "DDP108"
        elif op is not None and not others:
            nccl = any(str((states[r].init or {}).get("backend", "")).lower().find("nccl") >= 0 for r in rs)
            if nccl:
                details["hint"] = ("all ranks wait in the same collective: ranks that share one GPU (no "
                                   "torch.cuda.set_device(local_rank)) hang like this (static rule DDP001)")
                details["static_rule"] = "DDP001"
        b.add(None, b.finding("DDP903", fr, message, rs, related, details))
    b.explained.update(hung)


def silent_divergences(b: Builder) -> None:
    """A run that otherwise went well: DDP models whose replicas differ across ranks at the end
    (DDP906), and DDP models whose gradients were never all-reduced (DDP907)."""
    if b.items:
        return
    models: dict[int, dict[int, dict]] = {}  # model index -> rank -> its ddp_state record
    for r, s in b.states.items():
        for ev in s.ddp_states:
            if isinstance(ev.get("model"), int) and "params" in ev:
                models.setdefault(ev["model"], {})[r] = ev
    for idx, per_rank in sorted(models.items()):
        site = next((Frame.of(ev.get("site")) for _, ev in sorted(per_rank.items()) if Frame.of(ev.get("site"))), None)
        if site is None:
            continue
        never = sorted(r for r, ev in per_rank.items() if ev.get("grads") and not ev.get("synced"))
        if never:
            held = [Frame.of(per_rank[r].get("no_sync")) for r in never if per_rank[r].get("no_sync_n")]
            held = [fr for fr in held if fr is not None and (b.user is None or b.user.is_user(fr.file))]
            details = {"model": idx, "synced_forwards": {str(r): per_rank[r].get("synced") for r in sorted(per_rank)},
                       "hint": "call the DDP object itself (ddp_model(x), not ddp_model.module(x)), and leave no_sync() "
                               "for the accumulation steps only"}
            if held and len(set(held)) == 1:
                # no_sync() was entered around every forward: the finding goes on that no_sync()
                n = max(per_rank[r].get("no_sync_n") or 0 for r in never)
                msg = (f"{rank_list(never)}: no_sync() here was held around every forward of the DDP model wrapped "
                       f"{_where(site, held[0])} ({count(n, 'time')}, and never left for a synchronising step), so "
                       "DDP never all-reduced its gradients and each rank trained on its own")
                details["no_sync_entered"] = n
                details["hint"] = ("no_sync() is for the accumulation steps only: run the last micro-batch of each step "
                                   "(the one before optimizer.step()) outside it, so that its backward all-reduces the "
                                   "accumulated gradients")
                rel = (b.rel(site, "the DDP model was wrapped here", never),)
                b.add(None, b.finding("DDP907", held[0], msg, never, rel, details, severity=Severity.WARNING))
            else:
                msg = (f"{rank_list(never)}: the DDP model wrapped here never synchronised its gradients: backward "
                       "ran, but no forward through the DDP wrapper had gradient sync on (no_sync() throughout, or "
                       "the wrapped module was called directly), so each rank trained on its own gradients")
                b.add(None, b.finding("DDP907", site, msg, never, (), details, severity=Severity.WARNING))
            continue  # its replicas diverging (DDP906) is this finding's consequence, not a second one
        if len(per_rank) < 2 or len({ev.get("when") for ev in per_rank.values()}) > 1:
            continue
        if any(ev.get("manual") for ev in per_rank.values()):
            _manual_divergence(b, idx, site, per_rank)
            continue
        ranks_sorted = sorted(per_rank)
        first, differ = None, []
        for name, h in per_rank[ranks_sorted[0]]["params"]:
            other = [r for r in ranks_sorted[1:] if dict(map(tuple, per_rank[r]["params"])).get(name) != h]
            if other:
                first, differ = name, other
                break
        if first is None:
            continue
        when = {"end": "at the end of the script", "destroy_process_group": "at destroy_process_group()"}.get(
            per_rank[ranks_sorted[0]].get("when"), "at the end")
        msg = (f"the replicas of the DDP model wrapped here diverged: parameter {first!r} differs between "
               f"{rank_list([ranks_sorted[0]])} and {rank_list(differ)} {when}")
        details = {"model": idx, "parameter": first, "when": per_rank[ranks_sorted[0]].get("when"),
                   "hint": "DDP keeps replicas equal only if every rank starts from the same weights and applies "
                           "the same all-reduced gradients: look for rank-dependent updates (an optimizer step or "
                           "a parameter change outside the DDP forward/backward, a buffer, no_sync())"}
        b.add(None, b.finding("DDP906", site, msg, ranks_sorted, (), details, severity=Severity.WARNING))


def _manual_divergence(b: Builder, idx: int, site: Frame, per_rank: dict[int, dict]) -> None:
    """A module the script keeps in step by all-reducing its gradients by hand (shim_checks.py): its
    parameters whose gradients were all-reduced must be equal on the ranks of the group they were
    reduced over, as a DDP model's replicas are (DDP906). Parameters never reduced (a model-parallel
    shard) were not recorded."""
    buckets: dict[tuple, dict[int, str]] = {}  # (parameter, its group's ranks or None) -> rank -> checksum
    order: list[str] = []
    for r, ev in sorted(per_rank.items()):
        groups = ev.get("groups") if isinstance(ev.get("groups"), dict) else {}
        for item in ev.get("params") or []:
            if not (isinstance(item, list) and len(item) == 2):
                continue
            name, h = item
            g = groups.get(name)
            if g == "?":
                continue  # a group this rank could not name: not compared
            key = (name, tuple(g) if isinstance(g, list) else None)
            if key[1] is not None and r not in key[1]:
                continue
            buckets.setdefault(key, {})[r] = h
            if name not in order:
                order.append(name)
    for name in order:
        for (n, g), per in buckets.items():
            if n != name or len(per) < 2 or len(set(per.values())) < 2:
                continue
            rs = sorted(per)
            ref = per[rs[0]]
            differ = [r for r in rs[1:] if per[r] != ref]
            when = {"end": "at the end of the script", "destroy_process_group": "at destroy_process_group()"}.get(
                per_rank[rs[0]].get("when"), "at the end")
            msg = (f"the script all-reduces this module's gradients by hand (manual data parallelism, no DDP), but "
                   f"its parameters diverged: {name!r} differs between {rank_list([rs[0]])} and {rank_list(differ)} "
                   f"{when}; averaged gradients keep replicas equal only if they start equal")
            details = {"model": idx, "parameter": name, "manual": True, "when": per_rank[rs[0]].get("when"),
                       "group": list(g) if g else None,
                       "hint": "start every rank from the same weights: seed every rank the same before building "
                               "the model, or broadcast the parameters from rank 0 once "
                               "(`for p in model.parameters(): dist.broadcast(p.data, src=0)`); or wrap the model in "
                               "DistributedDataParallel, which broadcasts them and averages the gradients"}
            b.add(None, b.finding("DDP906", site, msg, rs, (), details, severity=Severity.WARNING))
            return


def _exit_rule(message: str) -> tuple[str, str]:
    """(hint, static rule) for a rank that finished while its peers wait, placed by placement.py:
    a collective under a rank condition (DDP104), or an early exit under a condition that differs
    between ranks (DDP107); ``ddp-lint check`` finds both without running the script."""
    if " runs only on the ranks where " in message:
        return ("a collective under a rank condition is called by some ranks only, and the others never "
                "join it: call it on every rank (take only the rank-0 work, printing or saving, under the "
                "condition) (static rule DDP104, which `ddp-lint check` reports without running)", "DDP104")
    return ("an early exit (`return`, `continue`, `break`, a loop that runs out) under a condition that "
            "differs between ranks skips a collective the other ranks make: decide on every rank together "
            "(all_reduce the flag), or give every rank the same number of steps (static rule DDP107, which "
            "`ddp-lint check` reports without running)", "DDP107")


def _last_seen_text(s: RankState) -> str:
    """``last seen here, in all_reduce(), 0.4 s before it was killed``: where the freshest evidence
    (the collective log or the 0.2 s sampler, states._freshest) put a rank that died without a
    traceback, and how old that evidence is."""
    ls = s.last_seen or {}
    what = ""
    if ls.get("source") in ("call", "return") and ls.get("op"):
        what = f", {'entering' if ls['source'] == 'call' else 'returning from'} {op_text(ls['op'])}"
    died = "it was killed" if (s.exit_code or 0) < 0 else "it ended"
    age = f", {s.last_seen_age:.1f} s before {died}" if s.last_seen_age is not None else ""
    return f"last seen here{what}{age}"


def _killed_text(code: int | None) -> str:
    if code is not None and code < 0:
        import signal as _signal

        try:
            name = _signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if name == "SIGKILL":
            return "was killed (SIGKILL; likely the OOM killer)"
        return f"was killed by {name}"
    return "ended without a Python traceback" + (f" (exit code {code})" if code is not None else "")


def _exception_user_site(st: RankState, b: Builder) -> Frame | None:
    """The rank's own traceback's innermost user line (for a DataLoader worker error: the loop)."""
    frames = [Frame.of(f) for f in (st.exception or {}).get("frames") or []]
    for fr in reversed([f for f in frames if f is not None]):
        if b.user is not None and b.user.is_user(fr.file):
            return fr
    return None


_LOCAL_RANK_DEFAULT_RE = re.compile(r"""add_argument\(\s*['"]--local[_-]rank['"][^)]*default\s*=\s*0\b""")
_WORLD_SIZE_RE = re.compile(r"\bworld_size\s*=\s*(\d+)\b")


def root_clash(states: dict[int, RankState], rs) -> tuple[str, str] | None:
    """(message part, hint) when ranks in the same rooted collective passed different roots (src/dst)."""
    roots = {r: states[r].op_root for r in rs if states[r].op is not None and states[r].op_root is not None}
    if len({v for _, v in roots.values()}) < 2:
        return None
    arg = next(iter(roots.values()))[0]
    op = next(states[r].op for r in roots)
    text = "the ranks passed different roots: " + ", ".join(f"rank {r} {k}={v}" for r, (k, v) in sorted(roots.items()))
    hint = (f"every rank must pass the same {arg} to {op_text(op)}: a root that depends on the rank ({arg}=rank, "
            f"{arg}=local_rank) makes each rank wait for a different root; use a constant such as {arg}=0 "
            "(static rule DDP108)")
    return text, hint


def world_size_hint(fr: Frame | None, src: Sources, nranks: int) -> str | None:
    """A constant ``world_size=N`` on the failing line that is not the number of ranks launched."""
    lines = src.lines(fr.file) if fr is not None else None
    if not lines or not (0 < fr.line <= len(lines)):
        return None
    m = _WORLD_SIZE_RE.search(lines[fr.line - 1])
    if m and int(m.group(1)) != nranks:
        return (f"the script asks for world_size={m.group(1)}, but {count(nranks, 'rank')} {'was' if nranks == 1 else 'were'} launched: take the world "
                "size from the environment (WORLD_SIZE, set by torchrun) or from dist.get_world_size()")
    return None


def _hint(code: str, st: RankState, src: Sources):
    """(hint text, static rule code) linking a runtime failure to the static rule that explains it."""
    ex0 = st.exception or {}
    if (ex0.get("extra") or {}).get("kind") == "invalid-device-ordinal" or \
            "invalid device ordinal" in (ex0.get("message") or ""):
        return with_rule(("a device index past this node's GPUs: index devices with the rank on this node, "
                          "int(os.environ['LOCAL_RANK']), not the global rank (dist.get_rank() / RANK), "
                          "which goes past torch.cuda.device_count() from the second node on", None),
                         [st.script, st.site.file if st.site else None], "DDP003")
    script_lines = src.lines(st.script) if st.script else None
    if code == "DDP905" and script_lines and _LOCAL_RANK_DEFAULT_RE.search("\n".join(script_lines)):
        return ("--local_rank defaults to 0 on every rank: torchrun sets LOCAL_RANK in the environment and does "
                "not pass --local_rank, so every rank picks cuda:0; use int(os.environ['LOCAL_RANK']) (static rule "
                "DDP001)", "DDP001")
    if code == "DDP905":
        return ("each rank needs its own GPU: call torch.cuda.set_device(local_rank) right after "
                "init_process_group (static rule DDP001)", "DDP001")
    ex = st.exception or {}
    msg = ex.get("message") or ""
    if st.argparse and re.search(r"--local[_-]rank", str(st.argparse.get("message") or "")):
        return ("torchrun does not pass --local_rank (only the old torch.distributed.launch did): read the "
                "local rank from the environment, int(os.environ['LOCAL_RANK'])", None)
    if _UNUSED_RE.search(msg):
        return with_rule(("every parameter of a DDP model must get a gradient in every iteration: use them all in "
                          "forward() and in the loss, or pass find_unused_parameters=True to DistributedDataParallel",
                          None), [st.script, st.site.file if st.site else None], "DDP209")
    if re.search(r"No backend type associated with device type cpu", msg):
        return ("an NCCL process group only takes CUDA tensors: move the tensor to the rank's GPU first, or "
                "use a gloo group for CPU tensors (static rule DDP105)", "DDP105")
    text = (ex.get("text") or "") + " " + (st.op or "")
    if ex.get("type") == "IndexError" and re.search(r"all_gather_object|gather_object|all_gather\b|gather\b", text):
        return ("the output list must have one slot per rank (dist.get_world_size()) (static rule DDP101)", "DDP101")
    if "NCCL" in (ex.get("message") or "") and re.search(r"invalid usage|Duplicate GPU|same GPU", ex.get("message") or "", re.I):
        return ("two ranks use the same GPU: call torch.cuda.set_device(local_rank) (static rule DDP001)", "DDP001")
    return None
