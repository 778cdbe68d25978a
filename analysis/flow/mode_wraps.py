"""A name wrapped only on the distributed path: ``model = Net()`` then ``if distributed: model =
DDP(model)``. Where the name is read after that ``if``, its reaching bindings are the plain module
and the wrapper; the plain one reaches the read only on a run that fails the test, which is a run
with no other rank (no collective can hang there). So on every run where a collective matters the
name holds the wrapper (``Summaries.wrapper_ctor`` asks).

- ``wrapped_when_distributed(hub, view, evs, got, at)``: every binding of ``evs`` that holds no
  wrapper (``got``) reaches ``at`` only through the skipped body of an ``if``
  that only a distributed run passes (``_positive``), whose body rebinds the name to
  a wrapper of ``wraps``.
- ``self_wrapper(hub, view, attr, vals, got)``: the same for a ``self`` attribute, whose plain
  bindings must sit in the ``else`` of such an ``if`` (``if ddp: self.model = DDP(model)`` /
  ``else: self.model = model``).
"""
from __future__ import annotations

import ast

from ..semantic import parent
from .unconditional import dist_mode_test, flag_mode_test, passed_only_distributed
from .uniformity import RANK_ENV
from .vocab import _int_vals, env_key
from .world import WORLD_SIZE_ENV


def _positive(hub, view, test) -> bool:
    """Only a distributed run passes ``test`` (``unconditional.passed_only_distributed``): a test on
    the distributed mode or on the launcher's world size, or one that a launcher's rank variable
    passes only when it is set (``_launched``)."""
    return passed_only_distributed(test, lambda t: dist_mode_test(t) or flag_mode_test(t) or any(
        isinstance(n, ast.Constant) and n.value in WORLD_SIZE_ENV for n in ast.walk(t)) or _launched(view, t))


def _launched(view, test) -> bool:
    """``int(os.environ.get("RANK", -1)) != -1``: the launcher's rank variable compared unequal
    (or greater) to the default its read falls back to, so the test passes only where a launcher
    set it, in a launched run."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.NotEq, ast.Gt))):
        return False
    left = test.left
    if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "int" and len(left.args) == 1:
        left = left.args[0]
    if not (isinstance(left, ast.Call) and env_key(view, left) in RANK_ENV and len(left.args) == 2):
        return False
    default, other = _int_vals(left.args[1]), _int_vals(test.comparators[0])
    return default is not None and other is not None and default == other and len(default) == 1


def _mode_if(hub, view, st):
    """The ``if`` whose body holds ``st`` directly (not under a further branch) when only a
    distributed run passes its test; else None."""
    p = parent(st)
    if not (isinstance(p, ast.If) and st in p.body):
        return None
    test = p.test
    if _positive(hub, view, test):
        return p
    # a flag bound once to such a test (``multi = int(os.environ.get("WORLD_SIZE", 1)) > 1``),
    # or a ``self`` attribute every binding of which is one
    if isinstance(test, ast.Name):
        v = view.sem.single_value(test.id, view.sem.scope_of(test))
        vals = [] if v is None or v is test else [v]
    elif isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self" \
            and hasattr(hub, "self_attr_bindings"):
        vals = hub.self_attr_bindings(view, test)
    else:
        vals = []
    if vals and all(isinstance(v, ast.expr) and _positive(hub, view, v) for v in vals):
        return p
    return None


def _ancestors(node) -> list:
    out = []
    p = parent(node)
    while p is not None:
        out.append(p)
        p = parent(p)
    return out


def _passes_through(plain, guard, at) -> bool:
    """Every straight path from ``plain`` to ``at`` evaluates ``guard``: ``guard`` comes after
    ``plain`` and before ``at``, in a block that encloses both (the same function)."""
    if not (plain.end_lineno < guard.lineno and guard.end_lineno < at.lineno):
        return False
    holder = parent(guard)
    if holder is None or not (holder in _ancestors(plain) and holder in _ancestors(at)):
        return False
    for a in _ancestors(plain):  # no loop between them: a second iteration reaches ``at`` again
        if a is holder:
            return True
        if isinstance(a, (ast.For, ast.AsyncFor, ast.While)) or isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                               ast.Lambda, ast.ClassDef)):
            return False
    return False


def _killed(plain, wrap) -> bool:
    """``plain`` comes before ``wrap`` in the same block: the wrap rebinds it on every path."""
    holder = parent(plain)
    if holder is None or holder is not parent(wrap):
        return False
    for field in ("body", "orelse", "finalbody"):
        block = getattr(holder, field, None)
        if isinstance(block, list) and plain in block and wrap in block:
            return block.index(plain) < block.index(wrap)
    return False


def wrapped_when_distributed(hub, view, evs: list, got: list, at):
    """See the module docstring. ``evs``: the reaching bindings; ``got``: the wrapper each one
    holds, or None. The answer is the last wrapper, or None."""
    plain = [e for e, g in zip(evs, got) if not g]
    wraps = [e for e, g in zip(evs, got) if g]
    if not plain or not wraps or not all(isinstance(e, ast.Assign) for e in plain):
        return None
    guards = [_mode_if(hub, view, w) for w in wraps]
    if any(g is None for g in guards):
        return None
    if not all(any(_passes_through(p, g, at) or _killed(p, w) for g, w in zip(guards, wraps)) for p in plain):
        return None
    return next(g for g in reversed(got) if g)


def self_wrapper(hub, view, attr: str, vals: list, got: list):
    """The wrapper that ``self.<attr>`` holds, from what the class binds to it (``vals``, as
    ``hub.class_attr_bindings`` gives them; ``got``: the wrapper each holds, or None): every binding
    holds one, or the plain ones sit in the ``else`` of an ``if`` that only a distributed run passes
    and whose body binds a wrapper (``if ddp: self.model = DDP(model)`` / ``else: self.model =
    model``; bindings of an attribute come in no order, so only that ``else`` excludes the plain
    one). A store into the object (``self.model.require_backward_grad_sync = last``) binds nothing.
    The answer is the first wrapper, or None."""
    pairs = [(v, g) for v, g in zip(vals, got) if not _stores_into(v, attr)]
    wraps = [v for v, g in pairs if g]
    plain = [v for v, g in pairs if not g]
    if not wraps:
        return None
    if plain:
        guards = [_mode_if(hub, view, parent(w)) for w in wraps]
        if any(g is None for g in guards):
            return None
        for v in plain:
            st = parent(v)
            if not any(parent(st) is g and st in g.orelse for g in guards):
                return None
    return next(g for v, g in pairs if g)


def _stores_into(v, attr: str) -> bool:
    """``v`` (a statement among the bindings of ``self.<attr>``) stores into the object the attribute
    holds (``self.<attr>.x = ...``, ``self.<attr>[k] = ...``), binding no target ``self.<attr>``."""
    if not isinstance(v, ast.Assign):
        return False
    todo = list(v.targets)
    while todo:
        t = todo.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            todo.extend(t.elts)
        elif isinstance(t, ast.Starred):
            todo.append(t.value)
        elif isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name) and t.value.id == "self":
            return False
    return True
