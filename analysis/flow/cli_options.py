"""argparse options of a module: its ``add_argument`` calls, their option strings and destinations,
and ``configured_option``: an option whose value is configuration (the same on every rank),
whatever its name; ``sub_config_field``: a field of a nested configuration object that nothing here
fills at run time. ``rank_kinds`` re-exports the readers."""
from __future__ import annotations

import ast

from ..semantic import get_arg
from .world_tests import _int_const

LOCAL_RANK_OPTIONS = frozenset({"--local_rank", "--local-rank"})


def argparse_options(sem) -> list[ast.Call]:
    """The module's ``<parser or group>.add_argument(...)`` calls."""
    return [c for c in sem.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "add_argument"]


def option_strings(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def option_dest(call: ast.Call, sem=None) -> str | None:
    """``dest=`` (a literal, or with ``sem`` what ``torch_api.constant_of`` finds it is), else the
    first long option (dashes as underscores), else the first name."""
    d = get_arg(call, None, "dest")
    if d is not None and sem is not None and not isinstance(d, ast.Constant):
        from ..torch_api import constant_of
        d = constant_of(sem, d)
        if d is None:
            return None
    if isinstance(d, ast.Constant) and isinstance(d.value, str):
        return d.value
    opts = option_strings(call)
    longs = [o for o in opts if o.startswith("--")]
    pick = longs[0] if longs else (opts[0] if opts else None)
    return pick.lstrip("-").replace("-", "_") if pick else None


def configured_option(sem, e: ast.Attribute) -> bool:
    """``args.<attr>`` is the destination of this module's argparse options only, each with a
    numeric default other than 0 and -1 (``--rank`` with ``default=4``: a dimension, a count), and
    nothing else stores to ``<x>.<attr>``: configuration, the same on every rank, whatever its
    name. A process rank's default is the run without a launcher (0) or "not distributed" (-1)."""
    opts = [c for c in argparse_options(sem) if option_dest(c, sem) == e.attr]
    if not opts or any(LOCAL_RANK_OPTIONS & set(option_strings(c)) for c in opts):
        return False
    for c in opts:
        d = get_arg(c, None, "default")
        if d is None or _int_const(d) in (None, 0, -1):
            return False
    return not any(isinstance(t, ast.Attribute) and t.attr == e.attr
                   for st in sem.by_type.get(ast.Assign, ()) for t in st.targets)


def sub_config_field(sem, e: ast.Attribute) -> bool:
    """``cfg.lora.rank`` / ``self.model_config.lora.rank``: a field of an object read through another
    object's field (not ``args.rank``, ``self.rank`` or ``self.args.rank``, where the holder is the
    run's own arguments or state), and nothing in this module stores a computed value into
    ``<x>.<attr>`` or passes one as ``<attr>=``: a value of the nested configuration (a LoRA
    adapter's rank, a tensor-parallel degree), not a rank this module derives, whatever its name."""
    owner = e.value
    if not isinstance(owner, ast.Attribute) or (isinstance(owner.value, ast.Name) and owner.value.id == "self"):
        return False
    for st in sem.by_type.get(ast.Assign, ()):
        if not isinstance(st.value, ast.Constant) and any(  # also an element of a tuple target
                isinstance(t, ast.Attribute) and t.attr == e.attr for tg in st.targets for t in ast.walk(tg)):
            return False
    return not any(k.arg == e.attr and not isinstance(k.value, ast.Constant)
                   for c in sem.calls for k in c.keywords)
