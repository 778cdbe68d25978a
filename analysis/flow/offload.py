"""Is a state dict gathered to the CPU? FSDP and the DCP state-dict API can hand a state dict back
on the CPU: ``m.state_dict()`` under ``FSDP.state_dict_type(m, ..., FullStateDictConfig(
offload_to_cpu=True))`` (or ``ShardedStateDictConfig`` / ``LocalStateDictConfig`` with
``offload_to_cpu=True``), and ``get_model_state_dict(m, options=StateDictOptions(cpu_offload=True))``
(also ``get_optimizer_state_dict`` and ``get_state_dict``, which returns both). Every tensor of such
a state dict is a CPU tensor, so a file saved from it comes back on the CPU.

The configuration may reach the call through a name, ``self.<attr>``, a helper's return or another
module (``hidden.options_flag`` with ``origins``); its flag must be the constant ``True`` on every
origin. The ``with`` must be around the ``state_dict()`` call in its own function, and name the
module it is called on (or one that holds it: ``self.model`` for ``self.model.module``)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from .hidden import options_flag

# the DCP state-dict getters (``torch.distributed.checkpoint.state_dict``) and their options
_GETTERS = frozenset(("get_model_state_dict", "get_optimizer_state_dict", "get_state_dict"))
_DCP = "torch.distributed.checkpoint."
# FSDP1's state-dict configurations: ``offload_to_cpu`` is the first field of each
_CONFIGS = ("FullStateDictConfig", "ShardedStateDictConfig", "LocalStateDictConfig")


def offloaded_state(hub, view, call: ast.Call) -> bool:
    """``call`` returns a state dict (or, for ``get_state_dict``, a pair of them) whose tensors are
    all on the CPU."""
    qn = view.sem.call_qualname(call) or ""
    if qn.startswith(_DCP) and qn.rsplit(".", 1)[-1] in _GETTERS:
        return options_flag(view, get_arg(call, None, "options"), call, "cpu_offload", hub=hub) is True
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr == "state_dict" and not call.args and not call.keywords):
        return False
    p = parent(call)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.ClassDef, ast.Lambda)):
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for it in p.items:
                got = _config_of(view, it.context_expr)
                if got is not None and _holds(got[0], f.value):
                    return any(options_flag(view, got[1], it.context_expr, "offload_to_cpu", hub=hub, cls=c, place=0)
                               is True for c in _CONFIGS)
        p = parent(p)
    return False


def _config_of(view, e):
    """(module, configuration) of ``FSDP.state_dict_type(module, type, config)``; None otherwise."""
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "state_dict_type"):
        return None
    qn = view.sem.call_qualname(e) or ""
    if not qn.startswith("torch.distributed.fsdp."):
        return None
    module, cfg = get_arg(e, 0, "module"), get_arg(e, 2, "state_dict_config")
    if module is None or cfg is None:
        return None
    return module, cfg


def _holds(module, receiver) -> bool:
    """``receiver`` is ``module`` or a part of it (``self.model.module`` of ``self.model``)."""
    want = ast.dump(module)
    r = receiver
    while isinstance(r, ast.Attribute):
        if ast.dump(r) == want:
            return True
        r = r.value
    return ast.dump(r) == want
