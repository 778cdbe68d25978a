"""Where a runtime finding goes when the source says how a rank got out of step (for DDP902 and
DDP904): the loop exit, ``continue`` or early ``return`` a rank went through, read from the ranks'
stacks and the user's source (runtime/exits.py, runtime/skips.py). Every function takes the
findings module's ``Builder`` (its states, sources, user-code test and related-location maker).
"""
from __future__ import annotations

import dataclasses
import os

from .exits import LoopExits, loops_around
from .skips import bypass
from .states import Frame, RankState, op_text, rank_list


def where(fr: Frame | None, primary: Frame | None) -> str:
    """``at line 12`` in the primary location's file, ``at helpers.py:12`` in another one."""
    if fr is None:
        return "at an unknown line"
    if primary is not None and fr.file == primary.file:
        return f"at line {fr.line}"
    return f"at {os.path.basename(fr.file)}:{fr.line}"


def went_past(b, ordered) -> tuple[tuple, list[int], list] | None:
    """Two groups of ranks in different collectives: when the source says how one group went past
    the other's collective (an early return, a ``continue``, a loop exit, an ``if`` it did not
    enter) and not the other way round, ((op, site) of the collective gone past, the ranks that went
    past it, the bypass lines)."""
    if len(ordered) != 2 or b.user is None:
        return None
    chains = [_user_chain(b, b.states[rs[0]], site) for (_, site), rs in ordered]
    found = []
    for i in (0, 1):
        bys = bypass(chains[i], chains[1 - i], b.src.lines)
        if bys:
            found.append((i, bys))
    if len(found) != 1:
        return None
    i, bys = found[0]
    # an ``if`` around the collective's own line is in plain sight (and the rank-condition hint names
    # it): only the ways past it elsewhere (in a caller, an early return, a continue) are news
    inner = chains[i][0]
    bys = [x for x in bys if not (x.kind == "if" and x.file == inner.file and x.function == inner.function)]
    return (ordered[i][0], ordered[1 - i][1], bys) if bys else None


def bypass_texts(b, bys, past_rs, op, site: Frame) -> tuple[str, list]:
    """The message part and related locations for the lines through which ``past_rs`` went past
    ``op`` at ``site``."""
    who = rank_list(past_rs)
    words = {"return": "returned early from {fn}()", "continue": "skipped the rest of a loop iteration",
             "break": "left the loop", "if": "did not enter the if"}
    rels, texts = [], []
    for x in bys:
        fr = Frame(x.file, x.line, x.function)
        what = words.get(x.kind, "left").format(fn=x.function)
        cond = f"`{x.condition}` was false" if x.kind == "if" else f"under `{x.condition}`"
        rels.append(b.rel(fr, f"{who} went past {op_text(op)} here: it {what} ({cond})", past_rs))
        texts.append(f"{what} {where(fr, site)} ({cond})")
    if len(texts) == 1:
        return f"{who} skipped {op_text(op)}: it {texts[0]}", rels
    return f"{who} skipped {op_text(op)}: it went past it at one of " + "; ".join(texts), rels


def left_loop(b, r: int, s: RankState, texts: list[str], rel_list: list) -> tuple[str, Frame] | None:
    """A rank that finished while its peers wait inside a loop left that loop sooner: through the
    loop's one conditional exit, by skipping the collective with a conditional ``continue``, or (a
    ``for`` loop without either) by running out of items. The loops are those around the peers'
    wait in every frame of their stack (a collective in a helper called from the training loop),
    innermost first. Returns the message and the line to place the finding on, or None when the
    source does not say."""
    peers = [w for rr, w in sorted(b.waiting.items()) if rr != r and w.op_site is not None]
    if len({w.op_site for w in peers}) != 1:
        return None
    loops = _loops_of_wait(b, peers[0])
    if not loops:
        return None
    who = rank_list([r])
    # the rank finished the script normally: it did not leave through a `raise` or an exit call
    loops = [(fr, dataclasses.replace(lp, exits=[e for e in lp.exits if e.kind not in ("raise", "exit")]))
             for fr, lp in loops]
    # the innermost loop with a conditional exit or skip; else the innermost one that can run a
    # different number of times on each rank
    chosen = next(((fr, lp) for fr, lp in loops if lp.exits), None)
    if chosen is None:
        chosen = next(((fr, lp) for fr, lp in loops if lp.loop_kind == "for" and not lp.uniform), None)
        if chosen is None:
            return None
    fr, found = chosen

    def waits(at: Frame) -> str:  # the peers, as seen from the line the finding goes on
        return "; ".join(b.waiting_related({r}, at)[1]) or "; ".join(texts)

    if len(found.exits) == 1:
        ex = found.exits[0]
        why = f"`{ex.condition}` held on {who} only"
        at = Frame(fr.file, ex.line, fr.function)
        if ex.kind == "continue":
            return (f"{who} skipped the rest of an iteration of the {found.loop_kind} loop at line {found.loop_line} "
                    f"through this `continue` ({why}), so it made fewer collective calls than the others and "
                    f"finished the script (status {s.exit_code}) while {waits(at)}: every rank must make the same "
                    f"collective calls, so decide to skip a step on all ranks together (all_reduce the flag)",
                    at)
        word = {"exit": "exit call"}.get(ex.kind, f"`{ex.kind}`")
        if found.loop_kind == "for" and not found.endless and not found.uniform:
            why += f", or {who}'s loop ran out of items sooner"
        return (f"{who} left the {found.loop_kind} loop at line {found.loop_line} early and finished the script "
                f"(status {s.exit_code}) while {waits(at)}: this {word} is the loop's only early exit, so {why}",
                at)
    if not found.exits:
        at = Frame(fr.file, found.loop_line, fr.function)
        return (f"{who}'s loop here ran out of items before the others' (it has no early exit): {who} finished "
                f"the script (status {s.exit_code}) while {waits(at)}; every rank needs the same number of "
                f"iterations (a DistributedSampler with drop_last, or DDP's join() for uneven inputs)",
                at)
    for ex in found.exits:
        what = "skips the others' collective" if ex.kind == "continue" else "an early exit of the loop the others wait in"
        rel_list.append(b.rel(Frame(fr.file, ex.line, fr.function), f"{what} (under `{ex.condition}`)", [r]))
    return None


def finished_past(b, r: int, s: RankState, rel_list: list) -> tuple[str, Frame] | None:
    """A rank that finished the script went past the collective its peer waits in: when the source
    names the one way past it, an early return (or loop exit) of its own, the finding goes there.
    An ``if`` it did not enter (the collective is in code only some ranks run) becomes a related
    location, and the finding goes on the collective itself (its peers wait there)."""
    peers = [(rr, w) for rr, w in sorted(b.waiting.items()) if rr != r and w.op_site is not None]
    if len({w.op_site for _, w in peers}) != 1 or b.user is None or not s.script:
        return None
    w = peers[0][1]
    chain = _user_chain(b, w)
    # the finished rank is past every line of the script
    bys = bypass(chain, [Frame(s.script, 10**9, "<module>")], b.src.lines)
    if not bys or len(bys) != 1:
        return None
    x = bys[0]
    at = Frame(x.file, x.line, x.function)
    who = rank_list([r])
    if x.kind == "if":
        # the collective runs only under this condition: the finding goes on the collective the
        # others wait in, the guard the rank did not enter is related (static rule DDP104)
        waiters = rank_list([rr for rr, _ in peers])
        rel_list.append(b.rel(at, f"{who} did not enter this if (`{x.condition}` was false), so it never called "
                                  f"the {op_text(w.op)} that {waiters} waits in", [r]))
        around = (f" around the call of {w.op_site.function}()" if (at.file, at.function) !=
                  (w.op_site.file, w.op_site.function) and w.op_site.function != "<module>" else "")
        return (f"{op_text(w.op)} runs only on the ranks where `{x.condition}` holds: {waiters} "
                f"{'waits' if len(peers) == 1 else 'wait'} in it here, and {who} finished the script "
                f"(status {s.exit_code}) without calling it: it did not enter the if {where(at, w.op_site)}{around}",
                w.op_site)
    waits = "; ".join(b.waiting_related({r}, at)[1])
    how = {"return": f"returned early from {x.function}() here (under `{x.condition}`)",
           "continue": f"skipped the rest of a loop iteration here (under `{x.condition}`)",
           "break": f"left the loop here (under `{x.condition}`)"}.get(x.kind)
    if how is None:
        return None
    return (f"{who} went past {op_text(w.op)}: it {how}, then finished the script (status {s.exit_code}) "
            f"while {waits}", at)


def _user_chain(b, w: RankState, site: Frame | None = None) -> list[Frame]:
    """A rank's user frames, innermost first, starting at its collective's line (``site``, by
    default the collective it waits in); only that line when the stack is elsewhere (an async op)."""
    site = site or w.op_site
    chain = [f for f in w.stack if b.user is not None and b.user.is_user(f.file)]
    if not chain or (chain[0].file, chain[0].line) != (site.file, site.line):
        chain = [site]
    return chain


def _loops_of_wait(b, w: RankState) -> list[tuple[Frame, LoopExits]]:
    """(frame, loop) for every loop around a waiting rank's position, innermost first, through the
    user frames of its stack (its collective's line first)."""
    out = []
    for fr in _user_chain(b, w):
        lines = b.src.lines(fr.file)
        if lines is None:
            break
        out.extend((fr, lp) for lp in loops_around("\n".join(lines), fr.line))
    return out


def subset_new_group(b) -> tuple[str, list, str | None] | None:
    """A rank waits in ``new_group()`` because an earlier ``new_group()`` ran on some ranks only.
    ``new_group`` is a collective of the whole default group, paired by call order: a rank that made
    one more (under ``if rank == 0:``) pairs its next one with its peers' earlier one, and then waits
    in its last one for a partner that never comes. From the ranks' logged ``new_group`` calls
    (states.groups_made): the call made more often on some ranks, the ``if`` around it that the
    others did not enter (the static control flow of skips.bypass, else the rank condition around
    it). Returns (text, related locations, the condition), or None."""
    states = b.states
    if not any(s.op == "new_group" for s in states.values()):
        return None
    ranks = {r: s for r, s in states.items() if s.started}
    if len(ranks) < 2:
        return None
    counts: dict[tuple, dict[int, int]] = {}
    order: dict[tuple, tuple[int, int]] = {}  # site -> (its first index on a rank that made it, rank)
    for r, s in sorted(ranks.items()):
        for i, fr in enumerate(s.groups_made):
            key = (fr.file, fr.line)
            counts.setdefault(key, {}).setdefault(r, 0)
            counts[key][r] += 1
            order.setdefault(key, (i, r))
    uneven = [k for k, c in counts.items() if len({c.get(r, 0) for r in ranks}) > 1]
    if not uneven:
        return None
    key = min(uneven, key=lambda k: order[k])
    c = counts[key]
    most = max(c.values())
    callers = sorted(r for r in ranks if c.get(r, 0) == most)
    skipped = sorted(r for r in ranks if c.get(r, 0) < most)
    site = next(fr for fr in ranks[callers[0]].groups_made if (fr.file, fr.line) == key)
    # the call of a skipping rank that paired with it: its first new_group() elsewhere
    q = ranks[skipped[0]]
    paired = next((fr for fr in q.groups_made if (fr.file, fr.line) != key), None)
    if paired is None and q.op == "new_group":
        paired = q.op_site
    cond, guard_line = None, None
    if paired is not None:
        bys = bypass([site], [paired], b.src.lines) or []
        ifs = [x for x in bys if x.kind == "if"]
        if ifs:
            cond, guard_line = ifs[-1].condition, Frame(ifs[-1].file, ifs[-1].line, ifs[-1].function)
    if cond is None:
        cond = b.src.rank_guard(site)
    who, others = rank_list(callers), rank_list(skipped)
    rels = [b.rel(site, f"only {who} called new_group() here" + (f" (under `{cond}`)" if cond else ""), callers)]
    if guard_line is not None:
        rels.append(b.rel(guard_line, f"`{cond}` was false on {others}, so it never called the new_group() below",
                          skipped))
    waiters = [r for r, s in ranks.items() if s.op == "new_group"]
    text = (f"new_group() is a collective of every rank, paired by call order (also on the ranks left out of "
            f"the new group): {who} also called new_group() {where(site, ranks[waiters[0]].op_site)}"
            + (f" under `{cond}`, which {others} did not enter" if cond else f", which {others} never called")
            + (f", so {others}'s new_group() {where(paired, ranks[waiters[0]].op_site)} paired with that one"
               if paired is not None else "")
            + f", and {rank_list(waiters)} {'waits' if len(waiters) == 1 else 'wait'} in new_group() for a "
            f"partner that never comes")
    return text, rels, cond
