"""Values of the uniformity analysis: uniform (``U``), rank-varying (``Value("V", src)``) or
unknown (``X``), where the variance comes from (``Src``: a category, words for messages, the line),
and ``join``. The evaluator that computes them is ``uniformity.Evaluator``."""
from __future__ import annotations

import ast

RANK, DATA, CLOCK, RNG = "rank", "data", "clock", "rng"
GROUP = "<group>"  # ``Src.group`` of a process group's rank


class Src:
    """Where rank variance comes from: a category, words for messages, and the node."""

    __slots__ = ("cat", "desc", "line", "path", "via", "call", "call_path", "group", "fields")

    def __init__(self, cat: str, desc: str, line: int, path: str | None, via: str = "", call=None,
                 call_path: str | None = None, group: str | None = None, fields: frozenset | None = None):
        self.cat, self.desc, self.line, self.path = cat, desc, line, path
        # an object of a class we do not see, built with this value as an argument
        # (``Accelerator(project_dir=stamp)``): only the attributes named like the keywords that
        # received it may hold it (``fields``); the others, and its methods, are unknown. None: a
        # plain value. Through a call: "passed to `f` as `x` at line 31", and that call (for related locations)
        self.via, self.call, self.call_path = via, call, call_path
        # a rank within part of the world, not the global one: the mesh dimension's name
        # (``mesh["dp"].get_local_rank()``), or ``GROUP`` for ``get_rank(group)``
        self.group = group
        self.fields = fields

    def step(self, words: str, call=None, call_path=None) -> "Src":
        """The same source, one step further along the cause chain."""
        via = f"{self.via}, {words}" if self.via else words
        if call is None:
            call, call_path = self.call, self.call_path
        return Src(self.cat, self.desc, self.line, self.path, via, call, call_path, self.group, self.fields)

    def built(self, fields) -> "Src":
        """The same source, held by an opaque object (``fields``: see ``__init__``; None: read
        back out of it as a plain value again)."""
        return Src(self.cat, self.desc, self.line, self.path, self.via, self.call, self.call_path, self.group,
                   None if fields is None else frozenset(fields))

    def text(self, here: str | None = None) -> str:
        where = f"line {self.line}" if (self.path is None or self.path == here) else f"{_short(self.path)}:{self.line}"
        if self.via:
            return f"{self.desc}, {where}, {self.via}"
        return f"{self.desc}, {where}"


def _short(path: str) -> str:
    import os

    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 else os.path.basename(path)


class Value:
    __slots__ = ("kind", "src")

    def __init__(self, kind: str, src: Src | None = None):
        self.kind, self.src = kind, src

    @property
    def varying(self) -> bool:
        return self.kind == "V"

    @property
    def uniform(self) -> bool:
        return self.kind == "U"

    def __repr__(self) -> str:  # pragma: no cover - debugging
        return f"Value({self.kind}, {self.src.desc if self.src else ''})"


U = Value("U")
X = Value("X")


class Cuts:
    """What one check (one hub) knows of the cuts its questions met, shared by every evaluator,
    shape analysis and summary of the check, so that an answer made of a cut anywhere below it
    (in another module's evaluator, in a summary of the callers, in a generator's elements) is not
    memoised for good (``keep``): ``n`` counts the cuts, ``busy`` the questions in flight (none: a
    question is at the top), ``scratch`` / ``tops`` the answers made of a cut, by (memo, key)."""

    __slots__ = ("n", "busy", "scratch", "tops", "active")

    def __init__(self):
        self.n = self.busy = 0
        self.scratch: dict = {}
        self.tops: dict = {}
        self.active: set = set()  # the summaries (``summary``) in flight, by (memo, key)


def keep(cs: Cuts, sk, key, v, cuts: int, memo: dict):
    """Memoise the answer ``v`` of a question (``cuts``: ``cs.n`` when it began; ``sk``: its key in
    ``cs``, ``(id(memo), key)``). An answer that met no cut below it (a cycle of bindings or of
    calls read as unknown, a depth cap) is the same whichever question reached it first: ``memo``.
    One that did depends on where its question started (``b`` in ``a = b + 1; b = a + rank`` asked
    first leaves ``a`` unknown, ``a`` asked first finds it rank-varying): kept only while the
    question at the top runs (``scratch``, so chains of bindings stay linear; reading it counts as
    a cut), and the top one's own answer for later questions at the top (``tops``), so no answer
    depends on the order of questions. Called once the question is no longer in flight."""
    if cs.n == cuts:
        memo[key] = v
    elif cs.busy:
        cs.scratch[sk] = v
    else:
        cs.tops[sk] = v
    if not cs.busy and cs.scratch:
        cs.scratch.clear()
    return v


_NONE = object()


def summary(cs: Cuts, memo: dict, key, compute, cut):
    """A memoised summary that may ask itself again (a cycle of calls, of generators): ``memo[key]``
    computed by ``compute()``; a question met again while it is in flight reads as ``cut`` (and
    counts as a cut: what it makes is kept as ``keep`` says)."""
    got = memo.get(key, _NONE)
    if got is not _NONE:
        return got
    sk = (id(memo), key)
    if not cs.busy and sk in cs.tops:
        return cs.tops[sk]
    got = cs.scratch.get(sk, _NONE)
    if got is not _NONE or sk in cs.active:
        cs.n += 1
        return cut if got is _NONE else got
    cs.active.add(sk)
    cs.busy += 1
    cuts = cs.n
    try:
        v = compute()
    finally:
        cs.active.discard(sk)
        cs.busy -= 1
    return keep(cs, sk, key, v, cuts, memo)


def join(vals) -> Value:
    out = U
    for v in vals:
        if v.kind == "V":
            return v
        if v.kind == "X":
            out = X
    return out


def _V(view, cat: str, desc: str, node: ast.AST, group: str | None = None) -> Value:
    return Value("V", Src(cat, desc, getattr(node, "lineno", 0), view.path, group=group))


def built(ev, call: ast.Call, name: str | None, v: Value, d: int) -> Value:
    """``v``, the value of ``call``, an instance of a class we do not see (``name`` capitalised:
    ``Accelerator(..., project_dir=stamp)``) built with a rank-varying argument, marked as such
    (``Src.fields``: the keywords that received a rank-varying value), so that only the attribute
    stored from that argument is rank-varying, not every attribute and method of the object.
    Unchanged for anything else, and for an argument that may be the object's contents (this
    rank's data passed by position, ``**extra``)."""
    if not (v.varying and name and name[:1].isupper()) or v.src.cat == RANK:
        return v  # (an object built with the rank: ``Evaluator._attribute`` keeps only its ``device``)
    for a in call.args:
        av = ev.value(a, d)
        if av.varying and (isinstance(a, ast.Starred) or av.src.cat == DATA):
            return v
    fields = set()
    for k in call.keywords:
        if ev.value(k.value, d).varying:
            if k.arg is None:
                return v
            fields.add(k.arg)
    return Value("V", v.src.built(fields))
