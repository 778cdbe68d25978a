"""What a module's *code* names: the identifiers and the string constants its statements use.

Rules that used to ask "does the file's text contain this word?" ask here instead, so that a comment,
a docstring or a message string never decides a finding (issue 25, point 2). The text gate
(``Rule.requires_text``) stays a necessary-condition prefilter in front of the rules; nothing here
may silence a rule because a word merely appears in the file.

- ``code_words(sem)``: every identifier of the program: names, attributes, definitions, parameters,
  keyword names, imported names (each dotted part).
- ``code_strings(sem)``: the string constants that are values of the program (keys, arguments,
  comparisons, f-string parts), not docstrings, bare string statements or the messages of
  ``print``/logging/warnings/exceptions.
- ``mentions(sem, *words)``: whether any of ``words`` is an identifier of the code.
- ``names_string(sem, pred)``: whether a code string satisfies ``pred``.
"""
from __future__ import annotations

import ast

from ..semantic import subtree

# calls whose string arguments are messages for a human, not values the program acts on
_MESSAGE_CALLS = frozenset({"print", "info", "warning", "warn", "debug", "error", "exception", "critical",
                            "log", "write", "echo", "secho", "print_rank_0", "rank0_print", "logger"})


def _index(sem) -> tuple[frozenset, tuple]:
    got = getattr(sem, "_code_mentions", None)
    if got is not None:
        return got
    words: set[str] = set()
    strings: list[str] = []
    skip: set[int] = set()  # ids of Constant nodes that are docstrings or messages
    add = words.add
    # (``walk_order``: a call is seen before the strings it marks)
    for node in sem.walk_order():
        t = node.__class__
        if t is ast.Name:
            add(node.id)
        elif t is ast.Attribute:
            add(node.attr)
        elif t is ast.Constant:
            if isinstance(node.value, str) and id(node) not in skip:
                strings.append(node.value)
        elif t is ast.Expr:
            v = node.value
            if v.__class__ is ast.Constant or v.__class__ is ast.JoinedStr:
                _skip_strings(v, skip)
        elif t is ast.Call:
            f = node.func
            name = f.id if f.__class__ is ast.Name else f.attr if f.__class__ is ast.Attribute else None
            if name in _MESSAGE_CALLS or (name and (name.endswith("Error") or name.endswith("Exception")
                                                    or name.endswith("Warning"))):
                for a in node.args:
                    _skip_strings(a, skip)
            for k in node.keywords:
                if k.arg:
                    add(k.arg)
        elif t is ast.Raise or t is ast.Assert:
            _skip_strings(node.exc if t is ast.Raise else node.msg, skip)
        elif t is ast.FunctionDef or t is ast.AsyncFunctionDef or t is ast.ClassDef:
            add(node.name)
        elif t is ast.arg:
            add(node.arg)
        elif t is ast.alias:
            for part in node.name.split("."):
                add(part)
            if node.asname:
                add(node.asname)
        elif t is ast.ImportFrom and node.module:
            for part in node.module.split("."):
                add(part)
        elif t is ast.keyword and node.arg:
            add(node.arg)
        elif t is ast.Global or t is ast.Nonlocal:
            words.update(node.names)
    got = (frozenset(words), tuple(strings))
    try:
        sem._code_mentions = got
    except AttributeError:  # a Semantic with __slots__ (none today): recompute next time
        pass
    return got


def _skip_strings(expr, skip: set[int]) -> None:
    """Mark the string constants of a message expression (a literal, an f-string, a ``%``/``+``
    of them, a ``.format`` call) as not code."""
    if expr is None:
        return
    for n in subtree(expr):
        if n.__class__ is ast.Constant and isinstance(n.value, str):
            skip.add(id(n))
        elif n.__class__ is ast.Call and not (n.func.__class__ is ast.Attribute and n.func.attr == "format"):
            # the arguments of an inner call are values (``Error(f"{path}")`` keeps ``path``'s constants
            # out of reach anyway, since a Name is not a string)
            continue


def code_words(sem) -> frozenset:
    return _index(sem)[0]


def code_strings(sem) -> tuple:
    return _index(sem)[1]


# ``text``: the module's text when the caller has it. It is only a necessary condition (a word
# absent from the text is absent from the code) that spares the walk; it never decides a "yes".

def mentions(sem, *words: str, text: str | None = None) -> bool:
    """Whether the code (not a comment or a string) names any of ``words`` as an identifier."""
    if text is not None and not any(w in text for w in words):
        return False
    got = _index(sem)[0]
    return any(w in got for w in words)


def names_string(sem, pred, text: str | None = None, needle: str | None = None) -> bool:
    """Whether one of the code's string values satisfies ``pred`` (``needle``: a substring every
    such string contains, to test ``text`` first)."""
    if text is not None and needle is not None and needle not in text:
        return False
    return any(pred(s) for s in _index(sem)[1])


def mentions_anywhere(sem, *words: str, text: str | None = None) -> bool:
    """Whether a word is an identifier, or a part of a string value, of the code (``"cuda:0"``
    counts for ``cuda``); comments, docstrings and messages do not."""
    if text is not None and not any(w in text for w in words):
        return False
    ws, ss = _index(sem)
    if any(w in ws for w in words):
        return True
    return any(w in s for s in ss for w in words)


def word_counts(sem):
    """How many times each identifier occurs in the code (names, attributes, definitions, imported
    names), as a ``Counter``; comments and strings do not count."""
    got = getattr(sem, "_code_word_counts", None)
    if got is not None:
        return got
    from collections import Counter

    got = Counter()
    for n in sem.walk_order():
        t = n.__class__
        if t is ast.Name:
            got[n.id] += 1
        elif t is ast.Attribute:
            got[n.attr] += 1
        elif t is ast.FunctionDef or t is ast.AsyncFunctionDef or t is ast.ClassDef:
            got[n.name] += 1
        elif t is ast.alias:
            got[n.asname or n.name.split(".")[-1]] += 1
            if n.asname:
                got[n.name.split(".")[-1]] += 1
    sem._code_word_counts = got
    return got
